//! Classification of transport errors (§3): reqwest's errors become a
//! [`PollError`] with a category, a kind and a short one-line message. The
//! HTTP status rules live in the pure core (`crate::core::classify`) and are
//! re-exported here; together they give this table.
//!
//! | outcome | category | kind |
//! | --- | --- | --- |
//! | 2xx | success | — |
//! | 5xx, 408 | transient | `http` |
//! | 429 | transient (a rate signal) | `rate_limited` |
//! | 401, 403, 404, 410, other 4xx | permanent | `http` |
//! | 1xx, 3xx (redirects are not followed) | permanent | `http` |
//! | timeout | transient | `timeout` |
//! | DNS failure | transient | `dns` |
//! | connection refused / reset | transient | `connect` |
//! | TLS certificate or handshake failure | permanent | `tls` |
//! | invalid URL / request | permanent | `invalid_url` |

use crate::model::{ErrorCategory, ErrorKind, PollError};
use crate::poll::tls::FingerprintMismatch;
use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use std::error::Error as StdError;
use std::time::SystemTime;

pub use crate::core::classify::{RETRY_AFTER_CAP, classify_status, parse_retry_after, status_message};

/// The error a response with this status and these headers is, or `None`
/// for a 2xx: [`classify_status`] gives the category and kind, the message
/// is [`status_message`] (with the `Location` of a redirect), and a 429 or
/// 503 carries its `Retry-After` ([`parse_retry_after`] against `now`). The
/// body plays no part. Every status and every header value gives an answer.
pub fn response_error(status: u16, headers: &HeaderMap, now: SystemTime) -> Option<PollError> {
    let (category, kind) = classify_status(status)?;
    let mut message = status_message(status);
    if (300..400).contains(&status)
        && let Some(location) = headers.get(LOCATION).and_then(|v| v.to_str().ok())
    {
        message = one_line(&format!("{message}, Location: {location}"));
    }
    let retry_after = if matches!(status, 429 | 503) {
        headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, now))
    } else {
        None
    };
    Some(PollError {
        category,
        kind,
        message,
        status: Some(status),
        retry_after,
    })
}

/// Longest message taken from an underlying error, in characters.
const MAX_DETAIL_CHARS: usize = 160;

/// Classify a reqwest error by walking its source chain.
pub fn classify_transport(err: &reqwest::Error) -> PollError {
    use ErrorCategory::{Permanent, Transient};

    let host = err
        .url()
        .and_then(|u| u.host_str())
        .map(str::to_owned)
        .unwrap_or_default();
    let detail = innermost_message(err);

    for e in chain(err) {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return tls_error(tls);
        }
        if let Some(mismatch) = e.downcast_ref::<FingerprintMismatch>() {
            return PollError::new(Permanent, ErrorKind::Tls, mismatch.to_string());
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            match io.kind() {
                Io::ConnectionRefused => {
                    return PollError::new(Transient, ErrorKind::Connect, with_host("connection refused", &host));
                }
                Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe | Io::UnexpectedEof => {
                    return PollError::new(Transient, ErrorKind::Connect, with_host("connection reset", &host));
                }
                Io::TimedOut => {
                    return PollError::new(Transient, ErrorKind::Timeout, with_host("timed out", &host));
                }
                Io::NotConnected | Io::AddrNotAvailable | Io::NetworkUnreachable | Io::HostUnreachable => {
                    return PollError::new(
                        Transient,
                        ErrorKind::Connect,
                        format!("{}: {detail}", with_host("connect failed", &host)),
                    );
                }
                _ => {}
            }
        }
        // reqwest's own message names the URL, whose host may be anything.
        if e.downcast_ref::<reqwest::Error>().is_none() && looks_like_dns(&e.to_string()) {
            return PollError::new(
                Transient,
                ErrorKind::Dns,
                format!("{}: {detail}", with_host("DNS lookup failed", &host)),
            );
        }
    }

    if err.is_timeout() {
        PollError::new(Transient, ErrorKind::Timeout, with_host("timed out", &host))
    } else if err.is_builder() {
        PollError::new(Permanent, ErrorKind::InvalidUrl, format!("invalid request: {detail}"))
    } else if err.is_connect() {
        PollError::new(
            Transient,
            ErrorKind::Connect,
            format!("{}: {detail}", with_host("connect failed", &host)),
        )
    } else if err.is_body() || err.is_decode() {
        PollError::new(
            Transient,
            ErrorKind::Body,
            format!("reading the response failed: {detail}"),
        )
    } else if err.is_redirect() {
        PollError::new(Permanent, ErrorKind::Http, format!("redirect not followed: {detail}"))
    } else {
        // Typically the connection closed before a complete response.
        PollError::new(Transient, ErrorKind::Connect, format!("request failed: {detail}"))
    }
}

fn tls_error(err: &rustls::Error) -> PollError {
    if let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) = err
        && let Some(mismatch) = other.0.downcast_ref::<FingerprintMismatch>()
    {
        return PollError::new(ErrorCategory::Permanent, ErrorKind::Tls, mismatch.to_string());
    }
    let what = match err {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            "TLS certificate verification failed"
        }
        _ => "TLS handshake failed",
    };
    PollError::new(
        ErrorCategory::Permanent,
        ErrorKind::Tls,
        one_line(&format!(
            "{what}: {err} (set tls_fingerprint to pin a self-signed certificate)"
        )),
    )
}

/// Every error in the chain, looking through `io::Error` wrappers (whose
/// `source()` skips the wrapped error itself).
fn chain<'a>(err: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut out = Vec::new();
    let mut next = Some(err);
    while let Some(e) = next {
        if out.len() >= 32 {
            break;
        }
        out.push(e);
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            let inner: &(dyn StdError + 'static) = inner;
            next = Some(inner);
            continue;
        }
        next = e.source();
    }
    out
}

/// The message of the deepest error in the chain: usually the most specific.
fn innermost_message(err: &reqwest::Error) -> String {
    let deepest = chain(err).last().map(|e| e.to_string()).unwrap_or_default();
    one_line(&deepest)
}

fn looks_like_dns(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    [
        "dns error",
        "failed to lookup address",
        "name resolution",
        "could not resolve",
        "failed to resolve",
        "no such host",
    ]
    .iter()
    .any(|p| m.contains(p))
}

fn with_host(what: &str, host: &str) -> String {
    if host.is_empty() {
        what.to_owned()
    } else {
        format!("{what} ({host})")
    }
}

/// Collapse whitespace to one line and cap the length.
pub(crate) fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_DETAIL_CHARS + 3));
    for (i, word) in s.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.chars().count() > MAX_DETAIL_CHARS {
        out = out.chars().take(MAX_DETAIL_CHARS).collect();
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_collapses_and_caps() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        let long = "x".repeat(500);
        let short = one_line(&long);
        assert!(short.ends_with("..."));
        assert_eq!(short.chars().count(), MAX_DETAIL_CHARS + 3);
    }

    #[test]
    fn response_errors_from_status_and_headers() {
        use reqwest::header::HeaderValue;
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let mut h = HeaderMap::new();
        assert_eq!(response_error(204, &h, now), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        h.insert(LOCATION, HeaderValue::from_static("https://elsewhere.example/\tx"));
        for (status, wait) in [(429, Some(7)), (503, Some(7)), (500, None), (404, None)] {
            let e = response_error(status, &h, now).expect("an error");
            assert_eq!(e.status, Some(status));
            assert_eq!(Some((e.category, e.kind)), classify_status(status));
            assert_eq!(e.retry_after, wait.map(std::time::Duration::from_secs), "{status}");
        }
        let e = response_error(302, &h, now).expect("an error");
        assert_eq!(e.category, ErrorCategory::Permanent);
        assert!(
            e.message.ends_with("Location: https://elsewhere.example/ x"),
            "{}",
            e.message
        );
        // A Location header that is not text is left out, not an error.
        h.insert(LOCATION, HeaderValue::from_bytes(b"/\xff").expect("obs-text"));
        let e = response_error(301, &h, now).expect("an error");
        assert!(!e.message.contains("Location"), "{}", e.message);
    }

    #[test]
    fn dns_detection() {
        assert!(looks_like_dns("dns error: failed to lookup address information"));
        assert!(looks_like_dns("could not resolve host"));
        assert!(!looks_like_dns("connection refused"));
    }
}

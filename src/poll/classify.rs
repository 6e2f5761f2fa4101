//! Pure classification of poll outcomes (§3): HTTP statuses, `Retry-After`
//! values and transport errors become a [`PollError`] with a category, a kind
//! and a short one-line message. No I/O and no clock: the current time is
//! passed in where one is needed.
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
use std::error::Error as StdError;
use std::time::{Duration, SystemTime};

/// The longest wait a `Retry-After` header can ask for (§2).
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

/// Longest message taken from an underlying error, in characters.
const MAX_DETAIL_CHARS: usize = 160;

/// Category and kind of an HTTP status; `None` for 2xx (success).
pub fn classify_status(status: u16) -> Option<(ErrorCategory, ErrorKind)> {
    use ErrorCategory::{Permanent, Transient};
    match status {
        200..=299 => None,
        429 => Some((Transient, ErrorKind::RateLimited)),
        408 | 500..=599 => Some((Transient, ErrorKind::Http)),
        // 4xx, 1xx, 3xx (redirects are never followed) and anything outside
        // the standard ranges: retrying will not fix it.
        _ => Some((Permanent, ErrorKind::Http)),
    }
}

/// Short operator-facing message for a non-2xx status, e.g.
/// `HTTP 503 Service Unavailable`.
pub fn status_message(status: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut msg = if reason.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status} {reason}")
    };
    match status {
        401 | 403 => msg.push_str(" (check the instance credentials)"),
        300..=399 => msg.push_str(" (redirects are not followed; check the instance url)"),
        _ => {}
    }
    msg
}

/// Parse a `Retry-After` value: delay-seconds or an HTTP date. The result is
/// capped at [`RETRY_AFTER_CAP`]; a date in the past gives zero; anything
/// else gives `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: a delay in seconds. Too many digits for u64 is simply
        // "a very long time", which the cap turns into the maximum.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(RETRY_AFTER_CAP));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO).min(RETRY_AFTER_CAP))
}

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
    use ErrorCategory::{Permanent, Transient};

    #[test]
    fn success_statuses_are_not_errors() {
        for s in [200, 201, 204, 206, 299] {
            assert_eq!(classify_status(s), None, "status {s}");
        }
    }

    #[test]
    fn transient_statuses() {
        for s in [500, 502, 503, 504, 599, 408] {
            assert_eq!(classify_status(s), Some((Transient, ErrorKind::Http)), "status {s}");
        }
        assert_eq!(classify_status(429), Some((Transient, ErrorKind::RateLimited)));
    }

    #[test]
    fn permanent_statuses() {
        for s in [400, 401, 403, 404, 405, 410, 418, 422, 451, 499] {
            assert_eq!(classify_status(s), Some((Permanent, ErrorKind::Http)), "status {s}");
        }
        // Informational and redirects (never followed).
        for s in [100, 101, 300, 301, 302, 303, 304, 307, 308] {
            assert_eq!(classify_status(s), Some((Permanent, ErrorKind::Http)), "status {s}");
        }
        // Out of range: never success.
        assert_eq!(classify_status(0), Some((Permanent, ErrorKind::Http)));
        assert_eq!(classify_status(999), Some((Permanent, ErrorKind::Http)));
    }

    #[test]
    fn status_messages() {
        assert_eq!(status_message(503), "HTTP 503 Service Unavailable");
        assert_eq!(status_message(404), "HTTP 404 Not Found");
        assert!(status_message(401).contains("credentials"));
        assert!(status_message(403).contains("credentials"));
        assert!(!status_message(404).contains("credentials"));
        assert!(status_message(302).contains("redirect"));
        assert_eq!(status_message(599), "HTTP 599");
    }

    #[test]
    fn retry_after_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("60", now), Some(Duration::from_secs(60)));
        assert_eq!(parse_retry_after("61", now), Some(RETRY_AFTER_CAP));
        assert_eq!(parse_retry_after("3600", now), Some(RETRY_AFTER_CAP));
        assert_eq!(parse_retry_after("99999999999999999999999", now), Some(RETRY_AFTER_CAP));
    }

    #[test]
    fn retry_after_http_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        // Capped at 60 s.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 09:49:37 GMT", now),
            Some(RETRY_AFTER_CAP)
        );
        // In the past: retry now.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_garbage() {
        let now = SystemTime::now();
        for v in ["", "  ", "soon", "-5", "1.5", "7s", "Sun, 32 Nov 1994 08:49:37 GMT"] {
            assert_eq!(parse_retry_after(v, now), None, "value {v:?}");
        }
    }

    #[test]
    fn one_line_collapses_and_caps() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        let long = "x".repeat(500);
        let short = one_line(&long);
        assert!(short.ends_with("..."));
        assert_eq!(short.chars().count(), MAX_DETAIL_CHARS + 3);
    }

    #[test]
    fn dns_detection() {
        assert!(looks_like_dns("dns error: failed to lookup address information"));
        assert!(looks_like_dns("could not resolve host"));
        assert!(!looks_like_dns("connection refused"));
    }
}

//! Pure classification of HTTP outcomes (§3): which statuses are transient,
//! permanent or a rate signal, their short messages, and `Retry-After`. No
//! I/O and no clock: the current time is passed in where one is needed.
//! Transport errors (timeouts, DNS, TLS) are classified next to the HTTP
//! client in `crate::poll::classify`.

use crate::model::{ErrorCategory, ErrorKind};
use std::time::{Duration, SystemTime};

/// The longest wait a `Retry-After` header can ask for (§2).
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

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
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_742_580_300);
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
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_742_580_300);
        for v in ["", "  ", "soon", "-5", "1.5", "7s", "Sun, 32 Nov 1994 08:49:37 GMT"] {
            assert_eq!(parse_retry_after(v, now), None, "value {v:?}");
        }
    }
}

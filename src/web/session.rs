//! Browser sessions: who is logged in, the per-session CSRF token, flash
//! messages, and the checks every state-changing browser request passes
//! (CSRF token plus an Origin / Sec-Fetch-Site check).

use axum::http::{HeaderMap, Method, header};
use rand::TryRng;
use tower_sessions::Session;

pub const USER_KEY: &str = "user";
pub const CSRF_KEY: &str = "csrf";
pub const FLASH_KEY: &str = "flash";
pub const CSRF_FIELD: &str = "_csrf";
pub const CSRF_HEADER: &str = "x-csrf-token";

pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    // The OS RNG failing is not recoverable in any useful way; an all-zero
    // token would be guessable, so refuse to continue.
    if crate::model::random::SysRng.try_fill_bytes(&mut b).is_err() {
        panic!("the operating system's random number generator failed");
    }
    hex::encode(b)
}

pub async fn user(session: &Session) -> Option<String> {
    session.get::<String>(USER_KEY).await.ok().flatten()
}

/// The session's CSRF token, created on first use.
pub async fn csrf_token(session: &Session) -> String {
    if let Ok(Some(t)) = session.get::<String>(CSRF_KEY).await {
        return t;
    }
    let t = random_hex(32);
    let _ = session.insert(CSRF_KEY, &t).await;
    t
}

pub async fn set_flash(session: &Session, message: impl Into<String>) {
    let _ = session.insert(FLASH_KEY, message.into()).await;
}

pub async fn take_flash(session: &Session) -> Option<String> {
    session.remove::<String>(FLASH_KEY).await.ok().flatten()
}

/// Constant-time comparison, so the token cannot be guessed byte by byte.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Is this request from our own pages? Browsers send `Sec-Fetch-Site`
/// (modern) and `Origin` (on POST); either, when present, must say
/// same-origin. `Sec-Fetch-Site` is set by the browser alone and decides
/// when present: under `Referrer-Policy: no-referrer` browsers send
/// `Origin: null` even for a form of our own. Requests without both (old
/// browsers, curl) still need the CSRF token.
pub fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return match site {
            "same-origin" | "none" => Ok(()),
            _ => Err("cross-site request refused"),
        };
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        let authority = origin.split_once("://").map(|(_, a)| a).unwrap_or("");
        if origin == "null" || authority != host {
            return Err("cross-origin request refused");
        }
    }
    Ok(())
}

pub fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn origin_checks() {
        assert!(same_origin(&headers(&[("host", "a:7655")])).is_ok());
        assert!(same_origin(&headers(&[("host", "a:7655"), ("origin", "http://a:7655")])).is_ok());
        assert!(same_origin(&headers(&[("host", "a:7655"), ("origin", "http://evil:7655")])).is_err());
        assert!(same_origin(&headers(&[("host", "a:7655"), ("origin", "null")])).is_err());
        assert!(same_origin(&headers(&[("host", "a"), ("sec-fetch-site", "cross-site")])).is_err());
        assert!(same_origin(&headers(&[("host", "a"), ("sec-fetch-site", "same-site")])).is_err());
        assert!(same_origin(&headers(&[("host", "a"), ("sec-fetch-site", "same-origin")])).is_ok());
        // no-referrer makes a browser send Origin: null with its own forms.
        assert!(
            same_origin(&headers(&[
                ("host", "a"),
                ("sec-fetch-site", "same-origin"),
                ("origin", "null")
            ]))
            .is_ok()
        );
        assert!(
            same_origin(&headers(&[
                ("host", "a"),
                ("sec-fetch-site", "cross-site"),
                ("origin", "http://a")
            ]))
            .is_err()
        );
    }

    #[test]
    fn token_comparison() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "abcd"));
        assert_eq!(random_hex(16).len(), 32);
        assert_ne!(random_hex(16), random_hex(16));
    }
}

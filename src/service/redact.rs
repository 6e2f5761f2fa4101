//! Credentials are write-only: what the API and pages show of them, and
//! which stored ones an edit may keep.
//!
//! - A password in a URL's userinfo (`http://user:PASS@host/`) is shown as
//!   `(hidden)`, like every other secret; an edit that sends the URL back
//!   with `(hidden)` keeps the stored password.
//! - A stored secret is only ever sent to the origin (scheme, host and port)
//!   it was given for: an edit that moves an instance or the sink elsewhere
//!   without giving the secrets again drops them, so pressing Test after
//!   changing the host cannot ship them to a server of someone else's.

use crate::model::{Auth, FieldError, HIDDEN};
use reqwest::Url;

/// The URL with the password of its userinfo, if any, replaced by
/// `(hidden)`. Anything that does not parse is returned as it is (it holds
/// no userinfo the poller would send).
pub fn mask_url(url: &str) -> String {
    // No userinfo without an `@`: nothing to parse (the list of 100,000
    // instances masks every URL it searches).
    if !url.contains('@') {
        return url.to_string();
    }
    let Ok(parsed) = Url::parse(url) else {
        return url.to_string();
    };
    let Some(pw) = parsed.password() else {
        return url.to_string();
    };
    let serialized = parsed.as_str();
    let user = parsed.username();
    let needle = format!("{user}:{pw}@");
    match serialized.find(&needle) {
        Some(at) => format!(
            "{}{user}:{HIDDEN}@{}",
            &serialized[..at],
            &serialized[at + needle.len()..]
        ),
        None => serialized.to_string(),
    }
}

/// Scheme, host and port: where a credential goes.
fn origin(url: &str) -> Option<(String, String, Option<u16>)> {
    let u = Url::parse(url).ok()?;
    Some((
        u.scheme().to_ascii_lowercase(),
        u.host_str()?.to_ascii_lowercase(),
        u.port_or_known_default(),
    ))
}

/// Whether `a` and `b` send to the same place. URLs that do not parse are
/// never the same origin.
pub fn same_origin(a: &str, b: &str) -> bool {
    matches!((origin(a), origin(b)), (Some(x), Some(y)) if x == y)
}

fn hides_password(u: &Url) -> bool {
    matches!(u.password(), Some(p) if p == HIDDEN || p.eq_ignore_ascii_case("%28hidden%29"))
}

/// `new` as it should be stored: a `(hidden)` password is the stored one
/// when the origin is unchanged. `field` names the URL in the error.
pub fn restore_url_password(new: &str, stored: &str, field: &str) -> Result<String, FieldError> {
    let Ok(mut parsed) = Url::parse(new) else {
        return Ok(new.to_string());
    };
    if !hides_password(&parsed) {
        return Ok(new.to_string());
    }
    let kept = Url::parse(stored).ok().and_then(|s| s.password().map(str::to_string));
    match kept {
        Some(pw) if same_origin(new, stored) => {
            let _ = parsed.set_password(Some(&pw));
            Ok(parsed.to_string())
        }
        _ => Err(FieldError::new(
            field,
            mask_url(new),
            "the password in the URL is hidden and cannot be kept for a different host; give it again",
        )),
    }
}

/// The field that holds the secret of an authentication kind.
pub fn secret_field(auth: &Auth) -> Option<&'static str> {
    match auth {
        Auth::None {} => None,
        Auth::Bearer { .. } => Some("auth.token"),
        Auth::Header { .. } => Some("auth.value"),
        Auth::Basic { .. } => Some("auth.password"),
        Auth::PveToken { .. } => Some("auth.secret"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_password_is_masked_and_nothing_else_changes() {
        assert_eq!(mask_url("http://u:s3cret@h:8006/api"), "http://u:(hidden)@h:8006/api");
        assert_eq!(mask_url("https://h/x?y=1"), "https://h/x?y=1");
        assert_eq!(mask_url("http://only-user@h/"), "http://only-user@h/");
        assert_eq!(mask_url("not a url"), "not a url");
        assert!(!mask_url("http://u:p%40ss@h/").contains("p%40ss"));
    }

    #[test]
    fn a_hidden_password_is_kept_only_for_the_same_origin() {
        let stored = "http://u:s3cret@h:8006/api";
        assert_eq!(
            restore_url_password("http://u:(hidden)@h:8006/other", stored, "url").expect("kept"),
            "http://u:s3cret@h:8006/other"
        );
        assert_eq!(
            restore_url_password("http://u:%28hidden%29@h:8006/", stored, "url").expect("kept"),
            "http://u:s3cret@h:8006/"
        );
        let err = restore_url_password("http://u:(hidden)@evil:8006/", stored, "url").unwrap_err();
        assert_eq!(err.field, "url");
        assert!(!err.value.contains("s3cret"));
        assert!(
            restore_url_password("http://u:(hidden)@h:8007/", stored, "url").is_err(),
            "port"
        );
        assert!(
            restore_url_password("https://u:(hidden)@h:8006/", stored, "url").is_err(),
            "scheme"
        );
        assert_eq!(
            restore_url_password("http://u:new@evil/", stored, "url").expect("a new password"),
            "http://u:new@evil/"
        );
    }

    #[test]
    fn origins() {
        assert!(same_origin("http://H:80/a", "http://h/b"));
        assert!(!same_origin("http://h/", "https://h/"));
        assert!(!same_origin("http://h/", "http://h:81/"));
        assert!(!same_origin("garbage", "garbage"));
    }
}

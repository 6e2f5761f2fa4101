//! Shared vocabulary: settings, instances, types and endpoint groups, timestamps
//! and poll outcomes. Plain data with serde and validation; no I/O. One file
//! an idea; everything is re-exported here, so `crate::model::X` names it.
//!
//! The same serde representation serves the config file (§7), the settings API
//! (§6) and the stored settings, so a value written in one place reads the same
//! in the others.

mod base_url;
mod instance;
mod name;
mod outcome;
pub mod random;
mod record;
mod secret;
mod settings;
mod time;
mod types;
mod values;

pub use base_url::*;
pub use instance::*;
pub use name::*;
pub use outcome::*;
pub use record::*;
pub use secret::*;
pub use settings::*;
pub use time::*;
pub use types::*;
pub use values::*;

use serde::Serialize;
use std::fmt;
use std::sync::Arc;

/// (instance, endpoint group): the unit of scheduling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    pub instance: Arc<str>,
    pub group: Arc<str>,
}

impl TaskKey {
    pub fn new(instance: &str, group: &str) -> Self {
        TaskKey {
            instance: Arc::from(instance),
            group: Arc::from(group),
        }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.instance, self.group)
    }
}

/// A validation failure that names the offending field (dotted path, e.g.
/// `adaptive.min_interval` or `instances[2].url`) and value.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[error("{field} = {value}: {message}")]
pub struct FieldError {
    pub field: String,
    pub value: String,
    pub message: String,
}

impl FieldError {
    /// The one place a field error is made, so the one place its value is
    /// masked: a secret field (a credential, a header value, a passphrase)
    /// shows as `(hidden)`, and the userinfo (user and password) of any URL
    /// in the value or the message as `(hidden)` too, parsable or not. A
    /// 422, a log line or an event built from it never carries a secret.
    pub fn new(field: impl Into<String>, value: impl fmt::Display, message: impl Into<String>) -> Self {
        let field = field.into();
        let value = if is_secret_field(&field) {
            HIDDEN.to_string()
        } else {
            mask_userinfo(&value.to_string())
        };
        FieldError {
            field,
            value,
            message: mask_userinfo(&message.into()),
        }
    }
}

/// Whether the dotted `field` holds a secret that is never echoed: the
/// secret of an instance's `auth`, a (sink) header, a passphrase or a
/// password.
pub fn is_secret_field(field: &str) -> bool {
    let last = field.rsplit('.').next().unwrap_or(field);
    let auth_secret = field.ends_with("auth.token")
        || field.ends_with("auth.value")
        || field.ends_with("auth.password")
        || field.ends_with("auth.secret");
    auth_secret
        || matches!(last, "passphrase" | "admin_password" | "password")
        || field.starts_with("headers.")
        || field.contains(".headers.")
}

/// `text` with the userinfo of every URL in it (`scheme://user:pass@`)
/// replaced by `(hidden)`. Textual, so it also masks a URL that does not
/// parse (`http://u:pw@h:99999/`, a port out of range), which is exactly
/// the one a validation error is about.
pub fn mask_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(i) if i > 0 => {
                out.push_str(HIDDEN);
                out.push_str(&authority[i..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod field_error_tests {
    use super::*;

    #[test]
    fn a_field_error_never_carries_userinfo_or_a_secret() {
        let e = FieldError::new("url", "http://u:PW@h:99999/x", "not a valid URL: invalid port number");
        assert_eq!(e.value, "http://(hidden)@h:99999/x");
        assert!(!e.to_string().contains("PW") && !e.to_string().contains("u:"), "{e}");
        let e = FieldError::new("timeout", "5", "bad value \"https://me:pw@h/\" here");
        assert_eq!(e.message, "bad value \"https://(hidden)@h/\" here");
        for field in [
            "auth.token",
            "instances[1].auth.secret",
            "headers.Authorization",
            "sink.headers.X",
            "passphrase",
        ] {
            assert_eq!(FieldError::new(field, "s3cret", "m").value, HIDDEN, "{field}");
        }
        assert_eq!(FieldError::new("auth.username", "bob", "m").value, "bob");
        assert_eq!(
            mask_userinfo("https://h/x?y=1 and ftp://a@b"),
            "https://h/x?y=1 and ftp://(hidden)@b"
        );
        assert_eq!(mask_userinfo("no url here: a@b"), "no url here: a@b");
    }
}

//! A credential field of a stored record: sealed (the form written), or
//! plaintext as an older release wrote it (read only, to be sealed).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::Secret;

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum StoredSecret {
    /// `crate::secrets` sealed form: base64 of version, nonce, ciphertext.
    Sealed(String),
    /// Read from a format-1 record; written only into format 1 (a backup).
    Plain(Secret),
}

impl StoredSecret {
    /// A field read in format 1 holds the plaintext itself.
    pub(crate) fn mark_plain(&mut self) {
        if let StoredSecret::Sealed(text) = self {
            *self = StoredSecret::Plain(Secret::new(std::mem::take(text)));
        }
    }
}

impl fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredSecret::Sealed(s) => write!(f, "Sealed({s})"),
            StoredSecret::Plain(s) => write!(f, "Plain({s:?})"),
        }
    }
}

impl Serialize for StoredSecret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StoredSecret::Sealed(text) => s.serialize_str(text),
            StoredSecret::Plain(secret) => s.serialize_str(secret.expose()),
        }
    }
}

/// Read as sealed; the format-1 upgrade marks the fields plaintext.
impl<'de> Deserialize<'de> for StoredSecret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(StoredSecret::Sealed)
    }
}

/// `url` without the password of its userinfo, if it has one.
pub(crate) fn without_password(url: &str) -> Option<String> {
    let mut parsed = url::Url::parse(url).ok()?;
    parsed.password()?;
    parsed.set_password(None).ok()?;
    Some(parsed.to_string())
}

//! A credential held in memory: a password, token or header value that
//! Pollster sends to an instance.
//!
//! It reads and writes as a plain string (the config file, the stored
//! instance, the API body that sets it), but its `Debug` never shows the
//! value, so a `{:?}` of an instance in a log line or a panic message
//! cannot leak it. The one way to the text is [`Secret::expose`], named so
//! that every use stands out in review.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The credential itself, to send it or to compare it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The length is not shown either: it narrows a guess.
        f.write_str(if self.0.is_empty() {
            "Secret(empty)"
        } else {
            "Secret(***)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value_and_serde_reads_and_writes_it_plainly() {
        let s = Secret::from("hunter2-token");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(format!("{:?}", Secret::default()), "Secret(empty)");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"hunter2-token\"");
        let back: Secret = serde_json::from_str("\"hunter2-token\"").unwrap();
        assert_eq!(back, s);
        assert_eq!(back.expose(), "hunter2-token");
    }
}

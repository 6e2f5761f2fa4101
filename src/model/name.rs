//! The name of an instance: the key it is stored, scheduled, linked and
//! labelled under. A value of this type has passed [`valid_name`], so it is
//! safe in a URL path, a metric label and a store key without escaping.

use serde::{Deserialize, Serialize, Serializer};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use super::{NAME_RULE, valid_name};

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct InstanceName(String);

/// A string that is not a valid instance name; shows the rule it broke.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{NAME_RULE}")]
pub struct InvalidName(pub String);

impl InstanceName {
    pub fn parse(s: &str) -> Result<Self, InvalidName> {
        Self::try_from(s.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for InstanceName {
    type Error = InvalidName;

    fn try_from(s: String) -> Result<Self, InvalidName> {
        if valid_name(&s) {
            Ok(InstanceName(s))
        } else {
            Err(InvalidName(s))
        }
    }
}

impl Serialize for InstanceName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl Deref for InstanceName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for InstanceName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for InstanceName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<str> for InstanceName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for InstanceName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<InstanceName> for String {
    fn from(n: InstanceName) -> String {
        n.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_valid_names_parse_and_serde_keeps_the_rule() {
        assert_eq!(InstanceName::parse("pve-1.lab").expect("valid").as_str(), "pve-1.lab");
        for bad in ["", "-x", "a b", "a/b", "bad\0name", &"x".repeat(65)] {
            let e = InstanceName::parse(bad).expect_err(bad);
            assert_eq!(e.0, bad);
            assert_eq!(e.to_string(), NAME_RULE);
            assert!(serde_json::from_value::<InstanceName>(serde_json::json!(bad)).is_err());
        }
        let n: InstanceName = serde_json::from_str("\"web\"").expect("valid");
        assert_eq!(serde_json::to_string(&n).expect("ser"), "\"web\"");
        assert_eq!(n, "web");
    }
}

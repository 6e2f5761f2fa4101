//! JSON pointers (RFC 6901), parsed once when a rule is checked.

use serde_json::Value;
use std::fmt;

/// A parsed pointer: `""` is the whole document, `/a/0/b~1c` is the key
/// `a`, index (or key) `0`, key `b/c`.
#[derive(Clone, PartialEq, Eq)]
pub struct Pointer {
    text: Box<str>,
    tokens: Box<[Box<str>]>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("a JSON pointer starts with / (or is empty for the whole document)")]
    NoSlash,
    #[error("~ must be followed by 0 (for ~) or 1 (for /)")]
    BadEscape,
}

impl Pointer {
    pub fn parse(text: &str) -> Result<Pointer, PointerError> {
        let tokens = if text.is_empty() {
            Vec::new()
        } else {
            let rest = text.strip_prefix('/').ok_or(PointerError::NoSlash)?;
            rest.split('/').map(unescape).collect::<Result<Vec<_>, _>>()?
        };
        Ok(Pointer {
            text: text.into(),
            tokens: tokens.into(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value it points at, if there is one.
    pub fn resolve<'v>(&self, mut doc: &'v Value) -> Option<&'v Value> {
        for token in self.tokens.iter() {
            doc = match doc {
                Value::Object(map) => map.get(&**token)?,
                Value::Array(items) => items.get(index(token)?)?,
                _ => return None,
            };
        }
        Some(doc)
    }
}

/// An array index as RFC 6901 writes it: `0` or digits without a leading 0.
fn index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

fn unescape(token: &str) -> Result<Box<str>, PointerError> {
    if !token.contains('~') {
        return Ok(token.into());
    }
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(PointerError::BadEscape),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out.into())
}

impl fmt::Debug for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pointer({:?})", self.text)
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn resolves_keys_indexes_and_escapes() {
        let doc = json!({"data": [{"id": "qemu/100", "a/b": 1, "m~n": 2}], "": {"x": 3}});
        let p = |t: &str| Pointer::parse(t).expect(t);
        assert_eq!(p("").resolve(&doc), Some(&doc));
        assert_eq!(p("/data/0/id").resolve(&doc), Some(&json!("qemu/100")));
        assert_eq!(p("/data/0/a~1b").resolve(&doc), Some(&json!(1)));
        assert_eq!(p("/data/0/m~0n").resolve(&doc), Some(&json!(2)));
        assert_eq!(p("//x").resolve(&doc), Some(&json!(3)));
        assert_eq!(p("/data/1").resolve(&doc), None);
        assert_eq!(p("/data/01").resolve(&doc), None, "no leading zeros");
        assert_eq!(p("/data/-").resolve(&doc), None);
        assert_eq!(p("/data/0/id/x").resolve(&doc), None, "into a string");
    }

    #[test]
    fn bad_pointers_are_refused() {
        assert_eq!(Pointer::parse("data"), Err(PointerError::NoSlash));
        assert_eq!(Pointer::parse("/a~2"), Err(PointerError::BadEscape));
        assert_eq!(Pointer::parse("/a~"), Err(PointerError::BadEscape));
    }

    proptest! {
        /// Any key, escaped as RFC 6901 says, finds its value again.
        #[test]
        fn an_escaped_key_resolves_to_its_value(key in ".{0,12}", n in any::<i64>()) {
            let doc = json!({ "outer": { key.clone(): n } });
            let text = format!("/outer/{}", key.replace('~', "~0").replace('/', "~1"));
            let p = Pointer::parse(&text).expect("escaped pointer parses");
            prop_assert_eq!(p.resolve(&doc), Some(&json!(n)));
            prop_assert_eq!(p.resolve(&doc), doc.pointer(&text));
        }
    }
}

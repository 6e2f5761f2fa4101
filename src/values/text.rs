//! The two things every part of the rules shares, in a leaf of their own:
//! an instance's facts, and a JSON value written as label text.

use serde_json::Value;
use std::fmt::Write as _;

/// An instance's facts: name → text, learned from the groups that declare
/// `facts` (and the rows of their lookup tables, under names no fact can
/// have; see `lookup`).
pub type Facts = std::collections::BTreeMap<String, String>;

/// A JSON value as label text: a string as it is, anything else as its
/// JSON text (`100`, `0.5`, `true`).
pub fn push_text(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => out.push_str(s),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

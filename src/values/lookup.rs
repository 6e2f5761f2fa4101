//! Lookup tables: keyed rows a group learns from its body (`lookups`), so
//! a rule of any group can label a sample with a field of another body —
//! a device's name and model by its serial, a network's name by its id.
//!
//! A table is written `lookups = { device = { each = "", key = "/serial",
//! fields = { name = "/name", model = "/model" } } }`: one row per element
//! of `each`, keyed by the text at `key`, each field the text at its
//! pointer. A label reads a field as `@lookup.device[/serial].name`, the
//! key being a pointer into the element (or `@key`, `@item`,
//! `@item.FIELD`, `@fact.NAME`).
//!
//! The rows are kept with the instance's facts, under names no fact can
//! have (`device[Q2KN-5X8M-A1B2].name`), beside a marker (`device[]`)
//! that says the table was learned: a label whose table is not learned yet
//! waits for it, as for a fact; one whose key is not in a learned table
//! is missing (the rule's default). All of it is pure.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use super::pointer::Pointer;
use super::text::{Facts, push_text};

/// A lookup table as written (`[groups.lookups.NAME]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// A pointer to the array or object whose elements are the rows.
    #[serde(default)]
    pub each: String,
    /// A pointer inside each element to the row's key.
    pub key: String,
    /// Field name → a pointer inside the element to its text.
    pub fields: BTreeMap<String, String>,
}

/// A lookup that failed its check: the key inside it and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {message}")]
pub struct LookupError {
    /// `each`, `key`, `fields.NAME`, or empty for the table's name.
    pub key: String,
    pub value: String,
    pub message: String,
}

fn error(key: impl Into<String>, value: impl Into<String>, message: impl Into<String>) -> LookupError {
    LookupError {
        key: key.into(),
        value: value.into(),
        message: message.into(),
    }
}

impl Lookup {
    /// Checks the table's name, pointers and field names.
    pub fn check(&self, name: &str) -> Result<(), LookupError> {
        if !super::valid_label_name(name) {
            return Err(error("", name, "a lookup table's name is [a-zA-Z_][a-zA-Z0-9_]*"));
        }
        Pointer::parse(&self.each).map_err(|e| error("each", &self.each, e.to_string()))?;
        Pointer::parse(&self.key).map_err(|e| error("key", &self.key, e.to_string()))?;
        if self.fields.is_empty() {
            return Err(error("fields", "{}", "names no field, so the table would hold nothing"));
        }
        for (field, pointer) in &self.fields {
            let key = format!("fields.{field}");
            if !super::valid_label_name(field) {
                return Err(error(key, field, "a field name is [a-zA-Z_][a-zA-Z0-9_]*"));
            }
            Pointer::parse(pointer).map_err(|e| error(key, pointer, e.to_string()))?;
        }
        Ok(())
    }
}

/// The name under which row `key`'s `field` of `table` is kept.
pub fn row_fact(table: &str, key: &str, field: &str) -> String {
    format!("{table}[{key}].{field}")
}

/// The name of the marker that says `table` was learned.
pub fn marker(table: &str) -> String {
    format!("{table}[]")
}

/// Whether fact `name` is a row (or the marker) of `table`.
pub fn is_row_of(name: &str, table: &str) -> bool {
    name.strip_prefix(table).is_some_and(|rest| rest.starts_with('['))
}

/// The table a marker names (`device[]` → `device`), if `name` is one.
pub fn marker_table(name: &str) -> Option<&str> {
    name.strip_suffix("[]").filter(|t| super::valid_label_name(t))
}

fn scalar(v: Option<&Value>) -> Option<String> {
    match v {
        None | Some(Value::Null | Value::Array(_) | Value::Object(_)) => None,
        Some(v) => {
            let mut text = String::new();
            push_text(v, &mut text);
            Some(text)
        }
    }
}

/// What a body teaches its instance: each fact (`name → pointer`) whose
/// pointer names a scalar, and every row of each lookup table with its
/// marker. A table whose `each` is not an array or object is not learned;
/// an element without a key gives no row, and a field that is not a
/// scalar is left out of its row. With two elements of one key, the
/// first is kept.
pub fn learn(doc: &Value, facts: &BTreeMap<String, String>, lookups: &BTreeMap<String, Lookup>) -> Facts {
    let mut out = Facts::new();
    for (name, pointer) in facts {
        let Ok(p) = Pointer::parse(pointer) else { continue };
        if let Some(text) = scalar(p.resolve(doc)) {
            out.insert(name.clone(), text);
        }
    }
    for (table, lookup) in lookups {
        let (Ok(each), Ok(key)) = (Pointer::parse(&lookup.each), Pointer::parse(&lookup.key)) else {
            continue;
        };
        let fields: Vec<(&String, Pointer)> = lookup
            .fields
            .iter()
            .filter_map(|(f, p)| Some((f, Pointer::parse(p).ok()?)))
            .collect();
        let elements: Vec<&Value> = match each.resolve(doc) {
            Some(Value::Array(a)) => a.iter().collect(),
            Some(Value::Object(m)) => m.values().collect(),
            _ => continue,
        };
        let mut rows = 0usize;
        let mut seen = std::collections::BTreeSet::new();
        for element in elements {
            let Some(k) = scalar(key.resolve(element)) else {
                continue;
            };
            if !seen.insert(k.clone()) {
                continue;
            }
            rows += 1;
            for (field, p) in &fields {
                if let Some(text) = scalar(p.resolve(element)) {
                    out.insert(row_fact(table, &k, field), text);
                }
            }
        }
        out.insert(marker(table), rows.to_string());
    }
    out
}

/// `known` with `learned` added: a table `learned` has (its marker)
/// replaces that table's rows as a whole, so a row gone from the body is
/// gone; plain facts are added or replaced one by one.
pub fn merge(known: &Facts, learned: Facts) -> Facts {
    let tables: Vec<&str> = learned.keys().filter_map(|k| marker_table(k)).collect();
    let mut merged: Facts = known
        .iter()
        .filter(|(k, _)| !tables.iter().any(|t| is_row_of(k, t)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    merged.extend(learned);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn devices() -> Lookup {
        Lookup {
            each: String::new(),
            key: "/serial".into(),
            fields: BTreeMap::from([("name".into(), "/name".into()), ("model".into(), "/model".into())]),
        }
    }

    #[test]
    fn a_body_gives_its_facts_and_the_rows_of_its_tables() {
        let doc = json!([
            {"serial": "A", "name": "hq-mx", "model": "MX68"},
            {"serial": "B", "model": "MS120"},
            {"name": "no serial"},
            {"serial": "A", "name": "second A"},
        ]);
        let facts = BTreeMap::from([("first".to_string(), "/0/name".to_string())]);
        let lookups = BTreeMap::from([("device".to_string(), devices())]);
        let got = learn(&doc, &facts, &lookups);
        let want: Facts = [
            ("first", "hq-mx"),
            ("device[]", "2"),
            ("device[A].name", "hq-mx"),
            ("device[A].model", "MX68"),
            ("device[B].model", "MS120"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
        let not_a_list = learn(
            &json!({"x": 1}),
            &BTreeMap::new(),
            &BTreeMap::from([(
                "t".to_string(),
                Lookup {
                    each: "/missing".into(),
                    ..devices()
                },
            )]),
        );
        assert!(not_a_list.is_empty(), "a table without elements is not learned");
    }

    #[test]
    fn a_learned_table_replaces_its_rows_and_keeps_the_rest() {
        let known: Facts = [
            ("org", "x"),
            ("device[]", "2"),
            ("device[A].name", "a"),
            ("device[B].name", "b"),
            ("devices_x", "kept"),
            ("network[]", "0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let learned: Facts = [("device[]", "1"), ("device[B].name", "b2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let merged = merge(&known, learned);
        let keys: Vec<&str> = merged.keys().map(String::as_str).collect();
        assert_eq!(keys, ["device[B].name", "device[]", "devices_x", "network[]", "org"]);
        assert_eq!(merged["device[B].name"], "b2");
    }

    #[test]
    fn broken_tables_are_refused_naming_the_key() {
        assert_eq!(devices().check("device"), Ok(()));
        assert_eq!(devices().check("a-b").unwrap_err().key, "");
        let bad = Lookup {
            key: "serial".into(),
            ..devices()
        };
        assert_eq!(bad.check("device").unwrap_err().key, "key");
        let bad = Lookup {
            each: "x".into(),
            ..devices()
        };
        assert_eq!(bad.check("device").unwrap_err().key, "each");
        let bad = Lookup {
            fields: BTreeMap::from([("a b".into(), "/x".into())]),
            ..devices()
        };
        assert_eq!(bad.check("device").unwrap_err().key, "fields.a b");
        let bad = Lookup {
            fields: BTreeMap::from([("name".into(), "name".into())]),
            ..devices()
        };
        assert_eq!(bad.check("device").unwrap_err().key, "fields.name");
        let bad = Lookup {
            fields: BTreeMap::new(),
            ..devices()
        };
        assert_eq!(bad.check("device").unwrap_err().key, "fields");
    }
}

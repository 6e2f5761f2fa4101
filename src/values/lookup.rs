//! Lookup tables: keyed rows a group learns from its body (`lookups`), so
//! a rule of any group can label a sample with a field of another body —
//! a device's name and model by its serial, a network's name by its id.
//!
//! A table is written `lookups = { device = { each = "", key = "/serial",
//! fields = { name = "/name", model = "/model" } } }`: one row per element
//! of `each` (that `where` keeps), keyed by the text at `key`, each field
//! the text at its pointer (or, in a fan-out, `@item` / `@item.FIELD`: the
//! item the body belongs to). A label reads a field as
//! `@lookup.device[/serial].name`, the key being a pointer into the element
//! (or `@key`, `@item`, `@item.FIELD`, `@fact.NAME`).
//!
//! A fan-out group's table is learned over all the items of one poll. When
//! several elements (of one body, or of several items) have one key, the
//! first gives the row, except for the fields `many` names: those read its
//! text, `{@count}` being how many elements have the key.
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
use super::rule::{Filter, OneOrMany};
use super::text::{Facts, push_text};

/// A lookup table as written (`[groups.lookups.NAME]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// A pointer to the array or object whose elements are the rows.
    #[serde(default)]
    pub each: String,
    /// `{ POINTER = "text" }` (or a list, or `true`/`false`): the elements
    /// that give rows, as a rule's `where`.
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub where_: Option<BTreeMap<String, OneOrMany>>,
    /// A pointer inside each element to the row's key.
    pub key: String,
    /// Field name → a pointer inside the element to its text, or (in a
    /// fan-out) `@item` or `@item.FIELD`.
    pub fields: BTreeMap<String, String>,
    /// Field name → its text when several elements have the row's key,
    /// `{@count}` standing for how many.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub many: BTreeMap<String, String>,
}

/// A lookup that failed its check: the key inside it and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {message}")]
pub struct LookupError {
    /// `each`, `where.POINTER`, `key`, `fields.NAME`, `many.NAME`, or empty
    /// for the table's name.
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

/// Where a field's text comes from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    Pointer(Pointer),
    /// `@item`: the fan-out item the body belongs to.
    Item,
    /// `@item.FIELD`: one field of it.
    ItemField(String),
}

impl Source {
    fn parse(text: &str) -> Result<Source, String> {
        if text == "@item" {
            return Ok(Source::Item);
        }
        if let Some(f) = text.strip_prefix("@item.") {
            if !super::valid_label_name(f) {
                return Err("an item field is [a-zA-Z_][a-zA-Z0-9_]*".into());
            }
            return Ok(Source::ItemField(f.to_string()));
        }
        Pointer::parse(text)
            .map(Source::Pointer)
            .map_err(|e| format!("{e} (a field is a pointer, or in a fan_out group @item or @item.FIELD)"))
    }

    fn text(&self, element: &Value, item: Option<&str>) -> Option<String> {
        match self {
            Source::Pointer(p) => scalar(p.resolve(element)),
            Source::Item => item.map(str::to_string),
            Source::ItemField(f) => item.and_then(|i| super::item::field(i, f)),
        }
    }
}

/// Checks a `many` text: literal text and `{@count}`.
fn many_parts(text: &str) -> Result<(), String> {
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        let after = &rest[i..];
        match after.strip_prefix("{@count}") {
            Some(tail) => rest = tail,
            None => return Err("literal text and {@count}, no other braces".into()),
        }
    }
    Ok(())
}

/// A table's parts, parsed; `fields` in the order of the table's.
struct Compiled {
    each: Pointer,
    key: Pointer,
    filters: Vec<(Pointer, Filter)>,
    fields: Vec<Source>,
}

impl Lookup {
    /// Checks the table's name, pointers, filters and field names.
    pub fn check(&self, name: &str) -> Result<(), LookupError> {
        if !super::valid_label_name(name) {
            return Err(error("", name, "a lookup table's name is [a-zA-Z_][a-zA-Z0-9_]*"));
        }
        Pointer::parse(&self.each).map_err(|e| error("each", &self.each, e.to_string()))?;
        if let Some(w) = &self.where_ {
            if w.is_empty() {
                return Err(error("where", "{}", "names no field; omit it to keep every element"));
            }
            for (field, accepted) in w {
                let key = format!("where.{field}");
                Pointer::parse(field).map_err(|e| error(&key, field, e.to_string()))?;
                if accepted.clone().into_filter() == Filter::AnyOf(Vec::new()) {
                    return Err(error(key, "[]", "lists no value, so it would keep nothing"));
                }
            }
        }
        Pointer::parse(&self.key).map_err(|e| error("key", &self.key, e.to_string()))?;
        if self.fields.is_empty() {
            return Err(error("fields", "{}", "names no field, so the table would hold nothing"));
        }
        for (field, pointer) in &self.fields {
            let key = format!("fields.{field}");
            if !super::valid_label_name(field) {
                return Err(error(key, field, "a field name is [a-zA-Z_][a-zA-Z0-9_]*"));
            }
            Source::parse(pointer).map_err(|e| error(key, pointer, e))?;
        }
        for (field, text) in &self.many {
            let key = format!("many.{field}");
            if !self.fields.contains_key(field) {
                let names: Vec<&str> = self.fields.keys().map(String::as_str).collect();
                return Err(error(
                    key,
                    text,
                    format!("not a field of the table (its fields are {})", names.join(", ")),
                ));
            }
            many_parts(text).map_err(|e| error(key, text, e))?;
        }
        Ok(())
    }

    /// The parsed table; `None` (nothing learned) if a part does not parse,
    /// which [`Lookup::check`] refuses at load.
    fn compile(&self) -> Option<Compiled> {
        let filters = match &self.where_ {
            None => Vec::new(),
            Some(w) => w
                .iter()
                .map(|(p, a)| Some((Pointer::parse(p).ok()?, a.clone().into_filter())))
                .collect::<Option<_>>()?,
        };
        Some(Compiled {
            each: Pointer::parse(&self.each).ok()?,
            key: Pointer::parse(&self.key).ok()?,
            filters,
            fields: self
                .fields
                .values()
                .map(|p| Source::parse(p).ok())
                .collect::<Option<_>>()?,
        })
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

/// One row being learned: the fields of the first element with its key
/// (in the order of the table's `fields`, `None` for one it lacks), and how
/// many elements have the key.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    fields: Vec<Option<String>>,
    count: usize,
}

/// The rows of a group's tables being learned, from one body or from the
/// bodies of a fan-out's items: table → key → row. A table is here only
/// once some body had its `each`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    tables: BTreeMap<String, BTreeMap<String, Row>>,
}

impl Rows {
    /// Adds the rows of `doc`, the body of fan-out item `item` (`None`
    /// outside a fan-out). A table whose `each` is not an array or object
    /// gets nothing; an element `where` refuses or without a key gives no
    /// row, and a field that is not a scalar is left out of its row.
    pub fn add(&mut self, doc: &Value, item: Option<&str>, lookups: &BTreeMap<String, Lookup>) {
        for (table, lookup) in lookups {
            let Some(c) = lookup.compile() else { continue };
            let elements: Vec<&Value> = match c.each.resolve(doc) {
                Some(Value::Array(a)) => a.iter().collect(),
                Some(Value::Object(m)) => m.values().collect(),
                _ => continue,
            };
            let rows = self.tables.entry(table.clone()).or_default();
            for element in elements {
                if !super::extract::passes(&c.filters, element) {
                    continue;
                }
                let Some(k) = scalar(c.key.resolve(element)) else {
                    continue;
                };
                if let Some(row) = rows.get_mut(&k) {
                    row.count += 1;
                    continue;
                }
                let fields = c.fields.iter().map(|s| s.text(element, item)).collect();
                rows.insert(k, Row { fields, count: 1 });
            }
        }
    }

    /// Adds the rows another body gave (a later item of the fan-out):
    /// the counts add up, and a key already here keeps its first row.
    pub fn extend(&mut self, other: Rows) {
        for (table, rows) in other.tables {
            let mine = self.tables.entry(table).or_default();
            for (key, row) in rows {
                match mine.get_mut(&key) {
                    Some(first) => first.count += row.count,
                    None => {
                        mine.insert(key, row);
                    }
                }
            }
        }
    }

    /// The facts the rows make: each row's fields (a row several elements
    /// have reads the table's `many` texts, `{@count}` replaced), and each
    /// table's marker with its number of rows.
    pub fn into_facts(self, lookups: &BTreeMap<String, Lookup>) -> Facts {
        let mut out = Facts::new();
        for (table, rows) in self.tables {
            let Some(lookup) = lookups.get(&table) else { continue };
            out.insert(marker(&table), rows.len().to_string());
            for (key, row) in rows {
                for (field, text) in lookup.fields.keys().zip(row.fields) {
                    let text = match lookup.many.get(field) {
                        Some(many) if row.count > 1 => Some(many.replace("{@count}", &row.count.to_string())),
                        _ => text,
                    };
                    if let Some(text) = text {
                        out.insert(row_fact(&table, &key, field), text);
                    }
                }
            }
        }
        out
    }
}

/// What a body teaches its instance: each fact (`name → pointer`) whose
/// pointer names a scalar, and every row of each lookup table with its
/// marker (see [`Rows`]). With two elements of one key, the first gives
/// the row, but for the fields the table's `many` names.
pub fn learn(doc: &Value, facts: &BTreeMap<String, String>, lookups: &BTreeMap<String, Lookup>) -> Facts {
    let mut out = Facts::new();
    for (name, pointer) in facts {
        let Ok(p) = Pointer::parse(pointer) else { continue };
        if let Some(text) = scalar(p.resolve(doc)) {
            out.insert(name.clone(), text);
        }
    }
    if !lookups.is_empty() {
        let mut rows = Rows::default();
        rows.add(doc, None, lookups);
        out.extend(rows.into_facts(lookups));
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
            ..Lookup::default()
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

//! Response shapes and fan-out paths: the pure parts of `shape_from` and
//! `fan_out` (§1), kept apart from the HTTP code so they are easy to test.
//!
//! [`shape_of`] (or [`shape_in`], on a body [`parse_json`] has parsed) reads
//! the array a `shape_from` JSON pointer (RFC 6901) names in a response body:
//! its length becomes the shape count, and with an `item_field` each
//! element's value of that field names an item. A body that is not JSON, a
//! pointer that names nothing, or a value that is not an array is a transient
//! `body` error (§3: a malformed body for a `shape_from` group), with a
//! one-line message naming the pointer.
//!
//! Item names: a string value is taken as is; a number or a boolean as its
//! JSON text (`3`, `1.5`, `true`). An element that is not an object, lacks
//! the field, or holds `null`, an object or an array there names no item and
//! is skipped (it still counts towards `count`), so `items` may be shorter
//! than `count`. An item that several elements name is kept once, where it
//! is first named (a fan-out over the networks of a device list calls each
//! network once).
//!
//! [`item_path`] puts an item into a fan-out group's path, percent-encoded as
//! one path segment.

use crate::model::{ErrorCategory, ErrorKind, PollError, ShapeUpdate};
use crate::poll::classify::one_line;
use serde_json::Value;

/// The placeholder a fan-out group's path holds.
pub const ITEM_PLACEHOLDER: &str = "{item}";

/// How a `shape_from` group names its items.
#[derive(Debug, Clone, Copy, Default)]
pub enum ItemNames<'a> {
    /// No items: the count only.
    #[default]
    None,
    /// `item_field`: each element's value of the field is the item.
    Field(&'a str),
    /// `item_fields`: the item carries each field (see
    /// [`crate::values::item`]); an element lacking one names no item.
    Fields(&'a [String]),
}

impl<'a> From<Option<&'a str>> for ItemNames<'a> {
    fn from(field: Option<&'a str>) -> Self {
        field.map_or(ItemNames::None, ItemNames::Field)
    }
}

/// The shape a `shape_from` group's body gives: the length of the array at
/// `pointer` (`""` is the whole body) and, with `item_field`, the items.
/// Never panics: serde_json bounds nesting depth, and the body is already
/// bounded by `max_response_bytes`.
pub fn shape_of<'a>(body: &[u8], pointer: &str, items: impl Into<ItemNames<'a>>) -> Result<ShapeUpdate, PollError> {
    let doc = parse_json(body, &shape_context(pointer))?;
    shape_in(&doc, pointer, items)
}

/// [`shape_of`] on a body already parsed.
pub fn shape_in<'a>(doc: &Value, pointer: &str, items: impl Into<ItemNames<'a>>) -> Result<ShapeUpdate, PollError> {
    let fail = |why: &str| body_error(&shape_context(pointer), why);
    if !(pointer.is_empty() || pointer.starts_with('/')) {
        return Err(fail("not a JSON pointer (must be empty or start with '/')"));
    }
    let target = doc.pointer(pointer).ok_or_else(|| fail("nothing at this pointer"))?;
    let Value::Array(elements) = target else {
        return Err(fail(&format!("expected an array, found {}", describe(target))));
    };
    let items: Vec<String> = match items.into() {
        ItemNames::Field(field) => elements.iter().filter_map(|e| item_name(e.get(field)?)).collect(),
        ItemNames::Fields(fields) => elements
            .iter()
            .filter_map(|e| {
                let parts: Option<Vec<(&str, String)>> = fields
                    .iter()
                    .map(|f| Some((f.as_str(), item_name(e.get(f)?)?)))
                    .collect();
                Some(crate::values::item::compose(&parts?))
            })
            .collect(),
        ItemNames::None => Vec::new(),
    };
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    let items = items.into_iter().filter(|i| seen.insert(i.clone())).collect();
    Ok(ShapeUpdate {
        count: elements.len() as u64,
        items,
    })
}

/// A body parsed as JSON; one that is not JSON is a transient `body` error
/// whose one-line message starts with `context` (what wanted the JSON).
pub fn parse_json(body: &[u8], context: &str) -> Result<Value, PollError> {
    serde_json::from_slice(body).map_err(|e| body_error(context, &format!("body is not JSON ({e})")))
}

/// How messages about a `shape_from` pointer begin.
pub fn shape_context(pointer: &str) -> String {
    format!("shape_from {pointer:?}")
}

/// A transient `body` error: `context: why`, on one line.
fn body_error(context: &str, why: &str) -> PollError {
    PollError::new(
        ErrorCategory::Transient,
        ErrorKind::Body,
        one_line(&format!("{context}: {why}")),
    )
}

/// The name an `item_field` value gives an item, if any.
fn item_name(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// "an object", "a string", ... for messages.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Percent-encode `s` as one URL path segment: the unreserved characters
/// `A-Z a-z 0-9 - . _ ~` are kept, every other byte of its UTF-8 form
/// becomes `%XX` (so `/ ? # %`, spaces and non-ASCII cannot change the
/// URL's structure).
pub fn encode_path_segment(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

/// A fan-out group's path with every `{item}` replaced by the encoded
/// item, and every `{item.FIELD}` by that field of the item, encoded. An
/// empty segment, `.` or `..` cannot be a path segment (URL parsers treat
/// `.`/`..` and their encodings as dot segments and would move up the
/// path), and an item without the field cannot fill it: `Permanent`/
/// `InvalidUrl`, and no request is sent.
pub fn item_path(path: &str, item: &str) -> Result<String, PollError> {
    let segment = |text: &str, what: &str| {
        if matches!(text, "" | "." | "..") {
            Err(PollError::new(
                ErrorCategory::Permanent,
                ErrorKind::InvalidUrl,
                format!("{what} {text:?} cannot be used as a path segment"),
            ))
        } else {
            Ok(encode_path_segment(text))
        }
    };
    let mut out = String::with_capacity(path.len() + item.len());
    let mut rest = path;
    while let Some(i) = rest.find("{item") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "{item".len()..];
        if let Some(r) = after.strip_prefix('}') {
            out.push_str(&segment(item, "item")?);
            rest = r;
        } else if let Some((field, r)) = after.strip_prefix('.').and_then(|a| a.split_once('}')) {
            let value = crate::values::item::field(item, field).ok_or_else(|| {
                PollError::new(
                    ErrorCategory::Permanent,
                    ErrorKind::InvalidUrl,
                    format!("item {:?} has no field {field:?} for the path", display_item(item)),
                )
            })?;
            out.push_str(&segment(&value, &format!("item field {field}"))?);
            rest = r;
        } else {
            out.push_str("{item");
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Longest item name shown in a message, in characters.
const MAX_ITEM_CHARS: usize = 64;

/// An item as shown in a message: control characters (line breaks
/// included) become `?`, and a long name is cut with `...`.
pub fn display_item(item: &str) -> String {
    let mut out: String = item
        .chars()
        .take(MAX_ITEM_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if item.chars().nth(MAX_ITEM_CHARS).is_some() {
        out.push_str("...");
    }
    out
}

//! Label values: a pointer (`/id`), the element's object key (`@key`), the
//! fan-out item (`@item`), or a template mixing literal text with any of
//! them in braces (`"{/type}/{/vmid}"`, `"cluster/{/name}"`; `{{` and `}}`
//! are literal braces).

use serde_json::Value;
use std::fmt::Write as _;

use super::pointer::{Pointer, PointerError};

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(Box<str>),
    Field(Pointer),
    /// The object key of the element, when `each` names an object.
    Key,
    /// The fan-out item the body belongs to.
    Item,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Box<[Part]>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("is empty")]
    Empty,
    #[error("a label is a pointer (/id), @key, @item, or a template with {{…}} such as \"{{/type}}/{{/vmid}}\"")]
    Bare,
    #[error("a {{ is not closed")]
    Unclosed,
    #[error("a }} has no {{ (write }}}} for a literal brace)")]
    StrayClose,
    #[error("{{{0}}}: {1}")]
    BadPlaceholder(String, &'static str),
    #[error("{{{0}}}: {1}")]
    BadPointer(String, PointerError),
}

/// What a template reads besides the element itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    pub key: Option<&'a str>,
    pub item: Option<&'a str>,
}

fn placeholder(inner: &str) -> Result<Part, TemplateError> {
    match inner {
        "@key" => Ok(Part::Key),
        "@item" => Ok(Part::Item),
        _ if inner.starts_with('@') => Err(TemplateError::BadPlaceholder(inner.into(), "only @key and @item")),
        _ if inner.is_empty() => Err(TemplateError::BadPlaceholder(inner.into(), "names nothing")),
        _ => Pointer::parse(inner)
            .map(Part::Field)
            .map_err(|e| TemplateError::BadPointer(inner.into(), e)),
    }
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        if text.is_empty() {
            return Err(TemplateError::Empty);
        }
        if !text.contains(['{', '}']) {
            return match text {
                "@key" => Ok(Template {
                    parts: [Part::Key].into(),
                }),
                "@item" => Ok(Template {
                    parts: [Part::Item].into(),
                }),
                _ if text.starts_with('/') => Ok(Template {
                    parts: [placeholder(text)?].into(),
                }),
                _ if text.starts_with('@') => Err(TemplateError::BadPlaceholder(text.into(), "only @key and @item")),
                _ => Err(TemplateError::Bare),
            };
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            literal.push_str(&rest[..i]);
            let brace = rest.as_bytes()[i];
            let after = &rest[i + 1..];
            if after.as_bytes().first() == Some(&brace) {
                literal.push(brace as char);
                rest = &after[1..];
                continue;
            }
            if brace == b'}' {
                return Err(TemplateError::StrayClose);
            }
            let end = after.find('}').ok_or(TemplateError::Unclosed)?;
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal).into()));
            }
            parts.push(placeholder(&after[..end])?);
            rest = &after[end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal.into()));
        }
        Ok(Template { parts: parts.into() })
    }

    pub fn uses_key(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Key))
    }

    /// Appends the label's text to `out` and says whether every part was
    /// found. A part that is missing (no such field, a JSON null, no key or
    /// item) makes the whole label missing: the caller then uses the
    /// rule's default.
    pub fn render(&self, element: &Value, cx: Context<'_>, out: &mut String) -> bool {
        for part in self.parts.iter() {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Key => match cx.key {
                    Some(k) => out.push_str(k),
                    None => return false,
                },
                Part::Item => match cx.item {
                    Some(k) => out.push_str(k),
                    None => return false,
                },
                Part::Field(p) => match p.resolve(element) {
                    None | Some(Value::Null) => return false,
                    Some(v) => push_text(v, out),
                },
            }
        }
        true
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(t: &str, doc: &Value, cx: Context<'_>) -> Option<String> {
        let mut out = String::new();
        Template::parse(t).expect(t).render(doc, cx, &mut out).then_some(out)
    }

    #[test]
    fn pointers_keys_items_and_templates_render() {
        let doc = json!({"type": "qemu", "vmid": 100, "name": "lab", "cpu": 0.5, "ok": true, "gone": null});
        let none = Context::default();
        assert_eq!(render("/type", &doc, none).as_deref(), Some("qemu"));
        assert_eq!(render("/vmid", &doc, none).as_deref(), Some("100"));
        assert_eq!(render("/cpu", &doc, none).as_deref(), Some("0.5"));
        assert_eq!(render("/ok", &doc, none).as_deref(), Some("true"));
        assert_eq!(render("{/type}/{/vmid}", &doc, none).as_deref(), Some("qemu/100"));
        assert_eq!(render("cluster/{/name}", &doc, none).as_deref(), Some("cluster/lab"));
        assert_eq!(render("{{{/name}}}", &doc, none).as_deref(), Some("{lab}"));
        let cx = Context {
            key: Some("k1"),
            item: Some("node1"),
        };
        assert_eq!(render("@key", &doc, cx).as_deref(), Some("k1"));
        assert_eq!(render("{@item}:{@key}", &doc, cx).as_deref(), Some("node1:k1"));
        assert_eq!(render("/missing", &doc, none), None);
        assert_eq!(render("/gone", &doc, none), None, "null is missing");
        assert_eq!(
            render("lxc/{/missing}", &doc, none),
            None,
            "one missing part: the label is missing"
        );
        assert_eq!(render("@item", &doc, none), None);
    }

    #[test]
    fn malformed_templates_are_refused_with_the_reason() {
        assert_eq!(Template::parse(""), Err(TemplateError::Empty));
        assert_eq!(Template::parse("id"), Err(TemplateError::Bare));
        assert_eq!(Template::parse("{/a"), Err(TemplateError::Unclosed));
        assert_eq!(Template::parse("a}"), Err(TemplateError::StrayClose));
        assert!(matches!(
            Template::parse("{@name}"),
            Err(TemplateError::BadPlaceholder(..))
        ));
        assert!(matches!(
            Template::parse("@name"),
            Err(TemplateError::BadPlaceholder(..))
        ));
        assert!(matches!(Template::parse("{}"), Err(TemplateError::BadPlaceholder(..))));
        assert!(matches!(Template::parse("x{id}"), Err(TemplateError::BadPointer(..))));
        assert!(matches!(Template::parse("/a~9"), Err(TemplateError::BadPointer(..))));
    }
}

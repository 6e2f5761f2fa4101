//! Label values: a pointer (`/id`), the element itself (`@element`), the
//! element's object key (`@key`), the
//! fan-out item (`@item`, or one of its fields: `@item.node`), an instance
//! fact (`@fact.cluster`), a field of a lookup table's row
//! (`@lookup.device[/serial].name`, see [`super::lookup`]), a field of the
//! element that holds a `nested` element (`@parent/portId`), or a template
//! mixing literal text with any of them in braces (`"{/type}/{/vmid}"`,
//! `"cluster/{@fact.cluster}"`; `{{` and `}}` are literal braces).

use serde_json::Value;

use super::pointer::{Pointer, PointerError};
use super::text::{Facts, push_text};

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(Box<str>),
    Field(Pointer),
    /// The element itself (`@element`): a text or number inside a list.
    Element,
    /// The object key of the element, when `each` names an object.
    Key,
    /// The fan-out item the body belongs to.
    Item,
    /// One field of the fan-out item (`@item.node`), when the group fans
    /// out over items made of several fields (`item_fields`).
    ItemField(Box<str>),
    /// A fact the instance's `facts` groups learned (`@fact.cluster`).
    Fact(Box<str>),
    /// A field of the element of `each` that holds the element, when the
    /// rule walks a `nested` list (`@parent/portId`).
    Parent(Pointer),
    /// A field of a lookup table's row, the row named by the text of
    /// `key` (`@lookup.device[/serial].name`).
    Lookup {
        table: Box<str>,
        key: Box<Part>,
        field: Box<str>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Box<[Part]>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("is empty")]
    Empty,
    #[error(
        "a label is a pointer (/id), @element, @key, @item, @item.FIELD, @fact.NAME, @lookup.TABLE[KEY].FIELD, @parent/POINTER, or a template with {{…}} such as \"{{/type}}/{{/vmid}}\""
    )]
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
    /// The instance's facts, when the rules read any.
    pub facts: Option<&'a Facts>,
    /// The element of `each` that holds the element, when the rule walks
    /// a `nested` list.
    pub parent: Option<&'a Value>,
}

/// What rendering a template found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendered {
    /// Every part was there.
    Done,
    /// A field, key or item was missing: the label takes its default.
    Missing,
    /// A fact the instance has not learned (yet): the sample waits for it.
    NoFact,
}

const PLACEHOLDERS: &str =
    "only @element, @key, @item, @item.FIELD, @fact.NAME, @lookup.TABLE[KEY].FIELD and @parent/POINTER";

/// `TABLE[KEY].FIELD` of `@lookup.TABLE[KEY].FIELD`, the key being a
/// pointer or one of `@key`, `@item`, `@item.FIELD`, `@fact.NAME`.
fn lookup(inner: &str, rest: &str) -> Result<Part, TemplateError> {
    let bad = |why: &'static str| TemplateError::BadPlaceholder(inner.into(), why);
    const SHAPE: &str = "a lookup is @lookup.TABLE[KEY].FIELD, KEY a pointer (/serial), @element, @key, @item, @item.FIELD or @fact.NAME";
    let (table, after) = rest.split_once('[').ok_or(bad(SHAPE))?;
    let (key, field) = after.rsplit_once("].").ok_or(bad(SHAPE))?;
    if !crate::values::valid_label_name(table) || !crate::values::valid_label_name(field) {
        return Err(bad("a lookup table's and field's names are [a-zA-Z_][a-zA-Z0-9_]*"));
    }
    let key = match placeholder(key) {
        Ok(Part::Lookup { .. }) => return Err(bad("a lookup's key cannot be another lookup")),
        Ok(part) => part,
        Err(TemplateError::BadPointer(k, e)) => return Err(TemplateError::BadPointer(k, e)),
        Err(_) => return Err(bad(SHAPE)),
    };
    Ok(Part::Lookup {
        table: table.into(),
        key: Box::new(key),
        field: field.into(),
    })
}

fn placeholder(inner: &str) -> Result<Part, TemplateError> {
    let named = |name: &str, what: fn(Box<str>) -> Part| {
        if crate::values::valid_label_name(name) {
            Ok(what(name.into()))
        } else {
            Err(TemplateError::BadPlaceholder(
                inner.into(),
                "a field or fact name is [a-zA-Z_][a-zA-Z0-9_]*",
            ))
        }
    };
    match inner {
        "@element" => Ok(Part::Element),
        "@key" => Ok(Part::Key),
        "@item" => Ok(Part::Item),
        _ if inner.starts_with("@item.") => named(&inner["@item.".len()..], Part::ItemField),
        _ if inner.starts_with("@fact.") => named(&inner["@fact.".len()..], Part::Fact),
        _ if inner.starts_with("@lookup.") => lookup(inner, &inner["@lookup.".len()..]),
        _ if inner.starts_with("@parent/") => Pointer::parse(&inner["@parent".len()..])
            .map(Part::Parent)
            .map_err(|e| TemplateError::BadPointer(inner.into(), e)),
        _ if inner.starts_with('@') => Err(TemplateError::BadPlaceholder(inner.into(), PLACEHOLDERS)),
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
                _ if text.starts_with(['/', '@']) => Ok(Template {
                    parts: [placeholder(text)?].into(),
                }),
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

    /// A label that is always `text` (a rule's `fixed_labels`).
    pub fn literal(text: &str) -> Template {
        Template {
            parts: [Part::Text(text.into())].into(),
        }
    }

    pub fn uses_key(&self) -> bool {
        self.parts.iter().any(|p| match p {
            Part::Key => true,
            Part::Lookup { key, .. } => matches!(**key, Part::Key),
            _ => false,
        })
    }

    /// Whether it reads the element holding a nested one (`@parent/…`,
    /// also as a lookup's key).
    pub fn uses_parent(&self) -> bool {
        self.parts.iter().any(|p| match p {
            Part::Parent(_) => true,
            Part::Lookup { key, .. } => matches!(**key, Part::Parent(_)),
            _ => false,
        })
    }

    /// The item fields it reads (`@item.FIELD`, also as a lookup's key).
    pub fn item_fields(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::ItemField(f) => Some(&**f),
            Part::Lookup { key, .. } => match &**key {
                Part::ItemField(f) => Some(&**f),
                _ => None,
            },
            _ => None,
        })
    }

    /// The facts it reads (`@fact.NAME`, also as a lookup's key).
    pub fn facts(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Fact(f) => Some(&**f),
            Part::Lookup { key, .. } => match &**key {
                Part::Fact(f) => Some(&**f),
                _ => None,
            },
            _ => None,
        })
    }

    /// The lookup tables and fields it reads (`@lookup.TABLE[KEY].FIELD`).
    pub fn lookups(&self) -> impl Iterator<Item = (&str, &str)> {
        self.parts.iter().filter_map(|p| match p {
            Part::Lookup { table, field, .. } => Some((&**table, &**field)),
            _ => None,
        })
    }

    /// Whether it reads any instance fact or lookup table: its samples
    /// may have to wait for one.
    pub fn uses_facts(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Fact(_) | Part::Lookup { .. }))
    }

    /// Appends the label's text to `out` and says what it found. A part
    /// that is missing (no such field, a JSON null, no key, item or item
    /// field) makes the whole label missing: the caller then uses the
    /// rule's default. A fact not learned yet is [`Rendered::NoFact`].
    pub fn render(&self, element: &Value, cx: Context<'_>, out: &mut String) -> Rendered {
        let mut found = Rendered::Done;
        for part in self.parts.iter() {
            match render_part(part, element, cx, out) {
                Rendered::Done => {}
                Rendered::Missing => found = Rendered::Missing,
                Rendered::NoFact => return Rendered::NoFact,
            }
        }
        found
    }
}

/// Appends one part's text to `out` (see [`Template::render`]). A lookup
/// whose table is not learned yet is [`Rendered::NoFact`]; one whose key
/// is missing, or has no row or no such field in the learned table, is
/// [`Rendered::Missing`].
fn render_part(part: &Part, element: &Value, cx: Context<'_>, out: &mut String) -> Rendered {
    let found = |v: Option<&str>, out: &mut String| match v {
        Some(v) => {
            out.push_str(v);
            Rendered::Done
        }
        None => Rendered::Missing,
    };
    match part {
        Part::Text(t) => {
            out.push_str(t);
            Rendered::Done
        }
        Part::Key => found(cx.key, out),
        Part::Item => found(cx.item, out),
        Part::ItemField(f) => found(cx.item.and_then(|i| super::item::field(i, f)).as_deref(), out),
        Part::Fact(f) => match cx.facts.and_then(|m| m.get(&**f)) {
            Some(v) => {
                out.push_str(v);
                Rendered::Done
            }
            None => Rendered::NoFact,
        },
        Part::Element => match element {
            Value::Null => Rendered::Missing,
            v => {
                push_text(v, out);
                Rendered::Done
            }
        },
        Part::Field(p) => match p.resolve(element) {
            None | Some(Value::Null) => Rendered::Missing,
            Some(v) => {
                push_text(v, out);
                Rendered::Done
            }
        },
        Part::Parent(p) => match cx.parent.and_then(|parent| p.resolve(parent)) {
            None | Some(Value::Null) => Rendered::Missing,
            Some(v) => {
                push_text(v, out);
                Rendered::Done
            }
        },
        Part::Lookup { table, key, field } => {
            let Some(facts) = cx.facts.filter(|m| m.contains_key(&super::lookup::marker(table))) else {
                return Rendered::NoFact;
            };
            let mut k = String::new();
            match render_part(key, element, cx, &mut k) {
                Rendered::Done => {}
                other => return other,
            }
            found(
                facts
                    .get(&super::lookup::row_fact(table, &k, field))
                    .map(String::as_str),
                out,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(t: &str, doc: &Value, cx: Context<'_>) -> Option<String> {
        let mut out = String::new();
        (Template::parse(t).expect(t).render(doc, cx, &mut out) == Rendered::Done).then_some(out)
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
            ..Context::default()
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
        assert_eq!(render("@element", &json!("Q2-A"), none).as_deref(), Some("Q2-A"));
        assert_eq!(render("sw-{@element}", &json!(7), none).as_deref(), Some("sw-7"));
        assert_eq!(render("@element", &Value::Null, none), None, "null is missing");
        assert!(Template::parse("@elements").is_err());
    }

    #[test]
    fn item_fields_and_facts_render_and_an_unknown_fact_is_told_apart() {
        let doc = json!({"x": 1});
        let facts = Facts::from([("cluster".to_string(), "lab".to_string())]);
        let cx = Context {
            item: Some("node=pve1,vmid=100"),
            facts: Some(&facts),
            ..Context::default()
        };
        assert_eq!(render("@item.node", &doc, cx).as_deref(), Some("pve1"));
        assert_eq!(render("qemu/{@item.vmid}", &doc, cx).as_deref(), Some("qemu/100"));
        assert_eq!(
            render("cluster/{@fact.cluster}", &doc, cx).as_deref(),
            Some("cluster/lab")
        );
        assert_eq!(render("@item.type", &doc, cx), None, "an item field the item lacks");
        let mut out = String::new();
        let t = Template::parse("cluster/{@fact.name}").unwrap();
        assert_eq!(t.render(&doc, cx, &mut out), Rendered::NoFact);
        assert_eq!(
            t.render(&doc, Context::default(), &mut String::new()),
            Rendered::NoFact,
            "no facts at all"
        );
        let both = Template::parse("{@fact.cluster}/{/missing}").unwrap();
        assert_eq!(both.render(&doc, cx, &mut String::new()), Rendered::Missing);
        assert_eq!(
            Template::parse("{@item.node}/{@fact.cluster}/{@item.vmid}")
                .unwrap()
                .item_fields()
                .collect::<Vec<_>>(),
            ["node", "vmid"]
        );
        assert_eq!(t.facts().collect::<Vec<_>>(), ["name"]);
    }

    #[test]
    fn lookups_read_a_row_by_a_key_of_the_element() {
        let doc = json!({"serial": "A", "net": "N1"});
        let facts: Facts = [
            ("device[]", "2"),
            ("device[A].name", "hq-mx"),
            ("network[]", "1"),
            ("network[N1].name", "HQ Paris"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let cx = Context {
            key: Some("A"),
            facts: Some(&facts),
            ..Context::default()
        };
        assert_eq!(
            render("@lookup.device[/serial].name", &doc, cx).as_deref(),
            Some("hq-mx")
        );
        assert_eq!(render("@lookup.device[@key].name", &doc, cx).as_deref(), Some("hq-mx"));
        assert_eq!(
            render(
                "{@lookup.device[/serial].name} in {@lookup.network[/net].name}",
                &doc,
                cx
            )
            .as_deref(),
            Some("hq-mx in HQ Paris")
        );
        let t = |s: &str| Template::parse(s).unwrap();
        let mut out = String::new();
        assert_eq!(
            t("@lookup.device[/serial].model").render(&doc, cx, &mut out),
            Rendered::Missing,
            "a field the row lacks"
        );
        assert_eq!(
            t("@lookup.device[/net].name").render(&doc, cx, &mut out),
            Rendered::Missing,
            "a key with no row"
        );
        assert_eq!(
            t("@lookup.device[/nothing].name").render(&doc, cx, &mut out),
            Rendered::Missing,
            "no key"
        );
        assert_eq!(
            t("@lookup.site[/serial].name").render(&doc, cx, &mut out),
            Rendered::NoFact,
            "a table not learned yet: the sample waits"
        );
        assert_eq!(
            t("@lookup.device[@fact.x].name").render(&doc, cx, &mut out),
            Rendered::NoFact,
            "a key that is a fact not learned yet"
        );
        let both = t("{@lookup.device[@item.serial].name}/{@lookup.network[@fact.net].name}");
        assert_eq!(
            both.lookups().collect::<Vec<_>>(),
            [("device", "name"), ("network", "name")]
        );
        assert_eq!(both.item_fields().collect::<Vec<_>>(), ["serial"]);
        assert_eq!(both.facts().collect::<Vec<_>>(), ["net"]);
        assert!(both.uses_facts());
        assert!(t("@lookup.device[@key].name").uses_key());
        for bad in [
            "@lookup.device",
            "@lookup.device[/serial]",
            "@lookup.device[/serial].",
            "@lookup.[/serial].name",
            "@lookup.device[serial].name",
            "@lookup.device[@lookup.x[/a].b].name",
            "@lookup.device[@nothing].name",
            "@lookup.a-b[/serial].name",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad} is refused");
        }
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
        assert!(matches!(
            Template::parse("@item."),
            Err(TemplateError::BadPlaceholder(..))
        ));
        assert!(matches!(
            Template::parse("{@fact.a-b}"),
            Err(TemplateError::BadPlaceholder(..))
        ));
        assert!(matches!(Template::parse("x{id}"), Err(TemplateError::BadPointer(..))));
        assert!(matches!(Template::parse("/a~9"), Err(TemplateError::BadPointer(..))));
    }
}

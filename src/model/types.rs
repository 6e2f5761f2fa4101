//! Instance types and their endpoint groups (`[[types]]`, the presets).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::*;
use crate::values::{Rule, ValueRule, check_families};

/// One fetch a type makes (§1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDef {
    pub name: String,
    #[serde(default)]
    pub path: String,
    /// The API root the path is resolved against instead of the instance
    /// URL: a path prefix of the instance URL (`"/api/v1"`), the URL being
    /// cut right after it. A Meraki instance's URL is its organization's
    /// base (`…/api/v1/organizations/123`); a group with `api_root =
    /// "/api/v1"` and path `/devices/{item}/switch/ports/statuses` calls
    /// `…/api/v1/devices/Q2HP-…/switch/ports/statuses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_root: Option<String>,
    #[serde(default = "default_priority")]
    pub priority: u8,
    #[serde(with = "duration_str", default = "default_floor")]
    pub floor: Duration,
    #[serde(default = "default_cost")]
    pub cost: f64,
    #[serde(default = "default_true")]
    pub gated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_when: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_field: Option<String>,
    /// Items made of several fields of each element (`["node", "type",
    /// "vmid"]`): a fan-out over them reads each as `{item.FIELD}` in its
    /// path and `@item.FIELD` in labels. An element lacking one names no
    /// item.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_fields: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<String>,
    /// Facts about the instance this group's body gives: name → a JSON
    /// pointer to a scalar (`cluster = "/data/0/name"`). Any rule of the
    /// type reads one as `@fact.NAME`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub facts: BTreeMap<String, String>,
    /// Lookup tables this group's body gives: name → rows keyed by a field
    /// of each element (`device = { each = "", key = "/serial", fields =
    /// { name = "/name" } }`). Any rule of the type reads a row's field as
    /// `@lookup.NAME[KEY].FIELD`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lookups: BTreeMap<String, crate::values::Lookup>,
    #[serde(default)]
    pub forward: bool,
    /// Value rules: what of the body becomes metric samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<ValueRule>,
    /// The most samples the rules keep from one body (fan-out: one item's).
    #[serde(default = "default_max_series")]
    pub max_series: usize,
    /// Keep the last good body, for the data API.
    #[serde(default)]
    pub keep_body: bool,
    /// The largest body kept (larger ones are not kept, and say so).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
}

fn default_max_series() -> usize {
    crate::values::DEFAULT_MAX_SERIES
}
/// A kept body's size limit unless the group sets `max_body_bytes`.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
fn default_max_body_bytes() -> u64 {
    DEFAULT_MAX_BODY_BYTES
}

fn default_priority() -> u8 {
    3
}
fn default_floor() -> Duration {
    Duration::from_secs(60)
}
fn default_cost() -> f64 {
    1.0
}
pub(crate) fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeDef {
    pub name: String,
    #[serde(default)]
    pub groups: Vec<GroupDef>,
}

impl GroupDef {
    /// A gated group with cost 1 and no shape, fan-out or forwarding.
    pub fn new(name: &str, path: &str, priority: u8, floor: Duration) -> Self {
        GroupDef {
            name: name.into(),
            path: path.into(),
            api_root: None,
            priority,
            floor,
            cost: 1.0,
            gated: true,
            enabled_when: None,
            shape_from: None,
            item_field: None,
            item_fields: Vec::new(),
            fan_out: None,
            facts: BTreeMap::new(),
            lookups: BTreeMap::new(),
            forward: false,
            values: Vec::new(),
            max_series: default_max_series(),
            keep_body: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

impl TypeDef {
    /// The built-in `http` type: one group `probe`, GET the instance url,
    /// priority 1, floor 5 s, cost 1.
    pub fn builtin_http() -> TypeDef {
        TypeDef {
            name: "http".into(),
            groups: vec![GroupDef::new("probe", "", 1, Duration::from_secs(5))],
        }
    }

    pub fn validate(&self, field: &str) -> Result<(), FieldError> {
        if !valid_name(&self.name) {
            return Err(FieldError::new(format!("{field}.name"), &self.name, NAME_RULE));
        }
        if self.groups.is_empty() {
            return Err(FieldError::new(
                format!("{field}.groups"),
                "[]",
                "a type needs at least one group",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let gf = format!("{field}.groups[{i}]");
            if !valid_name(&g.name) {
                return Err(FieldError::new(format!("{gf}.name"), &g.name, NAME_RULE));
            }
            if !seen.insert(g.name.as_str()) {
                return Err(FieldError::new(
                    format!("{gf}.name"),
                    &g.name,
                    "duplicate group name in this type",
                ));
            }
            if !(1..=4).contains(&g.priority) {
                return Err(FieldError::new(
                    format!("{gf}.priority"),
                    g.priority,
                    "must be 1, 2, 3 or 4",
                ));
            }
            if g.floor.is_zero() {
                return Err(FieldError::new(
                    format!("{gf}.floor"),
                    "0s",
                    "must be greater than zero",
                ));
            }
            if !(g.cost.is_finite() && g.cost > 0.0) {
                return Err(FieldError::new(
                    format!("{gf}.cost"),
                    g.cost,
                    "must be a positive number",
                ));
            }
            if let Some(p) = &g.shape_from
                && !(p.is_empty() || p.starts_with('/'))
            {
                return Err(FieldError::new(
                    format!("{gf}.shape_from"),
                    p,
                    "must be a JSON pointer: empty (the whole body) or starting with '/'",
                ));
            }
            if let Some(root) = &g.api_root
                && let Err(why) = check_api_root(root)
            {
                return Err(FieldError::new(format!("{gf}.api_root"), root, why));
            }
            self.validate_items(g, &gf)?;
            self.validate_facts(g, &gf)?;
            if g.max_series == 0 || g.max_series > 1_000_000 {
                return Err(FieldError::new(
                    format!("{gf}.max_series"),
                    g.max_series,
                    "must be between 1 and 1000000",
                ));
            }
            if g.max_body_bytes == 0 || g.max_body_bytes > 64 * 1024 * 1024 {
                return Err(FieldError::new(
                    format!("{gf}.max_body_bytes"),
                    g.max_body_bytes,
                    "must be between 1 and 67108864 (64 MiB)",
                ));
            }
            let rules = g.compile_values(&self.name, &gf)?;
            self.validate_rule_refs(g, &gf, &rules)?;
        }
        Ok(())
    }

    /// The group named `name` if it learns a shape (`shape_from`).
    fn learned(&self, name: &str) -> Option<&GroupDef> {
        self.groups.iter().find(|o| o.name == name && o.shape_from.is_some())
    }

    /// `item_field`/`item_fields`, `enabled_when`, `fan_out` and the
    /// `{item}`/`{item.FIELD}` placeholders of the path.
    fn validate_items(&self, g: &GroupDef, gf: &str) -> Result<(), FieldError> {
        if let Some(p) = &g.shape_from
            && !(p.is_empty() || p.starts_with('/'))
        {
            return Err(FieldError::new(
                format!("{gf}.shape_from"),
                p,
                "must be a JSON pointer: empty (the whole body) or starting with '/'",
            ));
        }
        if g.item_field.is_some() && g.shape_from.is_none() {
            return Err(FieldError::new(
                format!("{gf}.item_field"),
                g.item_field.as_deref().unwrap_or_default(),
                "needs shape_from",
            ));
        }
        if !g.item_fields.is_empty() {
            let shown = g.item_fields.join(",");
            if g.shape_from.is_none() {
                return Err(FieldError::new(format!("{gf}.item_fields"), shown, "needs shape_from"));
            }
            if g.item_field.is_some() {
                return Err(FieldError::new(
                    format!("{gf}.item_fields"),
                    shown,
                    "items are named by item_field or by item_fields, not both",
                ));
            }
            let mut seen = BTreeSet::new();
            for f in &g.item_fields {
                if !crate::values::valid_label_name(f) {
                    return Err(FieldError::new(
                        format!("{gf}.item_fields"),
                        f,
                        "a field name is [a-zA-Z_][a-zA-Z0-9_]* (the key of each element)",
                    ));
                }
                if !seen.insert(f) {
                    return Err(FieldError::new(format!("{gf}.item_fields"), f, "is listed twice"));
                }
            }
        }
        if let Some(w) = &g.enabled_when
            && self.learned(w).is_none()
        {
            return Err(FieldError::new(
                format!("{gf}.enabled_when"),
                w,
                "must name a group of this type that has shape_from",
            ));
        }
        let (whole, fields) = item_placeholders(&g.path);
        let Some(f) = &g.fan_out else {
            if whole || !fields.is_empty() {
                return Err(FieldError::new(
                    format!("{gf}.path"),
                    &g.path,
                    "{item} is only allowed with fan_out",
                ));
            }
            return Ok(());
        };
        let src = match self.learned(f) {
            None => {
                return Err(FieldError::new(
                    format!("{gf}.fan_out"),
                    f,
                    "must name a group of this type that has shape_from",
                ));
            }
            Some(src) if src.item_field.is_none() && src.item_fields.is_empty() => {
                return Err(FieldError::new(
                    format!("{gf}.fan_out"),
                    f,
                    format!("group {f:?} needs item_field (or item_fields) to name the items"),
                ));
            }
            Some(src) => src,
        };
        if src.item_fields.is_empty() {
            if !fields.is_empty() {
                return Err(FieldError::new(
                    format!("{gf}.path"),
                    &g.path,
                    format!("group {f:?} names its items by one item_field: write {{item}}"),
                ));
            }
            if !whole {
                return Err(FieldError::new(
                    format!("{gf}.path"),
                    &g.path,
                    "a fan_out group's path must contain {item}",
                ));
            }
        } else {
            if whole || fields.is_empty() {
                return Err(FieldError::new(
                    format!("{gf}.path"),
                    &g.path,
                    format!(
                        "group {f:?} has item_fields: the path reads them as {{item.FIELD}} ({})",
                        src.item_fields.join(", ")
                    ),
                ));
            }
            if let Some(bad) = fields.iter().find(|x| !src.item_fields.contains(x)) {
                return Err(FieldError::new(
                    format!("{gf}.path"),
                    &g.path,
                    format!(
                        "{{item.{bad}}}: group {f:?}'s item_fields are {}",
                        src.item_fields.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `facts` and `lookups`: valid names and pointers, each fact and table
    /// given by one group of the type; facts never by a fan-out (they would
    /// be per item), and a table's `@item` fields only by one (reading its
    /// items' fields).
    fn validate_facts(&self, g: &GroupDef, gf: &str) -> Result<(), FieldError> {
        for (name, pointer) in &g.facts {
            let key = format!("{gf}.facts.{name}");
            if !crate::values::valid_label_name(name) {
                return Err(FieldError::new(key, name, "a fact name is [a-zA-Z_][a-zA-Z0-9_]*"));
            }
            if let Err(e) = crate::values::Pointer::parse(pointer) {
                return Err(FieldError::new(key, pointer, e.to_string()));
            }
            if g.fan_out.is_some() {
                return Err(FieldError::new(
                    key,
                    pointer,
                    "a fan_out group cannot give facts (it has one body per item)",
                ));
            }
            if let Some(other) = self
                .groups
                .iter()
                .find(|o| o.name != g.name && o.facts.contains_key(name))
            {
                return Err(FieldError::new(
                    key,
                    pointer,
                    format!(
                        "group {:?} gives fact {name:?} too; one group gives each fact",
                        other.name
                    ),
                ));
            }
        }
        for (name, lookup) in &g.lookups {
            let key = format!("{gf}.lookups.{name}");
            if let Err(e) = lookup.check(name) {
                let key = if e.key.is_empty() {
                    key
                } else {
                    format!("{key}.{}", e.key)
                };
                return Err(FieldError::new(key, e.value, e.message));
            }
            for (field, text) in &lookup.fields {
                let wanted = match text.strip_prefix("@item") {
                    Some("") => None,
                    Some(rest) => match rest.strip_prefix('.') {
                        Some(f) => Some(f),
                        None => continue,
                    },
                    None => continue,
                };
                let k = format!("{key}.fields.{field}");
                let Some(src) = g.fan_out.as_deref() else {
                    return Err(FieldError::new(
                        k,
                        text,
                        "the group has no fan_out, so there is no item",
                    ));
                };
                let have = self.learned(src).map(|o| o.item_fields.as_slice()).unwrap_or_default();
                if let Some(f) = wanted
                    && !have.iter().any(|h| h == f)
                {
                    let why = if have.is_empty() {
                        format!("group {src:?} names its items by one item_field: write @item")
                    } else {
                        format!("group {src:?}'s item_fields are {}", have.join(", "))
                    };
                    return Err(FieldError::new(k, text, format!("@item.{f}: {why}")));
                }
            }
            if let Some(other) = self
                .groups
                .iter()
                .find(|o| o.name != g.name && o.lookups.contains_key(name))
            {
                return Err(FieldError::new(
                    key,
                    name,
                    format!(
                        "group {:?} gives lookup table {name:?} too; one group gives each table",
                        other.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every `@item.FIELD` a rule reads is a field of the items the group
    /// fans out over, every `@fact.NAME` a fact some group gives, and every
    /// `@lookup.TABLE[KEY].FIELD` a field of a table some group gives.
    fn validate_rule_refs(&self, g: &GroupDef, gf: &str, rules: &[Rule]) -> Result<(), FieldError> {
        let item_fields = g
            .fan_out
            .as_deref()
            .and_then(|f| self.learned(f))
            .map(|src| src.item_fields.as_slice())
            .unwrap_or_default();
        for (j, (written, rule)) in g.values.iter().zip(rules).enumerate() {
            for label in &rule.labels {
                let key = format!("{gf}.values[{j}].labels.{}", label.name);
                let text = written.labels.get(&*label.name).map(String::as_str).unwrap_or_default();
                let where_ = format!("(type {}, group {}, rule {j}: {})", self.name, g.name, rule.metric);
                for f in label.template.item_fields() {
                    if !item_fields.iter().any(|x| x == f) {
                        let why = match &g.fan_out {
                            None => "the group has no fan_out, so there is no item".to_string(),
                            Some(src) if item_fields.is_empty() => {
                                format!("group {src:?} names its items by one item_field: write @item")
                            }
                            Some(src) => format!("group {src:?}'s item_fields are {}", item_fields.join(", ")),
                        };
                        return Err(FieldError::new(key, text, format!("@item.{f}: {why} {where_}")));
                    }
                }
                for (t, f) in label.template.lookups() {
                    let Some(table) = self.groups.iter().find_map(|o| o.lookups.get(t)) else {
                        return Err(FieldError::new(
                            key,
                            text,
                            format!(
                                "@lookup.{t}: no group of this type gives that table (lookups = {{ {t} = {{ each = \"\", key = \"/id\", fields = {{ … }} }} }}) {where_}"
                            ),
                        ));
                    };
                    if !table.fields.contains_key(f) {
                        let fields: Vec<&str> = table.fields.keys().map(String::as_str).collect();
                        return Err(FieldError::new(
                            key,
                            text,
                            format!(
                                "@lookup.{t}[…].{f}: table {t:?}'s fields are {} {where_}",
                                fields.join(", ")
                            ),
                        ));
                    }
                }
                for f in label.template.facts() {
                    if !self.groups.iter().any(|o| o.facts.contains_key(f)) {
                        return Err(FieldError::new(
                            key,
                            text,
                            format!(
                                "@fact.{f}: no group of this type gives that fact (facts = {{ {f} = \"/pointer\" }}) {where_}"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether `path` holds `{item}`, and the fields it reads as `{item.FIELD}`.
pub fn item_placeholders(path: &str) -> (bool, Vec<String>) {
    let whole = path.contains("{item}");
    let mut fields = Vec::new();
    let mut rest = path;
    while let Some(i) = rest.find("{item.") {
        let after = &rest[i + "{item.".len()..];
        match after.find('}') {
            Some(end) => {
                fields.push(after[..end].to_string());
                rest = &after[end + 1..];
            }
            None => {
                fields.push(after.to_string());
                break;
            }
        }
    }
    (whole, fields)
}

/// Why `root` cannot be a group's `api_root`: it is an absolute path of
/// plain segments (`/api/v1`), without a trailing slash, query, fragment,
/// placeholder, percent escape or `.`/`..` segment.
pub fn check_api_root(root: &str) -> Result<(), String> {
    if !root.starts_with('/') || root.len() < 2 {
        return Err("must be a path starting with '/' (\"/api/v1\")".into());
    }
    if root.ends_with('/') {
        return Err("must not end with '/'".into());
    }
    if let Some(c) = root
        .chars()
        .find(|c| matches!(c, '?' | '#' | '{' | '}' | '%' | '\\') || c.is_whitespace() || c.is_control())
    {
        return Err(format!("must be plain path segments; {c:?} is not allowed"));
    }
    if root[1..].split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err("must not have empty, '.' or '..' segments".into());
    }
    Ok(())
}

impl GroupDef {
    /// The group's value rules, checked and compiled. An error names the
    /// rule's key under `field` (`types[0].groups[1].values[2].labels.id`)
    /// and, in its message, the type, group and metric.
    pub fn compile_values(&self, type_name: &str, field: &str) -> Result<Vec<Rule>, FieldError> {
        self.values
            .iter()
            .enumerate()
            .map(|(j, rule)| {
                rule.compile().map_err(|e| {
                    FieldError::new(
                        format!("{field}.values[{j}].{}", e.key),
                        e.value,
                        format!(
                            "{} (type {type_name}, group {}, rule {j}: {})",
                            e.message, self.name, rule.metric
                        ),
                    )
                })
            })
            .collect()
    }
}

/// Checks that the rules of every type that feed one metric agree on its
/// kind, help and label names (`types` as configured, in order). The error
/// names both rules.
pub fn check_value_families(types: &[TypeDef]) -> Result<(), FieldError> {
    let mut compiled = Vec::new();
    let mut at = Vec::new();
    for (t, ty) in types.iter().enumerate() {
        for (g, group) in ty.groups.iter().enumerate() {
            let field = format!("types[{t}].groups[{g}]");
            for (j, rule) in group.compile_values(&ty.name, &field)?.into_iter().enumerate() {
                compiled.push(rule);
                at.push((format!("{field}.values[{j}]"), &ty.name, &group.name));
            }
        }
    }
    let refs: Vec<&Rule> = compiled.iter().collect();
    check_families(&refs).map_err(|e| {
        let (first, ft, fg) = &at[e.first];
        let (second, st, sg) = &at[e.second];
        FieldError::new(
            format!("{second}.metric"),
            &e.metric,
            format!(
                "{} (type {st}, group {sg}; the first rule is {first}: type {ft}, group {fg})",
                e.message
            ),
        )
    })
}

/// What a secret shows as wherever it is displayed or returned (API, pages,
/// logs, errors). A URL password or sink header value sent back as exactly
/// this keeps the stored one, so an edit form round-trips without the secret.
pub const HIDDEN: &str = "(hidden)";

pub const NAME_RULE: &str =
    "must be 1-64 characters of letters, digits, '-', '_' or '.', starting with a letter or digit";

/// Names of instances, types, groups and pools: safe in URLs, metric labels and keys.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

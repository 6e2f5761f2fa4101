//! A value rule as written in a type (`[[types.groups.values]]`), and the
//! checked form extraction runs.
//!
//! [`ValueRule`] is the TOML/JSON shape, keys exactly as documented.
//! [`ValueRule::compile`] checks it and gives a [`Rule`]: pointers and
//! templates parsed once, so extraction on the poll path does no parsing
//! and cannot meet a malformed rule.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::pointer::{Pointer, PointerError};
use super::template::{Template, TemplateError};

/// What a rule's samples are, as the exposition's `# TYPE` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    #[default]
    Gauge,
    Counter,
    /// Labels that describe a thing; the value is always 1.
    Info,
    /// One sample per possible state: 1 for the one found, 0 for the rest
    /// (the OpenMetrics StateSet; exposed as a gauge).
    Stateset,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::Info => "info",
            MetricKind::Stateset => "stateset",
        }
    }

    /// The `# TYPE` of the Prometheus text format, which has no info or
    /// state set: both are gauges there.
    pub fn exposition_type(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge | MetricKind::Info | MetricKind::Stateset => "gauge",
        }
    }
}

/// What a `where` filter accepts: one string or a list of them (`where =
/// { "/type" = "qemu" }` or `["qemu", "lxc"]`), or `true`/`false` for a
/// field that must be there (not null) or must not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    Present(bool),
    One(String),
    Many(Vec<String>),
}

/// A compiled `where` filter on one field.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// The field's text is one of these.
    AnyOf(Vec<String>),
    /// The field is there and not null (`true`), or it is not (`false`).
    Present(bool),
}

/// How a text value becomes a number (`parse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeFormat {
    /// `YYYY-MM-DD`: midnight UTC of that day, in Unix seconds.
    Date,
    /// RFC 3339 (`2026-12-02T08:00:00Z`, `…+01:00`, fractions allowed): Unix
    /// seconds.
    Rfc3339,
}

/// How `aggregate` combines the values of the elements that give one
/// series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    Sum,
    /// The arithmetic mean.
    Avg,
    Min,
    Max,
}

impl Aggregate {
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Sum => "sum",
            Aggregate::Avg => "avg",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
        }
    }
}

impl OneOrMany {
    pub(super) fn into_filter(self) -> Filter {
        match self {
            OneOrMany::Present(b) => Filter::Present(b),
            OneOrMany::One(s) => Filter::AnyOf(vec![s]),
            OneOrMany::Many(v) => Filter::AnyOf(v),
        }
    }
}

/// A rule's `value` as written: a pointer (or `@parent/POINTER`, or
/// `@count`), or a sum of fields, divided by another sum when `over` is
/// given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ValueSpec {
    /// A pointer inside the element, or `@count`.
    Text(String),
    /// `{ sum = ["/a", "/b"] }`, `{ sum = ["/lost"], over = ["/total"] }`.
    Sum(SumSpec),
}

/// `value = { sum = [...], over = [...] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SumSpec {
    /// Pointers inside the element to the numbers added.
    pub sum: Vec<String>,
    /// Pointers to the numbers whose sum divides it (none: no division).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub over: Vec<String>,
}

impl std::fmt::Display for ValueSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueSpec::Text(t) => f.write_str(t),
            ValueSpec::Sum(s) if s.over.is_empty() => write!(f, "{{ sum = {:?} }}", s.sum),
            ValueSpec::Sum(s) => write!(f, "{{ sum = {:?}, over = {:?} }}", s.sum, s.over),
        }
    }
}

/// A value rule, as written (`[[types.groups.values]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueRule {
    /// The metric name, exactly as exposed.
    pub metric: String,
    #[serde(default)]
    pub help: String,
    #[serde(default)]
    pub kind: MetricKind,
    /// A pointer to an array or object: one sample (set) per element.
    /// Omitted: the body once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<String>,
    /// A pointer inside each element of `each` to a list (array or
    /// object) walked in turn: one sample (set) per element of it, read as
    /// the element (`where`, `value`, labels); `@parent/POINTER` reads the
    /// element of `each` that holds it (the packet counters of each port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<String>,
    /// Keep the elements whose field (a pointer inside the element) equals
    /// one of the strings, or is there (`true`) or not (`false`).
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub where_: Option<BTreeMap<String, OneOrMany>>,
    /// A pointer inside the element, `@parent/POINTER` (a field of the
    /// element holding a `nested` one), `@count` (the number of elements
    /// kept), or `{ sum = [POINTER, …], over = [POINTER, …] }` (the sum of
    /// fields, divided by the sum of `over` when given). Not used by `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<ValueSpec>,
    /// Label name → a pointer (`/id`), `@key`, `@item`, or a template
    /// (`"{/type}/{/vmid}"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Text values to numbers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub map: BTreeMap<String, f64>,
    /// The number for a text value `map` does not name, or a missing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_default: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// Read a text value as a time (`date` or `rfc3339`): Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse: Option<TimeFormat>,
    /// Label name → the text for a missing label (else the empty label).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub defaults: BTreeMap<String, String>,
    /// Labels whose comma-separated values are sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sorted_lists: Vec<String>,
    /// Label name → a text every sample of the rule carries as it is
    /// (`media = "rj45"`), for a label the body has no field for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fixed_labels: BTreeMap<String, String>,
    /// `stateset`: every state a value can have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// `stateset`: the label that names the state (default `state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_label: Option<String>,
    /// With `value = "@count"`: labels read from each element, one sample
    /// per set of their values, counting the elements that have it
    /// (`count_by = ["status"]`: devices per status). The rule's other
    /// labels read the body, as for a plain count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub count_by: Vec<String>,
    /// Label name → the most characters it keeps (`device_type = 2` makes
    /// a model `MX68` the type `MX`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub truncate: BTreeMap<String, usize>,
    /// Label name → text replacements made in order, each `[FROM, TO]`
    /// (`category = [["&", "_and_"], [" ", "_"]]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replace: BTreeMap<String, Vec<(String, String)>>,
    /// Labels made slugs (after `replace`): lowercase, only letters,
    /// digits and `_`, no `_` twice in a row or at either end; an empty
    /// result takes the label's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slug: Vec<String>,
    /// `sum`, `avg`, `min` or `max`: the elements (of `each`, `nested`,
    /// and of every fan-out item of a poll) whose labels are the same give
    /// one sample, their values combined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<Aggregate>,
    /// Elements that give a series this rule already gave are expected
    /// (a list that repeats a thing): the first is kept, and the others
    /// are dropped without being counted as `duplicate`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_first: bool,
}

/// A rule that failed its check: the key inside the rule and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {message}")]
pub struct RuleError {
    /// The key inside the rule (`labels.id`, `where./type`, `metric`).
    pub key: String,
    pub value: String,
    pub message: String,
}

impl RuleError {
    fn new(key: impl Into<String>, value: impl std::fmt::Display, message: impl Into<String>) -> Self {
        RuleError {
            key: key.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }
}

/// Where a sample's number comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSource {
    /// A field inside the element.
    Field(Pointer),
    /// A field of the element of `each` that holds a `nested` element
    /// (`@parent/POINTER`).
    ParentField(Pointer),
    /// The number of elements `each` and `where` keep.
    Count,
    /// Always 1 (`info`).
    One,
    /// The sum of fields inside the element, divided by the sum of `over`
    /// when it is not empty.
    Sum { terms: Vec<Pointer>, over: Vec<Pointer> },
}

/// One label of a compiled rule.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelRule {
    pub name: Arc<str>,
    pub template: Template,
    /// The text for a missing value (else "").
    pub default: Option<String>,
    /// Sort its comma-separated values.
    pub sorted: bool,
    /// Read from each element of a count (`count_by`), not from the body.
    pub per_element: bool,
    /// Keep at most this many characters (`truncate`).
    pub max_chars: Option<usize>,
    /// Text replacements made in order (`replace`).
    pub replace: Box<[(Box<str>, Box<str>)]>,
    /// Made a slug after the replacements (`slug`).
    pub slug: bool,
}

/// A checked rule, ready to run on bodies.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub metric: Arc<str>,
    pub help: Arc<str>,
    pub kind: MetricKind,
    pub each: Option<Pointer>,
    /// The list inside each element of `each` walked instead of it.
    pub nested: Option<Pointer>,
    /// (field, filter), all of which must hold.
    pub filters: Vec<(Pointer, Filter)>,
    pub value: ValueSource,
    /// In label-name order.
    pub labels: Vec<LabelRule>,
    pub map: BTreeMap<String, f64>,
    pub map_default: Option<f64>,
    pub scale: f64,
    pub parse: Option<TimeFormat>,
    pub states: Vec<Arc<str>>,
    pub state_label: Arc<str>,
    /// Elements with the same labels give one sample, combined so.
    pub aggregate: Option<Aggregate>,
    /// A series the rule already gave is dropped without being counted.
    pub keep_first: bool,
}

impl Rule {
    /// The label names every sample of this rule has, sorted (the state
    /// label included for a state set).
    pub fn label_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.labels.iter().map(|l| &*l.name).collect();
        if self.kind == MetricKind::Stateset {
            names.push(&self.state_label);
        }
        names.sort_unstable();
        names
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
pub fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved by Prometheus).
pub fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

/// Labels Pollster sets itself on every sample.
pub const RESERVED_LABELS: &[&str] = &["instance"];

fn check_label_name(key: &str, name: &str) -> Result<(), RuleError> {
    if !valid_label_name(name) {
        return Err(RuleError::new(
            key,
            name,
            "is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)",
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(RuleError::new(
            key,
            name,
            "is set by Pollster (the instance's name); choose another label name",
        ));
    }
    Ok(())
}

fn pointer(key: &str, text: &str) -> Result<Pointer, RuleError> {
    Pointer::parse(text).map_err(|e: PointerError| RuleError::new(key, text, e.to_string()))
}

/// A compiled rule's `each`, `nested` and `where` filters.
type Head = (Option<Pointer>, Option<Pointer>, Vec<(Pointer, Filter)>);

impl ValueRule {
    /// The name, help, `each`, `nested` and `where`, checked.
    fn compile_head(&self) -> Result<Head, RuleError> {
        if !valid_metric_name(&self.metric) {
            return Err(RuleError::new(
                "metric",
                &self.metric,
                "is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
            ));
        }
        if self.metric.starts_with("pollster_") {
            return Err(RuleError::new(
                "metric",
                &self.metric,
                "names starting with pollster_ are Pollster's own metrics",
            ));
        }
        if self.kind == MetricKind::Counter && !self.metric.ends_with("_total") {
            return Err(RuleError::new(
                "metric",
                &self.metric,
                "a counter's name ends in _total",
            ));
        }
        if self.help.contains('\n') {
            return Err(RuleError::new("help", &self.help, "must be one line"));
        }
        let each = self.each.as_deref().map(|p| pointer("each", p)).transpose()?;
        let nested = self.nested.as_deref().map(|p| pointer("nested", p)).transpose()?;
        if let (Some(n), None) = (&self.nested, &each) {
            return Err(RuleError::new(
                "nested",
                n,
                "walks a list inside each element of `each`; set each",
            ));
        }

        let mut filters = Vec::new();
        if let Some(w) = &self.where_ {
            if w.is_empty() {
                return Err(RuleError::new(
                    "where",
                    "{}",
                    "names no field; omit it to keep every element",
                ));
            }
            for (field, accepted) in w {
                let key = format!("where.{field}");
                let filter = accepted.clone().into_filter();
                if filter == Filter::AnyOf(Vec::new()) {
                    return Err(RuleError::new(key, "[]", "lists no value, so it would keep nothing"));
                }
                filters.push((pointer(&key, field)?, filter));
            }
        }
        Ok((each, nested, filters))
    }

    /// `value`, checked.
    fn compile_value(&self, each: &Option<Pointer>, nested: &Option<Pointer>) -> Result<ValueSource, RuleError> {
        let value = match (self.kind, &self.value) {
            (MetricKind::Info | MetricKind::Stateset, Some(v @ ValueSpec::Sum(_))) => {
                return Err(RuleError::new(
                    "value",
                    v,
                    format!("a {} has no number to sum", self.kind.as_str()),
                ));
            }
            (_, Some(ValueSpec::Sum(s))) => {
                if s.sum.is_empty() {
                    return Err(RuleError::new("value.sum", "[]", "lists no field to add"));
                }
                let terms = s
                    .sum
                    .iter()
                    .map(|p| pointer("value.sum", p))
                    .collect::<Result<Vec<_>, _>>()?;
                let over = s
                    .over
                    .iter()
                    .map(|p| pointer("value.over", p))
                    .collect::<Result<Vec<_>, _>>()?;
                ValueSource::Sum { terms, over }
            }
            _ => self.compile_text_value()?,
        };
        if matches!(value, ValueSource::Sum { .. }) && (!self.map.is_empty() || self.parse.is_some()) {
            return Err(RuleError::new(
                if self.map.is_empty() { "parse" } else { "map" },
                self.value.as_ref().map(ToString::to_string).unwrap_or_default(),
                "reads a text value; a sum adds numbers",
            ));
        }
        if matches!(value, ValueSource::Count) && each.is_none() {
            return Err(RuleError::new(
                "value",
                "@count",
                "counts the elements of `each`; set each",
            ));
        }
        if let (ValueSource::ParentField(p), None) = (&value, nested) {
            return Err(RuleError::new(
                "value",
                format!("@parent{p}"),
                "@parent reads the element of `each` that holds a `nested` one; set nested",
            ));
        }
        if let Some(a) = self.aggregate {
            let why = match (&value, self.kind) {
                (_, MetricKind::Info | MetricKind::Stateset) => {
                    Some(format!("a {} has no number to combine", self.kind.as_str()))
                }
                (ValueSource::Count, _) => Some(
                    "@count already gives one sample for the elements; aggregate combines their values".to_string(),
                ),
                _ if each.is_none() => Some("combines the elements of `each`; set each".to_string()),
                _ => None,
            };
            if let Some(why) = why {
                return Err(RuleError::new("aggregate", a.as_str(), why));
            }
        }
        Ok(value)
    }

    /// `value` as a pointer, `@count` or nothing.
    fn compile_text_value(&self) -> Result<ValueSource, RuleError> {
        let text = match &self.value {
            Some(ValueSpec::Text(t)) => Some(t.as_str()),
            _ => None,
        };
        Ok(match (self.kind, text) {
            (MetricKind::Info, None) => ValueSource::One,
            (MetricKind::Info, Some(v)) => {
                return Err(RuleError::new(
                    "value",
                    v,
                    "an info metric's value is always 1; remove it",
                ));
            }
            (_, None) => return Err(RuleError::new("value", "(missing)", "a pointer or @count is required")),
            (MetricKind::Stateset, Some("@count")) => {
                return Err(RuleError::new(
                    "value",
                    "@count",
                    "a state set reads its state from a field",
                ));
            }
            (_, Some("@count")) => ValueSource::Count,
            (_, Some(v)) if v.starts_with("@parent/") => {
                ValueSource::ParentField(pointer("value", &v["@parent".len()..])?)
            }
            (_, Some(v)) => ValueSource::Field(pointer("value", v)?),
        })
    }
}

impl ValueRule {
    /// Checks the rule and parses its pointers and templates.
    pub fn compile(&self) -> Result<Rule, RuleError> {
        let (each, nested, filters) = self.compile_head()?;
        let value = self.compile_value(&each, &nested)?;

        if !self.map.is_empty() && matches!(self.kind, MetricKind::Counter | MetricKind::Stateset) {
            return Err(RuleError::new(
                "map",
                format!("{} entries", self.map.len()),
                format!("a {} takes its value as given; map is for gauges", self.kind.as_str()),
            ));
        }
        for (k, v) in &self.map {
            if !v.is_finite() {
                return Err(RuleError::new(format!("map.{k}"), v, "must be a finite number"));
            }
        }
        if let Some(d) = self.map_default {
            if !d.is_finite() {
                return Err(RuleError::new("map_default", d, "must be a finite number"));
            }
            if matches!(self.kind, MetricKind::Counter | MetricKind::Stateset | MetricKind::Info) {
                return Err(RuleError::new("map_default", d, "is for gauges"));
            }
        }
        let scale = self.scale.unwrap_or(1.0);
        if !scale.is_finite() || scale == 0.0 {
            return Err(RuleError::new("scale", scale, "must be a finite number other than 0"));
        }
        if self.scale.is_some() && matches!(self.kind, MetricKind::Info | MetricKind::Stateset) {
            return Err(RuleError::new(
                "scale",
                scale,
                format!("a {} has no number to scale", self.kind.as_str()),
            ));
        }

        if let Some(f) = self.parse {
            let text = match f {
                TimeFormat::Date => "date",
                TimeFormat::Rfc3339 => "rfc3339",
            };
            if !matches!(value, ValueSource::Field(_) | ValueSource::ParentField(_))
                || !matches!(self.kind, MetricKind::Gauge | MetricKind::Counter)
            {
                return Err(RuleError::new(
                    "parse",
                    text,
                    "reads the value field of a gauge or counter as a time",
                ));
            }
            if !self.map.is_empty() || self.map_default.is_some() {
                return Err(RuleError::new(
                    "parse",
                    text,
                    "a value is read as a time or through map, not both",
                ));
            }
        }

        let state_label: Arc<str> = Arc::from(self.state_label.as_deref().unwrap_or("state"));
        if self.kind == MetricKind::Stateset {
            if self.states.is_empty() {
                return Err(RuleError::new(
                    "states",
                    "[]",
                    "a state set lists every state it can take",
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            for s in &self.states {
                if !seen.insert(s) {
                    return Err(RuleError::new("states", s, "is listed twice"));
                }
            }
            check_label_name("state_label", &state_label)?;
            if self.labels.contains_key(&*state_label) {
                return Err(RuleError::new(
                    format!("labels.{state_label}"),
                    &*state_label,
                    "is the state label of this state set",
                ));
            }
        } else {
            if !self.states.is_empty() {
                return Err(RuleError::new(
                    "states",
                    self.states.join(","),
                    "is only for kind = \"stateset\"",
                ));
            }
            if let Some(l) = &self.state_label {
                return Err(RuleError::new("state_label", l, "is only for kind = \"stateset\""));
            }
        }

        for name in self.defaults.keys() {
            if !self.labels.contains_key(name) {
                return Err(RuleError::new(
                    format!("defaults.{name}"),
                    name,
                    "names no label of this rule",
                ));
            }
        }
        for name in &self.sorted_lists {
            if !self.labels.contains_key(name) {
                return Err(RuleError::new("sorted_lists", name, "names no label of this rule"));
            }
        }
        if !self.count_by.is_empty() && !matches!(value, ValueSource::Count) {
            return Err(RuleError::new(
                "count_by",
                self.count_by.join(","),
                "splits a count: set value = \"@count\"",
            ));
        }
        for (i, name) in self.count_by.iter().enumerate() {
            if !self.labels.contains_key(name) {
                return Err(RuleError::new(
                    "count_by",
                    name,
                    "names no label of this rule (fixed_labels are the same for every element)",
                ));
            }
            if self.count_by[..i].contains(name) {
                return Err(RuleError::new("count_by", name, "is listed twice"));
            }
        }
        for (name, n) in &self.truncate {
            let key = format!("truncate.{name}");
            if !self.labels.contains_key(name) {
                return Err(RuleError::new(key, n, "names no label of this rule"));
            }
            if *n == 0 {
                return Err(RuleError::new(key, n, "keeps no character; the label would be empty"));
            }
        }
        for (name, pairs) in &self.replace {
            let key = format!("replace.{name}");
            if !self.labels.contains_key(name) {
                return Err(RuleError::new(
                    key,
                    format!("{} pairs", pairs.len()),
                    "names no label of this rule",
                ));
            }
            if pairs.is_empty() {
                return Err(RuleError::new(key, "[]", "lists no replacement"));
            }
            if let Some((from, _)) = pairs.iter().find(|(from, _)| from.is_empty()) {
                return Err(RuleError::new(
                    key,
                    format!("{from:?}"),
                    "an empty text has nothing to replace",
                ));
            }
        }
        for (i, name) in self.slug.iter().enumerate() {
            if !self.labels.contains_key(name) {
                return Err(RuleError::new("slug", name, "names no label of this rule"));
            }
            if self.slug[..i].contains(name) {
                return Err(RuleError::new("slug", name, "is listed twice"));
            }
        }
        if self.keep_first && self.aggregate.is_some() {
            return Err(RuleError::new(
                "keep_first",
                "true",
                "aggregate already gives each series once; remove keep_first",
            ));
        }
        let mut labels = Vec::with_capacity(self.labels.len());
        for (name, text) in &self.labels {
            let key = format!("labels.{name}");
            check_label_name(&key, name)?;
            let template =
                Template::parse(text).map_err(|e: TemplateError| RuleError::new(&key, text, e.to_string()))?;
            if template.uses_key() && each.is_none() {
                return Err(RuleError::new(
                    &key,
                    text,
                    "@key names an object key of `each`; set each",
                ));
            }
            if template.uses_parent() && nested.is_none() {
                return Err(RuleError::new(
                    &key,
                    text,
                    "@parent reads the element of `each` that holds a `nested` one; set nested",
                ));
            }
            let per_element = self.count_by.contains(name);
            if template.uses_parent() && matches!(value, ValueSource::Count) && !per_element {
                return Err(RuleError::new(
                    &key,
                    text,
                    "@count makes one sample for all elements, so there is no one parent to read (unless the label is in count_by)",
                ));
            }
            if template.uses_key() && matches!(value, ValueSource::Count) && !per_element {
                return Err(RuleError::new(
                    &key,
                    text,
                    "@count makes one sample for all elements, so there is no one key to name (unless the label is in count_by)",
                ));
            }
            labels.push(LabelRule {
                name: Arc::from(name.as_str()),
                template,
                default: self.defaults.get(name).cloned(),
                sorted: self.sorted_lists.contains(name),
                per_element,
                max_chars: self.truncate.get(name).copied(),
                replace: self
                    .replace
                    .get(name)
                    .map(|pairs| {
                        pairs
                            .iter()
                            .map(|(f, t)| (f.as_str().into(), t.as_str().into()))
                            .collect()
                    })
                    .unwrap_or_default(),
                slug: self.slug.contains(name),
            });
        }

        for (name, text) in &self.fixed_labels {
            let key = format!("fixed_labels.{name}");
            check_label_name(&key, name)?;
            if self.labels.contains_key(name) {
                return Err(RuleError::new(&key, text, "is also in labels; a label has one source"));
            }
            if self.kind == MetricKind::Stateset && *name == *state_label {
                return Err(RuleError::new(&key, text, "is the state label of this state set"));
            }
            if text.is_empty() {
                return Err(RuleError::new(
                    &key,
                    text,
                    "is empty (a label that is empty is left out)",
                ));
            }
            labels.push(LabelRule {
                name: Arc::from(name.as_str()),
                template: Template::literal(text),
                default: None,
                sorted: false,
                per_element: false,
                max_chars: None,
                replace: Box::default(),
                slug: false,
            });
        }
        // Labels in name order, fixed ones among the others.
        labels.sort_by(|a, b| a.name.cmp(&b.name));

        Ok(Rule {
            metric: Arc::from(self.metric.as_str()),
            help: Arc::from(self.help.as_str()),
            kind: self.kind,
            each,
            nested,
            filters,
            value,
            labels,
            map: self.map.clone(),
            map_default: self.map_default,
            scale,
            parse: self.parse,
            states: self.states.iter().map(|s| Arc::from(s.as_str())).collect(),
            state_label,
            aggregate: self.aggregate,
            keep_first: self.keep_first,
        })
    }
}

/// A clash between two rules that feed one metric: they must agree on its
/// kind, help and label names.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("metric {metric}: {message}")]
pub struct ClashError {
    pub metric: String,
    /// Index of the first rule (in the order given) and of the one that clashes.
    pub first: usize,
    pub second: usize,
    pub message: String,
}

/// Checks that rules feeding the same metric agree: one kind, one help,
/// one `aggregate` (or none), the same label names. `rules` are every rule of the configuration, in
/// order (several groups and types may feed one metric).
pub fn check_families(rules: &[&Rule]) -> Result<(), ClashError> {
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, r) in rules.iter().enumerate() {
        let Some(&j) = first.get(&*r.metric) else {
            first.insert(&r.metric, i);
            continue;
        };
        let f = rules[j];
        let clash = |message: String| ClashError {
            metric: r.metric.to_string(),
            first: j,
            second: i,
            message,
        };
        if f.kind != r.kind {
            return Err(clash(format!(
                "kind {} here, {} in the first rule",
                r.kind.as_str(),
                f.kind.as_str()
            )));
        }
        if f.help != r.help {
            return Err(clash(format!("help {:?} here, {:?} in the first rule", r.help, f.help)));
        }
        if f.aggregate != r.aggregate {
            let text = |a: Option<Aggregate>| a.map_or("none", Aggregate::as_str);
            return Err(clash(format!(
                "aggregate {} here, {} in the first rule (the series one rule combines, another would give again)",
                text(r.aggregate),
                text(f.aggregate)
            )));
        }
        if f.label_names() != r.label_names() {
            return Err(clash(format!(
                "labels [{}] here, [{}] in the first rule",
                r.label_names().join(", "),
                f.label_names().join(", ")
            )));
        }
    }
    Ok(())
}

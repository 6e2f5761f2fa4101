//! Running a group's rules on one polled body: pure, no I/O, no clock.
//!
//! A sample that cannot be made is skipped and counted by reason; it never
//! fails the poll. A missing label never skips a sample (it takes the
//! rule's default, else the empty label); a fact the instance has not
//! learned yet does (counted as `missing`).

use rustc_hash::{FxHashMap, FxHasher};
use serde_json::Value;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::pointer::Pointer;
use super::rule::{Aggregate, Filter, MetricKind, Rule, TimeFormat, ValueSource};
use super::template::{Context, Rendered};
use super::text::push_text;

/// Series a group keeps from one body unless it says otherwise (`max_series`).
pub const DEFAULT_MAX_SERIES: usize = 10_000;

/// One sample: a metric, its labels (sorted by name; the instance label is
/// added where samples are served) and its number.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub metric: Arc<str>,
    pub labels: Vec<(Arc<str>, String)>,
    pub value: f64,
}

/// A sample's labels, sorted by name.
type Labels = Vec<(Arc<str>, String)>;

/// Why a sample was not made (`pollster_values_errors_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// The value (or the `each` container) is not in the body.
    Missing,
    /// The value is not a number, a boolean or a numeric string.
    NotNumber,
    /// A text value that `map` does not name, with no `map_default`.
    Unmapped,
    /// Beyond the group's `max_series`.
    Limit,
    /// Another rule (or element) already gave these labels.
    Duplicate,
}

impl SkipReason {
    pub const ALL: [SkipReason; 5] = [
        SkipReason::Missing,
        SkipReason::NotNumber,
        SkipReason::Unmapped,
        SkipReason::Limit,
        SkipReason::Duplicate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Missing => "missing",
            SkipReason::NotNumber => "not_number",
            SkipReason::Unmapped => "unmapped",
            SkipReason::Limit => "limit",
            SkipReason::Duplicate => "duplicate",
        }
    }
}

/// The series made so far, to find a duplicate without copying labels.
/// Up to [`Seen::SCAN`] samples a scan is cheapest; beyond, a table from a
/// series' 64-bit hash to the first sample with that hash, and the rare
/// samples whose hash another series already had.
#[derive(Debug, Default)]
struct Seen {
    by_hash: FxHashMap<u64, u32>,
    collided: Vec<u32>,
}

impl Seen {
    /// Samples below which duplicates are found by comparing with each.
    const SCAN: usize = 16;

    fn hash(metric: &str, labels: &[(Arc<str>, String)]) -> u64 {
        let mut h = FxHasher::default();
        metric.hash(&mut h);
        labels.hash(&mut h);
        h.finish()
    }

    /// Records `samples[at]`, which is being added, unless an earlier
    /// sample is the same series: then its index.
    fn insert(
        &mut self,
        samples: &[Sample],
        metric: &Arc<str>,
        labels: &[(Arc<str>, String)],
        at: usize,
    ) -> Result<(), usize> {
        let same = |s: &Sample| (Arc::ptr_eq(&s.metric, metric) || s.metric == *metric) && s.labels == labels;
        if at < Self::SCAN {
            return match samples[..at].iter().position(same) {
                Some(i) => Err(i),
                None => Ok(()),
            };
        }
        if self.by_hash.is_empty() {
            // Crossing the scan limit: index what is there.
            for (i, s) in samples[..at].iter().enumerate() {
                match self.by_hash.entry(Self::hash(&s.metric, &s.labels)) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(i as u32);
                    }
                    std::collections::hash_map::Entry::Occupied(_) => self.collided.push(i as u32),
                }
            }
        }
        match self.by_hash.entry(Self::hash(metric, labels)) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(at as u32);
                Ok(())
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                let first = *o.get() as usize;
                if same(&samples[first]) {
                    return Err(first);
                }
                if let Some(&i) = self.collided.iter().find(|&&i| same(&samples[i as usize])) {
                    return Err(i as usize);
                }
                self.collided.push(at as u32);
                Ok(())
            }
        }
    }
}

/// What a group's rules made of one body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extraction {
    pub samples: Vec<Sample>,
    /// Skipped samples by (metric, reason).
    pub skipped: BTreeMap<(Arc<str>, SkipReason), u64>,
    /// Some samples were skipped because a label names a fact the instance
    /// has not learned yet (counted as `missing`): running the rules again
    /// once it has gives them.
    pub waiting_for_facts: bool,
}

impl Extraction {
    fn skip(&mut self, metric: &Arc<str>, reason: SkipReason) {
        *self.skipped.entry((metric.clone(), reason)).or_default() += 1;
    }

    /// How many samples were skipped for `reason`, over every metric.
    pub fn skipped_for(&self, reason: SkipReason) -> u64 {
        self.skipped
            .iter()
            .filter(|((_, r), _)| *r == reason)
            .map(|(_, n)| n)
            .sum()
    }
}

/// Runs `rules` on `body` (the body of fan-out item `item`, if any),
/// keeping at most `max_series` samples.
pub fn extract(rules: &[Rule], body: &Value, item: Option<&str>, max_series: usize) -> Extraction {
    let mut x = Extractor::new(max_series);
    x.feed(rules, body, item);
    x.finish()
}

/// One series of `aggregate` rules, being combined.
#[derive(Debug)]
struct Pending {
    metric: Arc<str>,
    labels: Labels,
    how: Aggregate,
    /// The sum, the least or the greatest value so far.
    acc: f64,
    /// How many values went in.
    n: u64,
}

/// The series of `aggregate` rules, in the order they first appear, and
/// where each is by metric and labels. Empty (no allocation) for rules
/// without `aggregate`.
#[derive(Debug, Default)]
struct Combined {
    pending: Vec<Pending>,
    at: FxHashMap<(Arc<str>, Labels), usize>,
}

impl Combined {
    /// Adds one element's value to the series of `labels`.
    fn add(&mut self, rule: &Rule, how: Aggregate, labels: Labels, value: f64) {
        match self.at.entry((rule.metric.clone(), labels)) {
            std::collections::hash_map::Entry::Occupied(o) => {
                let p = &mut self.pending[*o.get()];
                p.acc = match p.how {
                    Aggregate::Sum | Aggregate::Avg => p.acc + value,
                    Aggregate::Min => p.acc.min(value),
                    Aggregate::Max => p.acc.max(value),
                };
                p.n += 1;
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                self.pending.push(Pending {
                    metric: rule.metric.clone(),
                    labels: v.key().1.clone(),
                    how,
                    acc: value,
                    n: 1,
                });
                v.insert(self.pending.len() - 1);
            }
        }
    }
}

/// Runs a group's rules on several bodies (a fan-out's items) as one
/// extraction: `max_series` bounds the samples of them all, a series
/// another item already gave is a duplicate, and the series of
/// `aggregate` rules combine the elements of every item.
#[derive(Debug)]
pub struct Extractor {
    out: Extraction,
    seen: Seen,
    max_series: usize,
    combined: Combined,
}

impl Extractor {
    pub fn new(max_series: usize) -> Self {
        Extractor {
            out: Extraction::default(),
            seen: Seen::default(),
            max_series,
            combined: Combined::default(),
        }
    }

    /// Runs `rules` on one body (`item`: the fan-out item it answers).
    pub fn feed(&mut self, rules: &[Rule], body: &Value, item: Option<&str>) {
        self.feed_in(
            rules,
            body,
            Context {
                item,
                ..Context::default()
            },
        );
    }

    /// Runs `rules` on one body, with the item, item fields and facts of
    /// `cx` (its `key` is ignored: each element brings its own).
    pub fn feed_in(&mut self, rules: &[Rule], body: &Value, cx: Context<'_>) {
        let mut sink = Sink {
            out: &mut self.out,
            seen: &mut self.seen,
            max_series: self.max_series,
            combined: &mut self.combined,
        };
        for rule in rules {
            run_rule(rule, body, cx, &mut sink);
        }
    }

    /// The samples, the combined series of `aggregate` rules last (in the
    /// order they first appeared).
    pub fn finish(mut self) -> Extraction {
        let mut sink = Sink {
            out: &mut self.out,
            seen: &mut self.seen,
            max_series: self.max_series,
            combined: &mut Combined::default(),
        };
        for p in std::mem::take(&mut self.combined.pending) {
            let value = match p.how {
                Aggregate::Avg => p.acc / p.n as f64,
                Aggregate::Sum | Aggregate::Min | Aggregate::Max => p.acc,
            };
            if value.is_finite() {
                sink.push(&p.metric, p.labels, value, None);
            } else {
                sink.out.skip(&p.metric, SkipReason::NotNumber);
            }
        }
        self.out
    }
}

/// Where a rule's samples go.
struct Sink<'a> {
    out: &'a mut Extraction,
    seen: &'a mut Seen,
    max_series: usize,
    combined: &'a mut Combined,
}

impl Sink<'_> {
    /// Adds a sample unless it is beyond `max_series` or a series already
    /// given: counted as a `duplicate`, unless the earlier sample is at
    /// `quiet_from` or after (a `keep_first` rule's own).
    fn push(&mut self, metric: &Arc<str>, labels: Labels, value: f64, quiet_from: Option<usize>) {
        if self.out.samples.len() >= self.max_series {
            self.out.skip(metric, SkipReason::Limit);
            return;
        }
        if let Err(earlier) = self
            .seen
            .insert(&self.out.samples, metric, &labels, self.out.samples.len())
        {
            if quiet_from.is_none_or(|from| earlier < from) {
                self.out.skip(metric, SkipReason::Duplicate);
            }
            return;
        }
        self.out.samples.push(Sample {
            metric: metric.clone(),
            labels,
            value,
        });
    }

    /// A sample whose labels name a fact the instance has not learned yet.
    fn waiting(&mut self, metric: &Arc<str>) {
        self.out.skip(metric, SkipReason::Missing);
        self.out.waiting_for_facts = true;
    }
}

/// One iterator or the other, as one type.
enum Either<A, B> {
    Left(A),
    Right(B),
}

impl<A: Iterator, B: Iterator<Item = A::Item>> Iterator for Either<A, B> {
    type Item = A::Item;

    fn next(&mut self) -> Option<A::Item> {
        match self {
            Either::Left(a) => a.next(),
            Either::Right(b) => b.next(),
        }
    }
}

fn run_rule(rule: &Rule, body: &Value, cx: Context<'_>, sink: &mut Sink<'_>) {
    // The elements, without collecting them: most rules read one body or
    // one array, and a poll runs every rule.
    let (array, object): (&[Value], Option<&serde_json::Map<String, Value>>) = match &rule.each {
        None => (std::slice::from_ref(body), None),
        Some(p) => match p.resolve(body) {
            Some(Value::Array(items)) => (items.as_slice(), None),
            Some(Value::Object(map)) => (&[], Some(map)),
            _ => {
                sink.out.skip(&rule.metric, SkipReason::Missing);
                return;
            }
        },
    };
    let outer = array.iter().map(|v| (None, v)).chain(
        object
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (Some(k.as_str()), v))),
    );
    // With `nested`, the elements are those of the list inside each
    // element of `each` (an element without one holds none), each with the
    // element that holds it as its parent.
    // One of two iterator types, without a box: this runs for every rule
    // of every poll, and a boxed iterator cost an allocation and a dynamic
    // call per element (3 % of a poll's instructions with 10 rules).
    let elements = match &rule.nested {
        None => Either::Left(outer.map(|(k, v)| (k, v, None))),
        Some(p) => Either::Right(outer.flat_map(move |(_, parent)| {
            let (inner, map): (&[Value], Option<&serde_json::Map<String, Value>>) = match p.resolve(parent) {
                Some(Value::Array(items)) => (items.as_slice(), None),
                Some(Value::Object(map)) => (&[], Some(map)),
                _ => (&[], None),
            };
            inner.iter().map(move |v| (None, v, Some(parent))).chain(
                map.into_iter()
                    .flat_map(move |m| m.iter().map(move |(k, v)| (Some(k.as_str()), v, Some(parent)))),
            )
        })),
    };
    let elements = elements.filter(|(_, element, _)| keep(rule, element));

    // A `keep_first` rule's own samples start here.
    let quiet_from = rule.keep_first.then_some(sink.out.samples.len());
    let emit = |labels: Option<Labels>, value: f64, sink: &mut Sink<'_>| match labels {
        Some(labels) => sink.push(&rule.metric, labels, value, quiet_from),
        None => sink.waiting(&rule.metric),
    };

    if rule.value == ValueSource::Count {
        if !rule.labels.iter().any(|l| l.per_element) {
            let n = elements.count();
            let labels = labels_of(rule, body, body, Context { key: None, ..cx });
            emit(labels, n as f64 * rule.scale, sink);
            return;
        }
        // `count_by`: one count per set of the per-element labels, in the
        // order the sets first appear.
        let mut counts: Vec<(Labels, u64)> = Vec::new();
        let mut at: FxHashMap<Labels, usize> = FxHashMap::default();
        for (key, element, parent) in elements {
            let Some(labels) = labels_of(rule, element, body, Context { key, parent, ..cx }) else {
                sink.waiting(&rule.metric);
                continue;
            };
            match at.get(&labels) {
                Some(&i) => counts[i].1 += 1,
                None => {
                    at.insert(labels.clone(), counts.len());
                    counts.push((labels, 1));
                }
            }
        }
        for (labels, n) in counts {
            emit(Some(labels), n as f64 * rule.scale, sink);
        }
        return;
    }
    for (key, element, parent) in elements {
        let cx = Context { key, parent, ..cx };
        match rule.kind {
            MetricKind::Stateset => {
                let found_at = match &rule.value {
                    ValueSource::Field(p) => p.resolve(element),
                    ValueSource::ParentField(p) => parent.and_then(|pa| p.resolve(pa)),
                    _ => continue,
                };
                let mut found = String::new();
                let has = match found_at {
                    None | Some(Value::Null) => false,
                    Some(v) => {
                        push_text(v, &mut found);
                        true
                    }
                };
                let Some(labels) = labels_of(rule, element, element, cx) else {
                    sink.waiting(&rule.metric);
                    continue;
                };
                for state in &rule.states {
                    let mut l = labels.clone();
                    let at = l.partition_point(|(n, _)| **n < *rule.state_label);
                    l.insert(at, (rule.state_label.clone(), state.to_string()));
                    let on = has && found == **state;
                    emit(Some(l), if on { 1.0 } else { 0.0 }, sink);
                }
            }
            _ => {
                let value = match &rule.value {
                    ValueSource::One => Ok(1.0),
                    ValueSource::Field(p) => number(rule, p.resolve(element)),
                    ValueSource::ParentField(p) => number(rule, parent.and_then(|pa| p.resolve(pa))),
                    ValueSource::Sum { terms, over } => sum(rule, terms, over, element),
                    ValueSource::Count => unreachable!("handled above"),
                };
                match (value, rule.aggregate) {
                    (Ok(v), None) => emit(labels_of(rule, element, element, cx), v, sink),
                    (Ok(v), Some(how)) => match labels_of(rule, element, element, cx) {
                        Some(labels) => sink.combined.add(rule, how, labels, v),
                        None => sink.waiting(&rule.metric),
                    },
                    (Err(reason), _) => sink.out.skip(&rule.metric, reason),
                }
            }
        }
    }
}

/// Whether an element passes every `where` filter.
fn keep(rule: &Rule, element: &Value) -> bool {
    passes(&rule.filters, element)
}

/// Whether an element passes every filter (a rule's or a lookup table's
/// `where`).
pub(super) fn passes(filters: &[(Pointer, Filter)], element: &Value) -> bool {
    filters.iter().all(|(field, filter)| {
        let found = match field.resolve(element) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        };
        match (filter, found) {
            (Filter::Present(want), v) => v.is_some() == *want,
            (Filter::AnyOf(_), None) => false,
            (Filter::AnyOf(accepted), Some(v)) => {
                let mut text = String::new();
                push_text(v, &mut text);
                accepted.contains(&text)
            }
        }
    })
}

/// The rule's labels for one element, sorted by name; `None` when a label
/// names a fact the instance has not learned. A count's labels read
/// `body`, except those of `count_by`, which read the element.
fn labels_of(rule: &Rule, element: &Value, body: &Value, cx: Context<'_>) -> Option<Vec<(Arc<str>, String)>> {
    let mut labels = Vec::with_capacity(rule.labels.len() + 1);
    for l in &rule.labels {
        let mut text = String::new();
        let read = if rule.value == ValueSource::Count && !l.per_element {
            body
        } else {
            element
        };
        match l.template.render(read, cx, &mut text) {
            Rendered::Done if l.replace.is_empty() && !l.slug => {}
            Rendered::Done => {
                rewrite(l, &mut text);
                if text.is_empty()
                    && let Some(d) = &l.default
                {
                    text.push_str(d);
                }
            }
            Rendered::NoFact => return None,
            Rendered::Missing => {
                text.clear();
                if let Some(d) = &l.default {
                    text.push_str(d);
                }
            }
        }
        if let Some(n) = l.max_chars
            && let Some((cut, _)) = text.char_indices().nth(n)
        {
            text.truncate(cut);
        }
        if l.sorted && text.contains(',') {
            let mut parts: Vec<&str> = text.split(',').collect();
            parts.sort_unstable();
            text = parts.join(",");
        }
        labels.push((l.name.clone(), text));
    }
    // Compiled rules keep labels in name order already (a BTreeMap).
    debug_assert!(labels.windows(2).all(|w| w[0].0 < w[1].0));
    Some(labels)
}

/// A label's `replace` pairs, in order, then its `slug`.
fn rewrite(l: &super::rule::LabelRule, text: &mut String) {
    for (from, to) in l.replace.iter() {
        if text.contains(&**from) {
            *text = text.replace(&**from, to);
        }
    }
    if l.slug {
        *text = slug(text);
    }
}

/// Lowercase (Unicode's full mapping, as Python's `str.lower`), only
/// letters, digits and `_`, no `_` twice in a row or at either end.
pub(super) fn slug(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.to_lowercase().chars() {
        if c == '_' {
            if !out.is_empty() && !out.ends_with('_') {
                out.push('_');
            }
        } else if c.is_alphanumeric() {
            out.push(c);
        }
    }
    if out.ends_with('_') {
        out.pop();
    }
    out
}

/// A `value = { sum = …, over = … }`: the fields added (numbers, booleans
/// as 1/0, numeric strings), divided by the sum of `over` when it is
/// given. A missing field, or an `over` that sums to 0, is missing (the
/// rule's `map_default`, else skipped); any other field not a number.
fn sum(rule: &Rule, terms: &[Pointer], over: &[Pointer], element: &Value) -> Result<f64, SkipReason> {
    let add = |ps: &[Pointer]| -> Result<f64, SkipReason> {
        let mut total = 0.0;
        for p in ps {
            total += match p.resolve(element) {
                None | Some(Value::Null) => return Err(SkipReason::Missing),
                Some(Value::Number(n)) => n.as_f64().ok_or(SkipReason::NotNumber)?,
                Some(Value::Bool(b)) => f64::from(u8::from(*b)),
                Some(Value::String(s)) => match s.trim().parse::<f64>() {
                    Ok(x) if x.is_finite() => x,
                    _ => return Err(SkipReason::NotNumber),
                },
                Some(_) => return Err(SkipReason::NotNumber),
            };
        }
        Ok(total)
    };
    let missing = |reason: SkipReason| match (reason, rule.map_default) {
        (SkipReason::Missing, Some(d)) => Ok(d),
        _ => Err(reason),
    };
    let raw = match add(terms) {
        Err(reason) => return missing(reason),
        Ok(n) if over.is_empty() => n,
        Ok(n) => match add(over) {
            Err(reason) => return missing(reason),
            Ok(0.0) => return missing(SkipReason::Missing),
            Ok(d) => n / d,
        },
    };
    let v = raw * rule.scale;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(SkipReason::NotNumber)
    }
}

/// A JSON value as the sample's number: numbers as they are, booleans as
/// 1/0, numeric strings parsed, other strings through `map`, and
/// `map_default` for what `map` does not name or a missing value.
fn number(rule: &Rule, v: Option<&Value>) -> Result<f64, SkipReason> {
    if let Some(format) = rule.parse {
        let text = match v {
            None | Some(Value::Null) => return Err(SkipReason::Missing),
            Some(Value::String(s)) => s,
            Some(_) => return Err(SkipReason::NotNumber),
        };
        let t = match format {
            TimeFormat::Date => super::time::parse_date(text),
            TimeFormat::Rfc3339 => super::time::parse_rfc3339(text),
        };
        return t.map(|t| t * rule.scale).ok_or(SkipReason::NotNumber);
    }
    let raw = match v {
        None | Some(Value::Null) => rule.map_default.ok_or(SkipReason::Missing),
        Some(Value::Number(n)) => n.as_f64().ok_or(SkipReason::NotNumber),
        Some(Value::Bool(b)) => Ok(rule
            .map
            .get(if *b { "true" } else { "false" })
            .copied()
            .unwrap_or(if *b { 1.0 } else { 0.0 })),
        Some(Value::String(s)) => match rule.map.get(s.as_str()) {
            Some(x) => Ok(*x),
            None => match s.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && !s.trim().is_empty() => Ok(x),
                _ => rule.map_default.ok_or(if rule.map.is_empty() {
                    SkipReason::NotNumber
                } else {
                    SkipReason::Unmapped
                }),
            },
        },
        Some(Value::Array(_) | Value::Object(_)) => Err(SkipReason::NotNumber),
    }?;
    let v = raw * rule.scale;
    // A huge number times `scale` can overflow.
    if v.is_finite() {
        Ok(v)
    } else {
        Err(SkipReason::NotNumber)
    }
}

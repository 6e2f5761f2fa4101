//! Values: turning polled bodies into metric samples.
//!
//! A type's group carries value rules ([`ValueRule`], the
//! `[[types.groups.values]]` keys); [`ValueRule::compile`] checks one and
//! parses its pointers and templates; [`extract`] runs a group's rules on a
//! body; [`exposition`] writes samples in the Prometheus text format. All
//! of it is pure: no I/O, no clock.

pub mod exposition;
mod extract;
pub mod item;
pub mod lookup;
mod pointer;
mod rule;
mod template;
mod text;
mod time;

pub use extract::{DEFAULT_MAX_SERIES, Extraction, Extractor, Sample, SkipReason, extract};
pub use lookup::{Lookup, LookupError};
pub use pointer::{Pointer, PointerError};
pub use rule::{
    Aggregate, ClashError, Filter, LabelRule, MetricKind, OneOrMany, RESERVED_LABELS, Rule, RuleError, SumSpec,
    TimeFormat, ValueRule, ValueSource, ValueSpec, check_families, valid_label_name, valid_metric_name,
};
pub use template::{Context, Rendered, Template, TemplateError};
pub use text::{Facts, push_text};
pub use time::{parse_date, parse_rfc3339};

#[cfg(test)]
mod tests;

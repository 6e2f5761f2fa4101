//! The schema pieces the API's body types name in their `ToSchema`
//! derives (`#[schema(schema_with = ...)]`): enumerations, patterns and
//! the shapes utoipa cannot derive. A leaf: it takes nothing from the web
//! layer, so every handler may use it and [`super::openapi`] only assembles
//! the document.

use serde_json::{Value, json};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
use utoipa::openapi::{Object, Ref, RefOr, Schema};

/// A duration as the settings write and show it: `250ms`, `10s`, `1h30m`,
/// `2days` (the parser also takes spaces and longer unit names).
pub const DURATION_PATTERN: &str = "^([0-9]{1,9}(ns|us|ms|s|m|h|d|days?|w|weeks?|months?|y|years?))+$";
/// A duration above zero: the first number is not 0.
pub const POSITIVE_DURATION_PATTERN: &str = "^[1-9][0-9]{0,8}(ns|us|ms|s|m|h|d|days?|w|weeks?|months?|y|years?)([0-9]{1,9}(ns|us|ms|s|m|h|d|days?|w|weeks?|months?|y|years?))*$";
/// Names of instances and pools ([`crate::model::valid_name`]).
pub const NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";
/// An instance or sink URL: http or https, with a host.
pub const URL_PATTERN: &str = "^https?://[^/?#]+";

/// A string from a fixed set, or null when `nullable`.
pub fn string_enum(values: &[&str], nullable: bool) -> Object {
    let mut list: Vec<Value> = values.iter().map(|v| json!(v)).collect();
    let ty = if nullable {
        list.push(Value::Null);
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::new(Type::String)
    };
    ObjectBuilder::new().schema_type(ty).enum_values(Some(list)).build()
}

/// [`crate::model::ErrorCategory`] as serialised.
pub const ERROR_CATEGORIES: &[&str] = &["transient", "permanent"];
/// [`crate::model::ErrorKind`] as serialised.
pub const ERROR_KINDS: &[&str] = &[
    "timeout",
    "connect",
    "dns",
    "http",
    "rate_limited",
    "tls",
    "body",
    "invalid_url",
    "invalid_credentials",
    "other",
];
/// [`crate::model::DeadLetterReason`] as serialised.
pub const DEAD_LETTER_REASONS: &[&str] = &["max_retry_attempts", "permanent_failure"];
/// [`crate::model::SchedulerMode`] as serialised.
pub const SCHEDULER_MODES: &[&str] = &["adaptive", "fixed"];
/// [`crate::model::Profile`] as serialised.
pub const PROFILES: &[&str] = &["availability", "standard", "full"];
/// The states of a breaker that is not closed.
pub const OPEN_BREAKER_STATES: &[&str] = &["open", "half_open"];

pub fn error_category() -> Object {
    string_enum(ERROR_CATEGORIES, false)
}
pub fn error_category_or_null() -> Object {
    string_enum(ERROR_CATEGORIES, true)
}
pub fn error_kind() -> Object {
    string_enum(ERROR_KINDS, false)
}
pub fn error_kind_or_null() -> Object {
    string_enum(ERROR_KINDS, true)
}
pub fn dead_letter_reason() -> Object {
    string_enum(DEAD_LETTER_REASONS, true)
}
pub fn scheduler_mode() -> Object {
    string_enum(SCHEDULER_MODES, false)
}
pub fn profile_or_null() -> Object {
    string_enum(PROFILES, true)
}
pub fn breaker_state() -> Object {
    string_enum(OPEN_BREAKER_STATES, false)
}

/// The `Name` schema.
pub fn name() -> Ref {
    Ref::from_schema_name("Name")
}

/// A string that is left out rather than null when there is none.
pub fn plain_string() -> Object {
    ObjectBuilder::new().schema_type(Type::String).build()
}

/// A count that is left out rather than null when there is none.
pub fn count() -> Object {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)).build()
}

pub fn instance_url() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(URL_PATTERN))
        .description(Some("an http:// or https:// URL with a host"))
        .build()
}

pub fn positive_duration() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(POSITIVE_DURATION_PATTERN))
        .examples(["10s"])
        .build()
}

pub fn duration_or_zero() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(DURATION_PATTERN))
        .examples(["0s"])
        .build()
}

/// A map whose values are all hidden.
pub fn hidden_values() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(RefOr::T(Schema::Object(string_enum(
            &[crate::model::HIDDEN],
            false,
        )))))
        .build()
}

/// The raw bytes of a download.
pub fn binary() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
        .build()
}

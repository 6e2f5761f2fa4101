//! [`ConfigError`]: what stops a bad configuration, naming the file (or the
//! environment), the key (or variable) and the value as written.

use super::EnvOverrides;
use super::env;
use crate::model::{FieldError, HIDDEN};

/// The `file` of errors caused by environment variables.
pub const ENVIRONMENT: &str = "environment";

/// Bad configuration: stops startup (exit code 2) and `check-config`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_error(.file, .key, .value, .message))]
pub struct ConfigError {
    /// The file's path, or `environment`.
    pub file: String,
    /// Dotted key (`adaptive.min_interval`, `instances[1].url`), or the
    /// environment variable; empty for errors about the whole file.
    pub key: String,
    /// The value as written (strings quoted); empty when there is none.
    pub value: String,
    pub message: String,
}

fn render_error(file: &str, key: &str, value: &str, message: &str) -> String {
    match (key.is_empty(), value.is_empty()) {
        (true, _) => format!("{file}: {message}"),
        (false, true) => format!("{file}: {key}: {message}"),
        (false, false) => format!("{file}: {key} = {value}: {message}"),
    }
}

impl ConfigError {
    pub fn new(
        file: impl Into<String>,
        key: impl Into<String>,
        value: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError {
            file: file.into(),
            key: key.into(),
            value: value.into(),
            message: message.into(),
        }
    }

    /// From a model validation error; `prefix` makes the field a full key path
    /// (e.g. `instances[1].`).
    pub(super) fn from_field(file: &str, prefix: &str, e: FieldError) -> Self {
        ConfigError::new(file, format!("{prefix}{}", e.field), quote_plain(&e.value), e.message)
    }
}

/// Show a validated value the way it would be written in TOML: numbers,
/// booleans and lists bare, everything else quoted.
pub(super) fn quote_plain(v: &str) -> String {
    let bare =
        v.parse::<f64>().is_ok() || matches!(v, "true" | "false" | HIDDEN) || v.starts_with('[') || v.starts_with('{');
    if bare { v.to_string() } else { format!("{v:?}") }
}

/// The first of a section's validation errors, as a [`ConfigError`].
pub(super) fn first(file: &str, prefix: &str, errs: Vec<FieldError>) -> ConfigError {
    match errs.into_iter().next() {
        Some(e) => ConfigError::from_field(file, prefix, e),
        None => ConfigError::new(file, "", "", "invalid configuration"),
    }
}

/// The file alone was valid, so a violation now is the environment's doing:
/// name the variable that sets the field, or the variables that changed it.
pub(super) fn env_validation_error(ov: &EnvOverrides, errs: Vec<FieldError>) -> ConfigError {
    let Some(e) = errs.into_iter().next() else {
        return ConfigError::new(ENVIRONMENT, "", "", "invalid configuration");
    };
    if let Some((var, raw)) = ov.setting_for(&e.field) {
        return env::env_error(var, raw, e.message);
    }
    let section = e.field.split('.').next().unwrap_or_default();
    let vars: Vec<String> = ov
        .locked()
        .into_iter()
        .filter(|(field, _)| field.split('.').next() == Some(section))
        .map(|(_, var)| var)
        .collect();
    let culprits = if vars.is_empty() {
        "environment overrides".to_string()
    } else {
        vars.join(", ")
    };
    ConfigError::new(
        ENVIRONMENT,
        e.field,
        quote_plain(&e.value),
        format!("{} (after applying {culprits})", e.message),
    )
}

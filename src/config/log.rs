//! `[log]`: the log's format (lines of text, or one JSON object a line for
//! Loki, Vector or ELK) and its level, a filter with the meaning of
//! `RUST_LOG` (`info`, `warn,pollster::engine=debug`).

use crate::model::FieldError;
use serde::{Deserialize, Serialize};

/// How each log line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Plain lines (the default: under systemd, journald adds the time).
    #[default]
    Text,
    /// One JSON object a line: `timestamp` (RFC 3339, UTC), `level`,
    /// `target`, `message` and the event's fields beside them.
    Json,
}

impl LogFormat {
    pub fn parse(raw: &str) -> Result<LogFormat, String> {
        match raw.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format `{other}`: expected `text` or `json`")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The level when nothing sets one.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    #[serde(default)]
    pub format: LogFormat,
    /// A filter as `RUST_LOG` takes it.
    #[serde(default = "default_level")]
    pub level: String,
}

fn default_level() -> String {
    DEFAULT_LOG_LEVEL.to_string()
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::default(),
            level: default_level(),
        }
    }
}

impl LogConfig {
    /// The level must be a filter `RUST_LOG` would take.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_level(&self.level).map_err(|message| FieldError::new("level", &self.level, message))
    }
}

/// A log level or filter as `RUST_LOG` takes it, else why not.
pub fn check_level(raw: &str) -> Result<(), String> {
    if raw.trim().is_empty() {
        return Err(
            "empty log level: expected a level such as `info`, or a filter such as `warn,pollster=debug`".into(),
        );
    }
    tracing_subscriber::EnvFilter::try_new(raw.trim())
        .map(|_| ())
        .map_err(|e| format!("not a log level or filter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_levels_are_checked() {
        assert_eq!(LogFormat::parse("json"), Ok(LogFormat::Json));
        assert_eq!(LogFormat::parse(" text "), Ok(LogFormat::Text));
        assert!(LogFormat::parse("xml").unwrap_err().contains("`xml`"));
        assert!(check_level("info").is_ok());
        assert!(check_level("warn,pollster::engine=debug").is_ok());
        assert!(check_level("").is_err());
        assert!(check_level("pollster=loud").is_err());
    }
}

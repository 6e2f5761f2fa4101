//! `[sink]`: the event sink's receiver and limits, with the checks a sink
//! saved from the UI or API must pass too.

use crate::model::{FieldError, HIDDEN, duration_str};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// `[sink]`: where events are shipped as NDJSON (§5).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub url: String,
    /// Extra request headers, e.g. `Authorization`. Values are secrets: never
    /// shown in `Debug` output or errors.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    #[serde(with = "duration_str", default = "default_buffering")]
    pub buffering: Duration,
    #[serde(with = "duration_str", default = "default_retry_limit")]
    pub retry_limit: Duration,
    #[serde(default = "default_queue_limit")]
    pub queue_limit: usize,
    #[serde(default)]
    pub gzip: bool,
}

fn default_batch_size() -> usize {
    1000
}
fn default_buffering() -> Duration {
    Duration::from_secs(2)
}
fn default_retry_limit() -> Duration {
    Duration::from_secs(600)
}
fn default_queue_limit() -> usize {
    100_000
}

impl SinkConfig {
    /// A sink to `url` with every other field at its default.
    pub fn new(url: impl Into<String>) -> Self {
        SinkConfig {
            url: url.into(),
            headers: BTreeMap::new(),
            batch_size: default_batch_size(),
            buffering: default_buffering(),
            retry_limit: default_retry_limit(),
            queue_limit: default_queue_limit(),
            gzip: false,
        }
    }

    /// Field checks; the field is relative to `[sink]` (`url`, `headers.X`, …).
    pub fn validate(&self) -> Result<(), FieldError> {
        crate::model::check_http_url("url", &self.url)?;
        for (name, value) in &self.headers {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(FieldError::new(
                    format!("headers.{name}"),
                    name,
                    "must be a valid HTTP header name",
                ));
            }
            if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return Err(FieldError::new(
                    format!("headers.{name}"),
                    HIDDEN,
                    "must be printable text",
                ));
            }
        }
        if !(1..=100_000).contains(&self.batch_size) {
            return Err(FieldError::new(
                "batch_size",
                self.batch_size,
                "must be between 1 and 100000",
            ));
        }
        if self.buffering < Duration::from_millis(10) || self.buffering > Duration::from_secs(600) {
            return Err(FieldError::new(
                "buffering",
                duration_str::format(self.buffering),
                "must be between 10ms and 10m",
            ));
        }
        if self.retry_limit > Duration::from_secs(7 * 86400) {
            return Err(FieldError::new(
                "retry_limit",
                duration_str::format(self.retry_limit),
                "must be at most 7d (0s drops a failing batch at once)",
            ));
        }
        if !(1..=10_000_000).contains(&self.queue_limit) {
            return Err(FieldError::new(
                "queue_limit",
                self.queue_limit,
                "must be between 1 and 10000000",
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, &str> = self.headers.keys().map(|k| (k.as_str(), HIDDEN)).collect();
        f.debug_struct("SinkConfig")
            .field("url", &self.url)
            .field("headers", &headers)
            .field("batch_size", &self.batch_size)
            .field("buffering", &self.buffering)
            .field("retry_limit", &self.retry_limit)
            .field("queue_limit", &self.queue_limit)
            .field("gzip", &self.gzip)
            .finish()
    }
}

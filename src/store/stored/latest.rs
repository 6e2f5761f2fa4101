//! A `values` value (the samples a task's last good poll gave,
//! [`TaskValues`]) and a `bodies` value (a kept response body,
//! [`BodyRecord`]). Both are written only when what they hold changes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use crate::model::{BodyRecord, TaskValues, Timestamp, duration_str};
use crate::values::Sample;

/// A task's samples as read back.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct StoredValues {
    #[serde(rename = "polled_at")]
    polled_at: u64,
    #[serde(rename = "stale_after")]
    stale_after: String,
    /// The rules' fingerprint, 16 hex digits.
    #[serde(rename = "rules")]
    rules: String,
    #[serde(rename = "samples")]
    samples: Vec<StoredSample>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredSample {
    #[serde(rename = "metric")]
    metric: String,
    /// (name, value) pairs, in name order.
    #[serde(rename = "labels")]
    labels: Vec<(String, String)>,
    #[serde(rename = "value")]
    value: f64,
}

impl Versioned for StoredValues {
    const WHAT: &'static str = "values";
    const VERSION: u8 = FORMAT_JSON_V1;
}

/// A task's samples as written: the same fields [`StoredValues`] reads.
#[derive(Debug, Serialize)]
pub(crate) struct StoredValuesRef<'a> {
    #[serde(rename = "polled_at")]
    polled_at: u64,
    #[serde(rename = "stale_after")]
    stale_after: String,
    #[serde(rename = "rules")]
    rules: String,
    #[serde(rename = "samples")]
    samples: Vec<StoredSampleRef<'a>>,
}

#[derive(Debug, Serialize)]
struct StoredSampleRef<'a> {
    #[serde(rename = "metric")]
    metric: &'a str,
    #[serde(rename = "labels")]
    labels: Vec<(&'a str, &'a str)>,
    #[serde(rename = "value")]
    value: f64,
}

impl Encodes for StoredValuesRef<'_> {
    type Value = StoredValues;
}

impl<'a> From<&'a TaskValues> for StoredValuesRef<'a> {
    fn from(v: &'a TaskValues) -> Self {
        StoredValuesRef {
            polled_at: v.polled_at.0,
            stale_after: duration_str::format(v.stale_after),
            rules: format!("{:016x}", v.fingerprint),
            samples: v
                .samples
                .iter()
                .map(|s| StoredSampleRef {
                    metric: &s.metric,
                    labels: s.labels.iter().map(|(n, v)| (&**n, v.as_str())).collect(),
                    value: s.value,
                })
                .collect(),
        }
    }
}

impl TryFrom<StoredValues> for TaskValues {
    type Error = String;

    fn try_from(s: StoredValues) -> Result<Self, String> {
        let stale_after = duration_str::parse(&s.stale_after)?;
        let fingerprint = u64::from_str_radix(&s.rules, 16).map_err(|e| format!("rules {:?}: {e}", s.rules))?;
        // Metric and label names repeat across samples: share them.
        let mut names: std::collections::HashMap<String, Arc<str>> = std::collections::HashMap::new();
        let mut name = |n: String| names.entry(n).or_insert_with_key(|k| Arc::from(k.as_str())).clone();
        let samples: Vec<Sample> = s
            .samples
            .into_iter()
            .map(|x| Sample {
                metric: name(x.metric),
                labels: x.labels.into_iter().map(|(n, v)| (name(n), v)).collect(),
                value: x.value,
            })
            .collect();
        Ok(TaskValues {
            polled_at: Timestamp(s.polled_at),
            stale_after,
            fingerprint,
            samples: samples.into(),
        })
    }
}

/// A kept body as read back: `text` when the body is UTF-8 (JSON APIs
/// answer UTF-8), else `hex`; neither when it was too large to keep.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct StoredBody {
    #[serde(rename = "polled_at")]
    polled_at: u64,
    #[serde(rename = "content_type")]
    content_type: String,
    #[serde(rename = "size")]
    size: u64,
    #[serde(rename = "etag")]
    etag: String,
    #[serde(rename = "text", default)]
    text: Option<String>,
    #[serde(rename = "hex", default)]
    hex: Option<String>,
}

impl Versioned for StoredBody {
    const WHAT: &'static str = "body";
    const VERSION: u8 = FORMAT_JSON_V1;
}

#[derive(Debug, Serialize)]
pub(crate) struct StoredBodyRef<'a> {
    #[serde(rename = "polled_at")]
    polled_at: u64,
    #[serde(rename = "content_type")]
    content_type: &'a str,
    #[serde(rename = "size")]
    size: u64,
    #[serde(rename = "etag")]
    etag: &'a str,
    #[serde(rename = "text", skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(rename = "hex", skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

impl Encodes for StoredBodyRef<'_> {
    type Value = StoredBody;
}

impl<'a> From<&'a BodyRecord> for StoredBodyRef<'a> {
    fn from(b: &'a BodyRecord) -> Self {
        let (text, hex) = match b.bytes.as_deref() {
            None => (None, None),
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(t) => (Some(t), None),
                Err(_) => (None, Some(hex::encode(bytes))),
            },
        };
        StoredBodyRef {
            polled_at: b.polled_at.0,
            content_type: &b.content_type,
            size: b.size,
            etag: &b.etag,
            text,
            hex,
        }
    }
}

impl TryFrom<StoredBody> for BodyRecord {
    type Error = String;

    fn try_from(s: StoredBody) -> Result<Self, String> {
        let bytes: Option<Arc<[u8]>> = match (s.text, s.hex) {
            (Some(t), None) => Some(Arc::from(t.into_bytes())),
            (None, Some(h)) => Some(Arc::from(hex::decode(&h).map_err(|e| format!("hex: {e}"))?)),
            (None, None) => None,
            (Some(_), Some(_)) => return Err("both text and hex".into()),
        };
        if let Some(b) = &bytes
            && b.len() as u64 != s.size
        {
            return Err(format!("size {} but {} bytes", s.size, b.len()));
        }
        Ok(BodyRecord {
            polled_at: Timestamp(s.polled_at),
            content_type: s.content_type,
            size: s.size,
            etag: s.etag,
            bytes,
        })
    }
}

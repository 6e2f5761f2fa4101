//! An `audit` value: one entry of the audit trail, the change event's
//! NDJSON line (as the sink gets it) and where the change came from.

use serde::{Deserialize, Serialize};

use super::super::audit::AuditEntry;
use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use crate::model::Timestamp;

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct StoredAudit {
    /// Milliseconds since the epoch.
    #[serde(rename = "time")]
    time: u64,
    #[serde(rename = "source", default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(rename = "line")]
    line: String,
}

impl Versioned for StoredAudit {
    const WHAT: &'static str = "audit entry";
    const VERSION: u8 = FORMAT_JSON_V1;
}

#[derive(Debug, Serialize)]
pub(crate) struct StoredAuditRef<'a> {
    #[serde(rename = "time")]
    pub time: u64,
    #[serde(rename = "source", skip_serializing_if = "Option::is_none")]
    pub source: Option<&'a str>,
    #[serde(rename = "line")]
    pub line: &'a str,
}

impl Encodes for StoredAuditRef<'_> {
    type Value = StoredAudit;
}

impl StoredAudit {
    pub(crate) fn into_entry(self, seq: u64) -> AuditEntry {
        AuditEntry {
            seq,
            time: Timestamp(self.time),
            source: self.source,
            line: self.line,
        }
    }
}

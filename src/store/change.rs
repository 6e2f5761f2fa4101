//! The row a change event is written as: one record with two readers, the
//! outbox (for the sink) and the audit trail. A leaf: `outbox`, `audit`
//! and the stored shapes all take it from here.

use serde::{Deserialize, Serialize};

/// One change event waiting for delivery: its stable `id` and the NDJSON
/// line (which carries the same `id`), exactly as it will be sent.
///
/// Staged with a change, it is also who did what: an operator action or a
/// settings change carries an [`AuditStamp`] and is written to the `audit`
/// table in the same transaction (one record, two readers: the sink and the
/// audit trail). `deliver` is false when no sink is configured: then only
/// the audit row is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEvent {
    pub id: String,
    /// One JSON object ending `\n`.
    pub line: String,
    /// Written to the outbox for the sink.
    #[serde(skip, default = "yes")]
    pub deliver: bool,
    /// Written to the audit trail too.
    #[serde(skip)]
    pub audit: Option<AuditStamp>,
}

fn yes() -> bool {
    true
}

/// What the audit trail keeps of a change event besides its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditStamp {
    pub time: crate::model::Timestamp,
    /// The client's address, when a request made the change.
    pub source: Option<String>,
}

impl OutboxEvent {
    /// A row for the sink alone (no audit entry).
    pub fn new(id: impl Into<String>, line: impl Into<String>) -> Self {
        OutboxEvent {
            id: id.into(),
            line: line.into(),
            deliver: true,
            audit: None,
        }
    }
}

/// The rows of `events` that go to the outbox (not those for the audit
/// trail alone): what a commit tells the sink it added.
pub(super) fn delivered(events: &[OutboxEvent]) -> usize {
    events.iter().filter(|e| e.deliver).count()
}

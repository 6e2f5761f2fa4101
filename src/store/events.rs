//! A change's events, written in the change's own transaction: to the
//! audit trail those with an [`AuditStamp`](super::AuditStamp), to the
//! outbox those to deliver.

use redb::WriteTransaction;

use super::change::{OutboxEvent, delivered};
use super::{Store, StoreError, audit, outbox};

/// Appends `events` inside `txn`, in order: to the outbox those to
/// deliver, to the audit trail those with an [`AuditStamp`](super::AuditStamp).
pub(super) fn append(txn: &WriteTransaction, events: &[OutboxEvent]) -> Result<(), StoreError> {
    audit::append(txn, events)?;
    outbox::append(txn, events)
}

impl Store {
    /// Appends `events` on their own (for a change that has no other row).
    pub fn append_outbox(&self, events: &[OutboxEvent]) -> Result<(), StoreError> {
        let txn = self.write_txn()?;
        append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing outbox events")
    }
}

//! The audit trail: who changed what, from where and when. Every operator
//! action and settings change is staged as a change event
//! ([`crate::sink::Sink::stage`]); the same row that goes to the outbox for
//! the sink is written here, in the same transaction as the change, whether
//! or not a sink is configured.
//!
//! Keys are a big-endian `u64` sequence from a counter in `meta`, so the
//! table is in commit order. It keeps the last [`MAX_AGE`] or
//! [`MAX_ENTRIES`], whichever is fewer: each append drops what fell out.

use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};
use std::time::Duration;

use super::outbox::OutboxEvent;
use super::stored::{StoredAudit, StoredAuditRef};
use super::tables::{AUDIT, META};
use super::{Ctx, Store, StoreError, codec};

/// `meta` key holding the next audit sequence number.
const NEXT_SEQ_KEY: &[u8] = b"audit_next_seq";
/// Entries older than this are dropped.
pub const MAX_AGE: Duration = Duration::from_secs(90 * 24 * 3600);
/// At most this many entries are kept.
pub const MAX_ENTRIES: u64 = 100_000;

/// One entry as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Its place in the trail: later entries have higher numbers.
    pub seq: u64,
    pub time: crate::model::Timestamp,
    /// The client's address, when a request made the change.
    pub source: Option<String>,
    /// The change event, as the sink gets it (one JSON object).
    pub line: String,
}

/// Appends the audited rows of `events` inside `txn` and drops what the
/// limits no longer keep.
pub(super) fn append(txn: &WriteTransaction, events: &[OutboxEvent]) -> Result<(), StoreError> {
    append_capped(txn, events, MAX_ENTRIES)
}

fn append_capped(txn: &WriteTransaction, events: &[OutboxEvent], cap: u64) -> Result<(), StoreError> {
    let audited: Vec<_> = events.iter().filter_map(|e| Some((e, e.audit.as_ref()?))).collect();
    let Some(latest) = audited.iter().map(|(_, a)| a.time).max() else {
        return Ok(());
    };
    let mut meta = txn.open_table(META.def).ctx("opening table meta")?;
    let mut next: u64 = match meta.get(NEXT_SEQ_KEY).ctx("reading the audit sequence")? {
        Some(v) => codec::decode(META.name, NEXT_SEQ_KEY, v.value())?,
        None => 1,
    };
    let mut table = txn.open_table(AUDIT.def).ctx("opening table audit")?;
    for (event, stamp) in audited {
        let v = codec::encode_stored(&StoredAuditRef {
            time: stamp.time.0,
            source: stamp.source.as_deref(),
            line: event.line.trim_end(),
        })?;
        table
            .insert(next.to_be_bytes().as_slice(), v.as_slice())
            .ctx("writing an audit entry")?;
        next += 1;
    }
    let v = codec::encode("audit sequence", &next)?;
    meta.insert(NEXT_SEQ_KEY, v.as_slice())
        .ctx("writing the audit sequence")?;
    // The oldest first: beyond the cap, or older than MAX_AGE.
    let cutoff = latest.0.saturating_sub(MAX_AGE.as_millis() as u64);
    let mut len = table.len().ctx("counting table audit")?;
    loop {
        let Some((k, v)) = table.first().ctx("reading table audit")? else {
            break;
        };
        let old = len > cap
            || codec::decode_stored::<StoredAudit>(AUDIT.name, k.value(), v.value())
                .map(|e| e.into_entry(0).time.0 < cutoff)
                .unwrap_or(true);
        if !old {
            break;
        }
        let key = k.value().to_vec();
        drop((k, v));
        table.remove(key.as_slice()).ctx("dropping an old audit entry")?;
        len -= 1;
    }
    Ok(())
}

impl Store {
    /// Up to `limit` entries, newest first, older than entry `before` when
    /// given. An entry that cannot be read is skipped.
    pub fn audit_page(&self, before: Option<u64>, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(AUDIT.def).ctx("opening table audit")?;
        let end = before.unwrap_or(u64::MAX).to_be_bytes();
        let mut out = Vec::new();
        for entry in table.range(..end.as_slice()).ctx("reading table audit")?.rev() {
            if out.len() >= limit {
                break;
            }
            let (k, v) = entry.ctx("reading table audit")?;
            let Ok(seq) = <[u8; 8]>::try_from(k.value()).map(u64::from_be_bytes) else {
                continue;
            };
            match codec::decode_stored::<StoredAudit>(AUDIT.name, k.value(), v.value()) {
                Ok(e) => out.push(e.into_entry(seq)),
                Err(e) => tracing::warn!(error = %e, "an audit entry cannot be read; skipped"),
            }
        }
        Ok(out)
    }

    /// How many entries the trail holds.
    pub fn audit_len(&self) -> Result<u64, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(AUDIT.def).ctx("opening table audit")?;
        table.len().ctx("counting table audit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;
    use crate::store::AuditStamp;

    fn audited(n: u64, at: u64) -> OutboxEvent {
        OutboxEvent {
            deliver: false,
            audit: Some(AuditStamp {
                time: Timestamp(at),
                source: Some("10.0.0.5".into()),
            }),
            ..OutboxEvent::new(format!("e-{n}"), format!("{{\"n\":{n}}}\n"))
        }
    }

    #[test]
    fn entries_are_kept_newest_first_within_the_cap_and_the_age() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.redb")).unwrap();
        let day = 24 * 3600 * 1000;
        let t0 = 1_800_000_000_000;
        let txn = store.write_txn().unwrap();
        let first: Vec<OutboxEvent> = (0..5).map(|n| audited(n, t0 + n)).collect();
        append_capped(&txn, &first, 3).unwrap();
        // A row only for the sink is not audited.
        append_capped(&txn, &[OutboxEvent::new("x", "{}\n")], 3).unwrap();
        txn.commit().unwrap();
        let page = store.audit_page(None, 10).unwrap();
        let lines: Vec<&str> = page.iter().map(|e| e.line.as_str()).collect();
        assert_eq!(
            lines,
            ["{\"n\":4}", "{\"n\":3}", "{\"n\":2}"],
            "the cap keeps the newest"
        );
        assert_eq!(page[0].source.as_deref(), Some("10.0.0.5"));
        assert_eq!(page[0].time, Timestamp(t0 + 4));
        let older = store.audit_page(Some(page[0].seq), 1).unwrap();
        assert_eq!(older[0].line, "{\"n\":3}", "a page before an entry");

        // 91 days later, one entry: everything older than 90 days goes.
        let txn = store.write_txn().unwrap();
        append_capped(&txn, &[audited(9, t0 + 91 * day)], 3).unwrap();
        txn.commit().unwrap();
        let page = store.audit_page(None, 10).unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!(store.audit_len().unwrap(), 1);
        // Through the outbox's append, with the real limits: audited and
        // not delivered.
        let txn = store.write_txn().unwrap();
        crate::store::outbox::append(&txn, &[audited(10, t0 + 91 * day + 1)]).unwrap();
        txn.commit().unwrap();
        assert_eq!(store.audit_len().unwrap(), 2);
        assert_eq!(store.outbox_len().unwrap(), 0);
    }
}

//! The audit trail: who changed what, from where and when. Every operator
//! action and settings change is staged as a change event
//! ([`crate::sink::Sink::stage`]); the same row that goes to the outbox for
//! the sink is written here, in the same transaction as the change, whether
//! or not a sink is configured.
//!
//! Keys are a big-endian `u64` sequence from a counter in `meta`, so the
//! table is in commit order. It keeps the last [`MAX_AGE`] or
//! [`MAX_ENTRIES`], whichever is fewer: each append drops what fell out.
//!
//! Failed logins and failed token requests are kept apart, in a share of
//! the trail of their own (`audit_failed`, at most [`MAX_FAILED_ENTRIES`]
//! and [`MAX_AGE`]): one entry per address and window, written at the
//! first failure and updated in place as more come
//! ([`Store::audit_failure_insert`], [`Store::audit_failure_update`]). A
//! flood of them drops only older failures, never an operator action. Both
//! tables take their keys from the one sequence, so a page of the trail
//! ([`Store::audit_page`]) reads them together, newest first.

use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};
use std::time::Duration;

use super::change::{OutboxEvent, delivered};
use super::stored::{StoredAudit, StoredAuditRef};
use super::tables::{AUDIT, AUDIT_FAILED, META, Table};
use super::{Ctx, Store, StoreError, codec};

/// `meta` key holding the next audit sequence number.
const NEXT_SEQ_KEY: &[u8] = b"audit_next_seq";
/// Entries older than this are dropped.
pub const MAX_AGE: Duration = Duration::from_secs(90 * 24 * 3600);
/// At most this many entries are kept.
pub const MAX_ENTRIES: u64 = 100_000;
/// At most this many failed-login and failed-token entries are kept (in a
/// share of their own).
pub const MAX_FAILED_ENTRIES: u64 = 10_000;
/// `meta` key holding smaller caps, when set ([`Store::set_audit_caps`]).
const CAPS_KEY: &[u8] = b"audit_caps";

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

/// The caps in force: `(entries, failed entries)`.
fn caps(txn: &WriteTransaction) -> Result<(u64, u64), StoreError> {
    let meta = txn.open_table(META.def).ctx("opening table meta")?;
    let caps = match meta.get(CAPS_KEY).ctx("reading the audit caps")? {
        Some(v) => codec::decode::<[u64; 2]>(META.name, CAPS_KEY, v.value())?,
        None => [MAX_ENTRIES, MAX_FAILED_ENTRIES],
    };
    Ok((caps[0], caps[1]))
}

/// The next sequence number, taken.
fn take_seq(txn: &WriteTransaction, n: u64) -> Result<u64, StoreError> {
    let mut meta = txn.open_table(META.def).ctx("opening table meta")?;
    let next: u64 = match meta.get(NEXT_SEQ_KEY).ctx("reading the audit sequence")? {
        Some(v) => codec::decode(META.name, NEXT_SEQ_KEY, v.value())?,
        None => 1,
    };
    let v = codec::encode("audit sequence", &(next + n))?;
    meta.insert(NEXT_SEQ_KEY, v.as_slice())
        .ctx("writing the audit sequence")?;
    Ok(next)
}

/// Appends the audited rows of `events` inside `txn` and drops what the
/// limits no longer keep.
pub(super) fn append(txn: &WriteTransaction, events: &[OutboxEvent]) -> Result<(), StoreError> {
    if !events.iter().any(|e| e.audit.is_some()) {
        return Ok(());
    }
    let (cap, _) = caps(txn)?;
    append_capped(txn, events, cap)
}

fn append_capped(txn: &WriteTransaction, events: &[OutboxEvent], cap: u64) -> Result<(), StoreError> {
    let audited: Vec<_> = events.iter().filter_map(|e| Some((e, e.audit.as_ref()?))).collect();
    let Some(latest) = audited.iter().map(|(_, a)| a.time).max() else {
        return Ok(());
    };
    let first = take_seq(txn, audited.len() as u64)?;
    let mut table = txn.open_table(AUDIT.def).ctx("opening table audit")?;
    for (next, (event, stamp)) in (first..).zip(audited) {
        let v = codec::encode_stored(&StoredAuditRef {
            time: stamp.time.0,
            source: stamp.source.as_deref(),
            line: event.line.trim_end(),
        })?;
        table
            .insert(next.to_be_bytes().as_slice(), v.as_slice())
            .ctx("writing an audit entry")?;
    }
    drop(table);
    prune(txn, AUDIT, latest, cap)
}

/// Drops the oldest entries of `t`: beyond the cap, or older than
/// [`MAX_AGE`] before `latest`.
fn prune(txn: &WriteTransaction, t: Table, latest: crate::model::Timestamp, cap: u64) -> Result<(), StoreError> {
    let mut table = txn.open_table(t.def).ctx("opening table audit")?;
    let cutoff = latest.0.saturating_sub(MAX_AGE.as_millis() as u64);
    let mut len = table.len().ctx("counting table audit")?;
    loop {
        let Some((k, v)) = table.first().ctx("reading table audit")? else {
            break;
        };
        let old = len > cap
            || codec::decode_stored::<StoredAudit>(t.name, k.value(), v.value())
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

/// Reverse-ordered entries of `t` below `end`.
fn newest_first<'a>(
    table: &'a redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    name: &'static str,
    end: &'a [u8; 8],
) -> Result<impl Iterator<Item = AuditEntry> + 'a, StoreError> {
    Ok(table
        .range(..end.as_slice())
        .ctx("reading table audit")?
        .rev()
        .filter_map(move |entry| {
            let (k, v) = entry.ok()?;
            let seq = <[u8; 8]>::try_from(k.value()).map(u64::from_be_bytes).ok()?;
            match codec::decode_stored::<StoredAudit>(name, k.value(), v.value()) {
                Ok(e) => Some(e.into_entry(seq)),
                Err(e) => {
                    tracing::warn!(error = %e, "an audit entry cannot be read; skipped");
                    None
                }
            }
        }))
}

impl Store {
    /// Up to `limit` entries, newest first, older than entry `before` when
    /// given (failed logins and token requests among them, in their
    /// place). An entry that cannot be read is skipped.
    pub fn audit_page(&self, before: Option<u64>, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let txn = self.read_txn()?;
        let ops = txn.open_table(AUDIT.def).ctx("opening table audit")?;
        let failed = txn.open_table(AUDIT_FAILED.def).ctx("opening table audit_failed")?;
        let end = before.unwrap_or(u64::MAX).to_be_bytes();
        let mut a = newest_first(&ops, AUDIT.name, &end)?.peekable();
        let mut b = newest_first(&failed, AUDIT_FAILED.name, &end)?.peekable();
        let mut out = Vec::new();
        while out.len() < limit {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.seq > y.seq,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            out.extend(if take_a { a.next() } else { b.next() });
        }
        Ok(out)
    }

    /// How many entries the trail holds (failures included).
    pub fn audit_len(&self) -> Result<u64, StoreError> {
        let txn = self.read_txn()?;
        let ops = txn.open_table(AUDIT.def).ctx("opening table audit")?;
        let failed = txn.open_table(AUDIT_FAILED.def).ctx("opening table audit_failed")?;
        Ok(ops.len().ctx("counting table audit")? + failed.len().ctx("counting table audit_failed")?)
    }

    /// Keep at most `entries` operator entries and `failed` failure entries
    /// from now on (instead of [`MAX_ENTRIES`] and [`MAX_FAILED_ENTRIES`]);
    /// stored in the database. For tests, which cannot write 100,000 rows.
    pub fn set_audit_caps(&self, entries: u64, failed: u64) -> Result<(), StoreError> {
        let txn = self.write_txn()?;
        {
            let mut meta = txn.open_table(META.def).ctx("opening table meta")?;
            let v = codec::encode("audit caps", &[entries, failed])?;
            meta.insert(CAPS_KEY, v.as_slice()).ctx("writing the audit caps")?;
        }
        txn.commit().ctx("committing the audit caps")
    }

    /// A new failure entry (a failed login or token request): its time,
    /// source and event line; returns its sequence, for
    /// [`Store::audit_failure_update`]. Drops the oldest failure entries
    /// beyond their share; never an operator entry.
    pub fn audit_failure_insert(
        &self,
        time: crate::model::Timestamp,
        source: Option<&str>,
        line: &str,
    ) -> Result<u64, StoreError> {
        let txn = self.write_txn()?;
        let (_, cap) = caps(&txn)?;
        let seq = take_seq(&txn, 1)?;
        {
            let mut table = txn.open_table(AUDIT_FAILED.def).ctx("opening table audit_failed")?;
            let v = codec::encode_stored(&StoredAuditRef {
                time: time.0,
                source,
                line: line.trim_end(),
            })?;
            table
                .insert(seq.to_be_bytes().as_slice(), v.as_slice())
                .ctx("writing an audit entry")?;
        }
        prune(&txn, AUDIT_FAILED, time, cap)?;
        txn.commit().ctx("committing an audit entry")?;
        Ok(seq)
    }

    /// Rewrite the failure entry `seq` with a new line (a higher count), if
    /// it is still kept, and append `events` (the window's final event,
    /// for the sink) in the same transaction.
    pub fn audit_failure_update(&self, seq: u64, line: &str, events: &[OutboxEvent]) -> Result<(), StoreError> {
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(AUDIT_FAILED.def).ctx("opening table audit_failed")?;
            let key = seq.to_be_bytes();
            let old = table
                .get(key.as_slice())
                .ctx("reading table audit_failed")?
                .map(|v| codec::decode_stored::<StoredAudit>(AUDIT_FAILED.name, &key, v.value()))
                .transpose()?;
            if let Some(old) = old {
                let old = old.into_entry(seq);
                let v = codec::encode_stored(&StoredAuditRef {
                    time: old.time.0,
                    source: old.source.as_deref(),
                    line: line.trim_end(),
                })?;
                table
                    .insert(key.as_slice(), v.as_slice())
                    .ctx("writing an audit entry")?;
            }
        }
        append(&txn, events)?;
        super::outbox::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing an audit entry")
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
        crate::store::events::append(&txn, &[audited(10, t0 + 91 * day + 1)]).unwrap();
        txn.commit().unwrap();
        assert_eq!(store.audit_len().unwrap(), 2);
        assert_eq!(store.outbox_len().unwrap(), 0);
    }

    #[test]
    fn failures_have_a_share_of_their_own_and_are_updated_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("p.redb")).unwrap();
        store.set_audit_caps(3, 2).unwrap();
        let t0 = 1_800_000_000_000;
        let op = |n: u64| {
            let txn = store.write_txn().unwrap();
            append(&txn, &[audited(n, t0 + n)]).unwrap();
            txn.commit().unwrap();
        };
        op(1);
        let first = store
            .audit_failure_insert(Timestamp(t0 + 2), Some("10.0.0.9"), "{\"count\":1}\n")
            .unwrap();
        op(3);
        // A flood of failures: only the newest two are kept, and the
        // operator entries all stay.
        for n in 0..50 {
            store
                .audit_failure_insert(Timestamp(t0 + 10 + n), Some("10.0.0.8"), &format!("{{\"f\":{n}}}"))
                .unwrap();
        }
        let page = store.audit_page(None, 100).unwrap();
        let lines: Vec<&str> = page.iter().map(|e| e.line.as_str()).collect();
        assert_eq!(lines, ["{\"f\":49}", "{\"f\":48}", "{\"n\":3}", "{\"n\":1}"]);
        assert_eq!(store.audit_len().unwrap(), 4);
        // In sequence order across both tables, and paged.
        let seqs: Vec<u64> = page.iter().map(|e| e.seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] > w[1]), "{seqs:?}");
        let older = store.audit_page(Some(page[1].seq), 1).unwrap();
        assert_eq!(older[0].line, "{\"n\":3}");
        // An entry dropped is not brought back by an update; a kept one is
        // rewritten where it is, with the sink's row in the same commit.
        store.audit_failure_update(first, "{\"count\":9}", &[]).unwrap();
        assert!(!store.audit_page(None, 100).unwrap().iter().any(|e| e.seq == first));
        let sink_row = OutboxEvent::new("id-1", "{\"f\":49,\"count\":2}\n");
        store
            .audit_failure_update(page[0].seq, "{\"f\":49,\"count\":2}", &[sink_row])
            .unwrap();
        let page = store.audit_page(None, 1).unwrap();
        assert_eq!(page[0].line, "{\"f\":49,\"count\":2}");
        assert_eq!(page[0].source.as_deref(), Some("10.0.0.8"));
        assert_eq!(store.outbox_len().unwrap(), 1);
    }
}

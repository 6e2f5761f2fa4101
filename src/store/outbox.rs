//! The event outbox: change events (operator actions, settings changes,
//! dead-letter moves, breaker transitions) written in the same write
//! transaction as the change they describe, so a change is committed if and
//! only if its event is. The event sink reads the rows in pages, in order,
//! and deletes them once a receiver answered 2xx for them.
//!
//! Rows are keyed by a big-endian `u64` sequence taken from a counter in the
//! `meta` table, so keys sort in commit order and are never reused, even
//! after the table was emptied (the sink remembers how far it has read).
//!
//! After a commit that added rows, the store calls the listener set with
//! [`Store::on_outbox_commit`] (the sink's wake-up), from the committing
//! thread, after the commit: whoever made the change need not remember to
//! tell the sink, and a caller that went away after the commit cannot leave
//! a row unnoticed.

use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};
use std::sync::Arc;

use super::change::OutboxEvent;
use super::stored::{StoredOutboxEvent, StoredOutboxEventRef};
use super::tables::{META, OUTBOX};
use super::{Ctx, Store, StoreError, codec};

/// `meta` key holding the next outbox sequence number.
const NEXT_SEQ_KEY: &[u8] = b"outbox_next_seq";

/// Called with the number of rows a commit added.
pub type OutboxListener = Arc<dyn Fn(u64) + Send + Sync>;

/// One row read back: its sequence and the event, or why it cannot be read
/// (a corrupt row is reported with its sequence, so it can be deleted).
pub type OutboxRow = (u64, Result<OutboxEvent, StoreError>);

/// Appends the rows of `events` to deliver inside `txn`, in order (the
/// audit trail's are written by `audit::append`; `events::append` writes
/// both).
pub(super) fn append(txn: &WriteTransaction, events: &[OutboxEvent]) -> Result<(), StoreError> {
    if !events.iter().any(|e| e.deliver) {
        return Ok(());
    }
    let mut meta = txn.open_table(META.def).ctx("opening table meta")?;
    let mut next: u64 = match meta.get(NEXT_SEQ_KEY).ctx("reading the outbox sequence")? {
        Some(v) => codec::decode(META.name, NEXT_SEQ_KEY, v.value())?,
        None => 1,
    };
    let mut table = txn.open_table(OUTBOX.def).ctx("opening table outbox")?;
    for event in events.iter().filter(|e| e.deliver) {
        let v = codec::encode_stored(&StoredOutboxEventRef::from(event))?;
        table
            .insert(next.to_be_bytes().as_slice(), v.as_slice())
            .ctx("writing an outbox event")?;
        next += 1;
    }
    let v = codec::encode("outbox sequence", &next)?;
    meta.insert(NEXT_SEQ_KEY, v.as_slice())
        .ctx("writing the outbox sequence")?;
    Ok(())
}

fn parse_seq(key: &[u8]) -> Result<u64, StoreError> {
    <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .map_err(|_| StoreError::Corrupt {
            table: OUTBOX.name,
            key: codec::display_key(key),
            reason: "outbox key is not 8 bytes".into(),
        })
}

impl Store {
    /// Set the function called after every commit that added outbox rows
    /// (with their number). Replaces any earlier one. It runs on the
    /// committing thread: keep it short and never block in it.
    pub fn on_outbox_commit(&self, listener: OutboxListener) {
        *self.outbox_listener.write().unwrap_or_else(|e| e.into_inner()) = Some(listener);
    }

    /// Commits `txn`, then tells the listener about `added` new rows.
    pub(super) fn commit_with_outbox(
        &self,
        txn: WriteTransaction,
        added: usize,
        context: &'static str,
    ) -> Result<(), StoreError> {
        txn.commit().ctx(context)?;
        if added > 0 {
            let listener = self.outbox_listener.read().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(f) = listener {
                f(added as u64);
            }
        }
        Ok(())
    }

    /// Up to `limit` rows with a sequence above `after`, oldest first.
    pub fn outbox_page(&self, after: u64, limit: usize) -> Result<Vec<OutboxRow>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(OUTBOX.def).ctx("opening table outbox")?;
        let from = after.saturating_add(1).to_be_bytes();
        let mut out = Vec::new();
        if after == u64::MAX {
            return Ok(out);
        }
        for entry in table.range(from.as_slice()..).ctx("reading table outbox")? {
            if out.len() >= limit {
                break;
            }
            let (k, v) = entry.ctx("reading table outbox")?;
            let seq = parse_seq(k.value())?;
            let event = codec::decode_stored::<StoredOutboxEvent>(OUTBOX.name, k.value(), v.value());
            out.push((seq, event.map(OutboxEvent::from)));
        }
        Ok(out)
    }

    /// Deletes the rows `seqs` (missing ones are not an error); returns how
    /// many there were.
    pub fn delete_outbox(&self, seqs: &[u64]) -> Result<u64, StoreError> {
        if seqs.is_empty() {
            return Ok(0);
        }
        let txn = self.write_txn()?;
        let mut removed = 0;
        {
            let mut table = txn.open_table(OUTBOX.def).ctx("opening table outbox")?;
            for seq in seqs {
                if table
                    .remove(seq.to_be_bytes().as_slice())
                    .ctx("deleting an outbox event")?
                    .is_some()
                {
                    removed += 1;
                }
            }
        }
        txn.commit().ctx("committing outbox deletions")?;
        Ok(removed)
    }

    /// Deletes every row; returns how many there were.
    pub fn clear_outbox(&self) -> Result<u64, StoreError> {
        let txn = self.write_txn()?;
        let n = {
            let mut table = txn.open_table(OUTBOX.def).ctx("opening table outbox")?;
            let n = table.len().ctx("counting outbox events")?;
            table.retain(|_, _| false).ctx("clearing the outbox")?;
            n
        };
        txn.commit().ctx("committing the cleared outbox")?;
        Ok(n)
    }

    /// Rows waiting in the outbox.
    pub fn outbox_len(&self) -> Result<u64, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(OUTBOX.def).ctx("opening table outbox")?;
        table.len().ctx("counting outbox events")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{InstanceConfig, TaskKey, TaskRecord};
    use std::sync::atomic::{AtomicU64, Ordering};

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        (dir, store)
    }

    fn ev(id: &str) -> OutboxEvent {
        OutboxEvent {
            deliver: true,
            audit: None,
            id: id.into(),
            line: format!("{{\"id\":\"{id}\"}}\n"),
        }
    }

    fn ids(store: &Store) -> Vec<String> {
        store
            .outbox_page(0, 100)
            .expect("page")
            .into_iter()
            .map(|(_, e)| e.expect("decodes").id)
            .collect()
    }

    #[test]
    fn rows_keep_commit_order_and_sequences_are_never_reused() {
        let (_dir, store) = store();
        store.append_outbox(&[ev("a"), ev("b")]).expect("append");
        store.append_outbox(&[ev("c")]).expect("append");
        let page = store.outbox_page(0, 2).expect("page");
        let seqs: Vec<u64> = page.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(store.outbox_page(2, 10).expect("page").len(), 1);
        assert_eq!(store.delete_outbox(&[1, 2, 3, 99]).expect("delete"), 3);
        assert_eq!(store.outbox_len().expect("len"), 0);
        store.append_outbox(&[ev("d")]).expect("append");
        let page = store.outbox_page(0, 10).expect("page");
        assert_eq!(page[0].0, 4, "after the table was emptied, the sequence goes on");
        assert_eq!(store.clear_outbox().expect("clear"), 1);
        assert!(ids(&store).is_empty());
    }

    #[test]
    fn an_event_row_is_committed_with_its_change_and_not_without_it() {
        let (_dir, store) = store();
        let inst = InstanceConfig::new("web-1", "http", "http://127.0.0.1:1/");
        store.put_instance_with_events(&inst, &[ev("create")]).expect("put");
        assert_eq!(ids(&store), ["create"]);
        // A change that fails writes neither the change nor its event. (An
        // instance cannot fail this way: its name is an `InstanceName`,
        // which has no NUL.)
        let bad_task = TaskKey::new("x\0y", "g");
        let err = store.write_tasks_with_events(
            &[(TaskKey::new("ok", "g"), Some(TaskRecord::default())), (bad_task, None)],
            &[ev("breaker")],
        );
        assert!(err.is_err());
        assert_eq!(ids(&store), ["create"]);
        assert!(store.load_tasks().expect("load").0.is_empty());
        store
            .put_settings_with_events("monitoring", &serde_json::json!({"a": 1}), &[ev("settings")])
            .expect("settings");
        store
            .write_tasks_with_events(&[(TaskKey::new("ok", "g"), Some(TaskRecord::default()))], &[ev("dl")])
            .expect("tasks");
        assert!(
            store
                .delete_instance_with_events("web-1", &[ev("delete")])
                .expect("delete")
        );
        assert_eq!(ids(&store), ["create", "settings", "dl", "delete"]);
    }

    #[test]
    fn the_listener_hears_of_commits_that_added_rows_only() {
        let (_dir, store) = store();
        let heard = Arc::new(AtomicU64::new(0));
        let h = heard.clone();
        store.on_outbox_commit(Arc::new(move |n| {
            h.fetch_add(n, Ordering::SeqCst);
        }));
        store.put_settings("monitoring", &serde_json::json!({})).expect("plain");
        assert_eq!(heard.load(Ordering::SeqCst), 0);
        store
            .put_settings_with_events("monitoring", &serde_json::json!({}), &[ev("a"), ev("b")])
            .expect("with events");
        assert_eq!(heard.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn rows_survive_a_restart_and_bad_rows_are_reported_with_their_sequence() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let store = Store::open(dir.path()).expect("open");
            store.append_outbox(&[ev("kept")]).expect("append");
            let txn = store.write_txn().expect("txn");
            {
                let mut t = txn.open_table(OUTBOX.def).expect("table");
                t.insert(9u64.to_be_bytes().as_slice(), b"\x01{".as_slice())
                    .expect("insert");
            }
            txn.commit().expect("commit");
        }
        let store = Store::open(dir.path()).expect("reopen");
        let page = store.outbox_page(0, 10).expect("page");
        assert_eq!(page.len(), 2);
        assert_eq!(page[0].1.as_ref().expect("good row").id, "kept");
        assert_eq!(page[1].0, 9);
        assert!(matches!(page[1].1, Err(StoreError::Corrupt { table: "outbox", .. })));
    }
}

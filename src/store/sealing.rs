//! The sealed credentials as a whole: counting them and checking a key
//! against them before anything is written, sealing the plaintext ones an
//! older release (or a backup) left, and re-sealing them all under a new
//! key. Each change is one write transaction: all sealed, or none.
//!
//! The records that hold credentials are the `instances` values and the
//! `sink` document in `settings` (see `stored::StoredInstance` and
//! `stored::StoredSink`).

use std::path::Path;
use std::sync::Arc;

use redb::{Builder, Database, DatabaseError, ReadableDatabase, ReadableTable, TableError, WriteTransaction};

use super::codec::{self, FORMAT_JSON_V1};
use super::records::{SINK_SETTINGS, decode_instance_with, decode_sink, encode_instance, encode_sink};
use super::stored::{StoredInstance, StoredSink};
use super::tables::{INSTANCES, SETTINGS};
use super::{Ctx, FILE_NAME, Store, StoreError, create_database, create_database_unchecked, io_error, open_error};
use crate::secrets::DataKey;

/// The sealed values of a database, against a key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyCensus {
    /// Sealed values in the file.
    pub sealed: usize,
    /// Of those, the ones the key did not open (all of them without a key).
    pub unopened: usize,
}

/// Counts the sealed values in `data_dir`'s database and tries `key` on
/// each, through a read-only open: the file is not written (a refused
/// start leaves it byte for byte as it was). No file: nothing sealed.
pub fn key_census(data_dir: &Path, key: Option<&DataKey>) -> Result<KeyCensus, StoreError> {
    let path = data_dir.join(FILE_NAME);
    if !path.exists() {
        return Ok(KeyCensus::default());
    }
    let sealed = match Builder::new().open_read_only(&path) {
        Ok(db) => sealed_values(&db)?,
        // Not shut down cleanly: a read-only open cannot repair it. The
        // repair (redb's own bookkeeping, which any open would do) is the
        // only write before the key is checked. Without the integrity
        // check, as the read-only open above: the store's own open, next,
        // checks the whole file (once, not twice, after a crash).
        Err(DatabaseError::RepairAborted) => sealed_values(&create_database_unchecked(&path)?)?,
        Err(e) => return Err(open_error(&path, e)),
    };
    let unopened = sealed
        .iter()
        .filter(|(aad, value)| key.is_none_or(|k| k.open(aad, value).is_err()))
        .count();
    Ok(KeyCensus {
        sealed: sealed.len(),
        unopened,
    })
}

/// The startup rule of [`crate::secrets::unlock`] against `data_dir`'s
/// database: the key file, checked against the sealed values (without
/// writing to the database), or made when there are none.
pub fn unlock(
    data_dir: &Path,
    env_path: Option<&Path>,
) -> Result<(crate::secrets::KeyFile, DataKey), crate::secrets::KeyError> {
    crate::secrets::unlock(data_dir, env_path, |key| {
        key_census(data_dir, key).map(|c| crate::secrets::Census {
            sealed: c.sealed,
            unopened: c.unopened,
        })
    })
}

/// Every sealed value in the database, with its associated data.
fn sealed_values(db: &impl ReadableDatabase) -> Result<Vec<(String, String)>, StoreError> {
    let txn = db.begin_read().ctx("starting a read transaction")?;
    let mut sealed = Vec::new();
    match txn.open_table(INSTANCES.def) {
        Ok(t) => sealed.extend(instance_sealed(&t)?),
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e).ctx("opening table instances"),
    }
    match txn.open_table(SETTINGS.def) {
        Ok(t) => sealed.extend(sink_sealed(&t)?),
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e).ctx("opening table settings"),
    }
    Ok(sealed)
}

/// Sealed values of the `instances` table. A record that does not decode
/// is left to the store to report.
fn instance_sealed(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
) -> Result<Vec<(String, String)>, StoreError> {
    let mut out = Vec::new();
    for entry in table.iter().ctx("reading table instances")? {
        let (k, v) = entry.ctx("reading table instances")?;
        if !may_hold_sealed(v.value()) {
            continue;
        }
        if let Ok(s) = codec::decode_stored::<StoredInstance>(INSTANCES.name, k.value(), v.value()) {
            out.extend(s.sealed().into_iter().map(|(aad, v)| (aad, v.to_string())));
        }
    }
    Ok(out)
}

/// Whether an instance record may hold a sealed value: all but those whose
/// text shows no sealed URL and no credential (`"auth":{"kind":"none"}`
/// as JSON writes it; inside a string its quotes would be escaped). Any
/// other record is decoded, so a record of another shape is never missed;
/// at 100,000 instances without credentials the start skips 100,000
/// decodes.
fn may_hold_sealed(record: &[u8]) -> bool {
    match std::str::from_utf8(record) {
        Ok(text) => text.contains("\"url_sealed\"") || !text.contains("\"auth\":{\"kind\":\"none\"}"),
        Err(_) => true,
    }
}

fn sink_sealed(table: &impl ReadableTable<&'static [u8], &'static [u8]>) -> Result<Vec<(String, String)>, StoreError> {
    let guard = table.get(SINK_SETTINGS.as_bytes()).ctx("reading settings")?;
    Ok(guard
        .and_then(|v| codec::decode_stored::<StoredSink>(SETTINGS.name, SINK_SETTINGS.as_bytes(), v.value()).ok())
        .map(|s| s.sealed())
        .unwrap_or_default())
}

/// Which records a pass rewrites.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Records in format 1 (plaintext credentials), sealed under the key.
    SealPlaintext,
    /// Every record, opened with `from` and sealed under the key.
    Reseal,
}

/// Rewrites the credential records in `txn` (see [`Pass`]); returns how
/// many records it rewrote. A record that does not open fails the pass.
fn rewrite(txn: &WriteTransaction, from: Option<&DataKey>, to: &DataKey, pass: Pass) -> Result<usize, StoreError> {
    let wanted = |bytes: &[u8]| pass == Pass::Reseal || bytes.first() == Some(&FORMAT_JSON_V1);
    let mut count = 0;
    {
        let mut table = txn.open_table(INSTANCES.def).ctx("opening table instances")?;
        let mut redo = Vec::new();
        for entry in table.iter().ctx("reading table instances")? {
            let (k, v) = entry.ctx("reading table instances")?;
            if wanted(v.value()) {
                let inst = decode_instance_with(k.value(), v.value(), from)?;
                redo.push((k.value().to_vec(), encode_instance(&inst, Some(to))?));
            }
        }
        count += redo.len();
        for (k, v) in redo {
            table.insert(k.as_slice(), v.as_slice()).ctx("sealing an instance")?;
        }
    }
    let mut table = txn.open_table(SETTINGS.def).ctx("opening table settings")?;
    let redo = match table.get(SINK_SETTINGS.as_bytes()).ctx("reading settings")? {
        Some(v) if wanted(v.value()) => {
            let doc = decode_sink(v.value(), from)?;
            Some(encode_sink(&doc, Some(to))?)
        }
        _ => None,
    };
    if let Some(v) = redo {
        count += 1;
        table
            .insert(SINK_SETTINGS.as_bytes(), v.as_slice())
            .ctx("sealing the sink settings")?;
    }
    Ok(count)
}

/// Seals, inside `txn` (the open's schema transaction), every credential
/// still in plaintext.
pub(super) fn seal_plaintext(txn: &WriteTransaction, key: &DataKey) -> Result<usize, StoreError> {
    let n = rewrite(txn, None, key, Pass::SealPlaintext)?;
    if n > 0 {
        tracing::info!(
            records = n,
            "sealed credentials stored in plaintext by an older release"
        );
    }
    Ok(n)
}

/// Rewrites the database at `path` as a fresh file holding only the live
/// values, renamed over the old one, and reopens it. A redb file keeps the
/// pages a commit freed (with whatever they held: plaintext credentials
/// before sealing, old ciphertext before a re-seal) until they are reused;
/// this leaves none.
pub(super) fn scrub(db: Database, path: &Path) -> Result<Database, StoreError> {
    let fresh_path = path.with_file_name(format!("{FILE_NAME}.scrub"));
    match std::fs::remove_file(&fresh_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_error(&fresh_path)(e)),
        _ => {}
    }
    let fresh = create_database(&fresh_path)?;
    let copied = db
        .begin_read()
        .ctx("reading the database to rewrite")
        .and_then(|snapshot| super::copy::copy_whole(&snapshot, &fresh));
    fresh.close().ctx("closing the rewritten database")?;
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&fresh_path);
        return Err(e);
    }
    db.close().ctx("closing the database to replace it")?;
    std::fs::rename(&fresh_path, path).map_err(io_error(path))?;
    if let Some(dir) = path.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    create_database(path)
}

/// Opens `data_dir`'s database and rewrites it without free pages (see
/// [`scrub`]); for `pollster admin rotate-key` after the re-seal.
pub fn scrub_file(data_dir: &Path) -> Result<(), StoreError> {
    let path = data_dir.join(FILE_NAME);
    let db = create_database(&path)?;
    scrub(db, &path)?.close().ctx("closing the database")
}

impl Store {
    /// Re-seals every credential under `new` in one transaction (the
    /// store must be open with the current key). Returns the number of
    /// records rewritten. From the commit on, this store and its clones
    /// seal and open with `new`: a running server goes on without a restart.
    pub fn reseal(&self, new: &DataKey) -> Result<usize, StoreError> {
        self.reseal_with_events(new, &[])
    }

    /// [`Store::reseal`] with `events` (the audit row of the rotation)
    /// written in the same transaction.
    pub fn reseal_with_events(&self, new: &DataKey, events: &[super::OutboxEvent]) -> Result<usize, StoreError> {
        let txn = self.write_txn()?;
        let old = self.data_key();
        let n = rewrite(&txn, old.as_deref(), new, Pass::Reseal)?;
        super::events::append(&txn, events)?;
        // Held across the commit: no transaction begins between the commit
        // and the new key (a writer reads the key once its own transaction
        // has begun, a reader begins its transaction with the lock held).
        let mut key = self.key.write().unwrap_or_else(|e| e.into_inner());
        self.commit_with_outbox(txn, events.len(), "committing the re-sealed credentials")?;
        *key = Some(Arc::new(new.clone()));
        Ok(n)
    }
}

/// A credential record as it goes inside a backup: in format 1, its
/// credentials in plaintext (the backup's own encryption protects them),
/// so the machine it is restored on seals them under its own key. Other
/// values pass unchanged.
pub(super) fn backup_value(
    table: &'static str,
    key: &[u8],
    value: &[u8],
    data_key: Option<&DataKey>,
) -> Result<Option<Vec<u8>>, StoreError> {
    if table == INSTANCES.name {
        let inst = decode_instance_with(key, value, data_key)?;
        return codec::encode_stored_version(FORMAT_JSON_V1, &StoredInstance::plain(&inst)).map(Some);
    }
    if table == SETTINGS.name && key == SINK_SETTINGS.as_bytes() {
        let doc = decode_sink(value, data_key)?;
        return codec::encode_stored_version(FORMAT_JSON_V1, &StoredSink::Plain(doc)).map(Some);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Auth, InstanceConfig};

    #[test]
    fn only_records_that_certainly_hold_no_sealed_value_are_skipped_by_the_census() {
        let key = super::super::tests::test_key();
        let record = |inst: &InstanceConfig| encode_instance(inst, Some(&key)).expect("encodes");
        let sealed_count = |bytes: &[u8]| {
            codec::decode_stored::<StoredInstance>(INSTANCES.name, b"x", bytes)
                .expect("decodes")
                .sealed()
                .len()
        };
        let plain = InstanceConfig::new("plain", "t", "https://pve.example:8006");
        let mut tricky = InstanceConfig::new("tricky", "t", "https://pve.example:8006");
        tricky
            .labels
            .insert("note".into(), r#""auth":{"kind":"none"} "url_sealed""#.into());
        let mut bearer = InstanceConfig::new("bearer", "t", "https://pve.example:8006");
        bearer.auth = Auth::Bearer { token: "t0ken".into() };
        bearer.labels.insert("note".into(), r#""auth":{"kind":"none"}"#.into());
        let userinfo = InstanceConfig::new("userinfo", "t", "https://u:pw@pve.example:8006");
        for (inst, holds) in [(&plain, false), (&tricky, false), (&bearer, true), (&userinfo, true)] {
            let bytes = record(inst);
            assert_eq!(sealed_count(&bytes) > 0, holds, "{}", inst.name);
            // Never skipped when it holds one.
            if holds {
                assert!(may_hold_sealed(&bytes), "{}", inst.name);
            }
        }
        assert!(!may_hold_sealed(&record(&plain)), "the common case is skipped");
        assert!(may_hold_sealed(&[0xff, 0xfe]), "a record that is not text is decoded");
    }
}

//! The latest values and kept bodies of every task (`values`, `bodies`):
//! written by the engine's group commit when they change, read back at
//! start so a restart serves what is still fresh before the first poll.

use redb::ReadableTable;

use super::stored::{StoredBody, StoredBodyRef, StoredValues, StoredValuesRef};
use super::tables::{self, BODIES, VALUES};
use super::{Ctx, Store, StoreError, codec};
use crate::model::{BodyRecord, TaskKey, TaskValues};

/// Values read at start, and the rows that could not be read.
pub type LoadedValues = (Vec<(TaskKey, TaskValues)>, Vec<StoreError>);
/// Kept bodies read at start (task, item, body), and the unreadable rows.
pub type LoadedBodies = (Vec<(TaskKey, String, BodyRecord)>, Vec<StoreError>);

/// What one group commit changes: `Some` writes, `None` deletes.
#[derive(Debug, Default, Clone)]
pub struct LatestBatch {
    pub values: Vec<(TaskKey, Option<TaskValues>)>,
    pub bodies: Vec<(TaskKey, String, Option<BodyRecord>)>,
}

impl LatestBatch {
    pub fn is_empty(&self) -> bool {
        self.values.is_empty() && self.bodies.is_empty()
    }
}

fn corrupt(table: &'static str, key: &[u8], reason: String) -> StoreError {
    StoreError::Corrupt {
        table,
        key: codec::display_key(key),
        reason,
    }
}

impl Store {
    /// Every task's stored values; a row that cannot be read is returned
    /// in the second list and is not served.
    pub fn load_values(&self) -> Result<LoadedValues, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(VALUES.def).ctx("opening table values")?;
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for entry in table.iter().ctx("reading table values")? {
            let (k, v) = entry.ctx("reading table values")?;
            let (k, v) = (k.value(), v.value());
            let row = tables::parse_task_key(k).and_then(|key| {
                let stored: StoredValues = codec::decode_stored(VALUES.name, k, v)?;
                let values = TaskValues::try_from(stored).map_err(|e| corrupt(VALUES.name, k, e))?;
                Ok((key, values))
            });
            match row {
                Ok(r) => out.push(r),
                Err(e) => bad.push(e),
            }
        }
        Ok((out, bad))
    }

    /// Every kept body (the bytes included); unreadable rows apart.
    pub fn load_bodies(&self) -> Result<LoadedBodies, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(BODIES.def).ctx("opening table bodies")?;
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for entry in table.iter().ctx("reading table bodies")? {
            let (k, v) = entry.ctx("reading table bodies")?;
            let (k, v) = (k.value(), v.value());
            let row = tables::parse_body_key(k).and_then(|(key, item)| {
                let body = decode_body(k, v)?;
                Ok((key, item, body))
            });
            match row {
                Ok(r) => out.push(r),
                Err(e) => bad.push(e),
            }
        }
        Ok((out, bad))
    }

    /// One kept body.
    pub fn read_body(&self, key: &TaskKey, item: &str) -> Result<Option<BodyRecord>, StoreError> {
        let k = tables::body_key(key, item)?;
        let txn = self.read_txn()?;
        let table = txn.open_table(BODIES.def).ctx("opening table bodies")?;
        let guard = table.get(k.as_slice()).ctx("reading a body")?;
        guard.map(|v| decode_body(&k, v.value())).transpose()
    }

    /// Writes a batch of values and bodies in one durable transaction.
    pub fn write_latest(&self, batch: &LatestBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(VALUES.def).ctx("opening table values")?;
            for (key, values) in &batch.values {
                let k = tables::task_key(key)?;
                match values {
                    Some(v) => {
                        let bytes = codec::encode_stored(&StoredValuesRef::from(v))?;
                        table.insert(k.as_slice(), bytes.as_slice()).ctx("writing values")?;
                    }
                    None => {
                        table.remove(k.as_slice()).ctx("deleting values")?;
                    }
                }
            }
            let mut table = txn.open_table(BODIES.def).ctx("opening table bodies")?;
            for (key, item, body) in &batch.bodies {
                let k = tables::body_key(key, item)?;
                match body {
                    Some(b) => {
                        let bytes = codec::encode_stored(&StoredBodyRef::from(b))?;
                        table.insert(k.as_slice(), bytes.as_slice()).ctx("writing a body")?;
                    }
                    None => {
                        table.remove(k.as_slice()).ctx("deleting a body")?;
                    }
                }
            }
        }
        txn.commit().ctx("committing values and bodies")
    }
}

fn decode_body(k: &[u8], v: &[u8]) -> Result<BodyRecord, StoreError> {
    let stored: StoredBody = codec::decode_stored(BODIES.name, k, v)?;
    BodyRecord::try_from(stored).map_err(|e| corrupt(BODIES.name, k, e))
}

//! Copying every table of one database into another, in one transaction:
//! the backup, the restore and the rewrite that leaves no free pages all
//! copy this way. Only the live values are written: nothing a value once
//! held survives in the copy's free pages.

use redb::{Database, ReadableTable};

use super::tables::ALL;
use super::{Ctx, StoreError, begin_durable_write};

/// What becomes of one value on its way into the copy.
pub(super) enum Value {
    /// Copied as it is.
    Keep,
    /// Copied as these bytes instead.
    Replace(Vec<u8>),
    /// Not copied, nor the rest of its table (the table is created empty).
    Skip,
}

/// Copies every table of `snapshot` into `dst` in one transaction, each
/// value as `value(table, key, bytes)` says.
pub(super) fn copy_tables(
    snapshot: &redb::ReadTransaction,
    dst: &Database,
    mut value: impl FnMut(&'static str, &[u8], &[u8]) -> Result<Value, StoreError>,
) -> Result<(), StoreError> {
    let txn = begin_durable_write(dst)?;
    for table in ALL {
        let src = snapshot.open_table(table.def).ctx("opening a table to copy")?;
        let mut to = txn.open_table(table.def).ctx("creating a table in the copy")?;
        for entry in src.iter().ctx("reading a table to copy")? {
            let (k, v) = entry.ctx("reading a table to copy")?;
            match value(table.name, k.value(), v.value())? {
                Value::Keep => to.insert(k.value(), v.value()),
                Value::Replace(bytes) => to.insert(k.value(), bytes.as_slice()),
                Value::Skip => break,
            }
            .ctx("writing the copy")?;
        }
    }
    txn.commit().ctx("committing the copy")
}

/// Copies every table of `snapshot` into `dst` as it is.
pub(super) fn copy_whole(snapshot: &redb::ReadTransaction, dst: &Database) -> Result<(), StoreError> {
    copy_tables(snapshot, dst, |_, _, _| Ok(Value::Keep))
}

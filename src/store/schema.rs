//! Schema version and migrations, run once by `Store::open` inside a single
//! write transaction: either the whole upgrade commits or none of it does.
//!
//! Two kinds of version work together. Each stored value carries its own
//! format version (`codec`, `stored`), and a value an older release wrote
//! is upgraded as it is read. The schema version here covers the file: a
//! table added, split or re-keyed, and also every new value format, so that
//! an older release refuses the file as a whole rather than skipping the
//! records it cannot read. The step for a new value format may rewrite the
//! table's values in the new version, or do nothing and leave them to be
//! upgraded as they are read.

use std::path::Path;

use redb::{Database, ReadableTable, WriteTransaction};

use super::tables::{self, META, SCHEMA_VERSION_KEY};
use super::{Ctx, StoreError, begin_durable_write, codec};
use crate::secrets::DataKey;

/// The layout this release reads and writes. Bump it together with a new
/// entry in [`MIGRATIONS`].
///
/// 2: credentials sealed (`instances` values and the `sink` settings
/// document in format 2, see `sealing`).
/// 3: the `maintenance` table (maintenance windows).
pub const SCHEMA_VERSION: u32 = 3;

/// One upgrade step, run inside the open write transaction.
type Migration = fn(&WriteTransaction) -> Result<(), StoreError>;

/// `MIGRATIONS[i]` upgrades a file from schema `i + 1` to `i + 2`; its length
/// is therefore always `SCHEMA_VERSION - 1`.
const MIGRATIONS: [Migration; SCHEMA_VERSION as usize - 1] = [v1_to_v2, v2_to_v3];

/// Schema 2 seals credentials. Sealing needs the data key, which this step
/// does not have: [`prepare`] seals every plaintext credential in this same
/// transaction when the store opens with its key, and a store opened
/// without one (an admin command) leaves them in format 1, which still
/// reads, for the next start of the server.
fn v1_to_v2(_txn: &WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}

/// Schema 3 adds the `maintenance` table, which [`prepare`] creates with
/// every other table; an older release refuses the file rather than
/// dropping the windows it cannot read.
fn v2_to_v3(_txn: &WriteTransaction) -> Result<(), StoreError> {
    Ok(())
}

/// Creates every table and brings the file to [`SCHEMA_VERSION`], or refuses
/// a newer file without writing to it. With `key`, every credential still
/// in plaintext is sealed in the same transaction; returns how many records
/// that sealed.
pub(super) fn prepare(db: &Database, path: &Path, key: Option<&DataKey>) -> Result<usize, StoreError> {
    let txn = begin_durable_write(db)?;
    // `meta` first: its types never change, so opening it is safe whatever
    // release wrote the file, while the other tables may differ in a newer one.
    let found = read_version(&txn)?;
    if let Some(found) = found
        && found > SCHEMA_VERSION
    {
        txn.abort().ctx("abandoning the open of a newer file")?;
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for table in tables::ALL {
        txn.open_table(table.def).ctx("creating tables")?;
    }
    match found {
        Some(SCHEMA_VERSION) => {}
        Some(older) => {
            migrate(&txn, older)?;
            write_version(&txn)?;
        }
        // A new file.
        None => write_version(&txn)?,
    }
    let sealed = match key {
        Some(key) => super::sealing::seal_plaintext(&txn, key)?,
        None => 0,
    };
    txn.commit().ctx("committing the schema")?;
    Ok(sealed)
}

fn read_version(txn: &WriteTransaction) -> Result<Option<u32>, StoreError> {
    let meta = txn.open_table(META.def).ctx("opening table meta")?;
    let guard = meta.get(SCHEMA_VERSION_KEY).ctx("reading the schema version")?;
    guard
        .map(|v| codec::decode(META.name, SCHEMA_VERSION_KEY, v.value()))
        .transpose()
}

fn write_version(txn: &WriteTransaction) -> Result<(), StoreError> {
    // Always format 1, whatever later releases use for other values: an
    // older release must be able to read this number to refuse the file.
    let bytes = codec::encode("schema version", &SCHEMA_VERSION)?;
    let mut meta = txn.open_table(META.def).ctx("opening table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, bytes.as_slice())
        .ctx("writing the schema version")?;
    Ok(())
}

/// Runs every step from `found` up to [`SCHEMA_VERSION`], in order.
fn migrate(txn: &WriteTransaction, found: u32) -> Result<(), StoreError> {
    for from in found..SCHEMA_VERSION {
        let step = from
            .checked_sub(1)
            .and_then(|i| MIGRATIONS.get(i as usize))
            .ok_or_else(|| StoreError::Corrupt {
                table: META.name,
                key: codec::display_key(SCHEMA_VERSION_KEY),
                reason: format!("no known schema version {from}"),
            })?;
        tracing::info!(from, to = from + 1, "migrating database schema");
        step(txn)?;
    }
    Ok(())
}

//! Online backup: every table copied from ONE read transaction (a single
//! committed snapshot) into a fresh redb file, while writers carry on. The
//! sessions table is created empty: a backup must never log anyone in
//! (login throttling lives in memory and is never stored at all). The
//! copy is built beside the destination and renamed into place, so `dest` is
//! either the old file or a complete, openable new one.

use std::fs;
use std::path::Path;

use redb::ReadableTable;

use super::tables::{ALL, SESSIONS};
use super::{Ctx, Store, StoreError, begin_durable_write, create_database, io_error};

impl Store {
    /// Writes a consistent copy of the whole database to `dest` (replacing
    /// it if present). `dest` must not be the live database file.
    pub fn backup_to(&self, dest: &Path) -> Result<(), StoreError> {
        let invalid = |msg: &str| StoreError::Io {
            path: dest.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.to_string()),
        };
        if is_same_file(dest, self.path()) {
            return Err(invalid("backup destination is the live database file"));
        }
        let Some(file_name) = dest.file_name() else {
            return Err(invalid("backup destination has no file name"));
        };
        let mut partial_name = file_name.to_os_string();
        partial_name.push(".partial");
        let partial = dest.with_file_name(partial_name);

        let snapshot = self.read_txn()?;
        match fs::remove_file(&partial) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_error(&partial)(e));
            }
            _ => {}
        }
        let result = copy_snapshot(&snapshot, &partial)
            .and_then(|()| fs::rename(&partial, dest).map_err(io_error(dest)))
            .and_then(|()| sync_parent(dest));
        if result.is_err() {
            let _ = fs::remove_file(&partial);
        }
        result
    }
}

fn copy_snapshot(snapshot: &redb::ReadTransaction, path: &Path) -> Result<(), StoreError> {
    let copy = create_database(path)?;
    let txn = begin_durable_write(&copy)?;
    for table in ALL {
        let src = snapshot.open_table(table.def).ctx("opening a table to back up")?;
        let mut dst = txn.open_table(table.def).ctx("creating a table in the backup")?;
        if table.name == SESSIONS.name {
            continue;
        }
        for entry in src.iter().ctx("reading a table to back up")? {
            let (k, v) = entry.ctx("reading a table to back up")?;
            dst.insert(k.value(), v.value()).ctx("writing the backup")?;
        }
    }
    txn.commit().ctx("committing the backup")?;
    // Release the file and its locks before it is renamed and handed out.
    copy.close().ctx("closing the backup")?;
    Ok(())
}

/// Makes the rename itself durable.
fn sync_parent(dest: &Path) -> Result<(), StoreError> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(io_error(parent))
}

/// Whether `a` and `b` name the same existing file.
fn is_same_file(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

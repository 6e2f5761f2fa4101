//! Online backup and offline restore of the whole database, as the bytes
//! of a redb file that the caller encrypts (`crate::secrets::backup`).
//!
//! A backup copies every table from ONE read transaction (a single
//! committed snapshot) while writers carry on, into a redb file built in
//! memory: its credentials in plaintext (format 1, see `sealing`), so the
//! passphrase of the encrypted file is all a restore on another machine
//! needs, and never on disk. The sessions table is created empty: a backup
//! must never log anyone in (login throttling lives in memory and is never
//! stored at all).
//!
//! A restore checks the whole copy (the file opens, its schema is one this
//! release reads, every credential record decodes) and seals its
//! credentials under this machine's key, all in memory, before it writes a
//! file beside the database and renames it into place: the database is
//! either the old file or the complete new one.

use std::fs;
use std::path::Path;
use std::sync::{Arc, RwLock};

use redb::{Builder, Database, ReadableDatabase, ReadableTable, StorageBackend};

use super::records::{SINK_SETTINGS, decode_instance_with, decode_sink, decode_task};
use super::tables::{ALL, INSTANCES, SESSIONS, SETTINGS, TASKS};
use super::{Ctx, FILE_NAME, Store, StoreError, begin_durable_write, io_error, schema};
use crate::secrets::DataKey;

/// What a restore put in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    pub instances: usize,
    pub tasks: usize,
}

impl Store {
    /// A consistent copy of the database as redb file bytes, credentials in
    /// plaintext and without sessions: only ever handed out encrypted.
    pub fn backup_bytes(&self) -> Result<Vec<u8>, StoreError> {
        let snapshot = self.read_txn()?;
        let file = MemFile::default();
        let copy = in_memory(&file)?;
        copy_tables(&snapshot, &copy, Copy::Backup(self.data_key()))?;
        copy.close().ctx("closing the backup")?;
        Ok(file.take())
    }
}

/// What [`copy_tables`] copies.
#[derive(Clone, Copy)]
pub(super) enum Copy<'a> {
    /// Everything as it is.
    Whole,
    /// No sessions; credentials opened with the key, in plaintext.
    Backup(Option<&'a DataKey>),
}

/// Copies every table of `snapshot` into `dst` in one transaction. Only
/// the live values are written: nothing a value once held survives in
/// `dst`'s free pages.
pub(super) fn copy_tables(snapshot: &redb::ReadTransaction, dst: &Database, how: Copy) -> Result<(), StoreError> {
    let txn = begin_durable_write(dst)?;
    for table in ALL {
        let src = snapshot.open_table(table.def).ctx("opening a table to copy")?;
        let mut to = txn.open_table(table.def).ctx("creating a table in the copy")?;
        if table.name == SESSIONS.name && matches!(how, Copy::Backup(_)) {
            continue;
        }
        for entry in src.iter().ctx("reading a table to copy")? {
            let (k, v) = entry.ctx("reading a table to copy")?;
            let plain = match how {
                Copy::Whole => None,
                Copy::Backup(key) => super::sealing::backup_value(table.name, k.value(), v.value(), key)?,
            };
            to.insert(k.value(), plain.as_deref().unwrap_or(v.value()))
                .ctx("writing the copy")?;
        }
    }
    txn.commit().ctx("committing the copy")
}

/// A backup checked as a whole and sealed under this machine's key, in
/// memory, ready to replace a database ([`CheckedBackup::install`]).
pub struct CheckedBackup {
    sealed: Vec<u8>,
    pub restored: Restored,
}

impl std::fmt::Debug for CheckedBackup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedBackup")
            .field("restored", &self.restored)
            .finish_non_exhaustive()
    }
}

/// Checks `bytes` (the redb file inside a backup) as a whole: the file
/// opens and passes redb's integrity check, its schema is one this release
/// reads (an older one is migrated), every credential record decodes and
/// every task record decodes, and it holds no session. Its credentials are
/// sealed under `key` on the way. Nothing is written to disk.
pub fn check_backup(bytes: Vec<u8>, key: &DataKey) -> Result<CheckedBackup, StoreError> {
    let invalid = |reason: String| StoreError::Corrupt {
        table: "backup",
        key: String::new(),
        reason,
    };
    let file = MemFile(Arc::new(RwLock::new(bytes)));
    let db = Builder::new()
        .set_check_integrity_on_open(true)
        .create_with_backend(file.clone())
        .map_err(|e| invalid(format!("not a Pollster database: {e}")))?;
    // Brings an older schema up to date and seals the plaintext credentials.
    schema::prepare(&db, Path::new("(backup)"), Some(key))?;
    let restored = {
        let txn = db.begin_read().ctx("reading the backup")?;
        let instances = txn.open_table(INSTANCES.def).ctx("opening table instances")?;
        let mut n = 0;
        for entry in instances.iter().ctx("reading table instances")? {
            let (k, v) = entry.ctx("reading table instances")?;
            decode_instance_with(k.value(), v.value(), Some(key))?;
            n += 1;
        }
        let settings = txn.open_table(SETTINGS.def).ctx("opening table settings")?;
        if let Some(v) = settings.get(SINK_SETTINGS.as_bytes()).ctx("reading settings")? {
            decode_sink(v.value(), Some(key))?;
        }
        let tasks = txn.open_table(TASKS.def).ctx("opening table tasks")?;
        let mut t = 0;
        for entry in tasks.iter().ctx("reading table tasks")? {
            let (k, v) = entry.ctx("reading table tasks")?;
            decode_task(k.value(), v.value())?;
            t += 1;
        }
        let sessions = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
        if sessions.iter().ctx("reading table sessions")?.next().is_some() {
            return Err(invalid(
                "the backup holds sessions; a Pollster backup never does".into(),
            ));
        }
        Restored { instances: n, tasks: t }
    };
    // The plaintext the sealing replaced is still in the freed pages: only
    // a fresh copy of the live values goes to disk.
    let fresh = MemFile::default();
    {
        let copy = in_memory(&fresh)?;
        copy_tables(&db.begin_read().ctx("reading the backup")?, &copy, Copy::Whole)?;
        copy.close().ctx("closing the sealed backup")?;
    }
    db.close().ctx("closing the checked backup")?;
    drop(file);
    Ok(CheckedBackup {
        sealed: fresh.take(),
        restored,
    })
}

impl CheckedBackup {
    /// Makes the backup the database of `data_dir`: written beside it and
    /// renamed into place, so the database is either the old file or the
    /// whole new one. Refused while a server holds the database.
    pub fn install(self, data_dir: &Path) -> Result<Restored, StoreError> {
        check_not_in_use(data_dir)?;
        let live = data_dir.join(FILE_NAME);
        let mut dir = fs::DirBuilder::new();
        dir.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dir, 0o700);
        dir.create(data_dir).map_err(io_error(data_dir))?;
        let partial = data_dir.join(format!("{FILE_NAME}.restore"));
        let result = write_private(&partial, &self.sealed)
            .and_then(|()| fs::rename(&partial, &live).map_err(io_error(&live)))
            .and_then(|()| sync_dir(data_dir));
        if result.is_err() {
            let _ = fs::remove_file(&partial);
        }
        result.map(|()| self.restored)
    }
}

/// Refuses ([`StoreError::Locked`]) while a server holds `data_dir`'s
/// database, without writing to it.
pub fn check_not_in_use(data_dir: &Path) -> Result<(), StoreError> {
    let live = data_dir.join(FILE_NAME);
    if !live.exists() {
        return Ok(());
    }
    match Builder::new().open_read_only(&live) {
        Ok(db) => {
            drop(db);
            Ok(())
        }
        Err(e @ (redb::DatabaseError::DatabaseAlreadyOpen | redb::DatabaseError::LockProtocolMismatch)) => {
            Err(super::open_error(&live, e))
        }
        // Damaged or not shut down cleanly: it is about to be replaced.
        Err(_) => Ok(()),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    let _ = fs::remove_file(path);
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path).map_err(io_error(path))?;
    f.write_all(bytes).map_err(io_error(path))?;
    f.sync_all().map_err(io_error(path))
}

/// Makes a rename durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

fn in_memory(file: &MemFile) -> Result<Database, StoreError> {
    Builder::new()
        .create_with_backend(file.clone())
        .map_err(|e| StoreError::Db {
            context: "creating the backup in memory",
            source: e.into(),
        })
}

/// A redb file in memory whose bytes can be taken once the database is
/// closed (redb's own `InMemoryBackend` does not hand them out).
#[derive(Clone, Default)]
struct MemFile(Arc<RwLock<Vec<u8>>>);

impl MemFile {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.write().unwrap_or_else(|e| e.into_inner()))
    }
}

impl std::fmt::Debug for MemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemFile")
    }
}

fn out_of_range() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, "offset out of range")
}

impl StorageBackend for MemFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.0.read().unwrap_or_else(|e| e.into_inner()).len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let data = self.0.read().unwrap_or_else(|e| e.into_inner());
        let at = usize::try_from(offset).map_err(|_| out_of_range())?;
        let src = data.get(at..at + out.len()).ok_or_else(out_of_range)?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let len = usize::try_from(len).map_err(|_| out_of_range())?;
        self.0.write().unwrap_or_else(|e| e.into_inner()).resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut file = self.0.write().unwrap_or_else(|e| e.into_inner());
        let at = usize::try_from(offset).map_err(|_| out_of_range())?;
        let dst = file.get_mut(at..at + data.len()).ok_or_else(out_of_range)?;
        dst.copy_from_slice(data);
        Ok(())
    }
}

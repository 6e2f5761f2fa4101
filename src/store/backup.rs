//! Online backup and offline restore of the whole database, as the bytes
//! of a redb file that the caller encrypts (`crate::secrets::backup`).
//!
//! A backup copies every table from ONE read transaction (a single
//! committed snapshot) while writers carry on, into a redb file of its own
//! ([`Store::backup_to`]): its credentials in plaintext (format 1, see
//! `sealing`), so the passphrase of the encrypted file is all a restore on
//! another machine needs. That file is a work file in the data directory
//! (mode 0600, removed as soon as it is encrypted): the database is never
//! held in memory, whatever its size. The sessions table is created empty:
//! a backup must never log anyone in (login throttling lives in memory and
//! is never stored at all).
//!
//! A restore checks the whole copy (the file opens, its schema is one this
//! release reads, every credential record decodes), seals its credentials
//! under this machine's key and copies the live values into a file beside
//! the database ([`check_backup`]), then renames that into place
//! ([`CheckedBackup::install`]): the database is either the old file or the
//! complete new one. Both databases are opened with a small page cache, so
//! memory stays flat however large the backup is; the disk must hold the
//! plaintext and the sealed copy at once ([`free_space`]).

use std::fs;
use std::path::Path;

use redb::{Builder, Database, ReadableDatabase, ReadableTable};

use super::change::OutboxEvent;
use super::events;
use super::records::{SINK_SETTINGS, decode_instance_with, decode_sink, decode_task};
use super::tables::{INSTANCES, SESSIONS, SETTINGS, TASKS};
use super::{Ctx, FILE_NAME, Store, StoreError, begin_durable_write, copy, create_database_with, io_error, schema};
use crate::secrets::DataKey;

/// What a restore put in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    pub instances: usize,
    pub tasks: usize,
}

/// Page cache of the work databases of a backup or restore: small, so a
/// large database costs disk, not memory (redb keeps its write buffer
/// within half of it).
const WORK_CACHE_BYTES: usize = 16 * 1024 * 1024;

impl Store {
    /// A consistent copy of the database written as a new redb file at
    /// `path` (mode 0600), credentials in plaintext and without sessions:
    /// only ever handed out encrypted. The caller removes the file.
    pub fn backup_to(&self, path: &Path) -> Result<(), StoreError> {
        let (snapshot, key) = self.read_txn_with_key()?;
        let _ = fs::remove_file(path);
        let copy = create_database_with(path, WORK_CACHE_BYTES, false)?;
        copy_for_backup(&snapshot, &copy, key.as_deref())?;
        copy.close().ctx("closing the backup")
    }

    /// [`Store::backup_to`] read back, for tests.
    #[cfg(test)]
    pub fn backup_bytes(&self) -> Result<Vec<u8>, StoreError> {
        let dir = tempfile::tempdir().map_err(io_error(Path::new("(tempdir)")))?;
        let path = dir.path().join("backup.redb");
        self.backup_to(&path)?;
        fs::read(&path).map_err(io_error(&path))
    }
}

/// Copies every table of `snapshot` into `dst` as a backup holds it: no
/// sessions; credentials opened with `key`, in plaintext.
fn copy_for_backup(snapshot: &redb::ReadTransaction, dst: &Database, key: Option<&DataKey>) -> Result<(), StoreError> {
    copy::copy_tables(snapshot, dst, |table, k, v| {
        if table == SESSIONS.name {
            return Ok(copy::Value::Skip);
        }
        Ok(match super::sealing::backup_value(table, k, v, key)? {
            Some(plain) => copy::Value::Replace(plain),
            None => copy::Value::Keep,
        })
    })
}

/// A backup checked as a whole and sealed under this machine's key, as a
/// file beside the database, ready to replace it ([`CheckedBackup::install`]).
/// Dropped without being installed, the file is removed.
pub struct CheckedBackup {
    sealed: Option<std::path::PathBuf>,
    pub restored: Restored,
}

impl std::fmt::Debug for CheckedBackup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedBackup")
            .field("restored", &self.restored)
            .finish_non_exhaustive()
    }
}

impl Drop for CheckedBackup {
    fn drop(&mut self) {
        if let Some(path) = self.sealed.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// Where [`check_backup`] writes the sealed copy in `data_dir`.
pub fn restore_work_file(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join(format!("{FILE_NAME}.restore"))
}

/// Checks the redb file at `plain` (the inside of a backup) as a whole: the
/// file opens and passes redb's integrity check, its schema is one this
/// release reads (an older one is migrated), every credential record
/// decodes and every task record decodes, and it holds no session. Its
/// credentials are sealed under `key` on the way (in `plain` itself), and
/// the live values are copied into a fresh file beside `data_dir`'s
/// database ([`restore_work_file`]), with `events` (the audit row of the
/// restore) appended in the same transaction. The live database is not
/// touched.
pub fn check_backup(
    plain: &Path,
    key: &DataKey,
    data_dir: &Path,
    events: &[OutboxEvent],
) -> Result<CheckedBackup, StoreError> {
    let invalid = |reason: String| StoreError::Corrupt {
        table: "backup",
        key: String::new(),
        reason,
    };
    let db = Builder::new()
        .set_cache_size(WORK_CACHE_BYTES)
        .set_check_integrity_on_open(true)
        .open(plain)
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
    // a fresh copy of the live values goes beside the database.
    let path = restore_work_file(data_dir);
    let _ = fs::remove_file(&path);
    let checked = CheckedBackup {
        sealed: Some(path.clone()),
        restored,
    };
    let fresh = create_database_with(&path, WORK_CACHE_BYTES, false)?;
    copy::copy_whole(&db.begin_read().ctx("reading the backup")?, &fresh)?;
    if !events.is_empty() {
        let txn = begin_durable_write(&fresh)?;
        events::append(&txn, events)?;
        txn.commit().ctx("recording the restore")?;
    }
    fresh.close().ctx("closing the sealed backup")?;
    db.close().ctx("closing the checked backup")?;
    Ok(checked)
}

impl CheckedBackup {
    /// Makes the backup the database of `data_dir` (the one it was checked
    /// for): renamed into place, so the database is either the old file or
    /// the whole new one. Refused while a server holds the database.
    pub fn install(mut self, data_dir: &Path) -> Result<Restored, StoreError> {
        check_not_in_use(data_dir)?;
        let live = data_dir.join(FILE_NAME);
        let Some(partial) = self.sealed.clone() else {
            return Err(io_error(&live)(std::io::Error::other(
                "the backup was installed already",
            )));
        };
        fs::File::open(&partial)
            .and_then(|f| f.sync_all())
            .map_err(io_error(&partial))?;
        fs::rename(&partial, &live).map_err(io_error(&live))?;
        self.sealed = None;
        sync_dir(data_dir)?;
        Ok(self.restored)
    }
}

/// Bytes free for this user on the file system holding `dir`.
pub fn free_space(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` is written by statvfs
    // before it is read (only when it returns 0).
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)]
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
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

/// Makes a rename durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(dir))
}

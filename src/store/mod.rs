//! Durable state: the single redb file `pollster.redb` in the data directory
//! (SPEC §4) behind typed, synchronous methods — task state, UI-managed
//! instances, saved settings, API tokens, the event outbox, schema version
//! and backup.
//!
//! # Concurrency
//!
//! [`Store`] is a cheap `Clone` around one shared `redb::Database`; share it
//! freely between threads. redb is blocking, so async callers run every method
//! on a blocking thread (`spawn_blocking`), and no transaction outlives the
//! method that opened it. Write transactions are serialised by redb (a second
//! writer waits for the first); readers never wait and see the last committed
//! snapshot (MVCC), which is what lets [`Store::backup_to`] copy a consistent
//! file while the engine keeps writing. Every write commits with
//! `Durability::Immediate`: when a method returns `Ok`, the change is on disk.
//!
//! # Processes
//!
//! redb takes OS file locks on the file, so only one process can open it. A
//! second process (for example `pollster admin ...` while the server runs), or
//! a second [`Store::open`] of the same directory in one process, gets
//! [`StoreError::Locked`], which tells the operator to use the web UI or API.
//!
//! # Stored bytes
//!
//! Keys and values are raw bytes in redb; `tables` builds and parses keys,
//! `stored` defines the on-disk shape of every value (apart from the domain
//! types, which convert to and from it) and `codec` versions and encodes it. Bad bytes are reported as
//! [`StoreError::Corrupt`], never a panic. The file is integrity-checked on
//! open, so a file damaged outside redb is refused rather than trusted.
//!
//! # Credentials
//!
//! Instance credentials and the sink's secrets are sealed with the data key
//! (`crate::secrets`) before they reach the file, and opened when read
//! ([`Store::open_with_key`]); `sealing` counts them, checks a key against
//! them, seals what an older release left in plaintext and re-seals them
//! under a new key.

mod aimd;
mod audit;
mod backup;
mod change;
mod codec;
mod copy;
mod events;
mod history;
mod latest;
mod maintenance;
mod outbox;
mod records;
mod schema;
mod sealing;
mod sessions;
mod stored;
mod tables;
mod tokens;
mod users;

#[cfg(test)]
mod tests;

/// The decoders the store reads its rows with, for the fuzz targets in
/// `fuzz/` (which check that no bytes make them panic and that every value
/// they accept encodes back to itself). Not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use super::codec::{decode, encode};
    pub use super::records::{decode_instance, decode_task, encode_instance, encode_task};
    pub use super::tables::{parse_task_key, task_key};
}

/// A pool's AIMD state and a task's record in the shapes the database
/// holds them, for the cluster's gossip (`crate::cluster`): members of two
/// releases read each other as a newer release reads an older file.
pub mod wire {
    use super::codec::decode_stored;
    use super::stored::{StoredAimd, StoredTask};
    use crate::core::aimd::AimdState;
    use crate::model::{TaskKey, TaskRecord};

    /// The AIMD state as the `aimd` table's JSON.
    pub fn aimd_to_json(s: &AimdState) -> String {
        serde_json::to_string(&StoredAimd::from(s)).unwrap_or_default()
    }

    pub fn aimd_from_json(text: &str) -> Option<AimdState> {
        serde_json::from_str::<StoredAimd>(text).ok().map(AimdState::from)
    }

    /// A task's key and record as a `tasks` table row (`None` for a key
    /// the table cannot hold). The record is in format 1 (JSON), which the
    /// release before format 2 reads too: a member publishes what every
    /// member of a rolling upgrade can adopt. [`task_from_bytes`] reads
    /// both formats.
    pub fn task_to_bytes(key: &TaskKey, record: &TaskRecord) -> Option<(Vec<u8>, Vec<u8>)> {
        let k = super::tables::task_key(key).ok()?;
        let v = super::stored::encode_task_v1(record).ok()?;
        Some((k, v))
    }

    pub fn task_from_bytes(key: &[u8], value: &[u8]) -> Option<(TaskKey, TaskRecord)> {
        let task = super::tables::parse_task_key(key).ok()?;
        let stored: StoredTask = decode_stored(super::tables::TASKS.name, key, value).ok()?;
        Some((task, stored.into()))
    }
}

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::secrets::DataKey;
use redb::{
    Builder, Database, DatabaseError, Durability, ReadTransaction, ReadableDatabase, StorageError, WriteTransaction,
};

pub use aimd::LoadedAimd;
pub use audit::AuditEntry;
pub use backup::{CheckedBackup, Restored, check_backup, check_not_in_use, free_space, restore_work_file};
pub use change::{AuditStamp, OutboxEvent};
pub use history::Rollup;
pub use latest::{LatestBatch, LoadedBodies, LoadedValues};
pub use maintenance::LoadedMaintenance;
pub use outbox::{OutboxListener, OutboxRow};
pub use records::{LoadedTasks, SINK_SETTINGS};
pub use schema::SCHEMA_VERSION;
pub use sealing::{KeyCensus, key_census, scrub_file, unlock};
pub use sessions::{SessionRow, SessionWrite, session_key};
pub use tokens::{TOKEN_PREFIX, TokenInfo, TokenScope};
pub use users::UserRecord;

/// Name of the database file inside the data directory.
pub const FILE_NAME: &str = "pollster.redb";

/// redb's page cache ceiling. The default (1 GiB) is far more than an
/// appliance's state needs.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Everything that can go wrong in the store; one error type for the layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "{} is in use by a running Pollster server (the database is locked); \
         make this change through the web UI or the HTTP API instead, \
         or stop the server first",
        path.display()
    )]
    Locked { path: PathBuf },

    #[error(
        "{} has schema version {found}, but this release of Pollster supports schema version \
         {supported} at most; it was written by a newer release. Run that release again, or \
         restore a backup taken with this one. The file was not modified.",
        path.display()
    )]
    NewerSchema { path: PathBuf, found: u32, supported: u32 },

    #[error("corrupt record in table `{table}` at key \"{key}\": {reason}")]
    Corrupt {
        table: &'static str,
        key: String,
        reason: String,
    },

    #[error("invalid key \"{key}\": {reason}")]
    InvalidKey { key: String, reason: &'static str },

    #[error("cannot open the sealed credentials of {table} \"{key}\": {reason}")]
    Sealed {
        table: &'static str,
        key: String,
        reason: String,
    },

    #[error("cannot encode {what}: {reason}")]
    Encode { what: &'static str, reason: String },

    #[error("cannot get randomness for an API token: {reason}")]
    Randomness { reason: String },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot open database {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: redb::Error,
    },

    #[error("database error while {context}: {source}")]
    Db {
        context: &'static str,
        #[source]
        source: redb::Error,
    },
}

/// Attaches what we were doing to a redb error.
trait Ctx<T> {
    fn ctx(self, context: &'static str) -> Result<T, StoreError>;
}

impl<T, E: Into<redb::Error>> Ctx<T> for Result<T, E> {
    fn ctx(self, context: &'static str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Db {
            context,
            source: e.into(),
        })
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Maps a failure to open a redb file, telling a held lock apart.
fn open_error(path: &Path, err: DatabaseError) -> StoreError {
    match err {
        // LockProtocolMismatch: held by a process running another redb version.
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => StoreError::Locked {
            path: path.to_path_buf(),
        },
        DatabaseError::Storage(StorageError::Io(source)) => StoreError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => StoreError::Open {
            path: path.to_path_buf(),
            source: other.into(),
        },
    }
}

/// Creates (or opens) a redb file with Pollster's settings.
/// Opens (or creates) a database file. A new file is created readable by
/// its owner only: it holds credentials.
fn create_database(path: &Path) -> Result<Database, StoreError> {
    create_database_with(path, CACHE_BYTES, true)
}

/// [`create_database`] without redb's integrity check on open: for an open
/// that only reads a few records before the store's own, checked, open.
fn create_database_unchecked(path: &Path) -> Result<Database, StoreError> {
    create_database_with(path, CACHE_BYTES, false)
}

/// [`create_database`] with a page cache of `cache` bytes; `check` runs
/// redb's integrity check on open (a file just made needs none).
fn create_database_with(path: &Path, cache: usize, check: bool) -> Result<Database, StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A file an older release made 0644: close it to others.
                if let Ok(meta) = std::fs::metadata(path)
                    && meta.permissions().mode() & 0o077 != 0
                {
                    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
                }
            }
            Err(e) => return Err(io_error(path)(e)),
        }
    }
    Builder::new()
        .set_cache_size(cache)
        .set_check_integrity_on_open(check)
        .create(path)
        .map_err(|e| open_error(path, e))
}

/// Handle on the open database. Clones share it.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    path: Arc<Path>,
    /// Told of commits that added outbox rows (see `outbox`).
    outbox_listener: Arc<RwLock<Option<OutboxListener>>>,
    /// Seals and opens the stored credentials (`crate::secrets`). Without
    /// it, records holding credentials can be neither read nor written.
    /// Shared by the clones and replaced by a re-seal
    /// ([`Store::reseal_with_events`]), which holds it for writing from
    /// before its commit until the new key is in: a transaction begun with
    /// the lock held (see [`Store::read_txn_with_key`]) sees data and key
    /// of one generation.
    key: Arc<RwLock<Option<Arc<DataKey>>>>,
}

impl Store {
    /// Handles to the database open in this process (this one included).
    /// The file is unlocked when the last one is dropped.
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.db)
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens `data_dir/pollster.redb`, creating the directory and file if
    /// missing, creating every table, and checking (or writing) the schema
    /// version: an older file is migrated, a newer one is refused untouched.
    ///
    /// Opened this way the store holds no data key: the admin commands that
    /// touch no credential use it. The server opens with
    /// [`Store::open_with_key`].
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        Self::open_inner(data_dir, None)
    }

    /// [`Store::open`] with the data key that seals credentials. A
    /// credential an older release stored in plaintext is sealed in the same
    /// transaction that brings the schema up to date. The caller has checked
    /// the key against the sealed values (`crate::secrets::unlock`).
    pub fn open_with_key(data_dir: &Path, key: DataKey) -> Result<Store, StoreError> {
        Self::open_inner(data_dir, Some(Arc::new(key)))
    }

    fn open_inner(data_dir: &Path, key: Option<Arc<DataKey>>) -> Result<Store, StoreError> {
        let mut dir = std::fs::DirBuilder::new();
        dir.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dir, 0o700);
        dir.create(data_dir).map_err(io_error(data_dir))?;
        let path = data_dir.join(FILE_NAME);
        let mut db = create_database(&path)?;
        if schema::prepare(&db, &path, key.as_deref())? > 0 {
            // The plaintext the sealing replaced must not linger in free pages.
            db = sealing::scrub(db, &path)?;
        }
        Ok(Store {
            db: Arc::new(db),
            path: Arc::from(path),
            outbox_listener: Arc::default(),
            key: Arc::new(RwLock::new(key)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The data key, when the store was opened with one. A write
    /// transaction reads it after it has begun (so after any re-seal has
    /// put its key in); a reader uses [`Store::read_txn_with_key`].
    pub(crate) fn data_key(&self) -> Option<Arc<DataKey>> {
        self.key.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn read_txn(&self) -> Result<ReadTransaction, StoreError> {
        self.db.begin_read().ctx("starting a read transaction")
    }

    /// A read transaction and the key its sealed values are under.
    fn read_txn_with_key(&self) -> Result<(ReadTransaction, Option<Arc<DataKey>>), StoreError> {
        let key = self.key.read().unwrap_or_else(|e| e.into_inner());
        let txn = self.read_txn()?;
        Ok((txn, key.clone()))
    }

    fn write_txn(&self) -> Result<WriteTransaction, StoreError> {
        begin_durable_write(&self.db)
    }
}

/// A write transaction whose commit is on disk when `commit` returns. redb's
/// default is already `Immediate`; saying so keeps it true if that changes.
///
/// Each commit also saves the allocator state (redb's quick repair, with
/// its two-phase commit): after a crash the file opens at once instead of
/// being walked whole to rebuild it. At 100,000 instances that walk was a
/// third of the start after a `kill -9`; the cost is a second sync per
/// commit, a few a second with the group commit.
fn begin_durable_write(db: &Database) -> Result<WriteTransaction, StoreError> {
    let mut txn = db.begin_write().ctx("starting a write transaction")?;
    txn.set_durability(Durability::Immediate)
        .ctx("setting commit durability")?;
    txn.set_quick_repair(true);
    Ok(txn)
}

//! Running-server coordination on one data directory: the exclusive lock a
//! `pollster serve` takes on `<data_dir>/pollster.pid`, so that a second
//! server on the same directory is refused before it binds a port.

pub mod lock;

pub use lock::{DataDirLock, LockError};

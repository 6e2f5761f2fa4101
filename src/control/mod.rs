//! Running-server coordination on one data directory: the exclusive lock a
//! `pollster serve` takes on `<data_dir>/pollster.pid`, so that a second
//! server on the same directory is refused before it binds a port, and the
//! control socket `<data_dir>/control.sock` through which the `admin`
//! commands reach a running server.

pub mod client;
pub mod lock;
pub mod protocol;
pub mod rotate;
pub mod server;
pub mod text;

pub use lock::{DataDirLock, LockError};

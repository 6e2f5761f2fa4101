//! `<data_dir>/pollster.pid`: an exclusive `flock` held for the life of the
//! server process, with the holder's PID written into the file. The kernel
//! drops the lock when the process ends, however it ends, so a stale file
//! never blocks a start; only a live holder does.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file name inside the data directory.
pub const PID_FILE: &str = "pollster.pid";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds the lock.
    #[error("data directory {dir} is in use by another pollster process (PID {pid}, lock file {file})")]
    Held { dir: PathBuf, file: PathBuf, pid: String },
    #[error("cannot lock {file}: {source}")]
    Io { file: PathBuf, source: std::io::Error },
}

/// Held while the value lives; dropping it releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the lock without waiting, and writes this process's PID.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, LockError> {
        let path = data_dir.join(PID_FILE);
        let io = |source| LockError::Io {
            file: path.clone(),
            source,
        };
        // The directory is made as the store makes it (0700), so the lock
        // can come first.
        let mut dir = std::fs::DirBuilder::new();
        dir.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dir, 0o700);
        dir.create(data_dir).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        if !try_lock(&file).map_err(io)? {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(LockError::Held {
                dir: data_dir.to_path_buf(),
                file: path.clone(),
                pid: if pid.is_empty() {
                    "unknown".into()
                } else {
                    pid.to_string()
                },
            });
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(DataDirLock { file, path })
    }

    /// The PID of a live holder, when one holds the lock (`None` when the
    /// directory is free). Takes and releases the lock to find out.
    pub fn holder(data_dir: &Path) -> Result<Option<String>, LockError> {
        match DataDirLock::acquire_probe(data_dir) {
            Ok(()) => Ok(None),
            Err(LockError::Held { pid, .. }) => Ok(Some(pid)),
            Err(e) => Err(e),
        }
    }

    fn acquire_probe(data_dir: &Path) -> Result<(), LockError> {
        let path = data_dir.join(PID_FILE);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(LockError::Io { file: path, source }),
        };
        let io = |source| LockError::Io {
            file: path.clone(),
            source,
        };
        if try_lock(&file).map_err(io)? {
            return Ok(());
        }
        let pid = std::fs::read_to_string(&path).unwrap_or_default();
        Err(LockError::Held {
            dir: data_dir.to_path_buf(),
            file: path.clone(),
            pid: pid.trim().to_string(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDirLock {
    fn drop(&mut self) {
        // Emptied, not removed: removing would let a starting process lock a
        // fresh inode while another still holds the old one.
        let _ = self.file.set_len(0);
    }
}

#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor this function borrows for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

#[cfg(not(unix))]
fn try_lock(_file: &File) -> std::io::Result<bool> {
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::acquire(dir.path()).unwrap();
        // flock locks belong to the open file description: a second open
        // in the same process is refused just as another process is.
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        assert!(text.contains(&std::process::id().to_string()), "{text}");
        drop(held);
        assert!(DataDirLock::acquire(dir.path()).is_ok());
    }
}

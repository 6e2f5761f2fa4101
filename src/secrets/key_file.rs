//! Where the data key lives, and the startup rule that picks it.

use std::path::{Path, PathBuf};

use super::DataKey;

/// The key file's name in the data directory.
pub const KEY_FILE: &str = "secret.key";
/// Names a key file elsewhere, e.g. `%d/secret.key` under systemd's
/// `LoadCredential=secret.key:/etc/credstore/pollster.key`.
pub const KEY_FILE_ENV: &str = "POLLSTER_SECRET_KEY_FILE";

/// Refusals at startup (exit 2), and the failures around them.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "the data key file {} is missing, but the database holds {sealed} sealed secret(s) that only \
         that key opens. Put the key file back (or point {KEY_FILE_ENV} at it); a new key would not \
         open them, so none is made. The database was not changed.{}",
        path.display(), rotate_hint(path)
    )]
    Missing { path: PathBuf, sealed: usize },
    #[error(
        "the data key in {} does not open {unopened} of the {sealed} sealed secret(s) in the database: \
         it is not the key they were sealed with. Put the right key file back (or point {KEY_FILE_ENV} \
         at it). The database was not changed.{}",
        path.display(), rotate_hint(path)
    )]
    Wrong {
        path: PathBuf,
        sealed: usize,
        unopened: usize,
    },
    #[error("{KEY_FILE_ENV} names {}, which does not exist; Pollster makes a new key only in the data directory", path.display())]
    EnvFileMissing { path: PathBuf },
    #[error("data key file {}: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
    /// The database could not be read to count its sealed values.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
}

/// After an interrupted `rotate-key`, the new key waits beside the old one.
fn rotate_hint(path: &Path) -> String {
    let new = with_suffix(path, ".new");
    if new.exists() {
        format!(
            " ({} exists: if a `pollster admin rotate-key` was interrupted after it re-sealed the \
             database, that file holds the key in use)",
            new.display()
        )
    } else {
        String::new()
    }
}

/// `path` with `suffix` added to its file name (`secret.key.old`).
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The key file in use and where its name came from.
#[derive(Debug, Clone)]
pub struct KeyFile {
    pub path: PathBuf,
    /// Named by [`KEY_FILE_ENV`]: Pollster never creates it.
    pub from_env: bool,
}

impl KeyFile {
    /// `env_path` (the value of [`KEY_FILE_ENV`]) if set, else
    /// `<data_dir>/secret.key`.
    pub fn locate(data_dir: &Path, env_path: Option<&Path>) -> KeyFile {
        match env_path.filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => KeyFile {
                path: p.to_path_buf(),
                from_env: true,
            },
            None => KeyFile {
                path: data_dir.join(KEY_FILE),
                from_env: false,
            },
        }
    }

    /// The key, or `None` when the file does not exist.
    pub fn read(&self) -> Result<Option<DataKey>, KeyError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.unreadable(e.to_string())),
        };
        #[cfg(unix)]
        if !self.from_env {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(&self.path)
                && meta.permissions().mode() & 0o077 != 0
            {
                tracing::warn!(file = %self.path.display(), "the data key file is readable by others; chmod 600 it");
            }
        }
        DataKey::parse(&bytes).map(Some).map_err(|r| self.unreadable(r.into()))
    }

    fn unreadable(&self, reason: String) -> KeyError {
        KeyError::Unreadable {
            path: self.path.clone(),
            reason,
        }
    }

    /// Writes `key` to `path` as a new 0600 file (never over an existing one).
    pub fn create_at(path: &Path, key: &DataKey) -> Result<(), KeyError> {
        let unreadable = |e: std::io::Error| KeyError::Unreadable {
            path: path.to_path_buf(),
            reason: format!("cannot write: {e}"),
        };
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(path).map_err(unreadable)?;
        f.write_all(key.to_file_text().as_bytes()).map_err(unreadable)?;
        f.sync_all().map_err(unreadable)?;
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

/// The sealed values of a database, against a key (what `census` in
/// [`unlock`] answers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    /// Sealed values in the database.
    pub sealed: usize,
    /// Of those, the ones the key did not open (all of them without a key).
    pub unopened: usize,
}

/// The startup rule. Reads the key file and checks it against the sealed
/// values in `data_dir`'s database without writing to it (`census` counts
/// them and tries the key, `crate::store::unlock` gives the store's):
/// - a key that opens them all is the key;
/// - with no key file and no sealed value, a new key is written (in the
///   data directory only);
/// - otherwise [`KeyError::Missing`] or [`KeyError::Wrong`], naming the file
///   and the count.
pub fn unlock<E: std::error::Error + Send + Sync + 'static>(
    data_dir: &Path,
    env_path: Option<&Path>,
    census: impl FnOnce(Option<&DataKey>) -> Result<Census, E>,
) -> Result<(KeyFile, DataKey), KeyError> {
    let file = KeyFile::locate(data_dir, env_path);
    let key = file.read()?;
    let census = census(key.as_ref()).map_err(|e| KeyError::Store(Box::new(e)))?;
    let key = match key {
        Some(key) if census.unopened == 0 => key,
        Some(_) => {
            return Err(KeyError::Wrong {
                path: file.path,
                sealed: census.sealed,
                unopened: census.unopened,
            });
        }
        None if census.sealed > 0 => {
            return Err(KeyError::Missing {
                path: file.path,
                sealed: census.sealed,
            });
        }
        None if file.from_env => return Err(KeyError::EnvFileMissing { path: file.path }),
        None => {
            let key = DataKey::generate().map_err(|reason| KeyError::Unreadable {
                path: file.path.clone(),
                reason,
            })?;
            if let Some(dir) = file.path.parent() {
                let mut b = std::fs::DirBuilder::new();
                b.recursive(true);
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
                let _ = b.create(dir);
            }
            KeyFile::create_at(&file.path, &key)?;
            tracing::info!(file = %file.path.display(), "created the data key that seals stored credentials");
            key
        }
    };
    Ok((file, key))
}

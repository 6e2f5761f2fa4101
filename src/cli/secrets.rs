//! `pollster admin rotate-key`, `backup` and `restore`: the data key and the
//! encrypted backup, on a stopped server's data directory.

use std::path::{Path, PathBuf};

use super::{DataDirArgs, EXIT_CONFIG, Failure, fail, load_config};
use crate::secrets::backup::{self, BackupError};
use crate::secrets::{DataKey, KEY_FILE_ENV, KeyError, KeyFile, with_suffix};
use crate::store::{Store, StoreError};

fn config_failure(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_CONFIG,
        message: message.into(),
    }
}

fn key_failure(e: KeyError) -> Failure {
    match e {
        KeyError::Store(e) => e.into(),
        other => config_failure(other.to_string()),
    }
}

fn backup_failure(file: &Path, e: BackupError) -> Failure {
    config_failure(format!("{}: {e}; nothing was changed", file.display()))
}

/// The data directory and the key file's override: `--data-dir` with
/// `POLLSTER_SECRET_KEY_FILE` from the environment, or both from the config.
fn locate(dir: &DataDirArgs) -> Result<(PathBuf, Option<PathBuf>), Failure> {
    match &dir.data_dir {
        Some(d) => Ok((
            d.clone(),
            std::env::var_os(KEY_FILE_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        )),
        None => {
            let c = load_config(dir.config.as_deref())?;
            Ok((c.server.data_dir, c.secret_key_file))
        }
    }
}

/// The store opened with its key, as the server opens it.
fn open_sealed(dir: &DataDirArgs) -> Result<(Store, KeyFile), Failure> {
    let (data_dir, env) = locate(dir)?;
    let (file, key) = crate::secrets::unlock(&data_dir, env.as_deref()).map_err(key_failure)?;
    Ok((Store::open_with_key(&data_dir, key)?, file))
}

/// A passphrase file's first line.
fn read_passphrase(path: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| config_failure(format!("cannot read the passphrase file {}: {e}", path.display())))?;
    let pass = text.lines().next().unwrap_or_default().to_string();
    backup::check_passphrase(&pass).map_err(|e| config_failure(format!("{}: {e}", path.display())))?;
    Ok(pass)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let _ = std::fs::remove_file(path);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
}

/// Re-seals every credential under a new key in one transaction. The new
/// key is written beside the old one first (`secret.key.new`) and renamed
/// over it once the database has committed; the old key is kept as
/// `secret.key.old`.
pub fn rotate_key(dir: &DataDirArgs) -> Result<String, Failure> {
    let (store, file) = open_sealed(dir)?;
    let old_text = std::fs::read(&file.path).map_err(|e| fail(format!("{}: {e}", file.path.display())))?;
    let new = DataKey::generate().map_err(fail)?;
    let new_path = with_suffix(&file.path, ".new");
    let old_path = with_suffix(&file.path, ".old");
    let write = |path: &Path, bytes: &[u8]| {
        write_private(path, bytes)
            .map_err(|e| fail(format!("cannot write {}: {e}; nothing was changed", path.display())))
    };
    write(&new_path, new.to_file_text().as_bytes())?;
    write(&old_path, &old_text)?;
    let n = match store.reseal(&new) {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&new_path);
            return Err(e.into());
        }
    };
    drop(store);
    std::fs::rename(&new_path, &file.path).map_err(|e| {
        fail(format!(
            "the database is sealed under the new key, but {} could not be renamed to {}: {e}; rename it by hand",
            new_path.display(),
            file.path.display()
        ))
    })?;
    sync_parent(&file.path);
    // The old ciphertext lingers in the pages the re-seal freed.
    let (data_dir, _) = locate(dir)?;
    if let Err(e) = crate::store::scrub_file(&data_dir) {
        eprintln!("warning: could not rewrite the database without its freed pages: {e}");
    }
    Ok(format!(
        "re-sealed {n} record(s) under a new key in {}; the old key is kept in {}\n",
        file.path.display(),
        old_path.display()
    ))
}

/// Writes an encrypted backup of a stopped server's database to `out`.
pub fn backup(dir: &DataDirArgs, passphrase_file: &Path, out: &Path) -> Result<String, Failure> {
    let pass = read_passphrase(passphrase_file)?;
    let (store, _) = open_sealed(dir)?;
    let plain = store.backup_bytes()?;
    drop(store);
    let file = backup::encrypt(&plain, &pass).map_err(|e| fail(e.to_string()))?;
    let partial = with_suffix(out, ".partial");
    write_private(&partial, &file)
        .and_then(|()| std::fs::rename(&partial, out))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            fail(format!("cannot write {}: {e}", out.display()))
        })?;
    sync_parent(out);
    Ok(format!("wrote an encrypted backup to {}\n", out.display()))
}

/// Replaces a stopped server's database with the backup in `file`, after
/// checking all of it; its credentials are sealed under this data
/// directory's key (made now if there is none yet).
pub fn restore(dir: &DataDirArgs, file: &Path, passphrase_file: &Path) -> Result<String, Failure> {
    let pass = read_passphrase(passphrase_file)?;
    let (data_dir, env) = locate(dir)?;
    let bytes = std::fs::read(file).map_err(|e| config_failure(format!("cannot read {}: {e}", file.display())))?;
    let plain = backup::decrypt(&bytes, &pass).map_err(|e| backup_failure(file, e))?;
    // Refused now, not after the work, while a server holds the database.
    crate::store::check_not_in_use(&data_dir)?;
    let key_file = KeyFile::locate(&data_dir, env.as_deref());
    let (key, new_key) = match key_file.read().map_err(key_failure)? {
        Some(k) => (k, false),
        None if key_file.from_env => {
            return Err(key_failure(KeyError::EnvFileMissing { path: key_file.path }));
        }
        None => (DataKey::generate().map_err(fail)?, true),
    };
    let checked = crate::store::check_backup(plain, &key).map_err(|e| match e {
        StoreError::Corrupt { .. }
        | StoreError::Sealed { .. }
        | StoreError::NewerSchema { .. }
        | StoreError::Db { .. } => config_failure(format!(
            "{}: the backup is damaged or not Pollster's: {e}; nothing was changed",
            file.display()
        )),
        other => other.into(),
    })?;
    if new_key {
        if let Some(parent) = key_file.path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        KeyFile::create_at(&key_file.path, &key).map_err(key_failure)?;
    }
    let restored = checked.install(&data_dir)?;
    Ok(format!(
        "restored {} instance(s) and {} task record(s) from {} into {}{}\n",
        restored.instances,
        restored.tasks,
        file.display(),
        data_dir.display(),
        if new_key {
            format!("; made a new data key in {}", key_file.path.display())
        } else {
            String::new()
        }
    ))
}

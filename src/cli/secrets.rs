//! `pollster admin rotate-key`, `backup` and `restore`: the data key and the
//! encrypted backup, on a stopped server's data directory (a running
//! server does the first two itself, through the control socket). Each is
//! recorded in the audit trail of the database it works on, with the actor
//! `cli` (a restore in the restored database, with the restore itself).

use std::path::{Path, PathBuf};

use super::{DataDirArgs, EXIT_CONFIG, Failure, fail, load_config};
use crate::model::Timestamp;
use crate::secrets::backup::{self, BackupError};
use crate::secrets::{DataKey, KEY_FILE_ENV, KeyError, KeyFile, with_suffix};
use crate::sink::event::Event;
use crate::store::{AuditStamp, OutboxEvent, Store, StoreError};

/// The actor of the CLI's actions in the audit trail.
const CLI_ACTOR: &str = "cli";

/// Free space a restore keeps beyond the plaintext and the sealed copy.
const RESTORE_SPARE_BYTES: u64 = 16 << 20;

/// The audit row of a CLI action: no source address (there is no request).
/// It is for the sink too: the server delivers it when it starts with one,
/// and clears it with the rest of the outbox when it starts without.
pub(super) fn cli_row(action: &str, target: &str, now: Timestamp) -> OutboxEvent {
    let event = Event::operator(now, CLI_ACTOR, action, target);
    let mut row = event.to_outbox(&mut crate::model::random::os());
    row.audit = Some(AuditStamp {
        time: event.time,
        source: None,
    });
    row
}

/// Removes a work file when dropped: the plaintext inside of a backup must
/// not outlive the command, whatever way it ends.
struct WorkFile(PathBuf);

impl Drop for WorkFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A new file only its owner can read (any stale one is replaced).
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    let _ = std::fs::remove_file(path);
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)
}

fn config_failure(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_CONFIG,
        message: message.into(),
    }
}

fn key_failure(e: KeyError) -> Failure {
    match e {
        KeyError::Store(e) => fail(e.to_string()),
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
    let (file, key) = crate::store::unlock(&data_dir, env.as_deref()).map_err(key_failure)?;
    Ok((Store::open_with_key(&data_dir, key)?, file))
}

/// A passphrase file's first line.
pub(crate) fn read_passphrase(path: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| config_failure(format!("cannot read the passphrase file {}: {e}", path.display())))?;
    let pass = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('\r')
        .to_string();
    backup::check_passphrase(&pass).map_err(|e| config_failure(format!("{}: {e}", path.display())))?;
    Ok(pass)
}

/// Re-seals every credential under a new key in one transaction. The new
/// key is written beside the old one first (`secret.key.new`) and renamed
/// over it once the database has committed; the old key is kept as
/// `secret.key.old`.
pub fn rotate_key(dir: &DataDirArgs, now: Timestamp) -> Result<String, Failure> {
    let (store, file) = open_sealed(dir)?;
    let row = cli_row("key.rotate", &file.path.display().to_string(), now);
    let (n, old_path) = crate::control::rotate::rotate_in_place(&store, &file.path, &[row]).map_err(fail)?;
    drop(store);
    // The old ciphertext lingers in the pages the re-seal freed.
    let (data_dir, _) = locate(dir)?;
    if let Err(e) = crate::store::scrub_file(&data_dir) {
        eprintln!("warning: could not rewrite the database without its freed pages: {e}");
    }
    Ok(crate::control::text::key_rotated(n, &file.path, &old_path))
}

/// Writes `out` through `out.partial` (0600), renamed over `out` once
/// `fill` has written all of it and it is on disk; nothing is left of a
/// failed write.
pub(crate) fn write_out(
    out: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<(), String>,
) -> Result<(), Failure> {
    let partial = with_suffix(out, ".partial");
    let written = create_private(&partial)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            fill(&mut w)?;
            let f = w.into_inner().map_err(|e| e.to_string())?;
            f.sync_all().map_err(|e| e.to_string())
        })
        .and_then(|()| std::fs::rename(&partial, out).map_err(|e| e.to_string()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(fail(format!("cannot write {}: {e}", out.display())));
    }
    crate::control::rotate::sync_parent(out);
    Ok(())
}

/// Writes an encrypted backup of a stopped server's database to `out`. The
/// copy goes through a work file in the data directory, not memory.
pub fn backup(dir: &DataDirArgs, pass: &str, out: &Path, now: Timestamp) -> Result<String, Failure> {
    let (store, _) = open_sealed(dir)?;
    let work = WorkFile(with_suffix(store.path(), &format!(".backup-{}", std::process::id())));
    store.backup_to(&work.0)?;
    let plain = std::fs::File::open(&work.0).map_err(|e| fail(format!("{}: {e}", work.0.display())))?;
    let written = write_out(out, |w| {
        backup::encrypt_to(std::io::BufReader::new(plain), w, pass).map_err(|e| e.to_string())
    });
    drop(work);
    written?;
    store.append_outbox(&[cli_row("backup.create", &out.display().to_string(), now)])?;
    Ok(crate::control::text::backup_written(out).stdout)
}

/// Replaces a stopped server's database with the backup in `file`, after
/// checking all of it; its credentials are sealed under this data
/// directory's key (made now if there is none yet). The inside is streamed
/// to a work file in the data directory (never held in memory), refused
/// when the disk cannot hold it and its sealed copy.
pub fn restore(
    dir: &DataDirArgs,
    file: &Path,
    passphrase_file: &Path,
    max_work_factor: u8,
    now: Timestamp,
) -> Result<String, Failure> {
    let pass = read_passphrase(passphrase_file)?;
    let (data_dir, env) = locate(dir)?;
    let existed = data_dir.exists();
    let result = restore_into(&data_dir, env.as_deref(), file, &pass, max_work_factor, now);
    if result.is_err() && !existed {
        // Only if still empty: nothing of the failed restore is left.
        let _ = std::fs::remove_dir(&data_dir);
    }
    result
}

fn restore_into(
    data_dir: &Path,
    env: Option<&Path>,
    file: &Path,
    pass: &str,
    max_work_factor: u8,
    now: Timestamp,
) -> Result<String, Failure> {
    let cannot_read = |e: std::io::Error| config_failure(format!("cannot read {}: {e}", file.display()));
    let input = std::fs::File::open(file).map_err(cannot_read)?;
    let size = input.metadata().map_err(cannot_read)?.len();
    // Refused now, not after the work, while a server holds the database.
    crate::store::check_not_in_use(data_dir)?;
    let mut mkdir = std::fs::DirBuilder::new();
    mkdir.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut mkdir, 0o700);
    mkdir
        .create(data_dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", data_dir.display())))?;
    // The inside is no larger than the file (age adds a tag to every
    // chunk); the disk holds it and the sealed copy at once.
    let free = crate::store::free_space(data_dir).map_err(|e| fail(format!("{}: {e}", data_dir.display())))?;
    let need = size.saturating_mul(2).saturating_add(RESTORE_SPARE_BYTES);
    if free < need {
        return Err(config_failure(format!(
            "{}: restoring needs about {} MiB free in {} (the inside of the backup and its sealed copy), \
             and {} MiB are; nothing was changed",
            file.display(),
            need >> 20,
            data_dir.display(),
            free >> 20
        )));
    }
    let plain = WorkFile(data_dir.join(format!("{}.restore-plain", crate::store::FILE_NAME)));
    let out = create_private(&plain.0).map_err(|e| fail(format!("cannot write {}: {e}", plain.0.display())))?;
    let mut w = std::io::BufWriter::new(out);
    backup::decrypt_to(std::io::BufReader::new(input), &mut w, pass, size, max_work_factor)
        .and_then(|_| w.into_inner().map_err(|e| BackupError::Io(e.into_error())).map(drop))
        .map_err(|e| match e {
            BackupError::Io(e) => fail(format!("cannot write {}: {e}; nothing was changed", plain.0.display())),
            other => backup_failure(file, other),
        })?;
    let key_file = KeyFile::locate(data_dir, env);
    let (key, new_key) = match key_file.read().map_err(key_failure)? {
        Some(k) => (k, false),
        None if key_file.from_env => {
            return Err(key_failure(KeyError::EnvFileMissing { path: key_file.path }));
        }
        None => (DataKey::generate().map_err(fail)?, true),
    };
    let row = cli_row("backup.restore", &file.display().to_string(), now);
    let checked = crate::store::check_backup(&plain.0, &key, data_dir, &[row]).map_err(|e| match e {
        StoreError::Corrupt { .. }
        | StoreError::Sealed { .. }
        | StoreError::NewerSchema { .. }
        | StoreError::Db { .. } => config_failure(format!(
            "{}: the backup is damaged or not Pollster's: {e}; nothing was changed",
            file.display()
        )),
        other => other.into(),
    })?;
    drop(plain);
    if new_key {
        if let Some(parent) = key_file.path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        KeyFile::create_at(&key_file.path, &key).map_err(key_failure)?;
    }
    let restored = checked.install(data_dir)?;
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

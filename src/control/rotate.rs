//! The data key's rotation on an open store: the CLI's on a stopped
//! server, or the running server's through the control socket.

use std::path::{Path, PathBuf};

use crate::secrets::{DataKey, with_suffix};
use crate::store::{OutboxEvent, Store};

/// The rotation itself, on an open store (the CLI's, or the running
/// server's through the control socket, whose store seals with the new key
/// from the commit on): the new key written beside the old one, the
/// re-seal with `events` in one transaction, then the rename. Returns the
/// records re-sealed and where the old key is kept.
pub fn rotate_in_place(store: &Store, key_path: &Path, events: &[OutboxEvent]) -> Result<(usize, PathBuf), String> {
    // One rotation at a time in this process: they share the work files.
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let old_text = std::fs::read(key_path).map_err(|e| format!("{}: {e}", key_path.display()))?;
    let new = DataKey::generate().map_err(|e| e.to_string())?;
    let new_path = with_suffix(key_path, ".new");
    let old_path = with_suffix(key_path, ".old");
    let write = |path: &Path, bytes: &[u8]| {
        write_private(path, bytes).map_err(|e| format!("cannot write {}: {e}; nothing was changed", path.display()))
    };
    write(&new_path, new.to_file_text().as_bytes())?;
    write(&old_path, &old_text)?;
    let n = match store.reseal_with_events(&new, events) {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&new_path);
            return Err(e.to_string());
        }
    };
    std::fs::rename(&new_path, key_path).map_err(|e| {
        format!(
            "the database is sealed under the new key, but {} could not be renamed to {}: {e}; rename it by hand",
            new_path.display(),
            key_path.display()
        )
    })?;
    sync_parent(key_path);
    Ok((n, old_path))
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

pub(crate) fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
}

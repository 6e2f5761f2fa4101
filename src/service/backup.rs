//! An encrypted backup of the running database, as `POST /api/admin/backup`
//! and `pollster admin backup` through the control socket take it: a
//! consistent copy in one read transaction, written to a work file in the
//! data directory and encrypted from there under the passphrase (an age
//! file), so the database is held in memory once, as the encrypted answer.
//! It is handed out only once its audit row (`backup.create`) is written.

use super::Context;
use super::error::ServiceError;
use super::with_store;
use crate::secrets::backup;
use crate::sink::event::Event;

/// Backups made at once: each holds the encrypted database in memory, a
/// work file as large as the database and scrypt's working memory.
static BACKUP_TURN: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// The encrypted backup, recorded as taken by `actor` into `target` (a
/// file name). The caller has checked the passphrase
/// ([`backup::check_passphrase`]).
pub async fn take(cx: &Context, passphrase: String, actor: &str, target: &str) -> Result<Vec<u8>, ServiceError> {
    let _turn = BACKUP_TURN.acquire().await.map_err(ServiceError::internal)?;
    let store = cx.store.clone();
    let file = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, ServiceError> {
        let work = crate::secrets::with_suffix(store.path(), ".backup");
        let result = store.backup_to(&work).map_err(ServiceError::from).and_then(|()| {
            let plain = std::fs::File::open(&work).map_err(ServiceError::internal)?;
            let mut out = Vec::new();
            backup::encrypt_to(std::io::BufReader::new(plain), &mut out, &passphrase)
                .map_err(ServiceError::internal)?;
            Ok(out)
        });
        let _ = std::fs::remove_file(&work);
        result
    })
    .await
    .map_err(ServiceError::internal)??;
    let event = Event::operator(cx.engine.now(), actor, "backup.create", target);
    if let Some(row) = cx.sink.stage(&event) {
        with_store(cx, move |s| s.append_outbox(&[row])).await?;
    }
    let client = crate::audit::current_source().unwrap_or_default();
    tracing::info!(actor = %actor, client = %client, file = %target, bytes = file.len(), "database backup taken");
    Ok(file)
}

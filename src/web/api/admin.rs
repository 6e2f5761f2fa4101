//! `GET /api/admin/backup`: a consistent copy of the database, taken in one
//! read transaction while the server keeps running.

use crate::model::Timestamp;
use crate::web::AppState;
use crate::web::error::ApiError;
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicU64, Ordering};

/// The backup: a redb database file.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct RedbFile(pub Vec<u8>);

/// Numbers the temporary copies, so backups asked for at the same moment
/// never share (and corrupt) one file.
static BACKUP_SEQ: AtomicU64 = AtomicU64::new(0);

#[utoipa::path(
    get,
    path = "/api/admin/backup",
    operation_id = "backup",
    summary = "Consistent copy of the database",
    responses((status = 200, description = "redb file", content_type = "application/octet-stream", body = inline(RedbFile))),
)]
pub async fn backup(State(app): State<AppState>) -> Result<Response, ApiError> {
    let dir = app
        .engine
        .store()
        .path()
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    let stamp = Timestamp::now();
    let seq = BACKUP_SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".backup-{}-{}-{seq}.redb", std::process::id(), stamp.0));
    let path = tmp.clone();
    let bytes = app
        .with_store(move |store| -> Result<Vec<u8>, ApiError> {
            store.backup_to(&path)?;
            let data = std::fs::read(&path).map_err(ApiError::internal);
            let _ = std::fs::remove_file(&path);
            data
        })
        .await?;
    let name = format!(
        "pollster-{}.redb",
        stamp.to_rfc3339().replace([':', '-'], "").trim_end_matches('Z')
    );
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}\"")),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
        Body::from(bytes),
    )
        .into_response())
}

//! `POST /api/admin/backup`: a consistent copy of the database, taken in one
//! read transaction while the server keeps running, encrypted under the
//! passphrase in the request (an age file; see `crate::secrets::backup`).
//! Inside, the credentials are in plaintext and sessions are left out: the
//! passphrase is all a restore on another machine needs, and the data key
//! never leaves this one.
//!
//! The copy is written to a work file in the data directory and encrypted
//! from there, so the database is held in memory once (as the encrypted
//! answer), not twice. Every backup is an audit row (`backup.create`, the
//! principal and the client's address) and a log line.

use crate::model::{FieldError, HIDDEN};
use crate::secrets::backup::{self, MIN_PASSPHRASE_CHARS};
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, JsonBody};
use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// The backup: an age file (scrypt recipient) holding a redb database file.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct AgeFile(pub Vec<u8>);

/// What to encrypt the backup with.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// At least 12 characters, not counting spaces at either end. The backup opens with it alone (`pollster
    /// admin restore`, `age -d`, pyrage); keep it apart from the backup.
    #[schema(min_length = 12)]
    pub passphrase: String,
}

#[utoipa::path(
    post,
    path = "/api/admin/backup",
    operation_id = "backup",
    summary = "Consistent copy of the database, encrypted with a passphrase (an age file)",
    request_body(content = BackupRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "age file (scrypt) holding the redb file", content_type = "application/octet-stream", body = inline(AgeFile)),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 422, description = "passphrase missing or shorter than 12 characters (field `passphrase`; spaces at either end do not count)", body = FieldErrorBody),
    ),
)]
pub async fn backup(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(req): JsonBody<BackupRequest>,
) -> Result<Response, ApiError> {
    if backup::check_passphrase(&req.passphrase).is_err() {
        return Err(ApiError::invalid(FieldError::new(
            "passphrase",
            HIDDEN,
            format!("must be at least {MIN_PASSPHRASE_CHARS} characters long, not counting spaces at either end"),
        )));
    }
    let stamp = app.engine.now();
    let name = format!(
        "pollster-{}.redb.age",
        stamp.to_rfc3339().replace([':', '-'], "").trim_end_matches('Z')
    );
    let file = crate::service::backup::take(&app.ctx(), req.passphrase, &who.actor(), &name).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}\"")),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
        Body::from(file),
    )
        .into_response())
}

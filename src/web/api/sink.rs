//! `GET`/`PUT /api/settings/sink` and `POST /api/settings/sink/test`: the
//! event sink's settings (header values write-only), the fields an
//! environment variable sets, and its live state; a change applies at once.

use crate::sink::SendError;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, JsonBody};
use crate::web::{AppState, ops};
use axum::extract::State;
use axum::{Extension, Json};
use serde_json::{Value, json};

pub fn sink_document(app: &AppState) -> Value {
    let config = app.shared.sink_config();
    let locked = app.shared.locked_sink();
    json!({
        "sink": config.as_ref().map(ops::sink_json),
        "locked": locked,
        "status": app.shared.sink.status(),
    })
}

pub async fn get(State(app): State<AppState>) -> Json<Value> {
    Json(sink_document(&app))
}

pub async fn put(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    ops::save_sink(&app, patch, &who.actor()).await?;
    Ok(Json(sink_document(&app)))
}

/// Ship one `test` event now, outside the queue, and say how it went: the
/// test itself succeeds (200) whether or not the destination took the event,
/// like an instance test; with no sink there is nothing to test (409).
pub async fn test(State(app): State<AppState>, Extension(who): Extension<Principal>) -> Result<Json<Value>, ApiError> {
    match app.shared.sink.send_test(&who.actor()).await {
        Ok(()) => Ok(Json(json!({"ok": true}))),
        Err(e @ SendError::Disabled) => Err(ApiError::conflict(
            "sink_disabled",
            format!("{e}: configure one with PUT /api/settings/sink first"),
        )),
        Err(e) => Ok(Json(json!({"ok": false, "error": e.to_string()}))),
    }
}

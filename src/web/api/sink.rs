//! `GET`/`PUT /api/settings/sink` and `POST /api/settings/sink/test`: the
//! event sink's settings (header values write-only), the fields an
//! environment variable sets, and its live state; a change applies at once.

use crate::sink::SendError;
use crate::sink::SinkStatus;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, JsonBody};
use crate::web::{AppState, ops};
use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The event sink's settings (header values hidden; null when there is no
/// sink), the fields an environment variable sets, and its live state.
#[derive(Debug, Serialize)]
pub struct SinkDocument {
    pub sink: Option<Value>,
    pub locked: BTreeMap<String, String>,
    pub status: SinkStatus,
}

pub fn sink_document(app: &AppState) -> SinkDocument {
    SinkDocument {
        sink: app.shared.sink_config().as_ref().map(ops::sink_json),
        locked: app.shared.locked_sink(),
        status: app.shared.sink.status(),
    }
}

/// How a test event went: `ok` says whether the destination took it,
/// `error` why not.
#[derive(Debug, Serialize, ToSchema)]
pub struct SinkTestResult {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = super::openapi::plain_string)]
    pub error: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/settings/sink",
    operation_id = "getSink",
    summary = "Event sink settings (header values hidden), locked fields and live state",
    responses((status = 200, description = "sink", body = ref("#/components/schemas/SinkDocument"))),
)]
pub async fn get(State(app): State<AppState>) -> Json<SinkDocument> {
    Json(sink_document(&app))
}

#[utoipa::path(
    put,
    path = "/api/settings/sink",
    operation_id = "putSink",
    summary = "Change the event sink (partial [sink] document over the sink in force; null or {\"enabled\": false} turns it off; a header sent as (hidden) keeps its value)",
    request_body(content = ref("#/components/schemas/SinkPatch"), content_type = "application/json"),
    responses(
        (status = 200, description = "sink in force", body = ref("#/components/schemas/SinkDocument")),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 409, description = "a field is locked by an environment variable", body = ErrorBody),
        (status = 422, description = "invalid value, naming the field", body = FieldErrorBody),
    ),
)]
pub async fn put(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<SinkDocument>, ApiError> {
    ops::save_sink(&app, patch, &who.actor()).await?;
    Ok(Json(sink_document(&app)))
}

/// Ship one `test` event now, outside the queue, and say how it went: the
/// test itself succeeds (200) whether or not the destination took the event,
/// like an instance test; with no sink there is nothing to test (409).
#[utoipa::path(
    post,
    path = "/api/settings/sink/test",
    operation_id = "testSink",
    summary = "Send one test event now, outside the queue, and say whether the destination took it",
    responses(
        (status = 200, description = "the test ran: `ok` says whether the event was delivered, `error` why not", body = SinkTestResult),
        (status = 409, description = "no event sink is configured (code sink_disabled)", body = ErrorBody),
    ),
)]
pub async fn test(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
) -> Result<Json<SinkTestResult>, ApiError> {
    match app.shared.sink.send_test(&who.actor()).await {
        Ok(()) => Ok(Json(SinkTestResult { ok: true, error: None })),
        Err(e @ SendError::Disabled) => Err(ApiError::conflict(
            "sink_disabled",
            format!("{e}: configure one with PUT /api/settings/sink first"),
        )),
        Err(e) => Ok(Json(SinkTestResult {
            ok: false,
            error: Some(e.to_string()),
        })),
    }
}

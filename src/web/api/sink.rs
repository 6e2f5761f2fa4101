//! `GET`/`PUT /api/settings/sink` and `POST /api/settings/sink/test`: the
//! event sink's settings (header values write-only), the fields an
//! environment variable sets, and its live state; a change applies at once.

use super::schema;
use crate::service::{self, Conflict, ServiceError};
use crate::sink::SinkStatus;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, JsonBody};
use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The event sink's settings (header values hidden; null when there is no
/// sink), the fields an environment variable sets, and its live state.
#[derive(Debug, Serialize, ToSchema)]
pub struct SinkDocument {
    #[schema(inline, required = true)]
    pub sink: Option<SinkShown>,
    /// Fields set by an environment variable (field to variable name).
    pub locked: BTreeMap<String, String>,
    #[schema(value_type = SinkStatusSchema)]
    pub status: SinkStatus,
}

/// The sink's live state: the schema of a [`SinkStatus`] (the type is
/// shared with the status page; a test holds the two together).
#[derive(ToSchema)]
#[schema(as = SinkStatus)]
#[allow(dead_code)]
pub struct SinkStatusSchema {
    enabled: bool,
    /// The configured URL, with any password in it masked; null when disabled.
    url: Option<String>,
    /// Names of the configured headers (never their values).
    headers: Vec<String>,
    batch_size: Option<usize>,
    buffering: Option<String>,
    retry_limit: Option<String>,
    queue_limit: Option<usize>,
    gzip: bool,
    /// Events held in memory and not yet delivered.
    queue_depth: usize,
    /// Change events stored in the outbox and not yet delivered.
    outbox_depth: u64,
    /// Failed attempts since the last success.
    consecutive_failures: u64,
    /// The current wait between attempts after a failure; 0 while healthy.
    retry_wait_ms: u64,
    /// When the next attempt after a failure is due (RFC 3339); null while healthy.
    next_attempt_at: Option<String>,
    last_error: Option<String>,
    last_success_at: Option<String>,
    last_failure_at: Option<String>,
    /// Events by fate.
    #[schema(value_type = Object)]
    counters: (),
    /// POST attempts by result.
    #[schema(value_type = Object)]
    batches: (),
}

/// A sink's settings as the API and pages show them: the `[sink]` fields,
/// with header values and any password in the URL hidden (the document of
/// [`service::sink::SinkShown`], which the settings event carries too).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SinkShown {
    pub url: String,
    /// Header names; every value shows as `(hidden)`.
    #[schema(schema_with = schema::hidden_values)]
    pub headers: BTreeMap<String, &'static str>,
    pub batch_size: usize,
    #[schema(schema_with = schema::positive_duration)]
    pub buffering: String,
    #[schema(schema_with = schema::duration_or_zero)]
    pub retry_limit: String,
    pub queue_limit: usize,
    pub gzip: bool,
}

impl SinkShown {
    pub fn of(c: &crate::config::SinkConfig) -> Self {
        let s = service::sink::SinkShown::of(c);
        SinkShown {
            url: s.url,
            headers: s.headers,
            batch_size: s.batch_size,
            buffering: s.buffering,
            retry_limit: s.retry_limit,
            queue_limit: s.queue_limit,
            gzip: s.gzip,
        }
    }
}

pub fn sink_document(app: &AppState) -> SinkDocument {
    SinkDocument {
        sink: app.engine.sink_config().as_ref().map(SinkShown::of),
        locked: app.engine.locked_sink(),
        status: app.sink.status(),
    }
}

/// How a test event went: `ok` says whether the destination took it,
/// `error` why not.
#[derive(Debug, Serialize, ToSchema)]
pub struct SinkTestResult {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schema::plain_string)]
    pub error: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/settings/sink",
    operation_id = "getSink",
    summary = "Event sink settings (header values hidden), locked fields and live state",
    responses((status = 200, description = "sink", body = SinkDocument)),
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
        (status = 200, description = "sink in force", body = SinkDocument),
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
    service::sink::save(&app.ctx(), patch, &who.actor()).await?;
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
    match service::sink::send_test(&app.ctx(), &who.actor()).await {
        Ok(Ok(())) => Ok(Json(SinkTestResult { ok: true, error: None })),
        Ok(Err(error)) => Ok(Json(SinkTestResult {
            ok: false,
            error: Some(error),
        })),
        Err(ServiceError::Conflict {
            kind: Conflict::SinkDisabled,
            message,
            ..
        }) => Err(ApiError::conflict(
            "sink_disabled",
            format!("{message}: configure one with PUT /api/settings/sink first"),
        )),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::{Batches, Counters};

    /// Every field the sink's state is sent with is in the document, and
    /// every field the document requires is sent.
    #[test]
    fn the_status_schema_names_every_field_of_the_sink_status() {
        let status = SinkStatus {
            enabled: true,
            url: Some("http://x".into()),
            headers: vec!["Authorization".into()],
            batch_size: Some(10),
            buffering: Some("2s".into()),
            retry_limit: Some("10m".into()),
            queue_limit: Some(100),
            gzip: false,
            queue_depth: 0,
            outbox_depth: 0,
            consecutive_failures: 0,
            retry_wait_ms: 0,
            next_attempt_at: None,
            last_error: None,
            last_success_at: None,
            last_failure_at: None,
            counters: Counters::default(),
            batches: Batches::default(),
        };
        let sent = serde_json::to_value(&status).expect("status");
        let doc = super::super::openapi::document(&["http"]);
        let schema = &doc["components"]["schemas"]["SinkStatus"];
        let props = schema["properties"].as_object().expect("properties");
        for key in sent.as_object().expect("object").keys() {
            assert!(props.contains_key(key), "{key} is documented");
        }
        for key in schema["required"].as_array().expect("required") {
            assert!(sent.get(key.as_str().unwrap_or_default()).is_some(), "{key} is sent");
        }
        let sink = &doc["components"]["schemas"]["SinkDocument"]["properties"]["sink"];
        assert_eq!(sink["nullable"], true, "{sink}");
        let required = &doc["components"]["schemas"]["SinkDocument"]["required"];
        assert_eq!(required, &serde_json::json!(["sink", "locked", "status"]));
    }
}

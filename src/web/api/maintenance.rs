//! `GET`/`POST /api/maintenance` and `DELETE /api/maintenance/{id}`:
//! maintenance windows, during which polling goes on but no failure
//! dead-letters a task of the instances they cover.

use super::schema;
use crate::core::maintenance::{self, MaintenanceTarget, MaintenanceWindow, Schedule};
use crate::model::{Timestamp, duration_str};
use crate::service::maintenance::MaintenanceInput;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, JsonBody, from_json_object};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// A maintenance window: its target (one of `instances`, `pool`, `type`),
/// its schedule (`start` and `end`, or `days`, `at`, `duration` and
/// `timezone`), and whether it is open now.
#[derive(Debug, Serialize, ToSchema)]
pub struct MaintenanceView {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub instances: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, schema_with = schema::plain_string)]
    pub pool: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    #[schema(required = false, schema_with = schema::plain_string)]
    pub type_name: Option<String>,
    /// A single span: when it opens (RFC 3339 UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, schema_with = schema::plain_string)]
    pub start: Option<String>,
    /// A single span: when it closes (RFC 3339 UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, schema_with = schema::plain_string)]
    pub end: Option<String>,
    /// A weekly repeat: the days (`mon` … `sun`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub days: Option<Vec<String>>,
    /// A weekly repeat: the wall-clock time it opens (`HH:MM`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, schema_with = schema::plain_string)]
    pub at: Option<String>,
    /// A weekly repeat: how long each occurrence lasts (`2h`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, schema_with = schema::plain_string)]
    pub duration: Option<String>,
    /// A weekly repeat: the IANA time zone of `at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, schema_with = schema::plain_string)]
    pub timezone: Option<String>,
    pub reason: String,
    /// Open now.
    pub active: bool,
    /// The stretch open now, or else the next one (RFC 3339 UTC); null
    /// when the window will not open again.
    #[serde(rename = "nextStart")]
    #[schema(required = true, format = DateTime)]
    pub next_start: Option<String>,
    #[serde(rename = "nextEnd")]
    #[schema(required = true, format = DateTime)]
    pub next_end: Option<String>,
    /// The instances the window covers, as the catalog stands now.
    pub covers: Vec<String>,
    #[serde(rename = "createdAt")]
    #[schema(format = DateTime)]
    pub created_at: String,
    #[serde(rename = "createdBy")]
    pub created_by: String,
}

impl MaintenanceView {
    pub fn of(w: &MaintenanceWindow, cat: &crate::core::catalog::Catalog, now: Timestamp) -> Self {
        let edges = maintenance::next_edges(&w.schedule, now);
        let mut v = MaintenanceView {
            id: w.id.clone(),
            instances: None,
            pool: None,
            type_name: None,
            start: None,
            end: None,
            days: None,
            at: None,
            duration: None,
            timezone: None,
            reason: w.reason.clone(),
            active: edges.is_some_and(|e| e.start <= now),
            next_start: edges.map(|e| e.start.to_rfc3339()),
            next_end: edges.map(|e| e.end.to_rfc3339()),
            covers: crate::engine::maintenance::instances_of(w, cat),
            created_at: w.created.to_rfc3339(),
            created_by: w.created_by.clone(),
        };
        match &w.target {
            MaintenanceTarget::Instances(names) => v.instances = Some(names.clone()),
            MaintenanceTarget::Pool(p) => v.pool = Some(p.clone()),
            MaintenanceTarget::Type(t) => v.type_name = Some(t.clone()),
        }
        match &w.schedule {
            Schedule::Once { start, end } => {
                v.start = Some(start.to_rfc3339());
                v.end = Some(end.to_rfc3339());
            }
            Schedule::Weekly(r) => {
                v.days = Some(r.days().iter().map(|d| d.as_str().to_string()).collect());
                v.at = Some(r.at().to_string());
                v.duration = Some(duration_str::format(r.duration()));
                v.timezone = Some(r.zone().name().to_string());
            }
        }
        v
    }
}

/// `GET /api/maintenance`.
#[derive(Debug, Serialize, ToSchema)]
pub struct MaintenanceList {
    pub count: usize,
    pub windows: Vec<MaintenanceView>,
}

/// The body of `POST /api/maintenance`: exactly one of `instances`, `pool`
/// or `type`; then `start` (default now) and `end` or `duration`, or a
/// weekly `days`, `at`, `duration` and `timezone` (default UTC); and a
/// `reason`. A window lasts at most 7 days.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct MaintenanceRequest {
    #[schema(required = false)]
    instances: Option<Vec<String>>,
    #[schema(required = false)]
    pool: Option<String>,
    #[serde(rename = "type")]
    #[schema(required = false)]
    type_name: Option<String>,
    /// RFC 3339; default now.
    #[schema(required = false)]
    start: Option<String>,
    /// RFC 3339.
    #[schema(required = false)]
    end: Option<String>,
    /// `30m`, `2h`, at most `7d`.
    #[schema(required = false)]
    duration: Option<String>,
    /// `mon` … `sun`: a weekly repeat.
    #[schema(required = false)]
    days: Option<Vec<String>>,
    /// `HH:MM`, wall-clock time in `timezone`.
    #[schema(required = false)]
    at: Option<String>,
    /// IANA name, e.g. `Europe/Berlin`; default `UTC`.
    #[schema(required = false)]
    timezone: Option<String>,
    #[schema(required = false)]
    reason: Option<String>,
}

/// The path of one window.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct WindowPath {
    #[param(schema_with = schema::plain_string)]
    pub id: String,
}

#[utoipa::path(
    get,
    path = "/api/maintenance",
    operation_id = "listMaintenance",
    summary = "Maintenance windows, with whether each is open and its next start and end",
    responses((status = 200, description = "windows", body = MaintenanceList)),
)]
pub async fn list(State(app): State<AppState>) -> Json<MaintenanceList> {
    let now = app.engine.now();
    let cat = app.engine.catalog();
    let windows: Vec<MaintenanceView> = app
        .engine
        .maintenance_windows()
        .iter()
        .map(|w| MaintenanceView::of(w, &cat, now))
        .collect();
    Json(MaintenanceList {
        count: windows.len(),
        windows,
    })
}

#[utoipa::path(
    post,
    path = "/api/maintenance",
    operation_id = "createMaintenance",
    summary = "Make a maintenance window (polling goes on; failures inside it never dead-letter)",
    request_body(content = MaintenanceRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "made", body = MaintenanceView),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 409, description = "the most windows there may be (1000) are in force already (code limit)", body = ErrorBody),
        (status = 422, description = "invalid field, named: unknown instance, pool, type or time zone; end before start; longer than 7 days; none or more than one of instances, pool and type", body = FieldErrorBody),
    ),
)]
pub async fn create(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(doc): JsonBody<Value>,
) -> Result<(StatusCode, Json<MaintenanceView>), ApiError> {
    let input: MaintenanceInput = from_json_object(&doc)?;
    let w = crate::service::maintenance::create(&app.ctx(), &input, &who.actor()).await?;
    let view = MaintenanceView::of(&w, &app.engine.catalog(), app.engine.now());
    Ok((StatusCode::CREATED, Json(view)))
}

#[utoipa::path(
    delete,
    path = "/api/maintenance/{id}",
    operation_id = "deleteMaintenance",
    summary = "End a maintenance window now (it is deleted)",
    params(WindowPath),
    responses(
        (status = 200, description = "the window ended", body = MaintenanceView),
        (status = 404, description = "no such window", body = ErrorBody),
    ),
)]
pub async fn delete(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(WindowPath { id }): Path<WindowPath>,
) -> Result<Json<MaintenanceView>, ApiError> {
    let w = crate::service::maintenance::end(&app.ctx(), &id, &who.actor()).await?;
    let mut view = MaintenanceView::of(&w, &app.engine.catalog(), app.engine.now());
    view.active = false;
    Ok(Json(view))
}

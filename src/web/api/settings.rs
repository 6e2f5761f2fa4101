//! `GET`/`PUT /api/settings/monitoring`: the `[adaptive]`, `[scheduler]` and
//! `[failure]` sections as JSON, plus which fields an environment variable
//! locks. A `PUT` takes a partial document, validates all of it before saving
//! any of it, persists, and applies at once.

use crate::model::MonitoringSettings;
use crate::service;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, JsonBody};
use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The monitoring settings in force, and the fields an environment
/// variable locks (field to variable name).
#[derive(Debug, Serialize)]
pub struct SettingsDocument {
    #[serde(flatten)]
    pub settings: MonitoringSettings,
    pub locked: BTreeMap<String, String>,
}

pub fn settings_document(app: &AppState) -> SettingsDocument {
    SettingsDocument {
        settings: app.engine.monitoring(),
        locked: app.engine.locked_settings(),
    }
}

#[utoipa::path(
    get,
    path = "/api/settings/monitoring",
    operation_id = "getMonitoringSettings",
    summary = "Monitoring settings",
    responses((status = 200, description = "settings", body = ref("#/components/schemas/MonitoringSettings"))),
)]
pub async fn get(State(app): State<AppState>) -> Json<SettingsDocument> {
    Json(settings_document(&app))
}

#[utoipa::path(
    put,
    path = "/api/settings/monitoring",
    operation_id = "putMonitoringSettings",
    summary = "Change monitoring settings (a JSON merge patch of the saved settings: omitted fields keep their value, null drops the saved value so the config file's or the default applies; validated as a whole, saved, applied at once)",
    request_body(content = ref("#/components/schemas/MonitoringSettingsPatch"), content_type = "application/json"),
    responses(
        (status = 200, description = "settings in force", body = ref("#/components/schemas/MonitoringSettings")),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 409, description = "a field is locked by an environment variable, or the settings would push a budget pool with no profile over its target (code over_budget)", body = ErrorBody),
        (status = 422, description = "invalid value, naming the field", body = FieldErrorBody),
    ),
)]
pub async fn put(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<SettingsDocument>, ApiError> {
    // The API reports the first violation; the page shows them all.
    service::settings::save(&app.ctx(), patch, &who.actor()).await?;
    Ok(Json(settings_document(&app)))
}

//! `GET`/`PUT /api/settings/monitoring`: the `[adaptive]`, `[scheduler]` and
//! `[failure]` sections as JSON, plus which fields an environment variable
//! locks. A `PUT` takes a partial document, validates all of it before saving
//! any of it, persists, and applies at once.

use crate::engine::settings::SettingsError;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, JsonBody};
use axum::extract::State;
use axum::{Extension, Json};
use serde_json::{Value, json};

pub const SETTINGS_KEY: &str = "monitoring";

pub fn settings_document(app: &AppState) -> Value {
    let s = app.shared.monitoring();
    let locked = crate::engine::lock(&app.shared.settings).locked();
    let mut v = serde_json::to_value(&s).unwrap_or(Value::Null);
    v["locked"] = json!(locked);
    v
}

pub async fn get(State(app): State<AppState>) -> Json<Value> {
    Json(settings_document(&app))
}

pub async fn put(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(mut patch): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    if let Some(o) = patch.as_object_mut() {
        // Echoing back a GET document is allowed: `locked` is informational.
        o.remove("locked");
    }
    let _edit = app.shared.settings_edit.lock().await;
    let proposal = crate::engine::lock(&app.shared.settings).propose(&patch);
    let (saved, effective) = match proposal {
        Ok(p) => p,
        Err(SettingsError::Locked(field, var)) => {
            return Err(ApiError {
                field: Some(field.clone()),
                ..ApiError::conflict(
                    "locked",
                    format!("{field} is set by the environment variable {var} and cannot be changed here"),
                )
            });
        }
        Err(SettingsError::Invalid(errs)) => {
            let first = errs
                .into_iter()
                .next()
                .unwrap_or_else(|| crate::model::FieldError::new("", "", "invalid settings"));
            return Err(ApiError::invalid(first));
        }
    };
    let store = app.shared.store.clone();
    let doc = saved.clone();
    tokio::task::spawn_blocking(move || store.put_settings(SETTINGS_KEY, &doc))
        .await
        .map_err(ApiError::internal)??;
    crate::engine::lock(&app.shared.settings).saved = saved;
    app.shared.apply_settings(effective);
    tracing::info!(actor = %who.actor(), change = %patch, "monitoring settings changed");
    Ok(Json(settings_document(&app)))
}

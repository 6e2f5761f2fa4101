//! `GET`/`PUT /api/settings/monitoring`: the `[adaptive]`, `[scheduler]` and
//! `[failure]` sections as JSON, plus which fields an environment variable
//! locks. A `PUT` takes a partial document, validates all of it before saving
//! any of it, persists, and applies at once.

use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, JsonBody};
use crate::web::ops;
use axum::extract::State;
use axum::{Extension, Json};
use serde_json::{Value, json};

pub use crate::web::ops::SETTINGS_KEY;

pub fn settings_document(app: &AppState) -> Value {
    let s = app.shared.monitoring();
    let locked = app.shared.locked_settings();
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
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    if let Err(mut errs) = ops::save_settings(&app, patch, &who.actor()).await {
        // The API reports the first violation; the page shows them all.
        return Err(errs.remove(0));
    }
    Ok(Json(settings_document(&app)))
}

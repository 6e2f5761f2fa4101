//! Instances managed through the API (§6). Credentials are write-only: the
//! API shows the auth kind and non-secret parts, never a secret. Instances
//! from the config file are provisioned and read-only here.

use crate::model::{Auth, FieldError, InstanceConfig};
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, JsonBody, QueryParams, from_json_object};
use crate::web::ops;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

/// The API view of an instance: no secrets.
pub fn instance_json(i: &InstanceConfig, provisioned: bool) -> Value {
    let mut v = serde_json::to_value(i).unwrap_or(Value::Null);
    let auth = match &i.auth {
        Auth::None {} => json!({"kind": "none"}),
        Auth::Bearer { .. } => json!({"kind": "bearer"}),
        Auth::Header { name, .. } => json!({"kind": "header", "name": name}),
        Auth::Basic { username, .. } => json!({"kind": "basic", "username": username}),
        Auth::PveToken { user, token_id, .. } => json!({"kind": "pve_token", "user": user, "token_id": token_id}),
    };
    v["auth"] = auth;
    v["url"] = json!(crate::web::redact::mask_url(&i.url));
    v["provisioned"] = json!(provisioned);
    v
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    /// Substring of the name or URL.
    pub q: Option<String>,
    #[serde(rename = "type")]
    pub type_name: Option<String>,
}

pub async fn list(State(app): State<AppState>, QueryParams(q): QueryParams<ListQuery>) -> Json<Value> {
    let cat = app.shared.catalog();
    let items: Vec<Value> = cat
        .instances
        .values()
        .filter(|e| q.type_name.as_ref().is_none_or(|t| &e.config.type_name == t))
        .filter(|e| {
            q.q.as_ref().is_none_or(|s| {
                e.config.name.contains(s.as_str()) || crate::web::redact::mask_url(&e.config.url).contains(s.as_str())
            })
        })
        .map(|e| instance_json(&e.config, e.provisioned))
        .collect();
    Json(json!({"count": items.len(), "instances": items}))
}

pub async fn get(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let cat = app.shared.catalog();
    let e = cat
        .instances
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    Ok(Json(instance_json(&e.config, e.provisioned)))
}

pub async fn create(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(doc): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let i: InstanceConfig = from_json_object(&doc)?;
    ops::create_instance(&app, i.clone(), &who.actor()).await?;
    Ok((StatusCode::CREATED, Json(instance_json(&i, false))))
}

pub async fn update(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    JsonBody(mut doc): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    if !app.shared.catalog().instances.contains_key(&name) {
        return Err(ApiError::not_found(format!("no instance named {name:?}")));
    }
    let Some(obj) = doc.as_object_mut() else {
        return Err(ApiError::invalid(FieldError::new("", "", "expected a JSON object")));
    };
    if !obj.contains_key("name") {
        obj.insert("name".into(), json!(name));
    }
    // Credentials are write-only: a PUT without `auth` keeps the stored ones.
    let keep_auth = !obj.contains_key("auth");
    let i: InstanceConfig = from_json_object(&doc)?;
    let i = ops::update_instance(&app, &name, i, keep_auth, &who.actor()).await?;
    Ok(Json(instance_json(&i, false)))
}

pub async fn delete(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    ops::delete_instance(&app, &name, &who.actor()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Run every group of the instance once, now, outside the schedule, and show
/// the classified result of each.
pub async fn test(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let results = ops::test_instance(&app, &name).await?;
    Ok(Json(json!({"instance": name, "results": results})))
}

//! Instances managed through the API (§6). Credentials are write-only: the
//! API shows the auth kind and non-secret parts, never a secret. Instances
//! from the config file are provisioned and read-only here.

use crate::model::{Auth, FieldError, InstanceConfig};
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, JsonBody, parse_json};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Instant;

/// The API view of an instance: no secrets.
pub fn instance_json(i: &InstanceConfig, provisioned: bool) -> Value {
    let mut v = serde_json::to_value(i).unwrap_or(Value::Null);
    let auth = match &i.auth {
        Auth::None => json!({"kind": "none"}),
        Auth::Bearer { .. } => json!({"kind": "bearer"}),
        Auth::Header { name, .. } => json!({"kind": "header", "name": name}),
        Auth::Basic { username, .. } => json!({"kind": "basic", "username": username}),
        Auth::PveToken { user, token_id, .. } => json!({"kind": "pve_token", "user": user, "token_id": token_id}),
    };
    v["auth"] = auth;
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

pub async fn list(State(app): State<AppState>, Query(q): Query<ListQuery>) -> Json<Value> {
    let cat = app.shared.catalog();
    let items: Vec<Value> = cat
        .instances
        .values()
        .filter(|e| q.type_name.as_ref().is_none_or(|t| &e.config.type_name == t))
        .filter(|e| {
            q.q.as_ref()
                .is_none_or(|s| e.config.name.contains(s.as_str()) || e.config.url.contains(s.as_str()))
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

fn validate(app: &AppState, i: &InstanceConfig) -> Result<(), ApiError> {
    i.validate_fields().map_err(ApiError::invalid)?;
    app.shared.catalog().check_references(i).map_err(ApiError::invalid)?;
    Ok(())
}

async fn persist(app: &AppState, i: InstanceConfig) -> Result<(), ApiError> {
    let store = app.shared.store.clone();
    let saved = i.clone();
    tokio::task::spawn_blocking(move || store.put_instance(&saved))
        .await
        .map_err(ApiError::internal)??;
    let mut cat = (*app.shared.catalog()).clone();
    cat.insert(i, false);
    app.shared.set_catalog(cat);
    Ok(())
}

pub async fn create(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(i): JsonBody<InstanceConfig>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    validate(&app, &i)?;
    let _edit = app.shared.catalog_edit.lock().await;
    if app.shared.catalog().instances.contains_key(&i.name) {
        return Err(ApiError::conflict(
            "duplicate",
            format!("an instance named {:?} already exists", i.name),
        ));
    }
    persist(&app, i.clone()).await?;
    tracing::info!(instance = %i.name, actor = %who.actor(), "instance added");
    Ok((StatusCode::CREATED, Json(instance_json(&i, false))))
}

pub async fn update(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let _edit = app.shared.catalog_edit.lock().await;
    let cat = app.shared.catalog();
    let existing = cat
        .instances
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    if existing.provisioned {
        return Err(ApiError::conflict(
            "provisioned",
            format!("instance {name:?} is defined in the config file; change it there"),
        ));
    }
    let mut doc: Value = parse_json(&body)?;
    let Some(obj) = doc.as_object_mut() else {
        return Err(ApiError::invalid(FieldError::new("", "", "expected a JSON object")));
    };
    match obj.get("name") {
        None => {
            obj.insert("name".into(), json!(name));
        }
        Some(Value::String(n)) if *n == name => {}
        Some(other) => {
            return Err(ApiError::invalid(FieldError::new(
                "name",
                other,
                "cannot be changed; delete the instance and add it again",
            )));
        }
    }
    // Credentials are write-only: a PUT without `auth` keeps the stored ones.
    let keep_auth = !obj.contains_key("auth");
    let mut i: InstanceConfig = parse_json(&serde_json::to_vec(&doc).unwrap_or_default())?;
    if keep_auth {
        i.auth = existing.config.auth.clone();
    }
    validate(&app, &i)?;
    drop(cat);
    persist(&app, i.clone()).await?;
    tracing::info!(instance = %name, actor = %who.actor(), "instance updated");
    Ok(Json(instance_json(&i, false)))
}

pub async fn delete(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let _edit = app.shared.catalog_edit.lock().await;
    let cat = app.shared.catalog();
    let existing = cat
        .instances
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    if existing.provisioned {
        return Err(ApiError::conflict(
            "provisioned",
            format!("instance {name:?} is defined in the config file; remove it there"),
        ));
    }
    let store = app.shared.store.clone();
    let n = name.clone();
    tokio::task::spawn_blocking(move || store.delete_instance(&n))
        .await
        .map_err(ApiError::internal)??;
    let mut next = (*cat).clone();
    next.instances.remove(&name);
    drop(cat);
    app.shared.set_catalog(next);
    tracing::info!(instance = %name, actor = %who.actor(), "instance deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Run every group of the instance once, now, outside the schedule, and show
/// the classified result of each.
pub async fn test(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let cat = app.shared.catalog();
    let e = cat
        .instances
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    let groups = cat
        .types
        .get(&e.config.type_name)
        .map(|t| t.groups.clone())
        .unwrap_or_default();
    let mut results = Vec::new();
    for g in groups {
        let started = Instant::now();
        let hard = e.config.timeout + std::time::Duration::from_millis(500);
        let r = tokio::time::timeout(hard, app.shared.poller.poll(&e.config, &g)).await;
        let ms = started.elapsed().as_millis() as u64;
        results.push(match r {
            Ok(Ok(ok)) => {
                json!({"group": g.name, "ok": true, "status": ok.status, "bytes": ok.body_bytes, "durationMs": ms})
            }
            Ok(Err(err)) => json!({"group": g.name, "ok": false, "status": err.status, "durationMs": ms,
                "error": {"category": err.category, "kind": err.kind, "message": err.message}}),
            Err(_) => json!({"group": g.name, "ok": false, "durationMs": ms,
                "error": {"category": "transient", "kind": "timeout", "message": "no response within the timeout"}}),
        });
    }
    Ok(Json(json!({"instance": name, "results": results})))
}

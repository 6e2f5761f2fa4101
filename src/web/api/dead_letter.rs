//! The dead-letter queue: list (paginated), retry now, discard; and enabling
//! a discarded task again. Every action is committed before it is answered.

use super::health::dead_letter_json;
use crate::core::scheduler::OperatorOp;
use crate::model::TaskKey;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, QueryParams};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct Page {
    pub page: Option<usize>,
    pub per_page: Option<usize>,
}

pub const MAX_PER_PAGE: usize = 500;
/// Far past any real queue; bounds the arithmetic.
pub const MAX_PAGE: usize = 1_000_000;

pub async fn list(State(app): State<AppState>, QueryParams(p): QueryParams<Page>) -> Result<Json<Value>, ApiError> {
    let page = p.page.unwrap_or(1);
    if page == 0 || page > MAX_PAGE {
        return Err(ApiError::invalid(crate::model::FieldError::new(
            "page",
            page,
            format!("must be between 1 and {MAX_PAGE}"),
        )));
    }
    let per_page = p.per_page.unwrap_or(50);
    if per_page == 0 || per_page > MAX_PER_PAGE {
        return Err(ApiError::invalid(crate::model::FieldError::new(
            "per_page",
            per_page,
            format!("must be between 1 and {MAX_PER_PAGE}"),
        )));
    }
    let (count, entries) = app
        .shared
        .dead_letter_page((page - 1).saturating_mul(per_page), per_page);
    let tasks: Vec<Value> = entries.iter().map(dead_letter_json).collect();
    Ok(Json(json!({
        "count": count,
        "page": page,
        "perPage": per_page,
        "tasks": tasks,
    })))
}

fn task_json(key: &TaskKey, rec: &crate::model::TaskRecord) -> Value {
    json!({
        "instance": &*key.instance,
        "group": &*key.group,
        "nextRun": if rec.disabled { Value::Null } else { json!(rec.next_run.to_rfc3339()) },
        "deadLettered": rec.dead_letter.is_some(),
        "disabled": rec.disabled,
        "failures": rec.failures,
    })
}

pub async fn retry(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path((instance, group)): Path<(String, String)>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let key = TaskKey::new(&instance, &group);
    let rec = app
        .shared
        .operator_action(&key, &who.actor(), OperatorOp::Retry)
        .await?;
    tracing::info!(task = %key, actor = %who.actor(), "operator retried dead-letter task");
    Ok((StatusCode::ACCEPTED, Json(task_json(&key, &rec))))
}

pub async fn discard(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path((instance, group)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let key = TaskKey::new(&instance, &group);
    let rec = app
        .shared
        .operator_action(&key, &who.actor(), OperatorOp::Discard)
        .await?;
    tracing::info!(task = %key, actor = %who.actor(), "operator discarded dead-letter task; task disabled");
    Ok(Json(task_json(&key, &rec)))
}

pub async fn enable(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path((instance, group)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let key = TaskKey::new(&instance, &group);
    let rec = app
        .shared
        .operator_action(&key, &who.actor(), OperatorOp::Enable)
        .await?;
    tracing::info!(task = %key, actor = %who.actor(), "operator enabled task");
    Ok(Json(task_json(&key, &rec)))
}

//! The dead-letter queue: list (paginated), retry now, discard; and enabling
//! a discarded task again. Every action is committed before it is answered.

use super::health::{DeadLetterTask, dead_letter_task};
use crate::model::TaskKey;
use crate::service::dead_letters;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, QueryParams};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Page {
    /// From 1 (the default).
    #[param(minimum = 1, maximum = 1_000_000)]
    pub page: Option<usize>,
    /// Entries per page (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub per_page: Option<usize>,
}

/// One page of the dead-letter queue, most recent first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterPage {
    /// Entries in the whole queue.
    pub count: usize,
    pub page: usize,
    pub per_page: usize,
    pub tasks: Vec<DeadLetterTask>,
}

/// A task after an operator action on it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    pub instance: String,
    pub group: String,
    /// RFC 3339; null while the task is disabled.
    #[schema(required = true, format = DateTime)]
    pub next_run: Option<String>,
    pub dead_lettered: bool,
    pub disabled: bool,
    pub failures: u32,
}

/// The path of a task: its instance and endpoint group.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TaskPath {
    pub instance: String,
    pub group: String,
}

pub const MAX_PER_PAGE: usize = 500;
/// Far past any real queue; bounds the arithmetic.
pub const MAX_PAGE: usize = 1_000_000;

#[utoipa::path(
    get,
    path = "/api/monitoring/scheduler/dead-letter",
    operation_id = "listDeadLetter",
    summary = "Dead-letter queue, most recent first",
    params(Page),
    responses(
        (status = 200, description = "entries", body = DeadLetterPage, links(
            ("RetryDeadLetter" = (operation_id = "retryDeadLetter", parameters(
                ("instance" = "$response.body#/tasks/0/instance"), ("group" = "$response.body#/tasks/0/group")))),
            ("DiscardDeadLetter" = (operation_id = "discardDeadLetter", parameters(
                ("instance" = "$response.body#/tasks/0/instance"), ("group" = "$response.body#/tasks/0/group")))),
        )),
        (status = 400, description = "a query parameter given twice (named in `field`)", body = ErrorBody),
        (status = 422, description = "invalid query parameter (named in `field`)", body = FieldErrorBody),
    ),
)]
pub async fn list(
    State(app): State<AppState>,
    QueryParams(p): QueryParams<Page>,
) -> Result<Json<DeadLetterPage>, ApiError> {
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
        .engine
        .dead_letter_page((page - 1).saturating_mul(per_page), per_page);
    Ok(Json(DeadLetterPage {
        count,
        page,
        per_page,
        tasks: entries.iter().map(dead_letter_task).collect(),
    }))
}

fn task_state(key: &TaskKey, rec: &crate::model::TaskRecord) -> TaskState {
    TaskState {
        instance: key.instance.to_string(),
        group: key.group.to_string(),
        next_run: (!rec.disabled).then(|| rec.next_run.to_rfc3339()),
        dead_lettered: rec.dead_letter.is_some(),
        disabled: rec.disabled,
        failures: rec.failures,
    }
}

#[utoipa::path(
    post,
    path = "/api/monitoring/scheduler/dead-letter/{instance}/{group}/retry",
    operation_id = "retryDeadLetter",
    summary = "Probe a dead-lettered task now",
    params(TaskPath),
    responses(
        (status = 202, description = "probe scheduled", body = TaskState),
        (status = 404, description = "no such task", body = ErrorBody),
        (status = 409, description = "not in the dead-letter queue, or running now", body = ErrorBody),
        (status = 503, description = "in a cluster: the member that polls the task did not answer", body = ErrorBody),
    ),
)]
pub async fn retry(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(TaskPath { instance, group }): Path<TaskPath>,
) -> Result<(StatusCode, Json<TaskState>), ApiError> {
    let key = TaskKey::new(&instance, &group);
    let rec = dead_letters::retry(&app.ctx(), &key, &who.actor()).await?;
    Ok((StatusCode::ACCEPTED, Json(task_state(&key, &rec))))
}

#[utoipa::path(
    delete,
    path = "/api/monitoring/scheduler/dead-letter/{instance}/{group}",
    operation_id = "discardDeadLetter",
    summary = "Discard a dead-lettered task (the task is disabled until enabled again)",
    params(TaskPath),
    responses(
        (status = 200, description = "discarded", body = TaskState, links(
            ("EnableTask" = (operation_id = "enableTask", parameters(
                ("instance" = "$response.body#/instance"), ("group" = "$response.body#/group")))),
        )),
        (status = 404, description = "no such task", body = ErrorBody),
        (status = 409, description = "not in the dead-letter queue, or running now", body = ErrorBody),
        (status = 503, description = "in a cluster: the member that polls the task did not answer", body = ErrorBody),
    ),
)]
pub async fn discard(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(TaskPath { instance, group }): Path<TaskPath>,
) -> Result<Json<TaskState>, ApiError> {
    let key = TaskKey::new(&instance, &group);
    let rec = dead_letters::discard(&app.ctx(), &key, &who.actor()).await?;
    Ok(Json(task_state(&key, &rec)))
}

#[utoipa::path(
    post,
    path = "/api/monitoring/scheduler/tasks/{instance}/{group}/enable",
    operation_id = "enableTask",
    summary = "Enable a discarded task again",
    params(TaskPath),
    responses(
        (status = 200, description = "enabled", body = TaskState),
        (status = 404, description = "no such task", body = ErrorBody),
        (status = 409, description = "running now", body = ErrorBody),
        (status = 503, description = "in a cluster: the member that polls the task did not answer", body = ErrorBody),
    ),
)]
pub async fn enable(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(TaskPath { instance, group }): Path<TaskPath>,
) -> Result<Json<TaskState>, ApiError> {
    let key = TaskKey::new(&instance, &group);
    let rec = dead_letters::enable(&app.ctx(), &key, &who.actor()).await?;
    Ok(Json(task_state(&key, &rec)))
}

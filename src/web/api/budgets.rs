//! `GET /api/budgets` and `PUT /api/budgets/{name}`: the budget pools, with
//! their configured and effective budgets; a change is validated, refused
//! with 409 when it would push a pool with no profile over its target,
//! stored, and applied at once.

use super::schema;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, JsonBody};
use crate::web::error::{ErrorBody, FieldErrorBody};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// A budget pool: as configured, and the budget in force now.
#[derive(Debug, Serialize, ToSchema)]
pub struct Budget {
    pub name: String,
    pub requests_per_second: f64,
    pub shared_fraction: f64,
    pub burst: u32,
    /// `requests_per_second × shared_fraction`.
    pub budget_rps: f64,
    /// The budget in force (AIMD may have lowered it).
    pub effective_budget_rps: f64,
    /// Instances in the pool.
    #[schema(required = false)]
    pub instances: usize,
}

impl Budget {
    fn of(app: &AppState, b: &crate::model::BudgetConfig) -> Self {
        let pool = app.engine.pool_budget(&b.name);
        Budget {
            name: b.name.clone(),
            requests_per_second: b.requests_per_second,
            shared_fraction: b.shared_fraction,
            burst: b.burst,
            budget_rps: b.budget_rps(),
            effective_budget_rps: pool.effective_rps,
            instances: pool.instances,
        }
    }
}

/// `GET /api/budgets`.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetList {
    pub budgets: Vec<Budget>,
}

/// The path of a budget pool.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PoolPath {
    #[param(schema_with = schema::name)]
    pub name: String,
}

#[utoipa::path(
    get,
    path = "/api/budgets",
    operation_id = "listBudgets",
    summary = "Budget pools with their configured and effective budgets",
    responses((status = 200, description = "pools", body = BudgetList)),
)]
pub async fn list(State(app): State<AppState>) -> Json<BudgetList> {
    let cat = app.engine.catalog();
    Json(BudgetList {
        budgets: cat.budgets.iter().map(|b| Budget::of(&app, b)).collect(),
    })
}

#[utoipa::path(
    put,
    path = "/api/budgets/{name}",
    operation_id = "putBudget",
    summary = "Change or create a budget pool (partial document; applies at once, survives restarts)",
    params(PoolPath),
    request_body(content = ref("#/components/schemas/BudgetPatch"), content_type = "application/json"),
    responses(
        (status = 200, description = "the pool in force", body = Budget),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 409, description = "the change would push the pool over its target with no profile set (code over_budget)", body = ErrorBody),
        (status = 422, description = "invalid value (a new pool needs requests_per_second), naming the field", body = FieldErrorBody),
    ),
)]
pub async fn put(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(PoolPath { name }): Path<PoolPath>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<Budget>, ApiError> {
    if !crate::model::valid_name(&name) {
        return Err(ApiError::invalid(crate::model::FieldError::new(
            "name",
            &name,
            crate::model::NAME_RULE,
        )));
    }
    let b = crate::service::budgets::save(&app.ctx(), &name, patch, &who.actor()).await?;
    Ok(Json(Budget::of(&app, &b)))
}

//! `GET /api/budgets` and `PUT /api/budgets/{name}`: the budget pools, with
//! their configured and effective budgets; a change is validated, refused
//! with 409 when it would push a pool with no profile over its target,
//! stored, and applied at once.

use crate::web::auth::Principal;
use crate::web::error::{ApiError, JsonBody};
use crate::web::{AppState, ops};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde_json::{Value, json};

fn pool_json(app: &AppState, b: &crate::model::BudgetConfig) -> Value {
    let pool = app.shared.pool_budget(&b.name);
    json!({
        "name": b.name,
        "requests_per_second": b.requests_per_second,
        "shared_fraction": b.shared_fraction,
        "burst": b.burst,
        "budget_rps": b.budget_rps(),
        "effective_budget_rps": pool.effective_rps,
        "instances": pool.instances,
    })
}

pub async fn list(State(app): State<AppState>) -> Json<Value> {
    let cat = app.shared.catalog();
    let pools: Vec<Value> = cat.budgets.iter().map(|b| pool_json(&app, b)).collect();
    Json(json!({ "budgets": pools }))
}

pub async fn put(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    JsonBody(patch): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    if !crate::model::valid_name(&name) {
        return Err(ApiError::invalid(crate::model::FieldError::new(
            "name",
            &name,
            crate::model::NAME_RULE,
        )));
    }
    let b = ops::save_budget(&app, &name, patch, &who.actor()).await?;
    Ok(Json(pool_json(&app, &b)))
}

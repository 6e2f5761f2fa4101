//! HTTP surface (§6): the JSON API (and later the UI) on `server.listen`, and
//! Prometheus metrics on `server.metrics_listen`, each on its own listener so
//! metrics are never exposed with the UI by accident.

pub mod api;
pub mod auth;
pub mod chart;
pub mod error;

use crate::engine::Shared;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub shared: Arc<Shared>,
}

/// Every authenticated `/api` route (relative to `/api`). The auth layer
/// wraps the fallback too, so an unknown `/api` path without a token is a
/// 401, not a 404 that reveals which routes exist.
pub fn api_router(state: AppState) -> Router<AppState> {
    use api::*;
    Router::new()
        .route("/monitoring/scheduler/health", get(health::scheduler_health))
        .route("/monitoring/scheduler/dead-letter", get(dead_letter::list))
        .route(
            "/monitoring/scheduler/dead-letter/{instance}/{group}/retry",
            post(dead_letter::retry),
        )
        .route(
            "/monitoring/scheduler/dead-letter/{instance}/{group}",
            delete(dead_letter::discard),
        )
        .route(
            "/monitoring/scheduler/tasks/{instance}/{group}/enable",
            post(dead_letter::enable),
        )
        .route("/monitoring/scheduler/groups", get(groups::list))
        .route("/settings/monitoring", get(settings::get).put(settings::put))
        .route("/instances", get(instances::list).post(instances::create))
        .route(
            "/instances/{name}",
            get(instances::get).put(instances::update).delete(instances::delete),
        )
        .route("/instances/{name}/test", post(instances::test))
        .route("/admin/backup", get(admin::backup))
        .route("/openapi.json", get(openapi::openapi))
        .fallback(api_not_found)
        .layer(axum::middleware::from_fn_with_state(state, auth::require_auth))
}

async fn api_not_found() -> error::ApiError {
    error::ApiError::not_found("no such API route")
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(api::health::healthz))
        .route("/readyz", get(api::health::readyz))
        .nest("/api", api_router(state.clone()))
        .layer(axum::extract::DefaultBodyLimit::max(1024 * 1024))
        .with_state(state)
}

pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(api::health::healthz))
        .with_state(state)
}

async fn metrics(axum::extract::State(app): axum::extract::State<AppState>) -> impl IntoResponse {
    let shared = app.shared.clone();
    match tokio::task::spawn_blocking(move || shared.metrics.render()).await {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            e.to_string(),
        ),
    }
}

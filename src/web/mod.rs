//! HTTP surface (§6): the JSON API (and later the UI) on `server.listen`, and
//! Prometheus metrics on `server.metrics_listen`, each on its own listener so
//! metrics are never exposed with the UI by accident.

pub mod api;
pub mod assets;
pub mod auth;
pub mod chart;
pub mod error;
pub mod ops;
pub mod pages;
pub mod session;
pub mod session_store;
pub mod throttle;

use crate::engine::Shared;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use std::sync::Arc;
use tower_sessions::SessionManagerLayer;

#[derive(Clone)]
pub struct AppState {
    pub shared: Arc<Shared>,
    pub web: Arc<WebState>,
}

/// State of the browser side.
#[derive(Debug)]
pub struct WebState {
    /// Pages and documents that walk every task (the dashboard panels, the
    /// health document) are built one at a time, on a blocking thread: on a
    /// small machine, UI and API load then waits for its turn instead of
    /// taking the cores the dispatcher and the polls need.
    pub render_slot: tokio::sync::Semaphore,
    /// The last health document and when its build started.
    pub health_cache: std::sync::Mutex<Option<(std::time::Instant, axum::body::Bytes)>>,
    pub throttle: std::sync::Mutex<throttle::LoginThrottle>,
    /// Trust `X-Forwarded-For` / `X-Forwarded-Proto` (operator setting).
    pub trust_proxy: bool,
    /// An admin exists (once true, stays true).
    pub admin_known: std::sync::atomic::AtomicBool,
    /// Serialises first-run setup.
    pub setup_lock: tokio::sync::Mutex<()>,
}

impl Default for WebState {
    fn default() -> Self {
        WebState {
            render_slot: tokio::sync::Semaphore::new(1),
            health_cache: Default::default(),
            throttle: Default::default(),
            trust_proxy: false,
            admin_known: Default::default(),
            setup_lock: Default::default(),
        }
    }
}

impl WebState {
    pub fn new(trust_proxy: bool) -> Self {
        WebState {
            trust_proxy,
            ..Default::default()
        }
    }

    pub fn throttle(&self) -> std::sync::MutexGuard<'_, throttle::LoginThrottle> {
        self.throttle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl AppState {
    /// Build something that walks every task: one at a time, off the async
    /// workers (see [`WebState::render_slot`]).
    pub async fn render<T: Send + 'static>(&self, f: impl FnOnce(&AppState) -> T + Send + 'static) -> T {
        let _slot = self.web.render_slot.acquire().await;
        let app = self.clone();
        match tokio::task::spawn_blocking(move || f(&app)).await {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    pub fn new(shared: Arc<Shared>, web: WebState) -> Self {
        AppState {
            shared,
            web: Arc::new(web),
        }
    }

    /// Whether the admin account exists (setup is then closed).
    pub async fn admin_exists(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.web.admin_known.load(Ordering::Relaxed) {
            return true;
        }
        let store = self.shared.store.clone();
        let exists = tokio::task::spawn_blocking(move || store.user_count().map(|n| n > 0))
            .await
            .ok()
            .and_then(|r| r.ok())
            .unwrap_or(false);
        if exists {
            self.web.admin_known.store(true, Ordering::Relaxed);
        }
        exists
    }
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
        .route("/budgets", get(budgets::list))
        .route("/budgets/{name}", axum::routing::put(budgets::put))
        .route("/settings/monitoring", get(settings::get).put(settings::put))
        .route("/settings/sink", get(sink::get).put(sink::put))
        .route("/settings/sink/test", post(sink::test))
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

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "pollster_session";
/// A session ends after this long without a request.
pub const SESSION_IDLE: time::Duration = time::Duration::hours(12);

pub fn session_layer(store: crate::store::Store) -> SessionManagerLayer<session_store::RedbSessionStore> {
    SessionManagerLayer::new(session_store::RedbSessionStore::new(store))
        .with_name(SESSION_COOKIE)
        .with_http_only(true)
        .with_same_site(tower_sessions::cookie::SameSite::Strict)
        .with_secure(false)
        .with_path("/")
        .with_expiry(tower_sessions::Expiry::OnInactivity(SESSION_IDLE))
}

pub fn router(state: AppState) -> Router {
    // Route layers: a method a page does not serve is a plain 405 (with
    // `Allow`), not a login redirect or a CSRF refusal.
    let protected = pages::protected()
        .route_layer(axum::middleware::from_fn(auth::csrf_form))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_login));
    let public = pages::public().route_layer(axum::middleware::from_fn(auth::csrf_form));
    Router::new()
        .route("/healthz", get(api::health::healthz))
        .route("/readyz", get(api::health::readyz))
        .route("/static/{*path}", get(assets::serve))
        .merge(public)
        .merge(protected)
        .nest("/api", api_router(state.clone()))
        .fallback(page_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(session_layer(state.shared.store.clone()))
        // Outside the session layer, so it sees the cookie that layer sets.
        .layer(axum::middleware::from_fn_with_state(state.clone(), secure_cookie))
        .layer(axum::extract::DefaultBodyLimit::max(1024 * 1024))
        .with_state(state)
}

/// A known path asked with a method it does not serve (axum adds `Allow`).
async fn method_not_allowed() -> StatusCode {
    StatusCode::METHOD_NOT_ALLOWED
}

/// Unknown pages: a login first, then a plain 404.
async fn page_not_found(session: tower_sessions::Session) -> axum::response::Response {
    if session::user(&session).await.is_none() {
        return axum::response::Redirect::to("/login").into_response();
    }
    (StatusCode::NOT_FOUND, "No such page.").into_response()
}

/// Mark the session cookie `Secure` when the request came over HTTPS through
/// a proxy the operator trusts (Pollster itself listens on plain HTTP).
async fn secure_cookie(
    axum::extract::State(app): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let https = app.web.trust_proxy
        && req
            .headers()
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let mut resp = next.run(req).await;
    if https {
        let cookies: Vec<_> = resp.headers().get_all(header::SET_COOKIE).iter().cloned().collect();
        resp.headers_mut().remove(header::SET_COOKIE);
        for c in cookies {
            let v = c.to_str().unwrap_or_default();
            let v = if v.to_ascii_lowercase().contains("; secure") {
                v.to_string()
            } else {
                format!("{v}; Secure")
            };
            if let Ok(hv) = axum::http::HeaderValue::from_str(&v) {
                resp.headers_mut().append(header::SET_COOKIE, hv);
            }
        }
    }
    resp
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

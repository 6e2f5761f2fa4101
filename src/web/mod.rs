//! HTTP surface (§6): the JSON API (and later the UI) on `server.listen`, and
//! Prometheus metrics on `server.metrics_listen`, each on its own listener so
//! metrics are never exposed with the UI by accident.

pub mod api;
pub mod assets;
pub mod auth;
pub mod chart;
pub mod error;
pub mod failed_auth;
pub mod pages;
pub mod pool_view;
pub mod posture;
pub mod serve;
pub mod session;
pub mod session_store;
pub mod stream;
pub mod throttle;

use crate::engine::EngineHandle;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use std::sync::Arc;
use tower_sessions::SessionManagerLayer;

#[derive(Clone)]
pub struct AppState {
    pub engine: EngineHandle,
    /// The database (users, sessions, tokens, settings; the engine's own
    /// records through the engine).
    pub store: crate::store::Store,
    /// The event sink: stage change events, test it, read its status.
    pub sink: crate::sink::Sink,
    pub metrics: crate::metrics::Metrics,
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
    /// The last health document, when its build started and how long it
    /// took.
    pub health_cache: std::sync::Mutex<Option<api::health::CachedHealth>>,
    pub throttle: std::sync::Mutex<throttle::LoginThrottle>,
    /// Failed logins and token requests being counted for the audit trail.
    pub failures: std::sync::Mutex<failed_auth::FailureLog>,
    /// Password checks (argon2, about 19 MiB each) that may run at once;
    /// an attempt beyond them is refused with 429 and `Retry-After`.
    pub password_checks: Arc<tokio::sync::Semaphore>,
    /// The reverse proxies whose `X-Forwarded-*` headers are believed.
    pub proxies: Vec<ipnet::IpNet>,
    /// The one-time code `/setup` asks for (also in `<data_dir>/setup-code`);
    /// `None` once an admin exists.
    pub setup_code: std::sync::Mutex<Option<SetupCode>>,
    /// An admin exists (once true, stays true).
    pub admin_known: std::sync::atomic::AtomicBool,
    /// Serialises first-run setup.
    pub setup_lock: tokio::sync::Mutex<()>,
    /// What the server was started with, for the Security page.
    pub posture: posture::Posture,
    /// Reads the config file again (`POST /api/admin/reload`); absent when
    /// the server was built without one (a benchmark).
    pub reloader: Option<Arc<crate::service::reload::Reloader>>,
    /// This member of a cluster (`GET /api/cluster`, the Cluster page);
    /// `None` alone.
    pub cluster: Option<crate::cluster::Cluster>,
}

impl Default for WebState {
    fn default() -> Self {
        WebState {
            render_slot: tokio::sync::Semaphore::new(1),
            health_cache: Default::default(),
            throttle: Default::default(),
            failures: Default::default(),
            password_checks: Arc::new(tokio::sync::Semaphore::new(PASSWORD_CHECKS)),
            proxies: Vec::new(),
            setup_code: Default::default(),
            admin_known: Default::default(),
            setup_lock: Default::default(),
            posture: Default::default(),
            reloader: None,
            cluster: None,
        }
    }
}

/// Password checks that may run at once (see [`WebState::password_checks`]).
pub const PASSWORD_CHECKS: usize = 3;

/// The first-run setup code and the file it was written to.
#[derive(Debug, Clone)]
pub struct SetupCode {
    pub code: String,
    pub file: std::path::PathBuf,
}

impl WebState {
    pub fn new(proxies: Vec<ipnet::IpNet>, setup_code: Option<SetupCode>) -> Self {
        WebState {
            proxies,
            setup_code: std::sync::Mutex::new(setup_code),
            ..Default::default()
        }
    }

    /// Whether `peer` is a reverse proxy the operator trusts.
    pub fn trusted_proxy(&self, peer: std::net::IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.proxies.iter().any(|n| n.contains(&peer))
    }

    /// The client's address: the socket peer, or, when the peer is a
    /// trusted proxy, the right-most `X-Forwarded-For` address that is not
    /// one (each proxy appends the address it got the request from, so the
    /// entries left of it are whatever the client chose to send).
    pub fn client_ip(&self, peer: std::net::IpAddr, headers: &header::HeaderMap) -> std::net::IpAddr {
        let peer = peer.to_canonical();
        if !self.trusted_proxy(peer) {
            return peer;
        }
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        for hop in hops.iter().rev() {
            match hop.parse::<std::net::IpAddr>() {
                Ok(ip) if self.trusted_proxy(ip) => continue,
                Ok(ip) => return ip.to_canonical(),
                // Not an address: nothing to its left can be trusted.
                Err(_) => return peer,
            }
        }
        peer
    }

    /// The protections the server was started with.
    pub fn with_posture(mut self, posture: posture::Posture) -> Self {
        self.posture = posture;
        self
    }

    /// What `POST /api/admin/reload` reloads with.
    pub fn with_reloader(mut self, reloader: Arc<crate::service::reload::Reloader>) -> Self {
        self.reloader = Some(reloader);
        self
    }

    pub fn with_cluster(mut self, cluster: Option<crate::cluster::Cluster>) -> Self {
        self.cluster = cluster;
        self
    }

    pub fn setup_code(&self) -> std::sync::MutexGuard<'_, Option<SetupCode>> {
        self.setup_code.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn throttle(&self) -> std::sync::MutexGuard<'_, throttle::LoginThrottle> {
        self.throttle.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn failures(&self) -> std::sync::MutexGuard<'_, failed_auth::FailureLog> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Run a store call on a blocking thread: a redb transaction blocks, and
    /// must neither run on an async worker nor be held across an `.await`.
    /// Its error, and a panic in the call, answer as [`error::ApiError`]s (a store
    /// error is a 500, like everywhere else).
    pub async fn with_store<T, E>(
        &self,
        f: impl FnOnce(&crate::store::Store) -> Result<T, E> + Send + 'static,
    ) -> Result<T, error::ApiError>
    where
        T: Send + 'static,
        E: Send + 'static,
        error::ApiError: From<E>,
    {
        let store = self.store.clone();
        Ok(tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(error::ApiError::internal)??)
    }

    pub fn new(cx: crate::service::Context, metrics: crate::metrics::Metrics, web: WebState) -> Self {
        let crate::service::Context {
            engine, store, sink, ..
        } = cx;
        AppState {
            engine,
            store,
            sink,
            metrics,
            web: Arc::new(web),
        }
    }

    /// What the operations of [`crate::service`] work on.
    pub fn ctx(&self) -> crate::service::Context {
        crate::service::Context {
            engine: self.engine.clone(),
            store: self.store.clone(),
            sink: self.sink.clone(),
            cluster: self.web.cluster.clone(),
        }
    }

    /// Whether the admin account exists (setup is then closed).
    pub async fn admin_exists(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.web.admin_known.load(Ordering::Relaxed) {
            return true;
        }
        let exists = self
            .with_store(|s| s.user_count().map(|n| n > 0))
            .await
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
        .route("/instances/{name}/data", get(data::get))
        .route("/instances/{name}/data/{group}/body", get(data::body))
        .route("/admin/backup", post(admin::backup))
        .route("/admin/reload", post(reload::reload))
        .route("/admin/audit", get(audit::list))
        .route("/maintenance", get(maintenance::list).post(maintenance::create))
        .route("/cluster", get(cluster::get))
        .route("/maintenance/{id}", delete(maintenance::delete))
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
    // Before login there is no session to hold a CSRF token (and none is
    // stored for an anonymous visitor): the login and setup forms are
    // protected by the same-origin check alone.
    let public = pages::public().route_layer(axum::middleware::from_fn(auth::same_origin_form));
    Router::new()
        .route("/healthz", get(api::health::healthz))
        .route("/readyz", get(api::health::readyz))
        .route("/static/{*path}", get(assets::serve))
        .merge(public)
        .merge(protected)
        .nest("/api", api_router(state.clone()))
        .fallback(page_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(session_layer(state.store.clone()))
        // Outside the session layer, so it sees the cookie that layer sets.
        .layer(axum::middleware::from_fn_with_state(state.clone(), secure_cookie))
        .layer(axum::extract::DefaultBodyLimit::max(1024 * 1024))
        .layer(axum::middleware::from_fn_with_state(state.clone(), audit_source))
        .layer(axum::middleware::from_fn(serve::request_timeout))
        .layer(axum::middleware::from_fn_with_state(state.clone(), security_headers))
        .with_state(state)
}

/// The socket peer's address, when the server recorded it.
fn peer_ip(req: &axum::extract::Request) -> Option<std::net::IpAddr> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Every change a request makes is audited with the client's address (the
/// peer, or what a trusted proxy forwarded).
async fn audit_source(
    axum::extract::State(app): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match peer_ip(&req) {
        Some(p) => {
            let ip = app.web.client_ip(p, req.headers());
            crate::audit::with_source(ip.to_string(), next.run(req)).await
        }
        None => next.run(req).await,
    }
}

/// The headers every answer carries: no framing, no inline script or style,
/// no sniffing, no referrer, and nothing but static assets kept in a cache.
/// Served over HTTPS, the browser is also told to use nothing else for a
/// year (HSTS).
async fn security_headers(
    axum::extract::State(app): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::HeaderValue;
    let cacheable = req.uri().path().starts_with("/static/");
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !cacheable {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if app.web.posture.ui_tls {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    resp
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

/// Mark the session cookie `Secure` when the request came over HTTPS: to
/// this listener (`server.tls_cert`), or through a proxy the operator trusts.
async fn secure_cookie(
    axum::extract::State(app): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let peer = peer_ip(&req);
    let https = app.web.posture.ui_tls
        || peer.is_some_and(|p| app.web.trusted_proxy(p))
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

/// The metrics listener: `/metrics` and `/values`, behind an API token when
/// `server.metrics_auth = "token"`; `/healthz` is always open.
pub fn metrics_router(state: AppState, auth: crate::config::MetricsAuth) -> Router {
    let mut scrapes = Router::new()
        .route("/metrics", get(metrics))
        .route("/values", get(values));
    if auth == crate::config::MetricsAuth::Token {
        scrapes = scrapes.route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_scrape_token,
        ));
    }
    scrapes
        .route("/healthz", get(api::health::healthz))
        .layer(axum::middleware::map_response(scrape_headers))
        .with_state(state)
}

/// The metrics listener's answers are never sniffed as another type nor
/// kept in a cache (a proxy's or a browser's) for someone else to read.
async fn scrape_headers(mut resp: axum::response::Response) -> axum::response::Response {
    use axum::http::HeaderValue;
    let h = resp.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ValuesQuery {
    instance: Option<String>,
}

/// `GET /values[?instance=NAME]`: every fresh sample the value rules gave,
/// in the Prometheus text format; 404 for an instance that does not exist.
async fn values(
    axum::extract::State(app): axum::extract::State<AppState>,
    query: Result<axum::extract::Query<ValuesQuery>, axum::extract::rejection::QueryRejection>,
) -> axum::response::Response {
    let instance = match query {
        Ok(q) => q.0.instance,
        Err(e) => {
            return error::ApiError::invalid(crate::model::FieldError::new("instance", "", e.body_text()))
                .into_response();
        }
    };
    // A million samples is a render of about half a second and 80 MB:
    // scrapes beyond two at a time wait their turn, so a client looping on
    // the (unauthenticated) listener cannot multiply the memory or the CPU.
    static RENDERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
    let Ok(_turn) = RENDERS.acquire().await else {
        return error::ApiError::internal("the render semaphore is closed").into_response();
    };
    let engine = app.engine.clone();
    let name = instance.clone();
    match tokio::task::spawn_blocking(move || engine.values_exposition(name.as_deref())).await {
        Ok(Some(body)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
            body,
        )
            .into_response(),
        Ok(None) => {
            let mut e = error::ApiError::not_found(format!(
                "no instance named {:?}",
                instance.as_deref().unwrap_or_default()
            ));
            e.field = Some("instance".into());
            e.into_response()
        }
        Err(e) => error::ApiError::internal(e).into_response(),
    }
}

/// `GET /metrics`: the text is written on a blocking thread and sent as it
/// is written ([`stream`]), never held whole.
async fn metrics(axum::extract::State(app): axum::extract::State<AppState>) -> axum::response::Response {
    // A scrape of 100,000 tasks is a few hundred milliseconds of a core and
    // a few tens of MB: scrapes beyond two at a time wait their turn, so a
    // client looping on the (unauthenticated) listener cannot multiply them.
    static SCRAPES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
    let Ok(turn) = SCRAPES.acquire().await else {
        return error::ApiError::internal("the scrape semaphore is closed").into_response();
    };
    let metrics = app.metrics.clone();
    let (tx, body) = stream::channel();
    tokio::task::spawn_blocking(move || {
        let _turn = turn;
        metrics.write(tx).finish();
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        axum::body::Body::new(body),
    )
        .into_response()
}

//! Who is calling. Every route but `/healthz`, `/readyz`, `/login`, `/setup`
//! (before an admin exists) and static assets needs a principal: an API token
//! (`Authorization: Bearer …`) or a logged-in browser session. Handlers see
//! only [`Principal`].
//!
//! Browser requests that change something pass two checks: the request must
//! be same-origin (`Sec-Fetch-Site` / `Origin`), and it must carry the
//! session's CSRF token (form field `_csrf`, or header `X-CSRF-Token` for
//! scripts). Token-authenticated API calls carry no cookie, so they need
//! neither.

use super::AppState;
use super::error::ApiError;
use super::session::{self, CSRF_FIELD, CSRF_HEADER};
use crate::store::{TokenInfo, TokenScope};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tower_sessions::Session;

fn token_principal(info: TokenInfo) -> Principal {
    Principal::Token {
        id: info.id,
        name: info.name,
        scope: info.scope,
    }
}

/// What a `read` token may not do: change anything, take the backup (it
/// holds every instance's credentials), or read the audit trail.
fn read_scope_refusal(req: &Request) -> Option<ApiError> {
    let path = req.uri().path();
    let admin_only = match path.strip_prefix("/api").unwrap_or(path) {
        "/admin/audit" => Some("read the audit trail"),
        "/admin/backup" => Some("download the backup"),
        _ => None,
    };
    if let Some(what) = admin_only {
        return Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("a read token cannot {what}; use an admin token"),
        ));
    }
    if !session::is_safe(req.method()) {
        return Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a read token cannot change anything; use an admin token",
        ));
    }
    None
}

#[derive(Debug, Clone, PartialEq)]
pub enum Principal {
    Token {
        id: String,
        name: String,
        scope: TokenScope,
    },
    Session {
        user: String,
    },
}

impl Principal {
    /// A browser session or an admin token: may see the audit trail and
    /// the token list, and change things.
    pub fn is_admin(&self) -> bool {
        match self {
            Principal::Token { scope, .. } => *scope == TokenScope::Admin,
            Principal::Session { .. } => true,
        }
    }

    /// Who did it, for logs and events.
    pub fn actor(&self) -> String {
        match self {
            Principal::Token { name, id, .. } => format!("token:{name}({id})"),
            Principal::Session { user } => format!("user:{user}"),
        }
    }
}

fn bearer(req: &Request) -> Option<&str> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

/// A bearer token that is not valid: counted for the audit trail per
/// address and window (`crate::web::failed_auth`). Never the token itself:
/// the target says only whether it has the `pst_` form.
async fn token_failed(app: &AppState, client: Option<std::net::IpAddr>, token: &str) {
    let Some(ip) = client else { return };
    let target = if token.starts_with(crate::store::TOKEN_PREFIX) {
        crate::store::TOKEN_PREFIX
    } else {
        "not a pollster token"
    };
    tracing::warn!(client = %ip, "request with an invalid API token");
    super::failed_auth::record(app, super::failed_auth::Kind::Token, ip, "anonymous", target).await;
}

/// The client's address (as the audit trail has it), when the server
/// recorded the peer.
fn client_of(app: &AppState, req: &Request) -> Option<std::net::IpAddr> {
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())?;
    Some(app.web.client_ip(peer, req.headers()))
}

/// A request authenticated by a bearer token keeps no session: whatever a
/// handler put in the (new) session is dropped before the session layer
/// would store it and set a cookie. A session the client already had (it
/// sent its cookie too) is left alone.
async fn sessionless(session: &Session) {
    if session.id().is_none() {
        session.clear().await;
    }
}

/// A page asked for as JSON (`?format=json`).
fn wants_json(req: &Request) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "format" && v == "json"))
}

/// `/api`: a valid bearer token, or a session (with CSRF checks on changes).
pub async fn require_auth(
    State(app): State<AppState>,
    session: Session,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(token) = bearer(&req).map(str::to_owned) {
        let t = token.clone();
        let found = app.with_store(move |s| s.verify_token(&t)).await?;
        let Some(info) = found else {
            let client = client_of(&app, &req);
            token_failed(&app, client, &token).await;
            return Err(ApiError::unauthorized());
        };
        if info.scope == TokenScope::Read
            && let Some(refused) = read_scope_refusal(&req)
        {
            return Err(refused);
        }
        req.extensions_mut().insert(token_principal(info));
        let resp = next.run(req).await;
        sessionless(&session).await;
        return Ok(resp);
    }
    let Some(user) = session::user(&session).await else {
        return Err(ApiError::unauthorized());
    };
    if !session::is_safe(req.method()) {
        session::same_origin(req.headers()).map_err(|m| ApiError::new(StatusCode::FORBIDDEN, "csrf", m))?;
        let sent = req
            .headers()
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let expected = session::csrf_token(&session).await;
        if !session::same_token(sent, &expected) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf",
                "missing or wrong X-CSRF-Token header for a session-authenticated change",
            ));
        }
    }
    req.extensions_mut().insert(Principal::Session { user });
    Ok(next.run(req).await)
}

/// The metrics listener with `server.metrics_auth = "token"`: a valid API
/// token of either scope (both may read); no session, as scrapers have none.
pub async fn require_scrape_token(State(app): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let Some(token) = bearer(&req).map(str::to_owned) else {
        return Err(ApiError::unauthorized());
    };
    let t = token.clone();
    match app.with_store(move |s| s.verify_token(&t)).await? {
        Some(info) if matches!(info.scope, TokenScope::Read | TokenScope::Admin) => Ok(next.run(req).await),
        Some(_) => Err(ApiError::unauthorized()),
        None => {
            let client = client_of(&app, &req);
            token_failed(&app, client, &token).await;
            Err(ApiError::unauthorized())
        }
    }
}

/// Pages: a logged-in session (or, for reading, an API token), else a
/// redirect to `/login` (to `/setup` while no admin exists).
pub async fn require_login(State(app): State<AppState>, session: Session, mut req: Request, next: Next) -> Response {
    // A script may read pages (e.g. `/status?format=json`) with an API
    // token; forms that change something still need a session.
    if session::is_safe(req.method())
        && let Some(token) = bearer(&req).map(str::to_owned)
    {
        let t = token.clone();
        return match app.with_store(move |s| s.verify_token(&t)).await {
            Ok(Some(info)) => {
                req.extensions_mut().insert(token_principal(info));
                let resp = next.run(req).await;
                sessionless(&session).await;
                resp
            }
            Ok(None) => {
                let client = client_of(&app, &req);
                token_failed(&app, client, &token).await;
                ApiError::unauthorized().into_response()
            }
            Err(e) => e.into_response(),
        };
    }
    match session::user(&session).await {
        Some(user) => {
            req.extensions_mut().insert(Principal::Session { user });
            next.run(req).await
        }
        // A script asking for JSON gets the API's answer, not a login page.
        None if wants_json(&req) => ApiError::unauthorized().into_response(),
        None => {
            let target = if app.admin_exists().await { "/login" } else { "/setup" };
            Redirect::to(target).into_response()
        }
    }
}

/// The login and setup forms: no session exists yet to hold a token, so a
/// change must come from a page of this origin (`Origin` /
/// `Sec-Fetch-Site`, which every browser sends with a form post).
pub async fn same_origin_form(req: Request, next: Next) -> Response {
    if !session::is_safe(req.method())
        && let Err(m) = session::same_origin(req.headers())
    {
        return (StatusCode::FORBIDDEN, m).into_response();
    }
    next.run(req).await
}

/// Every state-changing page request: same-origin and the form's `_csrf`
/// field equal to the session's token. The form body is read here (bounded)
/// and handed on unchanged.
pub async fn csrf_form(session: Session, req: Request, next: Next) -> Response {
    if session::is_safe(req.method()) {
        return next.run(req).await;
    }
    if let Err(m) = session::same_origin(req.headers()) {
        return (StatusCode::FORBIDDEN, m).into_response();
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, 256 * 1024).await {
        Ok(b) => b,
        Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "form too large").into_response(),
    };
    let sent = form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == CSRF_FIELD)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let expected = session::csrf_token(&session).await;
    if !session::same_token(&sent, &expected) {
        return (
            StatusCode::FORBIDDEN,
            "This form has expired or did not come from this site. Go back, reload the page and try again.",
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

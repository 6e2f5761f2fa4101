//! First-run setup, login, logout, and Settings → Security (password, API
//! tokens). Password hashing runs on blocking threads.

use super::{Layout, layout};
use crate::accounts::{self, ADMIN};
use crate::model::Timestamp;
use crate::store::TokenInfo;
use crate::web::auth::Principal;
use crate::web::{AppState, session};
use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{ConnectInfo, Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use tower_sessions::Session;

#[derive(Template, WebTemplate)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub layout: Layout,
    pub error: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "setup.html")]
pub struct SetupPage {
    pub layout: Layout,
    pub error: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "security.html")]
pub struct SecurityPage {
    pub layout: Layout,
    pub password_error: Option<String>,
    pub tokens: Vec<TokenRow>,
    /// A token just created: shown this once.
    pub new_token: Option<String>,
    pub token_error: Option<String>,
}

pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub created: String,
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: String,
}

#[derive(Deserialize)]
pub struct SetupForm {
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub confirm: String,
}

/// The client's address: the socket peer, or with `trust_proxy` the first
/// `X-Forwarded-For` entry.
pub fn client_ip(app: &AppState, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    if app.web.trust_proxy
        && let Some(ip) = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.trim().parse().ok())
    {
        return ip;
    }
    peer.ip()
}

pub async fn setup_page(State(app): State<AppState>, session: Session) -> Response {
    if app.admin_exists().await {
        return Redirect::to("/login").into_response();
    }
    SetupPage {
        layout: layout(&session, "Set up", "", vec![]).await,
        error: None,
    }
    .into_response()
}

pub async fn setup(State(app): State<AppState>, session: Session, Form(f): Form<SetupForm>) -> Response {
    let _guard = app.web.setup_lock.lock().await;
    if app.admin_exists().await {
        return Redirect::to("/login").into_response();
    }
    let error = if f.password != f.confirm {
        Some("The two passwords differ.".to_string())
    } else {
        accounts::check_password_rules(&f.password).err().map(|e| e.to_string())
    };
    if let Some(error) = error {
        let page = SetupPage {
            layout: layout(&session, "Set up", "", vec![]).await,
            error: Some(error),
        };
        return (StatusCode::UNPROCESSABLE_ENTITY, page).into_response();
    }
    let store = app.shared.store.clone();
    let pw = f.password;
    let res = tokio::task::spawn_blocking(move || accounts::set_admin_password(&store, &pw, Timestamp::now())).await;
    match res {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return crate::web::error::ApiError::internal(e).into_response(),
        Err(e) => return crate::web::error::ApiError::internal(e).into_response(),
    }
    app.web.admin_known.store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!("admin account created through /setup");
    start_session(&session, ADMIN).await;
    Redirect::to("/").into_response()
}

async fn start_session(session: &Session, user: &str) {
    // A new id at login: a session id planted before login is worthless.
    let _ = session.cycle_id().await;
    let _ = session.insert(session::USER_KEY, user).await;
    let _ = session.insert(session::CSRF_KEY, session::random_hex(32)).await;
}

pub async fn login_page(State(app): State<AppState>, session: Session) -> Response {
    if !app.admin_exists().await {
        return Redirect::to("/setup").into_response();
    }
    if session::user(&session).await.is_some() {
        return Redirect::to("/").into_response();
    }
    LoginPage {
        layout: layout(&session, "Log in", "", vec![]).await,
        error: None,
    }
    .into_response()
}

pub async fn login(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    session: Session,
    Form(f): Form<LoginForm>,
) -> Response {
    let ip = client_ip(&app, peer, &headers);
    let now = Timestamp::now();
    let locked = app.web.throttle().check(ip, now);
    if let Err(left) = locked {
        return login_error(&session, StatusCode::TOO_MANY_REQUESTS, lockout_message(left)).await;
    }
    let store = app.shared.store.clone();
    let user = f.username.trim().to_string();
    let pw = f.password;
    let ok = tokio::task::spawn_blocking(move || {
        store
            .get_user(&user)
            .ok()
            .flatten()
            .is_some_and(|u| accounts::verify_password(&pw, &u.password_hash))
    })
    .await
    .unwrap_or(false);
    if !ok {
        let lock = app.web.throttle().failure(ip, now);
        tracing::warn!(client = %ip, "failed login");
        return match lock {
            Some(left) => login_error(&session, StatusCode::TOO_MANY_REQUESTS, lockout_message(left)).await,
            None => login_error(&session, StatusCode::UNAUTHORIZED, "Wrong user or password.".into()).await,
        };
    }
    app.web.throttle().success(ip);
    start_session(&session, f.username.trim()).await;
    tracing::info!(client = %ip, user = %f.username.trim(), "logged in");
    Redirect::to("/").into_response()
}

fn lockout_message(left: std::time::Duration) -> String {
    let mins = left.as_secs().div_ceil(60).max(1);
    format!("Too many failed logins from your address. Try again in {mins} minute(s).")
}

async fn login_error(session: &Session, status: StatusCode, msg: String) -> Response {
    let page = LoginPage {
        layout: layout(session, "Log in", "", vec![]).await,
        error: Some(msg),
    };
    (status, page).into_response()
}

pub async fn logout(session: Session) -> Redirect {
    let _ = session.flush().await;
    Redirect::to("/login")
}

async fn tokens(app: &AppState) -> Vec<TokenRow> {
    let store = app.shared.store.clone();
    let list: Vec<TokenInfo> = tokio::task::spawn_blocking(move || store.list_tokens())
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    list.into_iter()
        .map(|t| TokenRow {
            id: t.id,
            name: t.name,
            created: t.created.to_rfc3339().replace('T', " ").replace('Z', " UTC"),
        })
        .collect()
}

async fn security(
    app: &AppState,
    session: &Session,
    password_error: Option<String>,
    new_token: Option<String>,
    token_error: Option<String>,
) -> SecurityPage {
    SecurityPage {
        layout: layout(
            session,
            "Security",
            "security",
            vec![("Settings", "/settings"), ("Security", "/settings/security")],
        )
        .await,
        password_error,
        tokens: tokens(app).await,
        new_token,
        token_error,
    }
}

pub async fn security_page(State(app): State<AppState>, session: Session) -> SecurityPage {
    security(&app, &session, None, None, None).await
}

#[derive(Deserialize)]
pub struct PasswordForm {
    #[serde(default)]
    pub current: String,
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub confirm: String,
}

pub async fn change_password(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Form(f): Form<PasswordForm>,
) -> Response {
    let Principal::Session { user } = who else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let store = app.shared.store.clone();
    let u = user.clone();
    let event =
        crate::sink::event::Event::operator(Timestamp::now(), &format!("user:{user}"), "password.change", &user);
    let events: Vec<_> = app.shared.sink.stage(&event).into_iter().collect();
    let result = tokio::task::spawn_blocking(move || -> Result<(), String> {
        let current = store.get_user(&u).map_err(|e| e.to_string())?;
        if !current.is_some_and(|c| accounts::verify_password(&f.current, &c.password_hash)) {
            return Err("The current password is wrong.".into());
        }
        if f.password != f.confirm {
            return Err("The two new passwords differ.".into());
        }
        accounts::set_admin_password_with_events(&store, &f.password, Timestamp::now(), &events)
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match result {
        Ok(()) => {
            tracing::info!(user = %user, "password changed");
            session::set_flash(&session, "Password changed.").await;
            Redirect::to("/settings/security").into_response()
        }
        Err(e) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            security(&app, &session, Some(e), None, None).await,
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
pub struct TokenForm {
    #[serde(default)]
    pub name: String,
}

pub async fn create_token(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Form(f): Form<TokenForm>,
) -> Response {
    let name = f.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 64 {
        let page = security(
            &app,
            &session,
            None,
            None,
            Some("Give the token a name of 1-64 characters.".into()),
        )
        .await;
        return (StatusCode::UNPROCESSABLE_ENTITY, page).into_response();
    }
    let store = app.shared.store.clone();
    let n = name.clone();
    let (sink, actor) = (app.shared.sink.clone(), who.actor());
    let event = move |info: &crate::store::TokenInfo| {
        let target = format!("{}({})", info.name, info.id);
        let e = crate::sink::event::Event::operator(Timestamp::now(), &actor, "token.create", &target);
        sink.stage(&e).into_iter().collect()
    };
    match tokio::task::spawn_blocking(move || store.create_token_with_events(&n, Timestamp::now(), event)).await {
        Ok(Ok((plain, info))) => {
            tracing::info!(token = %info.id, name = %name, actor = %who.actor(), "API token created");
            security(&app, &session, None, Some(plain), None).await.into_response()
        }
        Ok(Err(e)) => crate::web::error::ApiError::internal(e).into_response(),
        Err(e) => crate::web::error::ApiError::internal(e).into_response(),
    }
}

pub async fn revoke_token(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let store = app.shared.store.clone();
    let i = id.clone();
    let event = crate::sink::event::Event::operator(Timestamp::now(), &who.actor(), "token.revoke", &id);
    let events: Vec<_> = app.shared.sink.stage(&event).into_iter().collect();
    let revoked = tokio::task::spawn_blocking(move || store.revoke_token_with_events(&i, &events))
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or(false);
    if revoked {
        tracing::info!(token = %id, actor = %who.actor(), "API token revoked");
        session::set_flash(&session, format!("Token {id} revoked.")).await;
    } else {
        session::set_flash(&session, format!("No token {id}.")).await;
    }
    Redirect::to("/settings/security")
}

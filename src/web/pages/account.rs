//! First-run setup, login, logout, and Settings → Security (password, API
//! tokens). Password hashing runs on blocking threads.
//!
//! Every password check (login, the current password of a change, the setup
//! code) goes through [`PasswordCheck`]: it is recorded with the address's
//! throttle before it runs, an address has one check in flight at most, and
//! the server runs [`crate::web::PASSWORD_CHECKS`] at once (argon2 takes
//! about 19 MiB each); anything beyond is refused with 429 and
//! `Retry-After`, without hashing anything.

use super::{Layout, layout, public_layout};
use crate::accounts::{self, ADMIN};
use crate::store::{TokenInfo, TokenScope};
use crate::web::auth::Principal;
use crate::web::throttle::Refusal;
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
    /// Where the setup code is.
    pub code_file: String,
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
    /// Each protection with its state and the line that turns it on.
    pub protections: Vec<crate::web::posture::Protection>,
    /// The latest entries of the audit trail, newest first.
    pub audit: Vec<crate::web::api::audit::AuditView>,
}

/// Audit entries the Security page shows (the API pages through them all).
const AUDIT_ROWS: usize = 50;

pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub created: String,
    pub scope: &'static str,
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
    pub setup_code: String,
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub confirm: String,
}

/// Why a password check did not run.
enum NotChecked {
    /// The address is locked out, or its previous attempt is running.
    Throttled(Refusal),
    /// The server is checking as many passwords as it allows.
    Busy,
}

impl NotChecked {
    fn retry_after(&self) -> u64 {
        match self {
            NotChecked::Throttled(r) => r.retry_after_secs(),
            NotChecked::Busy => 1,
        }
    }

    fn message(&self) -> String {
        match self {
            NotChecked::Throttled(Refusal::Locked(left)) => lockout_message(*left),
            NotChecked::Throttled(Refusal::Account(left)) => {
                let secs = left.as_secs().max(1);
                format!("Too many failed logins for this account lately. Try again in {secs} second(s).")
            }
            NotChecked::Throttled(Refusal::InFlight) => {
                "Your previous attempt is still being checked. Try again in a moment.".into()
            }
            NotChecked::Busy => "The server is busy checking other passwords. Try again in a moment.".into(),
        }
    }
}

/// One password check, admitted by the throttle and the server-wide bound
/// (see the module comment). Dropped without [`PasswordCheck::finish`] (the
/// request went away), it stays counted as a failure.
struct PasswordCheck {
    app: AppState,
    ip: IpAddr,
    /// The account the check is for (`None` for the setup code).
    account: Option<String>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    finished: bool,
}

impl PasswordCheck {
    fn begin(app: &AppState, ip: IpAddr, account: Option<&str>) -> Result<PasswordCheck, NotChecked> {
        let logins = &app.metrics.logins;
        let Ok(permit) = app.web.password_checks.clone().try_acquire_owned() else {
            logins.with_label_values(&["busy"]).inc();
            return Err(NotChecked::Busy);
        };
        if let Err(r) = app.web.throttle().begin(ip, account, app.engine.now()) {
            logins.with_label_values(&["locked"]).inc();
            return Err(NotChecked::Throttled(r));
        }
        Ok(PasswordCheck {
            app: app.clone(),
            ip,
            account: account.map(str::to_owned),
            permit: Some(permit),
            finished: false,
        })
    }

    /// Run `f` (the argon2 work) on a blocking thread that holds this
    /// check's permit until it ends, even if the request is dropped first.
    async fn run<T: Send + 'static>(&mut self, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let permit = self.permit.take();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f()
        })
        .await
        .ok()
    }

    /// Record the result; returns the lockout a failure started.
    fn finish(mut self, ok: bool) -> Option<std::time::Duration> {
        self.finished = true;
        let result = if ok { "success" } else { "failure" };
        self.app.metrics.logins.with_label_values(&[result]).inc();
        self.app
            .web
            .throttle()
            .finish(self.ip, self.account.as_deref(), ok, self.app.engine.now())
    }
}

impl Drop for PasswordCheck {
    fn drop(&mut self) {
        if !self.finished {
            self.app.web.throttle().abandon(self.ip);
        }
    }
}

/// 429 with `Retry-After`, as a page.
fn not_checked(page: impl FnOnce(String) -> Response, why: NotChecked) -> Response {
    let mut resp = page(why.message());
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    if let Ok(v) = axum::http::HeaderValue::from_str(&why.retry_after().to_string()) {
        resp.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
    }
    resp
}

fn setup_page_with(app: &AppState, error: Option<String>) -> SetupPage {
    let code_file = app
        .web
        .setup_code()
        .as_ref()
        .map(|c| c.file.display().to_string())
        .unwrap_or_else(|| "setup-code in the data directory".into());
    SetupPage {
        layout: public_layout("Set up"),
        error,
        code_file,
    }
}

pub async fn setup_page(State(app): State<AppState>) -> Response {
    if app.admin_exists().await {
        return Redirect::to("/login").into_response();
    }
    setup_page_with(&app, None).into_response()
}

/// First-run setup: the one-time code from `<data_dir>/setup-code` (a wrong
/// one is a 403 and counts as a failed login), then the admin password.
pub async fn setup(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    session: Session,
    Form(f): Form<SetupForm>,
) -> Response {
    let _guard = app.web.setup_lock.lock().await;
    if app.admin_exists().await {
        return Redirect::to("/login").into_response();
    }
    let ip = app.web.client_ip(peer.ip(), &headers);
    let mut check = match PasswordCheck::begin(&app, ip, None) {
        Ok(c) => c,
        Err(why) => return not_checked(|m| setup_page_with(&app, Some(m)).into_response(), why),
    };
    let expected = app.web.setup_code().as_ref().map(|c| c.code.clone());
    let code_ok = expected.is_some_and(|c| session::same_token(f.setup_code.trim(), &c));
    if !code_ok {
        check.finish(false);
        crate::web::failed_auth::record(&app, crate::web::failed_auth::Kind::Login, ip, "setup", "setup code").await;
        tracing::warn!(client = %ip, "wrong setup code");
        let page = setup_page_with(
            &app,
            Some("Wrong setup code. It is in the file named above, on the server.".into()),
        );
        return (StatusCode::FORBIDDEN, page).into_response();
    }
    let error = if f.password != f.confirm {
        Some("The two passwords differ.".to_string())
    } else {
        accounts::check_password_rules(&f.password).err().map(|e| e.to_string())
    };
    if let Some(error) = error {
        // The code was right: this is not a failed login.
        check.finish(true);
        return (StatusCode::UNPROCESSABLE_ENTITY, setup_page_with(&app, Some(error))).into_response();
    }
    let store = app.store.clone();
    let pw = f.password;
    // The first admin, to the audit trail with the password (the setup
    // code is its credential: the actor is `setup`).
    let now = app.engine.now();
    let event = crate::sink::event::Event::operator(now, "setup", "account.create", ADMIN);
    let events: Vec<_> = app.sink.stage(&event).into_iter().collect();
    let res = check
        .run(move || accounts::set_admin_password_with_events(&store, &pw, now, &events))
        .await;
    check.finish(true);
    match res {
        Some(Ok(())) => {}
        Some(Err(e)) => return crate::web::error::ApiError::internal(e).into_response(),
        None => return crate::web::error::ApiError::internal("password hashing stopped").into_response(),
    }
    app.web.admin_known.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(code) = app.web.setup_code().take() {
        match std::fs::remove_file(&code.file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %code.file.display(), error = %e, "could not delete the setup code file"),
        }
    }
    tracing::info!(client = %ip, "admin account created through /setup");
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
    // Nothing is written to the session: an anonymous visitor costs no row.
    LoginPage {
        layout: public_layout("Log in"),
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
    let ip = app.web.client_ip(peer.ip(), &headers);
    let mut check = match PasswordCheck::begin(&app, ip, Some(f.username.trim())) {
        Ok(c) => c,
        Err(why) => return not_checked(|m| login_error(StatusCode::TOO_MANY_REQUESTS, m), why),
    };
    let store = app.store.clone();
    let user = f.username.trim().to_string();
    let pw = f.password;
    // An unknown name costs the same argon2 check as a known one.
    let ok = check
        .run(move || accounts::check_login(&store, &user, &pw))
        .await
        .unwrap_or(false);
    let lock = check.finish(ok);
    record_login(&app, ip, f.username.trim(), ok).await;
    if !ok {
        tracing::warn!(client = %ip, "failed login");
        return match lock {
            Some(left) => {
                let why = NotChecked::Throttled(Refusal::Locked(left));
                not_checked(|m| login_error(StatusCode::TOO_MANY_REQUESTS, m), why)
            }
            None => login_error(StatusCode::UNAUTHORIZED, "Wrong user or password.".into()),
        };
    }
    start_session(&session, f.username.trim()).await;
    tracing::info!(client = %ip, user = %f.username.trim(), "logged in");
    Redirect::to("/").into_response()
}

/// A checked login, failed or not, to the audit trail (and the sink): the
/// name as typed (at most 64 characters), never the password. Failures are
/// counted per address and window (`crate::web::failed_auth`). Best effort:
/// a store error is logged, the login goes on.
async fn record_login(app: &AppState, ip: IpAddr, user: &str, ok: bool) {
    let user: String = user.chars().take(64).collect();
    if !ok {
        let kind = crate::web::failed_auth::Kind::Login;
        crate::web::failed_auth::record(app, kind, ip, &format!("user:{user}"), &user).await;
        return;
    }
    let event = crate::sink::event::Event::operator(app.engine.now(), &format!("user:{user}"), "login", &user);
    let Some(row) = app.sink.stage(&event) else {
        return;
    };
    if let Err(e) = app.with_store(move |s| s.append_outbox(&[row])).await {
        tracing::warn!(error = %e.message, "a login was not recorded in the audit trail");
    }
}

fn lockout_message(left: std::time::Duration) -> String {
    let mins = left.as_secs().div_ceil(60).max(1);
    format!("Too many failed logins from your address. Try again in {mins} minute(s).")
}

fn login_error(status: StatusCode, msg: String) -> Response {
    let page = LoginPage {
        layout: public_layout("Log in"),
        error: Some(msg),
    };
    (status, page).into_response()
}

pub async fn logout(session: Session) -> Redirect {
    let _ = session.flush().await;
    Redirect::to("/login")
}

async fn tokens(app: &AppState) -> Vec<TokenRow> {
    let list: Vec<TokenInfo> = app.with_store(|s| s.list_tokens()).await.unwrap_or_default();
    list.into_iter()
        .map(|t| TokenRow {
            id: t.id,
            name: t.name,
            created: t.created.to_rfc3339().replace('T', " ").replace('Z', " UTC"),
            scope: t.scope.as_str(),
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
            app,
            session,
            "Security",
            "security",
            vec![("Settings", "/settings"), ("Security", "/settings/security")],
        )
        .await,
        password_error,
        protections: {
            let rows = tokens(app).await;
            let admins = rows.iter().filter(|t| t.scope == "admin").count();
            let admin = app.with_store(|s| s.user_count().map(|n| n > 0)).await.unwrap_or(false);
            crate::web::posture::protections(&app.web.posture, admin, (admins, rows.len() - admins))
        },
        tokens: tokens(app).await,
        new_token,
        token_error,
        audit: app
            .with_store(|s| s.audit_page(None, AUDIT_ROWS))
            .await
            .unwrap_or_default()
            .iter()
            .map(crate::web::api::audit::AuditView::of)
            .collect(),
    }
}

/// The Security page shows the audit trail and the token list: admin
/// scope only (a session, or an admin token); a read token gets 403.
pub async fn security_page(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
) -> Response {
    if !who.is_admin() {
        return (
            StatusCode::FORBIDDEN,
            "A read token cannot read the audit trail or the token list; use an admin token.",
        )
            .into_response();
    }
    security(&app, &session, None, None, None).await.into_response()
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

/// Why a password change was refused.
enum ChangeRefused {
    WrongCurrent,
    Other(String),
}

/// Change the password: the current one is checked like a login (throttled
/// per address, bounded server-wide); then every other session of the user
/// ends and this one gets a new id.
pub async fn change_password(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    session: Session,
    Form(f): Form<PasswordForm>,
) -> Response {
    let Principal::Session { user } = who else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let ip = app.web.client_ip(peer.ip(), &headers);
    let mut check = match PasswordCheck::begin(&app, ip, Some(&user)) {
        Ok(c) => c,
        Err(why) => {
            let page = security(&app, &session, Some(why.message()), None, None).await;
            return not_checked(move |_| page.into_response(), why);
        }
    };
    let store = app.store.clone();
    let u = user.clone();
    let now = app.engine.now();
    let event = crate::sink::event::Event::operator(now, &format!("user:{user}"), "password.change", &user);
    let events: Vec<_> = app.sink.stage(&event).into_iter().collect();
    let keep = session.id().map(|id| crate::store::session_key(&id.to_string()));
    let result = check
        .run(move || -> Result<usize, ChangeRefused> {
            let current = store.get_user(&u).map_err(|e| ChangeRefused::Other(e.to_string()))?;
            if !current.is_some_and(|c| accounts::verify_password(&f.current, &c.password_hash)) {
                return Err(ChangeRefused::WrongCurrent);
            }
            if f.password != f.confirm {
                return Err(ChangeRefused::Other("The two new passwords differ.".into()));
            }
            accounts::set_admin_password_with_events(&store, &f.password, now, &events)
                .map_err(|e| ChangeRefused::Other(e.to_string()))?;
            store
                .delete_user_sessions(&u, keep.as_deref())
                .map_err(|e| ChangeRefused::Other(e.to_string()))
        })
        .await
        .unwrap_or_else(|| Err(ChangeRefused::Other("password hashing stopped".into())));
    check.finish(!matches!(result, Err(ChangeRefused::WrongCurrent)));
    let result = result.map_err(|e| match e {
        ChangeRefused::WrongCurrent => "The current password is wrong.".to_string(),
        ChangeRefused::Other(m) => m,
    });
    match result {
        Ok(ended) => {
            // A new id for this session: one seen before the change is void.
            let _ = session.cycle_id().await;
            tracing::info!(user = %user, other_sessions_ended = ended, "password changed");
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
    /// `read` or `admin` (the default).
    #[serde(default)]
    pub scope: String,
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
    let scope = match f.scope.trim() {
        "" => TokenScope::Admin,
        other => match TokenScope::parse(other) {
            Some(s) => s,
            None => {
                let page = security(&app, &session, None, None, Some("Choose read or admin.".into())).await;
                return (StatusCode::UNPROCESSABLE_ENTITY, page).into_response();
            }
        },
    };
    match crate::service::tokens::create(&app.ctx(), &name, scope, &who.actor()).await {
        Ok((plain, _)) => security(&app, &session, None, Some(plain), None).await.into_response(),
        Err(e) => crate::web::error::ApiError::from(e).into_response(),
    }
}

pub async fn revoke_token(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    let revoked = crate::service::tokens::revoke(&app.ctx(), &id, &who.actor())
        .await
        .unwrap_or(false);
    if revoked {
        session::set_flash(&session, format!("Token {id} revoked.")).await;
    } else {
        session::set_flash(&session, format!("No token {id}.")).await;
    }
    Redirect::to("/settings/security")
}

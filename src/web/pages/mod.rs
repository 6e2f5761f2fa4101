//! Server-rendered pages (askama), usable without JavaScript. Every page
//! but `/login` and `/setup` needs a logged-in session; every form carries
//! the session's CSRF token.

pub mod account;
pub mod cluster;
pub mod dashboard;
pub mod instance;
pub mod instances;
pub mod maintenance;
pub mod settings;
pub mod sink;
pub mod status;

use super::AppState;
use super::session;
use axum::Router;
use axum::routing::get;
use tower_sessions::Session;

/// What every page's frame shows.
pub struct Layout {
    pub title: String,
    /// Which navigation entry is current.
    pub section: &'static str,
    pub user: Option<String>,
    pub csrf: String,
    pub flash: Option<String>,
    pub breadcrumb: Vec<(&'static str, &'static str)>,
    pub version: &'static str,
    /// In a cluster: "member 2 of 3" (this member's place among the
    /// members that are not down); `None` alone.
    pub cluster: Option<String>,
}

pub async fn layout(
    app: &AppState,
    session: &Session,
    title: impl Into<String>,
    section: &'static str,
    breadcrumb: Vec<(&'static str, &'static str)>,
) -> Layout {
    Layout {
        title: title.into(),
        section,
        user: session::user(session).await,
        csrf: session::csrf_token(session).await,
        flash: session::take_flash(session).await,
        breadcrumb,
        version: env!("CARGO_PKG_VERSION"),
        cluster: app.web.cluster.as_ref().map(|c| {
            let (place, of) = c.status().place();
            format!("member {place} of {of}")
        }),
    }
}

/// The frame of a page shown before login (`/login`, `/setup`): it reads
/// and writes nothing in the session, so an anonymous visitor leaves no
/// session row behind.
pub fn public_layout(title: impl Into<String>) -> Layout {
    Layout {
        title: title.into(),
        section: "",
        user: None,
        csrf: String::new(),
        flash: None,
        breadcrumb: vec![],
        version: env!("CARGO_PKG_VERSION"),
        cluster: None,
    }
}

/// Declares the protected pages once: the router is built from this list
/// and the list is public, so a test can walk every route and check that it
/// refuses an anonymous request.
macro_rules! page_routes {
    ($( $method:ident $path:literal => $handler:expr ),* $(,)?) => {
        /// (method, path) of every page that needs a logged-in session.
        pub const PROTECTED: &[(&str, &str)] = &[$( (stringify!($method), $path) ),*];

        /// Pages that need a logged-in session.
        pub fn protected() -> Router<AppState> {
            Router::new()$( .route($path, axum::routing::$method($handler)) )*
        }
    };
}

page_routes! {
    get "/" => dashboard::page,
    post "/dead-letter/{instance}/{group}/retry" => dashboard::retry,
    post "/dead-letter/{instance}/{group}/discard" => dashboard::discard,
    get "/instances" => instances::list,
    post "/instances" => instances::create,
    get "/instances/new" => instances::new_form,
    get "/instances/{name}" => instance::page,
    get "/instances/{name}/edit" => instances::edit_form,
    post "/instances/{name}" => instances::update,
    post "/instances/{name}/delete" => instances::delete,
    post "/instances/{name}/test" => instances::test,
    get "/maintenance" => maintenance::page,
    post "/maintenance" => maintenance::create,
    post "/maintenance/{id}/end" => maintenance::end,
    get "/status" => status::page,
    get "/cluster" => cluster::page,
    get "/settings" => settings::index,
    get "/settings/system/monitoring" => settings::monitoring_page,
    post "/settings/system/monitoring" => settings::monitoring_save,
    post "/settings/system/budgets/{name}" => settings::budget_save,
    get "/settings/system/sink" => sink::page,
    post "/settings/system/sink" => sink::save,
    post "/settings/system/sink/test" => sink::test,
    get "/settings/security" => account::security_page,
    post "/settings/security/password" => account::change_password,
    post "/settings/security/tokens" => account::create_token,
    post "/settings/security/tokens/{id}/revoke" => account::revoke_token,
    post "/logout" => account::logout,
}

/// Pages anyone may reach.
pub fn public() -> Router<AppState> {
    Router::new()
        .route("/login", get(account::login_page).post(account::login))
        .route("/setup", get(account::setup_page).post(account::setup))
}

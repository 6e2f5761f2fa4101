//! Maintenance (`/maintenance`): the windows with whether each is open,
//! a form that makes one, and a button that ends one. The form is read
//! into the same request the API takes, so a refusal names the same field.

use super::{Layout, layout};
use crate::service::maintenance::MaintenanceInput;
use crate::web::api::maintenance::MaintenanceView;
use crate::web::auth::Principal;
use crate::web::{AppState, session};
use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use tower_sessions::Session;

/// What the form held, to show it again with a refusal.
#[derive(Debug, Clone, Default)]
pub struct FormValues {
    pub instances: String,
    pub pool: String,
    pub type_name: String,
    /// `once` or `weekly`.
    pub kind: String,
    pub start: String,
    pub end: String,
    pub duration: String,
    pub days: Vec<String>,
    pub at: String,
    pub timezone: String,
    pub reason: String,
}

impl FormValues {
    fn parse(body: &[u8]) -> FormValues {
        let mut f = FormValues::default();
        for (k, v) in form_urlencoded::parse(body) {
            let v = v.into_owned();
            match &*k {
                "instances" => f.instances = v,
                "pool" => f.pool = v,
                "type" => f.type_name = v,
                "kind" => f.kind = v,
                "start" => f.start = v,
                "end" => f.end = v,
                "duration" => f.duration = v,
                "days" => f.days.push(v),
                "at" => f.at = v,
                "timezone" => f.timezone = v,
                "reason" => f.reason = v,
                _ => {}
            }
        }
        f
    }

    /// The API's request: blank fields are left out, so "none of
    /// instances, pool or type" is refused as the API refuses it.
    fn input(&self) -> MaintenanceInput {
        let some = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let weekly = self.kind == "weekly";
        MaintenanceInput {
            instances: some(&self.instances).map(|s| {
                s.split(',')
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect()
            }),
            pool: some(&self.pool),
            type_name: some(&self.type_name),
            start: if weekly { None } else { some(&self.start) },
            end: if weekly { None } else { some(&self.end) },
            duration: some(&self.duration),
            days: weekly.then(|| self.days.clone()),
            at: if weekly { some(&self.at) } else { None },
            timezone: if weekly { some(&self.timezone) } else { None },
            reason: some(&self.reason),
        }
    }

    pub fn has_day(&self, day: &str) -> bool {
        self.days.iter().any(|d| d == day)
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "maintenance.html")]
pub struct MaintenancePage {
    pub layout: Layout,
    pub windows: Vec<MaintenanceView>,
    pub pools: Vec<String>,
    pub types: Vec<String>,
    pub days: [&'static str; 7],
    pub form: FormValues,
    /// A refusal: the field and why.
    pub error: Option<(String, String)>,
}

impl MaintenanceView {
    /// What the window covers, for the page.
    pub fn target_text(&self) -> String {
        if let Some(names) = &self.instances {
            format!("instances {}", names.join(", "))
        } else if let Some(p) = &self.pool {
            format!("pool {p}")
        } else {
            format!("type {}", self.type_name.as_deref().unwrap_or_default())
        }
    }

    /// When the window is open, for the page.
    pub fn schedule_text(&self) -> String {
        match (&self.days, &self.at, &self.duration, &self.timezone) {
            (Some(days), Some(at), Some(d), Some(tz)) => format!("every {} at {at} ({tz}) for {d}", days.join(", ")),
            _ => format!(
                "{} to {}",
                self.start.as_deref().unwrap_or_default(),
                self.end.as_deref().unwrap_or_default()
            ),
        }
    }
}

async fn render(
    app: &AppState,
    session: &Session,
    form: FormValues,
    error: Option<(String, String)>,
) -> MaintenancePage {
    let now = app.engine.now();
    let cat = app.engine.catalog();
    MaintenancePage {
        layout: layout(
            app,
            session,
            "Maintenance",
            "maintenance",
            vec![("Maintenance", "/maintenance")],
        )
        .await,
        windows: app
            .engine
            .maintenance_windows()
            .iter()
            .map(|w| MaintenanceView::of(w, &cat, now))
            .collect(),
        pools: cat.budgets.iter().map(|b| b.name.clone()).collect(),
        types: cat.types.keys().cloned().collect(),
        days: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
        form,
        error,
    }
}

pub async fn page(State(app): State<AppState>, session: Session) -> Response {
    let form = FormValues {
        kind: "once".into(),
        duration: "2h".into(),
        timezone: "UTC".into(),
        ..FormValues::default()
    };
    render(&app, &session, form, None).await.into_response()
}

pub async fn create(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    body: Bytes,
) -> Response {
    let form = FormValues::parse(&body);
    match crate::service::maintenance::create(&app.ctx(), &form.input(), &who.actor()).await {
        Ok(w) => {
            session::set_flash(&session, format!("Maintenance window {} made.", w.id)).await;
            Redirect::to("/maintenance").into_response()
        }
        Err(crate::service::ServiceError::Invalid(errs)) if !errs.is_empty() => {
            let e = &errs[0];
            let error = Some((e.field.clone(), e.to_string()));
            let page = render(&app, &session, form, error).await;
            (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
        }
        Err(e) => crate::web::error::ApiError::from(e).into_response(),
    }
}

pub async fn end(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Path(id): Path<String>,
) -> Redirect {
    match crate::service::maintenance::end(&app.ctx(), &id, &who.actor()).await {
        Ok(_) => session::set_flash(&session, format!("Maintenance window {id} ended.")).await,
        Err(e) => session::set_flash(&session, e.to_string()).await,
    }
    Redirect::to("/maintenance")
}

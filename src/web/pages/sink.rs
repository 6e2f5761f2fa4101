//! Settings → System → Event sink (`/settings/system/sink`): where events
//! go (URL, headers with their values never shown, limits), a test event,
//! and the sink's live state. Saving validates everything first and
//! applies at once — the same path as `PUT /api/settings/sink`.

use super::{Layout, layout};
use crate::config::SinkConfig;
use crate::model::{HIDDEN, duration_str};
use crate::service;
use crate::sink::SinkStatus;
use crate::web::auth::Principal;
use crate::web::error::ApiError;
use crate::web::{AppState, session};
use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use tower_sessions::Session;

pub struct SinkField {
    pub name: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    pub value: String,
    pub locked: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "settings_sink.html")]
pub struct SinkPage {
    pub layout: Layout,
    pub enabled: bool,
    pub fields: Vec<SinkField>,
    pub headers: String,
    pub gzip: bool,
    pub gzip_locked: Option<String>,
    pub status: SinkStatus,
    pub error: Option<String>,
}

const FIELDS: &[(&str, &str, &str)] = &[
    (
        "url",
        "URL",
        "Where batches are POSTed as NDJSON, e.g. https://collector.example/ingest.",
    ),
    ("batch_size", "Batch size", "Events per request at most."),
    (
        "buffering",
        "Buffering",
        "How long events wait to fill a batch, e.g. 2s.",
    ),
    (
        "retry_limit",
        "Retry limit",
        "A failing batch is dropped once retrying would pass this, e.g. 10m; 0s drops at once.",
    ),
    (
        "queue_limit",
        "Queue limit",
        "Events held at most; past it the oldest are dropped and counted.",
    ),
];

fn crumbs() -> Vec<(&'static str, &'static str)> {
    vec![("Settings", "/settings"), ("Event sink", "/settings/system/sink")]
}

fn page_for(
    app: &AppState,
    form: Option<&HashMap<String, String>>,
) -> (bool, Vec<SinkField>, String, bool, Option<String>) {
    let config = app.engine.sink_config();
    let locked = app.engine.locked_sink();
    let current = config.clone().unwrap_or_else(|| SinkConfig::new(""));
    let shown = |name: &str| -> String {
        if let Some(v) = form.and_then(|f| f.get(name)) {
            return v.clone();
        }
        match name {
            "url" => crate::service::redact::mask_url(&current.url),
            "batch_size" => current.batch_size.to_string(),
            "buffering" => duration_str::format(current.buffering),
            "retry_limit" => duration_str::format(current.retry_limit),
            _ => current.queue_limit.to_string(),
        }
    };
    let fields = FIELDS
        .iter()
        .map(|(name, label, help)| SinkField {
            name,
            label,
            help,
            value: shown(name),
            locked: locked.get(&format!("sink.{name}")).cloned(),
        })
        .collect();
    let headers = match form.and_then(|f| f.get("headers")) {
        Some(h) => h.clone(),
        None => current
            .headers
            .keys()
            .map(|k| format!("{k}: {HIDDEN}"))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let gzip = form.map(|f| f.contains_key("gzip")).unwrap_or(current.gzip);
    (
        config.is_some(),
        fields,
        headers,
        gzip,
        locked.get("sink.gzip").cloned(),
    )
}

async fn render(
    app: &AppState,
    session: &Session,
    form: Option<&HashMap<String, String>>,
    error: Option<String>,
) -> SinkPage {
    let (enabled, fields, headers, gzip, gzip_locked) = page_for(app, form);
    SinkPage {
        layout: layout(app, session, "Event sink", "monitoring", crumbs()).await,
        enabled,
        fields,
        headers,
        gzip,
        gzip_locked,
        status: app.sink.status(),
        error,
    }
}

pub async fn page(State(app): State<AppState>, session: Session) -> SinkPage {
    render(&app, &session, None, None).await
}

/// The document a submitted form asks for, or what could not be read.
pub fn patch_from_form(form: &HashMap<String, String>, locked: &BTreeMap<String, String>) -> Result<Value, String> {
    let mut doc = Map::new();
    let get = |k: &str| form.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
    for (name, _, _) in FIELDS {
        if locked.contains_key(&format!("sink.{name}")) {
            continue;
        }
        let raw = get(name);
        let value = match *name {
            "batch_size" | "queue_limit" => Value::from(
                raw.parse::<u64>()
                    .map_err(|_| format!("{name}: {raw:?} is not a whole number"))?,
            ),
            _ => Value::String(raw),
        };
        doc.insert(name.to_string(), value);
    }
    if !locked.contains_key("sink.gzip") {
        doc.insert("gzip".into(), Value::Bool(form.contains_key("gzip")));
    }
    let mut headers = Map::new();
    for line in get("headers").lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((k, v)) = line.split_once(':') else {
            return Err(format!("headers: {line:?} is not \"Name: value\""));
        };
        headers.insert(k.trim().to_string(), Value::String(v.trim().to_string()));
    }
    doc.insert("headers".into(), Value::Object(headers));
    Ok(Value::Object(doc))
}

pub async fn save(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let locked = app.engine.locked_sink();
    let patch = if form.contains_key("turn_off") {
        Ok(Value::Null)
    } else {
        patch_from_form(&form, &locked)
    };
    let outcome = match patch {
        Ok(p) => service::sink::save(&app.ctx(), p, &who.actor()).await.map_err(|e| {
            let e = ApiError::from(e);
            match e.field {
                Some(f) if !f.is_empty() && !e.message.starts_with(f.as_str()) => format!("{f}: {}", e.message),
                _ => e.message,
            }
        }),
        Err(e) => Err(e),
    };
    match outcome {
        Ok(Some(_)) => {
            session::set_flash(&session, "Saved. Events go to the new settings now.").await;
            Redirect::to("/settings/system/sink").into_response()
        }
        Ok(None) => {
            session::set_flash(&session, "The event sink is off.").await;
            Redirect::to("/settings/system/sink").into_response()
        }
        Err(message) => {
            let page = render(&app, &session, Some(&form), Some(message)).await;
            (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
        }
    }
}

pub async fn test(State(app): State<AppState>, Extension(who): Extension<Principal>, session: Session) -> Redirect {
    let msg = match service::sink::send_test(&app.ctx(), &who.actor()).await {
        Ok(Ok(())) => "Test event delivered.".to_string(),
        Ok(Err(e)) => format!("Test event not delivered: {e}"),
        Err(e) => format!("Test event not delivered: {}", ApiError::from(e).message),
    };
    session::set_flash(&session, msg).await;
    Redirect::to("/settings/system/sink")
}

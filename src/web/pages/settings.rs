//! Settings → System → Monitoring: every field of `[adaptive]`,
//! `[scheduler]` and `[failure]`, described once in [`FIELDS`]. A field an
//! environment variable sets is read-only and names the variable. Saving
//! validates everything first (errors inline, nothing half-saved), persists,
//! and applies at once — the same path as `PUT /api/settings/monitoring`.

use super::{Layout, layout};
use crate::service;
use crate::web::auth::Principal;
use crate::web::error::ApiError;
use crate::web::{AppState, session};
use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use tower_sessions::Session;

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Toggle,
    Duration,
    Integer,
    Number,
    Choice(&'static [(&'static str, &'static str)]),
    Pins,
}

pub struct Field {
    pub path: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

const MODES: &[(&str, &str)] = &[("adaptive", "Adaptive"), ("fixed", "Fixed (floors and pins only)")];
const PROFILES: &[(&str, &str)] = &[
    ("", "None (all groups; refuse to start over budget)"),
    ("availability", "Availability (priority 1)"),
    ("standard", "Standard (priorities 1–3)"),
    ("full", "Full (all priorities)"),
];

macro_rules! f {
    ($path:literal, $label:literal, $kind:expr, $help:literal) => {
        Field {
            path: $path,
            label: $label,
            help: $help,
            kind: $kind,
        }
    };
}

/// (legend, fields) in page order.
pub const SECTIONS: &[(&str, &[Field])] = &[
    (
        "Adaptive polling",
        &[
            f!(
                "adaptive.enabled",
                "Adaptive polling",
                Kind::Toggle,
                "Poll changing targets more often and idle ones less."
            ),
            f!(
                "adaptive.base_interval",
                "Base interval",
                Kind::Duration,
                "Cadence of a healthy task, e.g. 10s."
            ),
            f!(
                "adaptive.min_interval",
                "Minimum interval",
                Kind::Duration,
                "Fastest cadence, for targets whose data changes."
            ),
            f!(
                "adaptive.max_interval",
                "Maximum interval",
                Kind::Duration,
                "Slowest cadence, for idle targets."
            ),
        ],
    ),
    (
        "Scheduler",
        &[
            f!(
                "scheduler.mode",
                "Mode",
                Kind::Choice(MODES),
                "Fixed skips stretching, AIMD and the budget gate."
            ),
            f!(
                "scheduler.workers",
                "Workers",
                Kind::Integer,
                "Polls running at the same time (1–4096)."
            ),
            f!(
                "scheduler.target_utilization",
                "Target utilisation",
                Kind::Number,
                "Share of a budget the plan may use (0.1–1.0)."
            ),
            f!(
                "scheduler.max_stretch_factor",
                "Maximum stretch",
                Kind::Number,
                "How far a group may be slowed beyond its floor (1–16)."
            ),
            f!(
                "scheduler.max_interval",
                "Interval cap",
                Kind::Duration,
                "No group is stretched beyond this (5m–24h)."
            ),
            f!(
                "scheduler.resolve_interval",
                "Re-plan every",
                Kind::Duration,
                "How often the plan is solved again (1m–24h)."
            ),
            f!(
                "scheduler.aimd_enabled",
                "AIMD",
                Kind::Toggle,
                "Slow a pool down on HTTP 429 and recover gradually."
            ),
            f!(
                "scheduler.aimd_backoff_multiplier",
                "AIMD back-off multiplier",
                Kind::Number,
                "Budget multiplier on a 429 (0.1–0.9)."
            ),
            f!(
                "scheduler.aimd_recovery_rps_per_minute",
                "AIMD recovery (req/s per minute)",
                Kind::Number,
                "Additive recovery (0.01–5)."
            ),
            f!(
                "scheduler.profile",
                "Profile",
                Kind::Choice(PROFILES),
                "Which priorities a pool keeps when over budget."
            ),
            f!(
                "scheduler.state_flush_interval",
                "State flush interval",
                Kind::Duration,
                "Timing state is committed at least this often."
            ),
            f!(
                "scheduler.group_interval_overrides",
                "Pinned intervals",
                Kind::Pins,
                "One per line: type/group = interval, e.g. pve/storage = 15m."
            ),
        ],
    ),
    (
        "Failures",
        &[
            f!(
                "failure.backoff_initial",
                "First retry after",
                Kind::Duration,
                "Backoff after the first failure."
            ),
            f!(
                "failure.backoff_multiplier",
                "Backoff multiplier",
                Kind::Number,
                "Growth per further failure (1–10)."
            ),
            f!(
                "failure.backoff_jitter",
                "Backoff jitter",
                Kind::Number,
                "Random spread, as a fraction (0–0.5)."
            ),
            f!(
                "failure.backoff_max",
                "Longest backoff",
                Kind::Duration,
                "Backoff never exceeds this."
            ),
            f!(
                "failure.breaker_threshold",
                "Open the breaker after",
                Kind::Integer,
                "Consecutive failures (1–100)."
            ),
            f!(
                "failure.dead_letter_after",
                "Dead-letter after",
                Kind::Integer,
                "Consecutive transient failures (1–100)."
            ),
            f!(
                "failure.dead_letter_recheck",
                "Recheck dead letters every",
                Kind::Duration,
                "One probe per dead-lettered task."
            ),
        ],
    ),
];

pub struct FieldView {
    pub id: String,
    pub name: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    pub kind: &'static str,
    pub value: String,
    pub checked: bool,
    pub options: Vec<(&'static str, &'static str, bool)>,
    pub locked: Option<String>,
    pub error: Option<String>,
}

pub struct SectionView {
    pub legend: &'static str,
    pub fields: Vec<FieldView>,
}

#[derive(Template, WebTemplate)]
#[template(path = "settings_monitoring.html")]
pub struct MonitoringPage {
    pub layout: Layout,
    pub sections: Vec<SectionView>,
    pub errors: Vec<String>,
    pub budgets: Vec<BudgetRow>,
}

/// One budget pool's editable fields.
pub struct BudgetRow {
    pub name: String,
    pub requests_per_second: String,
    pub shared_fraction: String,
    pub burst: u32,
    pub budget: String,
    pub effective: String,
}

fn budget_rows(app: &AppState) -> Vec<BudgetRow> {
    let cat = app.engine.catalog();
    let effective = app.engine.effective_budgets();
    cat.budgets
        .iter()
        .map(|p| BudgetRow {
            name: p.name.clone(),
            requests_per_second: p.requests_per_second.to_string(),
            shared_fraction: p.shared_fraction.to_string(),
            burst: p.burst,
            budget: format!("{:.2}", p.budget_rps()),
            effective: format!("{:.2}", effective.get(&p.name).copied().unwrap_or(0.0)),
        })
        .collect()
}

/// Settings → System → Monitoring, budget pools: change one pool (the same
/// path as `PUT /api/budgets/{name}`); the outcome is shown as a message.
pub async fn budget_save(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    axum::extract::Path(name): axum::extract::Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut patch = serde_json::Map::new();
    let mut bad = Vec::new();
    for key in ["requests_per_second", "shared_fraction", "burst"] {
        let raw = form.get(key).map(|v| v.trim()).unwrap_or_default();
        let parsed = if key == "burst" {
            raw.parse::<u32>().ok().map(Value::from)
        } else {
            raw.parse::<f64>().ok().filter(|v| v.is_finite()).map(Value::from)
        };
        match parsed {
            Some(v) => {
                patch.insert(key.to_string(), v);
            }
            None => bad.push(format!("{key}: {raw:?} is not a number")),
        }
    }
    let outcome = if bad.is_empty() {
        service::budgets::save(&app.ctx(), &name, Value::Object(patch), &who.actor())
            .await
            .map(|b| {
                format!(
                    "Budget pool {name} saved: {:.2} requests/s, burst {}. The plan follows now.",
                    b.budget_rps(),
                    b.burst
                )
            })
            .map_err(|e| ApiError::from(e).message)
    } else {
        Err(bad.join("; "))
    };
    let msg = match outcome {
        Ok(m) => m,
        Err(e) => format!("Budget pool {name} not saved: {e}"),
    };
    session::set_flash(&session, msg).await;
    Redirect::to("/settings/system/monitoring#budgets").into_response()
}

fn lookup<'a>(doc: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(doc, |v, k| &v[k])
}

fn display(v: &Value, kind: Kind) -> String {
    match (kind, v) {
        (Kind::Pins, Value::Object(m)) => m
            .iter()
            .map(|(k, v)| format!("{k} = {}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n"),
        (_, Value::String(s)) => s.clone(),
        (_, Value::Null) => String::new(),
        (_, other) => other.to_string(),
    }
}

fn views(
    doc: &Value,
    form: Option<&HashMap<String, String>>,
    locked: &BTreeMap<String, String>,
    errors: &HashMap<String, String>,
) -> Vec<SectionView> {
    SECTIONS
        .iter()
        .map(|(legend, fields)| SectionView {
            legend,
            fields: fields
                .iter()
                .map(|f| {
                    let current = display(lookup(doc, f.path), f.kind);
                    let is_locked = locked.get(f.path).cloned();
                    // Re-show what the operator typed when the save failed.
                    let value = match (form, &is_locked) {
                        (Some(form), None) => form.get(f.path).cloned().unwrap_or_default(),
                        _ => current.clone(),
                    };
                    let checked = match (form, &is_locked, f.kind) {
                        (Some(form), None, Kind::Toggle) => form.contains_key(f.path),
                        _ => lookup(doc, f.path).as_bool().unwrap_or(false),
                    };
                    let (kind, options) = match f.kind {
                        Kind::Toggle => ("toggle", vec![]),
                        Kind::Choice(opts) => ("choice", opts.iter().map(|(v, l)| (*v, *l, *v == value)).collect()),
                        Kind::Pins => ("pins", vec![]),
                        Kind::Integer | Kind::Number => ("number", vec![]),
                        Kind::Duration => ("text", vec![]),
                    };
                    FieldView {
                        id: f.path.replace('.', "-"),
                        name: f.path,
                        label: f.label,
                        help: f.help,
                        kind,
                        value,
                        checked,
                        options,
                        locked: is_locked,
                        error: errors.get(f.path).cloned(),
                    }
                })
                .collect(),
        })
        .collect()
}

fn crumbs() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Settings", "/settings"),
        ("System", "/settings/system/monitoring"),
        ("Monitoring", "/settings/system/monitoring"),
    ]
}

pub async fn index() -> Redirect {
    Redirect::to("/settings/system/monitoring")
}

pub async fn monitoring_page(State(app): State<AppState>, session: Session) -> MonitoringPage {
    let doc = serde_json::to_value(app.engine.monitoring()).unwrap_or(Value::Null);
    let locked = app.engine.locked_settings();
    MonitoringPage {
        layout: layout(&app, &session, "Monitoring settings", "monitoring", crumbs()).await,
        sections: views(&doc, None, &locked, &HashMap::new()),
        errors: vec![],
        budgets: budget_rows(&app),
    }
}

/// The partial document a submitted form asks for (locked fields left out),
/// or the fields that could not be read.
pub fn patch_from_form(
    form: &HashMap<String, String>,
    locked: &BTreeMap<String, String>,
) -> Result<Value, HashMap<String, String>> {
    let mut patch = Map::new();
    let mut errors = HashMap::new();
    for f in SECTIONS.iter().flat_map(|(_, fs)| fs.iter()) {
        if locked.contains_key(f.path) {
            continue;
        }
        let raw = form.get(f.path).map(|s| s.trim()).unwrap_or("");
        let value = match f.kind {
            Kind::Toggle => Ok(json!(form.contains_key(f.path))),
            Kind::Duration => Ok(json!(raw)),
            Kind::Integer => raw
                .parse::<u64>()
                .map(|n| json!(n))
                .map_err(|_| format!("{raw:?} is not a whole number")),
            Kind::Number => raw
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .map(|n| json!(n))
                .ok_or_else(|| format!("{raw:?} is not a number")),
            Kind::Choice(_) if raw.is_empty() => Ok(Value::Null),
            Kind::Choice(_) => Ok(json!(raw)),
            Kind::Pins => {
                let mut pins = Map::new();
                let mut bad = None;
                for line in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
                    match line.split_once('=') {
                        Some((k, v)) => {
                            pins.insert(k.trim().to_string(), json!(v.trim()));
                        }
                        None => bad = Some(format!("{line:?}: write type/group = interval")),
                    }
                }
                match bad {
                    Some(e) => Err(e),
                    None => Ok(Value::Object(pins)),
                }
            }
        };
        let (section, key) = f.path.split_once('.').unwrap_or(("", f.path));
        match value {
            Ok(v) => {
                let entry = patch.entry(section.to_string()).or_insert_with(|| json!({}));
                entry[key] = v;
            }
            Err(e) => {
                errors.insert(f.path.to_string(), e);
            }
        }
    }
    if errors.is_empty() {
        Ok(Value::Object(patch))
    } else {
        Err(errors)
    }
}

pub async fn monitoring_save(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let locked = app.engine.locked_settings();
    let result = match patch_from_form(&form, &locked) {
        Ok(patch) => service::settings::save(&app.ctx(), patch, &who.actor())
            .await
            .map_err(|e| {
                ApiError::all(e)
                    .into_iter()
                    .map(|e| (e.field.clone().unwrap_or_default(), e.message))
                    .collect::<HashMap<String, String>>()
            }),
        Err(errors) => Err(errors),
    };
    match result {
        Ok(()) => {
            session::set_flash(&session, "Saved. The new settings apply now.").await;
            Redirect::to("/settings/system/monitoring").into_response()
        }
        Err(errors) => {
            let doc = serde_json::to_value(app.engine.monitoring()).unwrap_or(Value::Null);
            let mut summary: Vec<String> = errors
                .iter()
                .map(|(k, v)| {
                    if k.is_empty() || v.starts_with(k.as_str()) {
                        v.clone()
                    } else {
                        format!("{k}: {v}")
                    }
                })
                .collect();
            summary.sort();
            let page = MonitoringPage {
                layout: layout(&app, &session, "Monitoring settings", "monitoring", crumbs()).await,
                sections: views(&doc, Some(&form), &locked, &errors),
                errors: summary,
                budgets: budget_rows(&app),
            };
            (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn full_form() -> HashMap<String, String> {
        let doc = serde_json::to_value(crate::model::MonitoringSettings::default()).expect("json");
        let mut f = HashMap::new();
        for field in SECTIONS.iter().flat_map(|(_, fs)| fs.iter()) {
            let v = display(lookup(&doc, field.path), field.kind);
            if field.kind == Kind::Toggle {
                if lookup(&doc, field.path).as_bool() == Some(true) {
                    f.insert(field.path.to_string(), "on".to_string());
                }
            } else {
                f.insert(field.path.to_string(), v);
            }
        }
        f
    }

    #[test]
    fn an_unchanged_form_is_the_current_settings() {
        let patch = patch_from_form(&full_form(), &BTreeMap::new()).expect("valid");
        let mut doc = serde_json::to_value(crate::model::MonitoringSettings::default()).expect("json");
        crate::engine::settings::merge(&mut doc, &patch);
        let back: crate::model::MonitoringSettings = serde_json::from_value(doc).expect("decodes");
        assert_eq!(back, crate::model::MonitoringSettings::default());
    }

    #[test]
    fn unchecked_toggles_are_false_and_locked_fields_are_left_out() {
        let mut f = full_form();
        f.remove("adaptive.enabled");
        let locked = BTreeMap::from([(
            "scheduler.workers".to_string(),
            "POLLSTER_SCHEDULER_WORKERS".to_string(),
        )]);
        let patch = patch_from_form(&f, &locked).expect("valid");
        assert_eq!(patch["adaptive"]["enabled"], json!(false));
        assert!(patch["scheduler"].get("workers").is_none());
    }

    #[test]
    fn unreadable_numbers_and_pins_are_reported_per_field() {
        let mut f = full_form();
        f.insert("scheduler.workers".into(), "many".into());
        f.insert("scheduler.group_interval_overrides".into(), "pve/storage 15m".into());
        let errs = patch_from_form(&f, &BTreeMap::new()).expect_err("invalid");
        assert!(errs["scheduler.workers"].contains("many"));
        assert!(errs.contains_key("scheduler.group_interval_overrides"));
        // A form missing its numeric fields names each of them; the well
        // formed pin line is not among the errors.
        let errs = patch_from_form(
            &form(&[("scheduler.group_interval_overrides", "pve/storage = 15m")]),
            &BTreeMap::new(),
        )
        .expect_err("numbers missing");
        assert!(errs.contains_key("scheduler.workers") && errs.contains_key("failure.breaker_threshold"));
        assert!(!errs.contains_key("scheduler.group_interval_overrides"));
    }
}

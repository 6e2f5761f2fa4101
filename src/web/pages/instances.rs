//! `/instances`: list with search, filters, sorting and pagination; add,
//! edit, delete with inline validation; a Test button that polls once now.
//! Instances from the config file are shown read-only, with that reason.

use super::{Layout, layout};
use crate::model::{Auth, FieldError, InstanceConfig, InstanceName, NAME_RULE, Secret, Timestamp, duration_str};
use crate::service;
use crate::web::api::instances::test_results;
use crate::web::auth::Principal;
use crate::web::error::ApiError;
use crate::web::{AppState, session};
use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tower_sessions::Session;

pub const PER_PAGE: usize = 50;

pub struct Row {
    pub name: String,
    pub type_name: String,
    pub url: String,
    pub state: &'static str,
    pub last_success: String,
    pub provisioned: bool,
    pub enabled: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "instances.html")]
pub struct ListPage {
    pub layout: Layout,
    pub rows: Vec<Row>,
    pub total: usize,
    pub matching: usize,
    pub page: usize,
    pub pages: usize,
    pub q: String,
    pub type_filter: String,
    pub state_filter: String,
    pub sort: String,
    pub types: Vec<String>,
    pub prev_link: Option<String>,
    pub next_link: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    pub q: String,
    #[serde(default, rename = "type")]
    pub type_name: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub sort: String,
    pub page: Option<usize>,
}

/// An instance's state summarises its tasks' as the worst of them, in
/// this order (worst last).
pub const STATES: &[&str] = &["ok", "pending", "rate_limited", "failing", "dead_letter", "disabled"];

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

type States = HashMap<Arc<str>, (&'static str, Option<Timestamp>)>;

/// Adds one task to its instance's summary: the worst state of its tasks,
/// and its latest success.
fn fold(out: &mut States, t: crate::engine::snapshot::TaskHealth) {
    let st = if t.disabled {
        "disabled"
    } else if t.dead_lettered {
        "dead_letter"
    } else if t.failures > 0 {
        "failing"
    } else if t.rate_limited {
        // Only 429s since the last success: not "pending" as if nothing
        // had been tried.
        "rate_limited"
    } else if t.last_success.is_none() {
        "pending"
    } else {
        "ok"
    };
    let rank = |st: &str| STATES.iter().position(|x| *x == st).unwrap_or(0);
    let e = out.entry(t.instance).or_insert((st, t.last_success));
    if rank(st) > rank(e.0) {
        e.0 = st;
    }
    e.1 = e.1.max(t.last_success);
}

/// Per instance: a state summarising its tasks, and its last success.
fn states(app: &AppState) -> States {
    let mut out = States::default();
    for t in app.engine.task_health() {
        fold(&mut out, t);
    }
    out
}

/// [`states`] of only `entries`' tasks: a page's worth.
fn states_of(
    app: &AppState,
    cat: &crate::core::catalog::Catalog,
    entries: &[&crate::core::catalog::InstanceEntry],
) -> States {
    let keys: Vec<crate::model::TaskKey> = entries
        .iter()
        .filter_map(|e| cat.types.get(&e.config.type_name).map(|t| (e, t)))
        .flat_map(|(e, t)| {
            t.groups
                .iter()
                .map(|g| crate::model::TaskKey::new(e.config.name.as_str(), &g.name))
        })
        .collect();
    let mut out = States::default();
    for t in app.engine.task_health_of(&keys) {
        fold(&mut out, t);
    }
    out
}

/// Whether `hay` contains `needle` (already lower case), ignoring case;
/// without allocating for ASCII text.
fn contains_ci(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return true;
    }
    if hay.is_ascii() && needle.is_ascii() {
        let n = needle.as_bytes();
        return hay.as_bytes().windows(n.len()).any(|w| w.eq_ignore_ascii_case(n));
    }
    hay.to_lowercase().contains(needle)
}

/// One page of the list, and how many instances match and on how many
/// pages. Only the page's rows are formatted: the filters and the sort
/// read the catalog and the task states as they are, so a fleet of
/// 100,000 costs one pass, not 100,000 rows.
fn select(app: &AppState, q: &ListQuery) -> (Vec<Row>, usize, usize, usize) {
    let cat = app.engine.catalog();
    // Every task's state only when the filter or the sort reads it; else
    // only the page's.
    let by_state = !q.state.is_empty() || matches!(q.sort.as_str(), "state" | "last_success");
    let st = if by_state { states(app) } else { States::default() };
    let needle = q.q.trim().to_lowercase();
    let mut hits: Vec<(&crate::core::catalog::InstanceEntry, &'static str, Option<Timestamp>)> = cat
        .instances
        .values()
        .filter(|e| q.type_name.is_empty() || e.config.type_name == q.type_name)
        .map(|e| {
            let (state, last) = if !e.config.enabled {
                ("disabled", None)
            } else {
                st.get(e.config.name.as_str()).copied().unwrap_or(("pending", None))
            };
            (e, state, last)
        })
        .filter(|(_, state, _)| q.state.is_empty() || *state == q.state)
        .filter(|(e, _, _)| {
            needle.is_empty()
                || contains_ci(e.config.name.as_str(), &needle)
                || contains_ci(&crate::service::redact::mask_url(&e.config.url), &needle)
        })
        .collect();
    match q.sort.as_str() {
        "type" => hits.sort_by(|a, b| {
            (a.0.config.type_name.as_str(), a.0.config.name.as_str())
                .cmp(&(b.0.config.type_name.as_str(), b.0.config.name.as_str()))
        }),
        "state" => hits.sort_by(|a, b| {
            let ra = STATES.iter().position(|x| *x == a.1);
            let rb = STATES.iter().position(|x| *x == b.1);
            rb.cmp(&ra)
                .then_with(|| a.0.config.name.as_str().cmp(b.0.config.name.as_str()))
        }),
        // Never succeeded last, as "never" sorts after a date.
        "last_success" => hits.sort_by(|a, b| {
            (a.2.is_none(), a.2)
                .cmp(&(b.2.is_none(), b.2))
                .then_with(|| a.0.config.name.as_str().cmp(b.0.config.name.as_str()))
        }),
        _ => {} // by name: the catalog is ordered already
    }
    let matching = hits.len();
    let pages = matching.div_ceil(PER_PAGE).max(1);
    let page = q.page.unwrap_or(1).clamp(1, pages);
    let shown: Vec<_> = hits.into_iter().skip((page - 1) * PER_PAGE).take(PER_PAGE).collect();
    let page_states = if by_state {
        States::default()
    } else {
        states_of(app, &cat, &shown.iter().map(|h| h.0).collect::<Vec<_>>())
    };
    let rows = shown
        .into_iter()
        .map(|(e, state, last)| {
            if by_state || !e.config.enabled {
                (e, state, last)
            } else {
                let (state, last) = page_states
                    .get(e.config.name.as_str())
                    .copied()
                    .unwrap_or(("pending", None));
                (e, state, last)
            }
        })
        .map(|(e, state, last)| Row {
            name: e.config.name.to_string(),
            type_name: e.config.type_name.clone(),
            url: crate::service::redact::mask_url(&e.config.url),
            state,
            last_success: last
                .map(|t| t.to_rfc3339().replace('T', " ").replace('Z', " UTC"))
                .unwrap_or_else(|| "never".into()),
            provisioned: e.provisioned,
            enabled: e.config.enabled,
        })
        .collect();
    (rows, matching, page, pages)
}

pub async fn list(State(app): State<AppState>, session: Session, Query(q): Query<ListQuery>) -> ListPage {
    let (rows, matching, page, pages) = {
        let q = q.clone();
        app.render(move |app| select(app, &q)).await
    };
    let cat = app.engine.catalog();
    let link = |p: usize| {
        format!(
            "/instances?q={}&type={}&state={}&sort={}&page={p}",
            enc(&q.q),
            enc(&q.type_name),
            enc(&q.state),
            enc(&q.sort)
        )
    };
    ListPage {
        layout: layout(&app, &session, "Instances", "instances", vec![]).await,
        rows,
        total: cat.instances.len(),
        matching,
        page,
        pages,
        prev_link: (page > 1).then(|| link(page - 1)),
        next_link: (page < pages).then(|| link(page + 1)),
        q: q.q,
        type_filter: q.type_name,
        state_filter: q.state,
        sort: q.sort,
        types: cat.types.keys().cloned().collect(),
    }
}

/// The add/edit form, its values as text.
#[derive(Template, WebTemplate)]
#[template(path = "instance_form.html")]
pub struct FormPage {
    pub layout: Layout,
    pub editing: bool,
    pub readonly: bool,
    pub v: HashMap<String, String>,
    pub errors: HashMap<String, String>,
    pub types: Vec<String>,
    pub budgets: Vec<String>,
    pub auth_kinds: Vec<(&'static str, &'static str)>,
}

impl FormPage {
    pub fn val(&self, k: &str) -> &str {
        self.v.get(k).map(String::as_str).unwrap_or("")
    }
    pub fn err(&self, k: &str) -> Option<&str> {
        self.errors.get(k).map(String::as_str)
    }
    pub fn on(&self, k: &str) -> bool {
        matches!(self.val(k), "on" | "true")
    }
}

const AUTH_KINDS: &[(&str, &str)] = &[
    ("none", "None"),
    ("bearer", "Bearer token"),
    ("header", "Custom header"),
    ("basic", "Basic (user and password)"),
    ("pve_token", "Proxmox API token"),
];

fn values_of(i: &InstanceConfig) -> HashMap<String, String> {
    let mut v = HashMap::from([
        ("name".to_string(), i.name.to_string()),
        ("type".to_string(), i.type_name.clone()),
        ("url".to_string(), crate::service::redact::mask_url(&i.url)),
        ("timeout".to_string(), duration_str::format(i.timeout)),
        ("budget".to_string(), i.budget.clone().unwrap_or_default()),
        ("enabled".to_string(), if i.enabled { "on" } else { "" }.to_string()),
        (
            "tls_verify".to_string(),
            if i.tls_verify { "on" } else { "" }.to_string(),
        ),
        (
            "tls_fingerprint".to_string(),
            i.tls_fingerprint.clone().unwrap_or_default(),
        ),
        ("max_response_bytes".to_string(), i.max_response_bytes.to_string()),
        (
            "labels".to_string(),
            i.labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        ("auth_kind".to_string(), i.auth.kind().to_string()),
    ]);
    // Secrets are never shown; non-secret parts are.
    match &i.auth {
        Auth::Header { name, .. } => {
            v.insert("auth_name".into(), name.clone());
        }
        Auth::Basic { username, .. } => {
            v.insert("auth_username".into(), username.clone());
        }
        Auth::PveToken { user, token_id, .. } => {
            v.insert("auth_user".into(), user.clone());
            v.insert("auth_token_id".into(), token_id.clone());
        }
        _ => {}
    }
    v
}

async fn form_page(
    app: &AppState,
    session: &Session,
    editing: bool,
    readonly: bool,
    v: HashMap<String, String>,
    errors: HashMap<String, String>,
) -> FormPage {
    let cat = app.engine.catalog();
    let title = if editing {
        format!("Instance {}", v.get("name").cloned().unwrap_or_default())
    } else {
        "Add an instance".into()
    };
    FormPage {
        layout: layout(
            app,
            session,
            title,
            "instances",
            vec![("Instances", "/instances"), (if editing { "Edit" } else { "Add" }, "")],
        )
        .await,
        editing,
        readonly,
        v,
        errors,
        types: cat.types.keys().cloned().collect(),
        budgets: cat.budgets.iter().map(|b| b.name.clone()).collect(),
        auth_kinds: AUTH_KINDS.to_vec(),
    }
}

pub async fn new_form(State(app): State<AppState>, session: Session) -> FormPage {
    let mut values = values_of(&InstanceConfig::new("new", "http", ""));
    values.insert("name".into(), String::new());
    form_page(&app, &session, false, false, values, HashMap::new()).await
}

pub async fn edit_form(State(app): State<AppState>, session: Session, Path(name): Path<String>) -> Response {
    let cat = app.engine.catalog();
    let Some(e) = cat.instances.get(&name) else {
        session::set_flash(&session, format!("No instance named {name:?}.")).await;
        return Redirect::to("/instances").into_response();
    };
    form_page(
        &app,
        &session,
        true,
        e.provisioned,
        values_of(&e.config),
        HashMap::new(),
    )
    .await
    .into_response()
}

/// Read the form into an instance. `keep_secrets`: on edit, empty secret
/// fields mean "unchanged".
fn parse(form: &HashMap<String, String>) -> Result<(InstanceConfig, bool), FieldError> {
    let get = |k: &str| form.get(k).map(|s| s.trim().to_string()).unwrap_or_default();
    let timeout = duration_str::parse(&get("timeout")).map_err(|e| FieldError::new("timeout", get("timeout"), e))?;
    let max_response_bytes = get("max_response_bytes").parse::<u64>().map_err(|_| {
        FieldError::new(
            "max_response_bytes",
            get("max_response_bytes"),
            "must be a whole number of bytes",
        )
    })?;
    let mut labels = BTreeMap::new();
    for line in get("labels").lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((k, v)) = line.split_once('=') else {
            return Err(FieldError::new("labels", line, "write one key=value per line"));
        };
        labels.insert(k.trim().to_string(), v.trim().to_string());
    }
    let secret = |k: &str| Secret::from(form.get(k).cloned().unwrap_or_default());
    let kind = get("auth_kind");
    let secrets_blank = match kind.as_str() {
        "bearer" => secret("auth_token").is_empty(),
        "header" => secret("auth_value").is_empty(),
        "basic" => secret("auth_password").is_empty(),
        "pve_token" => secret("auth_secret").is_empty(),
        _ => false,
    };
    let auth = match kind.as_str() {
        "" | "none" => Auth::None {},
        "bearer" => Auth::Bearer {
            token: secret("auth_token"),
        },
        "header" => Auth::Header {
            name: get("auth_name"),
            value: secret("auth_value"),
        },
        "basic" => Auth::Basic {
            username: get("auth_username"),
            password: secret("auth_password"),
        },
        "pve_token" => Auth::PveToken {
            user: get("auth_user"),
            token_id: get("auth_token_id"),
            secret: secret("auth_secret"),
        },
        other => return Err(FieldError::new("auth_kind", other, "unknown authentication kind")),
    };
    let budget = get("budget");
    let fp = get("tls_fingerprint");
    Ok((
        InstanceConfig {
            name: InstanceName::parse(&get("name")).map_err(|e| FieldError::new("name", &e.0, NAME_RULE))?,
            type_name: get("type"),
            url: get("url"),
            timeout,
            budget: (!budget.is_empty()).then_some(budget),
            labels,
            enabled: form.contains_key("enabled"),
            auth,
            tls_verify: form.contains_key("tls_verify"),
            tls_fingerprint: (!fp.is_empty()).then_some(fp),
            max_response_bytes,
            shape: Default::default(),
        },
        secrets_blank,
    ))
}

/// Map an error's field to the form input it belongs to.
fn input_of(field: &str) -> String {
    match field {
        "type" | "name" | "url" | "timeout" | "budget" | "tls_fingerprint" | "max_response_bytes" => field.to_string(),
        f if f.starts_with("labels") => "labels".into(),
        f if f.starts_with("auth.") => format!("auth_{}", &f[5..]),
        f => f.to_string(),
    }
}

async fn invalid(
    app: &AppState,
    session: &Session,
    editing: bool,
    form: HashMap<String, String>,
    e: ApiError,
) -> Response {
    let field = input_of(e.field.as_deref().unwrap_or(""));
    let mut errors = HashMap::from([(field, e.message.clone())]);
    errors.insert("_summary".into(), e.message);
    let status = if e.status == StatusCode::CONFLICT {
        StatusCode::CONFLICT
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    (status, form_page(app, session, editing, false, form, errors).await).into_response()
}

pub async fn create(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let i = match parse(&form) {
        Ok((i, _)) => i,
        Err(e) => return invalid(&app, &session, false, form, ApiError::invalid(e)).await,
    };
    let name = i.name.clone();
    match service::instances::create(&app.ctx(), i, &who.actor()).await {
        Ok(()) => {
            session::set_flash(&session, format!("Instance {name} added; it is polled now.")).await;
            Redirect::to("/instances").into_response()
        }
        Err(e) => invalid(&app, &session, false, form, e.into()).await,
    }
}

pub async fn update(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Path(name): Path<String>,
    Form(mut form): Form<HashMap<String, String>>,
) -> Response {
    form.insert("name".into(), name.clone());
    let (i, secrets_blank) = match parse(&form) {
        Ok(x) => x,
        Err(e) => return invalid(&app, &session, true, form, ApiError::invalid(e)).await,
    };
    // Same kind and blank secret: keep the stored credentials.
    let same_kind = app
        .engine
        .catalog()
        .instances
        .get(&name)
        .is_some_and(|e| e.config.auth.kind() == i.auth.kind());
    let keep = secrets_blank && same_kind;
    match service::instances::update(&app.ctx(), &name, i, keep, &who.actor()).await {
        Ok(_) => {
            session::set_flash(&session, format!("Instance {name} saved.")).await;
            Redirect::to("/instances").into_response()
        }
        Err(e) => invalid(&app, &session, true, form, e.into()).await,
    }
}

pub async fn delete(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    session: Session,
    Path(name): Path<String>,
) -> Redirect {
    let msg = match service::instances::delete(&app.ctx(), &name, &who.actor()).await {
        Ok(()) => format!("Instance {name} deleted."),
        Err(e) => ApiError::from(e).message,
    };
    session::set_flash(&session, msg).await;
    Redirect::to("/instances")
}

/// The Test button: of the list (the outcome as a message on the list), or
/// of the instance page (`show=instance`: the page with every group's
/// result and extracted values).
pub async fn test(
    State(app): State<AppState>,
    session: Session,
    Path(name): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if form.get("show").map(String::as_str) == Some("instance") {
        return match test_results(&app, &name).await {
            Ok(results) => super::instance::render(&app, &session, &name, Some(&results)).await,
            Err(_) => super::instance::render(&app, &session, &name, None).await,
        };
    }
    let msg = match test_results(&app, &name).await {
        Ok(results) => {
            let parts: Vec<String> = results
                .iter()
                .map(|r| match &r.error {
                    None => format!(
                        "{}: OK, HTTP {} in {} ms",
                        r.group,
                        r.status.unwrap_or(0),
                        r.duration_ms
                    ),
                    Some(e) => format!(
                        "{}: {} {} error — {} ({} ms)",
                        r.group,
                        e.category.as_str(),
                        serde_json::to_value(e.kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default(),
                        e.message,
                        r.duration_ms
                    ),
                })
                .collect();
            format!("Test of {name}: {}", parts.join("; "))
        }
        Err(e) => ApiError::from(e).message,
    };
    session::set_flash(&session, msg).await;
    Redirect::to(&format!("/instances?q={}", enc(&name))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_form_becomes_an_instance() {
        let (i, blank) = parse(&form(&[
            ("name", "web-1"),
            ("type", "http"),
            ("url", "https://a.example/"),
            ("timeout", "3s"),
            ("max_response_bytes", "1024"),
            ("labels", "env=prod\n critical = true \n"),
            ("enabled", "on"),
            ("auth_kind", "pve_token"),
            ("auth_user", "mon@pve"),
            ("auth_token_id", "t1"),
            ("auth_secret", "s3"),
        ]))
        .expect("parses");
        assert!(!blank);
        assert_eq!(i.timeout, std::time::Duration::from_secs(3));
        assert!(i.enabled && !i.tls_verify);
        assert_eq!(i.labels.get("critical").map(String::as_str), Some("true"));
        assert_eq!(
            i.auth,
            Auth::PveToken {
                user: "mon@pve".into(),
                token_id: "t1".into(),
                secret: "s3".into()
            }
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let e = parse(&form(&[("timeout", "soon"), ("max_response_bytes", "1")])).expect_err("bad");
        assert_eq!(e.field, "timeout");
        let e = parse(&form(&[("timeout", "1s"), ("max_response_bytes", "lots")])).expect_err("bad");
        assert_eq!(e.field, "max_response_bytes");
        let e = parse(&form(&[
            ("timeout", "1s"),
            ("max_response_bytes", "1"),
            ("labels", "novalue"),
        ]))
        .expect_err("bad");
        assert_eq!(e.field, "labels");
        assert_eq!(input_of("auth.token"), "auth_token");
        assert_eq!(input_of("labels.x"), "labels");
    }
}

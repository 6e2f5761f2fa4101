//! Operations shared by the JSON API and the pages: one implementation of
//! each change, whatever surface asks for it. Errors come back as
//! [`ApiError`]; pages turn them into inline messages.

use super::AppState;
use super::error::ApiError;
use crate::config::SinkConfig;
use crate::engine::settings::SettingsError;
use crate::model::{BudgetConfig, ErrorCategory, ErrorKind, FieldError, InstanceConfig};
use crate::sink::event::{Event, SettingsSection};
use crate::store::OutboxEvent;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use utoipa::ToSchema;

pub const SETTINGS_KEY: &str = "monitoring";
/// The sink settings saved from the UI or API: a `[sink]` document, or null
/// for "off" (the file's sink no longer applies).
pub const SINK_KEY: &str = "sink";

/// An operator event as an outbox row, to commit with the change.
fn operator_event(app: &AppState, actor: &str, action: &str, target: &str) -> Vec<OutboxEvent> {
    instance_event(app, actor, action, target, Vec::new())
}

/// An instance change as an outbox row, naming the fields it set or changed
/// (never their values: some are credentials).
fn instance_event(app: &AppState, actor: &str, action: &str, target: &str, fields: Vec<String>) -> Vec<OutboxEvent> {
    let event = Event::operator(app.engine.now(), actor, action, target).with_fields(fields);
    app.engine.sink().stage(&event).into_iter().collect()
}

/// The fields of an instance that differ between `old` and `new` (every
/// field `new` sets when there is no `old`), as the API names them; inside
/// `auth`, `auth.KEY`.
pub fn changed_fields(old: Option<&InstanceConfig>, new: &InstanceConfig) -> Vec<String> {
    fn object(i: Option<&InstanceConfig>) -> serde_json::Map<String, Value> {
        match i.map(serde_json::to_value) {
            Some(Ok(Value::Object(m))) => m,
            _ => serde_json::Map::new(),
        }
    }
    let (a, b) = (object(old), object(Some(new)));
    let mut keys: std::collections::BTreeSet<&String> = a.keys().collect();
    keys.extend(b.keys());
    let mut out = Vec::new();
    for k in keys {
        let empty = serde_json::Map::new();
        let inner = |v: Option<&Value>| match v {
            Some(Value::Object(m)) => Some(m.clone()),
            None => Some(empty.clone()),
            _ => None,
        };
        match (a.get(k), b.get(k)) {
            (x, y) if x == y => {}
            (x, y) if k == "auth" && inner(x).is_some() && inner(y).is_some() => {
                let (x, y) = (inner(x).unwrap_or_default(), inner(y).unwrap_or_default());
                let mut names: std::collections::BTreeSet<&String> = x.keys().collect();
                names.extend(y.keys());
                out.extend(
                    names
                        .into_iter()
                        .filter(|f| x.get(*f) != y.get(*f))
                        .map(|f| format!("auth.{f}")),
                );
            }
            _ => out.push(k.clone()),
        }
    }
    out
}

fn validate(app: &AppState, i: &InstanceConfig) -> Result<(), ApiError> {
    i.validate_fields().map_err(ApiError::invalid)?;
    app.engine.catalog().check_references(i).map_err(ApiError::invalid)?;
    Ok(())
}

/// The over-budget gate (§2) refuses a change that would push a pool with
/// no profile over its budget target: 409 with the startup gate's message.
fn over_budget(message: String) -> ApiError {
    ApiError::conflict("over_budget", message)
}

async fn persist(app: &AppState, i: InstanceConfig, events: Vec<OutboxEvent>) -> Result<(), ApiError> {
    let mut next = (*app.engine.catalog()).clone();
    next.insert(i.clone(), false);
    app.engine
        .check_gate(&next, &app.engine.monitoring())
        .map_err(over_budget)?;
    let saved = i.clone();
    app.with_store(move |s| s.put_instance_with_events(&saved, &events))
        .await?;
    app.engine.set_catalog(next);
    Ok(())
}

/// The instance `name`, if it exists and may be changed through the API.
fn editable<'a>(
    cat: &'a crate::core::catalog::Catalog,
    name: &str,
    verb: &str,
) -> Result<&'a InstanceConfig, ApiError> {
    let e = cat
        .instances
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    if e.provisioned {
        return Err(ApiError::conflict(
            "provisioned",
            format!("instance {name:?} is defined in the config file; {verb} it there"),
        ));
    }
    Ok(&e.config)
}

pub async fn create_instance(app: &AppState, i: InstanceConfig, actor: &str) -> Result<(), ApiError> {
    validate(app, &i)?;
    let _edit = app.engine.edit_catalog().await;
    if app.engine.catalog().instances.contains_key(i.name.as_str()) {
        return Err(ApiError {
            field: Some("name".into()),
            ..ApiError::conflict("duplicate", format!("an instance named {:?} already exists", i.name))
        });
    }
    let name = i.name.clone();
    let events = instance_event(app, actor, "instance.create", &name, changed_fields(None, &i));
    persist(app, i, events).await?;
    tracing::info!(instance = %name, actor, "instance added");
    Ok(())
}

/// Replace an instance. `keep_auth`: credentials are write-only, so a change
/// that does not send them keeps the stored ones.
pub async fn update_instance(
    app: &AppState,
    name: &str,
    mut i: InstanceConfig,
    keep_auth: bool,
    actor: &str,
) -> Result<InstanceConfig, ApiError> {
    let _edit = app.engine.edit_catalog().await;
    let cat = app.engine.catalog();
    let existing = editable(&cat, name, "change")?;
    if i.name != name {
        return Err(ApiError::invalid(FieldError::new(
            "name",
            &i.name,
            "cannot be changed; delete the instance and add it again",
        )));
    }
    i.url = super::redact::restore_url_password(&i.url, &existing.url, "url").map_err(ApiError::invalid)?;
    // A secret sent back as `(hidden)` is the stored one, when there is one
    // of the same kind and the origin is unchanged; otherwise validation
    // refuses it, naming the field.
    if !keep_auth
        && i.auth.secret().is_some_and(|(_, s)| s.expose() == crate::model::HIDDEN)
        && std::mem::discriminant(&i.auth) == std::mem::discriminant(&existing.auth)
        && super::redact::same_origin(&i.url, &existing.url)
        && let (Some(new), Some((_, stored))) = (i.auth.secret_mut(), existing.auth.secret())
    {
        *new = stored.clone();
    }
    if keep_auth {
        // Stored credentials go only where they were given for.
        if super::redact::same_origin(&i.url, &existing.url) {
            i.auth = existing.auth.clone();
        } else if let Some(field) = super::redact::secret_field(&existing.auth) {
            return Err(ApiError::invalid(FieldError::new(
                field,
                crate::model::HIDDEN,
                "the URL now points to another host, so the stored credentials are not sent there; \
                 give them again (or choose no authentication)",
            )));
        }
    }
    validate(app, &i)?;
    let fields = changed_fields(Some(existing), &i);
    drop(cat);
    let events = instance_event(app, actor, "instance.update", name, fields);
    persist(app, i.clone(), events).await?;
    tracing::info!(instance = %name, actor, "instance updated");
    Ok(i)
}

pub async fn delete_instance(app: &AppState, name: &str, actor: &str) -> Result<(), ApiError> {
    let _edit = app.engine.edit_catalog().await;
    let cat = app.engine.catalog();
    editable(&cat, name, "remove")?;
    let n = name.to_string();
    let events = operator_event(app, actor, "instance.delete", name);
    app.with_store(move |s| s.delete_instance_with_events(&n, &events))
        .await?;
    let mut next = (*cat).clone();
    next.instances.remove(name);
    drop(cat);
    app.engine.set_catalog(next);
    tracing::info!(instance = %name, actor, "instance deleted");
    Ok(())
}

/// The classified result of one test poll.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TestResult {
    pub group: String,
    pub ok: bool,
    /// The HTTP status, if a response came.
    #[schema(required = true)]
    pub status: Option<u16>,
    #[serde(rename = "durationMs")]
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = super::api::openapi::count)]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub error: Option<TestError>,
    /// What the group's value rules extract from this answer (present for
    /// a group with rules whose poll succeeded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<super::api::data::ValueView>>,
    /// Samples the rules skipped, by metric and reason.
    #[serde(rename = "valueErrors", skip_serializing_if = "Vec::is_empty")]
    #[schema(inline)]
    pub value_errors: Vec<ValueError>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ValueError {
    pub metric: String,
    /// missing, not_number, unmapped, limit or duplicate.
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TestError {
    #[schema(schema_with = super::api::openapi::error_category)]
    pub category: ErrorCategory,
    #[schema(schema_with = super::api::openapi::error_kind)]
    pub kind: ErrorKind,
    pub message: String,
}

/// Run every group of the instance once, now, outside the schedule.
pub async fn test_instance(app: &AppState, name: &str) -> Result<Vec<TestResult>, ApiError> {
    let cat = app.engine.catalog();
    let e = cat
        .instances
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    let groups = cat
        .types
        .get(&e.config.type_name)
        .map(|t| t.groups.clone())
        .unwrap_or_default();
    let mut results = Vec::new();
    // The facts the instance has learned, and what this run learns (groups
    // run in the type's order, so a fact group listed first serves the
    // rest).
    let mut facts = app
        .engine
        .latest()
        .facts_of(name)
        .map(|f| (*f).clone())
        .unwrap_or_default();
    for g in groups {
        let started = Instant::now();
        let items = app.engine.fan_out_items(&e.config, &g);
        let hard = crate::poll::deadline(&e.config, &g, items.len()) + Duration::from_millis(500);
        let r = tokio::time::timeout(hard, app.engine.fetch().fetch(&e.config, None, &g, &items)).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        results.push(match r {
            Ok(Ok(ok)) => {
                if let Some(learned) = &ok.facts {
                    facts.extend(learned.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                let extraction = cat
                    .values
                    .group(&e.config.type_name, &g.name)
                    .zip(ok.json.as_ref())
                    .map(|(rules, json)| rules.run(json, Some(&facts)));
                TestResult {
                    group: g.name,
                    ok: true,
                    status: Some(ok.status),
                    duration_ms,
                    bytes: Some(ok.body_bytes),
                    error: None,
                    value_errors: extraction
                        .as_ref()
                        .map(|x| {
                            x.skipped
                                .iter()
                                .map(|((metric, reason), n)| ValueError {
                                    metric: metric.to_string(),
                                    reason: reason.as_str().to_string(),
                                    count: *n,
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    values: extraction.map(|x| x.samples.iter().map(super::api::data::ValueView::of).collect()),
                }
            }
            Ok(Err(err)) => TestResult {
                group: g.name,
                ok: false,
                status: err.status,
                duration_ms,
                bytes: None,
                error: Some(TestError {
                    category: err.category,
                    kind: err.kind,
                    message: err.message,
                }),
                values: None,
                value_errors: Vec::new(),
            },
            Err(_) => TestResult {
                group: g.name,
                ok: false,
                status: None,
                duration_ms,
                bytes: None,
                error: Some(TestError {
                    category: ErrorCategory::Transient,
                    kind: ErrorKind::Timeout,
                    message: "no response within the timeout".into(),
                }),
                values: None,
                value_errors: Vec::new(),
            },
        });
    }
    Ok(results)
}

/// Validate a partial settings document against everything else, save it,
/// and apply it at once. Returns every violation when invalid.
pub async fn save_settings(app: &AppState, mut patch: Value, actor: &str) -> Result<(), Vec<ApiError>> {
    if let Some(o) = patch.as_object_mut() {
        // Echoing back a GET document is allowed: `locked` is informational.
        match o.remove("locked") {
            None | Some(Value::Object(_)) => {}
            Some(other) => {
                return Err(vec![ApiError::invalid(FieldError::new(
                    "locked",
                    &other,
                    "must be an object like the one GET returns (it is ignored)",
                ))]);
            }
        }
    }
    let _edit = app.engine.edit_settings().await;
    let proposal = app.engine.propose_settings(&patch);
    let (saved, effective) = match proposal {
        Ok(p) => p,
        Err(SettingsError::Locked(field, var)) => {
            return Err(vec![ApiError {
                field: Some(field.clone()),
                ..ApiError::conflict(
                    "locked",
                    format!("{field} is set by the environment variable {var} and cannot be changed here"),
                )
            }]);
        }
        Err(SettingsError::Invalid(errs)) => return Err(errs.into_iter().map(ApiError::invalid).collect()),
    };
    app.engine
        .check_gate(&app.engine.catalog(), &effective)
        .map_err(|m| vec![over_budget(m)])?;
    let doc = saved.clone();
    let event = Event::settings(app.engine.now(), actor, SettingsSection::Monitoring, patch.clone());
    let events: Vec<OutboxEvent> = app.engine.sink().stage(&event).into_iter().collect();
    app.with_store(move |s| s.put_settings_with_events(SETTINGS_KEY, &doc, &events))
        .await
        .map_err(|e| vec![e])?;
    app.engine.apply_saved_settings(saved, effective);
    tracing::info!(actor, change = %patch, "monitoring settings changed");
    Ok(())
}

/// Stored budget pools changed through the UI or API, by name.
pub const BUDGETS_KEY: &str = "budgets";

/// Change (or create) the budget pool `name` from a partial document
/// (`requests_per_second`, `shared_fraction`, `burst`): validated, checked
/// against the over-budget gate, stored, then applied at once (AIMD and the
/// plan follow the new budget).
pub async fn save_budget(app: &AppState, name: &str, patch: Value, actor: &str) -> Result<BudgetConfig, ApiError> {
    let Some(obj) = patch.as_object() else {
        return Err(ApiError::invalid(FieldError::new("", &patch, "must be a JSON object")));
    };
    let _edit = app.engine.edit_catalog().await;
    let cat = app.engine.catalog();
    let mut doc = match cat.budgets.iter().find(|b| b.name == name) {
        Some(b) => serde_json::to_value(b).map_err(ApiError::internal)?,
        None => serde_json::json!({ "name": name }),
    };
    for (k, v) in obj {
        if k == "name" && v.as_str() != Some(name) {
            return Err(ApiError::invalid(FieldError::new(
                "name",
                v,
                "must equal the pool name in the path (pools cannot be renamed)",
            )));
        }
        doc[k.as_str()] = v.clone();
    }
    let budget: BudgetConfig = super::error::parse_json(&serde_json::to_vec(&doc).unwrap_or_default())?;
    budget.validate("").map_err(|mut e| {
        e.field = e.field.trim_start_matches('.').to_string();
        ApiError::invalid(e)
    })?;
    let mut next = (*cat).clone();
    match next.budgets.iter_mut().find(|b| b.name == name) {
        Some(b) => *b = budget.clone(),
        None => next.budgets.push(budget.clone()),
    }
    drop(cat);
    app.engine
        .check_gate(&next, &app.engine.monitoring())
        .map_err(over_budget)?;
    let saved = budget.clone();
    let change = serde_json::to_value(&budget).unwrap_or(Value::Null);
    let event = Event::settings(app.engine.now(), actor, SettingsSection::Budget, change);
    let events: Vec<OutboxEvent> = app.engine.sink().stage(&event).into_iter().collect();
    app.with_store(move |store| -> Result<(), crate::store::StoreError> {
        let mut all = store
            .get_settings(BUDGETS_KEY)?
            .unwrap_or_else(|| serde_json::json!({}));
        if !all.is_object() {
            all = serde_json::json!({});
        }
        all[saved.name.as_str()] = serde_json::to_value(&saved).unwrap_or(Value::Null);
        store.put_settings_with_events(BUDGETS_KEY, &all, &events)
    })
    .await?;
    app.engine.set_catalog(next);
    tracing::info!(pool = %name, actor, budget_rps = budget.budget_rps(), burst = budget.burst, "budget pool changed");
    Ok(budget)
}

/// A sink's settings as the API and pages show them: the `[sink]` fields,
/// with header values and any password in the URL hidden.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SinkShown {
    pub url: String,
    /// Header names; every value shows as `(hidden)`.
    #[schema(schema_with = super::api::openapi::hidden_values)]
    pub headers: BTreeMap<String, &'static str>,
    pub batch_size: usize,
    #[schema(schema_with = super::api::openapi::positive_duration)]
    pub buffering: String,
    #[schema(schema_with = super::api::openapi::duration_or_zero)]
    pub retry_limit: String,
    pub queue_limit: usize,
    pub gzip: bool,
}

impl SinkShown {
    pub fn of(c: &SinkConfig) -> Self {
        SinkShown {
            url: super::redact::mask_url(&c.url),
            headers: c.headers.keys().map(|k| (k.clone(), crate::model::HIDDEN)).collect(),
            batch_size: c.batch_size,
            buffering: crate::model::duration_str::format(c.buffering),
            retry_limit: crate::model::duration_str::format(c.retry_limit),
            queue_limit: c.queue_limit,
            gzip: c.gzip,
        }
    }
}

/// [`SinkShown`] as JSON, for the settings event.
pub fn sink_json(c: &SinkConfig) -> Value {
    serde_json::to_value(SinkShown::of(c)).unwrap_or(Value::Null)
}

/// Change the event sink: `null` (or `{"enabled": false}`) turns it off;
/// otherwise a partial `[sink]` document over the settings in force. A
/// header sent as `(hidden)` keeps its stored value while the URL keeps its
/// scheme, host and port (a new origin needs it given again). Validated as a whole
/// (422 naming the field), refused for a field an environment variable sets
/// (409), stored, and applied at once.
pub async fn save_sink(app: &AppState, patch: Value, actor: &str) -> Result<Option<SinkConfig>, ApiError> {
    let _edit = app.engine.edit_settings().await;
    let locked = app.engine.locked_sink();
    let current = app.engine.sink_config();
    let enabled = match patch.get("enabled") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            return Err(ApiError::invalid(FieldError::new(
                "enabled",
                other,
                "must be true or false",
            )));
        }
    };
    if enabled == Some(false)
        && let Some(other) = patch.as_object().and_then(|o| o.keys().find(|k| *k != "enabled"))
    {
        return Err(ApiError::invalid(FieldError::new(
            other,
            "",
            "cannot be set while turning the sink off with enabled: false",
        )));
    }
    let off = patch.is_null() || enabled == Some(false);
    let next: Option<SinkConfig> = if off {
        if let Some(var) = locked.get("sink.url") {
            return Err(ApiError {
                field: Some("url".into()),
                ..ApiError::conflict(
                    "locked",
                    format!("the sink is turned on by the environment variable {var} and cannot be turned off here"),
                )
            });
        }
        None
    } else {
        let Some(obj) = patch.as_object() else {
            return Err(ApiError::invalid(FieldError::new(
                "",
                &patch,
                "must be a JSON object or null",
            )));
        };
        let mut doc = match &current {
            Some(c) => serde_json::to_value(c).map_err(ApiError::internal)?,
            None => serde_json::json!({}),
        };
        for (k, v) in obj {
            if k == "enabled" {
                continue;
            }
            let field = format!("sink.{k}");
            if let Some(var) = locked.get(&field)
                && doc.get(k) != Some(v)
            {
                return Err(ApiError {
                    field: Some(k.clone()),
                    ..ApiError::conflict(
                        "locked",
                        format!("{field} is set by the environment variable {var} and cannot be changed here"),
                    )
                });
            }
            if k == "headers"
                && let Some(new) = v.as_object()
            {
                let old = current.as_ref().map(|c| c.headers.clone()).unwrap_or_default();
                let mut merged = serde_json::Map::new();
                for (name, value) in new {
                    let keep = value.as_str() == Some(crate::model::HIDDEN);
                    match (keep, old.get(name)) {
                        (true, Some(stored)) => merged.insert(name.clone(), Value::String(stored.clone())),
                        // Never saved as the literal text.
                        (true, None) => {
                            return Err(ApiError::invalid(FieldError::new(
                                format!("headers.{name}"),
                                crate::model::HIDDEN,
                                crate::model::HIDDEN_WITHOUT_VALUE,
                            )));
                        }
                        _ => merged.insert(name.clone(), value.clone()),
                    };
                }
                doc["headers"] = Value::Object(merged);
                continue;
            }
            doc[k.as_str()] = v.clone();
        }
        // Stored secrets go only where they were given for: a new origin
        // drops the stored header values and URL password unless they are
        // given again.
        if let Some(old) = &current {
            let new_url = doc.get("url").and_then(Value::as_str).unwrap_or_default().to_string();
            let restored = super::redact::restore_url_password(&new_url, &old.url, "url").map_err(ApiError::invalid)?;
            doc["url"] = Value::String(restored.clone());
            if !super::redact::same_origin(&restored, &old.url)
                && let Some(headers) = doc.get("headers").and_then(Value::as_object)
            {
                let given = patch
                    .get("headers")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                for (name, value) in headers {
                    let stored = old
                        .headers
                        .get(name)
                        .is_some_and(|s| value.as_str() == Some(s.as_str()));
                    let sent_anew = given
                        .get(name)
                        .and_then(Value::as_str)
                        .is_some_and(|g| g != crate::model::HIDDEN);
                    if stored && !sent_anew {
                        return Err(ApiError::invalid(FieldError::new(
                            format!("headers.{name}"),
                            crate::model::HIDDEN,
                            "the sink URL now points to another host, so the stored header value is not sent there; \
                             give it again (or remove the header)",
                        )));
                    }
                }
            }
        }
        let c: SinkConfig = super::error::parse_json(&serde_json::to_vec(&doc).unwrap_or_default())?;
        c.validate().map_err(ApiError::invalid)?;
        Some(c)
    };
    let saved = serde_json::to_value(&next).map_err(ApiError::internal)?;
    let shown = next.as_ref().map(sink_json).unwrap_or(Value::Null);
    let event = Event::settings(app.engine.now(), actor, SettingsSection::Sink, shown);
    // Always to the audit trail. To the sink by the new settings, not the
    // old: a sink turned on records it; one turned off has no receiver to
    // tell.
    let mut row = event.to_outbox(&mut rand::rng());
    row.deliver = next.is_some();
    row.audit = Some(crate::store::AuditStamp {
        time: event.time,
        source: crate::audit::current_source(),
    });
    let events = vec![row];
    app.with_store(move |s| s.put_settings_with_events(SINK_KEY, &saved, &events))
        .await?;
    app.engine.apply_sink_config(next.clone());
    tracing::info!(actor, enabled = next.is_some(), "event sink settings changed");
    Ok(next)
}

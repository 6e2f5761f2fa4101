//! Instances changed through the API or the pages: created, replaced,
//! deleted, each checked against the over-budget gate, committed with its
//! change event, then put in force; and the test that polls every group of
//! one instance once, outside the schedule.

use super::Context;
use super::error::{Conflict, Missing, ServiceError};
use super::{redact, with_store};
use crate::core::catalog::Catalog;
use crate::model::{ErrorCategory, ErrorKind, FieldError, InstanceConfig};
use crate::sink::event::Event;
use crate::store::OutboxEvent;
use crate::values::Sample;
use serde_json::Value;
use std::time::{Duration, Instant};

/// An instance change as an outbox row, naming the fields it set or changed
/// (never their values: some are credentials).
fn instance_event(cx: &Context, actor: &str, action: &str, target: &str, fields: Vec<String>) -> Vec<OutboxEvent> {
    let event = Event::operator(cx.engine.now(), actor, action, target).with_fields(fields);
    cx.sink.stage(&event).into_iter().collect()
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

fn validate(cx: &Context, i: &InstanceConfig) -> Result<(), ServiceError> {
    i.validate_fields()?;
    cx.engine.catalog().check_references(i)?;
    Ok(())
}

async fn persist(cx: &Context, i: InstanceConfig, events: Vec<OutboxEvent>) -> Result<(), ServiceError> {
    let mut next = (*cx.engine.catalog()).clone();
    next.insert(i.clone(), false);
    cx.engine.check_gate(&next, &cx.engine.monitoring())?;
    with_store(cx, move |s| s.put_instance_with_events(&i, &events)).await?;
    cx.engine.set_catalog(next);
    Ok(())
}

/// The instance `name`, if it exists and may be changed through the API.
fn editable<'a>(cat: &'a Catalog, name: &str, verb: &str) -> Result<&'a InstanceConfig, ServiceError> {
    let e = cat
        .instances
        .get(name)
        .ok_or_else(|| ServiceError::NotFound(Missing::Instance(name.to_string())))?;
    if e.provisioned {
        return Err(ServiceError::conflict(
            Conflict::Provisioned,
            format!("instance {name:?} is defined in the config file; {verb} it there"),
            None,
        ));
    }
    Ok(&e.config)
}

pub async fn create(cx: &Context, i: InstanceConfig, actor: &str) -> Result<(), ServiceError> {
    super::refuse_in_cluster(cx, "instances")?;
    validate(cx, &i)?;
    let _edit = cx.engine.edit_catalog().await;
    if cx.engine.catalog().instances.contains_key(i.name.as_str()) {
        return Err(ServiceError::conflict(
            Conflict::Duplicate,
            format!("an instance named {:?} already exists", i.name),
            Some("name".into()),
        ));
    }
    let name = i.name.clone();
    let events = instance_event(cx, actor, "instance.create", &name, changed_fields(None, &i));
    persist(cx, i, events).await?;
    tracing::info!(instance = %name, actor, "instance added");
    Ok(())
}

/// Replace an instance. `keep_auth`: credentials are write-only, so a change
/// that does not send them keeps the stored ones.
pub async fn update(
    cx: &Context,
    name: &str,
    mut i: InstanceConfig,
    keep_auth: bool,
    actor: &str,
) -> Result<InstanceConfig, ServiceError> {
    super::refuse_in_cluster(cx, "instances")?;
    let _edit = cx.engine.edit_catalog().await;
    let cat = cx.engine.catalog();
    let existing = editable(&cat, name, "change")?;
    if i.name != name {
        return Err(ServiceError::invalid(FieldError::new(
            "name",
            &i.name,
            "cannot be changed; delete the instance and add it again",
        )));
    }
    i.url = redact::restore_url_password(&i.url, &existing.url, "url")?;
    // A secret sent back as `(hidden)` is the stored one, when there is one
    // of the same kind and the origin is unchanged; otherwise validation
    // refuses it, naming the field.
    if !keep_auth
        && i.auth.secret().is_some_and(|(_, s)| s.expose() == crate::model::HIDDEN)
        && std::mem::discriminant(&i.auth) == std::mem::discriminant(&existing.auth)
        && redact::same_origin(&i.url, &existing.url)
        && let (Some(new), Some((_, stored))) = (i.auth.secret_mut(), existing.auth.secret())
    {
        *new = stored.clone();
    }
    if keep_auth {
        // Stored credentials go only where they were given for.
        if redact::same_origin(&i.url, &existing.url) {
            i.auth = existing.auth.clone();
        } else if let Some(field) = redact::secret_field(&existing.auth) {
            return Err(ServiceError::invalid(FieldError::new(
                field,
                crate::model::HIDDEN,
                "the URL now points to another host, so the stored credentials are not sent there; \
                 give them again (or choose no authentication)",
            )));
        }
    }
    validate(cx, &i)?;
    let fields = changed_fields(Some(existing), &i);
    drop(cat);
    let events = instance_event(cx, actor, "instance.update", name, fields);
    persist(cx, i.clone(), events).await?;
    tracing::info!(instance = %name, actor, "instance updated");
    Ok(i)
}

pub async fn delete(cx: &Context, name: &str, actor: &str) -> Result<(), ServiceError> {
    super::refuse_in_cluster(cx, "instances")?;
    let _edit = cx.engine.edit_catalog().await;
    let cat = cx.engine.catalog();
    editable(&cat, name, "remove")?;
    let n = name.to_string();
    let events = instance_event(cx, actor, "instance.delete", name, Vec::new());
    with_store(cx, move |s| s.delete_instance_with_events(&n, &events)).await?;
    let mut next = (*cat).clone();
    next.instances.remove(name);
    drop(cat);
    cx.engine.set_catalog(next);
    tracing::info!(instance = %name, actor, "instance deleted");
    Ok(())
}

/// The classified result of one group's test poll.
#[derive(Debug, Clone)]
pub struct GroupTest {
    pub group: String,
    pub ok: bool,
    /// The HTTP status, if a response came.
    pub status: Option<u16>,
    pub duration_ms: u64,
    pub bytes: Option<u64>,
    pub error: Option<TestError>,
    /// What the group's value rules extract from this answer (for a group
    /// with rules whose poll succeeded).
    pub values: Option<Vec<Sample>>,
    /// Samples the rules skipped, by metric and reason.
    pub value_errors: Vec<ValueError>,
}

#[derive(Debug, Clone)]
pub struct ValueError {
    pub metric: String,
    /// missing, not_number, unmapped, limit or duplicate.
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Clone)]
pub struct TestError {
    pub category: ErrorCategory,
    pub kind: ErrorKind,
    pub message: String,
}

/// Run every group of the instance once, now, outside the schedule.
pub async fn test(cx: &Context, name: &str) -> Result<Vec<GroupTest>, ServiceError> {
    let cat = cx.engine.catalog();
    let e = cat
        .instances
        .get(name)
        .ok_or_else(|| ServiceError::NotFound(Missing::Instance(name.to_string())))?;
    let groups = cat
        .types
        .get(&e.config.type_name)
        .map(|t| t.groups.clone())
        .unwrap_or_default();
    let mut results = Vec::new();
    // The facts the instance has learned, and what this run learns (groups
    // run in the type's order, so a fact group listed first serves the
    // rest).
    let mut facts = cx.engine.facts_of(name).map(|f| (*f).clone()).unwrap_or_default();
    for g in groups {
        let started = Instant::now();
        let items = cx.engine.fan_out_items(&e.config, &g);
        let hard = crate::poll::deadline(&e.config, &g, items.len()) + Duration::from_millis(500);
        let r = tokio::time::timeout(hard, cx.engine.probe(&e.config, &g, &items)).await;
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
                GroupTest {
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
                    values: extraction.map(|x| x.samples),
                }
            }
            Ok(Err(err)) => GroupTest {
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
            Err(_) => GroupTest {
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

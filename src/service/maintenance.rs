//! Maintenance windows made, listed and ended (from the API and the
//! Maintenance page): a request is read into a window (every field that
//! does not fit named), stored with its change event, then put in force.
//!
//! The request: exactly one of `instances`, `pool` or `type`; then either
//! one span — `start` (RFC 3339, default now) and `end` (RFC 3339) or
//! `duration` (`2h`) — or a weekly repeat — `days` (`mon` … `sun`), `at`
//! (`HH:MM`), `duration` and `timezone` (IANA, default `UTC`); and
//! `reason`. No window lasts longer than 7 days.

use super::error::{Conflict, Missing, ServiceError};
use super::{Context, with_store};
use crate::core::catalog::Catalog;
use crate::core::maintenance::{
    self, Day, LocalTime, MAX_DURATION, MaintenanceTarget, MaintenanceWindow, Schedule, Weekly, Zone,
};
use crate::model::{FieldError, Timestamp, duration_str};
use crate::sink::event::Event;
use serde::Deserialize;
use std::time::Duration;

/// The most windows in force at once: each completed poll looks at them.
pub const MAX_WINDOWS: usize = 1000;

/// The longest `reason` kept.
pub const MAX_REASON: usize = 500;

/// A window as a request asks for it (`POST /api/maintenance`, the page's
/// form), before it is checked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceInput {
    #[serde(default)]
    pub instances: Option<Vec<String>>,
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default, rename = "type")]
    pub type_name: Option<String>,
    #[serde(default)]
    pub start: Option<String>,
    #[serde(default)]
    pub end: Option<String>,
    #[serde(default)]
    pub duration: Option<String>,
    #[serde(default)]
    pub days: Option<Vec<String>>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub timezone: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a checked request makes: the target, the schedule and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub target: MaintenanceTarget,
    pub schedule: Schedule,
    pub reason: String,
}

fn field(name: &str, value: impl std::fmt::Display, message: impl Into<String>) -> FieldError {
    FieldError::new(name, value, message)
}

/// Read `input` against the catalog at `now`; every field that does not
/// fit is named, in the order of the fields.
pub fn check(input: &MaintenanceInput, cat: &Catalog, now: Timestamp) -> Result<Checked, Vec<FieldError>> {
    let mut errors = Vec::new();
    let target = check_target(input, cat, &mut errors);
    let schedule = check_schedule(input, now, &mut errors);
    let reason = input.reason.clone().unwrap_or_default().trim().to_string();
    if reason.chars().count() > MAX_REASON {
        errors.push(field("reason", "", format!("at most {MAX_REASON} characters")));
    }
    match (target, schedule) {
        (Some(target), Some(schedule)) if errors.is_empty() => Ok(Checked {
            target,
            schedule,
            reason,
        }),
        _ => Err(errors),
    }
}

fn check_target(input: &MaintenanceInput, cat: &Catalog, errors: &mut Vec<FieldError>) -> Option<MaintenanceTarget> {
    let given: Vec<&str> = [
        input.instances.as_ref().map(|_| "instances"),
        input.pool.as_ref().map(|_| "pool"),
        input.type_name.as_ref().map(|_| "type"),
    ]
    .into_iter()
    .flatten()
    .collect();
    match given.as_slice() {
        [] => {
            errors.push(field("instances", "", "give exactly one of instances, pool or type"));
            None
        }
        [_] => {
            if let Some(names) = &input.instances {
                let names: Vec<String> = names.iter().map(|n| n.trim().to_string()).collect();
                if names.is_empty() {
                    errors.push(field("instances", "[]", "name at least one instance"));
                    return None;
                }
                let unknown: Vec<&String> = names.iter().filter(|n| !cat.instances.contains_key(*n)).collect();
                if let Some(first) = unknown.first() {
                    errors.push(field("instances", first, format!("no instance named {first:?}")));
                    return None;
                }
                let mut names = names;
                names.sort();
                names.dedup();
                Some(MaintenanceTarget::Instances(names))
            } else if let Some(pool) = &input.pool {
                let pool = pool.trim();
                if !cat.budgets.iter().any(|b| b.name == pool) {
                    errors.push(field("pool", pool, format!("no budget pool named {pool:?}")));
                    return None;
                }
                Some(MaintenanceTarget::Pool(pool.to_string()))
            } else {
                let t = input.type_name.as_deref().unwrap_or_default().trim();
                if !cat.types.contains_key(t) {
                    errors.push(field("type", t, format!("no type named {t:?}")));
                    return None;
                }
                Some(MaintenanceTarget::Type(t.to_string()))
            }
        }
        [first, second, ..] => {
            errors.push(field(
                second,
                "",
                format!("give exactly one of instances, pool or type (both {first} and {second} are set)"),
            ));
            None
        }
    }
}

fn time_field(name: &str, value: &Option<String>, errors: &mut Vec<FieldError>) -> Option<Option<Timestamp>> {
    match value.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Some(None),
        Some(s) => match maintenance::parse_rfc3339(s) {
            Some(t) => Some(Some(t)),
            None => {
                errors.push(field(name, s, "expected an RFC 3339 time, e.g. 2026-12-04T22:00:00Z"));
                None
            }
        },
    }
}

fn duration_field(value: &Option<String>, errors: &mut Vec<FieldError>) -> Option<Option<Duration>> {
    match value.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Some(None),
        Some(s) => match duration_str::parse(s) {
            Ok(d) if d.is_zero() => {
                errors.push(field("duration", s, "must be longer than zero"));
                None
            }
            Ok(d) if d > MAX_DURATION => {
                errors.push(field("duration", s, "a window lasts at most 7 days (7d)"));
                None
            }
            Ok(d) => Some(Some(d)),
            Err(e) => {
                errors.push(field("duration", s, e));
                None
            }
        },
    }
}

fn check_schedule(input: &MaintenanceInput, now: Timestamp, errors: &mut Vec<FieldError>) -> Option<Schedule> {
    let start = time_field("start", &input.start, errors);
    let end = time_field("end", &input.end, errors);
    let duration = duration_field(&input.duration, errors);
    let zone = match input.timezone.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Some(Zone::utc()),
        Some(name) => match Zone::parse(name) {
            Ok(z) => Some(z),
            Err(e) => {
                errors.push(field("timezone", name, e));
                None
            }
        },
    };
    if let Some(days) = &input.days {
        // A weekly repeat.
        for (name, set) in [("start", input.start.is_some()), ("end", input.end.is_some())] {
            if set {
                errors.push(field(
                    name,
                    "",
                    "a weekly window (days) takes at and duration, not start or end",
                ));
            }
        }
        let parsed: Vec<Option<Day>> = days.iter().map(|d| Day::parse(d)).collect();
        let days = if days.is_empty() {
            errors.push(field("days", "[]", "name at least one day (mon … sun)"));
            None
        } else if let Some(i) = parsed.iter().position(Option::is_none) {
            errors.push(field("days", &days[i], "expected mon, tue, wed, thu, fri, sat or sun"));
            None
        } else {
            Some(parsed.into_iter().flatten().collect::<Vec<_>>())
        };
        let at = match input.at.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => {
                errors.push(field("at", "", "a weekly window needs at (HH:MM)"));
                None
            }
            Some(s) => {
                let t = LocalTime::parse(s);
                if t.is_none() {
                    errors.push(field("at", s, "expected a time of day HH:MM, 00:00 to 23:59"));
                }
                t
            }
        };
        let duration = match duration {
            Some(None) => {
                errors.push(field("duration", "", "a weekly window needs a duration, e.g. 2h"));
                None
            }
            d => d.flatten(),
        };
        let (days, at, duration, zone) = (days?, at?, duration?, zone?);
        return Weekly::new(days, at, duration, zone).map(Schedule::Weekly);
    }
    if let Some(at) = &input.at {
        errors.push(field("at", at, "at needs days (a weekly window)"));
    }
    let (start, end, duration, _zone) = (start?, end?, duration?, zone?);
    let start = start.unwrap_or(now);
    let end = match (end, duration) {
        (Some(_), Some(_)) => {
            errors.push(field("duration", "", "give end or duration, not both"));
            return None;
        }
        (Some(end), None) => end,
        (None, Some(d)) => start.plus(d),
        (None, None) => {
            errors.push(field("end", "", "give end (RFC 3339) or duration (e.g. 2h)"));
            return None;
        }
    };
    if end <= start {
        errors.push(field("end", end.to_rfc3339(), "end must be after start"));
        return None;
    }
    if end.since(start) > MAX_DURATION {
        let name = if input.duration.is_some() { "duration" } else { "end" };
        errors.push(field(name, end.to_rfc3339(), "a window lasts at most 7 days"));
        return None;
    }
    if end <= now {
        errors.push(field("end", end.to_rfc3339(), "the window would already be over"));
        return None;
    }
    Some(Schedule::Once { start, end })
}

/// Make a window: checked, stored with its `maintenance.create` event (and
/// audit entry), then in force. Its start is recorded when it opens.
pub async fn create(cx: &Context, input: &MaintenanceInput, actor: &str) -> Result<MaintenanceWindow, ServiceError> {
    let now = cx.engine.now();
    let cat = cx.engine.catalog();
    let checked = check(input, &cat, now).map_err(ServiceError::Invalid)?;
    if cx.engine.maintenance_windows().len() >= MAX_WINDOWS {
        return Err(ServiceError::conflict(
            Conflict::Limit,
            format!("there are {MAX_WINDOWS} maintenance windows already, the most there may be: end some first"),
            None,
        ));
    }
    let window = MaintenanceWindow {
        id: cx.sink.new_event_id(now),
        target: checked.target,
        schedule: checked.schedule,
        reason: checked.reason,
        created: now,
        created_by: actor.to_string(),
        open_since: None,
    };
    let instances = crate::engine::maintenance::instances_of(&window, &cat);
    let event = Event::operator(now, actor, "maintenance.create", &window.id).with_window(instances, &window.reason);
    let events: Vec<_> = cx.sink.stage(&event).into_iter().collect();
    let w = window.clone();
    with_store(cx, move |s| s.put_maintenance_with_events(&w, &events)).await?;
    cx.engine.put_maintenance(window.clone());
    tracing::info!(window = %window.id, target = %window.target.describe(), reason = %window.reason, actor, "maintenance window made");
    Ok(window)
}

/// End the window `id` (delete it), committed with its
/// `maintenance.delete` event and, when its opening was recorded, its
/// `maintenance.end`; then out of force.
pub async fn end(cx: &Context, id: &str, actor: &str) -> Result<MaintenanceWindow, ServiceError> {
    let now = cx.engine.now();
    let cat = cx.engine.catalog();
    let (sink, who) = (cx.sink.clone(), actor.to_string());
    let events = move |w: &MaintenanceWindow| {
        let instances = crate::engine::maintenance::instances_of(w, &cat);
        let mut events =
            vec![Event::operator(now, &who, "maintenance.delete", &w.id).with_window(instances.clone(), &w.reason)];
        if w.open_since.is_some() {
            events.push(
                Event::operator(now, "scheduler", "maintenance.end", &w.id)
                    .with_window(instances, &w.reason)
                    .in_maintenance(true),
            );
        }
        events.iter().filter_map(|e| sink.stage(e)).collect()
    };
    let i = id.to_string();
    let removed = with_store(cx, move |s| s.delete_maintenance_with_events(&i, events)).await?;
    cx.engine.remove_maintenance(id);
    let window = removed.ok_or_else(|| ServiceError::NotFound(Missing::MaintenanceWindow(id.to_string())))?;
    tracing::info!(
        window = %id,
        target = %window.target.describe(),
        actor,
        maintenance = window.open_since.is_some().then_some(true),
        "maintenance window ended"
    );
    Ok(window)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BudgetConfig, InstanceConfig};

    fn catalog() -> Catalog {
        let mut web = InstanceConfig::new("web-1", "http", "http://127.0.0.1:1/");
        web.budget = Some("org".into());
        let budgets = vec![BudgetConfig {
            name: "org".into(),
            requests_per_second: 10.0,
            shared_fraction: 1.0,
            burst: 10,
        }];
        let mut cat = Catalog::new(vec![], budgets);
        cat.insert(web, false);
        cat
    }

    fn now() -> Timestamp {
        maintenance::parse_rfc3339("2026-12-04T12:00:00Z").expect("time")
    }

    fn input(json: serde_json::Value) -> MaintenanceInput {
        serde_json::from_value(json).expect("input")
    }

    fn field_of(json: serde_json::Value) -> String {
        let errs = check(&input(json), &catalog(), now()).expect_err("refused");
        errs[0].field.clone()
    }

    #[test]
    fn a_span_from_now_for_a_duration() {
        let c = check(
            &input(serde_json::json!({"instances": ["web-1"], "duration": "2h", "reason": "upgrade"})),
            &catalog(),
            now(),
        )
        .expect("valid");
        assert_eq!(c.target, MaintenanceTarget::Instances(vec!["web-1".into()]));
        assert_eq!(
            c.schedule,
            Schedule::Once {
                start: now(),
                end: now().plus(Duration::from_secs(7200))
            }
        );
        assert_eq!(c.reason, "upgrade");
    }

    #[test]
    fn a_weekly_repeat_in_a_time_zone() {
        let c = check(
            &input(serde_json::json!({"pool": "org", "days": ["sun"], "at": "02:30", "duration": "1h", "timezone": "Europe/Berlin"})),
            &catalog(),
            now(),
        )
        .expect("valid");
        assert!(matches!(c.schedule, Schedule::Weekly(_)));
        assert!(
            check(
                &input(serde_json::json!({"type": "http", "days": ["mon"], "at": "00:00", "duration": "7d"})),
                &catalog(),
                now()
            )
            .is_ok()
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        use serde_json::json;
        assert_eq!(field_of(json!({"instances": ["nope"], "duration": "1h"})), "instances");
        assert_eq!(field_of(json!({"pool": "nope", "duration": "1h"})), "pool");
        assert_eq!(field_of(json!({"type": "nope", "duration": "1h"})), "type");
        assert_eq!(field_of(json!({"duration": "1h"})), "instances");
        assert_eq!(
            field_of(json!({"instances": ["web-1"], "pool": "org", "duration": "1h"})),
            "pool"
        );
        assert_eq!(
            field_of(json!({"instances": ["web-1"], "start": "2026-12-04T14:00:00Z", "end": "2026-12-04T13:00:00Z"})),
            "end"
        );
        assert_eq!(field_of(json!({"instances": ["web-1"], "duration": "8d"})), "duration");
        assert_eq!(
            field_of(json!({"instances": ["web-1"], "start": "2026-12-04T14:00:00Z", "end": "2026-12-12T14:00:00Z"})),
            "end"
        );
        assert_eq!(
            field_of(
                json!({"instances": ["web-1"], "days": ["mon"], "at": "02:00", "duration": "1h", "timezone": "Mars/Base"})
            ),
            "timezone"
        );
        assert_eq!(
            field_of(json!({"instances": ["web-1"], "days": ["mon"], "at": "25:00", "duration": "1h"})),
            "at"
        );
        assert_eq!(
            field_of(json!({"instances": ["web-1"], "days": ["someday"], "at": "02:00", "duration": "1h"})),
            "days"
        );
        assert_eq!(
            field_of(json!({"instances": ["web-1"], "start": "tomorrow", "duration": "1h"})),
            "start"
        );
        assert_eq!(field_of(json!({"instances": ["web-1"]})), "end");
        assert_eq!(
            field_of(json!({"instances": ["web-1"], "end": "2026-12-04T11:00:00Z"})),
            "end"
        );
    }
}

//! `/instances/{name}`: one instance as the scheduler sees it. A row per
//! task (state, intervals, next run, last success and error, breaker), the
//! values its rules extracted from the last good poll with their age, a
//! link to the kept body, and a Test button that polls once now and shows
//! what the rules extract. Read-only: edits live on `/instances/{name}/edit`.

use super::{Layout, layout};
use crate::core::task::breaker_at;
use crate::engine::snapshot::{TaskPhase, TaskView};
use crate::model::{TaskKey, Timestamp, human_secs};
use crate::web::AppState;
use crate::web::api::data::{GroupData, ValueView, instance_data};
use crate::web::api::instances::TestResult;
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tower_sessions::Session;

/// One task of the instance.
pub struct TaskLine {
    pub group: String,
    pub priority: u8,
    /// A state key (also the badge's class): `queued`, `in_flight`,
    /// `dead_letter`, `discarded`, `held`, `rate_limited`.
    pub state: &'static str,
    /// The state in words, e.g. `held (shed)`.
    pub state_label: String,
    pub interval: String,
    pub planned: String,
    pub next_run: String,
    pub last_success: String,
    pub last_error: String,
    pub breaker: &'static str,
    pub failures: u32,
}

/// One extracted sample.
pub struct ValueLine {
    pub metric: String,
    /// `{name="a", id="qemu/100"}`, or empty without labels.
    pub labels: String,
    pub value: String,
}

/// One group's latest values.
pub struct ValueGroup {
    pub group: String,
    pub polled_at: String,
    pub age: String,
    pub fresh: bool,
    pub values: Vec<ValueLine>,
    /// Links to kept bodies: (label, URL).
    pub bodies: Vec<(String, String)>,
    /// Why a group that keeps its body has none to link to.
    pub body_note: String,
}

/// One group's result of a test poll.
pub struct TestLine {
    pub group: String,
    pub ok: bool,
    pub summary: String,
    pub values: Option<Vec<ValueLine>>,
    /// `metric: reason × count`.
    pub value_errors: Vec<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "instance.html")]
pub struct InstancePage {
    pub layout: Layout,
    pub name: String,
    pub type_name: String,
    pub url: String,
    pub enabled: bool,
    pub provisioned: bool,
    pub tasks: Vec<TaskLine>,
    pub data: Vec<ValueGroup>,
    /// The result of a test run without script (the form posts it).
    pub test: Option<Vec<TestLine>>,
}

#[derive(Template, WebTemplate)]
#[template(
    source = r#"{% extends "base.html" %}{% block content %}<h1>No such instance</h1><p>{{ message }}</p><p><a href="/instances">All instances</a></p>{% endblock %}"#,
    ext = "html"
)]
pub struct MissingPage {
    pub layout: Layout,
    pub message: String,
}

fn when(t: Option<Timestamp>) -> String {
    t.map(|t| t.to_rfc3339().replace('T', " ").replace('Z', " UTC"))
        .unwrap_or_else(|| "never".into())
}

/// What a task is doing, as a key and in words. A task whose polls since
/// its last success only got 429s is `rate_limited`, not "queued" as if
/// all were well: a 429 leaves its failure streak and breaker alone, so
/// nothing else would show it.
pub fn state_of(t: &TaskView) -> (&'static str, String) {
    match t.phase {
        TaskPhase::Discarded => ("discarded", "discarded".into()),
        TaskPhase::Held(h) => ("held", format!("held ({h})")),
        _ if t.rec.dead_letter.is_some() => ("dead_letter", "dead-lettered".into()),
        _ if t.rec.last_error.as_ref().is_some_and(|e| e.is_rate_limited()) => ("rate_limited", "rate_limited".into()),
        TaskPhase::InFlight => ("in_flight", "in flight".into()),
        TaskPhase::Queued => ("queued", "queued".into()),
    }
}

fn task_line(v: &TaskView, now: Timestamp) -> TaskLine {
    let (state, state_label) = state_of(v);
    let t = v;
    let next_run = match t.phase {
        TaskPhase::Held(_) | TaskPhase::Discarded => "—".to_string(),
        TaskPhase::InFlight => "now (running)".to_string(),
        TaskPhase::Queued => {
            let at = t.rec.next_run;
            if at <= now {
                "due now".to_string()
            } else {
                format!("{} (in {})", when(Some(at)), human_secs(at.since(now).as_secs_f64()))
            }
        }
    };
    TaskLine {
        group: t.key.group.to_string(),
        priority: t.priority,
        state,
        state_label,
        interval: human_secs(v.interval.as_secs_f64()),
        planned: human_secs(t.planned.as_secs_f64()),
        next_run,
        last_success: when(t.rec.last_success),
        last_error: t
            .rec
            .last_error
            .as_ref()
            .map(|e| match e.status {
                Some(s) => format!("{} (HTTP {s}, {})", e.message, e.category.as_str()),
                None => format!("{} ({})", e.message, e.category.as_str()),
            })
            .unwrap_or_default(),
        breaker: breaker_at(&t.rec, now).as_str(),
        failures: t.rec.failures,
    }
}

fn value_line(v: &ValueView) -> ValueLine {
    let labels = if v.labels.is_empty() {
        String::new()
    } else {
        let inner: Vec<String> = v.labels.iter().map(|(k, val)| format!("{k}={val:?}")).collect();
        format!("{{{}}}", inner.join(", "))
    };
    ValueLine {
        metric: v.metric.clone(),
        labels,
        value: v.value.to_string(),
    }
}

fn value_group(g: &GroupData) -> ValueGroup {
    let mut bodies: Vec<(String, String)> = g.body.iter().map(|u| ("last body".to_string(), u.clone())).collect();
    let mut notes = Vec::new();
    for b in &g.body_items {
        match &b.url {
            Some(u) => bodies.push((format!("body of {}", b.item), u.clone())),
            None => notes.push(format!(
                "the body of {} ({} bytes) was too large to keep",
                b.item, b.bytes
            )),
        }
    }
    match g.body_note.as_deref() {
        Some("too_large") => notes.push("the last body was larger than max_body_bytes and was not kept".into()),
        Some("none_yet") => notes.push("no body kept yet".into()),
        _ => {}
    }
    ValueGroup {
        group: g.group.clone(),
        polled_at: g
            .polled_at
            .as_deref()
            .map(|t| t.replace('T', " ").replace('Z', " UTC"))
            .unwrap_or_else(|| "never".into()),
        age: g.age_seconds.map(human_secs).unwrap_or_else(|| "—".into()),
        fresh: g.fresh,
        values: g.values.iter().map(value_line).collect(),
        bodies,
        body_note: notes.join("; "),
    }
}

fn test_line(r: &TestResult) -> TestLine {
    let summary = match &r.error {
        None => format!("OK, HTTP {} in {} ms", r.status.unwrap_or(0), r.duration_ms),
        Some(e) => format!(
            "{} error{}: {} ({} ms)",
            e.category.as_str(),
            r.status.map(|s| format!(", HTTP {s}")).unwrap_or_default(),
            e.message,
            r.duration_ms
        ),
    };
    TestLine {
        group: r.group.clone(),
        ok: r.ok,
        summary,
        values: r.values.as_ref().map(|v| v.iter().map(value_line).collect()),
        value_errors: r
            .value_errors
            .iter()
            .map(|e| format!("{}: {} × {}", e.metric, e.reason, e.count))
            .collect(),
    }
}

/// The page of `name`, with a test's results if one was just run; a 404
/// page for an unknown instance.
pub async fn render(app: &AppState, session: &Session, name: &str, test: Option<&[TestResult]>) -> Response {
    let cat = app.engine.catalog();
    let Some(entry) = cat.instances.get(name) else {
        let message = format!("There is no instance named {name:?}.");
        let page = MissingPage {
            layout: layout(
                app,
                session,
                "No such instance",
                "instances",
                vec![("Instances", "/instances")],
            )
            .await,
            message,
        };
        return (StatusCode::NOT_FOUND, page).into_response();
    };
    let keys: Vec<TaskKey> = cat
        .types
        .get(&entry.config.type_name)
        .map(|t| t.groups.iter().map(|g| TaskKey::new(name, &g.name)).collect())
        .unwrap_or_default();
    let now = app.engine.now();
    let tasks = app.engine.tasks_of(&keys).iter().map(|v| task_line(v, now)).collect();
    let data = instance_data(app, name, now)
        .map(|d| d.groups.iter().map(value_group).collect())
        .unwrap_or_default();
    InstancePage {
        layout: layout(
            app,
            session,
            format!("Instance {name}"),
            "instances",
            vec![("Instances", "/instances"), ("Instance", "")],
        )
        .await,
        name: name.to_string(),
        type_name: entry.config.type_name.clone(),
        url: crate::service::redact::mask_url(&entry.config.url),
        enabled: entry.config.enabled,
        provisioned: entry.provisioned,
        tasks,
        data,
        test: test.map(|rs| rs.iter().map(test_line).collect()),
    }
    .into_response()
}

pub async fn page(State(app): State<AppState>, session: Session, Path(name): Path<String>) -> Response {
    render(&app, &session, &name, None).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeadLetterRecord, ErrorCategory, ErrorKind, PollError, TaskRecord};
    use std::time::Duration;

    fn view(phase: TaskPhase, rec: TaskRecord) -> TaskView {
        TaskView {
            key: TaskKey::new("a", "probe"),
            priority: 1,
            planned: Duration::from_secs(5),
            phase,
            rec,
            interval: Duration::from_secs(5),
        }
    }

    fn rate_limited() -> TaskRecord {
        TaskRecord {
            last_error: Some(PollError::new(
                ErrorCategory::Transient,
                ErrorKind::RateLimited,
                "HTTP 429",
            )),
            ..Default::default()
        }
    }

    #[test]
    fn a_task_that_only_got_429s_is_rate_limited_unless_parked_or_dead_lettered() {
        let (queued, running) = (TaskPhase::Queued, TaskPhase::InFlight);
        assert_eq!(state_of(&view(queued, TaskRecord::default())).0, "queued");
        assert_eq!(state_of(&view(running, TaskRecord::default())).0, "in_flight");
        assert_eq!(state_of(&view(queued, rate_limited())).0, "rate_limited");
        assert_eq!(state_of(&view(running, rate_limited())).0, "rate_limited");
        let held = view(TaskPhase::Held("shed"), rate_limited());
        assert_eq!(state_of(&held), ("held", "held (shed)".to_string()));
        let gone = view(TaskPhase::Discarded, rate_limited());
        assert_eq!(state_of(&gone).0, "discarded");
        let dead = TaskRecord {
            dead_letter: Some(DeadLetterRecord::default()),
            ..rate_limited()
        };
        assert_eq!(state_of(&view(queued, dead)).1, "dead-lettered");
    }

    #[test]
    fn labels_read_like_the_exposition() {
        let v = ValueView {
            metric: "pve_up".into(),
            labels: [
                ("id".to_string(), "qemu/100".to_string()),
                ("name".to_string(), "a\"b".to_string()),
            ]
            .into_iter()
            .collect(),
            value: 0.5,
        };
        let line = value_line(&v);
        assert_eq!(line.labels, r#"{id="qemu/100", name="a\"b"}"#);
        assert_eq!(line.value, "0.5");
    }
}

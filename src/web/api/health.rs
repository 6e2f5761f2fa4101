//! Scheduler health (§6): `/healthz`, `/readyz` and
//! `GET /api/monitoring/scheduler/health` in exactly the documented shape,
//! plus `queue.inFlight` and `partial` (fan-out runs that succeeded with
//! some items failing, and those items).

use crate::core::task::breaker_at;
use crate::model::{BreakerState, Timestamp};
use crate::web::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use std::time::Duration;

/// `dueWithinSeconds` counts tasks due within this window.
pub const DUE_WINDOW: Duration = Duration::from_secs(12);
/// `deadLetter.tasks` holds at most this many, most recent first.
pub const DEAD_LETTER_SHOWN: usize = 25;

pub async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

pub async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    match app.shared.readiness(Timestamp::now()) {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready", "reason": reason})),
        ),
    }
}

fn ts(t: Option<Timestamp>) -> Value {
    t.map(|t| Value::String(t.to_rfc3339())).unwrap_or(Value::Null)
}

/// One dead-letter entry as the API shows it.
pub fn dead_letter_json(t: &crate::core::scheduler::Task) -> Value {
    let dl = t.rec.dead_letter.as_ref();
    json!({
        "instance": &*t.key.instance,
        "type": &*t.meta.type_name,
        "group": &*t.key.group,
        "nextRun": ts(dl.map(|d| d.next_recheck)),
        "lastError": t.rec.last_error.as_ref().map(|e| e.message.clone()),
        "failures": t.rec.failures,
        "reason": dl.map(|d| d.reason),
        "since": ts(dl.map(|d| d.since)),
        "status": t.rec.last_error.as_ref().and_then(|e| e.status),
        "category": t.rec.last_error.as_ref().map(|e| e.category),
        "kind": t.rec.last_error.as_ref().map(|e| e.kind),
    })
}

/// The health document, serialised.
pub fn health_document(app: &AppState, now: Timestamp) -> Vec<u8> {
    /// What the per-task lists need of one task, copied out under the
    /// scheduler lock so that building the document (sorting, JSON) does not
    /// hold up dispatching and completions.
    struct Row {
        key: crate::model::TaskKey,
        type_name: std::sync::Arc<str>,
        breaker: BreakerState,
        failures: u32,
        retry_at: Option<Timestamp>,
        last_success: Option<Timestamp>,
        failed_items: Vec<crate::model::FailedItem>,
    }
    let (enabled, max_interval, per_type, depth, due, in_flight, dead_count, dead_shown, mut rows) = {
        let s = app.shared.sched();
        let settings = s.settings();
        let per_type: serde_json::Map<String, Value> = s
            .queued_per_type()
            .into_iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let dead = s.dead_letters();
        let dead_shown: Vec<Value> = dead
            .iter()
            .take(DEAD_LETTER_SHOWN)
            .map(|t| dead_letter_json(t))
            .collect();
        let rows: Vec<Row> = s
            .tasks()
            .filter(|t| !t.rec.disabled)
            .map(|t| Row {
                key: t.key.clone(),
                type_name: t.meta.type_name.clone(),
                breaker: breaker_at(&t.rec, now),
                failures: t.rec.failures,
                retry_at: t.rec.retry_at,
                last_success: t.rec.last_success,
                failed_items: t.rec.failed_items.clone(),
            })
            .collect();
        (
            settings.adaptive.enabled,
            settings.adaptive.max_interval,
            per_type,
            s.queue_len(),
            s.due_within(now, DUE_WINDOW),
            s.in_flight(),
            dead.len(),
            dead_shown,
            rows,
        )
    };
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    let mut breakers = Vec::new();
    let mut partial = Vec::new();
    for t in &rows {
        if t.breaker != BreakerState::Closed {
            breakers.push(json!({
                "instance": &*t.key.instance,
                "type": &*t.type_name,
                "group": &*t.key.group,
                "state": t.breaker.as_str(),
                "failures": t.failures,
                "retryAt": ts(t.retry_at),
            }));
        }
        if !t.failed_items.is_empty() {
            partial.push(json!({
                "instance": &*t.key.instance,
                "type": &*t.type_name,
                "group": &*t.key.group,
                "failedItems": t.failed_items.iter().map(|f| json!({
                    "item": f.item,
                    "message": f.error.message,
                    "status": f.error.status,
                    "category": f.error.category,
                })).collect::<Vec<_>>(),
            }));
        }
    }
    // The staleness list has a row per task: typed rows serialised straight
    // to bytes, not built as JSON maps first.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Staleness<'a> {
        instance: &'a str,
        #[serde(rename = "type")]
        type_name: &'a str,
        group: &'a str,
        score: f64,
        last_success: Option<String>,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Document<'a> {
        updated_at: String,
        enabled: bool,
        queue: Value,
        dead_letter: Value,
        breakers: Vec<Value>,
        staleness: Vec<Staleness<'a>>,
        partial: Vec<Value>,
    }
    let staleness = rows
        .iter()
        .map(|t| {
            let score = crate::core::staleness::score(t.last_success, now, max_interval);
            Staleness {
                instance: &t.key.instance,
                type_name: &t.type_name,
                group: &t.key.group,
                score: (score * 1000.0).round() / 1000.0,
                last_success: t.last_success.map(|t| t.to_rfc3339()),
            }
        })
        .collect();
    let doc = Document {
        updated_at: now.to_rfc3339(),
        enabled,
        queue: json!({
            "depth": depth,
            "dueWithinSeconds": due,
            "perType": per_type,
            "inFlight": in_flight,
        }),
        dead_letter: json!({
            "count": dead_count,
            "tasks": dead_shown,
        }),
        breakers,
        staleness,
        partial,
    };
    serde_json::to_vec(&doc).unwrap_or_default()
}

pub async fn scheduler_health(State(app): State<AppState>) -> impl IntoResponse {
    let arrived = std::time::Instant::now();
    let body = {
        let _slot = app.web.render_slot.acquire().await;
        // A document whose build started after this request arrived is as
        // fresh as one built now: concurrent requests share it.
        let cached = app.web.health_cache.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match cached {
            Some((started, doc)) if started >= arrived => doc,
            _ => {
                let started = std::time::Instant::now();
                let shared = app.clone();
                let doc = tokio::task::spawn_blocking(move || health_document(&shared, Timestamp::now()))
                    .await
                    .map(axum::body::Bytes::from)
                    .unwrap_or_default();
                *app.web.health_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some((started, doc.clone()));
                doc
            }
        }
    };
    ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
}

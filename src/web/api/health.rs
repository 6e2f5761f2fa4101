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

pub fn health_document(app: &AppState, now: Timestamp) -> Value {
    let s = app.shared.sched();
    let settings = s.settings();
    let per_type: serde_json::Map<String, Value> = s
        .queued_per_type()
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let dead = s.dead_letters();
    let mut breakers = Vec::new();
    let mut staleness = Vec::with_capacity(s.len());
    let mut partial = Vec::new();
    let mut tasks: Vec<_> = s.tasks().filter(|t| !t.rec.disabled).collect();
    tasks.sort_by(|a, b| a.key.cmp(&b.key));
    for t in tasks {
        let state = breaker_at(&t.rec, now);
        if state != BreakerState::Closed {
            breakers.push(json!({
                "instance": &*t.key.instance,
                "type": &*t.meta.type_name,
                "group": &*t.key.group,
                "state": state.as_str(),
                "failures": t.rec.failures,
                "retryAt": ts(t.rec.retry_at),
            }));
        }
        if !t.rec.failed_items.is_empty() {
            partial.push(json!({
                "instance": &*t.key.instance,
                "type": &*t.meta.type_name,
                "group": &*t.key.group,
                "failedItems": t.rec.failed_items.iter().map(|f| json!({
                    "item": f.item,
                    "message": f.error.message,
                    "status": f.error.status,
                    "category": f.error.category,
                })).collect::<Vec<_>>(),
            }));
        }
        let score = crate::core::staleness::score(t.rec.last_success, now, settings.adaptive.max_interval);
        staleness.push(json!({
            "instance": &*t.key.instance,
            "type": &*t.meta.type_name,
            "group": &*t.key.group,
            "score": (score * 1000.0).round() / 1000.0,
            "lastSuccess": ts(t.rec.last_success),
        }));
    }
    json!({
        "updatedAt": now.to_rfc3339(),
        "enabled": settings.adaptive.enabled,
        "queue": {
            "depth": s.queue_len(),
            "dueWithinSeconds": s.due_within(now, DUE_WINDOW),
            "perType": per_type,
            "inFlight": s.in_flight(),
        },
        "deadLetter": {
            "count": dead.len(),
            "tasks": dead.iter().take(DEAD_LETTER_SHOWN).map(|t| dead_letter_json(t)).collect::<Vec<_>>(),
        },
        "breakers": breakers,
        "staleness": staleness,
        "partial": partial,
    })
}

pub async fn scheduler_health(State(app): State<AppState>) -> impl IntoResponse {
    Json(health_document(&app, Timestamp::now()))
}

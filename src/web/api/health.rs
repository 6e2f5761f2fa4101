//! Scheduler health (§6): `/healthz`, `/readyz` and
//! `GET /api/monitoring/scheduler/health` in exactly the documented shape,
//! plus `queue.inFlight` and `partial` (fan-out runs that succeeded with
//! some items failing, and those items). The document is the engine's
//! [`Snapshot`](crate::engine::snapshot::Snapshot) in JSON, the same one the
//! dashboard and `/metrics` show.

use crate::engine::snapshot::{DeadLetterEntry, Detail};
use crate::model::Timestamp;
use crate::web::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

pub async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

pub async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    match app.shared.readiness(app.shared.now()) {
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
pub fn dead_letter_json(d: &DeadLetterEntry) -> Value {
    let err = d.last_error.as_ref();
    json!({
        "instance": &*d.key.instance,
        "type": &*d.type_name,
        "group": &*d.key.group,
        "nextRun": ts(Some(d.dead_letter.next_recheck)),
        "lastError": err.map(|e| e.message.clone()),
        "failures": d.failures,
        "reason": d.dead_letter.reason,
        "since": ts(Some(d.dead_letter.since)),
        "status": err.and_then(|e| e.status),
        "category": err.map(|e| e.category),
        "kind": err.map(|e| e.kind),
    })
}

/// The health document, serialised: the engine's snapshot (taken under the
/// scheduler lock), turned into JSON after the lock is released.
pub fn health_document(app: &AppState, now: Timestamp) -> Vec<u8> {
    let snap = app.shared.snapshot(now, Detail::EveryTask);
    let per_type: serde_json::Map<String, Value> = snap
        .per_type
        .iter()
        .filter(|t| t.queued > 0)
        .map(|t| (t.name.to_string(), json!(t.queued)))
        .collect();
    let breakers: Vec<Value> = snap
        .breakers
        .iter()
        .map(|b| {
            json!({
                "instance": &*b.key.instance,
                "type": &*b.type_name,
                "group": &*b.key.group,
                "state": b.state.as_str(),
                "failures": b.failures,
                "retryAt": ts(b.retry_at),
            })
        })
        .collect();
    let partial: Vec<Value> = snap
        .partial
        .iter()
        .map(|t| {
            json!({
                "instance": &*t.key.instance,
                "type": &*t.type_name,
                "group": &*t.key.group,
                "failedItems": t.failed_items.iter().map(|f| json!({
                    "item": f.item,
                    "message": f.error.message,
                    "status": f.error.status,
                    "category": f.error.category,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
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
    let staleness = snap
        .every_task
        .iter()
        .map(|t| Staleness {
            instance: &t.key.instance,
            type_name: &t.type_name,
            group: &t.key.group,
            score: (t.score * 1000.0).round() / 1000.0,
            last_success: t.last_success.map(|t| t.to_rfc3339()),
        })
        .collect();
    let doc = Document {
        updated_at: now.to_rfc3339(),
        enabled: snap.adaptive_enabled,
        queue: json!({
            "depth": snap.queue.depth,
            "dueWithinSeconds": snap.queue.due_soon,
            "perType": per_type,
            "inFlight": snap.queue.in_flight,
        }),
        dead_letter: json!({
            "count": snap.dead_letter_count,
            "tasks": snap.dead_letters.iter().map(dead_letter_json).collect::<Vec<_>>(),
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
                let doc = tokio::task::spawn_blocking(move || health_document(&shared, shared.shared.now()))
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

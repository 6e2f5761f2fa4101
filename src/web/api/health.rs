//! Scheduler health (§6): `/healthz`, `/readyz` and
//! `GET /api/monitoring/scheduler/health` in exactly the documented shape,
//! plus `queue.inFlight` and `partial` (fan-out runs that succeeded with
//! some items failing, and those items). The document is the engine's
//! [`Snapshot`](crate::engine::snapshot::Snapshot) in JSON, the same one the
//! dashboard and `/metrics` show.

use super::schema;
use crate::engine::snapshot::{DeadLetterEntry, Detail};
use crate::model::{DeadLetterReason, ErrorCategory, ErrorKind, Timestamp};
use crate::web::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

pub async fn healthz() -> impl IntoResponse {
    Json(Probe {
        status: "ok",
        reason: None,
    })
}

pub async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    match app.engine.readiness(app.engine.now()) {
        Ok(()) => (
            StatusCode::OK,
            Json(Probe {
                status: "ready",
                reason: None,
            }),
        ),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Probe {
                status: "not_ready",
                reason: Some(reason),
            }),
        ),
    }
}

fn ts(t: Option<Timestamp>) -> Option<String> {
    t.map(|t| t.to_rfc3339())
}

/// `GET /healthz` and `/readyz` (no token, not part of the API document):
/// `{"status": ...}`, with the reason when not ready.
#[derive(Debug, Serialize)]
pub struct Probe {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One entry of the dead-letter queue.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterTask {
    pub instance: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub group: String,
    /// RFC 3339: the next recheck.
    #[schema(required = true, format = DateTime)]
    pub next_run: Option<String>,
    /// The last error's message.
    #[schema(required = true)]
    pub last_error: Option<String>,
    pub failures: u32,
    #[schema(schema_with = schema::dead_letter_reason)]
    pub reason: DeadLetterReason,
    #[schema(format = DateTime)]
    pub since: Option<String>,
    /// The HTTP status of the last error, if it had one.
    pub status: Option<u16>,
    #[schema(schema_with = schema::error_category_or_null)]
    pub category: Option<ErrorCategory>,
    #[schema(schema_with = schema::error_kind_or_null)]
    pub kind: Option<ErrorKind>,
}

/// One dead-letter entry as the API shows it.
pub fn dead_letter_task(d: &DeadLetterEntry) -> DeadLetterTask {
    let err = d.last_error.as_ref();
    DeadLetterTask {
        instance: d.key.instance.to_string(),
        type_name: d.type_name.to_string(),
        group: d.key.group.to_string(),
        next_run: ts(Some(d.dead_letter.next_recheck)),
        last_error: err.map(|e| e.message.clone()),
        failures: d.failures,
        reason: d.dead_letter.reason,
        since: ts(Some(d.dead_letter.since)),
        status: err.and_then(|e| e.status),
        category: err.map(|e| e.category),
        kind: err.map(|e| e.kind),
    }
}

/// The scheduler health document (§6).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Health)]
pub struct HealthDocument<'a> {
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// Whether adaptive scheduling is on.
    pub enabled: bool,
    #[schema(inline)]
    pub queue: QueueFigures<'a>,
    #[schema(inline)]
    pub dead_letter: DeadLetterSummary,
    pub breakers: Vec<Breaker<'a>>,
    pub staleness: Vec<Staleness<'a>>,
    #[schema(required = false)]
    pub partial: Vec<PartialTask<'a>>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueFigures<'a> {
    pub depth: usize,
    pub due_within_seconds: usize,
    /// Queued tasks by instance type (types with none are left out).
    pub per_type: BTreeMap<&'a str, usize>,
    #[schema(required = false)]
    pub in_flight: usize,
}

#[derive(Serialize, ToSchema)]
pub struct DeadLetterSummary {
    pub count: usize,
    /// The most recent entries.
    #[schema(max_items = 25)]
    pub tasks: Vec<DeadLetterTask>,
}

/// A breaker that is not closed.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Breaker<'a> {
    pub instance: &'a str,
    #[serde(rename = "type")]
    pub type_name: &'a str,
    #[schema(required = false)]
    pub group: &'a str,
    #[schema(schema_with = schema::breaker_state)]
    pub state: &'static str,
    pub failures: u32,
    #[schema(required = true, format = DateTime)]
    pub retry_at: Option<String>,
}

/// How stale one task is (a row per task, serialised straight to bytes).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Staleness<'a> {
    pub instance: &'a str,
    #[serde(rename = "type")]
    pub type_name: &'a str,
    #[schema(required = false)]
    pub group: &'a str,
    #[schema(minimum = 0, maximum = 1)]
    pub score: f64,
    #[schema(required = true, format = DateTime)]
    pub last_success: Option<String>,
}

/// A fan-out run that succeeded with some items failing.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartialTask<'a> {
    pub instance: &'a str,
    #[serde(rename = "type")]
    pub type_name: &'a str,
    pub group: &'a str,
    pub failed_items: Vec<FailedItemView<'a>>,
}

#[derive(Serialize, ToSchema)]
pub struct FailedItemView<'a> {
    pub item: &'a str,
    pub message: &'a str,
    pub status: Option<u16>,
    #[schema(schema_with = schema::error_category)]
    pub category: ErrorCategory,
}

/// The health document, serialised: the engine's snapshot (taken under the
/// scheduler lock), turned into JSON after the lock is released.
pub fn health_document(app: &AppState, now: Timestamp) -> Vec<u8> {
    let snap = app.engine.snapshot(now, Detail::EveryTask);
    let doc = HealthDocument {
        updated_at: now.to_rfc3339(),
        enabled: snap.adaptive_enabled,
        queue: QueueFigures {
            depth: snap.queue.depth,
            due_within_seconds: snap.queue.due_soon,
            per_type: snap
                .per_type
                .iter()
                .filter(|t| t.queued > 0)
                .map(|t| (&*t.name, t.queued))
                .collect(),
            in_flight: snap.queue.in_flight,
        },
        dead_letter: DeadLetterSummary {
            count: snap.dead_letter_count,
            tasks: snap.dead_letters.iter().map(dead_letter_task).collect(),
        },
        breakers: snap
            .breakers
            .iter()
            .map(|b| Breaker {
                instance: &b.key.instance,
                type_name: &b.type_name,
                group: &b.key.group,
                state: b.state.as_str(),
                failures: b.failures,
                retry_at: ts(b.retry_at),
            })
            .collect(),
        staleness: snap
            .every_task
            .iter()
            .map(|t| Staleness {
                instance: &t.key.instance,
                type_name: &t.type_name,
                group: &t.key.group,
                score: (t.score * 1000.0).round() / 1000.0,
                last_success: t.last_success.map(|t| t.to_rfc3339()),
            })
            .collect(),
        partial: snap
            .partial
            .iter()
            .map(|t| PartialTask {
                instance: &t.key.instance,
                type_name: &t.type_name,
                group: &t.key.group,
                failed_items: t
                    .failed_items
                    .iter()
                    .map(|f| FailedItemView {
                        item: &f.item,
                        message: &f.error.message,
                        status: f.error.status,
                        category: f.error.category,
                    })
                    .collect(),
            })
            .collect(),
    };
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// The last health document built: when its build started, how long it
/// took, and the JSON.
#[derive(Debug, Clone)]
pub struct CachedHealth {
    pub started: std::time::Instant,
    pub took: std::time::Duration,
    pub doc: axum::body::Bytes,
}

/// A document that takes longer than this to build (a fleet of tens of
/// thousands of tasks) is shared for up to twice its build time.
const SHARED_BUILD: std::time::Duration = std::time::Duration::from_millis(50);

impl CachedHealth {
    /// Whether a request that arrived at `arrived` may be answered with
    /// this document. One whose build started after the request arrived is
    /// as fresh as one built now, so concurrent requests share it. A big
    /// one is also shared while it is younger than twice its build time:
    /// readers in a loop then spend at most a third of a core on it, and
    /// the polls keep the rest (the document says `updatedAt`).
    fn serves(&self, arrived: std::time::Instant, now: std::time::Instant) -> bool {
        self.started >= arrived || (self.took >= SHARED_BUILD && now.duration_since(self.started) < self.took * 2)
    }
}

#[utoipa::path(
    get,
    path = "/api/monitoring/scheduler/health",
    operation_id = "schedulerHealth",
    summary = "Scheduler health",
    responses((status = 200, description = "health", body = HealthDocument)),
)]
pub async fn scheduler_health(State(app): State<AppState>) -> impl IntoResponse {
    let arrived = std::time::Instant::now();
    let body = {
        let _slot = app.web.render_slot.acquire().await;
        let cached = app.web.health_cache.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match cached {
            Some(c) if c.serves(arrived, std::time::Instant::now()) => c.doc,
            _ => {
                let started = std::time::Instant::now();
                let shared = app.clone();
                let doc = tokio::task::spawn_blocking(move || health_document(&shared, shared.engine.now()))
                    .await
                    .map(axum::body::Bytes::from)
                    .unwrap_or_default();
                *app.web.health_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(CachedHealth {
                    started,
                    took: started.elapsed(),
                    doc: doc.clone(),
                });
                doc
            }
        }
    };
    ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
}

#[cfg(test)]
mod tests {
    use super::CachedHealth;
    use std::time::{Duration, Instant};

    fn built(started: Instant, took_ms: u64) -> CachedHealth {
        CachedHealth {
            started,
            took: Duration::from_millis(took_ms),
            doc: Default::default(),
        }
    }

    #[test]
    fn a_document_is_shared_by_requests_it_started_after_and_a_big_one_for_twice_its_build_time() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Started after the request arrived: as fresh as one built now.
        assert!(built(at(10), 1).serves(at(5), at(500)));
        // A small fleet's document is never reused after the fact: a
        // reader sees every change made before its request.
        assert!(!built(at(10), 1).serves(at(12), at(12)));
        assert!(!built(at(10), 49).serves(at(60), at(61)));
        // A big one is, for up to twice its build time.
        let big = built(at(10), 150);
        assert!(big.serves(at(200), at(200)));
        assert!(big.serves(at(300), at(309)));
        assert!(!big.serves(at(310), at(310)));
    }
}

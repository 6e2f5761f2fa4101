//! `/`: the scheduler health dashboard. Summaries and the top rows of each
//! list, never every task, so it stays fast with 10,000 instances; a little
//! script refreshes the panels in place (`/?fragment=panels`).

use super::{Layout, layout};
use crate::engine::snapshot::{Detail, PoolFigures};
use crate::model::{TaskKey, Timestamp};
use crate::service::dead_letters;
use crate::web::AppState;
use crate::web::chart::{Series, line_chart};
use crate::web::session;
use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use tower_sessions::Session;

/// Rows shown per list.
pub const ROWS: usize = 25;

pub struct TypeRow {
    pub name: String,
    pub queued: usize,
    pub in_flight: usize,
    pub total: usize,
}

pub struct DeadRow {
    pub instance: String,
    pub group: String,
    pub type_name: String,
    pub last_error: String,
    pub failures: u32,
    pub next_recheck: String,
}

pub struct BreakerRow {
    pub instance: String,
    pub group: String,
    pub state: &'static str,
    pub failures: u32,
    pub retry_at: String,
}

pub struct StaleRow {
    pub instance: String,
    pub group: String,
    pub pct: u32,
    pub stale: bool,
    pub last_success: String,
}

/// A budget pool as the dashboard summarises it; `/status` has the plan.
pub struct PoolRow {
    pub name: String,
    pub demand: String,
    pub effective: String,
    pub budget: String,
    pub utilization: String,
    /// Width of the utilisation bar, 0–100.
    pub bar: u32,
    pub over_budget: bool,
    pub stretched: usize,
    pub shed: usize,
}

pub struct Chart {
    pub title: &'static str,
    pub svg: String,
}

/// The window the charts cover (`?range=1h|24h`). The last hour is the
/// default, so a fresh appliance shows its first minutes at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Range {
    #[default]
    Hour,
    Day,
}

impl Range {
    pub const ALL: [Range; 2] = [Range::Hour, Range::Day];

    /// `None` for a value that names no range.
    pub fn parse(s: &str) -> Option<Range> {
        match s {
            "1h" => Some(Range::Hour),
            "24h" => Some(Range::Day),
            _ => None,
        }
    }

    /// The query value.
    pub fn key(self) -> &'static str {
        match self {
            Range::Hour => "1h",
            Range::Day => "24h",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Range::Hour => "Last hour",
            Range::Day => "Last 24 hours",
        }
    }

    pub fn secs(self) -> u64 {
        match self {
            Range::Hour => 3600,
            Range::Day => 24 * 3600,
        }
    }
}

pub struct Panels {
    pub pools: Vec<PoolRow>,
    pub enabled: bool,
    pub depth: usize,
    pub due_soon: usize,
    pub in_flight: usize,
    pub tasks: usize,
    pub per_type: Vec<TypeRow>,
    pub dead: Vec<DeadRow>,
    pub dead_total: usize,
    pub breakers: Vec<BreakerRow>,
    pub breakers_total: usize,
    pub stalest: Vec<StaleRow>,
    pub fresh: usize,
    pub aging: usize,
    pub stale: usize,
    pub range: Range,
    pub charts: Vec<Chart>,
}

impl Panels {
    /// The ranges the charts offer.
    pub fn ranges(&self) -> [Range; 2] {
        Range::ALL
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard.html")]
pub struct DashboardPage {
    pub layout: Layout,
    pub csrf: String,
    pub p: Panels,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard_panels.html")]
pub struct PanelsFragment {
    pub csrf: String,
    pub p: Panels,
}

fn pool_row(p: &PoolFigures) -> PoolRow {
    PoolRow {
        name: p.name.clone(),
        demand: format!("{:.2}", p.demand_rps),
        effective: format!("{:.2}", p.effective_rps),
        budget: format!("{:.2}", p.budget_rps),
        utilization: format!("{:.0}%", p.utilization * 100.0),
        bar: (p.utilization * 100.0).clamp(0.0, 100.0) as u32,
        over_budget: p.over_budget,
        stretched: p.stretched,
        shed: p.shed,
    }
}

fn when(t: Option<Timestamp>) -> String {
    t.map(|t| t.to_rfc3339().replace('T', " ").replace('Z', " UTC"))
        .unwrap_or_else(|| "never".into())
}

/// Everything the panels show: the engine's snapshot (the one the health
/// API and `/metrics` show), each list cut to its first [`ROWS`].
pub fn panels(app: &AppState, now: Timestamp, range: Range, history: &[(u64, crate::store::Rollup)]) -> Panels {
    let snap = app.engine.snapshot(now, Detail::Summary);
    let breakers = snap
        .breakers
        .iter()
        .take(ROWS)
        .map(|b| BreakerRow {
            instance: b.key.instance.to_string(),
            group: b.key.group.to_string(),
            state: b.state.as_str(),
            failures: b.failures,
            retry_at: when(b.retry_at),
        })
        .collect();
    let dead = snap
        .dead_letters
        .iter()
        .take(ROWS)
        .map(|d| DeadRow {
            instance: d.key.instance.to_string(),
            group: d.key.group.to_string(),
            type_name: d.type_name.to_string(),
            last_error: d.last_error.as_ref().map(|e| e.message.clone()).unwrap_or_default(),
            failures: d.failures,
            next_recheck: when(Some(d.dead_letter.next_recheck)),
        })
        .collect();
    let stalest = snap
        .stalest
        .iter()
        .take(ROWS)
        .map(|r| StaleRow {
            instance: r.key.instance.to_string(),
            group: r.key.group.to_string(),
            // A width class .w0 … .w100 (no inline style under the CSP).
            pct: (r.score * 100.0).round().clamp(0.0, 100.0) as u32,
            stale: r.stale,
            last_success: when(r.last_success),
        })
        .collect();
    // Types with enabled tasks; a type whose tasks are all disabled has
    // nothing to show here.
    let per_type = snap
        .per_type
        .iter()
        .filter(|t| t.tasks > 0)
        .map(|t| TypeRow {
            name: t.name.to_string(),
            queued: t.queued,
            in_flight: t.in_flight,
            total: t.tasks,
        })
        .collect();
    let to = now.0 / 1000;
    let from = to.saturating_sub(range.secs());
    let series = |f: fn(&crate::store::Rollup) -> u64| -> Vec<(u64, f64)> {
        history.iter().map(|(m, r)| (*m, f(r) as f64)).collect()
    };
    let depth_pts = series(|r| r.queue_depth);
    let polls_pts = series(|r| r.polls);
    let errors_pts = series(|r| r.errors);
    let charts = vec![
        Chart {
            title: "Queue depth",
            svg: line_chart(
                "Queue depth",
                from,
                to,
                &[Series {
                    label: "queued",
                    class: "depth",
                    points: &depth_pts,
                }],
                600,
                140,
            ),
        },
        Chart {
            title: "Polls per minute",
            svg: line_chart(
                "Polls per minute",
                from,
                to,
                &[Series {
                    label: "polls",
                    class: "polls",
                    points: &polls_pts,
                }],
                600,
                140,
            ),
        },
        Chart {
            title: "Errors per minute",
            svg: line_chart(
                "Errors per minute",
                from,
                to,
                &[Series {
                    label: "errors",
                    class: "errors",
                    points: &errors_pts,
                }],
                600,
                140,
            ),
        },
    ];
    Panels {
        pools: snap.pools.iter().map(pool_row).collect(),
        enabled: snap.adaptive_enabled,
        depth: snap.queue.depth,
        due_soon: snap.queue.due_soon,
        in_flight: snap.queue.in_flight,
        tasks: snap.tasks,
        per_type,
        dead,
        dead_total: snap.dead_letter_count,
        breakers,
        breakers_total: snap.breakers.len(),
        stalest,
        fresh: snap.freshness.fresh,
        aging: snap.freshness.aging,
        stale: snap.freshness.stale,
        range,
        charts,
    }
}

#[derive(Debug, Deserialize)]
pub struct DashboardQuery {
    pub fragment: Option<String>,
    pub range: Option<String>,
}

/// The stored rollups of the last `range`.
pub async fn history(app: &AppState, now: Timestamp, range: Range) -> Vec<(u64, crate::store::Rollup)> {
    let store = app.store.clone();
    let since = (now.0 / 1000).saturating_sub(range.secs());
    tokio::task::spawn_blocking(move || store.history_since(since))
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default()
}

pub async fn page(State(app): State<AppState>, session: Session, Query(q): Query<DashboardQuery>) -> Response {
    let range = match q.range.as_deref().map(Range::parse) {
        None => Range::default(),
        Some(Some(r)) => r,
        Some(None) => {
            let msg = format!(
                "Unknown chart range {:?}: use range=1h (the last hour) or range=24h (the last 24 hours).",
                q.range.as_deref().unwrap_or_default()
            );
            return (axum::http::StatusCode::BAD_REQUEST, msg).into_response();
        }
    };
    let now = app.engine.now();
    let hist = history(&app, now, range).await;
    let csrf = session::csrf_token(&session).await;
    let p = app.render(move |app| panels(app, now, range, &hist)).await;
    if q.fragment.as_deref() == Some("panels") {
        return PanelsFragment { csrf, p }.into_response();
    }
    DashboardPage {
        layout: layout(&app, &session, "Dashboard", "dashboard", vec![]).await,
        csrf,
        p,
    }
    .into_response()
}

/// What an operator action on a dead-lettered task came to, as the
/// dashboard tells it: `done`, or why not.
async fn dead_letter_outcome(
    session: &Session,
    key: &TaskKey,
    done: &str,
    result: Result<crate::model::TaskRecord, crate::service::ServiceError>,
) -> Redirect {
    let msg = match result {
        Ok(_) => format!("{key}: {done}."),
        Err(e) => format!("{key}: {}", crate::web::error::ApiError::from(e).message),
    };
    session::set_flash(session, msg).await;
    Redirect::to("/#dead-letter")
}

pub async fn retry(
    State(app): State<AppState>,
    Extension(who): Extension<crate::web::auth::Principal>,
    session: Session,
    Path((instance, group)): Path<(String, String)>,
) -> Redirect {
    let key = TaskKey::new(&instance, &group);
    let result = dead_letters::retry(&app.ctx(), &key, &who.actor()).await;
    dead_letter_outcome(&session, &key, "probing now", result).await
}

pub async fn discard(
    State(app): State<AppState>,
    Extension(who): Extension<crate::web::auth::Principal>,
    session: Session,
    Path((instance, group)): Path<(String, String)>,
) -> Redirect {
    let key = TaskKey::new(&instance, &group);
    let result = dead_letters::discard(&app.ctx(), &key, &who.actor()).await;
    dead_letter_outcome(
        &session,
        &key,
        "discarded; the task is disabled until enabled again",
        result,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::Range;

    #[test]
    fn ranges_are_an_hour_by_default_or_a_day() {
        assert_eq!(Range::default(), Range::Hour);
        for r in Range::ALL {
            assert_eq!(Range::parse(r.key()), Some(r));
        }
        assert_eq!(Range::Day.secs(), 24 * Range::Hour.secs());
        assert_eq!(Range::parse("7d"), None);
        assert_eq!(Range::parse(""), None);
    }
}

//! `/`: the scheduler health dashboard. Summaries and the top rows of each
//! list, never every task, so it stays fast with 10,000 instances; a little
//! script refreshes the panels in place (`/?fragment=panels`).

use super::{Layout, layout};
use crate::core::staleness;
use crate::core::task::breaker_at;
use crate::model::{BreakerState, TaskKey, Timestamp};
use crate::web::AppState;
use crate::web::chart::{Series, line_chart};
use crate::web::session;
use askama::Template;
use askama_web::WebTemplate;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use std::collections::BTreeMap;
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
    pub charts: Vec<Chart>,
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

fn pool_rows(app: &AppState) -> Vec<PoolRow> {
    let b = crate::engine::lock(&app.shared.budgets);
    b.plans
        .values()
        .map(|p| {
            let effective = b.effective_rps(&p.name);
            let util = if effective > 0.0 {
                p.plan.total_demand_rps / effective
            } else {
                0.0
            };
            PoolRow {
                name: p.name.clone(),
                demand: format!("{:.2}", p.plan.total_demand_rps),
                effective: format!("{effective:.2}"),
                budget: format!("{:.2}", p.plan.budget_rps),
                utilization: format!("{:.0}%", util * 100.0),
                bar: (util * 100.0).clamp(0.0, 100.0) as u32,
                over_budget: p.plan.over_budget,
                stretched: p
                    .plan
                    .groups
                    .iter()
                    .filter(|g| !g.pinned && g.stretch_factor > 1.0 + 1e-9)
                    .count(),
                shed: p.plan.groups.iter().filter(|g| g.shed).count(),
            }
        })
        .collect()
}

fn when(t: Option<Timestamp>) -> String {
    t.map(|t| t.to_rfc3339().replace('T', " ").replace('Z', " UTC"))
        .unwrap_or_else(|| "never".into())
}

/// Everything the panels show, computed under one short scheduler lock.
pub fn panels(app: &AppState, now: Timestamp, history: &[(u64, crate::store::Rollup)]) -> Panels {
    // Budgets before the scheduler: the engine's lock order.
    let pools = pool_rows(app);
    let s = app.shared.sched();
    let settings = s.settings();
    let max = settings.adaptive.max_interval;
    let queued = s.queued_per_type();
    let busy = s.in_flight_per_type();
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    let mut breakers = Vec::new();
    let mut breakers_total = 0;
    let (mut fresh, mut aging, mut stale) = (0, 0, 0);
    // Keep only the ROWS stalest: a bounded sorted vec, not a sort of all.
    let mut stalest: Vec<(u32, &TaskKey, Option<Timestamp>, bool)> = Vec::with_capacity(ROWS + 1);
    let mut tasks = 0;
    for t in s.tasks().filter(|t| !t.rec.disabled) {
        tasks += 1;
        *totals.entry(&t.meta.type_name).or_insert(0) += 1;
        let state = breaker_at(&t.rec, now);
        if state != BreakerState::Closed {
            breakers_total += 1;
            if breakers.len() < ROWS {
                breakers.push(BreakerRow {
                    instance: t.key.instance.to_string(),
                    group: t.key.group.to_string(),
                    state: state.as_str(),
                    failures: t.rec.failures,
                    retry_at: when(t.rec.retry_at),
                });
            }
        }
        let score = staleness::score(t.rec.last_success, now, max);
        let is_stale = staleness::is_stale(t.rec.last_success.unwrap_or(t.placed_at), now, s.interval_of(t));
        if is_stale {
            stale += 1;
        } else if score < 0.1 {
            fresh += 1;
        } else {
            aging += 1;
        }
        let pct = (score * 100.0).round() as u32;
        if stalest.len() < ROWS || stalest.last().is_some_and(|l| pct > l.0) {
            let pos = stalest.partition_point(|e| e.0 >= pct);
            stalest.insert(pos, (pct, &t.key, t.rec.last_success, is_stale));
            stalest.truncate(ROWS);
        }
    }
    breakers.sort_by(|a, b| (&a.instance, &a.group).cmp(&(&b.instance, &b.group)));
    let dead_all = s.dead_letters();
    let dead = dead_all
        .iter()
        .take(ROWS)
        .map(|t| DeadRow {
            instance: t.key.instance.to_string(),
            group: t.key.group.to_string(),
            type_name: t.meta.type_name.to_string(),
            last_error: t.rec.last_error.as_ref().map(|e| e.message.clone()).unwrap_or_default(),
            failures: t.rec.failures,
            next_recheck: when(t.rec.dead_letter.as_ref().map(|d| d.next_recheck)),
        })
        .collect();
    let per_type = totals
        .into_iter()
        .map(|(name, total)| TypeRow {
            name: name.to_string(),
            queued: queued.get(name).copied().unwrap_or(0),
            in_flight: busy.get(name).copied().unwrap_or(0),
            total,
        })
        .collect();
    let to = now.0 / 1000;
    let from = to.saturating_sub(24 * 3600);
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
        pools,
        enabled: settings.adaptive.enabled,
        depth: s.queue_len(),
        due_soon: s.due_within(now, crate::web::api::health::DUE_WINDOW),
        in_flight: s.in_flight(),
        tasks,
        per_type,
        dead,
        dead_total: dead_all.len(),
        breakers,
        breakers_total,
        stalest: stalest
            .into_iter()
            .map(|(pct, k, ls, st)| StaleRow {
                instance: k.instance.to_string(),
                group: k.group.to_string(),
                pct,
                stale: st,
                last_success: when(ls),
            })
            .collect(),
        fresh,
        aging,
        stale,
        charts,
    }
}

#[derive(Debug, Deserialize)]
pub struct DashboardQuery {
    pub fragment: Option<String>,
}

pub async fn history(app: &AppState, now: Timestamp) -> Vec<(u64, crate::store::Rollup)> {
    let store = app.shared.store.clone();
    let since = (now.0 / 1000).saturating_sub(24 * 3600);
    tokio::task::spawn_blocking(move || store.history_since(since))
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default()
}

pub async fn page(State(app): State<AppState>, session: Session, Query(q): Query<DashboardQuery>) -> Response {
    let now = Timestamp::now();
    let hist = history(&app, now).await;
    let csrf = session::csrf_token(&session).await;
    let p = app.render(move |app| panels(app, now, &hist)).await;
    if q.fragment.as_deref() == Some("panels") {
        return PanelsFragment { csrf, p }.into_response();
    }
    DashboardPage {
        layout: layout(&session, "Dashboard", "dashboard", vec![]).await,
        csrf,
        p,
    }
    .into_response()
}

/// Run an operator action on a dead-lettered task and come back to the
/// dashboard with the outcome.
async fn dead_letter_action(
    app: &AppState,
    who: &crate::web::auth::Principal,
    session: &Session,
    key: TaskKey,
    done: &str,
    op: crate::core::scheduler::OperatorOp,
) -> Redirect {
    let msg = match app.shared.operator_action(&key, &who.actor(), op).await {
        Ok(_) => {
            tracing::info!(task = %key, actor = %who.actor(), "dead-letter task: {done}");
            format!("{key}: {done}.")
        }
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
    dead_letter_action(
        &app,
        &who,
        &session,
        key,
        "probing now",
        crate::core::scheduler::OperatorOp::Retry,
    )
    .await
}

pub async fn discard(
    State(app): State<AppState>,
    Extension(who): Extension<crate::web::auth::Principal>,
    session: Session,
    Path((instance, group)): Path<(String, String)>,
) -> Redirect {
    let key = TaskKey::new(&instance, &group);
    dead_letter_action(
        &app,
        &who,
        &session,
        key,
        "discarded; the task is disabled until enabled again",
        crate::core::scheduler::OperatorOp::Discard,
    )
    .await
}

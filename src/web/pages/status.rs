//! `/status`: the solved plan of every budget pool. A card per pool (mode,
//! over-budget badge, configured and effective budget, demand, utilisation,
//! target, shape counts) and a table of its groups (priority, floor,
//! interval, stretch, demand, pinned, shed, last ran), stretched groups
//! highlighted. `?format=json` returns the same data as JSON.

use super::{Layout, layout};
use crate::model::{Profile, human_secs};
use crate::web::AppState;
use crate::web::api::groups::{PlanDoc, plan_doc};
use crate::web::error::QueryParams;
use crate::web::pool_view::{GroupView, PoolView};
use askama::Template;
use askama_web::WebTemplate;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tower_sessions::Session;

#[derive(Debug, Deserialize)]
pub struct StatusQuery {
    #[serde(default)]
    pub format: Format,
}

/// `?format=`: the page (default) or the same data as JSON.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Html,
    Json,
}

pub struct PoolCard {
    pub v: PoolView,
    pub mode: &'static str,
    pub profile: String,
    pub budget: String,
    pub effective: String,
    pub target: String,
    pub demand: String,
    pub utilization: String,
    /// Width of the utilisation bar, 0–100.
    pub bar: u32,
    pub rows: Vec<GroupRow>,
    pub stretched: usize,
    /// "AIMD since HH:MM, recovering at X rps/min, full budget expected at
    /// HH:MM" while AIMD holds the pool below its budget.
    pub aimd: Option<String>,
}

pub struct GroupRow {
    pub g: GroupView,
    pub floor: String,
    pub interval: String,
    pub stretch: String,
    pub demand: String,
    pub last_ran: String,
    pub stretched: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "status.html")]
pub struct StatusPage {
    pub layout: Layout,
    pub doc: PlanDoc,
    pub cards: Vec<PoolCard>,
}

fn rps(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2} rps")).unwrap_or_else(|| "—".into())
}

/// `HH:MM UTC` of a time.
fn hh_mm(t: crate::model::Timestamp) -> String {
    let s = t.to_rfc3339();
    format!("{} UTC", s.get(11..16).unwrap_or(&s))
}

/// The AIMD line of a pool card.
fn aimd_line(o: &crate::core::aimd::Outlook) -> String {
    let full = match o.full_at {
        Some(t) => format!("full budget expected at {}", hh_mm(t)),
        None => "no recovery configured".into(),
    };
    format!(
        "AIMD since {}, recovering at {:.2} rps/min, {full}",
        hh_mm(o.since),
        o.rps_per_minute
    )
}

fn card(v: PoolView, aimd: Option<String>) -> PoolCard {
    let rows: Vec<GroupRow> = v
        .groups
        .iter()
        .map(|g| GroupRow {
            floor: human_secs(g.plan.floor_s),
            interval: human_secs(g.plan.interval_s),
            stretch: format!("×{:.2}", g.plan.stretch_factor),
            demand: format!("{:.4}", g.plan.demand_rps),
            last_ran: match &g.last_ran {
                Some(Some(t)) => t.replace('T', " ").replace('Z', " UTC"),
                _ => "never".into(),
            },
            stretched: g.stretched(),
            g: g.clone(),
        })
        .collect();
    let live_util = match (v.effective_budget_rps, v.budget_rps) {
        (Some(e), Some(_)) if e > 0.0 => Some(v.total_demand_rps / e),
        _ => None,
    };
    PoolCard {
        mode: match v.mode {
            crate::model::SchedulerMode::Adaptive => "adaptive",
            crate::model::SchedulerMode::Fixed => "fixed (floors and pins only)",
        },
        profile: v.profile.map(Profile::name).unwrap_or("none (full)").to_string(),
        budget: rps(v.budget_rps),
        effective: rps(v.effective_budget_rps),
        target: match v.target_rps {
            Some(t) => format!("{t:.2} rps ({:.0}%)", v.target_utilization * 100.0),
            None => "—".into(),
        },
        demand: format!("{:.3} rps", v.total_demand_rps),
        utilization: live_util
            .map(|u| format!("{:.0}%", u * 100.0))
            .unwrap_or_else(|| "—".into()),
        bar: live_util.map(|u| (u * 100.0).clamp(0.0, 100.0) as u32).unwrap_or(0),
        stretched: rows.iter().filter(|r| r.stretched).count(),
        rows,
        v,
        aimd,
    }
}

pub async fn page(State(app): State<AppState>, session: Session, QueryParams(q): QueryParams<StatusQuery>) -> Response {
    let doc = plan_doc(&app.engine);
    if q.format == Format::Json {
        return Json(doc).into_response();
    }
    let outlook = app.engine.aimd_outlook(app.engine.now());
    let cards = doc
        .pools
        .iter()
        .cloned()
        .map(|v| {
            let aimd = outlook.get(&v.name).map(aimd_line);
            card(v, aimd)
        })
        .collect();
    StatusPage {
        layout: layout(
            &app,
            &session,
            "Plan",
            "status",
            vec![("Dashboard", "/"), ("Plan", "/status")],
        )
        .await,
        doc,
        cards,
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::aimd::Outlook;
    use crate::model::Timestamp;

    #[test]
    fn the_aimd_line_says_since_when_how_fast_and_when_the_budget_is_back() {
        let o = Outlook {
            since: Timestamp(1_796_013_600_123), // 04:40 UTC
            rps_per_minute: 1.6,
            full_at: Some(Timestamp(1_796_013_600_123 + 42 * 60_000)),
        };
        assert_eq!(
            aimd_line(&o),
            "AIMD since 04:40 UTC, recovering at 1.60 rps/min, full budget expected at 05:22 UTC"
        );
        let o = Outlook { full_at: None, ..o };
        assert!(aimd_line(&o).ends_with("no recovery configured"));
    }
}

//! `GET /api/monitoring/scheduler/groups`: the solved plan of every budget
//! pool (and the floors of unbudgeted instances), with the live effective
//! budget, any `Retry-After` pause and when each group last ran. `/status`
//! shows the same data, and `/status?format=json` returns it.

use crate::engine::Shared;
use crate::model::Timestamp;
use crate::web::AppState;
use crate::web::pool_view::{PoolView, UNBUDGETED};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, Serialize)]
pub struct PlanDoc {
    #[serde(rename = "updatedAt")]
    pub updated_at: String,
    /// RFC 3339: when the plans were last solved.
    pub solved_at: String,
    pub pools: Vec<PoolView>,
}

/// (pool, type, group).
type GroupKey = (Arc<str>, Arc<str>, Arc<str>);

/// The plan of every pool as it stands now.
pub fn plan_doc(shared: &Shared) -> PlanDoc {
    let now = shared.now();
    let reading = shared.plan_reading(now);
    let mut pools: Vec<PoolView> = reading
        .pools
        .iter()
        .map(|(p, effective)| {
            let mut v = PoolView::from_status(p);
            v.effective_budget_rps = Some(*effective);
            v
        })
        .collect();
    pools.extend(reading.unbudgeted.map(|u| PoolView::unbudgeted(u, &reading.settings)));
    for v in pools.iter_mut() {
        v.paused_until = reading.paused_until.get(&v.name).map(|t| t.to_rfc3339());
    }
    // Latest attempt per (pool, type, group); a task with no pool counts
    // under the unbudgeted view.
    let mut last: HashMap<GroupKey, Timestamp> = HashMap::new();
    for ((pool, type_name, group), at) in reading.last_attempt {
        let pool = pool.unwrap_or_else(|| Arc::from(UNBUDGETED));
        let e = last.entry((pool, type_name, group)).or_insert(at);
        *e = (*e).max(at);
    }
    for v in pools.iter_mut() {
        let pool: Arc<str> = Arc::from(v.name.as_str());
        for g in v.groups.iter_mut() {
            let key = (
                pool.clone(),
                Arc::from(g.plan.type_name.as_str()),
                Arc::from(g.plan.name.as_str()),
            );
            g.last_ran = Some(last.get(&key).map(|t| t.to_rfc3339()));
        }
    }
    PlanDoc {
        updated_at: now.to_rfc3339(),
        solved_at: reading.solved_at.to_rfc3339(),
        pools,
    }
}

pub async fn list(State(app): State<AppState>) -> Json<PlanDoc> {
    Json(plan_doc(&app.shared))
}

//! `GET /api/monitoring/scheduler/groups`: the solved plan of every budget
//! pool (and the floors of unbudgeted instances), with the live effective
//! budget, any `Retry-After` pause and when each group last ran. `/status`
//! shows the same data, and `/status?format=json` returns it.

use super::schema;
use crate::engine::EngineHandle;
use crate::model::Timestamp;
use crate::web::AppState;
use crate::web::pool_view::{PoolView, UNBUDGETED};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use utoipa::ToSchema;

/// The plan of every pool.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Plan)]
pub struct PlanDoc {
    #[serde(rename = "updatedAt")]
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// RFC 3339: when the plans were last solved.
    #[schema(format = DateTime)]
    pub solved_at: String,
    #[schema(value_type = Vec<PoolSchema>)]
    pub pools: Vec<PoolView>,
}

/// One budget pool's plan: the schema of a [`PoolView`] (the type is
/// shared with the pages and `pollster plan`; a test holds the two together).
#[derive(ToSchema)]
#[schema(as = Pool)]
#[allow(dead_code)]
pub struct PoolSchema {
    /// Pool name; "unbudgeted" for instances with no pool.
    name: String,
    #[schema(required = false, schema_with = schema::scheduler_mode)]
    mode: String,
    #[schema(required = false, schema_with = schema::profile_or_null)]
    profile: Option<String>,
    #[schema(required = true)]
    budget_rps: Option<f64>,
    #[schema(required = true)]
    effective_budget_rps: Option<f64>,
    target_utilization: f64,
    target_rps: Option<f64>,
    total_demand_rps: f64,
    utilization: Option<f64>,
    over_budget: bool,
    #[schema(required = false)]
    fits_after_shedding: bool,
    #[schema(required = false)]
    shape: BTreeMap<String, u64>,
    #[schema(required = false)]
    instances: usize,
    #[schema(required = false)]
    warnings: Vec<String>,
    #[schema(format = DateTime)]
    paused_until: Option<String>,
    #[schema(inline)]
    groups: Vec<GroupSchema>,
}

/// One endpoint group of a pool's plan: the schema of a
/// [`crate::web::pool_view::GroupView`].
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct GroupSchema {
    r#type: String,
    name: String,
    #[schema(minimum = 1, maximum = 4)]
    priority: u8,
    floor_seconds: f64,
    interval_seconds: f64,
    stretch_factor: f64,
    cost_per_cycle: f64,
    demand_rps: f64,
    pinned: bool,
    #[schema(required = false)]
    pin_below_floor: bool,
    shed: bool,
    #[schema(required = false)]
    enabled: bool,
    #[schema(required = false)]
    gated: bool,
    /// RFC 3339: the latest attempt of any of the group's tasks (null: never).
    #[schema(format = DateTime)]
    last_ran: Option<String>,
}

/// (pool, type, group).
type GroupKey = (Arc<str>, Arc<str>, Arc<str>);

/// The plan of every pool as it stands now.
pub fn plan_doc(engine: &EngineHandle) -> PlanDoc {
    let now = engine.now();
    let reading = engine.plan_reading(now);
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

#[utoipa::path(
    get,
    path = "/api/monitoring/scheduler/groups",
    operation_id = "listGroups",
    summary = "Planned interval of every endpoint group, by pool",
    responses((status = 200, description = "plan", body = PlanDoc)),
)]
pub async fn list(State(app): State<AppState>) -> Json<PlanDoc> {
    Json(plan_doc(&app.engine))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::solver::GroupPlan;
    use crate::model::{Profile, SchedulerMode};
    use crate::web::pool_view::GroupView;
    use utoipa::OpenApi;

    /// Every field a pool and a group of the plan are sent with is in the
    /// document, and every field the document requires is sent.
    #[test]
    fn the_plan_schema_names_every_field_of_the_pool_view() {
        let group = GroupView {
            plan: GroupPlan {
                type_name: "pve".into(),
                name: "nodes".into(),
                priority: 1,
                floor_s: 10.0,
                interval_s: 20.0,
                stretch_factor: 2.0,
                cost_per_cycle: 1.0,
                demand_rps: 0.05,
                pinned: false,
                pin_below_floor: false,
                shed: false,
                enabled: true,
                gated: false,
            },
            last_ran: Some(None),
        };
        let pool = PoolView {
            name: "shared".into(),
            mode: SchedulerMode::Adaptive,
            profile: Some(Profile::Standard),
            budget_rps: Some(5.0),
            effective_budget_rps: Some(5.0),
            target_utilization: 0.8,
            target_rps: Some(4.0),
            total_demand_rps: 0.05,
            utilization: Some(0.01),
            over_budget: false,
            fits_after_shedding: true,
            shape: BTreeMap::from([("nodes".into(), 3)]),
            instances: 1,
            warnings: vec![],
            paused_until: Some("2026-01-01T00:00:00Z".into()),
            groups: vec![group],
        };
        let doc = super::super::openapi::document(&["pve"]);
        let schema = &doc["components"]["schemas"]["Pool"];
        let sent = serde_json::to_value(&pool).expect("pool");
        for (schema, sent) in [
            (schema, &sent),
            (&schema["properties"]["groups"]["items"], &sent["groups"][0]),
        ] {
            let props = schema["properties"].as_object().expect("properties");
            for key in sent.as_object().expect("object").keys() {
                assert!(props.contains_key(key), "{key} is documented");
            }
            for key in schema["required"].as_array().expect("required") {
                assert!(sent.get(key.as_str().unwrap_or_default()).is_some(), "{key} is sent");
            }
        }
        assert!(super::super::openapi::ApiDoc::openapi().components.is_some());
    }
}

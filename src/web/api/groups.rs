//! `GET /api/monitoring/scheduler/groups`: every endpoint group and the
//! interval it is planned at, by pool. Until budget pools are solved, the
//! planned interval of a group is its floor, or its pin.

use crate::web::AppState;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const UNBUDGETED: &str = "unbudgeted";

pub async fn list(State(app): State<AppState>) -> Json<Value> {
    let cat = app.shared.catalog();
    let settings = app.shared.monitoring();
    // pool → (type/group → instances using it)
    let mut pools: BTreeMap<String, BTreeMap<(String, String), usize>> = BTreeMap::new();
    for e in cat.instances.values().filter(|e| e.config.enabled) {
        let pool = e.config.budget.clone().unwrap_or_else(|| UNBUDGETED.to_string());
        if let Some(t) = cat.types.get(&e.config.type_name) {
            for g in &t.groups {
                *pools
                    .entry(pool.clone())
                    .or_default()
                    .entry((t.name.clone(), g.name.clone()))
                    .or_insert(0) += 1;
            }
        }
    }
    let pools: Vec<Value> = pools
        .into_iter()
        .map(|(pool, groups)| {
            let groups: Vec<Value> = groups
                .into_iter()
                .filter_map(|((ty, g), instances)| {
                    let def = cat.types.get(&ty)?.groups.iter().find(|x| x.name == g)?;
                    let pin = settings
                        .scheduler
                        .group_interval_overrides
                        .get(&format!("{ty}/{g}"))
                        .copied();
                    let interval = pin.unwrap_or(def.floor);
                    Some(json!({
                        "type": ty,
                        "group": g,
                        "priority": def.priority,
                        "floorSeconds": def.floor.as_secs_f64(),
                        "intervalSeconds": interval.as_secs_f64(),
                        "stretch": interval.as_secs_f64() / def.floor.as_secs_f64(),
                        "pinned": pin.is_some(),
                        "cost": def.cost,
                        "instances": instances,
                    }))
                })
                .collect();
            json!({"pool": pool, "mode": settings.scheduler.mode, "groups": groups})
        })
        .collect();
    Json(json!({"pools": pools}))
}

//! The tasks a catalog implies, and the interval, pool, cost and hold the
//! solved plans give each of them.

use super::{PoolStatus, Shapes, execution_cost, hold_of, pin_of};
use crate::core::catalog::Catalog;
use crate::core::task::{Hold, TaskMeta};
use crate::model::{GroupDef, InstanceConfig, SchedulerSettings, TaskKey, TypeDef};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Every task the catalog implies: one per (enabled instance, group),
/// with the interval, pool, cost and hold the plan gives it.
pub fn tasks(
    cat: &Catalog,
    s: &SchedulerSettings,
    plans: &BTreeMap<String, PoolStatus>,
    shapes: &Shapes,
) -> Vec<(TaskKey, TaskMeta)> {
    let mut out = Vec::new();
    for e in cat.instances.values() {
        if !e.config.enabled {
            continue;
        }
        let Some(ty) = cat.types.get(&e.config.type_name) else {
            continue;
        };
        let type_name: Arc<str> = Arc::from(ty.name.as_str());
        let instance: Arc<str> = Arc::from(e.config.name.as_str());
        let pool: Option<Arc<str>> = e
            .config
            .budget
            .as_deref()
            .filter(|p| plans.contains_key(*p))
            .map(Arc::from);
        for g in &ty.groups {
            let (planned, hold) = task_plan(plans, &e.config, ty, g, shapes, s);
            out.push((
                TaskKey {
                    instance: instance.clone(),
                    group: Arc::from(g.name.as_str()),
                },
                TaskMeta {
                    type_name: type_name.clone(),
                    priority: g.priority,
                    planned,
                    pool: pool.clone(),
                    cost: execution_cost(&e.config, shapes, g).max(1.0),
                    hold,
                },
            ));
        }
    }
    out
}

/// The interval and hold a task follows under `plans`: the solved interval
/// of its group in its pool (a shed group is held), or for an unbudgeted
/// instance the group's pin or floor.
pub fn task_plan(
    plans: &BTreeMap<String, PoolStatus>,
    inst: &InstanceConfig,
    ty: &TypeDef,
    g: &GroupDef,
    shapes: &Shapes,
    s: &SchedulerSettings,
) -> (Duration, Option<Hold>) {
    let type_name = ty.name.as_str();
    let mut hold = hold_of(ty, inst, shapes, g, s.profile);
    let fixed = pin_of(s, type_name, &g.name).unwrap_or(g.floor);
    let planned = match inst.budget.as_deref().and_then(|p| plans.get(p)) {
        None => fixed,
        Some(pool) => match pool
            .plan
            .groups
            .iter()
            .find(|x| x.type_name == type_name && x.name == g.name)
        {
            Some(gp) => {
                if gp.shed && hold.is_none() {
                    hold = Some(Hold::Shed);
                }
                secs(gp.interval_s).max(Duration::from_millis(1))
            }
            None => fixed,
        },
    };
    (planned, hold)
}

/// Seconds as a `Duration`, saturating; non-finite or negative → zero.
pub fn secs(s: f64) -> Duration {
    if s.is_finite() && s > 0.0 {
        Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
    } else {
        Duration::ZERO
    }
}

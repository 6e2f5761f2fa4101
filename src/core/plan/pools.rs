//! The demand of a pool: every `type/group` its enabled instances poll,
//! with its summed cost per cycle (the solver's input), and the same for
//! the instances with no pool, which run at their pins and floors.

use super::holds::counted;
use super::{Shapes, execution_cost, pin_of, shape_count};
use crate::core::catalog::Catalog;
use crate::core::solver::{GroupInput, GroupPlan};
use crate::model::{Profile, SchedulerSettings};
use std::collections::BTreeMap;

/// The solver's view of one pool: every `type/group` its enabled instances
/// poll, in (type, group) order, and the pool's summed shape counts.
pub fn pool_inputs(
    cat: &Catalog,
    pool: &str,
    shapes: &Shapes,
    s: &SchedulerSettings,
    profile: Option<Profile>,
) -> (Vec<GroupInput>, BTreeMap<String, u64>) {
    let mut groups: BTreeMap<(String, String), GroupInput> = BTreeMap::new();
    let mut shape_totals: BTreeMap<String, u64> = BTreeMap::new();
    for e in cat.instances.values() {
        let inst = &e.config;
        if !inst.enabled || inst.budget.as_deref() != Some(pool) {
            continue;
        }
        let Some(ty) = cat.types.get(&inst.type_name) else {
            continue;
        };
        for g in ty.groups.iter().filter(|g| g.shape_from.is_some()) {
            if let Some(n) = shape_count(inst, shapes, &g.name) {
                *shape_totals.entry(g.name.clone()).or_insert(0) += n;
            }
        }
        for g in &ty.groups {
            let input = groups
                .entry((ty.name.clone(), g.name.clone()))
                .or_insert_with(|| GroupInput {
                    type_name: ty.name.clone(),
                    name: g.name.clone(),
                    priority: g.priority,
                    floor_s: g.floor.as_secs_f64(),
                    cost_per_cycle: 0.0,
                    gated: g.gated,
                    enabled: false,
                    pin_s: pin_of(s, &ty.name, &g.name).map(|d| d.as_secs_f64()),
                    running_interval_s: None,
                });
            if counted(ty, inst, shapes, g, profile) {
                input.enabled = true;
                input.cost_per_cycle += execution_cost(inst, shapes, g);
            }
        }
    }
    let mut inputs: Vec<GroupInput> = groups.into_values().collect();
    inputs.sort_by(|a, b| (a.priority, &a.type_name, &a.name).cmp(&(b.priority, &b.type_name, &b.name)));
    (inputs, shape_totals)
}

/// The instances with no pool, planned: no budget to solve against, so
/// each group runs at its pin or floor.
#[derive(Debug, Clone, PartialEq)]
pub struct Unbudgeted {
    pub instances: usize,
    /// Summed shape counts of the instances, by shape name.
    pub shape: BTreeMap<String, u64>,
    /// Every `type/group` the instances poll, in (priority, type, group)
    /// order.
    pub groups: Vec<GroupPlan>,
}

/// Plan the enabled instances with no pool (`None`: there are none).
pub fn unbudgeted(cat: &Catalog, shapes: &Shapes, s: &SchedulerSettings) -> Option<Unbudgeted> {
    let mut groups: BTreeMap<(String, String), GroupPlan> = BTreeMap::new();
    let mut instances = 0;
    let mut shape: BTreeMap<String, u64> = BTreeMap::new();
    for e in cat.instances.values() {
        let inst = &e.config;
        if !inst.enabled || inst.budget.is_some() {
            continue;
        }
        let Some(ty) = cat.types.get(&inst.type_name) else {
            continue;
        };
        instances += 1;
        for g in ty.groups.iter().filter(|g| g.shape_from.is_some()) {
            if let Some(n) = shape_count(inst, shapes, &g.name) {
                *shape.entry(g.name.clone()).or_insert(0) += n;
            }
        }
        for g in &ty.groups {
            let pin = pin_of(s, &ty.name, &g.name);
            let interval = pin.unwrap_or(g.floor).as_secs_f64();
            let v = groups
                .entry((ty.name.clone(), g.name.clone()))
                .or_insert_with(|| GroupPlan {
                    type_name: ty.name.clone(),
                    name: g.name.clone(),
                    priority: g.priority,
                    floor_s: g.floor.as_secs_f64(),
                    interval_s: interval,
                    stretch_factor: interval / g.floor.as_secs_f64(),
                    cost_per_cycle: 0.0,
                    demand_rps: 0.0,
                    pinned: pin.is_some(),
                    pin_below_floor: pin.is_some_and(|p| p < g.floor),
                    shed: false,
                    enabled: false,
                    gated: g.gated,
                });
            if counted(ty, inst, shapes, g, s.profile) {
                v.enabled = true;
                v.cost_per_cycle += execution_cost(inst, shapes, g);
                v.demand_rps = v.cost_per_cycle / v.interval_s;
            }
        }
    }
    if instances == 0 {
        return None;
    }
    let mut groups: Vec<GroupPlan> = groups.into_values().collect();
    groups.sort_by(|a, b| (a.priority, &a.type_name, &a.name).cmp(&(b.priority, &b.type_name, &b.name)));
    Some(Unbudgeted {
        instances,
        shape,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::catalog;
    use super::*;
    use crate::model::ShapeUpdate;

    #[test]
    fn a_fan_out_costs_one_request_per_item_summed_over_the_pool() {
        let cat = catalog(&[("a", Some(3), true), ("b", Some(5), true), ("off", Some(100), false)]);
        let (inputs, shape) = pool_inputs(&cat, "p", &Shapes::new(), &SchedulerSettings::default(), None);
        let per_node = inputs.iter().find(|g| g.name == "node_status").expect("group");
        assert_eq!(
            per_node.cost_per_cycle,
            2.0 * (3.0 + 5.0),
            "disabled instances do not count"
        );
        assert!(per_node.enabled);
        assert_eq!(shape.get("nodes"), Some(&8));
        // Learned items replace the configured count.
        let mut shapes = Shapes::new();
        shapes.entry("a".into()).or_default().insert(
            "nodes".into(),
            ShapeUpdate {
                count: 2,
                items: vec!["n1".into(), "n2".into()],
            },
        );
        let (inputs, _) = pool_inputs(&cat, "p", &shapes, &SchedulerSettings::default(), None);
        let per_node = inputs.iter().find(|g| g.name == "node_status").expect("group");
        assert_eq!(per_node.cost_per_cycle, 2.0 * (2.0 + 5.0));
    }
}

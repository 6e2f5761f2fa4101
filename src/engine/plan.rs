//! From the catalog to the solver and back: which groups each budget pool
//! holds, what one cycle of each costs given the pool's shape, the solved
//! plan of every pool, the plan a task follows, and the over-budget gate.
//!
//! Pure functions over plain data (the catalog, learned shapes, settings and
//! effective budgets); the engine calls them under its locks, `pollster
//! plan` and `check-config` call them on the config file alone.
//!
//! A group's identity within a pool is `type/group` (the key pins use too).
//! Its cost per cycle is the sum over the pool's enabled instances of that
//! type of `cost × items` for a fan-out group (items: the learned item list,
//! else the count set in the instance's `shape`), or `cost` otherwise.

use super::catalog::Catalog;
use crate::core::solver::{self, GroupInput, GroupPlan, Mode, PoolPlan, SolveSettings};
use crate::core::task::Hold;
use crate::model::{GroupDef, InstanceConfig, Profile, SchedulerMode, SchedulerSettings, ShapeUpdate, TypeDef};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Shapes learned from `shape_from` groups: instance → group → shape.
pub type Shapes = HashMap<String, BTreeMap<String, ShapeUpdate>>;

/// Pins by `type/group`.
pub fn pin_of(s: &SchedulerSettings, type_name: &str, group: &str) -> Option<Duration> {
    s.group_interval_overrides.get(&format!("{type_name}/{group}")).copied()
}

/// The count of shape `name` of an instance: learned, else configured.
pub fn shape_count(inst: &InstanceConfig, shapes: &Shapes, name: &str) -> Option<u64> {
    shapes
        .get(&inst.name)
        .and_then(|m| m.get(name))
        .map(|s| s.count)
        .or_else(|| inst.shape.get(name).copied())
}

/// The items a fan-out group runs over, as learned.
pub fn fan_out_items<'a>(inst: &InstanceConfig, shapes: &'a Shapes, g: &GroupDef) -> &'a [String] {
    g.fan_out
        .as_ref()
        .and_then(|f| shapes.get(&inst.name)?.get(f))
        .map(|s| s.items.as_slice())
        .unwrap_or(&[])
}

/// Requests one execution of `g` on `inst` costs, as planned: a fan-out is
/// one request per item (learned items, else the configured count).
pub fn execution_cost(inst: &InstanceConfig, shapes: &Shapes, g: &GroupDef) -> f64 {
    match &g.fan_out {
        None => g.cost,
        Some(f) => {
            let learned = fan_out_items(inst, shapes, g).len() as u64;
            let n = if learned > 0 {
                learned
            } else {
                shape_count(inst, shapes, f).unwrap_or(0)
            };
            g.cost * n as f64
        }
    }
}

/// A `shape_from` group another group of its type depends on (through
/// `enabled_when` or `fan_out`): it learns the shape, so it runs whatever
/// the profile.
pub fn learns_for_others(ty: &TypeDef, g: &GroupDef) -> bool {
    g.shape_from.is_some()
        && ty.groups.iter().any(|o| {
            o.name != g.name && (o.enabled_when.as_deref() == Some(&g.name) || o.fan_out.as_deref() == Some(&g.name))
        })
}

/// Does the plan count this group of this instance (its demand), and may it
/// run now? `None` = it runs; `Some(hold)` = it is held.
pub fn hold_of(
    ty: &TypeDef,
    inst: &InstanceConfig,
    shapes: &Shapes,
    g: &GroupDef,
    profile: Option<Profile>,
) -> Option<Hold> {
    if let Some(p) = profile
        && g.priority > p.max_priority()
        && !learns_for_others(ty, g)
    {
        return Some(Hold::Profile);
    }
    if let Some(w) = &g.enabled_when
        && shape_count(inst, shapes, w).unwrap_or(0) == 0
    {
        return Some(Hold::Shape);
    }
    if g.fan_out.is_some() && fan_out_items(inst, shapes, g).is_empty() {
        return Some(Hold::Shape);
    }
    None
}

/// Counted in the plan's demand: in the profile, `enabled_when` satisfied,
/// and for a fan-out, a known (learned or configured) item count.
fn counted(ty: &TypeDef, inst: &InstanceConfig, shapes: &Shapes, g: &GroupDef, profile: Option<Profile>) -> bool {
    match hold_of(ty, inst, shapes, g, profile) {
        None => true,
        Some(Hold::Shape) => {
            let when_ok = g
                .enabled_when
                .as_ref()
                .is_none_or(|w| shape_count(inst, shapes, w).unwrap_or(0) > 0);
            when_ok && execution_cost(inst, shapes, g) > 0.0
        }
        Some(_) => false,
    }
}

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

pub fn solve_settings(s: &SchedulerSettings, shed: bool) -> SolveSettings {
    SolveSettings {
        mode: match s.mode {
            SchedulerMode::Adaptive => Mode::Adaptive,
            SchedulerMode::Fixed => Mode::Fixed,
        },
        target_utilization: s.target_utilization,
        max_stretch_factor: s.max_stretch_factor,
        max_interval_s: s.max_interval.as_secs_f64(),
        shed,
    }
}

/// One pool's solved plan, with what the pages and metrics show beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolStatus {
    pub name: String,
    pub mode: SchedulerMode,
    pub profile: Option<Profile>,
    /// Summed shape counts of the pool's instances, by shape name.
    pub shape: BTreeMap<String, u64>,
    pub instances: usize,
    #[serde(flatten)]
    pub plan: PoolPlan,
}

/// Solve every configured pool. `effective` holds each pool's effective
/// budget (AIMD); a pool missing there is solved at its configured budget.
/// The implicit `full` profile is used when none is set; shedding is on
/// except in `fixed` mode.
pub fn solve_all(
    cat: &Catalog,
    shapes: &Shapes,
    s: &SchedulerSettings,
    effective: &BTreeMap<String, f64>,
) -> BTreeMap<String, PoolStatus> {
    let mut out = BTreeMap::new();
    for b in &cat.budgets {
        let (inputs, shape) = pool_inputs(cat, &b.name, shapes, s, s.profile);
        let budget = b.budget_rps();
        let eff = effective.get(&b.name).copied().unwrap_or(budget);
        let plan = solver::solve(&inputs, budget, eff, &solve_settings(s, true));
        let instances = cat
            .instances
            .values()
            .filter(|e| e.config.enabled && e.config.budget.as_deref() == Some(b.name.as_str()))
            .count();
        out.insert(
            b.name.clone(),
            PoolStatus {
                name: b.name.clone(),
                mode: s.mode,
                profile: s.profile,
                shape,
                instances,
                plan,
            },
        );
    }
    out
}

/// The startup and live-change gate (§2): with no profile set and mode
/// `adaptive`, a pool whose full plan still exceeds its budget target at the
/// configured budget is refused. The message names the pool, the demand, the
/// target and what each of the three profiles would need.
pub fn gate(cat: &Catalog, shapes: &Shapes, s: &SchedulerSettings) -> Result<(), String> {
    if s.profile.is_some() || s.mode == SchedulerMode::Fixed {
        return Ok(());
    }
    for b in &cat.budgets {
        let budget = b.budget_rps();
        let solve = |p: Profile| {
            let (inputs, _) = pool_inputs(cat, &b.name, shapes, s, Some(p));
            solver::solve(&inputs, budget, budget, &solve_settings(s, false))
        };
        let full = solve(Profile::Full);
        if !full.over_budget {
            continue;
        }
        let choice = |p: Profile, what: &str| {
            let plan = solve(p);
            let verdict = if !plan.over_budget {
                "fits"
            } else if p == Profile::Full {
                "over; sheds priority 3-4 groups until it fits"
            } else {
                "over"
            };
            format!("{} ({what}: {:.3} rps, {verdict})", p.name(), plan.total_demand_rps)
        };
        return Err(format!(
            "budget pool {:?} is over budget: its plan needs {:.3} rps even with every eligible group stretched to its cap, \
             above the budget target of {:.3} rps ({:.3} rps × target_utilization {}). \
             Set scheduler.profile to one of: {}, {}, {}. \
             Or raise the pool's requests_per_second, or pin longer intervals",
            b.name,
            full.total_demand_rps,
            full.target_rps,
            budget,
            s.target_utilization,
            choice(Profile::Availability, "priority 1 only"),
            choice(Profile::Standard, "priorities 1-3"),
            choice(Profile::Full, "all groups"),
        ));
    }
    Ok(())
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
    use super::*;

    use crate::model::BudgetConfig;

    fn cluster() -> TypeDef {
        let mut nodes = GroupDef::new("nodes", "/nodes", 1, Duration::from_secs(30));
        nodes.shape_from = Some("/data".into());
        nodes.item_field = Some("node".into());
        let mut per_node = GroupDef::new("node_status", "/nodes/{item}/status", 2, Duration::from_secs(60));
        per_node.fan_out = Some("nodes".into());
        per_node.cost = 2.0;
        let mut ha = GroupDef::new("ha", "/ha", 3, Duration::from_secs(60));
        ha.enabled_when = Some("nodes".into());
        TypeDef {
            name: "cluster".into(),
            groups: vec![nodes, per_node, ha],
        }
    }

    fn catalog(instances: &[(&str, Option<u64>, bool)]) -> Catalog {
        let mut cat = Catalog::new(
            vec![cluster()],
            vec![BudgetConfig {
                name: "p".into(),
                requests_per_second: 10.0,
                shared_fraction: 1.0,
                burst: 10,
            }],
        );
        for (name, nodes, enabled) in instances {
            let mut i = InstanceConfig::new(name, "cluster", "http://127.0.0.1:1/");
            i.budget = Some("p".into());
            i.enabled = *enabled;
            if let Some(n) = nodes {
                i.shape.insert("nodes".into(), *n);
            }
            cat.insert(i, true);
        }
        cat
    }

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

    #[test]
    fn holds_follow_the_profile_and_the_shape() {
        let cat = catalog(&[("a", None, true)]);
        let inst = &cat.instances["a"].config;
        let ty = cluster();
        let none = Shapes::new();
        let [nodes, per_node, ha] = [&ty.groups[0], &ty.groups[1], &ty.groups[2]];
        assert_eq!(hold_of(&ty, inst, &none, nodes, None), None);
        assert_eq!(
            hold_of(&ty, inst, &none, per_node, None),
            Some(Hold::Shape),
            "no items yet"
        );
        assert_eq!(
            hold_of(&ty, inst, &none, ha, None),
            Some(Hold::Shape),
            "enabled_when unknown"
        );
        assert_eq!(
            hold_of(&ty, inst, &none, ha, Some(Profile::Availability)),
            Some(Hold::Profile)
        );
        let mut shapes = Shapes::new();
        shapes.entry("a".into()).or_default().insert(
            "nodes".into(),
            ShapeUpdate {
                count: 1,
                items: vec!["n1".into()],
            },
        );
        assert_eq!(hold_of(&ty, inst, &shapes, per_node, None), None);
        assert_eq!(hold_of(&ty, inst, &shapes, ha, None), None);
        assert_eq!(
            hold_of(&ty, inst, &shapes, per_node, Some(Profile::Availability)),
            Some(Hold::Profile)
        );
    }

    #[test]
    fn a_profile_keeps_the_groups_that_learn_shapes_for_others() {
        let meraki = crate::presets::all()
            .into_iter()
            .find(|t| t.name == "meraki")
            .expect("meraki preset");
        let inst = InstanceConfig::new("org", "meraki", "https://api.example/org/1");
        let g = |name: &str| meraki.groups.iter().find(|g| g.name == name).expect(name).clone();
        let standard = Some(Profile::Standard);
        let none = Shapes::new();
        // Priority 4, but channel_utilization is enabled by its count.
        assert_eq!(hold_of(&meraki, &inst, &none, &g("wireless_devices"), standard), None);
        assert_eq!(
            hold_of(&meraki, &inst, &none, &g("licenses"), standard),
            Some(Hold::Profile)
        );
    }

    #[test]
    fn the_gate_applies_only_with_no_profile_in_adaptive_mode() {
        // 300 nodes × 2 requests a minute is 10 rps, above 10 × 0.7, and
        // the per-node group is priority 2: it never stretches.
        let cat = catalog(&[("a", Some(300), true)]);
        let mut s = SchedulerSettings::default();
        let msg = gate(&cat, &Shapes::new(), &s).expect_err("over budget");
        assert!(msg.contains("budget pool \"p\""), "{msg}");
        s.profile = Some(Profile::Availability);
        assert_eq!(gate(&cat, &Shapes::new(), &s), Ok(()));
        s.profile = None;
        s.mode = SchedulerMode::Fixed;
        assert_eq!(gate(&cat, &Shapes::new(), &s), Ok(()));
    }
}

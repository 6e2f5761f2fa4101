//! Solving every pool: the solver's settings from the scheduler's, and the
//! solved plan of each configured pool at its effective budget.

use super::{RunningIntervals, Shapes, pool_inputs};
use crate::core::catalog::Catalog;
use crate::core::solver::{self, MIN_ADJUSTABLE_PRIORITY, Mode, PoolPlan, SolveSettings};
use crate::model::{Profile, SchedulerMode, SchedulerSettings};
use serde::Serialize;
use std::collections::BTreeMap;

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
/// `running` holds the intervals priority 1/2 groups really run at (their
/// demand is counted at the larger of that and the floor). The implicit
/// `full` profile is used when none is set; shedding is on except in
/// `fixed` mode.
pub fn solve_all(
    cat: &Catalog,
    shapes: &Shapes,
    s: &SchedulerSettings,
    effective: &BTreeMap<String, f64>,
    running: &RunningIntervals,
) -> BTreeMap<String, PoolStatus> {
    let mut out = BTreeMap::new();
    for b in &cat.budgets {
        let (mut inputs, shape) = pool_inputs(cat, &b.name, shapes, s, s.profile);
        if let Some(r) = running.get(&b.name) {
            for g in inputs.iter_mut().filter(|g| g.priority < MIN_ADJUSTABLE_PRIORITY) {
                g.running_interval_s = r.get(&(g.type_name.clone(), g.name.clone())).copied();
            }
        }
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

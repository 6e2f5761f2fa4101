//! What the solver takes and gives: the pool's groups and the solve's tuning in, the plan for the pool and each
//! group out.

use super::MIN_ADJUSTABLE_PRIORITY;
use serde::Serialize;

/// One poll group of a pool, as the solver sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupInput {
    pub type_name: String,
    /// Group name; the group's identity within a pool is `(type_name, name)`.
    pub name: String,
    /// 1..=4; 1 = most important.
    pub priority: u8,
    /// Shortest interval the group may run at, in seconds (> 0).
    pub floor_s: f64,
    /// Requests per execution summed over the pool's instances (already multiplied by shape counts), >= 0.
    pub cost_per_cycle: f64,
    /// `false` = overhead that always runs: it counts as demand but is never stretched or shed.
    pub gated: bool,
    /// `false` = not polled at all: contributes no demand; reported with interval = floor, stretch 1, demand 0.
    pub enabled: bool,
    /// Operator pin in seconds (> 0, may be below the floor): the interval is exactly this and never changes.
    pub pin_s: Option<f64>,
    /// For a priority 1 or 2 group: the interval its tasks really run at (adaptive polling may run them
    /// slower than the floor), in seconds. Its demand is counted at the larger of this and its interval.
    /// `None`: at its interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_interval_s: Option<f64>,
}

impl GroupInput {
    /// Whether the solver may stretch or shed this group: enabled, gated, unpinned and of priority 3 or 4.
    pub fn is_adjustable(&self) -> bool {
        self.enabled && self.gated && self.pin_s.is_none() && self.priority >= MIN_ADJUSTABLE_PRIORITY
    }
}

/// How the solver may change intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Stretch (and, if allowed, shed) low-priority groups until the demand fits the target.
    Adaptive,
    /// Floors and pins only: nothing is stretched or shed; `over_budget` is still reported.
    Fixed,
}

/// Tuning of one solve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SolveSettings {
    pub mode: Mode,
    /// Share of the effective budget the plan aims to use, 0.1..=1.0.
    pub target_utilization: f64,
    /// Longest interval as a multiple of the floor, 1..=16.
    pub max_stretch_factor: f64,
    /// Longest interval in seconds (never below a group's floor).
    pub max_interval_s: f64,
    /// Whether low-priority groups may be shed when stretching is not enough.
    pub shed: bool,
}

/// The solver's decision for one group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupPlan {
    #[serde(rename = "type")]
    pub type_name: String,
    pub name: String,
    pub priority: u8,
    #[serde(rename = "floor_seconds")]
    pub floor_s: f64,
    #[serde(rename = "interval_seconds")]
    pub interval_s: f64,
    /// `interval_s / floor_s` (1 for a disabled group).
    pub stretch_factor: f64,
    pub cost_per_cycle: f64,
    /// `cost_per_cycle / interval_s`; 0 when shed or not enabled.
    pub demand_rps: f64,
    /// The group is enabled and its interval is the operator's pin.
    pub pinned: bool,
    /// The applied pin is below the floor: honoured, with a warning.
    pub pin_below_floor: bool,
    pub shed: bool,
    pub enabled: bool,
    pub gated: bool,
}

/// The solver's plan for one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolPlan {
    /// As passed in (configured).
    pub budget_rps: f64,
    /// As passed in (AIMD may have lowered it).
    pub effective_budget_rps: f64,
    pub target_utilization: f64,
    /// `effective_budget_rps × target_utilization`; 0 when the effective budget is not a positive finite number.
    pub target_rps: f64,
    /// Sum of the groups' `demand_rps` (after shedding).
    pub total_demand_rps: f64,
    /// `total_demand_rps / effective_budget_rps`; 0 when the effective budget is not a positive finite number.
    pub utilization: f64,
    /// Demand after stretching (before shedding) exceeds the target.
    pub over_budget: bool,
    /// The final demand (after any shedding) is within the effective budget (see [`super::shed_limit`]); always
    /// true when not `over_budget`.
    pub fits_after_shedding: bool,
    /// Number of ×1.5 steps taken.
    pub stretches: u32,
    /// Same order as the input.
    pub groups: Vec<GroupPlan>,
    /// e.g. "pin of pve/storage (10s) is below its floor (60s)".
    pub warnings: Vec<String>,
}

impl PoolPlan {
    /// Groups are shed, and at `effective_budget_rps` the last one shed would fit again: a re-solve would
    /// shed less. (Shedding comes after every stretchable group is at its cap, so the re-solve sheds the
    /// same groups in the same order and stops before that last one.)
    pub fn could_shed_less(&self, effective_budget_rps: f64) -> bool {
        let limit = super::shed_limit(effective_budget_rps * self.target_utilization, effective_budget_rps);
        self.groups
            .iter()
            .filter(|g| g.shed)
            // The shed order is (−priority, name, type): the last one shed is the greatest of this key.
            .max_by(|a, b| {
                b.priority
                    .cmp(&a.priority)
                    .then_with(|| a.name.cmp(&b.name))
                    .then_with(|| a.type_name.cmp(&b.type_name))
            })
            .is_some_and(|g| self.total_demand_rps + g.cost_per_cycle / g.interval_s <= limit)
    }
}

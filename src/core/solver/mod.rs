//! Pool solver: turns the poll groups of one rate-limit pool into a plan of poll intervals that fits the pool's budget.
//!
//! Every poll group of a pool costs `cost_per_cycle` requests each time it runs, so at an interval of `interval_s`
//! seconds it demands `cost_per_cycle / interval_s` requests per second. The solver picks the intervals so that the
//! pool's total demand stays within `effective_budget_rps × target_utilization` (the *target*):
//!
//! 1. **Start.** Every enabled group starts at its floor. A pinned group is set to its pin exactly and is never
//!    stretched or shed; a pin below the floor is honoured but warned about. Disabled groups demand nothing.
//! 2. **Stretch** (mode `Adaptive` only). While the demand exceeds the target, the solver takes the stretchable group
//!    (enabled, gated, unpinned, priority 3 or 4, interval below its cap) with the smallest key
//!    `(−priority, interval / floor, name, type_name)` — lowest priority class first, then the least stretched — and
//!    multiplies its interval by 1.5, clamped to its cap `max(min(floor × max_stretch_factor, max_interval_s), floor)`.
//!    It stops when the demand fits or when nothing is stretchable any more (the plan is then `over_budget`).
//! 3. **Shed** (mode `Adaptive`, `shed` allowed, still over budget). Groups of priority 3 or 4 that are enabled, gated
//!    and unpinned are shed one by one in the order `(−priority, name, type_name)` until the demand fits.
//!
//! Priority 1 and 2 groups and ungated (overhead) groups are never stretched nor shed; they only count as demand.
//!
//! The solver is pure and deterministic and works in plain `f64` without rounding. "Demand" always means the sum of
//! the per-group demands taken left to right in input order; each group's demand is `cost_per_cycle / interval_s`.
//!
//! **Speed.** A pool may hold thousands of groups and need tens of thousands of ×1.5 steps, so the implementation
//! keeps the stretchable groups in a [`BinaryHeap`] ordered by the selection key (each step is `O(log n)`) and keeps
//! a running total of the demand that is updated in `O(1)` per change. A running total rounds differently from a
//! fresh sum, so every comparison with the target is made with a proven bound on that difference: when the running
//! total is clearly above or below the target it decides, and when it is too close to call the fresh sum is
//! recomputed. The plan is therefore bit-for-bit the one the naive rule (rescan every group and re-add every demand
//! after each step) would produce; the tests check this against such a naive reference.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

use serde::Serialize;

/// Factor applied to a group's interval by one stretch step.
pub const STRETCH_STEP: f64 = 1.5;

/// Lowest importance (highest number) that is still protected: groups of priority 1 and 2 are never stretched or shed.
pub const MIN_ADJUSTABLE_PRIORITY: u8 = 3;

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
    /// The final demand (after any shedding) is within the target; always true when not `over_budget`.
    pub fits_after_shedding: bool,
    /// Number of ×1.5 steps taken.
    pub stretches: u32,
    /// Same order as the input.
    pub groups: Vec<GroupPlan>,
    /// e.g. "pin of pve/storage (10s) is below its floor (60s)".
    pub warnings: Vec<String>,
}

/// Solves one pool; see the module documentation for the rules.
pub fn solve(groups: &[GroupInput], budget_rps: f64, effective_budget_rps: f64, s: &SolveSettings) -> PoolPlan {
    solve_traced(groups, budget_rps, effective_budget_rps, s).0
}

/// Like [`solve`], and also returns every stretch step in the order taken, as `(group index, new interval)`.
pub fn solve_traced(
    groups: &[GroupInput],
    budget_rps: f64,
    effective_budget_rps: f64,
    s: &SolveSettings,
) -> (PoolPlan, Vec<(usize, f64)>) {
    let target = demand_target(effective_budget_rps, s.target_utilization);
    let mut warnings = Vec::new();
    if !is_usable_budget(effective_budget_rps) {
        warnings.push(format!(
            "effective budget of {effective_budget_rps} rps is not a positive finite number; the target is taken as 0"
        ));
    }

    // 1. Start: floors, pins; disabled groups demand nothing.
    let mut intervals: Vec<f64> = groups.iter().map(starting_interval).collect();
    let mut demand = DemandTracker::new(
        groups
            .iter()
            .zip(&intervals)
            .map(|(g, &interval)| if g.enabled { g.cost_per_cycle / interval } else { 0.0 })
            .collect(),
    );

    // 2. Stretch, then 3. shed (Adaptive only, and only when over the target to begin with).
    let mut trace = Vec::new();
    let mut shed = vec![false; groups.len()];
    let mut over_budget = demand.exceeds(target);
    if over_budget && s.mode == Mode::Adaptive {
        let by_name = adjustable_by_name(groups);
        over_budget = stretch(groups, s, target, &by_name, &mut intervals, &mut demand, &mut trace);
        if over_budget && s.shed {
            shed_until_fits(groups, target, &by_name, &mut shed, &mut demand);
        }
    }

    // 4. Report.
    let plans = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let pinned = g.enabled && g.pin_s.is_some();
            let pin_below_floor = pinned && intervals[i] < g.floor_s;
            if pin_below_floor {
                warnings.push(format!(
                    "pin of {}/{} ({}s) is below its floor ({}s)",
                    g.type_name, g.name, intervals[i], g.floor_s
                ));
            }
            GroupPlan {
                type_name: g.type_name.clone(),
                name: g.name.clone(),
                priority: g.priority,
                floor_s: g.floor_s,
                interval_s: intervals[i],
                stretch_factor: if g.enabled { intervals[i] / g.floor_s } else { 1.0 },
                cost_per_cycle: g.cost_per_cycle,
                demand_rps: demand.terms[i],
                pinned,
                pin_below_floor,
                shed: shed[i],
                enabled: g.enabled,
                gated: g.gated,
            }
        })
        .collect();
    let total_demand_rps = demand.fresh_total();
    let still_over = total_demand_rps > target;
    let plan = PoolPlan {
        budget_rps,
        effective_budget_rps,
        target_utilization: s.target_utilization,
        target_rps: target,
        total_demand_rps,
        utilization: if is_usable_budget(effective_budget_rps) {
            total_demand_rps / effective_budget_rps
        } else {
            0.0
        },
        over_budget,
        fits_after_shedding: !still_over,
        stretches: u32::try_from(trace.len()).unwrap_or(u32::MAX),
        groups: plans,
        warnings,
    };
    (plan, trace)
}

/// The longest interval the solver may stretch a group to: `min(floor × max_stretch_factor, max_interval_s)`, but
/// never below the floor (a group whose floor already exceeds `max_interval_s` is therefore not stretchable).
pub fn stretch_cap(floor_s: f64, s: &SolveSettings) -> f64 {
    (floor_s * s.max_stretch_factor).min(s.max_interval_s).max(floor_s)
}

/// A budget the solver can aim at: positive and finite.
fn is_usable_budget(effective_budget_rps: f64) -> bool {
    effective_budget_rps.is_finite() && effective_budget_rps > 0.0
}

/// `effective_budget × target_utilization`, or 0 when that is not a positive finite number (a caller's error, which
/// makes the solver stretch everything stretchable to its cap instead of panicking or producing NaN).
fn demand_target(effective_budget_rps: f64, target_utilization: f64) -> f64 {
    let target = effective_budget_rps * target_utilization;
    if is_usable_budget(effective_budget_rps) && target.is_finite() && target > 0.0 {
        target
    } else {
        0.0
    }
}

/// Floor for every group, the pin for an enabled pinned group.
fn starting_interval(g: &GroupInput) -> f64 {
    match g.pin_s {
        Some(pin) if g.enabled => pin,
        _ => g.floor_s,
    }
}

/// The adjustable groups (see [`GroupInput::is_adjustable`]) in the order `(name, type_name, input index)`: the
/// tie-break of both the stretch and the shed order. Sorting once lets the heap compare numbers only.
fn adjustable_by_name(groups: &[GroupInput]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..groups.len()).filter(|&i| groups[i].is_adjustable()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (ga, gb) = (&groups[a], &groups[b]);
        ga.name
            .cmp(&gb.name)
            .then_with(|| ga.type_name.cmp(&gb.type_name))
            .then_with(|| a.cmp(&b))
    });
    order
}

/// Stretches groups one ×1.5 step at a time until the demand fits the target; returns whether it is still over.
///
/// `by_name` is [`adjustable_by_name`]. Each stretchable group sits in a min-heap exactly once, under its current
/// key, so the top of the heap is always the group the rule picks.
fn stretch(
    groups: &[GroupInput],
    s: &SolveSettings,
    target: f64,
    by_name: &[usize],
    intervals: &mut [f64],
    demand: &mut DemandTracker,
    trace: &mut Vec<(usize, f64)>,
) -> bool {
    let mut heap: BinaryHeap<Reverse<HeapKey>> = by_name
        .iter()
        .enumerate()
        .filter(|&(_, &i)| intervals[i] < stretch_cap(groups[i].floor_s, s))
        .map(|(name_rank, &i)| {
            Reverse(HeapKey::new(
                groups[i].priority,
                intervals[i] / groups[i].floor_s,
                name_rank,
            ))
        })
        .collect();
    while demand.exceeds(target) {
        let Some(mut top) = heap.peek_mut() else {
            return true; // nothing left to stretch
        };
        let name_rank = top.0.name_rank();
        let i = by_name[name_rank];
        let g = &groups[i];
        let cap = stretch_cap(g.floor_s, s);
        let next = (intervals[i] * STRETCH_STEP).min(cap);
        intervals[i] = next;
        demand.set(i, g.cost_per_cycle / next);
        trace.push((i, next));
        if next < cap {
            // The key only grows, so the entry sinks into place when `top` is dropped.
            top.0 = HeapKey::new(g.priority, next / g.floor_s, name_rank);
        } else {
            PeekMut::pop(top); // at its cap: no longer stretchable
        }
    }
    false
}

/// Sheds adjustable groups in the order `(−priority, name, type_name)` until the demand fits the target.
fn shed_until_fits(
    groups: &[GroupInput],
    target: f64,
    by_name: &[usize],
    shed: &mut [bool],
    demand: &mut DemandTracker,
) {
    let mut order = by_name.to_vec();
    order.sort_by_key(|&i| Reverse(groups[i].priority)); // stable: name order within a priority class
    for i in order {
        if !demand.exceeds(target) {
            break;
        }
        shed[i] = true;
        demand.set(i, 0.0);
    }
}

/// Heap entry of a stretchable group: its selection key `(−priority, interval / floor, name, type_name)`, followed by
/// input index (so the order is total, like "the first of equal minima" in a scan), packed into one integer whose
/// natural order is the key's order, so that heap comparisons are a single integer comparison:
///
/// - bits 120..128: `255 − priority` (priority 4 sorts before 3),
/// - bits 56..120: the stretch ratio `interval / floor` in [`f64::total_cmp`] order (see [`total_order_bits`]),
/// - bits 0..56: the group's position in [`adjustable_by_name`], which stands for `(name, type_name, index)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct HeapKey(u128);

impl HeapKey {
    const RANK_BITS: u32 = 56;
    const RANK_MASK: u128 = (1 << Self::RANK_BITS) - 1;

    fn new(priority: u8, ratio: f64, name_rank: usize) -> Self {
        let priority_part = u128::from(u8::MAX - priority) << 120;
        let ratio_part = u128::from(total_order_bits(ratio)) << Self::RANK_BITS;
        // A pool cannot hold 2^56 groups, so the rank always fits its bits.
        HeapKey(priority_part | ratio_part | (name_rank as u128 & Self::RANK_MASK))
    }

    fn name_rank(self) -> usize {
        (self.0 & Self::RANK_MASK) as usize
    }
}

/// Maps an `f64` to a `u64` whose unsigned order is the order of [`f64::total_cmp`].
fn total_order_bits(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 { !bits } else { bits | (1 << 63) }
}

/// The fresh sum of per-group demands: left to right in input order, starting from `+0.0`.
fn fresh_sum(terms: &[f64]) -> f64 {
    terms.iter().fold(0.0, |total, &t| total + t)
}

/// The pool's demand: per-group terms plus a running total kept up to date in `O(1)` per change.
///
/// Every comparison with the target is decided exactly as [`fresh_sum`] of the terms would decide it. The running
/// total differs from the fresh sum only by rounding, which is bounded: a fresh sum of `n` terms is within
/// `(n − 1)·u·Σ|t|` of the exact sum and each update (`running − old + new`, two roundings) adds at most about
/// `5·u·Σ|t|` (u = 2⁻⁵³ = ε/2). [`Self::error_bound`] over-estimates that difference; when the running total is
/// further than twice the bound from the target its verdict is the fresh sum's, otherwise the fresh sum is computed
/// (and becomes the new running total). That happens only when the demand is within ~1e-12 (relative) of the target.
struct DemandTracker {
    /// Per-group demand in input order; 0 for disabled and shed groups.
    terms: Vec<f64>,
    /// Running total: the fresh sum at the last rebase, updated since.
    running: f64,
    /// Upper bound on `Σ|terms|` and on `|running|` since the last rebase.
    magnitude: f64,
    /// Updates since the last rebase (0 means `running` *is* the fresh sum).
    updates: usize,
}

impl DemandTracker {
    fn new(terms: Vec<f64>) -> Self {
        let mut tracker = DemandTracker {
            terms,
            running: 0.0,
            magnitude: 0.0,
            updates: 0,
        };
        tracker.rebase();
        tracker
    }

    fn fresh_total(&self) -> f64 {
        fresh_sum(&self.terms)
    }

    fn rebase(&mut self) {
        self.running = self.fresh_total();
        self.magnitude = self.terms.iter().fold(0.0, |total, t| total + t.abs());
        self.updates = 0;
    }

    /// Sets group `i`'s demand to `value`.
    fn set(&mut self, i: usize, value: f64) {
        let old = self.terms[i];
        if value.to_bits() == old.to_bits() {
            return; // no change (e.g. a group that costs nothing): the running total stays exact
        }
        if value.abs() > old.abs() {
            self.magnitude += value.abs(); // terms normally only shrink; stay safe if one grows
        }
        self.running = (self.running - old) + value;
        self.terms[i] = value;
        self.updates += 1;
    }

    /// Generous bound on `|running − fresh_sum(terms)|` (about twice the analytical one).
    fn error_bound(&self) -> f64 {
        let roundings = (2 * self.terms.len() + 5 * self.updates + 4) as f64;
        roundings * (f64::EPSILON * self.magnitude + f64::MIN_POSITIVE)
    }

    /// Whether the demand exceeds `target`, decided exactly as `fresh_sum(terms) > target` would be.
    fn exceeds(&mut self, target: f64) -> bool {
        if self.updates > 0 {
            let gap = self.running - target; // rounding keeps the sign of the exact difference
            let bound = self.error_bound();
            if bound.is_finite() && gap.abs() > 2.0 * bound {
                return gap > 0.0;
            }
            self.rebase(); // too close to call (or not finite): use the fresh sum
        }
        self.running > target
    }
}

#[cfg(test)]
mod tests;

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
//!    and unpinned are shed one by one in the order `(−priority, name, type_name)` until the demand fits the
//!    effective budget itself ([`shed_limit`]), not the target: the target's headroom is what stretching keeps, and a
//!    group the budget carries at its cap is stretched, not shed (the pool is still `over_budget`). Shedding to the
//!    target dropped data the API had room for: under sustained overload (issue #32) health and inventory were
//!    shed for a whole run that the room left by the other integration would have carried.
//!
//! Priority 1 and 2 groups and ungated (overhead) groups are never stretched nor shed; they only count as demand.
//! A priority 1 or 2 group's demand is counted at the interval its tasks really run at when that is longer than its
//! interval (`running_interval_s`: adaptive polling runs unchanged data at its base interval, not at the floor).
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
//!
//! Files: `types.rs` the solver's inputs and outputs, `demand.rs` the demand's running total; this file the rules.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

mod demand;
mod types;

use demand::DemandTracker;
pub use types::{GroupInput, GroupPlan, Mode, PoolPlan, SolveSettings};

/// Factor applied to a group's interval by one stretch step.
pub const STRETCH_STEP: f64 = 1.5;

/// Lowest importance (highest number) that is still protected: groups of priority 1 and 2 are never stretched or shed.
pub const MIN_ADJUSTABLE_PRIORITY: u8 = 3;

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
            .map(|(g, &interval)| {
                if g.enabled {
                    g.cost_per_cycle / demand_interval(g, interval)
                } else {
                    0.0
                }
            })
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
            shed_until_fits(
                groups,
                shed_limit(target, effective_budget_rps),
                &by_name,
                &mut shed,
                &mut demand,
            );
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
    let still_over = total_demand_rps > shed_limit(target, effective_budget_rps);
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

/// The demand shedding brings a pool down to: the effective budget itself (or the target, if that is higher).
/// The target's headroom is kept by stretching; a group the budget carries at its cap is stretched, not shed.
pub fn shed_limit(target_rps: f64, effective_budget_rps: f64) -> f64 {
    demand_target(effective_budget_rps, 1.0).max(target_rps)
}

/// The interval a group's demand is counted at: its interval, or for a priority 1/2 group the larger of that and
/// the interval its tasks really run at. (Such a group is never stretched, so this stays its demand.)
fn demand_interval(g: &GroupInput, interval: f64) -> f64 {
    match g.running_interval_s {
        Some(r) if g.priority < MIN_ADJUSTABLE_PRIORITY && r.is_finite() && r > interval => r,
        _ => interval,
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

#[cfg(test)]
mod tests;

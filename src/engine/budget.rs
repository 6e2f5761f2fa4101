//! The engine's budget state: one AIMD controller per pool, the solved plan
//! of every pool, and the shapes learned from `shape_from` groups.
//!
//! Plain data behind one mutex in [`Shared`](super::Shared); every rule is
//! in the pure modules it calls (`core::aimd`, `core::solver`,
//! `core::plan`). The clock arrives as arguments.

use crate::core::Scheduler;
use crate::core::aimd::{Aimd, AimdSettings, AimdState, Announced, RateSignal};
use crate::core::catalog::Catalog;
use crate::core::plan::{self, PoolStatus, RunningIntervals, RunningTask, Shapes};
use crate::core::solver::MIN_ADJUSTABLE_PRIORITY;
use crate::core::task::{self, TaskMeta};
use crate::model::{AdaptiveSettings, SchedulerMode, SchedulerSettings, ShapeUpdate, TaskKey, TaskRecord, Timestamp};
use crate::sink::event::{PoolEvent, PoolTransition};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct BudgetState {
    pub shapes: Shapes,
    pub aimd: BTreeMap<String, Aimd>,
    pub plans: BTreeMap<String, PoolStatus>,
    /// When the plans were last solved.
    pub solved_at: Timestamp,
    /// The intervals priority 1/2 groups ran at when the plans were solved.
    pub running: RunningIntervals,
    /// What they run at, smoothed ([`plan::smooth_running`]), and when it
    /// was last observed.
    running_seen: RunningIntervals,
    running_at: Option<Timestamp>,
    /// Pool transitions not sent to the event sink yet.
    pub events: Vec<PoolEvent>,
    /// AIMD states loaded at start, taken when their pool is first set up.
    resumed: BTreeMap<String, AimdState>,
    /// The AIMD states last saved.
    saved: Vec<(String, AimdState)>,
    /// Warnings of the last solve, logged when they change.
    warnings: Vec<String>,
}

/// The intervals the priority 1/2 tasks of every pool run at now (tasks
/// held off the schedule are left out).
pub fn running_of(s: &Scheduler) -> RunningIntervals {
    plan::running_intervals(
        s.tasks()
            .filter(|t| t.meta.hold.is_none() && t.meta.priority < MIN_ADJUSTABLE_PRIORITY)
            .filter_map(|t| {
                Some(RunningTask {
                    pool: t.meta.pool.as_deref()?,
                    type_name: &t.meta.type_name,
                    group: &t.key.group,
                    cost: t.meta.cost,
                    interval: s.interval_of(t),
                })
            }),
    )
}

/// [`running_of`] for tasks not yet on the schedule (a start): the
/// intervals their stored records put them on.
pub fn running_of_records(
    desired: &[(TaskKey, TaskMeta)],
    stored: &super::Records,
    adaptive: &AdaptiveSettings,
) -> RunningIntervals {
    let fresh = TaskRecord::default();
    plan::running_intervals(
        desired
            .iter()
            .filter(|(_, m)| m.hold.is_none() && m.priority < MIN_ADJUSTABLE_PRIORITY)
            .filter_map(|(k, m)| {
                Some(RunningTask {
                    pool: m.pool.as_deref()?,
                    type_name: &m.type_name,
                    group: &k.group,
                    cost: m.cost,
                    interval: task::current_interval(stored.get(k).unwrap_or(&fresh), m, adaptive),
                })
            }),
    )
}

/// The pool's plan wants more than `effective` gives it: it sheds groups,
/// or its demand is above that budget (a step-back of less than the
/// re-solve hysteresis leaves the plan solved for the budget before it,
/// and the bucket holds the pool below what it plans). AIMD probes on for
/// such a pool through a quiet spell ([`Aimd::tick_shedding`]).
pub fn wants_more(plan: &crate::core::solver::PoolPlan, effective: f64) -> bool {
    plan.groups.iter().any(|g| g.shed) || plan.total_demand_rps > effective * (1.0 + 1e-9)
}

pub fn aimd_settings(s: &SchedulerSettings) -> AimdSettings {
    AimdSettings {
        enabled: s.aimd_enabled && s.mode == SchedulerMode::Adaptive,
        backoff_multiplier: s.aimd_backoff_multiplier,
        recovery_rps_per_minute: s.aimd_recovery_rps_per_minute,
    }
}

impl BudgetState {
    /// The pool's effective budget (AIMD), or 0 for an unknown pool.
    pub fn effective_rps(&self, pool: &str) -> f64 {
        self.aimd.get(pool).map(|a| a.effective()).unwrap_or(0.0)
    }

    /// Bring the AIMD controllers in line with the configured pools and
    /// solve every pool again.
    /// What priority 1/2 groups run at now (`raw`), smoothed over about a
    /// minute: the figure the plan is solved with.
    pub fn observe_running(&mut self, raw: RunningIntervals, now: Timestamp) -> RunningIntervals {
        let elapsed = self.running_at.map_or(plan::RUNNING_RISE * 100, |t| now.since(t));
        self.running_seen = plan::smooth_running(&self.running_seen, &raw, elapsed);
        self.running_at = Some(self.running_at.map_or(now, |t| t.max(now)));
        self.running_seen.clone()
    }

    pub fn resolve(&mut self, cat: &Catalog, s: &SchedulerSettings, now: Timestamp) {
        self.solve(cat, s, now, true);
    }

    /// [`Self::resolve`] that announces nothing: a start's first solve,
    /// which only gives the tasks whose stored records say what priority
    /// 1/2 groups run at. It plans them at their floors, so announcing it
    /// would log and send a shedding the running pool never had.
    pub fn resolve_unannounced(&mut self, cat: &Catalog, s: &SchedulerSettings, now: Timestamp) {
        self.solve(cat, s, now, false);
    }

    fn solve(&mut self, cat: &Catalog, s: &SchedulerSettings, now: Timestamp, announce: bool) {
        self.aimd.retain(|name, _| cat.budgets.iter().any(|b| &b.name == name));
        let aimd = aimd_settings(s);
        let resumed = &mut self.resumed;
        for b in &cat.budgets {
            let configured = b.budget_rps();
            let a = self
                .aimd
                .entry(b.name.clone())
                .or_insert_with(|| match resumed.remove(&b.name) {
                    Some(state) if aimd.enabled => {
                        let a = Aimd::resume(configured, &state, now);
                        if a.effective() < configured {
                            tracing::info!(
                                pool = %b.name,
                                effective_budget_rps = a.effective(),
                                budget_rps = configured,
                                "AIMD resumed: the pool goes on below its budget, where it was before the restart"
                            );
                        }
                        a
                    }
                    _ => Aimd::new(configured, now),
                });
            if a.configured() != configured {
                a.set_configured(configured, now);
            }
            if !aimd.enabled && a.effective() != a.configured() {
                // AIMD switched off (or mode fixed): back to the configured budget.
                *a = Aimd::new(configured, now);
            }
        }
        let effective: BTreeMap<String, f64> = self.aimd.iter().map(|(k, a)| (k.clone(), a.effective())).collect();
        let plans = plan::solve_all(cat, &self.shapes, s, &effective, &self.running);
        // Transitions are against what was last announced (saved with the
        // AIMD state), not the plan before: a restart does not announce
        // again what it announced before.
        for (name, p) in plans.iter().filter(|_| announce) {
            if let Some(a) = self.aimd.get_mut(name) {
                let now = Announced {
                    over_budget: p.plan.over_budget,
                    shed: shed_groups(p),
                };
                let events = log_transitions(p, a.announced(), &now);
                self.events.extend(events);
                a.set_announced(now);
            }
        }
        self.plans = plans;
        for (name, a) in self.aimd.iter_mut() {
            a.mark_solved();
            // What the pool sends under this plan: the level of its next 429.
            if let Some(p) = self.plans.get(name) {
                a.set_sending(p.plan.total_demand_rps);
            }
        }
        self.solved_at = now;
        let warnings: Vec<String> = self
            .plans
            .values()
            .flat_map(|p| p.plan.warnings.iter().map(move |w| format!("pool {}: {w}", p.name)))
            .collect();
        if announce && warnings != self.warnings {
            for w in &warnings {
                tracing::warn!("{w}");
            }
            self.warnings = warnings;
        }
    }

    /// AIMD states saved before a restart: each pool resumes from its own
    /// when it is set up.
    pub fn resume_aimd(&mut self, states: Vec<(String, AimdState)>) {
        self.saved = states.clone();
        self.resumed = states.into_iter().collect();
    }

    /// A pool taken over from another member: it resumes from `state` (the
    /// last owner's gossiped AIMD state) when it is set up.
    pub fn adopt(&mut self, pool: String, state: AimdState) {
        self.aimd.remove(&pool);
        self.resumed.insert(pool, state);
    }

    /// Every pool's AIMD state, when it moved since the last save: a pool
    /// came or went, a 429 came, the recovery changed, or the effective
    /// budget moved by more than 1 % of the budget. (Recovery moves it a
    /// little every second; it is saved in those steps, and at shutdown.)
    pub fn aimd_to_save(&self) -> Option<Vec<(String, AimdState)>> {
        let now: Vec<(String, AimdState)> = self.aimd.iter().map(|(k, a)| (k.clone(), a.state())).collect();
        let moved = now.len() != self.saved.len()
            || now.iter().zip(&self.saved).any(|((pa, a), (pb, b))| {
                pa != pb
                    || a.last_decrease != b.last_decrease
                    || a.last_429 != b.last_429
                    || a.recovery != b.recovery
                    || a.configured_rps != b.configured_rps
                    || a.held_rps != b.held_rps
                    || a.announced != b.announced
                    || (a.effective_rps - b.effective_rps).abs() > 0.01 * a.configured_rps
            });
        moved.then_some(now)
    }

    /// `states` are saved.
    pub fn aimd_saved(&mut self, states: Vec<(String, AimdState)>) {
        self.saved = states;
    }

    /// Keep a learned shape; true when it differs from what was known.
    pub fn learn(&mut self, instance: &str, group: &str, shape: ShapeUpdate) -> bool {
        let m = self.shapes.entry(instance.to_string()).or_default();
        if m.get(group) == Some(&shape) {
            return false;
        }
        m.insert(group.to_string(), shape);
        true
    }

    /// Forget shapes of instances no longer configured.
    pub fn retain_shapes(&mut self, cat: &Catalog) {
        self.shapes.retain(|i, _| cat.instances.contains_key(i));
    }

    /// A 429 in `pool`: the AIMD signal and the pool's effective budget after it.
    pub fn on_rate_limited(
        &mut self,
        pool: &str,
        now: Timestamp,
        retry_after: Option<Duration>,
        s: &SchedulerSettings,
    ) -> Option<(RateSignal, f64)> {
        let a = self.aimd.get_mut(pool)?;
        let signal = a.on_rate_limited(now, retry_after, &aimd_settings(s));
        Some((signal, a.effective()))
    }

    /// Recovery up to `now` (fast while a pool sheds, see `core::aimd`).
    /// Returns the pools whose effective budget changed (with the new
    /// value) and whether a re-solve is due: a move past the hysteresis,
    /// or shed groups that would fit again.
    /// Each pool's requests dispatched since the last call (from the
    /// scheduler's buckets), up to `now`.
    pub fn note_sent(&mut self, now: Timestamp, sent: &[(std::sync::Arc<str>, f64)]) {
        for (name, a) in self.aimd.iter_mut() {
            let n = sent
                .iter()
                .find(|(p, _)| &**p == name.as_str())
                .map_or(0.0, |(_, n)| *n);
            a.note_sent(now, n);
        }
    }

    pub fn tick(&mut self, now: Timestamp, s: &SchedulerSettings) -> (Vec<(String, f64)>, bool) {
        let aimd = aimd_settings(s);
        let mut changed = Vec::new();
        let mut resolve = false;
        for (name, a) in self.aimd.iter_mut() {
            let plan = self.plans.get(name).map(|p| &p.plan);
            let short = plan.is_some_and(|p| wants_more(p, a.effective()));
            let before = a.effective();
            resolve |= a.tick_shedding(now, &aimd, short);
            if before < a.configured() && a.effective() >= a.configured() {
                tracing::info!(pool = %name, budget_rps = a.configured(), "AIMD recovered: the pool is back at its budget");
                if let Some(p) = self.plans.get(name) {
                    self.events.push(pool_event(p, PoolTransition::AimdRecovered));
                }
            }
            if a.effective() != before {
                changed.push((name.clone(), a.effective()));
                // Shed groups that would fit again are planned back in.
                resolve |= plan.is_some_and(|p| p.could_shed_less(a.effective()));
            }
        }
        (changed, resolve)
    }
}

/// The `type/group` names of a plan's shed groups.
fn shed_groups(p: &PoolStatus) -> Vec<String> {
    p.plan
        .groups
        .iter()
        .filter(|g| g.shed)
        .map(|g| format!("{}/{}", g.type_name, g.name))
        .collect()
}

/// A pool event of `transition` for plan `p`.
pub fn pool_event(p: &PoolStatus, transition: PoolTransition) -> PoolEvent {
    PoolEvent {
        pool: p.name.clone(),
        transition,
        demand_rps: p.plan.total_demand_rps,
        target_rps: p.plan.target_rps,
        effective_budget_rps: p.plan.effective_budget_rps,
        budget_rps: p.plan.budget_rps,
        groups: shed_groups(p),
    }
}

/// A pool's transitions from what was last announced (`was`) to its new
/// plan `p` (`now`), logged once (going over budget and shedding at WARN,
/// every group planned again at INFO), as the events to send.
fn log_transitions(p: &PoolStatus, was: &Announced, now: &Announced) -> Vec<PoolEvent> {
    let mut events = Vec::new();
    let name = &p.name;
    let (demand_rps, target_rps) = (p.plan.total_demand_rps, p.plan.target_rps);
    if now.over_budget && !was.over_budget {
        tracing::warn!(
            pool = %name,
            demand_rps,
            target_rps,
            effective_budget_rps = p.plan.effective_budget_rps,
            "pool over budget: its groups do not fit the target even at their longest intervals"
        );
        events.push(pool_event(p, PoolTransition::OverBudget));
    }
    if !now.shed.is_empty() && now.shed != was.shed {
        tracing::warn!(pool = %name, demand_rps, target_rps, groups = %now.shed.join(","), "pool shedding groups");
        events.push(pool_event(p, PoolTransition::Shedding));
    }
    // Every group planned again: shedding ended (the budget carries them
    // all, stretched), or the pool is no longer over budget.
    if now.shed.is_empty() && (!was.shed.is_empty() || (was.over_budget && !now.over_budget)) {
        tracing::info!(pool = %name, demand_rps, target_rps, "pool restored: every group is planned again");
        events.push(pool_event(p, PoolTransition::Restored));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BudgetConfig, GroupDef, InstanceConfig, Profile, TypeDef};

    /// Issue #16's pool: 18 instances of status p1 (5 s), devices p2 (30 s),
    /// health p3 (6 s) and inventory p4 (15 s) in one pool of 10 rps × 0.8.
    fn catalog() -> Catalog {
        let groups = [
            ("status", 1, 5),
            ("devices", 2, 30),
            ("health", 3, 6),
            ("inventory", 4, 15),
        ]
        .iter()
        .map(|(n, p, f)| GroupDef::new(n, &format!("/{n}"), *p, Duration::from_secs(*f)))
        .collect();
        let mut cat = Catalog::new(
            vec![TypeDef {
                name: "net".into(),
                groups,
            }],
            vec![BudgetConfig {
                name: "org".into(),
                requests_per_second: 10.0,
                shared_fraction: 0.8,
                burst: 10,
            }],
        );
        for i in 0..18 {
            let mut inst = InstanceConfig::new(&format!("net-{i:02}"), "net", "http://org.invalid/");
            inst.budget = Some("org".into());
            cat.insert(inst, true);
        }
        cat
    }

    #[test]
    fn each_pool_transition_is_reported_once() {
        let cat = catalog();
        let s = SchedulerSettings {
            profile: Some(Profile::Full),
            ..SchedulerSettings::default()
        };
        let mut b = BudgetState::default();
        let t = Timestamp(1_790_000_000_000);
        b.resolve(&cat, &s, t);
        assert!(b.events.is_empty(), "{:?}", b.events);
        // 429s recur: 8 → 4 rps. p1/p2 at their floors (4.2 rps) are over the 2.8 rps target.
        b.on_rate_limited("org", t, None, &s).expect("pool");
        b.resolve(&cat, &s, t);
        let kinds: Vec<PoolTransition> = b.events.drain(..).map(|e| e.transition).collect();
        assert_eq!(kinds, [PoolTransition::OverBudget, PoolTransition::Shedding]);
        b.resolve(&cat, &s, t);
        assert!(b.events.is_empty(), "reported once: {:?}", b.events);
        // Counted as they run (status at 10 s), p1/p2 need 2.4 rps: with health and inventory at their caps
        // (1.05 rps) the pool is still over the target, but the 4 rps budget carries them: planned again.
        b.running = plan::running_intervals((0..18).map(|_| RunningTask {
            pool: "org",
            type_name: "net",
            group: "status",
            cost: 1.0,
            interval: Duration::from_secs(10),
        }));
        b.resolve(&cat, &s, t);
        let kinds: Vec<PoolTransition> = b.events.drain(..).map(|e| e.transition).collect();
        assert_eq!(kinds, [PoolTransition::Restored]);
        assert!(b.plans["org"].plan.over_budget);
        // Back to p1/p2 at their floors: shedding again, announced once.
        b.running.clear();
        b.resolve(&cat, &s, t);
        let kinds: Vec<PoolTransition> = b.events.drain(..).map(|e| e.transition).collect();
        assert_eq!(kinds, [PoolTransition::Shedding]);
        b.resolve(&cat, &s, t);
        assert!(b.events.is_empty(), "{:?}", b.events);
        // A restart resumes what was announced with the AIMD state: the
        // same plan is not announced again.
        let saved = b.aimd_to_save().expect("states");
        assert!(saved[0].1.announced.over_budget && !saved[0].1.announced.shed.is_empty());
        let mut restarted = BudgetState {
            running: b.running.clone(),
            ..BudgetState::default()
        };
        restarted.resume_aimd(saved);
        restarted.resolve(&cat, &s, t);
        assert!(restarted.plans["org"].plan.over_budget);
        assert!(restarted.events.is_empty(), "announced again: {:?}", restarted.events);
        // Back at the full budget: every group planned again.
        let mut full = Aimd::new(8.0, t);
        full.set_announced(b.aimd["org"].announced().clone());
        b.aimd.insert("org".into(), full);
        b.resolve(&cat, &s, t);
        let e = b.events.pop().expect("an event");
        assert_eq!((e.transition, e.groups.len()), (PoolTransition::Restored, 0));
        assert!(b.events.is_empty());
    }
}

//! How the engine builds the read model ([`crate::read_model`]): a
//! [`Snapshot`] of the scheduler and its pools.
//!
//! Concurrency: [`Shared::snapshot`] (and [`SnapshotSource::take`], which
//! the metrics collector holds) copies the pools under the budgets lock and
//! releases it, then holds the scheduler lock only while each task's few
//! figures are read ([`Builder::add`]) and the 25 most recent dead-letter
//! entries are picked out. Sorting the lists, and every reader's JSON,
//! HTML or series, happen after the lock is released ([`Copied::finish`]),
//! so a reader never holds up dispatching for longer than the copy.
//!
//! The rules (which rows, in which order, where a list is cut) are plain
//! functions of the copied figures, tested below without a scheduler.

pub use crate::read_model::{
    BreakerRow, DUE_WINDOW, DeadLetterEntry, Detail, Freshness, GroupFigures, PartialRow, PoolFigures, QueueCounts,
    RECENT_DEAD_LETTERS, STALEST, Snapshot, TakeSnapshot, TaskRow, TypeCounts,
};

use super::EngineHandle;
use super::budget::BudgetState;
use super::{Core, CoreGuard, Shared};
use crate::core::Scheduler;
use crate::core::plan::{self, PoolStatus, Unbudgeted};
use crate::core::staleness;
use crate::core::task::breaker_at;
use crate::model::{BreakerState, TaskKey, TaskRecord, Timestamp};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The queries of [`EngineHandle`] that read the schedule and the pools
/// (the plan view, instance lists, the dead-letter queue, budgets): each
/// takes the locks briefly and returns an owned copy, like [`Shared::snapshot`].
impl EngineHandle {
    /// One pool's budget in force and planned instances.
    pub fn pool_budget(&self, pool: &str) -> PoolBudget {
        self.0.budgets(|b, _| PoolBudget {
            effective_rps: b.effective_rps(pool),
            instances: b.plans.get(pool).map(|p| p.instances).unwrap_or(0),
        })
    }

    /// Every pool's budget in force (AIMD applied), read at one moment.
    pub fn effective_budgets(&self) -> BTreeMap<String, f64> {
        self.0
            .budgets(|b, _| b.aimd.iter().map(|(name, a)| (name.clone(), a.effective())).collect())
    }

    /// Where each pool that AIMD holds below its budget stands at `now`.
    pub fn aimd_outlook(&self, now: Timestamp) -> BTreeMap<String, crate::core::aimd::Outlook> {
        let settings = super::budget::aimd_settings(&self.0.monitoring().scheduler);
        self.0.budgets(|b, _| {
            b.aimd
                .iter()
                .filter_map(|(name, a)| {
                    let short = b
                        .plans
                        .get(name)
                        .is_some_and(|p| super::budget::wants_more(&p.plan, a.effective()));
                    Some((name.clone(), a.outlook(now, &settings, short)?))
                })
                .collect()
        })
    }

    /// The plans, pauses and last attempts at `now`.
    pub fn plan_reading(&self, now: Timestamp) -> PlanReading {
        let cat = self.0.catalog();
        let settings = self.0.monitoring().scheduler;
        let (pools, unbudgeted, solved_at) = self.0.budgets(|b, _| {
            let pools: Vec<(PoolStatus, f64)> = b
                .plans
                .values()
                .map(|p| (p.clone(), b.effective_rps(&p.name)))
                .collect();
            (pools, plan::unbudgeted(&cat, &b.shapes, &settings), b.solved_at)
        });
        let mut paused_until = HashMap::new();
        let mut last_attempt: HashMap<GroupOfPool, Timestamp> = HashMap::new();
        {
            let c = self.0.core();
            let s = &c.scheduler;
            for (p, _) in &pools {
                if let Some(until) = s.pool_bucket(&p.name).and_then(|b| b.paused_until(now)) {
                    paused_until.insert(p.name.clone(), until);
                }
            }
            for t in s.tasks() {
                if let Some(at) = t.rec.last_attempt {
                    let e = last_attempt
                        .entry((t.meta.pool.clone(), t.meta.type_name.clone(), t.key.group.clone()))
                        .or_insert(at);
                    *e = (*e).max(at);
                }
            }
        }
        PlanReading {
            pools,
            unbudgeted,
            settings,
            solved_at,
            paused_until,
            last_attempt,
        }
    }

    /// One page of the dead-letter queue (oldest first), and the queue's
    /// length.
    pub fn dead_letter_page(&self, skip: usize, take: usize) -> (usize, Vec<DeadLetterEntry>) {
        let c = self.0.core();
        let all = c.scheduler.dead_letters();
        let page = all
            .iter()
            .skip(skip)
            .take(take)
            .filter_map(|t| DeadLetterEntry::of(&t.key, &t.meta.type_name, &t.rec))
            .collect();
        (all.len(), page)
    }

    /// The health of every task, for per-instance summaries.
    pub fn task_health(&self) -> Vec<TaskHealth> {
        let c = self.0.core();
        c.scheduler.tasks().map(TaskHealth::of).collect()
    }

    /// The health of the tasks `keys` name (a page's); a key
    /// with no task is left out.
    pub fn task_health_of(&self, keys: &[TaskKey]) -> Vec<TaskHealth> {
        let c = self.0.core();
        keys.iter()
            .filter_map(|k| c.scheduler.get(k))
            .map(TaskHealth::of)
            .collect()
    }

    /// The tasks `keys` name, as the scheduler holds them now, each with
    /// the interval it is on; a key with no task (not placed yet, or
    /// removed) is left out. Copies, in the order of `keys`.
    pub fn tasks_of(&self, keys: &[TaskKey]) -> Vec<TaskView> {
        let c = self.0.core();
        let s = &c.scheduler;
        keys.iter()
            .filter_map(|k| s.get(k))
            .map(|t| TaskView {
                key: t.key.clone(),
                priority: t.meta.priority,
                planned: t.meta.planned,
                phase: TaskPhase::of(&t.state),
                rec: t.rec.clone(),
                interval: s.interval_of(t),
            })
            .collect()
    }
}

/// A budget pool as it stands: its budget in force (AIMD applied) and how
/// many instances its plan covers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolBudget {
    pub effective_rps: f64,
    pub instances: usize,
}

/// (pool, type, group) of a task; a task with no pool has `None`.
pub type GroupOfPool = (Option<Arc<str>>, Arc<str>, Arc<str>);

/// Everything the plan view (`/status`, the groups API) shows, copied in
/// one go.
#[derive(Debug, Clone)]
pub struct PlanReading {
    /// Every pool's solved plan, by name, with its budget in force.
    pub pools: Vec<(PoolStatus, f64)>,
    /// The instances with no pool (`None`: there are none).
    pub unbudgeted: Option<Unbudgeted>,
    /// The scheduler settings the plans were read with.
    pub settings: crate::model::SchedulerSettings,
    /// When the plans were last solved.
    pub solved_at: Timestamp,
    /// Pools paused by a `Retry-After`, until when.
    pub paused_until: HashMap<String, Timestamp>,
    /// The latest attempt of any task, per (pool, type, group).
    pub last_attempt: HashMap<GroupOfPool, Timestamp>,
}

/// One task's health, as the instance list summarises it.
#[derive(Debug, Clone)]
pub struct TaskHealth {
    pub instance: Arc<str>,
    pub disabled: bool,
    pub dead_lettered: bool,
    pub failures: u32,
    pub last_success: Option<Timestamp>,
    /// Its polls since the last success only got HTTP 429.
    pub rate_limited: bool,
}

impl TaskHealth {
    fn of(t: &crate::core::scheduler::Task) -> TaskHealth {
        TaskHealth {
            instance: t.key.instance.clone(),
            disabled: t.rec.disabled,
            dead_lettered: t.rec.dead_letter.is_some(),
            failures: t.rec.failures,
            last_success: t.rec.last_success,
            rate_limited: t.rec.last_error.as_ref().is_some_and(|e| e.is_rate_limited()),
        }
    }
}

/// Where a task stands, as [`TaskView`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskPhase {
    /// Waiting for its next run.
    Queued,
    /// A poll of it is running.
    InFlight,
    /// Held out of the schedule, for the reason named.
    Held(&'static str),
    /// Discarded by an operator.
    Discarded,
}

impl TaskPhase {
    fn of(state: &crate::core::scheduler::TaskState) -> TaskPhase {
        use crate::core::scheduler::{Parked, TaskState};
        match state {
            TaskState::Parked(Parked::Discarded) => TaskPhase::Discarded,
            TaskState::Parked(Parked::Held(h)) => TaskPhase::Held(h.as_str()),
            TaskState::InFlight { .. } => TaskPhase::InFlight,
            TaskState::Queued { .. } => TaskPhase::Queued,
        }
    }
}

/// A copy of one task, as [`EngineHandle::tasks_of`] reads it.
#[derive(Debug, Clone)]
pub struct TaskView {
    pub key: TaskKey,
    pub priority: u8,
    /// The interval its plan gives it.
    pub planned: std::time::Duration,
    pub phase: TaskPhase,
    pub rec: TaskRecord,
    /// The interval the task is on now (adaptive and planned).
    pub interval: std::time::Duration,
}

/// A task below this staleness score, and not stale, counts as fresh; above
/// it, as aging.
const FRESH_BELOW: f64 = 0.1;

/// Takes snapshots of one engine's scheduler and pools; what the metrics
/// collector holds (it is built before [`Shared`] exists).
#[derive(Clone)]
pub struct SnapshotSource {
    core: Arc<Mutex<Core>>,
    budgets: Arc<Mutex<BudgetState>>,
    clock: Arc<dyn super::ports::Clock>,
}

impl SnapshotSource {
    pub(super) fn new(
        core: Arc<Mutex<Core>>,
        budgets: Arc<Mutex<BudgetState>>,
        clock: Arc<dyn super::ports::Clock>,
    ) -> Self {
        SnapshotSource { core, budgets, clock }
    }

    /// A source over an empty schedule of its own: metrics built apart
    /// from any engine (benchmarks of the metric families).
    pub fn detached(settings: crate::model::MonitoringSettings, clock: Arc<dyn super::ports::Clock>) -> Self {
        Self::new(
            Arc::new(Mutex::new(Core::new(
                Scheduler::new(settings),
                rand::SeedableRng::seed_from_u64(0),
            ))),
            Default::default(),
            clock,
        )
    }

    pub fn take(&self, now: Timestamp, detail: Detail) -> Snapshot {
        take(&self.core, &self.budgets, now, detail)
    }
}

impl TakeSnapshot for SnapshotSource {
    /// The read model now, by the engine's clock.
    fn take_now(&self, detail: Detail) -> Snapshot {
        take(&self.core, &self.budgets, self.clock.now(), detail)
    }
}

impl Shared {
    /// The read model at `now`: the one way readers see the scheduler.
    pub fn snapshot(&self, now: Timestamp, detail: Detail) -> Snapshot {
        take(&self.core, &self.budgets, now, detail)
    }
}

fn take(core: &Mutex<Core>, budgets: &Mutex<BudgetState>, now: Timestamp, detail: Detail) -> Snapshot {
    // The two locks are taken one after the other, never nested.
    let pools = pool_figures(&super::lock(budgets));
    let copied = {
        let c = CoreGuard::new(super::lock(core));
        let s = &c.scheduler;
        let adaptive = &s.settings().adaptive;
        let mut b = Builder::new(now, adaptive.enabled, adaptive.max_interval, detail);
        for t in s.tasks() {
            b.add(TaskFigures {
                key: &t.key,
                type_name: &t.meta.type_name,
                rec: &t.rec,
                in_flight: t.is_in_flight(),
                placed_at: t.placed_at,
                interval: s.interval_of(t),
            });
        }
        let queue = QueueCounts {
            depth: s.queue_len(),
            due_soon: s.due_within(now, DUE_WINDOW),
            in_flight: s.in_flight(),
        };
        b.copy_out(queue, s.queued_per_type())
    };
    copied.finish(pools)
}

fn pool_figures(b: &BudgetState) -> Vec<PoolFigures> {
    b.plans
        .values()
        .map(|p| {
            let effective = b.effective_rps(&p.name);
            PoolFigures {
                name: p.name.clone(),
                demand_rps: p.plan.total_demand_rps,
                budget_rps: p.plan.budget_rps,
                effective_rps: effective,
                utilization: if effective > 0.0 {
                    p.plan.total_demand_rps / effective
                } else {
                    0.0
                },
                over_budget: p.plan.over_budget,
                stretched: p
                    .plan
                    .groups
                    .iter()
                    .filter(|g| !g.pinned && g.stretch_factor > 1.0 + 1e-9)
                    .count(),
                shed: p.plan.groups.iter().filter(|g| g.shed).count(),
                groups: p
                    .plan
                    .groups
                    .iter()
                    .map(|g| GroupFigures {
                        name: format!("{}/{}", g.type_name, g.name),
                        interval_s: g.interval_s,
                        stretch_factor: g.stretch_factor,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// One task as the builder reads it, borrowed from the scheduler.
#[derive(Debug, Clone, Copy)]
pub struct TaskFigures<'a> {
    pub key: &'a TaskKey,
    pub type_name: &'a Arc<str>,
    pub rec: &'a TaskRecord,
    pub in_flight: bool,
    pub placed_at: Timestamp,
    pub interval: Duration,
}

/// Reads tasks one at a time (under the scheduler lock) and keeps what a
/// snapshot needs of them.
pub struct Builder<'a> {
    now: Timestamp,
    adaptive_enabled: bool,
    max_interval: Duration,
    detail: Detail,
    tasks: usize,
    types: BTreeMap<&'a str, TypeCounts>,
    dead: Vec<TaskFigures<'a>>,
    breakers: Vec<BreakerRow>,
    freshness: Freshness,
    stalest: Vec<TaskRow>,
    partial: Vec<PartialRow>,
    every_task: Vec<TaskRow>,
}

/// A snapshot's figures once the scheduler lock can be released: owned,
/// not yet ordered.
pub struct Copied {
    inner: Snapshot,
}

/// Dead-letter order: the most recent entry first, ties in task-key order.
pub fn dead_letter_order(a: (Timestamp, &TaskKey), b: (Timestamp, &TaskKey)) -> Ordering {
    b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

/// Stalest order: the highest score first, ties in task-key order.
pub fn stalest_order(a: (f64, &TaskKey), b: (f64, &TaskKey)) -> Ordering {
    b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

/// The first `n` of `items` in `order`, sorted: a selection, then a sort of
/// only the ones kept.
pub fn first_n<T>(mut items: Vec<T>, n: usize, order: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    if n == 0 {
        items.clear();
        return items;
    }
    if items.len() > n {
        items.select_nth_unstable_by(n - 1, &order);
        items.truncate(n);
    }
    items.sort_unstable_by(order);
    items
}

fn type_counts<'m, 'a>(types: &'m mut BTreeMap<&'a str, TypeCounts>, name: &'a Arc<str>) -> &'m mut TypeCounts {
    types.entry(&**name).or_insert_with(|| TypeCounts {
        name: name.clone(),
        queued: 0,
        in_flight: 0,
        tasks: 0,
    })
}

impl<'a> Builder<'a> {
    pub fn new(now: Timestamp, adaptive_enabled: bool, max_interval: Duration, detail: Detail) -> Self {
        Builder {
            now,
            adaptive_enabled,
            max_interval,
            detail,
            tasks: 0,
            types: BTreeMap::new(),
            dead: Vec::new(),
            breakers: Vec::new(),
            freshness: Freshness::default(),
            stalest: Vec::with_capacity(STALEST + 1),
            partial: Vec::new(),
            every_task: Vec::new(),
        }
    }

    /// Read one task. Disabled tasks count only where they still are: in
    /// flight, or (never, today) in the dead-letter queue.
    pub fn add(&mut self, t: TaskFigures<'a>) {
        let now = self.now;
        if t.in_flight {
            type_counts(&mut self.types, t.type_name).in_flight += 1;
        }
        if t.rec.dead_letter.is_some() {
            self.dead.push(t);
        }
        if t.rec.disabled {
            return;
        }
        self.tasks += 1;
        type_counts(&mut self.types, t.type_name).tasks += 1;
        let breaker = breaker_at(t.rec, now);
        if breaker != BreakerState::Closed {
            self.breakers.push(BreakerRow {
                key: t.key.clone(),
                type_name: t.type_name.clone(),
                state: breaker,
                failures: t.rec.failures,
                retry_at: t.rec.retry_at,
            });
        }
        if !t.rec.failed_items.is_empty() {
            self.partial.push(PartialRow {
                key: t.key.clone(),
                type_name: t.type_name.clone(),
                failed_items: t.rec.failed_items.clone(),
            });
        }
        let score = staleness::score(t.rec.last_success, now, self.max_interval);
        let since = t.rec.last_success.unwrap_or(t.placed_at);
        let stale = staleness::is_stale(since, now, t.interval);
        if stale {
            self.freshness.stale += 1;
        } else if score < FRESH_BELOW {
            self.freshness.fresh += 1;
        } else {
            self.freshness.aging += 1;
        }
        let row = || TaskRow {
            key: t.key.clone(),
            type_name: t.type_name.clone(),
            breaker,
            score,
            stale,
            last_success: t.rec.last_success,
            age: now.since(since),
            interval: t.interval,
        };
        // A bounded sorted list, not a sort of every task.
        let later = |r: &TaskRow| stalest_order((score, t.key), (r.score, &r.key)) == Ordering::Less;
        if self.stalest.len() < STALEST || self.stalest.last().is_some_and(later) {
            let pos = self
                .stalest
                .partition_point(|r| stalest_order((r.score, &r.key), (score, t.key)) == Ordering::Less);
            self.stalest.insert(pos, row());
            self.stalest.truncate(STALEST);
        }
        if self.detail == Detail::EveryTask {
            self.every_task.push(row());
        }
    }

    /// Everything read, as owned figures: the last step under the scheduler
    /// lock. `queued` is the number of queued tasks per type.
    pub fn copy_out(self, queue: QueueCounts, queued: BTreeMap<Arc<str>, usize>) -> Copied {
        let mut types = self.types;
        for (name, n) in &queued {
            type_counts(&mut types, name).queued = *n;
        }
        let dead_letter_count = self.dead.len();
        let dead_letters = first_n(self.dead, RECENT_DEAD_LETTERS, |a, b| {
            dead_letter_order(since(a), since(b))
        })
        .into_iter()
        .filter_map(|t| DeadLetterEntry::of(t.key, t.type_name, t.rec))
        .collect();
        Copied {
            inner: Snapshot {
                taken_at: self.now,
                adaptive_enabled: self.adaptive_enabled,
                queue,
                per_type: types.into_values().collect(),
                tasks: self.tasks,
                dead_letter_count,
                dead_letters,
                breakers: self.breakers,
                freshness: self.freshness,
                stalest: self.stalest,
                partial: self.partial,
                every_task: self.every_task,
                pools: Vec::new(),
            },
        }
    }
}

fn since<'a>(t: &TaskFigures<'a>) -> (Timestamp, &'a TaskKey) {
    (t.rec.dead_letter.as_ref().map(|d| d.since).unwrap_or_default(), t.key)
}

impl Copied {
    /// The snapshot, its lists in their documented order (run after the
    /// scheduler lock is released).
    pub fn finish(self, pools: Vec<PoolFigures>) -> Snapshot {
        let mut s = self.inner;
        s.breakers.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        s.partial.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        s.every_task.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        s.pools = pools;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeadLetterReason, DeadLetterRecord};

    const NOW: Timestamp = Timestamp(1_000_000_000);
    const MAX: Duration = Duration::from_secs(300);

    struct Fixture {
        tasks: Vec<(TaskKey, Arc<str>, TaskRecord)>,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture { tasks: Vec::new() }
        }

        fn task(&mut self, instance: &str, rec: TaskRecord) {
            self.tasks
                .push((TaskKey::new(instance, "probe"), Arc::from("fast"), rec));
        }

        fn snapshot(&self, detail: Detail) -> Snapshot {
            let mut b = Builder::new(NOW, true, MAX, detail);
            for (key, type_name, rec) in &self.tasks {
                b.add(TaskFigures {
                    key,
                    type_name,
                    rec,
                    in_flight: false,
                    placed_at: Timestamp(NOW.0 - 1000),
                    interval: Duration::from_secs(10),
                });
            }
            b.copy_out(QueueCounts::default(), BTreeMap::new()).finish(Vec::new())
        }
    }

    fn open(failures: u32) -> TaskRecord {
        TaskRecord {
            failures,
            breaker: BreakerState::Open,
            retry_at: Some(Timestamp(NOW.0 + 60_000)),
            ..Default::default()
        }
    }

    fn dead(since_ms: u64) -> TaskRecord {
        TaskRecord {
            dead_letter: Some(DeadLetterRecord {
                reason: DeadLetterReason::default(),
                since: Timestamp(since_ms),
                next_recheck: Timestamp(NOW.0 + 60_000),
                rechecks: 0,
            }),
            ..open(5)
        }
    }

    /// Instance names whose hash order is nothing like their sorted order.
    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("inst-{:03}", (i * 37) % n)).collect()
    }

    #[test]
    fn breakers_are_every_non_closed_one_in_task_key_order() {
        let mut f = Fixture::new();
        for (i, name) in names(40).iter().enumerate() {
            let rec = match i % 4 {
                0 => TaskRecord::default(),
                1 => open(3),
                // Its retry window has elapsed: half-open.
                2 => TaskRecord {
                    retry_at: Some(Timestamp(NOW.0 - 1)),
                    ..open(4)
                },
                _ => open(7),
            };
            f.task(name, rec);
        }
        let s = f.snapshot(Detail::Summary);
        assert_eq!(
            s.breakers.len(),
            30,
            "every non-closed breaker, not a first page of them"
        );
        let keys: Vec<&TaskKey> = s.breakers.iter().map(|b| &b.key).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert!(s.breakers.iter().any(|b| b.state == BreakerState::HalfOpen));
        assert!(s.breakers.iter().all(|b| b.state != BreakerState::Closed));
    }

    #[test]
    fn dead_letters_are_the_25_most_recent_ties_in_key_order() {
        let mut f = Fixture::new();
        let names = names(60);
        for (i, name) in names.iter().enumerate() {
            // Pairs share a `since`, so ties are decided by the key.
            f.task(name, dead(NOW.0 - 1000 * (i as u64 / 2)));
        }
        f.task("healthy", TaskRecord::default());
        let s = f.snapshot(Detail::Summary);
        assert_eq!(s.dead_letter_count, 60);
        assert_eq!(s.dead_letters.len(), RECENT_DEAD_LETTERS);
        let mut expected: Vec<(Timestamp, &str)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (Timestamp(NOW.0 - 1000 * (i as u64 / 2)), n.as_str()))
            .collect();
        expected.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        let got: Vec<(Timestamp, &str)> = s
            .dead_letters
            .iter()
            .map(|d| (d.dead_letter.since, &*d.key.instance))
            .collect();
        assert_eq!(got, expected[..RECENT_DEAD_LETTERS]);
    }

    #[test]
    fn the_cut_keeps_the_first_n_in_order_whatever_the_input_order() {
        let v: Vec<u32> = (0..100).map(|i| (i * 53) % 100).collect();
        assert_eq!(first_n(v.clone(), 5, |a, b| a.cmp(b)), vec![0, 1, 2, 3, 4]);
        assert_eq!(first_n(v.clone(), 0, |a, b| a.cmp(b)), Vec::<u32>::new());
        assert_eq!(first_n(v[..3].to_vec(), 5, |a, b| a.cmp(b)), {
            let mut w = v[..3].to_vec();
            w.sort();
            w
        });
    }

    #[test]
    fn stalest_are_the_highest_scores_ties_in_key_order() {
        let mut f = Fixture::new();
        for (i, name) in names(50).iter().enumerate() {
            let rec = if i % 2 == 0 {
                // Never succeeded: score 1.
                TaskRecord::default()
            } else {
                TaskRecord {
                    last_success: Some(Timestamp(NOW.0 - 1000 * i as u64)),
                    ..Default::default()
                }
            };
            f.task(name, rec);
        }
        let s = f.snapshot(Detail::Summary);
        assert_eq!(s.stalest.len(), STALEST);
        for w in s.stalest.windows(2) {
            assert_eq!(
                stalest_order((w[0].score, &w[0].key), (w[1].score, &w[1].key)),
                Ordering::Less
            );
        }
        // 25 tasks never succeeded: exactly those, in key order.
        assert!(s.stalest.iter().all(|r| r.score == 1.0 && r.last_success.is_none()));
        assert_eq!(s.freshness.fresh + s.freshness.aging + s.freshness.stale, 50);
    }

    #[test]
    fn every_task_rows_only_when_asked_for_in_key_order() {
        let mut f = Fixture::new();
        for name in names(30) {
            f.task(&name, TaskRecord::default());
        }
        f.task(
            "off",
            TaskRecord {
                disabled: true,
                ..Default::default()
            },
        );
        assert!(f.snapshot(Detail::Summary).every_task.is_empty());
        let s = f.snapshot(Detail::EveryTask);
        assert_eq!(s.tasks, 30, "a disabled task is not counted");
        assert_eq!(s.every_task.len(), 30);
        assert!(s.every_task.windows(2).all(|w| w[0].key < w[1].key));
        assert_eq!(s.per_type.len(), 1);
        assert_eq!(s.per_type[0].tasks, 30);
    }
}

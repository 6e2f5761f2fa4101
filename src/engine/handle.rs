//! What the layers above the engine (web, CLI, tests) may ask of it:
//! commands that change state and copies that describe it, never a lock.
//!
//! Every method here takes the engine's locks itself, briefly (through
//! [`super::Shared::budgets`] for the pools, the only way to them), and
//! returns owned data, so no caller can hold a lock across an `.await`. The dashboard, health API and metrics read [`super::snapshot`].

use super::settings::SettingsError;
use super::snapshot::DeadLetterEntry;
use super::{Shared, lock};
use crate::config::SinkConfig;
use crate::core::plan::{self, PoolStatus, Unbudgeted};
use crate::model::{GroupDef, InstanceConfig, MonitoringSettings, PollResult, TaskKey, TaskRecord, Timestamp};
use rand::Rng;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The one way the layers above the engine (web, the CLI, tests) reach it.
///
/// Cheap to clone. It offers the methods of this module and the read model
/// ([`super::snapshot`]); the engine's mutexes, queues and loops stay
/// behind it, private to `engine/`.
#[derive(Clone)]
pub struct EngineHandle(Arc<Shared>);

impl EngineHandle {
    /// A handle on `shared`. The engine makes its own when it starts; a
    /// benchmark or test may make one on a state no engine runs.
    pub fn new(shared: Arc<Shared>) -> Self {
        EngineHandle(shared)
    }

    /// An operator action on one task (retry, discard, enable), committed
    /// before anyone sees it; see `Shared::operator_action`.
    pub async fn operator_action(
        &self,
        key: &TaskKey,
        actor: &str,
        op: crate::core::scheduler::OperatorOp,
    ) -> Result<TaskRecord, super::EngineError> {
        self.0.operator_action(key, actor, op).await
    }

    /// The engine's time (its clock).
    pub fn now(&self) -> Timestamp {
        self.0.now()
    }

    /// The instances, types and budget pools in force.
    pub fn catalog(&self) -> Arc<crate::core::catalog::Catalog> {
        self.0.catalog()
    }

    /// The monitoring settings in force.
    pub fn monitoring(&self) -> MonitoringSettings {
        self.0.monitoring()
    }

    /// Whether the engine has loaded its state and dispatches.
    pub fn is_ready(&self) -> bool {
        self.0.is_ready()
    }

    /// Ready, or why not, at `now`.
    pub fn readiness(&self, now: Timestamp) -> Result<(), String> {
        self.0.readiness(now)
    }

    /// The read model at `now`, as detailed as `detail` asks.
    pub fn snapshot(&self, now: Timestamp, detail: super::snapshot::Detail) -> super::snapshot::Snapshot {
        self.0.snapshot(now, detail)
    }

    /// Refuses a catalog and settings whose plans would not fit their
    /// budgets (the over-budget gate).
    pub fn check_gate(
        &self,
        cat: &crate::core::catalog::Catalog,
        settings: &MonitoringSettings,
    ) -> Result<(), plan::OverBudget> {
        self.0.check_gate(cat, settings)
    }

    /// Put a stored catalog in force: tasks are placed and removed, the
    /// plans solved again.
    pub fn set_catalog(&self, catalog: crate::core::catalog::Catalog) {
        self.0.set_catalog(catalog)
    }

    /// One pool's budget in force (AIMD applied).
    pub fn pool_effective_rps(&self, pool: &str) -> f64 {
        self.0.pool_effective_rps(pool)
    }

    /// The facts `instance` has learned.
    pub fn facts_of(&self, instance: &str) -> Option<Arc<crate::values::Facts>> {
        self.0.latest.facts_of(instance)
    }

    /// A task's latest values.
    pub fn values_of(&self, key: &TaskKey) -> Option<super::latest::LatestValues> {
        self.0.latest.values_of(key)
    }

    /// A task's kept bodies, by item.
    pub fn bodies_of(&self, key: &TaskKey) -> BTreeMap<String, super::latest::BodyInfo> {
        self.0.latest.bodies_of(key)
    }

    /// Poll `group` of `instance` once, now, outside the schedule (the
    /// instance test); `items` is the fan-out list.
    pub async fn probe(&self, instance: &InstanceConfig, group: &GroupDef, items: &[String]) -> PollResult {
        self.0.fetch.fetch(instance, None, group, items).await
    }
}

/// A turn at a check-then-write change (of the catalog, or of the settings):
/// while it is held, no other change of the same kind starts. Dropping it
/// ends the turn.
pub struct EditTurn<'a> {
    _turn: tokio::sync::MutexGuard<'a, ()>,
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

impl EngineHandle {
    /// Wait for a turn at changing the catalog (instances, budget pools):
    /// check-then-insert stays atomic.
    pub async fn edit_catalog(&self) -> EditTurn<'_> {
        EditTurn {
            _turn: self.0.catalog_edit.lock().await,
        }
    }

    /// Wait for a turn at changing the settings (monitoring, sink):
    /// validate-then-save stays atomic.
    pub async fn edit_settings(&self) -> EditTurn<'_> {
        EditTurn {
            _turn: self.0.settings_edit.lock().await,
        }
    }

    /// The settings document `patch` would make, and the settings it would
    /// put in force, without changing anything.
    pub fn propose_settings(&self, patch: &Value) -> Result<(Value, MonitoringSettings), SettingsError> {
        lock(&self.0.settings).propose(patch)
    }

    /// A proposal from [`EngineHandle::propose_settings`] has been stored: keep
    /// the saved document and put the settings in force.
    pub fn apply_saved_settings(&self, saved: Value, effective: MonitoringSettings) {
        lock(&self.0.settings).saved = saved;
        self.0.apply_settings(effective);
    }

    /// Settings fields an environment variable sets, with the variable.
    pub fn locked_settings(&self) -> BTreeMap<String, String> {
        lock(&self.0.settings).locked()
    }

    /// Sink fields an environment variable sets, with the variable.
    pub fn locked_sink(&self) -> BTreeMap<String, String> {
        lock(&self.0.settings).env.locked_sink()
    }

    /// The sink's settings in force (environment applied); `None` when off.
    pub fn sink_config(&self) -> Option<SinkConfig> {
        lock(&self.0.sink_config).clone()
    }

    /// Stored new sink settings: put them in force.
    pub fn apply_sink_config(&self, next: Option<SinkConfig>) {
        *lock(&self.0.sink_config) = next.clone();
        self.0.sink.reconfigure(next);
    }

    /// The items a fan-out group polls on `instance`, as last learned
    /// (empty for a group without fan-out).
    pub fn fan_out_items(&self, instance: &InstanceConfig, group: &GroupDef) -> Vec<String> {
        self.0.fan_out_items(instance, group)
    }

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
                    let shedding = b.plans.get(name).is_some_and(|p| p.plan.groups.iter().any(|g| g.shed));
                    Some((name.clone(), a.outlook(now, &settings, shedding)?))
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
        c.scheduler
            .tasks()
            .map(|t| TaskHealth {
                instance: t.key.instance.clone(),
                disabled: t.rec.disabled,
                dead_lettered: t.rec.dead_letter.is_some(),
                failures: t.rec.failures,
                last_success: t.rec.last_success,
                rate_limited: t.rec.last_error.as_ref().is_some_and(|e| e.is_rate_limited()),
            })
            .collect()
    }

    /// The exposition of every fresh sample (of `instance` only, if
    /// given): `None` when `instance` names no configured instance. Built
    /// without the scheduler lock.
    pub fn values_exposition(&self, instance: Option<&str>) -> Option<String> {
        let cat = self.0.catalog();
        if let Some(i) = instance
            && !cat.instances.contains_key(i)
        {
            return None;
        }
        let tasks = self.0.latest.fresh(self.0.now(), instance);
        Some(super::latest::render(&cat.values, &tasks))
    }

    /// A kept body with its bytes: from memory if the group commit has not
    /// written it yet, else from the store (blocking).
    pub fn read_body(
        &self,
        key: &TaskKey,
        item: &str,
    ) -> Result<Option<crate::model::BodyRecord>, crate::store::StoreError> {
        if let Some(b) = self.0.latest.unwritten_body(key, item) {
            return Ok(Some(b));
        }
        self.0.store.read_body(key, item)
    }

    /// A copy of one task's record, as the scheduler holds it now.
    pub fn task_record(&self, key: &TaskKey) -> Option<TaskRecord> {
        self.0.core().scheduler.get(key).map(|t| t.rec.clone())
    }

    /// Polls in flight now.
    pub fn in_flight(&self) -> usize {
        self.0.core().scheduler.in_flight()
    }

    /// Complete every task due at `now` at once, with the result `answer`
    /// gives for the n-th of them, outside the dispatcher and the store:
    /// fills the schedule of a benchmark or test with a realistic mix.
    /// Returns how many were completed.
    pub fn complete_due_now(
        &self,
        now: Timestamp,
        rng: &mut impl Rng,
        mut answer: impl FnMut(usize, &TaskKey) -> PollResult,
    ) -> usize {
        let mut c = self.0.core();
        let s = &mut c.scheduler;
        let mut n = 0;
        while let Some(d) = s.pop_due(now) {
            let result = answer(n, &d.key);
            s.complete(&d.key, &result, now, rng);
            n += 1;
        }
        n
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

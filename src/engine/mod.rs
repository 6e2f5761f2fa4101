//! The engine: the tokio side of scheduling. One dispatcher sleeps until the
//! next task is due (or until something changes) and hands due tasks to at
//! most `scheduler.workers` concurrent polls; a flusher group-commits task
//! state every `state_flush_interval`; operator actions and settings changes
//! are committed before they are acknowledged.
//!
//! Change events (breaker transitions, dead-letter moves and actions) are
//! written to the store's outbox in the same transaction as the task state
//! they describe: a dead-letter entry or exit and an operator action with
//! their own commit, breaker transitions and rechecks with the group commit
//! of their record (staged in [`Core`] beside the scheduler, in the same
//! critical section as the change, so a flush takes both or neither). Budget pool transitions (over budget, shedding, restored, AIMD
//! decrease and recovery) are change events too, staged for the next group
//! commit. Poll events go to the sink's memory queue, best effort.
//!
//! Concurrency: the pure [`Scheduler`], its RNG and the staged events are
//! one [`Core`] behind one `std::sync::Mutex`, held only for short,
//! non-async sections. The budget pools ([`BudgetState`]) have a lock of
//! their own, reached only through [`Shared::budgets`], which takes it and
//! hands the closure a [`CoreKey`]: the one way to hold both is pools, then
//! core. Every write of task rows goes through `write_lock` (an async
//! mutex), and a durable completion is applied to the scheduler while that
//! lock is held, so a group commit can never write an older record over a
//! dead-letter move.

pub mod budget;
pub mod handle;
pub use handle::EngineHandle;
pub mod latest;
mod loops;
pub mod maintenance;
mod persist;
pub mod ports;
pub mod settings;
pub mod snapshot;
mod worker;

#[cfg(test)]
mod tests;

use crate::config::{EnvOverrides, SinkConfig};
use crate::core::Scheduler;
use crate::core::aimd::AimdState;
use crate::core::catalog::Catalog;
use crate::core::ownership::{self, Unit};
use crate::core::plan;
use crate::core::scheduler::{OpError, OperatorOp, Prepared};
use crate::core::task::{DeadLetterMove, Transition};
use crate::metrics::Metrics;
use crate::model::random::StdRng;
use crate::model::{
    BreakerState, ErrorCategory, ErrorKind, MonitoringSettings, PollError, PollResult, TaskKey, TaskRecord, Timestamp,
};
use crate::sink::event::{
    BreakerEvent, DeadLetterAction, DeadLetterEvent, Event, PollEvent, PoolEvent, PoolTransition,
};
use crate::sink::{Sink, SinkMetrics};
use crate::store::{OutboxEvent, Store};
use budget::BudgetState;
use ports::{Clock, Fetch, Ports, TaskStore};
use settings::SettingsLayers;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// How long shutdown waits for polls in flight before abandoning them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long shutdown spends shipping the sink's queued events.
pub const SINK_FLUSH_GRACE: Duration = Duration::from_secs(5);
/// Due tasks waiting this long with no dispatch make the appliance unready.
pub const STALL_AFTER: Duration = Duration::from_secs(30);
/// Per-minute history kept for the dashboard charts (which show 24 h).
pub const HISTORY_RETENTION: Duration = Duration::from_secs(48 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("background task failed: {0}")]
    Join(String),
    #[error(transparent)]
    Op(#[from] OpError),
}

/// What the engine's scheduling lock guards, together: the pure scheduler,
/// the RNG every random draw of the engine comes from, and the change
/// events staged with the scheduler changes they record (the next group
/// commit takes both or neither).
pub struct Core {
    pub(crate) scheduler: Scheduler,
    rng: StdRng,
    staged: Vec<OutboxEvent>,
}

impl Core {
    pub(crate) fn new(scheduler: Scheduler, rng: StdRng) -> Core {
        Core {
            scheduler,
            rng,
            staged: Vec::new(),
        }
    }

    /// The scheduler and the RNG, borrowed apart, for a change that draws.
    fn scheduler_and_rng(&mut self) -> (&mut Scheduler, &mut StdRng) {
        (&mut self.scheduler, &mut self.rng)
    }
}

#[cfg(debug_assertions)]
thread_local! {
    /// Core guards this thread holds: the pools' lock must not be taken
    /// while it is above 0 (debug builds check it).
    static CORE_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The core, locked. Dropped, it unlocks.
pub(crate) struct CoreGuard<'a>(MutexGuard<'a, Core>);

impl<'a> CoreGuard<'a> {
    fn new(guard: MutexGuard<'a, Core>) -> Self {
        #[cfg(debug_assertions)]
        CORE_HELD.with(|c| c.set(c.get() + 1));
        CoreGuard(guard)
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        CORE_HELD.with(|c| c.set(c.get() - 1));
    }
}

impl std::ops::Deref for CoreGuard<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.0
    }
}

impl std::ops::DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.0
    }
}

/// Handed to a closure that holds the pools' lock: it takes the core after
/// the pools, the one legal order.
pub(crate) struct CoreKey<'a>(&'a Mutex<Core>);

impl<'a> CoreKey<'a> {
    pub(crate) fn core(&self) -> CoreGuard<'a> {
        CoreGuard::new(lock(self.0))
    }
}

pub struct Shared {
    core: Arc<Mutex<Core>>,
    /// The event sink (a no-op when none is configured).
    sink: Sink,
    /// The sink's settings in force (environment applied).
    sink_config: Mutex<Option<SinkConfig>>,
    store: Store,
    /// Where task state is loaded from and committed to: `store`, unless
    /// the ports name another.
    tasks: Arc<dyn TaskStore>,
    /// How polls are made (the HTTP poller in production).
    fetch: Arc<dyn Fetch>,
    /// Where the engine reads the time; see [`ports`].
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    /// Every task's latest values and kept bodies.
    latest: latest::Latest,
    /// What this server polls: the whole catalog, or in a cluster the part
    /// of it this member owns ([`Shared::set_scope`]).
    catalog: Arc<RwLock<Arc<Catalog>>>,
    /// The whole catalog (the file's instances and the UI's).
    full_catalog: RwLock<Arc<Catalog>>,
    /// The units this member owns in a cluster; `None` alone (everything).
    scope: RwLock<Option<Arc<BTreeSet<Unit>>>>,
    /// Records of tasks whose unit this member does not own now (a
    /// cluster's member): taken again when the unit comes back and gossip
    /// has nothing newer. Their rows stay in the database.
    parked: Mutex<Records>,
    settings: Mutex<SettingsLayers>,
    write_lock: tokio::sync::Mutex<()>,
    /// Serialises instance changes (check-then-insert).
    catalog_edit: tokio::sync::Mutex<()>,
    /// Serialises settings changes (validate-then-save).
    settings_edit: tokio::sync::Mutex<()>,
    /// Budget pools: AIMD, solved plans, learned shapes; only through
    /// [`Shared::budgets`].
    budgets: Arc<Mutex<BudgetState>>,
    wake: Notify,
    /// When the dispatcher will wake by itself (ms since the epoch, written
    /// under the scheduler lock): 0 while it waits for a worker to free up,
    /// `u64::MAX` when nothing is queued. A finished poll wakes it only if it
    /// must: a worker freed at the cap, or a task due before that time.
    dispatcher_wake: AtomicU64,
    /// Re-solve the plans now (an AIMD move past the hysteresis).
    resolve: Notify,
    /// The maintenance windows changed: record their edges now.
    maintenance_wake: Notify,
    /// Poll tasks spawned and not yet finished (they hold a reference to
    /// this state, and so to the database, until they end).
    running: Arc<AtomicUsize>,
    ready: AtomicBool,
    last_dispatch_ms: AtomicU64,
    /// Polls and failed polls in the current minute, for the history.
    minute_polls: AtomicU64,
    minute_errors: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves valid data (every mutation is
    // a few assignments); keep serving rather than cascading the panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(
        store: Store,
        fetch: Arc<dyn Fetch>,
        ports: &Ports,
        catalog: Catalog,
        layers: SettingsLayers,
        settings: MonitoringSettings,
        sink: Option<SinkConfig>,
    ) -> Result<Arc<Shared>, prometheus::Error> {
        let core = Arc::new(Mutex::new(Core::new(Scheduler::new(settings), ports.rng())));
        let budgets = Arc::new(Mutex::new(BudgetState::default()));
        let full_catalog = RwLock::new(Arc::new(catalog.clone()));
        let catalog = Arc::new(RwLock::new(Arc::new(catalog)));
        let snapshots = snapshot::SnapshotSource::new(core.clone(), budgets.clone(), ports.clock.clone());
        let metrics = Metrics::new(snapshots, catalog.clone())?;
        let sink_config = Mutex::new(sink.clone());
        let sink = Sink::new(sink, SinkMetrics::register(&metrics.registry)?, ports.clock.clone());
        sink.attach_outbox(store.clone());
        sink.seed_ids(ports.event_id_rng());
        let tasks = match &ports.tasks {
            Some(tasks) => tasks.clone(),
            None => Arc::new(store.clone()),
        };
        Ok(Arc::new(Shared {
            core,
            sink,
            sink_config,
            store,
            tasks,
            fetch,
            clock: ports.clock.clone(),
            metrics,
            latest: latest::Latest::default(),
            catalog,
            full_catalog,
            scope: RwLock::new(None),
            parked: Mutex::new(Records::default()),
            settings: Mutex::new(layers),
            write_lock: tokio::sync::Mutex::new(()),
            catalog_edit: tokio::sync::Mutex::new(()),
            settings_edit: tokio::sync::Mutex::new(()),
            budgets,
            wake: Notify::new(),
            dispatcher_wake: AtomicU64::new(0),
            resolve: Notify::new(),
            maintenance_wake: Notify::new(),
            running: Arc::new(AtomicUsize::new(0)),
            ready: AtomicBool::new(false),
            last_dispatch_ms: AtomicU64::new(0),
            minute_polls: AtomicU64::new(0),
            minute_errors: AtomicU64::new(0),
        }))
    }

    /// The core (scheduler, RNG, staged events), locked. Never taken while
    /// the pools are held except through the [`CoreKey`] of
    /// [`Shared::budgets`].
    fn core(&self) -> CoreGuard<'_> {
        CoreGuard::new(lock(&self.core))
    }

    /// Run `f` on the budget pools, with the key to the core: the only way
    /// to the pools, so the locks are always taken pools first. It must not
    /// be called with the core held (debug builds check).
    fn budgets<R>(&self, f: impl FnOnce(&mut BudgetState, CoreKey<'_>) -> R) -> R {
        #[cfg(debug_assertions)]
        CORE_HELD.with(|c| debug_assert_eq!(c.get(), 0, "the pools' lock is taken before the core's"));
        let mut b = lock(&self.budgets);
        f(&mut b, CoreKey(&self.core))
    }

    /// The database, event sink and metrics this state was built with.
    pub fn parts(&self) -> (Store, Sink, Metrics) {
        (self.store.clone(), self.sink.clone(), self.metrics.clone())
    }

    /// The engine's time (its [`Clock`]).
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn monitoring(&self) -> MonitoringSettings {
        self.core().scheduler.settings().clone()
    }

    /// The items a fan-out group polls on `instance`, as last learned
    /// (empty for a group without fan-out).
    pub(crate) fn fan_out_items(
        &self,
        instance: &crate::model::InstanceConfig,
        group: &crate::model::GroupDef,
    ) -> Vec<String> {
        if group.fan_out.is_none() {
            return Vec::new();
        }
        self.budgets(|b, _| plan::fan_out_items(instance, &b.shapes, group).to_vec())
    }

    /// Wake the dispatcher: something about the schedule changed.
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// After a completion was applied (under the scheduler lock `s`): does
    /// the dispatcher need waking? Yes if it waits for a free worker, or if
    /// the task is now due before the dispatcher's own wake-up time.
    fn must_wake_dispatcher(&self, s: &Scheduler, key: &TaskKey) -> bool {
        let wake = self.dispatcher_wake.load(Ordering::Relaxed);
        wake == 0
            || s.get(key)
                .is_some_and(|t| !t.is_parked() && !t.is_in_flight() && t.rec.next_run.0 < wake)
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Ready unless state is still loading or the dispatcher is stalled: due
    /// tasks waiting with no dispatch for [`STALL_AFTER`]. Failing targets
    /// never make the appliance unready.
    pub fn readiness(&self, now: Timestamp) -> Result<(), String> {
        if !self.is_ready() {
            return Err("loading state".into());
        }
        let oldest_due = self.core().scheduler.next_wakeup();
        if let Some(due) = oldest_due
            && now.since(due) > STALL_AFTER
        {
            let last = Timestamp(self.last_dispatch_ms.load(Ordering::Relaxed));
            if now.since(last) > STALL_AFTER {
                return Err(format!(
                    "dispatcher stalled: tasks due since {} and no dispatch since {}",
                    due.to_rfc3339(),
                    last.to_rfc3339()
                ));
            }
        }
        Ok(())
    }

    /// Re-solve every pool and bring the scheduler's task set in line with
    /// the catalog and the new plan: tasks added, removed, re-timed, held
    /// or released; pool token buckets set to their effective budgets.
    pub fn reconcile(&self, now: Timestamp, stored: &mut Records, cold_start: bool) {
        let cat = self.catalog();
        let (settings, adaptive, running, starting) = {
            let c = self.core();
            (
                c.scheduler.settings().scheduler.clone(),
                c.scheduler.settings().adaptive.clone(),
                budget::running_of(&c.scheduler),
                c.scheduler.is_empty(),
            )
        };
        let tasks = self.budgets(|b, key| {
            b.running = b.observe_running(running, now);
            if starting {
                // Nothing runs yet: a first solve gives the tasks, whose
                // stored records say what intervals priority 1/2 groups
                // run at. Without this the start would plan them at
                // their floors, and announce a shedding the running
                // pool would not have.
                b.resolve_unannounced(&cat, &settings, now);
                let desired = plan::tasks(&cat, &settings, &b.plans, &b.shapes);
                let stored_running = budget::running_of_records(&desired, stored, &adaptive);
                b.running = b.observe_running(stored_running, now);
            }
            b.resolve(&cat, &settings, now);
            let events = std::mem::take(&mut b.events);
            let desired = plan::tasks(&cat, &settings, &b.plans, &b.shapes);
            let mut c = key.core();
            let s = &mut c.scheduler;
            for pool in &cat.budgets {
                s.set_pool(&pool.name, b.effective_rps(&pool.name), pool.share_burst(), now);
                // Present at 0 from the start, so `increase()` sees the first 429.
                self.metrics.rate_limited.with_label_values(&[&pool.name]);
                self.metrics.aimd_decreases.with_label_values(&[&pool.name]);
            }
            s.retain_pools(&|p: &str| cat.budgets.iter().any(|x| x.name == p));
            let keep: std::collections::HashSet<&TaskKey> = desired.iter().map(|(k, _)| k).collect();
            let gone: Vec<TaskKey> = s.tasks().map(|t| t.key.clone()).filter(|k| !keep.contains(k)).collect();
            for k in gone {
                if let Some(t) = s.get(&k) {
                    self.metrics.forget_task(&t.key);
                }
                s.remove(&k);
            }
            drop(keep);
            let tasks: std::collections::HashSet<TaskKey> = desired.iter().map(|(k, _)| k.clone()).collect();
            s.reserve(desired.len());
            for (k, meta) in desired {
                let rec = stored.remove(&k);
                s.place(k, meta, rec, now, cold_start);
            }
            self.stage_pool_events_in(&mut c, now, events);
            tasks
        });
        self.latest
            .retain(|k| tasks.contains(k), |k| cat.rules_of(k).map(|r| r.fingerprint));
        self.latest.retain_facts(|i| cat.instances.contains_key(i));
        self.poke();
    }

    /// A pool's budget in force now (AIMD applied), requests per second.
    pub fn pool_effective_rps(&self, pool: &str) -> f64 {
        self.budgets(|b, _| b.effective_rps(pool))
    }

    /// The over-budget gate (§2) for a proposed catalog and settings,
    /// with the shapes learned so far.
    pub fn check_gate(&self, cat: &Catalog, settings: &MonitoringSettings) -> Result<(), plan::OverBudget> {
        self.budgets(|b, _| plan::gate(cat, &b.shapes, &settings.scheduler))
    }

    /// A `shape_from` group answered: keep what it learned, and when the
    /// shape changed, ask the resolver to re-plan (a completion never
    /// re-plans the fleet itself).
    fn learn_shape(&self, key: &TaskKey, shape: crate::model::ShapeUpdate) {
        let changed = self.budgets(|b, _| b.learn(&key.instance, &key.group, shape));
        if changed {
            tracing::info!(instance = %key.instance, group = %key.group, "shape changed; re-planning");
            self.resolve.notify_one();
        }
    }

    /// Pool transitions as change events: staged for the next group commit
    /// (the flusher's, or the final one at shutdown), so they outlive a
    /// crash and reach a receiver that was down.
    fn stage_pool_events(&self, now: Timestamp, events: impl IntoIterator<Item = PoolEvent>) {
        let rows = self.pool_rows(now, events);
        if !rows.is_empty() {
            self.core().staged.extend(rows);
        }
    }

    /// [`Shared::stage_pool_events`] with the core already held.
    fn stage_pool_events_in(&self, c: &mut Core, now: Timestamp, events: impl IntoIterator<Item = PoolEvent>) {
        let rows = self.pool_rows(now, events);
        c.staged.extend(rows);
    }

    fn pool_rows(&self, now: Timestamp, events: impl IntoIterator<Item = PoolEvent>) -> Vec<OutboxEvent> {
        events
            .into_iter()
            .filter_map(|e| self.sink.stage(&Event::pool(now, e)))
            .collect()
    }

    /// A 429 from a task of `pool`: AIMD lowers the pool's budget (at most
    /// once per cooldown) and `Retry-After` pauses the pool.
    fn rate_limited(&self, pool: &str, retry_after: Option<Duration>, now: Timestamp) {
        let aimd = self.core().scheduler.settings().scheduler.clone();
        let decided = self.budgets(|b, _| {
            let (signal, rate) = b.on_rate_limited(pool, now, retry_after, &aimd)?;
            let event = b.plans.get(pool).filter(|_| signal.decreased).map(|p| PoolEvent {
                effective_budget_rps: rate,
                ..budget::pool_event(p, PoolTransition::AimdDecrease)
            });
            Some((signal, rate, event))
        });
        let Some((signal, rate, event)) = decided else {
            return;
        };
        let mut c = self.core();
        self.stage_pool_events_in(&mut c, now, event);
        let s = &mut c.scheduler;
        if signal.decreased {
            let burst = self
                .catalog()
                .budgets
                .iter()
                .find(|b| b.name == pool)
                .map(|b| b.share_burst());
            if let Some(burst) = burst {
                s.set_pool(pool, rate, burst, now);
            }
            self.metrics.aimd_decreases.with_label_values(&[pool]).inc();
            tracing::warn!(
                pool,
                effective_budget_rps = rate,
                "AIMD decrease: HTTP 429s recur; lowered the pool's budget"
            );
        } else if signal.lone {
            tracing::info!(
                pool,
                paused_until = %signal.paused_until.map(|t| t.to_rfc3339()).unwrap_or_default(),
                "rate limited (a lone HTTP 429): paused the pool for its Retry-After; budget kept"
            );
        }
        if let Some(until) = signal.paused_until {
            s.pause_pool(pool, until, now);
        }
        drop(c);
        if signal.resolve {
            self.resolve.notify_one();
        }
    }

    pub fn set_catalog(&self, catalog: Catalog) {
        self.put_catalog(catalog);
        let mut none = Records::default();
        self.reconcile(self.now(), &mut none, false);
    }

    /// `catalog` as the whole catalog, and its part in this member's scope
    /// as the one polled.
    fn put_catalog(&self, catalog: Catalog) {
        let polled = match &*self.scope.read().unwrap_or_else(|e| e.into_inner()) {
            Some(owned) => ownership::scoped(&catalog, owned),
            None => catalog.clone(),
        };
        self.budgets(|b, _| b.retain_shapes(&catalog));
        *self.full_catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalog);
        *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(polled);
    }

    /// The whole catalog, also what this member does not poll.
    pub fn full_catalog(&self) -> Arc<Catalog> {
        self.full_catalog.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The units this member owns (`None`: it runs alone and polls all).
    pub fn scope(&self) -> Option<Arc<BTreeSet<Unit>>> {
        self.scope.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Before [`Engine::start`]: a cluster's member starts owning `owned`
    /// (nothing, until it has heard the others).
    pub fn start_scoped(&self, owned: BTreeSet<Unit>) {
        *self.scope.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(owned));
        let full = (*self.full_catalog()).clone();
        self.put_catalog(full);
    }

    /// A cluster's member now owns `owned`. Units it lost stop at once:
    /// their tasks leave the schedule and their records are parked. Units
    /// it gained start from `adopted` (the last owner's gossiped state),
    /// else from their parked records, else as new tasks phased in.
    pub fn set_scope(&self, owned: BTreeSet<Unit>, adopted: Adoption) {
        let before = self.scope().map(|s| (*s).clone()).unwrap_or_default();
        let lost: BTreeSet<&Unit> = before.difference(&owned).collect();
        let gained: BTreeSet<&Unit> = owned.difference(&before).collect();
        let full = self.full_catalog();
        let unit_of = |k: &TaskKey| full.instances.get(&*k.instance).map(|e| ownership::unit_of(&e.config));
        let mut records = Records::default();
        {
            let c = self.core();
            let mut parked = lock(&self.parked);
            for t in c.scheduler.tasks() {
                if unit_of(&t.key).is_some_and(|u| lost.contains(&u)) {
                    parked.insert(t.key.clone(), t.rec.clone());
                }
            }
            let back: Vec<TaskKey> = parked
                .keys()
                .filter(|k| unit_of(k).is_some_and(|u| gained.contains(&u)))
                .cloned()
                .collect();
            for k in back {
                if let Some(r) = parked.remove(&k) {
                    records.insert(k, r);
                }
            }
        }
        let now = self.now();
        for (k, mut r) in adopted.records {
            if unit_of(&k).is_some_and(|u| gained.contains(&u)) {
                // Fell due in the seconds the hand-over took: due now, not
                // spread over its phase window as after a restart (that
                // would leave a gap of up to an interval).
                if r.next_run < now && now.since(r.next_run) < HANDOVER_OVERDUE {
                    r.next_run = now;
                }
                records.insert(k, r);
            }
        }
        self.budgets(|b, _| {
            for (pool, state) in adopted.aimd {
                if gained.contains(&Unit::Pool(pool.clone())) {
                    b.adopt(pool, state);
                }
            }
        });
        *self.scope.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(owned));
        self.put_catalog((*full).clone());
        self.reconcile(now, &mut records, false);
    }

    /// Tasks on the schedule (not held) and their planned demand, rps.
    pub fn load(&self) -> (usize, f64) {
        let c = self.core();
        let (mut n, mut rps) = (0, 0.0);
        for t in c.scheduler.tasks().filter(|t| t.meta.hold.is_none()) {
            n += 1;
            let secs = t.meta.planned.as_secs_f64();
            if secs > 0.0 && t.meta.cost.is_finite() {
                rps += t.meta.cost / secs;
            }
        }
        (n, rps)
    }

    /// What the owner of each unit it owns publishes: the pool's AIMD state
    /// and the records of its dead-lettered and discarded tasks; with
    /// `every_task` (a unit about to be let go) the records of its healthy
    /// tasks too, so the next owner goes on at their cadence instead of
    /// polling again what was just polled.
    pub fn unit_states(&self, every_task: bool) -> Vec<(Unit, UnitState)> {
        let Some(owned) = self.scope() else {
            return Vec::new();
        };
        let full = self.full_catalog();
        let mut out: std::collections::BTreeMap<Unit, UnitState> =
            owned.iter().map(|u| (u.clone(), UnitState::default())).collect();
        self.budgets(|b, key| {
            for (pool, a) in &b.aimd {
                if let Some(st) = out.get_mut(&Unit::Pool(pool.clone())) {
                    st.aimd = Some(a.state());
                }
            }
            let c = key.core();
            for t in c.scheduler.tasks() {
                if !every_task && t.rec.dead_letter.is_none() && !t.rec.disabled {
                    continue;
                }
                let Some(u) = full
                    .instances
                    .get(&*t.key.instance)
                    .map(|e| ownership::unit_of(&e.config))
                else {
                    continue;
                };
                if let Some(st) = out.get_mut(&u) {
                    let mut rec = t.rec.clone();
                    // One in flight is next due an interval after this poll's
                    // due time, as its completion would say.
                    if let crate::core::scheduler::TaskState::InFlight { due, .. } = t.state {
                        rec.next_run = rec.next_run.max(due.plus(c.scheduler.interval_of(t)));
                    }
                    st.records.push((t.key.clone(), rec));
                }
            }
        });
        out.into_iter().collect()
    }

    /// A reloaded config file in force at once: the file's and the
    /// environment's settings layers, the settings they give, and the
    /// catalog, with one re-plan of every pool (not one per instance).
    /// Tasks that stay keep their state; new ones are phased in.
    pub fn apply_reload(
        &self,
        catalog: Catalog,
        file: MonitoringSettings,
        env: EnvOverrides,
        settings: MonitoringSettings,
    ) {
        {
            let mut l = lock(&self.settings);
            l.file = file;
            l.env = env;
        }
        let now = self.now();
        {
            let mut c = self.core();
            let (s, rng) = c.scheduler_and_rng();
            s.set_settings(settings, now, rng);
        }
        self.put_catalog(catalog);
        let mut none = Records::default();
        self.reconcile(now, &mut none, false);
    }

    /// Apply new monitoring settings at once: queued tasks are re-timed and
    /// pins take effect.
    pub fn apply_settings(&self, settings: MonitoringSettings) {
        let now = self.now();
        {
            let mut c = self.core();
            let (s, rng) = c.scheduler_and_rng();
            s.set_settings(settings, now, rng);
        }
        let mut none = Records::default();
        self.reconcile(now, &mut none, false);
    }
}

/// Task records by key, as loaded, adopted or parked (100,000 of them at
/// a start: a fast hash, not SipHash).
pub type Records = rustc_hash::FxHashMap<TaskKey, TaskRecord>;

/// An adopted task overdue by less than this is due at once: it fell due
/// while its unit moved between members (a few gossip rounds).
const HANDOVER_OVERDUE: Duration = Duration::from_secs(10);

/// What a cluster's member takes over with a unit: the last owner's
/// gossiped state.
#[derive(Debug, Default)]
pub struct Adoption {
    /// Each pool's AIMD state, by pool name.
    pub aimd: Vec<(String, AimdState)>,
    /// The records of dead-lettered and discarded tasks, and of every task
    /// of a unit its last owner let go.
    pub records: Records,
}

/// What the owner of a unit publishes of it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct UnitState {
    /// The pool's AIMD state (none for an instance with no pool).
    pub aimd: Option<AimdState>,
    /// Dead-lettered and discarded tasks, with their records (every task
    /// when the unit is let go).
    pub records: Vec<(TaskKey, TaskRecord)>,
}

/// Handles of the running engine.
pub struct Engine {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    dispatcher: tokio::task::JoinHandle<()>,
    flusher: tokio::task::JoinHandle<()>,
    history: tokio::task::JoinHandle<()>,
    resolver: tokio::task::JoinHandle<()>,
    maintenance: tokio::task::JoinHandle<()>,
}

impl Engine {
    /// Load stored task state, place every task and start the loops.
    pub async fn start(shared: Arc<Shared>) -> Result<Engine, EngineError> {
        let tasks = shared.tasks.clone();
        let (records, corrupt) = tokio::task::spawn_blocking(move || tasks.load_tasks())
            .await
            .map_err(|e| EngineError::Join(e.to_string()))??;
        for c in corrupt {
            tracing::warn!(error = %c, "skipping unreadable task record");
        }
        let cold_start = records.is_empty();
        let mut stored: Records = records.into_iter().collect();
        let store = shared.store.clone();
        match tokio::task::spawn_blocking(move || store.load_aimd())
            .await
            .map_err(|e| EngineError::Join(e.to_string()))?
        {
            Ok((states, bad)) => {
                for e in bad {
                    tracing::warn!(error = %e, "skipping an unreadable AIMD state; that pool starts at its full budget");
                }
                shared.budgets(|b, _| b.resume_aimd(states));
            }
            // Without it each pool starts at its full budget, as before.
            Err(e) => tracing::error!(error = %e, "could not read the pools' AIMD state; starting at full budgets"),
        }
        let store = shared.store.clone();
        match tokio::task::spawn_blocking(move || store.load_maintenance())
            .await
            .map_err(|e| EngineError::Join(e.to_string()))?
        {
            Ok((windows, bad)) => {
                for e in bad {
                    tracing::warn!(error = %e, "skipping an unreadable maintenance window");
                }
                shared.core().scheduler.set_maintenance(windows);
            }
            Err(e) => tracing::error!(error = %e, "could not read the maintenance windows; none in force"),
        }
        let now = shared.now();
        shared.reconcile(now, &mut stored, cold_start);
        let store = shared.store.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            Ok::<_, crate::store::StoreError>((store.load_values()?, store.load_bodies()?))
        })
        .await
        .map_err(|e| EngineError::Join(e.to_string()))?;
        match loaded {
            Ok(((values, bad_values), (bodies, bad_bodies))) => {
                for c in bad_values.iter().chain(&bad_bodies) {
                    tracing::warn!(error = %c, "skipping unreadable stored values");
                }
                let cat = shared.catalog();
                let c = shared.core();
                shared.latest.load(
                    values,
                    bodies,
                    |k| c.scheduler.get(k).map(|t| t.rec.clone()),
                    |k| cat.rules_of(k).map(|r| r.fingerprint),
                );
            }
            // Values are a cache of answers: without them the appliance
            // still polls, and serves values again after the first polls.
            Err(e) => tracing::error!(error = %e, "could not read stored values; serving values from the first polls"),
        }
        // Rows of tasks outside this member's scope are kept for when their
        // unit comes to it.
        if shared.scope().is_some() {
            let full = shared.full_catalog();
            let mut parked = lock(&shared.parked);
            stored.retain(|k, r| {
                if full.instances.contains_key(&*k.instance) {
                    parked.insert(k.clone(), r.clone());
                    false
                } else {
                    true
                }
            });
        }
        // Rows of tasks that no longer exist.
        if !stored.is_empty() {
            let n = stored.len();
            shared
                .write_tasks(stored.into_keys().map(|k| (k, None)).collect(), Vec::new())
                .await?;
            tracing::info!(removed = n, "removed state of tasks no longer configured");
        }
        {
            let c = shared.core();
            let s = &c.scheduler;
            tracing::info!(
                tasks = s.len(),
                dead_letter = s.dead_letters().len(),
                cold_start,
                "scheduler state loaded"
            );
        }
        shared.last_dispatch_ms.store(now.0, Ordering::Relaxed);
        shared.ready.store(true, Ordering::Relaxed);
        let (stop, rx) = watch::channel(false);
        let dispatcher = tokio::spawn(loops::dispatch_loop(shared.clone(), rx.clone()));
        let flusher = tokio::spawn(loops::flush_loop(shared.clone(), rx.clone()));
        let history = tokio::spawn(loops::history_loop(shared.clone(), rx.clone()));
        let resolver = tokio::spawn(loops::resolve_loop(shared.clone(), rx.clone()));
        let maintenance = tokio::spawn(maintenance::maintenance_loop(shared.clone(), rx));
        shared.sink.start();
        Ok(Engine {
            shared,
            stop,
            dispatcher,
            flusher,
            history,
            resolver,
            maintenance,
        })
    }

    /// The handle the layers above use.
    pub fn handle(&self) -> EngineHandle {
        EngineHandle::new(self.shared.clone())
    }

    /// The database, event sink and metrics the engine was built with, for
    /// whoever assembles the layers above (they share them, not through
    /// the handle).
    pub fn parts(&self) -> (Store, Sink, Metrics) {
        self.shared.parts()
    }

    /// Stop dispatching, give polls in flight up to `grace` to finish, then
    /// flush state. Polls still running after that are abandoned.
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.stop.send(true);
        let _ = self.dispatcher.await;
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let n = self.shared.running.load(Ordering::Acquire);
            if n == 0 {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(in_flight = n, "abandoning polls still running at shutdown");
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = self.flusher.await;
        let _ = self.history.await;
        let _ = self.resolver.await;
        let _ = self.maintenance.await;
        match self.shared.flush().await {
            Ok(n) => tracing::info!(records = n, "state flushed"),
            Err(e) => tracing::error!(error = %e, "final state flush failed"),
        }
        if let Err(e) = self.shared.save_aimd().await {
            tracing::error!(error = %e, "saving the pools' AIMD state failed");
        }
        // Last: nothing emits events any more. Ships what is queued,
        // stopping at the first failure.
        self.shared.sink.shutdown(SINK_FLUSH_GRACE).await;
    }
}

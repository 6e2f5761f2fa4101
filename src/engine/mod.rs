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
//! of their record (staged in `Shared::staged` under the scheduler lock, in
//! the same critical section as the change, so a flush takes both or
//! neither). Poll events go to the sink's memory queue, best effort.
//!
//! Concurrency: the pure [`Scheduler`] sits behind one `std::sync::Mutex`,
//! held only for short, non-async sections. Every write of task rows goes
//! through `write_lock` (an async mutex), and a durable completion is applied
//! to the scheduler while that lock is held, so a group commit can never
//! write an older record over a dead-letter move.

pub mod budget;
pub mod handle;
pub mod ports;
pub mod settings;
pub mod snapshot;

#[cfg(test)]
mod tests;

use crate::config::SinkConfig;
use crate::core::Scheduler;
use crate::core::catalog::Catalog;
use crate::core::plan;
use crate::core::scheduler::{OpError, OperatorOp, Prepared};
use crate::core::task::{DeadLetterMove, Transition};
use crate::metrics::Metrics;
use crate::model::{
    BreakerState, ErrorCategory, ErrorKind, MonitoringSettings, PollError, PollResult, TaskKey, TaskRecord, Timestamp,
};
use crate::sink::event::{BreakerEvent, DeadLetterAction, DeadLetterEvent, Event, PollEvent};
use crate::sink::{Sink, SinkMetrics};
use crate::store::{OutboxEvent, Store};
use budget::BudgetState;
use ports::{Clock, Fetch, Ports};
use rand::rngs::StdRng;
use settings::SettingsLayers;
use std::collections::HashMap;
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

pub struct Shared {
    scheduler: Arc<Mutex<Scheduler>>,
    /// The event sink (a no-op when none is configured).
    pub sink: Sink,
    /// The sink's settings in force (environment applied).
    sink_config: Mutex<Option<SinkConfig>>,
    pub store: Store,
    /// How polls are made (the HTTP poller in production).
    pub fetch: Arc<dyn Fetch>,
    /// Where the engine reads the time; see [`ports`].
    clock: Arc<dyn Clock>,
    /// Every random draw of the engine. Lock order: `scheduler` before `rng`.
    rng: Mutex<StdRng>,
    pub metrics: Metrics,
    catalog: Arc<RwLock<Arc<Catalog>>>,
    settings: Mutex<SettingsLayers>,
    write_lock: tokio::sync::Mutex<()>,
    /// Change events for the next group commit, staged with the scheduler
    /// change they record. Lock order: `scheduler` before `staged`.
    staged: Mutex<Vec<OutboxEvent>>,
    /// Serialises instance changes (check-then-insert).
    catalog_edit: tokio::sync::Mutex<()>,
    /// Serialises settings changes (validate-then-save).
    settings_edit: tokio::sync::Mutex<()>,
    /// Budget pools: AIMD, solved plans, learned shapes. Lock order:
    /// `budgets` before `scheduler`, never the other way round.
    budgets: Arc<Mutex<BudgetState>>,
    wake: Notify,
    /// When the dispatcher will wake by itself (ms since the epoch, written
    /// under the scheduler lock): 0 while it waits for a worker to free up,
    /// `u64::MAX` when nothing is queued. A finished poll wakes it only if it
    /// must: a worker freed at the cap, or a task due before that time.
    dispatcher_wake: AtomicU64,
    /// Re-solve the plans now (an AIMD move past the hysteresis).
    resolve: Notify,
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
        let scheduler = Arc::new(Mutex::new(Scheduler::new(settings)));
        let budgets = Arc::new(Mutex::new(BudgetState::default()));
        let catalog = Arc::new(RwLock::new(Arc::new(catalog)));
        let snapshots = snapshot::SnapshotSource::new(scheduler.clone(), budgets.clone(), ports.clock.clone());
        let metrics = Metrics::new(snapshots, catalog.clone())?;
        let sink_config = Mutex::new(sink.clone());
        let sink = Sink::new(sink, SinkMetrics::register(&metrics.registry)?);
        sink.attach_outbox(store.clone());
        Ok(Arc::new(Shared {
            scheduler,
            sink,
            sink_config,
            store,
            fetch,
            clock: ports.clock.clone(),
            rng: Mutex::new(ports.rng()),
            metrics,
            catalog,
            settings: Mutex::new(layers),
            write_lock: tokio::sync::Mutex::new(()),
            staged: Mutex::new(Vec::new()),
            catalog_edit: tokio::sync::Mutex::new(()),
            settings_edit: tokio::sync::Mutex::new(()),
            budgets,
            wake: Notify::new(),
            dispatcher_wake: AtomicU64::new(0),
            resolve: Notify::new(),
            running: Arc::new(AtomicUsize::new(0)),
            ready: AtomicBool::new(false),
            last_dispatch_ms: AtomicU64::new(0),
            minute_polls: AtomicU64::new(0),
            minute_errors: AtomicU64::new(0),
        }))
    }

    fn sched(&self) -> MutexGuard<'_, Scheduler> {
        lock(&self.scheduler)
    }

    /// The engine's time (its [`Clock`]).
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn monitoring(&self) -> MonitoringSettings {
        self.sched().settings().clone()
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
                .is_some_and(|t| !t.is_parked() && t.in_flight.is_none() && t.rec.next_run.0 < wake)
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
        let oldest_due = self.sched().next_wakeup();
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

    /// Write task rows and the change events that go with them, in one
    /// transaction; the only path by which task state reaches the store.
    async fn write_tasks(
        &self,
        batch: Vec<(TaskKey, Option<TaskRecord>)>,
        events: Vec<OutboxEvent>,
    ) -> Result<(), EngineError> {
        if batch.is_empty() && events.is_empty() {
            return Ok(());
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.write_tasks_with_events(&batch, &events))
            .await
            .map_err(|e| EngineError::Join(e.to_string()))??;
        Ok(())
    }

    /// Group commit of everything that changed since the last flush.
    pub async fn flush(&self) -> Result<usize, EngineError> {
        let _w = self.write_lock.lock().await;
        let ((recs, deleted), events) = {
            let mut s = self.sched();
            (s.take_dirty(), std::mem::take(&mut *lock(&self.staged)))
        };
        let n = recs.len() + deleted.len();
        let mut batch: Vec<(TaskKey, Option<TaskRecord>)> = recs.into_iter().map(|(k, r)| (k, Some(r))).collect();
        batch.extend(deleted.into_iter().map(|k| (k, None)));
        if let Err(e) = self.write_tasks(batch.clone(), events.clone()).await {
            // Put them back so the next flush tries again.
            let mut s = self.sched();
            s.mark_dirty(batch.into_iter().map(|(k, _)| k));
            let mut staged = lock(&self.staged);
            let later = std::mem::replace(&mut *staged, events);
            staged.extend(later);
            return Err(e);
        }
        Ok(n)
    }

    /// Close the minute that started at `minute` (Unix seconds): store its
    /// rollup and prune rows past the retention period.
    pub async fn record_minute(&self, minute: u64) -> Result<(), EngineError> {
        let rollup = {
            let s = self.sched();
            crate::store::Rollup {
                polls: self.minute_polls.swap(0, Ordering::Relaxed),
                errors: self.minute_errors.swap(0, Ordering::Relaxed),
                queue_depth: s.queue_len() as u64,
                dead_letter: s.dead_letters().len() as u64,
            }
        };
        let keep_since = minute.saturating_sub(HISTORY_RETENTION.as_secs());
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.put_rollup(minute, &rollup, keep_since))
            .await
            .map_err(|e| EngineError::Join(e.to_string()))??;
        Ok(())
    }

    /// An operator action on one task, committed before it is applied: until
    /// the commit returns, the task keeps its old record (so the API, the
    /// dashboard and the metrics show only committed state) and is held off
    /// the schedule; if the commit fails, nothing changes and the error is
    /// returned. Shipped to the event sink, with `actor`, once committed.
    ///
    /// The commit runs in its own task, so a caller that goes away (an HTTP
    /// client hanging up) cannot leave the task held or half applied.
    pub async fn operator_action(
        self: &Arc<Self>,
        key: &TaskKey,
        actor: &str,
        op: OperatorOp,
    ) -> Result<TaskRecord, EngineError> {
        let shared = Arc::clone(self);
        let (key, actor) = (key.clone(), actor.to_string());
        tokio::spawn(async move { shared.commit_operator_action(&key, &actor, op).await })
            .await
            .map_err(|e| EngineError::Join(e.to_string()))?
    }

    async fn commit_operator_action(
        &self,
        key: &TaskKey,
        actor: &str,
        op: OperatorOp,
    ) -> Result<TaskRecord, EngineError> {
        let _w = self.write_lock.lock().await;
        let now = self.now();
        let (rec, type_name) = {
            let mut s = self.sched();
            let rec = s.prepare_op(key, op, now)?;
            s.freeze(key);
            (rec, s.get(key).map(|t| t.meta.type_name.clone()))
        };
        let what = match op {
            OperatorOp::Retry => DeadLetterAction::Retried,
            OperatorOp::Discard => DeadLetterAction::Discarded,
            OperatorOp::Enable => DeadLetterAction::Enabled,
        };
        let event = self.sink.stage(&Event::dead_letter(
            now,
            DeadLetterEvent::new(&key.instance, type_name.as_deref().unwrap_or(""), &key.group, what).with_actor(actor),
        ));
        let row = vec![(key.clone(), Some(rec.clone()))];
        if let Err(e) = self.write_tasks(row, event.into_iter().collect()).await {
            self.sched().release(key, now);
            return Err(e);
        }
        self.sched().apply_op(key, rec.clone(), now);
        self.poke();
        Ok(rec)
    }

    /// Re-solve every pool and bring the scheduler's task set in line with
    /// the catalog and the new plan: tasks added, removed, re-timed, held
    /// or released; pool token buckets set to their effective budgets.
    pub fn reconcile(&self, now: Timestamp, stored: &mut HashMap<TaskKey, TaskRecord>, cold_start: bool) {
        let cat = self.catalog();
        let mut b = lock(&self.budgets);
        let settings = self.sched().settings().scheduler.clone();
        b.resolve(&cat, &settings, now);
        let desired = plan::tasks(&cat, &settings, &b.plans, &b.shapes);
        let mut s = self.sched();
        for pool in &cat.budgets {
            s.set_pool(&pool.name, b.effective_rps(&pool.name), pool.burst, now);
            // Present at 0 from the start, so `increase()` sees the first 429.
            self.metrics.rate_limited.with_label_values(&[&pool.name]);
        }
        s.retain_pools(&|p: &str| cat.budgets.iter().any(|x| x.name == p));
        drop(b);
        let keep: std::collections::HashSet<&TaskKey> = desired.iter().map(|(k, _)| k).collect();
        let gone: Vec<TaskKey> = s.tasks().map(|t| t.key.clone()).filter(|k| !keep.contains(k)).collect();
        for k in gone {
            if let Some(t) = s.get(&k) {
                self.metrics.forget_task(&t.key);
            }
            s.remove(&k);
        }
        for (k, meta) in desired {
            let rec = stored.remove(&k);
            s.place(k, meta, rec, now, cold_start);
        }
        drop(s);
        self.poke();
    }

    /// A pool's budget in force now (AIMD applied), requests per second.
    pub fn pool_effective_rps(&self, pool: &str) -> f64 {
        lock(&self.budgets).effective_rps(pool)
    }

    /// The over-budget gate (§2) for a proposed catalog and settings,
    /// with the shapes learned so far.
    pub fn check_gate(&self, cat: &Catalog, settings: &MonitoringSettings) -> Result<(), String> {
        let b = lock(&self.budgets);
        plan::gate(cat, &b.shapes, &settings.scheduler)
    }

    /// A `shape_from` group answered: keep what it learned, and re-plan
    /// when the shape changed.
    fn learn_shape(&self, key: &TaskKey, shape: crate::model::ShapeUpdate) {
        let changed = lock(&self.budgets).learn(&key.instance, &key.group, shape);
        if changed {
            tracing::info!(task = %key, "shape changed; re-planning");
            let mut none = HashMap::new();
            self.reconcile(self.now(), &mut none, false);
        }
    }

    /// A 429 from a task of `pool`: AIMD lowers the pool's budget (at most
    /// once per cooldown) and `Retry-After` pauses the pool.
    fn rate_limited(&self, pool: &str, retry_after: Option<Duration>, now: Timestamp) {
        let (signal, rate) = {
            let mut b = lock(&self.budgets);
            let aimd = self.sched().settings().scheduler.clone();
            match b.on_rate_limited(pool, now, retry_after, &aimd) {
                Some(x) => x,
                None => return,
            }
        };
        let mut s = self.sched();
        if signal.decreased {
            let burst = self.catalog().budgets.iter().find(|b| b.name == pool).map(|b| b.burst);
            if let Some(burst) = burst {
                s.set_pool(pool, rate, burst, now);
            }
            tracing::warn!(
                pool,
                effective_budget_rps = rate,
                "rate limited (HTTP 429): lowered the pool's budget"
            );
        }
        if let Some(until) = signal.paused_until {
            s.pause_pool(pool, until, now);
        }
        drop(s);
        if signal.resolve {
            self.resolve.notify_one();
        }
    }

    pub fn set_catalog(&self, catalog: Catalog) {
        lock(&self.budgets).retain_shapes(&catalog);
        *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalog);
        let mut none = HashMap::new();
        self.reconcile(self.now(), &mut none, false);
    }

    /// Apply new monitoring settings at once: queued tasks are re-timed and
    /// pins take effect.
    pub fn apply_settings(&self, settings: MonitoringSettings) {
        let now = self.now();
        {
            let mut s = self.sched();
            let mut rng = lock(&self.rng);
            s.set_settings(settings, now, &mut *rng);
        }
        let mut none = HashMap::new();
        self.reconcile(now, &mut none, false);
    }
}

/// Handles of the running engine.
pub struct Engine {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    dispatcher: tokio::task::JoinHandle<()>,
    flusher: tokio::task::JoinHandle<()>,
    history: tokio::task::JoinHandle<()>,
    resolver: tokio::task::JoinHandle<()>,
}

impl Engine {
    /// Load stored task state, place every task and start the loops.
    pub async fn start(shared: Arc<Shared>) -> Result<Engine, EngineError> {
        let store = shared.store.clone();
        let (records, corrupt) = tokio::task::spawn_blocking(move || store.load_tasks())
            .await
            .map_err(|e| EngineError::Join(e.to_string()))??;
        for c in corrupt {
            tracing::warn!(error = %c, "skipping unreadable task record");
        }
        let cold_start = records.is_empty();
        let mut stored: HashMap<TaskKey, TaskRecord> = records.into_iter().collect();
        let now = shared.now();
        shared.reconcile(now, &mut stored, cold_start);
        // Rows of tasks that no longer exist.
        if !stored.is_empty() {
            let n = stored.len();
            shared
                .write_tasks(stored.into_keys().map(|k| (k, None)).collect(), Vec::new())
                .await?;
            tracing::info!(removed = n, "removed state of tasks no longer configured");
        }
        {
            let s = shared.sched();
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
        let dispatcher = tokio::spawn(dispatch_loop(shared.clone(), rx.clone()));
        let flusher = tokio::spawn(flush_loop(shared.clone(), rx.clone()));
        let history = tokio::spawn(history_loop(shared.clone(), rx.clone()));
        let resolver = tokio::spawn(resolve_loop(shared.clone(), rx));
        shared.sink.start();
        Ok(Engine {
            shared,
            stop,
            dispatcher,
            flusher,
            history,
            resolver,
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
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
        match self.shared.flush().await {
            Ok(n) => tracing::info!(records = n, "state flushed"),
            Err(e) => tracing::error!(error = %e, "final state flush failed"),
        }
        // Last: nothing emits events any more. Ships what is queued,
        // stopping at the first failure.
        self.shared.sink.shutdown(SINK_FLUSH_GRACE).await;
    }
}

async fn dispatch_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = shared.now();
        let mut batch = Vec::new();
        let wake_at = {
            let mut s = shared.sched();
            let workers = s.settings().scheduler.workers;
            while s.in_flight() < workers {
                let Some(d) = s.pop_due(now) else { break };
                if let Some((from, to)) = d.breaker {
                    // Staged with the dispatch's record change (same lock):
                    // the next group commit writes both.
                    let event = BreakerEvent {
                        instance: d.key.instance.to_string(),
                        type_name: d.meta.type_name.to_string(),
                        group: d.key.group.to_string(),
                        from,
                        to,
                        failures: 0,
                        retry_at: None,
                    };
                    if let Some(row) = shared.sink.stage(&Event::breaker(now, event)) {
                        lock(&shared.staged).push(row);
                    }
                }
                batch.push(d);
            }
            let wake_at = if s.in_flight() >= workers {
                None
            } else {
                s.next_wakeup()
            };
            let wake_ms = match wake_at {
                _ if s.in_flight() >= workers => 0,
                Some(t) => t.0,
                None => u64::MAX,
            };
            shared.dispatcher_wake.store(wake_ms, Ordering::Relaxed);
            wake_at
        };
        if !batch.is_empty() {
            shared.last_dispatch_ms.store(now.0, Ordering::Relaxed);
        }
        // Spawned after the lock is released: completions of earlier polls
        // are not held up by the spawns.
        for d in batch {
            shared.metrics.dispatch_lateness.observe(now.since(d.due).as_secs_f64());
            if let Some(pool) = d.meta.pool.as_deref() {
                let waited = d.due.since(d.first_due);
                shared
                    .metrics
                    .budget_wait
                    .with_label_values(&[pool])
                    .observe(waited.as_secs_f64());
            }
            shared.running.fetch_add(1, Ordering::AcqRel);
            let running = shared.running.clone();
            let task = shared.clone();
            tokio::spawn(async move {
                run_poll(task, d).await;
                // After run_poll has dropped its reference to the state.
                running.fetch_sub(1, Ordering::AcqRel);
            });
        }
        let sleep = match wake_at {
            Some(t) => Duration::from_millis(t.0.saturating_sub(shared.now().0)),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = shared.wake.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

async fn flush_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let every = shared.sched().settings().scheduler.state_flush_interval;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = shared.flush().await {
            tracing::error!(error = %e, "state flush failed; will retry");
        }
    }
}

/// How often AIMD recovery is applied to the pools' token buckets.
const AIMD_TICK: Duration = Duration::from_secs(1);

/// Keeps the plans current: AIMD recovery every second, a re-solve when the
/// effective budget moved past the hysteresis (now, on a 429, or by
/// recovery) and every `resolve_interval`.
async fn resolve_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let mut due = false;
        tokio::select! {
            _ = tokio::time::sleep(AIMD_TICK) => {}
            _ = shared.resolve.notified() => due = true,
            _ = stop.changed() => return,
        }
        let now = shared.now();
        let settings = shared.sched().settings().scheduler.clone();
        let (changed, resolve, solved_at) = {
            let mut b = lock(&shared.budgets);
            let (changed, resolve) = b.tick(now, &settings);
            (changed, resolve, b.solved_at)
        };
        if !changed.is_empty() {
            let cat = shared.catalog();
            let mut s = shared.sched();
            for (pool, rate) in changed {
                if let Some(b) = cat.budgets.iter().find(|b| b.name == pool) {
                    s.set_pool(&pool, rate, b.burst, now);
                }
            }
        }
        if due || resolve || now.since(solved_at) >= settings.resolve_interval {
            let mut none = HashMap::new();
            shared.reconcile(now, &mut none, false);
        }
    }
}

async fn history_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = shared.now().0 / 1000;
        let minute = now - now % 60;
        let wait = Duration::from_secs(minute + 60 - now);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = shared.record_minute(minute).await {
            tracing::warn!(error = %e, "could not record the minute's history");
        }
    }
}

fn deadline_error(timeout: Duration) -> PollError {
    PollError::new(
        ErrorCategory::Transient,
        ErrorKind::Timeout,
        format!("no response within {}", crate::model::duration_str::format(timeout)),
    )
}

/// One poll: run it under a hard deadline, then record the outcome.
async fn run_poll(shared: Arc<Shared>, d: crate::core::scheduler::Dispatch) {
    let key = d.key.clone();
    if let Some((from, to)) = d.breaker {
        tracing::info!(task = %key, from = from.as_str(), to = to.as_str(), "circuit breaker half-open: probing");
    }
    let started = Instant::now();
    let target = shared.catalog().target(&key);
    let forward = target.as_ref().is_some_and(|t| t.group().forward);
    let result: PollResult = match &target {
        Some(t) => {
            let (instance, group) = (&t.instance, t.group());
            let items = shared.fan_out_items(instance, group);
            // The poller enforces the instance timeout itself; this outer
            // bound guarantees a worker can never hang whatever it does.
            let hard = crate::poll::deadline(instance, group, items.len()) + Duration::from_millis(500);
            let poll = shared.fetch.fetch(instance, t.base_url.as_deref(), group, &items);
            match tokio::time::timeout(hard, poll).await {
                Ok(r) => r,
                Err(_) => Err(deadline_error(instance.timeout)),
            }
        }
        None => Err(PollError::new(
            ErrorCategory::Permanent,
            ErrorKind::Other,
            "instance or group no longer configured",
        )),
    };
    let elapsed = started.elapsed();
    let now = shared.now();
    // Rate signals go to the pool before the task is re-queued, so the
    // task's own retry lands after the pool's pause.
    if let Some(pool) = &d.meta.pool {
        let limited = match &result {
            Err(e) if e.is_rate_limited() => Some(e.retry_after),
            Ok(ok) => ok
                .failed_items
                .iter()
                .find(|f| f.error.is_rate_limited())
                .map(|f| f.error.retry_after),
            Err(_) => None,
        };
        if let Some(retry_after) = limited {
            shared.metrics.rate_limited.with_label_values(&[pool]).inc();
            shared.rate_limited(pool, retry_after, now);
        }
    }
    if let Ok(ok) = &result {
        for f in &ok.failed_items {
            tracing::warn!(task = %key, item = %f.item, error = %f.error.message, "fan-out item failed");
        }
    }
    // One lock for the common case: plan and apply together. A dead-letter
    // move is planned here and applied only after it is committed.
    let (planned, wake) = {
        let mut s = shared.sched();
        let planned = match s.prepare_completion(&key, &result, now, &mut *lock(&shared.rng)) {
            Some(p) if !p.transition.must_commit() => {
                let info = (p.transition.clone(), p.meta.clone());
                let events = change_events(&shared.sink, &p, &result, now);
                s.apply(p, now);
                if !events.is_empty() {
                    lock(&shared.staged).extend(events);
                }
                Some(Ok(info))
            }
            Some(p) => Some(Err(p)),
            None => None,
        };
        (planned, shared.must_wake_dispatcher(&s, &key))
    };
    if wake {
        shared.poke();
    }
    let info = match planned {
        Some(Ok(info)) => Some(info),
        Some(Err(p)) => {
            let meta = p.meta.clone();
            let events = change_events(&shared.sink, &p, &result, now);
            let transition = commit_then_apply(&shared, p, events, now).await;
            shared.poke();
            Some((transition, meta))
        }
        None => None,
    };
    if let Some((transition, meta)) = &info {
        emit_poll_events(&shared, &key, meta, transition, &result, elapsed, forward, now);
    }
    if let Some((transition, meta)) = info {
        shared.minute_polls.fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            shared.minute_errors.fetch_add(1, Ordering::Relaxed);
        }
        shared.metrics.observe_poll(
            &meta.type_name,
            &key,
            elapsed.as_secs_f64(),
            result.as_ref().err().map(|e| e.category),
        );
        log_transition(&key, &transition, &result);
    }
    if let Ok(ok) = result
        && let Some(shape) = ok.shape
    {
        shared.learn_shape(&key, shape);
    }
}

/// The poll event of one finished poll, to the sink's memory queue (best
/// effort). Its change events went to the outbox with its state.
#[allow(clippy::too_many_arguments)]
fn emit_poll_events(
    shared: &Shared,
    key: &TaskKey,
    meta: &crate::core::task::TaskMeta,
    t: &Transition,
    result: &PollResult,
    elapsed: Duration,
    forward: bool,
    now: Timestamp,
) {
    if !shared.sink.is_enabled() {
        return;
    }
    let mut poll = PollEvent::from_result(&key.instance, &meta.type_name, &key.group, elapsed, result, t.changed);
    if forward
        && let Ok(ok) = result
        && let Some(body) = &ok.body
    {
        poll = poll.with_body(body);
    }
    shared.sink.emit(&Event::poll(now, poll));
}

/// The change events of a planned completion, as outbox rows: a breaker
/// transition and a dead-letter move (none while the sink is off). Cheap
/// when there is no transition, which is almost always.
fn change_events(sink: &Sink, p: &Prepared, result: &PollResult, now: Timestamp) -> Vec<OutboxEvent> {
    let t = &p.transition;
    if (t.breaker.is_none() && t.dead_letter.is_none()) || !sink.is_enabled() {
        return Vec::new();
    }
    let (key, type_name) = (&p.key, &p.meta.type_name);
    let mut events = Vec::new();
    if let Some((from, to)) = t.breaker {
        events.push(Event::breaker(
            now,
            BreakerEvent {
                instance: key.instance.to_string(),
                type_name: type_name.to_string(),
                group: key.group.to_string(),
                from,
                to,
                failures: p.record.failures,
                retry_at: p.record.retry_at,
            },
        ));
    }
    let action = match t.dead_letter {
        Some(DeadLetterMove::Entered(_)) => Some(DeadLetterAction::Entered),
        Some(DeadLetterMove::Left) => Some(DeadLetterAction::Left),
        Some(DeadLetterMove::Rechecked) => Some(DeadLetterAction::Rechecked),
        None => None,
    };
    if let Some(action) = action {
        let mut e = DeadLetterEvent::new(&key.instance, type_name, &key.group, action);
        if let Some(err) = result.as_ref().err() {
            e = e.with_error(err.message.clone());
        }
        if let Some(DeadLetterMove::Entered(reason)) = t.dead_letter {
            e = e.with_reason(reason);
        }
        events.push(Event::dead_letter(now, e));
    }
    events.iter().filter_map(|e| sink.stage(e)).collect()
}

/// A dead-letter move is durable before it is visible anywhere, and its
/// change events with it. If the commit fails, the task is not moved and
/// the events are dropped with the move: showing it would promise an entry
/// (or an exit) that a crash could lose. The task keeps its record and is
/// due again when the plan said, and the move is planned afresh then.
/// Returns what the completion did.
async fn commit_then_apply(shared: &Shared, p: Prepared, events: Vec<OutboxEvent>, now: Timestamp) -> Transition {
    let _w = shared.write_lock.lock().await;
    let row = vec![(p.key.clone(), Some(p.record.clone()))];
    let result = shared.write_tasks(row, events).await;
    let mut s = shared.sched();
    match result {
        Ok(()) => {
            let transition = p.transition.clone();
            s.apply(p, now);
            transition
        }
        Err(e) => {
            tracing::error!(task = %p.key, error = %e, "could not commit a dead-letter move; the task stays where it was until its next poll");
            let changed = p.transition.changed;
            s.keep_unmoved(p, now);
            Transition {
                changed,
                ..Transition::default()
            }
        }
    }
}

fn log_transition(key: &TaskKey, t: &Transition, result: &PollResult) {
    let err = result.as_ref().err();
    match t.dead_letter {
        Some(DeadLetterMove::Entered(reason)) => tracing::warn!(
            task = %key,
            reason = reason.as_str(),
            error = err.map(|e| e.message.as_str()).unwrap_or(""),
            "Routing task to dead-letter queue"
        ),
        Some(DeadLetterMove::Left) => {
            tracing::info!(task = %key, "task recovered; leaving dead-letter queue")
        }
        Some(DeadLetterMove::Rechecked) => {
            tracing::info!(task = %key, error = err.map(|e| e.message.as_str()).unwrap_or(""), "dead-letter recheck failed")
        }
        None => {}
    }
    if let Some((from, to)) = t.breaker {
        if to == BreakerState::Open {
            tracing::warn!(task = %key, from = from.as_str(), "circuit breaker open");
        } else {
            tracing::info!(task = %key, from = from.as_str(), to = to.as_str(), "circuit breaker state changed");
        }
    }
    if let Some(e) = err {
        tracing::debug!(task = %key, category = e.category.as_str(), status = e.status, error = %e.message, "poll failed");
    }
}

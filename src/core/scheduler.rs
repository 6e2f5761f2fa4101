//! The scheduler state machine: every task, the queue of waiting tasks, and
//! the rules applied on placement, dispatch, completion, settings changes and
//! operator actions. Pure: the engine passes `now` and an RNG in and does all
//! I/O (polling, storing, metrics) with what comes out.
//!
//! Words: *prepare* is computing a change on a copy, before the engine
//! commits it; *freeze* keeps a task still while an operator action on it
//! is committed. (The budget *plan* and the plan's *holds* — shed, profile,
//! shape — are another matter: `TaskMeta::planned` and `TaskMeta::hold`.)
//!
//! Invariants: a task is either queued, in flight, or parked (discarded or
//! disabled) — never two at once, so it never runs twice concurrently; the
//! queue holds exactly the queued tasks. A frozen task (an operator action on
//! it is being committed) is never queued.
//!
//! A dead-letter move must be durable before anyone sees it, so completion is
//! split in two: [`Scheduler::prepare_completion`] computes the new record without
//! changing anything, the engine commits it, then [`Scheduler::apply`] makes it
//! visible (or [`Scheduler::keep_unmoved`], if the commit failed, ends the poll
//! without the move). While that happens the task is still in flight, so
//! nothing else can touch it. Operator actions are split the same way:
//! [`Scheduler::prepare_op`] computes the record, [`Scheduler::freeze`] keeps the
//! task off the schedule while the engine commits it, and
//! [`Scheduler::apply_op`] (or [`Scheduler::release`], if the commit failed)
//! ends the freeze.

use super::bucket::TokenBucket;
use super::queue::{QueueEntry, TaskQueue};
use super::task::{self, TaskMeta, Transition};
use super::{interval, phase, staleness};
use crate::model::{BreakerState, FAILED_ITEMS_KEPT, MonitoringSettings, PollResult, TaskKey, TaskRecord, Timestamp};
use rand::Rng;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub key: TaskKey,
    pub meta: TaskMeta,
    pub rec: TaskRecord,
    /// Set while a poll runs: the time it was due.
    pub in_flight: Option<Timestamp>,
    /// When it was put on the schedule in this process (staleness of a task
    /// that never succeeded counts from here).
    pub placed_at: Timestamp,
    /// The instance was removed while this task ran.
    pub removed: bool,
    /// Its `next_run` is a slot its pool's token bucket reserved: dispatch
    /// it then without charging the bucket again.
    pub reserved: bool,
    /// An operator action on it is being committed: it stays off the queue
    /// and is not re-timed until the action is applied or released.
    pub frozen: bool,
    /// The time it was due before its pool's bucket deferred it (for the
    /// budget-wait figure). The cadence continues from the slot it got, so
    /// tasks that fell due together spread out over the pool's rate
    /// instead of meeting the bucket in lockstep every cycle.
    pub deferred_from: Option<Timestamp>,
    /// Placed by a cold start (due at once, like every other task): its
    /// first success moves the next run by the task's phase offset, so a
    /// fleet that started together leaves lockstep after one round.
    pub spread_next: bool,
}

impl Task {
    /// Off the schedule: discarded by an operator, or held by the plan.
    pub fn is_parked(&self) -> bool {
        self.rec.disabled || self.meta.hold.is_some()
    }
}

/// A task handed to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    pub key: TaskKey,
    /// The time it was due: its cadence continues from here.
    pub due: Timestamp,
    /// When it first fell due, before any wait for its pool's token bucket
    /// (equal to `due` when it did not wait).
    pub first_due: Timestamp,
    pub meta: TaskMeta,
    pub breaker: Option<(BreakerState, BreakerState)>,
}

/// A completion computed but not yet applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub key: TaskKey,
    pub record: TaskRecord,
    pub transition: Transition,
    pub meta: TaskMeta,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("no task {0}")]
    NotFound(String),
    #[error("task {0} is not in the dead-letter queue")]
    NotDeadLettered(String),
    #[error("task {0} is being polled right now; try again in a moment")]
    InFlight(String),
}

/// An operator action on one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorOp {
    /// Probe a dead-lettered task now; it leaves the queue if the probe
    /// succeeds.
    Retry,
    /// Drop a task from the dead-letter queue and disable it until it is
    /// enabled again.
    Discard,
    /// Put a discarded task back on its schedule, due now, with a clean
    /// failure streak.
    Enable,
}

#[derive(Debug, Default)]
pub struct Scheduler {
    tasks: HashMap<TaskKey, Task>,
    queue: TaskQueue,
    settings: MonitoringSettings,
    dirty: HashSet<TaskKey>,
    deleted: Vec<TaskKey>,
    in_flight: usize,
    /// One token bucket per budget pool, at the pool's effective rate.
    buckets: HashMap<Arc<str>, TokenBucket>,
}

impl Scheduler {
    pub fn new(settings: MonitoringSettings) -> Self {
        Scheduler {
            settings,
            ..Default::default()
        }
    }

    pub fn settings(&self) -> &MonitoringSettings {
        &self.settings
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    #[cfg(test)]
    fn get_mut_for_test(&mut self, key: &TaskKey) -> &mut Task {
        self.tasks.get_mut(key).expect("a placed task")
    }

    pub fn get(&self, key: &TaskKey) -> Option<&Task> {
        self.tasks.get(key)
    }

    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values()
    }

    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// When the dispatcher should next wake up.
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        self.queue.peek().map(|e| e.next_run)
    }

    fn entry(&self, t: &Task, now: Timestamp) -> QueueEntry {
        let score = staleness::score(t.rec.last_success, now, self.settings.adaptive.max_interval);
        QueueEntry {
            next_run: t.rec.next_run,
            priority: t.meta.priority,
            staleness: (score * 1000.0) as u16,
            key: t.key.clone(),
        }
    }

    fn enqueue(&mut self, key: &TaskKey, now: Timestamp) {
        if let Some(t) = self.tasks.get(key)
            && t.in_flight.is_none()
            && !t.frozen
            && !t.is_parked()
        {
            let e = self.entry(t, now);
            self.queue.upsert(e);
        }
    }

    /// Put a task on the schedule. With a stored record it resumes its cadence
    /// (an overdue one is spread over its phase window rather than fired with
    /// every other overdue task); without one it starts `now` on a cold start
    /// and at its deterministic phase offset otherwise.
    pub fn place(
        &mut self,
        key: TaskKey,
        meta: TaskMeta,
        stored: Option<TaskRecord>,
        now: Timestamp,
        cold_start: bool,
    ) {
        if self.tasks.contains_key(&key) {
            self.update_meta(&key, meta, now);
            return;
        }
        let stored_none_cold = stored.is_none() && cold_start;
        let rec = match stored {
            Some(mut rec) => {
                if rec.next_run < now {
                    let iv = task::current_interval(&rec, &meta, &self.settings.adaptive);
                    rec.next_run = now.plus(phase::offset(&key, iv));
                }
                rec
            }
            None => {
                let iv = task::current_interval(&TaskRecord::default(), &meta, &self.settings.adaptive);
                let next_run = if cold_start {
                    now
                } else {
                    now.plus(phase::offset(&key, iv))
                };
                self.dirty.insert(key.clone());
                TaskRecord {
                    next_run,
                    ..TaskRecord::default()
                }
            }
        };
        self.tasks.insert(
            key.clone(),
            Task {
                key: key.clone(),
                meta,
                rec,
                in_flight: None,
                placed_at: now,
                removed: false,
                reserved: false,
                frozen: false,
                deferred_from: None,
                spread_next: stored_none_cold,
            },
        );
        self.enqueue(&key, now);
    }

    /// A task's group or instance changed (priority, floor, pin): re-time it.
    pub fn update_meta(&mut self, key: &TaskKey, meta: TaskMeta, now: Timestamp) {
        let Some(t) = self.tasks.get_mut(key) else {
            return;
        };
        if t.meta == meta {
            return;
        }
        let timing_changed = t.meta.planned != meta.planned || t.meta.hold != meta.hold;
        t.meta = meta;
        if t.meta.hold.is_some() {
            t.reserved = false;
            self.queue.remove(key);
            return;
        }
        if timing_changed {
            self.retime_one(key, now, &mut NoJitter);
        }
        // A task in backoff keeps its retry time through a re-timing, but
        // one whose hold just lifted must still go back on the queue.
        self.enqueue(key, now);
    }

    /// Create or update a pool's token bucket. A lower rate cancels the
    /// slots already reserved in the pool, so they are reserved again at
    /// the new rate.
    pub fn set_pool(&mut self, pool: &str, rate_rps: f64, burst: u32, now: Timestamp) {
        match self.buckets.get_mut(pool) {
            Some(b) if b.burst() == burst => {
                let slower = rate_rps < b.rate();
                b.set_rate(rate_rps, now);
                if slower {
                    self.cancel_reservations(pool);
                }
            }
            _ => {
                self.buckets
                    .insert(Arc::from(pool), TokenBucket::new(rate_rps, burst, now));
                self.cancel_reservations(pool);
            }
        }
    }

    /// Forget pools that no longer exist (their tasks are unbudgeted now).
    pub fn retain_pools(&mut self, keep: &dyn Fn(&str) -> bool) {
        self.buckets.retain(|k, _| keep(k));
    }

    /// A pool's effective rate and pause, for the health data.
    pub fn pool_bucket(&self, pool: &str) -> Option<&TokenBucket> {
        self.buckets.get(pool)
    }

    /// Nothing in `pool` is dispatched before `until` (a `Retry-After`).
    pub fn pause_pool(&mut self, pool: &str, until: Timestamp, now: Timestamp) {
        let Some(b) = self.buckets.get_mut(pool) else {
            return;
        };
        if b.paused_until(now).is_some_and(|t| t >= until) {
            return;
        }
        b.pause_until(until);
        self.cancel_reservations(pool);
    }

    fn cancel_reservations(&mut self, pool: &str) {
        for t in self.tasks.values_mut() {
            if t.reserved && t.meta.pool.as_deref() == Some(pool) {
                t.reserved = false;
            }
        }
    }

    /// Take a task off the schedule for good (its instance or group is gone).
    pub fn remove(&mut self, key: &TaskKey) {
        self.queue.remove(key);
        match self.tasks.get_mut(key) {
            Some(t) if t.in_flight.is_some() => t.removed = true,
            Some(_) => {
                self.tasks.remove(key);
                self.dirty.remove(key);
                self.deleted.push(key.clone());
            }
            None => {}
        }
    }

    /// Pop the next due task and mark it in flight. A due task whose pool's
    /// token bucket has no capacity now gets the next free slot reserved and
    /// goes back in the queue for that time; the next due task is tried.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<Dispatch> {
        let max_interval = self.settings.adaptive.max_interval;
        let (e, t) = loop {
            let e = self.queue.pop_due(now)?;
            let Some(t) = self.tasks.get_mut(&e.key) else {
                continue;
            };
            if !t.reserved
                && let Some(pool) = &t.meta.pool
                && let Some(bucket) = self.buckets.get_mut(pool)
            {
                let slot = bucket.reserve(now, t.meta.cost);
                if slot > now {
                    t.deferred_from.get_or_insert(t.rec.next_run);
                    t.rec.next_run = slot;
                    t.reserved = true;
                    // The bucket has spread it already.
                    t.spread_next = false;
                    let score = staleness::score(t.rec.last_success, now, max_interval);
                    self.queue.upsert(QueueEntry {
                        next_run: slot,
                        staleness: (score * 1000.0) as u16,
                        ..e
                    });
                    continue;
                }
            }
            break (e, t);
        };
        t.reserved = false;
        let due = t.rec.next_run;
        let first_due = t.deferred_from.take().unwrap_or(due);
        let breaker = task::on_dispatch(&mut t.rec, now);
        t.in_flight = Some(due);
        self.in_flight += 1;
        self.dirty.insert(e.key.clone());
        Some(Dispatch {
            key: e.key,
            due,
            first_due,
            meta: t.meta.clone(),
            breaker,
        })
    }

    /// Compute what a finished poll does, without changing anything.
    pub fn prepare_completion<R: Rng + ?Sized>(
        &self,
        key: &TaskKey,
        result: &PollResult,
        now: Timestamp,
        rng: &mut R,
    ) -> Option<Prepared> {
        let t = self.tasks.get(key)?;
        let due = t.in_flight?;
        let mut rec = t.rec.clone();
        let transition = match result {
            Ok(ok) => {
                rec.failed_items = ok.failed_items.iter().take(FAILED_ITEMS_KEPT).cloned().collect();
                let tr = task::on_success(&mut rec, &t.meta, ok.digest, due, now, &self.settings.adaptive, rng);
                if t.spread_next {
                    let iv = task::current_interval(&rec, &t.meta, &self.settings.adaptive);
                    rec.next_run = rec.next_run.plus(phase::offset(key, iv));
                }
                tr
            }
            Err(err) => {
                rec.failed_items.clear();
                task::on_failure(&mut rec, err, now, &self.settings.failure, rng)
            }
        };
        Some(Prepared {
            key: key.clone(),
            record: rec,
            transition,
            meta: t.meta.clone(),
        })
    }

    /// Make a prepared completion visible and queue the task again.
    pub fn apply(&mut self, planned: Prepared, now: Timestamp) {
        let record = planned.record;
        self.finish(planned.key, now, |rec| *rec = record);
    }

    /// The commit of a prepared dead-letter move failed: the task leaves
    /// flight with the record it had, so nothing shows a move that is not on
    /// disk, and the move is planned afresh when the task next completes.
    /// It is due again when the plan would have run it, not at once: a store
    /// that keeps failing is then retried, and the target polled, no faster
    /// than the task's own cadence.
    pub fn keep_unmoved(&mut self, planned: Prepared, now: Timestamp) {
        let next_run = planned.record.next_run;
        self.finish(planned.key, now, |rec| {
            rec.next_run = next_run;
            // Still dead-lettered (a recovery that was not committed): its
            // next probe is that run.
            if let Some(dl) = rec.dead_letter.as_mut() {
                dl.next_recheck = next_run;
                rec.retry_at = Some(next_run);
            }
        });
    }

    /// End a poll: the task leaves flight with its record updated by
    /// `update`, and is queued again (or dropped, if its instance went away
    /// while it ran).
    fn finish(&mut self, key: TaskKey, now: Timestamp, update: impl FnOnce(&mut TaskRecord)) {
        let Some(t) = self.tasks.get_mut(&key) else {
            return;
        };
        if t.in_flight.take().is_some() {
            self.in_flight -= 1;
        }
        update(&mut t.rec);
        t.spread_next = false;
        if t.removed {
            self.tasks.remove(&key);
            self.dirty.remove(&key);
            self.deleted.push(key);
            return;
        }
        self.dirty.insert(key.clone());
        self.enqueue(&key, now);
    }

    /// prepare + apply, for completions that need no commit in between.
    pub fn complete<R: Rng + ?Sized>(
        &mut self,
        key: &TaskKey,
        result: &PollResult,
        now: Timestamp,
        rng: &mut R,
    ) -> Option<Transition> {
        let p = self.prepare_completion(key, result, now, rng)?;
        let tr = p.transition.clone();
        self.apply(p, now);
        Some(tr)
    }

    /// New monitoring settings: store them and re-time every queued task at
    /// once (no restart). Tasks in backoff keep their retry time; dead-letter
    /// rechecks follow a changed recheck interval.
    pub fn set_settings<R: Rng + ?Sized>(&mut self, settings: MonitoringSettings, now: Timestamp, rng: &mut R) {
        if settings == self.settings {
            return;
        }
        self.settings = settings;
        let keys: Vec<TaskKey> = self.queue.iter().map(|e| e.key.clone()).collect();
        for k in keys {
            self.retime_one(&k, now, rng);
        }
    }

    fn retime_one<R: Rng + ?Sized>(&mut self, key: &TaskKey, now: Timestamp, rng: &mut R) {
        let s = self.settings.clone();
        let Some(t) = self.tasks.get_mut(key) else {
            return;
        };
        if t.in_flight.is_some() || t.frozen || t.is_parked() {
            return;
        }
        let anchor = t.rec.last_attempt.unwrap_or(t.placed_at);
        if let Some(dl) = t.rec.dead_letter.as_mut() {
            let recheck = anchor.plus(s.failure.dead_letter_recheck).max(now);
            if recheck < dl.next_recheck {
                dl.next_recheck = recheck;
                t.rec.retry_at = Some(recheck);
                t.rec.next_run = recheck;
            }
        } else if t.rec.failures == 0 && t.rec.breaker == BreakerState::Closed {
            let step = interval::retime(t.rec.interval_ms, t.meta.priority, t.meta.planned, &s.adaptive, rng);
            if s.adaptive.enabled {
                t.rec.interval_ms = step.smoothed_ms;
            }
            let mut next = anchor.plus(step.interval);
            if t.rec.last_attempt.is_none() {
                next = t.placed_at.plus(phase::offset(key, step.interval));
            }
            t.rec.next_run = next.max(now);
        } else {
            return;
        }
        t.reserved = false;
        t.deferred_from = None;
        self.dirty.insert(key.clone());
        self.enqueue(key, now);
    }

    /// What operator action `op` makes of a task's record, computed on a
    /// copy: nothing changes until [`Scheduler::apply_op`], so the engine can
    /// commit the record before anything shows it.
    pub fn prepare_op(&self, key: &TaskKey, op: OperatorOp, now: Timestamp) -> Result<TaskRecord, OpError> {
        let t = self.tasks.get(key).ok_or_else(|| OpError::NotFound(key.to_string()))?;
        let mut rec = t.rec.clone();
        match op {
            OperatorOp::Retry | OperatorOp::Discard => {
                if rec.dead_letter.is_none() {
                    return Err(OpError::NotDeadLettered(key.to_string()));
                }
                if t.in_flight.is_some() {
                    return Err(OpError::InFlight(key.to_string()));
                }
                if op == OperatorOp::Retry {
                    task::retry_now(&mut rec, now);
                } else {
                    task::discard(&mut rec);
                }
            }
            OperatorOp::Enable => {
                rec.disabled = false;
                if t.in_flight.is_none() && rec.dead_letter.is_none() {
                    rec.failures = 0;
                    rec.breaker = BreakerState::Closed;
                    rec.retry_at = None;
                    rec.next_run = now;
                }
            }
        }
        Ok(rec)
    }

    /// Freeze a task while a prepared operator action is
    /// committed: it is not dispatched or re-timed, and keeps showing its
    /// old record, until [`Scheduler::apply_op`] or [`Scheduler::release`].
    pub fn freeze(&mut self, key: &TaskKey) {
        if let Some(t) = self.tasks.get_mut(key) {
            t.frozen = true;
            self.queue.remove(key);
        }
    }

    /// A committed operator action: the task takes the planned record and
    /// goes back on its schedule (unless the action parked it). A task in
    /// flight keeps the record its poll will complete (an enable planned
    /// while it ran changes nothing).
    pub fn apply_op(&mut self, key: &TaskKey, rec: TaskRecord, now: Timestamp) {
        let Some(t) = self.tasks.get_mut(key) else {
            return;
        };
        t.frozen = false;
        if t.in_flight.is_none() {
            t.rec = rec;
        }
        if t.is_parked() {
            self.queue.remove(key);
        } else {
            self.enqueue(key, now);
        }
    }

    /// The commit of a prepared operator action failed: the task goes back on
    /// its schedule as it was.
    pub fn release(&mut self, key: &TaskKey, now: Timestamp) {
        if let Some(t) = self.tasks.get_mut(key) {
            t.frozen = false;
            self.enqueue(key, now);
        }
    }

    /// [`Scheduler::prepare_op`] and [`Scheduler::apply_op`] at once, the
    /// record left for the next group commit (for callers with no store).
    pub fn operate(&mut self, key: &TaskKey, op: OperatorOp, now: Timestamp) -> Result<TaskRecord, OpError> {
        let rec = self.prepare_op(key, op, now)?;
        self.apply_op(key, rec.clone(), now);
        self.dirty.insert(key.clone());
        Ok(rec)
    }

    /// Records changed since the last call (for the group commit) and keys
    /// deleted since then.
    pub fn take_dirty(&mut self) -> (Vec<(TaskKey, TaskRecord)>, Vec<TaskKey>) {
        let keys: Vec<TaskKey> = self.dirty.drain().collect();
        let recs = keys
            .into_iter()
            .filter_map(|k| self.tasks.get(&k).map(|t| (k, t.rec.clone())))
            .collect();
        (recs, std::mem::take(&mut self.deleted))
    }

    /// Mark records to be written with the next flush again.
    pub fn mark_dirty(&mut self, keys: impl IntoIterator<Item = TaskKey>) {
        for k in keys {
            if self.tasks.contains_key(&k) {
                self.dirty.insert(k);
            } else {
                self.deleted.push(k);
            }
        }
    }

    /// Tasks queued and due by `now + within` (overdue included, running not).
    pub fn due_within(&self, now: Timestamp, within: Duration) -> usize {
        let limit = now.plus(within);
        self.queue.iter().filter(|e| e.next_run <= limit).count()
    }

    /// Queued tasks by instance type.
    pub fn queued_per_type(&self) -> BTreeMap<Arc<str>, usize> {
        let mut m = BTreeMap::new();
        for e in self.queue.iter() {
            if let Some(t) = self.tasks.get(&e.key) {
                *m.entry(t.meta.type_name.clone()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Tasks in flight by instance type.
    pub fn in_flight_per_type(&self) -> BTreeMap<Arc<str>, usize> {
        let mut m = BTreeMap::new();
        for t in self.tasks.values().filter(|t| t.in_flight.is_some()) {
            *m.entry(t.meta.type_name.clone()).or_insert(0) += 1;
        }
        m
    }

    /// Dead-lettered tasks, most recent entry first.
    pub fn dead_letters(&self) -> Vec<&Task> {
        let mut v: Vec<&Task> = self.tasks.values().filter(|t| t.rec.dead_letter.is_some()).collect();
        v.sort_by(|a, b| {
            let sa = a.rec.dead_letter.as_ref().map(|d| d.since);
            let sb = b.rec.dead_letter.as_ref().map(|d| d.since);
            sb.cmp(&sa).then_with(|| a.key.cmp(&b.key))
        });
        v
    }

    /// The interval a task is on now.
    pub fn interval_of(&self, t: &Task) -> Duration {
        task::current_interval(&t.rec, &t.meta, &self.settings.adaptive)
    }
}

/// An RNG that always yields the midpoint, for re-timing without a caller RNG
/// (jitter then comes out as zero).
struct NoJitter;

impl rand::TryRng for NoJitter {
    type Error = std::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(u32::MAX / 2)
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(u64::MAX / 2)
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        dst.fill(0x7f);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ErrorCategory, ErrorKind, PollError, PollSuccess};
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const SEC: u64 = 1000;

    fn meta(planned_secs: u64) -> TaskMeta {
        TaskMeta::new("http", 1, Duration::from_secs(planned_secs))
    }
    fn ok(d: u64) -> PollResult {
        Ok(PollSuccess {
            status: 200,
            digest: d,
            body_bytes: 2,
            ..Default::default()
        })
    }
    fn fail() -> PollResult {
        Err(PollError::new(
            ErrorCategory::Transient,
            ErrorKind::Connect,
            "connection refused",
        ))
    }
    fn k(i: &str) -> TaskKey {
        TaskKey::new(i, "probe")
    }

    fn pooled(planned_secs: u64) -> TaskMeta {
        TaskMeta {
            pool: Some(Arc::from("org")),
            ..meta(planned_secs)
        }
    }

    fn fixed() -> MonitoringSettings {
        let mut m = MonitoringSettings::default();
        m.adaptive.enabled = false;
        m
    }

    #[test]
    fn a_pool_bucket_spaces_dispatches_and_keeps_each_task_on_its_cadence() {
        let mut s = Scheduler::new(fixed());
        let t0 = Timestamp(100 * SEC);
        s.set_pool("org", 1.0, 1, t0);
        for i in ["a", "b", "c"] {
            s.place(k(i), pooled(60), None, t0, true);
        }
        // One token: one dispatch now, the other two get the next slots.
        let first = s.pop_due(t0).expect("one dispatch");
        assert!(s.pop_due(t0).is_none(), "the bucket is empty");
        let slots: Vec<Timestamp> = ["a", "b", "c"]
            .iter()
            .filter(|i| **i != &*first.key.instance)
            .map(|i| s.get(&k(i)).map(|t| t.rec.next_run).unwrap_or_default())
            .collect();
        let mut sorted = slots.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            [t0.plus(Duration::from_secs(1)), t0.plus(Duration::from_secs(2))]
        );
        // A reserved slot dispatches without charging the bucket again; its
        // cadence continues from the slot (so tasks that fell due together
        // stay spread); the wait counts from when it first fell due.
        let slot = t0.plus(Duration::from_secs(1));
        let second = s.pop_due(slot).expect("second slot");
        assert_eq!(second.due, slot);
        assert_eq!(second.first_due, t0);
        s.complete(&second.key, &ok(1), slot, &mut SmallRng::seed_from_u64(1));
        let next = s.get(&second.key).map(|t| t.rec.next_run);
        assert_eq!(next, Some(slot.plus(Duration::from_secs(60))), "slot + interval");
        // An unbudgeted task is never held up by the pool.
        s.place(k("free"), meta(60), None, t0, true);
        let d = s.pop_due(t0.plus(Duration::from_secs(1))).expect("unbudgeted dispatch");
        assert_eq!(&*d.key.instance, "free");
    }

    #[test]
    fn a_paused_pool_dispatches_nothing_until_the_pause_ends() {
        let mut s = Scheduler::new(fixed());
        let t0 = Timestamp(100 * SEC);
        s.set_pool("org", 10.0, 5, t0);
        s.place(k("a"), pooled(60), None, t0, true);
        s.place(k("b"), pooled(60), None, t0, true);
        let until = t0.plus(Duration::from_secs(7));
        s.pause_pool("org", until, t0);
        assert!(s.pop_due(t0).is_none());
        assert!(s.pop_due(until.minus(Duration::from_millis(1))).is_none());
        // After the pause: one at once, the next at the steady rate.
        assert!(s.pop_due(until).is_some());
        assert!(s.pop_due(until).is_none(), "no burst right after a pause");
        assert!(s.pop_due(until.plus(Duration::from_millis(100))).is_some());
        // A shorter pause never shortens a longer one.
        s.pause_pool("org", t0, t0);
        assert_eq!(s.pool_bucket("org").and_then(|b| b.paused_until(t0)), Some(until));
    }

    #[test]
    fn a_held_task_leaves_the_queue_and_returns_when_released() {
        let mut s = Scheduler::new(fixed());
        let t0 = Timestamp(100 * SEC);
        s.place(k("a"), meta(10), None, t0, true);
        assert_eq!(s.queue_len(), 1);
        let held = TaskMeta {
            hold: Some(task::Hold::Shed),
            ..meta(10)
        };
        s.update_meta(&k("a"), held, t0);
        assert_eq!(s.queue_len(), 0);
        assert!(s.pop_due(t0.plus(Duration::from_secs(60))).is_none());
        s.update_meta(&k("a"), meta(10), t0.plus(Duration::from_secs(60)));
        assert_eq!(s.queue_len(), 1);
        assert!(
            s.pop_due(t0.plus(Duration::from_secs(60))).is_some(),
            "due again once released"
        );
    }

    #[test]
    fn a_task_in_backoff_returns_at_its_retry_time_when_its_hold_lifts() {
        let mut s = Scheduler::new(fixed());
        let mut rng = SmallRng::seed_from_u64(1);
        let t0 = Timestamp(100 * SEC);
        s.place(k("a"), meta(10), None, t0, true);
        let d = s.pop_due(t0).expect("due");
        s.complete(&d.key, &fail(), t0, &mut rng);
        let retry = s.get(&k("a")).map(|t| t.rec.next_run).expect("task");
        assert!(s.get(&k("a")).is_some_and(|t| t.rec.failures == 1 && t.rec.dead_letter.is_none()));
        let held = TaskMeta {
            hold: Some(task::Hold::Shed),
            ..meta(10)
        };
        s.update_meta(&k("a"), held, t0);
        assert_eq!(s.queue_len(), 0);
        s.update_meta(&k("a"), meta(10), t0);
        assert_eq!(s.queue_len(), 1, "back on the queue");
        assert_eq!(s.next_wakeup(), Some(retry), "at the retry time it had");
    }

    #[test]
    fn a_new_planned_interval_retimes_a_queued_task() {
        let mut s = Scheduler::new(fixed());
        let t0 = Timestamp(100 * SEC);
        s.place(k("a"), meta(10), None, t0, true);
        let d = s.pop_due(t0).expect("dispatch");
        s.get_mut_for_test(&k("a")).spread_next = false;
        s.complete(&d.key, &ok(1), t0, &mut SmallRng::seed_from_u64(1));
        assert_eq!(
            s.get(&k("a")).map(|t| t.rec.next_run),
            Some(t0.plus(Duration::from_secs(10)))
        );
        s.update_meta(&k("a"), meta(45), t0.plus(Duration::from_secs(1)));
        assert_eq!(
            s.get(&k("a")).map(|t| t.rec.next_run),
            Some(t0.plus(Duration::from_secs(45))),
            "last attempt + the new planned interval"
        );
    }

    #[test]
    fn cold_start_polls_at_once_and_later_tasks_get_their_phase() {
        let mut s = Scheduler::new(MonitoringSettings::default());
        let now = Timestamp(100 * SEC);
        s.place(k("a"), meta(5), None, now, true);
        s.place(k("b"), meta(5), None, now, false);
        assert_eq!(s.get(&k("a")).map(|t| t.rec.next_run), Some(now));
        let b = s.get(&k("b")).map(|t| t.rec.next_run).unwrap_or_default();
        assert_eq!(b, now.plus(phase::offset(&k("b"), Duration::from_secs(10))));
    }

    #[test]
    fn a_cold_started_fleet_leaves_lockstep_after_its_first_round() {
        let mut s = Scheduler::new(fixed());
        let mut rng = SmallRng::seed_from_u64(7);
        let now = Timestamp(100 * SEC);
        let iv = Duration::from_secs(10);
        let n = 1000;
        for i in 0..n {
            s.place(k(&format!("inst-{i}")), meta(10), None, now, true);
        }
        // Round one: everything due at once.
        let mut keys = Vec::new();
        while let Some(d) = s.pop_due(now) {
            assert_eq!(d.due, now);
            keys.push(d.key);
        }
        assert_eq!(keys.len(), n);
        for key in &keys {
            s.complete(key, &ok(1), now.plus(Duration::from_millis(20)), &mut rng);
        }
        // Round two: each at its phase offset after one interval, spread over
        // the offset window in tenths of roughly equal size.
        let mut tenths = [0u32; 10];
        for key in &keys {
            let next = s.get(key).map(|t| t.rec.next_run).unwrap_or_default();
            assert_eq!(next, now.plus(iv).plus(phase::offset(key, iv)), "{key:?}");
            let into = next.0 - now.plus(iv).0;
            tenths[(into * 10 / phase::window(iv).as_millis() as u64) as usize] += 1;
        }
        assert!(tenths.iter().all(|c| (60..140).contains(c)), "{tenths:?}");
        // Round three keeps the cadence: the offset is applied once.
        let key = keys[0].clone();
        let second = s.get(&key).map(|t| t.rec.next_run).unwrap_or_default();
        let mut d = s.pop_due(second).expect("due");
        while d.key != key {
            s.complete(&d.key, &ok(1), second, &mut rng);
            d = s.pop_due(second).expect("due");
        }
        s.complete(&key, &ok(1), second, &mut rng);
        assert_eq!(s.get(&key).map(|t| t.rec.next_run), Some(second.plus(iv)));
    }

    #[test]
    fn a_task_is_never_in_flight_twice() {
        let mut s = Scheduler::new(MonitoringSettings::default());
        let now = Timestamp(SEC);
        s.place(k("a"), meta(5), None, now, true);
        assert!(s.pop_due(now).is_some());
        assert!(s.pop_due(now.plus(Duration::from_secs(3600))).is_none());
        assert_eq!((s.in_flight(), s.queue_len()), (1, 0));
        // re-placing an in-flight task does not queue it again
        s.place(k("a"), meta(5), None, now, true);
        assert_eq!(s.queue_len(), 0);
        // nor does an operator enable
        let _ = s.operate(&k("a"), OperatorOp::Enable, now);
        assert_eq!(s.queue_len(), 0);
    }

    #[test]
    fn a_task_that_keeps_succeeding_keeps_its_cadence() {
        let mut settings = MonitoringSettings::default();
        settings.adaptive.enabled = false;
        let mut s = Scheduler::new(settings);
        let mut rng = SmallRng::seed_from_u64(1);
        let start = Timestamp(10 * SEC);
        s.place(k("a"), meta(5), None, start, false);
        let mut expected = start.plus(phase::offset(&k("a"), Duration::from_secs(5)));
        for i in 0..100u64 {
            let d = s.pop_due(expected).expect("due");
            assert_eq!(d.due, expected);
            // every poll takes 1.7 s and the dispatcher was a bit late
            s.complete(&d.key, &ok(i % 3), expected.plus(Duration::from_millis(1700)), &mut rng);
            expected = expected.plus(Duration::from_secs(5));
            assert_eq!(s.next_wakeup(), Some(expected), "poll {i}");
        }
    }

    proptest::proptest! {
        /// Poll latency and dispatch lateness never move a succeeding task's
        /// due times: two runs with the same seed and different latencies
        /// see exactly the same sequence of due times.
        #[test]
        fn due_times_do_not_drift_with_latency(
            seed: u64,
            adaptive: bool,
            lat_a in proptest::collection::vec(0u64..4_000, 40),
            lat_b in proptest::collection::vec(0u64..4_000, 40),
            digests in proptest::collection::vec(0u64..3, 40),
        ) {
            let run = |lat: &[u64]| {
                let mut settings = MonitoringSettings::default();
                settings.adaptive.enabled = adaptive;
                let mut s = Scheduler::new(settings);
                let mut rng = SmallRng::seed_from_u64(seed);
                let start = Timestamp(1_000_000);
                s.place(k("a"), meta(5), None, start, false);
                let mut dues = Vec::new();
                for (i, l) in lat.iter().enumerate() {
                    let due = s.next_wakeup().unwrap_or_default();
                    // dispatched up to 1 s late, finishing `l` ms after that
                    let dispatched = due.plus(Duration::from_millis(l / 4));
                    let d = s.pop_due(dispatched).expect("due");
                    dues.push(d.due);
                    s.complete(&d.key, &ok(digests[i]), dispatched.plus(Duration::from_millis(*l)), &mut rng);
                }
                dues
            };
            let a = run(&lat_a);
            let b = run(&lat_b);
            proptest::prop_assert_eq!(&a, &b);
            for w in a.windows(2) {
                let gap = w[1].since(w[0]);
                proptest::prop_assert!(gap >= Duration::from_secs(5), "never below the planned interval: {:?}", gap);
                if !adaptive {
                    proptest::prop_assert_eq!(gap, Duration::from_secs(5));
                }
            }
        }
    }

    #[test]
    fn dead_letter_completion_is_planned_before_it_is_visible() {
        let mut settings = MonitoringSettings::default();
        settings.failure.dead_letter_after = 1;
        let mut s = Scheduler::new(settings);
        let mut rng = SmallRng::seed_from_u64(1);
        let now = Timestamp(SEC);
        s.place(k("a"), meta(5), None, now, true);
        let d = s.pop_due(now).expect("due");
        let p = s.prepare_completion(&d.key, &fail(), now, &mut rng).expect("planned");
        assert!(p.transition.must_commit());
        assert!(s.dead_letters().is_empty(), "not visible before apply");
        s.apply(p, now);
        assert_eq!(s.dead_letters().len(), 1);
        assert_eq!(s.queue_len(), 1);
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn a_dead_letter_entry_whose_commit_failed_is_not_shown_and_is_planned_again() {
        let mut settings = MonitoringSettings::default();
        settings.failure.dead_letter_after = 1;
        let mut s = Scheduler::new(settings);
        let mut rng = SmallRng::seed_from_u64(1);
        let now = Timestamp(SEC);
        s.place(k("a"), meta(5), None, now, true);
        let d = s.pop_due(now).expect("due");
        let before = s.get(&k("a")).map(|t| t.rec.clone()).expect("task");
        let p = s.prepare_completion(&d.key, &fail(), now, &mut rng).expect("planned");
        assert!(p.transition.must_commit());
        let planned_run = p.record.next_run;
        assert!(planned_run > now);

        s.keep_unmoved(p, now);
        assert!(s.dead_letters().is_empty(), "an uncommitted entry is never shown");
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.queue_len(), 1);
        let t = s.get(&k("a")).expect("task");
        assert_eq!(t.rec.failures, before.failures, "the failure is not counted either");
        assert_eq!(t.rec.next_run, planned_run);
        assert!(s.pop_due(now).is_none(), "not due again at once");
        assert!(
            s.take_dirty()
                .0
                .iter()
                .any(|(key, r)| *key == k("a") && r.dead_letter.is_none())
        );

        // Its next completion plans the move again.
        let d = s.pop_due(planned_run).expect("due again");
        let p = s
            .prepare_completion(&d.key, &fail(), planned_run, &mut rng)
            .expect("planned");
        assert!(p.transition.must_commit());
        s.apply(p, planned_run);
        assert_eq!(s.dead_letters().len(), 1);
    }

    #[test]
    fn a_recovery_whose_commit_failed_stays_dead_lettered_until_its_next_probe() {
        let mut settings = MonitoringSettings::default();
        settings.failure.dead_letter_after = 1;
        let mut s = Scheduler::new(settings);
        let mut rng = SmallRng::seed_from_u64(1);
        let now = Timestamp(SEC);
        s.place(k("a"), meta(5), None, now, true);
        let d = s.pop_due(now).expect("due");
        s.complete(&d.key, &fail(), now, &mut rng);
        let recheck = s.get(&k("a")).map(|t| t.rec.next_run).expect("task");
        let d = s.pop_due(recheck).expect("recheck due");
        let p = s
            .prepare_completion(&d.key, &ok(1), recheck, &mut rng)
            .expect("planned");
        assert!(p.transition.must_commit(), "a recovery is a move");
        let planned_run = p.record.next_run;

        s.keep_unmoved(p, recheck);
        assert_eq!(s.dead_letters().len(), 1, "still listed: the recovery is not on disk");
        let rec = &s.get(&k("a")).expect("task").rec;
        assert_eq!(rec.next_run, planned_run);
        assert_eq!(rec.retry_at, Some(planned_run));
        assert_eq!(rec.dead_letter.as_ref().map(|dl| dl.next_recheck), Some(planned_run));
        assert!(s.pop_due(recheck).is_none(), "not probed again at once");
        assert!(s.pop_due(planned_run).is_some());
    }

    #[test]
    fn an_operator_action_changes_nothing_until_it_is_applied() {
        let mut settings = MonitoringSettings::default();
        settings.failure.dead_letter_after = 1;
        let mut s = Scheduler::new(settings.clone());
        let mut rng = SmallRng::seed_from_u64(1);
        let now = Timestamp(SEC);
        s.place(k("a"), meta(5), None, now, true);
        let d = s.pop_due(now).expect("due");
        s.complete(&d.key, &fail(), now, &mut rng);
        let before = s.get(&k("a")).cloned().expect("task");
        let _ = s.take_dirty();

        // Prepared: the record says discarded, the scheduler does not.
        let later = now.plus(Duration::from_secs(60));
        let rec = s.prepare_op(&k("a"), OperatorOp::Discard, later).expect("planned");
        assert!(rec.disabled && rec.dead_letter.is_none());
        assert_eq!(s.get(&k("a")), Some(&before));
        assert_eq!(s.dead_letters().len(), 1);

        // Held while it is committed: still listed, never dispatched, and
        // not put back on the queue by a re-timing.
        s.freeze(&k("a"));
        assert_eq!(s.dead_letters().len(), 1);
        assert_eq!(s.queue_len(), 0);
        let recheck = before.rec.next_run;
        assert!(s.pop_due(recheck.plus(Duration::from_secs(3600))).is_none());
        settings.failure.dead_letter_recheck = Duration::from_secs(1);
        s.set_settings(settings, later, &mut rng);
        s.update_meta(&k("a"), meta(7), later);
        assert_eq!(s.queue_len(), 0);
        assert_eq!(s.get(&k("a")).map(|t| &t.rec), Some(&before.rec));

        // A failed commit releases it as it was.
        s.release(&k("a"), later);
        assert_eq!(s.get(&k("a")).map(|t| &t.rec), Some(&before.rec));
        assert_eq!(s.queue_len(), 1);
        assert_eq!(s.dead_letters().len(), 1);

        // A committed one becomes visible at once, and is not left for the
        // group commit (it is on disk already).
        s.freeze(&k("a"));
        s.apply_op(&k("a"), rec.clone(), later);
        assert!(s.dead_letters().is_empty());
        assert_eq!(s.get(&k("a")).map(|t| &t.rec), Some(&rec));
        assert_eq!(s.queue_len(), 0, "a discarded task stays off the queue");
        assert!(s.take_dirty().0.is_empty());
        let rec = s.prepare_op(&k("a"), OperatorOp::Enable, later).expect("enable");
        s.freeze(&k("a"));
        s.apply_op(&k("a"), rec, later);
        assert_eq!(s.pop_due(later).map(|d| d.key), Some(k("a")));
    }

    #[test]
    fn operator_retry_and_discard() {
        let mut settings = MonitoringSettings::default();
        settings.failure.dead_letter_after = 1;
        let mut s = Scheduler::new(settings);
        let mut rng = SmallRng::seed_from_u64(1);
        let now = Timestamp(SEC);
        s.place(k("a"), meta(5), None, now, true);
        s.place(k("b"), meta(5), None, now, true);
        for _ in 0..2 {
            let d = s.pop_due(now).expect("due");
            s.complete(&d.key, &fail(), now, &mut rng);
        }
        assert_eq!(s.dead_letters().len(), 2);
        assert_eq!(
            s.operate(&k("zz"), OperatorOp::Retry, now),
            Err(OpError::NotFound("zz/probe".into()))
        );

        let later = now.plus(Duration::from_secs(60));
        s.operate(&k("a"), OperatorOp::Retry, later).expect("retry");
        let d = s.pop_due(later).expect("a is due now");
        assert_eq!(d.key, k("a"));
        s.complete(&d.key, &ok(1), later, &mut rng);
        assert_eq!(s.dead_letters().len(), 1, "a recovered");

        s.operate(&k("b"), OperatorOp::Discard, later).expect("discard");
        assert!(s.dead_letters().is_empty());
        assert!(s.get(&k("b")).is_some_and(|t| t.rec.disabled));
        assert!(!s.queue.contains(&k("b")), "discarded tasks are not polled");
        assert_eq!(
            s.operate(&k("b"), OperatorOp::Discard, later),
            Err(OpError::NotDeadLettered("b/probe".into()))
        );
        s.operate(&k("b"), OperatorOp::Enable, later).expect("enable");
        assert_eq!(s.pop_due(later).map(|d| d.key), Some(k("b")));
    }

    #[test]
    fn resuming_keeps_future_times_and_spreads_overdue_ones() {
        let mut s = Scheduler::new(MonitoringSettings::default());
        let now = Timestamp(1000 * SEC);
        let future = TaskRecord {
            next_run: now.plus(Duration::from_secs(7)),
            ..TaskRecord::default()
        };
        s.place(k("future"), meta(5), Some(future), now, false);
        assert_eq!(
            s.get(&k("future")).map(|t| t.rec.next_run),
            Some(now.plus(Duration::from_secs(7)))
        );

        for i in 0..200 {
            let overdue = TaskRecord {
                next_run: Timestamp(10 * SEC),
                interval_ms: 60_000,
                ..TaskRecord::default()
            };
            s.place(k(&format!("o{i}")), meta(5), Some(overdue), now, false);
        }
        let due_at_once = s.due_within(now, Duration::ZERO);
        assert!(due_at_once < 10, "{due_at_once} overdue tasks fire at once");
        assert!(s.due_within(now, Duration::from_secs(30)) >= 199);
    }

    #[test]
    fn open_breakers_and_dead_letters_keep_their_times_on_resume() {
        let mut s = Scheduler::new(MonitoringSettings::default());
        let now = Timestamp(1000 * SEC);
        let retry = now.plus(Duration::from_secs(15));
        let rec = TaskRecord {
            breaker: BreakerState::Open,
            failures: 3,
            retry_at: Some(retry),
            next_run: retry,
            ..TaskRecord::default()
        };
        s.place(k("a"), meta(5), Some(rec), now, false);
        assert!(s.pop_due(retry.minus(Duration::from_millis(1))).is_none());
        let d = s.pop_due(retry).expect("probe at retryAt");
        assert_eq!(d.breaker, Some((BreakerState::Open, BreakerState::HalfOpen)));
    }

    #[test]
    fn settings_changes_retime_queued_tasks_at_once() {
        let mut s = Scheduler::new(MonitoringSettings::default());
        let mut rng = SmallRng::seed_from_u64(5);
        let now = Timestamp(SEC);
        s.place(k("a"), meta(1), None, now, true);
        let d = s.pop_due(now).expect("due");
        // idle for a long time → long interval
        s.complete(&d.key, &ok(1), now, &mut rng);
        for _ in 0..30 {
            let t = s.next_wakeup().unwrap_or_default();
            let d = s.pop_due(t).expect("due");
            s.complete(&d.key, &ok(1), t, &mut rng);
        }
        let mut m = meta(1);
        m.priority = 3;
        let t = s.next_wakeup().unwrap_or_default();
        s.update_meta(&k("a"), m, t);
        let long = s.next_wakeup().unwrap_or_default();

        let mut fast = MonitoringSettings::default();
        fast.adaptive.max_interval = Duration::from_secs(10);
        fast.adaptive.base_interval = Duration::from_secs(10);
        let at = t;
        s.set_settings(fast, at, &mut rng);
        let last = s.get(&k("a")).and_then(|t| t.rec.last_attempt).unwrap_or_default();
        let next = s.next_wakeup().unwrap_or_default();
        assert!(
            next <= last.plus(Duration::from_millis(10_500)),
            "next {next:?} long {long:?}"
        );

        let mut off = MonitoringSettings::default();
        off.adaptive.enabled = false;
        s.set_settings(off, at, &mut rng);
        assert_eq!(s.next_wakeup(), Some(last.plus(Duration::from_secs(1)).max(at)));
    }

    #[test]
    fn removal_while_in_flight_waits_for_completion() {
        let mut s = Scheduler::new(MonitoringSettings::default());
        let mut rng = SmallRng::seed_from_u64(1);
        let now = Timestamp(SEC);
        s.place(k("a"), meta(5), None, now, true);
        let d = s.pop_due(now).expect("due");
        s.remove(&d.key);
        assert!(s.get(&d.key).is_some());
        s.complete(&d.key, &ok(1), now, &mut rng);
        assert!(s.get(&d.key).is_none());
        let (_, deleted) = s.take_dirty();
        assert_eq!(deleted, vec![k("a")]);
        assert_eq!(s.queue_len(), 0);
    }
}

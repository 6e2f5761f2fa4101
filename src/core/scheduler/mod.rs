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
//! held) — never two at once ([`TaskState`] is one of them), so it never
//! runs twice concurrently; the queue holds exactly the queued tasks that
//! are not frozen.
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
//!
//! Files: `state.rs` the task and its state, `dispatch.rs` popping due tasks
//! past their pools' token buckets, `completion.rs` the end of a poll,
//! `operator.rs` operator actions; this file placement, re-timing and the
//! figures read from the schedule.

mod completion;
mod dispatch;
mod operator;
mod state;

pub use completion::Prepared;
pub use dispatch::Dispatch;
pub use operator::{OpError, OperatorOp};
pub use state::{Deferral, Parked, Spread, Task, TaskState};

use super::bucket::TokenBucket;
use super::maintenance::{self, MaintenanceWindow};
use super::queue::{QueueEntry, TaskQueue};
use super::task::{self, TaskMeta};
use super::{interval, phase, staleness};
use crate::model::{BreakerState, MonitoringSettings, TaskKey, TaskRecord, Timestamp};
use rand::Rng;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
    /// The maintenance windows: a failure inside one never dead-letters.
    maintenance: Arc<[MaintenanceWindow]>,
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

    /// The maintenance windows in force.
    pub fn maintenance(&self) -> Arc<[MaintenanceWindow]> {
        self.maintenance.clone()
    }

    /// Replace the maintenance windows (made, ended, loaded at start).
    pub fn set_maintenance(&mut self, windows: Vec<MaintenanceWindow>) {
        self.maintenance = windows.into();
    }

    /// Whether the instance of a task (with `meta`) is in a maintenance
    /// window at `now`.
    pub fn in_maintenance(&self, instance: &str, meta: &TaskMeta, now: Timestamp) -> bool {
        !self.maintenance.is_empty()
            && maintenance::covered(&self.maintenance, instance, &meta.type_name, meta.pool.as_deref(), now)
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

    /// Put a queued task that is not frozen on the queue (or update its
    /// entry); any other task stays off it.
    fn enqueue(&mut self, key: &TaskKey, now: Timestamp) {
        if let Some(t) = self.tasks.get(key)
            && t.is_queued()
            && !t.frozen
        {
            let e = self.entry(t, now);
            self.queue.upsert(e);
        }
    }

    /// Drop a task that is not in flight: it is gone from the schedule, and
    /// the store deletes its record with the next flush.
    fn delete(&mut self, key: TaskKey) {
        self.tasks.remove(&key);
        self.dirty.remove(&key);
        self.deleted.push(key);
    }

    /// Room for `count` tasks in all (a re-plan about to place them), so a
    /// start with 100,000 does not rehash the task map and the queue as they
    /// grow.
    pub fn reserve(&mut self, count: usize) {
        let more = count.saturating_sub(self.tasks.len());
        self.tasks.reserve(more);
        self.queue.reserve(more);
    }

    /// Put a task on the schedule. With a stored record it resumes its cadence
    /// (an overdue one is spread over its phase window rather than fired with
    /// every other overdue task); without one it starts `now` on a cold start
    /// and at its deterministic phase offset otherwise, and after that first
    /// poll settles at its place in the cycle ([`Spread::Settle`]).
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
        let mut spread = Spread::None;
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
                let first = if cold_start {
                    Duration::ZERO
                } else {
                    phase::offset(&key, iv)
                };
                spread = Spread::Settle { first };
                let next_run = now.plus(first);
                self.dirty.insert(key.clone());
                TaskRecord {
                    next_run,
                    ..TaskRecord::default()
                }
            }
        };
        self.tasks
            .insert(key.clone(), Task::new(key.clone(), meta, rec, now, spread));
        self.enqueue(&key, now);
    }

    /// A task's group or instance changed (priority, floor, pin, hold):
    /// re-time it. A hold parks it; a hold that lifts puts it back on its
    /// cadence.
    pub fn update_meta(&mut self, key: &TaskKey, meta: TaskMeta, now: Timestamp) {
        let Some(t) = self.tasks.get_mut(key) else {
            return;
        };
        if t.meta == meta {
            return;
        }
        let timing_changed = t.meta.planned != meta.planned || t.meta.hold != meta.hold;
        let lifted = t.meta.hold.is_some() && meta.hold.is_none();
        t.meta = meta;
        t.settle();
        if t.meta.hold.is_some() {
            self.queue.remove(key);
            return;
        }
        if timing_changed {
            self.retime_one(key, now, &mut NoJitter);
        }
        if lifted {
            self.spread_if_overdue(key, now);
        }
        // A task in backoff keeps its retry time through a re-timing, but
        // one whose hold just lifted must still go back on the queue.
        self.enqueue(key, now);
    }

    /// A task back from a hold whose cadence says it is overdue starts at
    /// its phase offset from `now`, as on a restart: the tasks of a group
    /// planned back in (shed, then fitting again) do not all fire at once
    /// and meet their pool's bucket as one burst.
    fn spread_if_overdue(&mut self, key: &TaskKey, now: Timestamp) {
        let adaptive = &self.settings.adaptive;
        let Some(t) = self.tasks.get_mut(key) else {
            return;
        };
        let healthy = t.rec.failures == 0 && t.rec.dead_letter.is_none() && t.rec.breaker == BreakerState::Closed;
        if healthy && t.is_queued() && !t.frozen && t.rec.next_run <= now {
            let iv = task::current_interval(&t.rec, &t.meta, adaptive);
            let first = phase::offset(key, iv);
            t.rec.next_run = now.plus(first);
            if t.spread == Spread::None {
                t.spread = Spread::Settle { first };
            }
            self.dirty.insert(key.clone());
        }
    }

    /// Take a task off the schedule for good (its instance or group is gone).
    /// One in flight is dropped when its poll ends.
    pub fn remove(&mut self, key: &TaskKey) {
        self.queue.remove(key);
        match self.tasks.get_mut(key) {
            Some(Task {
                state: TaskState::InFlight { removed, .. },
                ..
            }) => *removed = true,
            Some(_) => self.delete(key.clone()),
            None => {}
        }
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

    /// Re-time a queued task that is not frozen from its last attempt: a
    /// healthy one at its new interval, a dead-lettered one at a sooner
    /// recheck; one in backoff keeps its retry time. A re-timed task loses
    /// any deferral (it meets its pool's bucket afresh).
    fn retime_one<R: Rng + ?Sized>(&mut self, key: &TaskKey, now: Timestamp, rng: &mut R) {
        let s = &self.settings;
        let Some(t) = self.tasks.get_mut(key) else {
            return;
        };
        if !t.is_queued() || t.frozen {
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
                let first = phase::offset(key, step.interval);
                next = t.placed_at.plus(first);
                if t.spread != Spread::Wide {
                    t.spread = Spread::Settle { first };
                }
            }
            t.rec.next_run = next.max(now);
        } else {
            return;
        }
        t.state = TaskState::QUEUED;
        self.dirty.insert(key.clone());
        self.enqueue(key, now);
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
        for t in self.tasks.values().filter(|t| t.is_in_flight()) {
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
mod tests;

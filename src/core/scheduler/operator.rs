//! Operator actions on one task (retry, discard, enable a dead-lettered or
//! discarded task): prepared on a copy, the task frozen while the engine
//! commits the record, then applied or released.

use super::Scheduler;
use crate::core::task;
use crate::model::{BreakerState, TaskKey, TaskRecord, Timestamp};

/// Serialised as it travels to another cluster member
/// ([`crate::cluster::forward`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", content = "task", rename_all = "snake_case")]
pub enum OpError {
    #[error("no task {0}")]
    NotFound(String),
    #[error("task {0} is not in the dead-letter queue")]
    NotDeadLettered(String),
    #[error("task {0} is being polled right now; try again in a moment")]
    InFlight(String),
}

/// An operator action on one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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

impl Scheduler {
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
                if t.is_in_flight() {
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
                if !t.is_in_flight() && rec.dead_letter.is_none() {
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

    /// A committed operator action: the task takes the committed record
    /// and goes back on its schedule (unless the action parked it).
    ///
    /// A poll may have finished between [`Scheduler::prepare_op`] and now
    /// (an Enable may be committed while the task is in flight). Its result
    /// is not thrown away: the action is made again on the record the poll
    /// left, and if that differs from the committed record the task is left
    /// for the next group commit, which writes what memory holds. A task
    /// still in flight keeps the record its poll will complete.
    pub fn apply_op(&mut self, key: &TaskKey, op: OperatorOp, committed: TaskRecord, now: Timestamp) {
        let Some(t) = self.tasks.get(key) else {
            return;
        };
        let in_flight = t.is_in_flight();
        let again = if in_flight {
            None
        } else {
            Some(self.prepare_op(key, op, now))
        };
        let Some(t) = self.tasks.get_mut(key) else {
            return;
        };
        t.frozen = false;
        match again {
            None => {}
            Some(Ok(rec)) if rec == committed => {
                t.rec = committed;
                t.settle();
            }
            Some(Ok(rec)) => {
                t.rec = rec;
                t.settle();
                self.dirty.insert(key.clone());
            }
            // The action no longer applies to what the poll left (a retry
            // of a task that left the dead-letter queue): keep the poll's
            // record, and write it over the committed one.
            Some(Err(_)) => {
                self.dirty.insert(key.clone());
            }
        }
        let parked = self.tasks.get(key).is_some_and(|t| t.is_parked());
        if parked {
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
        self.apply_op(key, op, rec.clone(), now);
        self.dirty.insert(key.clone());
        Ok(rec)
    }
}

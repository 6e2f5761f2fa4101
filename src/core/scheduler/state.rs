//! A task as the scheduler holds it, and the one value that says where it
//! is: queued, in flight, or parked.
//!
//! The persisted [`TaskRecord`] is the task's durable history (cadence,
//! failures, dead-letter entry); [`TaskState`] is what this process is doing
//! with it right now, and is never stored. The combinations that cannot
//! happen (a reserved slot without a deferral, a removal noted on a task that
//! is not running, a deferral on a running or parked task) cannot be written.

use crate::core::task::{Hold, TaskMeta};
use crate::model::{TaskKey, TaskRecord, Timestamp};
use std::time::Duration;

/// A task on the schedule: what the plan says of it (`meta`), its durable
/// record, and where it is now.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub key: TaskKey,
    pub meta: TaskMeta,
    pub rec: TaskRecord,
    /// Where the task is: queued, in flight, or parked.
    pub state: TaskState,
    /// An operator action on it is being committed: it stays off the queue
    /// and is not re-timed until the action is applied or released.
    ///
    /// A field beside [`Task::state`], not one of its variants, because it
    /// coexists with every state: an enable may be committed while a poll
    /// runs (the poll then completes as usual and the task waits, off the
    /// queue, for the commit), or for a parked task (a discarded one being
    /// enabled); and a queued task being frozen keeps its deferral, so it
    /// returns to the queue exactly as it was if the commit fails.
    pub frozen: bool,
    /// When it was put on the schedule in this process (staleness of a task
    /// that never succeeded counts from here).
    pub placed_at: Timestamp,
    /// How its next success moves the next run, once. It is carried
    /// through the state changes before that success (a hold, the poll
    /// itself), so it is a field of its own.
    pub spread: Spread,
}

/// A one-time move of a task's next run after its next success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spread {
    #[default]
    None,
    /// Placed for the first time (or planned back in), `first` after the
    /// placement (zero on a cold start, where every task is due at once):
    /// move to its place in the cycle ([`phase::settle`]), so a fleet
    /// placed together polls over the whole interval, not in lockstep or
    /// in the first half of it.
    Settle { first: Duration },
    /// Held up by the pool's bucket with others (see [`Deferral`]): spread
    /// over the whole next interval ([`phase::spread`]). The tasks the
    /// bucket held up together leave its slots one rate-step apart, and
    /// would meet it as one train again.
    Wide,
}

/// Where a task is. Exactly one at a time, so a task never runs twice
/// concurrently and the queue can hold exactly the queued tasks (those not
/// [`Task::frozen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for `rec.next_run`.
    Queued {
        /// Set when its pool's token bucket pushed it past the time it fell
        /// due.
        deferred: Option<Deferral>,
    },
    /// A worker is polling it.
    InFlight {
        /// The time it was due: its cadence continues from here.
        due: Timestamp,
        /// Its instance or group went away while it ran: it is dropped when
        /// the poll ends instead of being queued again.
        removed: bool,
    },
    /// Off the schedule until the reason goes away.
    Parked(Parked),
}

impl TaskState {
    /// Queued, on time.
    pub const QUEUED: TaskState = TaskState::Queued { deferred: None };
}

/// A queued task that its pool's token bucket deferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferral {
    /// The time it was due before the bucket deferred it (for the
    /// budget-wait figure). The cadence continues from the slot it got,
    /// moved by the task's phase offset after its next success, so tasks
    /// that fell due together spread over their next interval instead of
    /// meeting the bucket as a train every cycle.
    pub from: Timestamp,
    /// Its `rec.next_run` is a slot the bucket reserved: dispatch it then
    /// without charging the bucket again. Cleared when the pool's rate drops
    /// or the pool is paused: it then meets the bucket again when due.
    pub reserved: bool,
}

/// Why a task is off the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// Discarded by an operator (`rec.disabled`) until enabled again. Wins
    /// over a hold: only an operator ends it.
    Discarded,
    /// Held by the budget plan (`meta.hold`); it returns to its cadence
    /// when the hold lifts.
    Held(Hold),
}

impl Parked {
    /// Why a task with this record and meta is off the schedule, if it is.
    pub fn of(rec: &TaskRecord, meta: &TaskMeta) -> Option<Parked> {
        if rec.disabled {
            Some(Parked::Discarded)
        } else {
            meta.hold.map(Parked::Held)
        }
    }
}

impl Task {
    /// A task put on the schedule: queued, or parked if its record or meta
    /// say so.
    pub(super) fn new(key: TaskKey, meta: TaskMeta, rec: TaskRecord, now: Timestamp, spread: Spread) -> Self {
        let state = Parked::of(&rec, &meta).map_or(TaskState::QUEUED, TaskState::Parked);
        Task {
            key,
            meta,
            rec,
            state,
            frozen: false,
            placed_at: now,
            spread,
        }
    }

    /// Off the schedule: discarded by an operator, or held by the plan.
    pub fn is_parked(&self) -> bool {
        matches!(self.state, TaskState::Parked(_))
    }

    /// Waiting for its next run (on the queue unless frozen).
    pub fn is_queued(&self) -> bool {
        matches!(self.state, TaskState::Queued { .. })
    }

    pub fn is_in_flight(&self) -> bool {
        matches!(self.state, TaskState::InFlight { .. })
    }

    /// Follow a change of the record or meta of a task that is not in
    /// flight: parked if they say so, queued otherwise (keeping a deferral
    /// it had). A task in flight settles when its poll ends.
    pub(super) fn settle(&mut self) {
        self.state = match (Parked::of(&self.rec, &self.meta), self.state) {
            (_, s @ TaskState::InFlight { .. }) => s,
            (Some(why), _) => TaskState::Parked(why),
            (None, s @ TaskState::Queued { .. }) => s,
            (None, TaskState::Parked(_)) => TaskState::QUEUED,
        };
    }
}

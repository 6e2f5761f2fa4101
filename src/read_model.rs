//! The read model of the schedule: a [`Snapshot`] of what the health API,
//! the dashboard and `/metrics` show, so that all three agree on what "the
//! breakers", "the dead-letter entries" and "staleness" are.
//!
//! Plain data, and the [`TakeSnapshot`] trait readers hold. The engine
//! builds snapshots from its scheduler and pools (`engine::snapshot`);
//! readers (`web`, `metrics`) depend on this module, never on the engine's
//! state, so the metrics can be built before the engine and the engine can
//! own the metrics without an import cycle.

use crate::model::{BreakerState, DeadLetterRecord, FailedItem, PollError, TaskKey, TaskRecord, Timestamp};
use std::sync::Arc;
use std::time::Duration;

/// `queue.due_soon` counts tasks due within this window (the health API's
/// `dueWithinSeconds`, the dashboard's "due within 12 s").
pub const DUE_WINDOW: Duration = Duration::from_secs(12);
/// Dead-letter entries a snapshot carries, most recent first (the rest are
/// only counted; the paginated dead-letter API lists them all).
pub const RECENT_DEAD_LETTERS: usize = 25;
/// Stalest tasks a snapshot carries, stalest first.
pub const STALEST: usize = 25;
/// How much of each task a snapshot copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Counts and the short lists only: what the dashboard shows.
    Summary,
    /// Also a row for every enabled task ([`Snapshot::every_task`]): what
    /// the health document's staleness list and the per-task metrics need.
    EveryTask,
}

/// The scheduler and its pools as readers see them at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub taken_at: Timestamp,
    /// `adaptive.enabled` in force.
    pub adaptive_enabled: bool,
    pub queue: QueueCounts,
    /// Every instance type with an enabled, queued or in-flight task, by name.
    pub per_type: Vec<TypeCounts>,
    /// Enabled tasks (a task an operator discarded is disabled).
    pub tasks: usize,
    /// Tasks in the dead-letter queue.
    pub dead_letter_count: usize,
    /// The [`RECENT_DEAD_LETTERS`] most recent entries: latest `since`
    /// first, ties in task-key order.
    pub dead_letters: Vec<DeadLetterEntry>,
    /// Every enabled task whose breaker is not closed, in task-key order
    /// (instance, then group). The record keeps no time of the trip, and key
    /// order keeps the list still between refreshes, so the first rows a
    /// short list shows are the same on every page and in the API.
    pub breakers: Vec<BreakerRow>,
    pub freshness: Freshness,
    /// The [`STALEST`] stalest enabled tasks: highest score first, ties in
    /// task-key order.
    pub stalest: Vec<TaskRow>,
    /// Enabled tasks whose last fan-out run had failed items, in task-key
    /// order.
    pub partial: Vec<PartialRow>,
    /// With [`Detail::EveryTask`], every enabled task in task-key order;
    /// empty otherwise.
    pub every_task: Vec<TaskRow>,
    /// Every budget pool, by name.
    pub pools: Vec<PoolFigures>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Tasks waiting in the queue.
    pub depth: usize,
    /// Queued tasks due within [`DUE_WINDOW`].
    pub due_soon: usize,
    /// Polls running now.
    pub in_flight: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeCounts {
    pub name: Arc<str>,
    pub queued: usize,
    pub in_flight: usize,
    /// Enabled tasks of the type.
    pub tasks: usize,
}

/// How many enabled tasks are fresh, aging and stale (each task is one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freshness {
    pub fresh: usize,
    pub aging: usize,
    /// No success for longer than the task's interval allows
    /// ([`crate::core::staleness::is_stale`]).
    pub stale: usize,
}

/// One task in the dead-letter queue.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterEntry {
    pub key: TaskKey,
    pub type_name: Arc<str>,
    pub dead_letter: DeadLetterRecord,
    pub failures: u32,
    pub last_error: Option<PollError>,
}

impl DeadLetterEntry {
    /// The entry of a dead-lettered task (`None` if it is not in the queue).
    pub fn of(key: &TaskKey, type_name: &Arc<str>, rec: &TaskRecord) -> Option<DeadLetterEntry> {
        Some(DeadLetterEntry {
            key: key.clone(),
            type_name: type_name.clone(),
            dead_letter: rec.dead_letter.clone()?,
            failures: rec.failures,
            last_error: rec.last_error.clone(),
        })
    }
}

/// One breaker that is not closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerRow {
    pub key: TaskKey,
    pub type_name: Arc<str>,
    pub state: BreakerState,
    pub failures: u32,
    pub retry_at: Option<Timestamp>,
}

/// What a reader needs of one enabled task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    pub key: TaskKey,
    pub type_name: Arc<str>,
    pub breaker: BreakerState,
    /// [`crate::core::staleness::score`]: 0 right after a success, 1 at
    /// `max_interval` without one (or never succeeded).
    pub score: f64,
    /// See [`Freshness::stale`].
    pub stale: bool,
    pub last_success: Option<Timestamp>,
    /// Time since the last success, or since the task was placed if it
    /// never succeeded.
    pub age: Duration,
    /// The interval the task is on now.
    pub interval: Duration,
}

/// A task whose last fan-out run succeeded with some items failing.
#[derive(Debug, Clone, PartialEq)]
pub struct PartialRow {
    pub key: TaskKey,
    pub type_name: Arc<str>,
    pub failed_items: Vec<FailedItem>,
}

/// One budget pool's plan and budget.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolFigures {
    pub name: String,
    pub demand_rps: f64,
    /// Configured: `requests_per_second × shared_fraction`.
    pub budget_rps: f64,
    /// After AIMD.
    pub effective_rps: f64,
    /// `demand_rps / effective_rps` (0 without an effective budget).
    pub utilization: f64,
    pub over_budget: bool,
    /// Groups planned above their floor (pins aside).
    pub stretched: usize,
    /// Groups shed to fit the budget.
    pub shed: usize,
    pub groups: Vec<GroupFigures>,
}

/// One endpoint group of a pool's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFigures {
    /// `type/group`.
    pub name: String,
    pub interval_s: f64,
    pub stretch_factor: f64,
}

/// Takes snapshots of the schedule by its own clock: what the metrics
/// collector holds (it is built before the engine's state exists).
pub trait TakeSnapshot: Send + Sync {
    /// The read model now.
    fn take_now(&self, detail: Detail) -> Snapshot;
}

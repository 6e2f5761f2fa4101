//! The state kept per task (last attempt, breaker, dead letter, …): what
//! the scheduler works on and the store persists.

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    #[default]
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Why a task sits in the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReason {
    #[default]
    MaxRetryAttempts,
    PermanentFailure,
}

impl DeadLetterReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::MaxRetryAttempts => "max_retry_attempts",
            DeadLetterReason::PermanentFailure => "permanent_failure",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeadLetterRecord {
    pub reason: DeadLetterReason,
    /// When the task entered the queue.
    pub since: Timestamp,
    /// When the next single probe runs.
    pub next_recheck: Timestamp,
    /// Probes made since it entered.
    pub rechecks: u32,
}

/// Everything the scheduler remembers about one task across restarts (§4).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskRecord {
    pub last_attempt: Option<Timestamp>,
    pub last_success: Option<Timestamp>,
    pub last_change: Option<Timestamp>,
    pub digest: Option<u64>,
    /// Consecutive failures (429s excluded).
    pub failures: u32,
    pub breaker: BreakerState,
    pub retry_at: Option<Timestamp>,
    pub backoff_delay_ms: u64,
    pub next_run: Timestamp,
    /// The adaptive interval last computed (smoothing state), ms.
    pub interval_ms: u64,
    /// Unchanged successful polls in a row.
    pub idle_streak: u32,
    pub dead_letter: Option<DeadLetterRecord>,
    /// Discarded by an operator: not polled until re-enabled.
    pub disabled: bool,
    pub last_error: Option<PollError>,
    /// Fan-out items that failed in the last run, which still succeeded
    /// because at least one item did (at most [`FAILED_ITEMS_KEPT`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_items: Vec<FailedItem>,
}

/// Failed fan-out items kept per task.
pub const FAILED_ITEMS_KEPT: usize = 20;

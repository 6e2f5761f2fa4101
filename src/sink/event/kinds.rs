//! The kind-specific part of each event: what a poll, a breaker
//! transition, a dead-letter move, a settings change, an operator action and
//! a test event carry. Field order is the order of the JSON line.

use super::ser_opt_time;
use crate::model::{
    BreakerState, DeadLetterReason, ErrorCategory, ErrorKind, FailedItem, PollError, PollResult, Timestamp,
};
use serde::Serialize;
use std::time::Duration;

/// `result` of a poll event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PollOutcome {
    Success,
    Error,
}

/// `error` of a poll event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventError {
    pub category: ErrorCategory,
    pub kind: ErrorKind,
    pub message: String,
}

impl From<&PollError> for EventError {
    fn from(e: &PollError) -> Self {
        EventError {
            category: e.category,
            kind: e.kind,
            message: e.message.clone(),
        }
    }
}

/// One entry of `failed_items`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventFailedItem {
    pub item: String,
    pub message: String,
    pub status: Option<u16>,
}

impl From<&FailedItem> for EventFailedItem {
    fn from(f: &FailedItem) -> Self {
        EventFailedItem {
            item: f.item.clone(),
            message: f.error.message.clone(),
            status: f.error.status,
        }
    }
}

/// A finished poll. The constructors keep `result`, `changed` and `error`
/// consistent: `changed` only on success, `error` only on error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PollEvent {
    instance: String,
    #[serde(rename = "type")]
    type_name: String,
    group: String,
    result: PollOutcome,
    duration_ms: f64,
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<bool>,
    error: Option<EventError>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed_items: Vec<EventFailedItem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<serde_json::Value>,
}

fn millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

impl PollEvent {
    /// A successful poll answered with `status`; `changed` when the body
    /// differs from the previous successful poll.
    pub fn success(
        instance: &str,
        type_name: &str,
        group: &str,
        duration: Duration,
        status: u16,
        changed: bool,
    ) -> PollEvent {
        PollEvent {
            instance: instance.into(),
            type_name: type_name.into(),
            group: group.into(),
            result: PollOutcome::Success,
            duration_ms: millis(duration),
            status: Some(status),
            changed: Some(changed),
            error: None,
            failed_items: Vec::new(),
            body: None,
        }
    }

    /// A failed poll; `status` is the error's HTTP status, if any.
    pub fn error(instance: &str, type_name: &str, group: &str, duration: Duration, error: &PollError) -> PollEvent {
        PollEvent {
            instance: instance.into(),
            type_name: type_name.into(),
            group: group.into(),
            result: PollOutcome::Error,
            duration_ms: millis(duration),
            status: error.status,
            changed: None,
            error: Some(error.into()),
            failed_items: Vec::new(),
            body: None,
        }
    }

    /// From the poller's result; on success the fan-out's failed items are
    /// included. `changed` is ignored on error.
    pub fn from_result(
        instance: &str,
        type_name: &str,
        group: &str,
        duration: Duration,
        result: &PollResult,
        changed: bool,
    ) -> PollEvent {
        match result {
            Ok(s) => PollEvent::success(instance, type_name, group, duration, s.status, changed)
                .with_failed_items(&s.failed_items),
            Err(e) => PollEvent::error(instance, type_name, group, duration, e),
        }
    }

    /// Set `failed_items` (omitted from the JSON when empty).
    pub fn with_failed_items(mut self, items: &[FailedItem]) -> PollEvent {
        self.failed_items = items.iter().map(EventFailedItem::from).collect();
        self
    }

    /// Include the response body: as JSON when it parses, else as a string
    /// (invalid UTF-8 replaced). Bodies can be large; the caller decides.
    pub fn with_body(mut self, body: &[u8]) -> PollEvent {
        self.body = Some(
            serde_json::from_slice(body)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into_owned())),
        );
        self
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }
    pub fn group(&self) -> &str {
        &self.group
    }
    pub fn result(&self) -> PollOutcome {
        self.result
    }
}

/// A breaker transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerEvent {
    pub instance: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub group: String,
    pub from: BreakerState,
    pub to: BreakerState,
    pub failures: u32,
    #[serde(serialize_with = "ser_opt_time")]
    pub retry_at: Option<Timestamp>,
}

/// `action` of a dead-letter event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterAction {
    /// The task moved into the dead-letter queue.
    Entered,
    /// A recheck succeeded and the task is polled normally again.
    Left,
    /// A periodic single probe ran and failed; the task stays.
    Rechecked,
    /// An operator asked for an immediate retry.
    Retried,
    /// An operator discarded the task: it is not polled until re-enabled.
    Discarded,
    /// An operator re-enabled a discarded task.
    Enabled,
}

/// A dead-letter move. Build with [`DeadLetterEvent::new`] and the `with_*`
/// methods, or fill the fields directly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterEvent {
    pub instance: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub group: String,
    pub action: DeadLetterAction,
    pub reason: Option<String>,
    pub error: Option<String>,
    pub actor: Option<String>,
}

impl DeadLetterEvent {
    pub fn new(instance: &str, type_name: &str, group: &str, action: DeadLetterAction) -> DeadLetterEvent {
        DeadLetterEvent {
            instance: instance.into(),
            type_name: type_name.into(),
            group: group.into(),
            action,
            reason: None,
            error: None,
            actor: None,
        }
    }
    pub fn with_reason(mut self, reason: DeadLetterReason) -> DeadLetterEvent {
        self.reason = Some(reason.as_str().into());
        self
    }
    pub fn with_error(mut self, error: impl Into<String>) -> DeadLetterEvent {
        self.error = Some(error.into());
        self
    }
    pub fn with_actor(mut self, actor: &str) -> DeadLetterEvent {
        self.actor = Some(actor.into());
        self
    }
}

/// `section` of a settings event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingsSection {
    Monitoring,
    Sink,
    Budget,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettingsEvent {
    pub actor: String,
    pub section: SettingsSection,
    /// Secrets already masked by the caller.
    pub change: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorEvent {
    pub actor: String,
    pub action: String,
    pub target: String,
    /// An instance change: the fields it set or changed (never their values).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// `login.failed` and `token.failed` only: how many failures from one
    /// address in one window this event stands for.
    #[serde(flatten)]
    pub failures: Option<FailureCount>,
    /// `config.reload` only: what the reload put in force, or why it was
    /// refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reload: Option<ReloadSummary>,
    /// `maintenance.*` only: the instances the window covers, as the
    /// catalog stands when the event is made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<String>>,
    /// `maintenance.*` only: why the window was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What one `config.reload` did: counts of what changed, or the error that
/// kept the running config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadSummary {
    /// `success` or `failure`.
    pub result: String,
    pub instances_added: usize,
    pub instances_changed: usize,
    pub instances_removed: usize,
    /// Settings keys whose value in force changed.
    pub settings_changed: usize,
    /// Budget pools added, changed or removed.
    pub pools_changed: usize,
    /// A refused reload: the first error, naming the key and the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The failures one `login.failed` or `token.failed` event stands for: from
/// one address (or from many, past the aggregation bound) within one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureCount {
    /// Failures counted.
    pub count: u64,
    /// The first and the last of them (RFC 3339 UTC, milliseconds).
    pub first: String,
    pub last: String,
    /// The client's address (an IPv6 client's /64), or `*` for addresses
    /// counted together once too many were failing at once.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestEvent {
    pub actor: String,
    pub message: String,
}

/// `transition` of a pool event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolTransition {
    /// The pool's groups do not fit its target even at their longest intervals.
    OverBudget,
    /// Groups are shed (a new or changed set).
    Shedding,
    /// Every group is planned again.
    Restored,
    /// AIMD lowered the effective budget after 429s that recur.
    AimdDecrease,
    /// AIMD is back at the configured budget.
    AimdRecovered,
}

/// A budget pool changed state: what it needs, what it may use, and the
/// groups shed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolEvent {
    pub pool: String,
    pub transition: PoolTransition,
    /// Planned demand (rps) after stretching and shedding.
    pub demand_rps: f64,
    /// The plan's target: effective budget × target utilisation (rps).
    pub target_rps: f64,
    pub effective_budget_rps: f64,
    pub budget_rps: f64,
    /// The groups shed, as `type/group`.
    pub groups: Vec<String>,
}

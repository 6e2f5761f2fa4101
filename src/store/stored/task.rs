//! A `tasks` value: a task's schedule, failures, breaker and dead-letter
//! state ([`TaskRecord`]). Written by every group commit, so the write side
//! ([`StoredTaskRef`]) borrows the record and copies only numbers.

use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use crate::model::{
    BreakerState, DeadLetterReason, DeadLetterRecord, ErrorCategory, ErrorKind, FailedItem, PollError, TaskRecord,
    Timestamp, duration_str,
};

/// A task record as read back. A missing field takes its default, so a
/// record from a release that had fewer fields still reads.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StoredTask {
    #[serde(rename = "last_attempt")]
    last_attempt: Option<u64>,
    #[serde(rename = "last_success")]
    last_success: Option<u64>,
    #[serde(rename = "last_change")]
    last_change: Option<u64>,
    #[serde(rename = "digest")]
    digest: Option<u64>,
    #[serde(rename = "failures")]
    failures: u32,
    #[serde(rename = "breaker")]
    breaker: StoredBreaker,
    #[serde(rename = "retry_at")]
    retry_at: Option<u64>,
    #[serde(rename = "backoff_delay_ms")]
    backoff_delay_ms: u64,
    #[serde(rename = "next_run")]
    next_run: u64,
    #[serde(rename = "interval_ms")]
    interval_ms: u64,
    #[serde(rename = "idle_streak")]
    idle_streak: u32,
    #[serde(rename = "dead_letter")]
    dead_letter: Option<StoredDeadLetter>,
    #[serde(rename = "disabled")]
    disabled: bool,
    #[serde(rename = "last_error")]
    last_error: Option<StoredPollError>,
    #[serde(rename = "failed_items")]
    failed_items: Vec<StoredFailedItem>,
}

impl Versioned for StoredTask {
    const WHAT: &'static str = "task record";
    const VERSION: u8 = FORMAT_JSON_V1;
}

/// A task record as written: the same fields, in the same order, as
/// [`StoredTask`] reads; `failed_items` is left out when empty.
#[derive(Debug, Serialize)]
pub(crate) struct StoredTaskRef<'a> {
    #[serde(rename = "last_attempt")]
    last_attempt: Option<u64>,
    #[serde(rename = "last_success")]
    last_success: Option<u64>,
    #[serde(rename = "last_change")]
    last_change: Option<u64>,
    #[serde(rename = "digest")]
    digest: Option<u64>,
    #[serde(rename = "failures")]
    failures: u32,
    #[serde(rename = "breaker")]
    breaker: StoredBreaker,
    #[serde(rename = "retry_at")]
    retry_at: Option<u64>,
    #[serde(rename = "backoff_delay_ms")]
    backoff_delay_ms: u64,
    #[serde(rename = "next_run")]
    next_run: u64,
    #[serde(rename = "interval_ms")]
    interval_ms: u64,
    #[serde(rename = "idle_streak")]
    idle_streak: u32,
    #[serde(rename = "dead_letter")]
    dead_letter: Option<StoredDeadLetter>,
    #[serde(rename = "disabled")]
    disabled: bool,
    #[serde(rename = "last_error")]
    last_error: Option<StoredPollErrorRef<'a>>,
    #[serde(rename = "failed_items", skip_serializing_if = "FailedItemsRef::is_empty")]
    failed_items: FailedItemsRef<'a>,
}

impl Encodes for StoredTaskRef<'_> {
    type Value = StoredTask;
}

impl<'a> From<&'a TaskRecord> for StoredTaskRef<'a> {
    fn from(r: &'a TaskRecord) -> Self {
        StoredTaskRef {
            last_attempt: r.last_attempt.map(|t| t.0),
            last_success: r.last_success.map(|t| t.0),
            last_change: r.last_change.map(|t| t.0),
            digest: r.digest,
            failures: r.failures,
            breaker: r.breaker.into(),
            retry_at: r.retry_at.map(|t| t.0),
            backoff_delay_ms: r.backoff_delay_ms,
            next_run: r.next_run.0,
            interval_ms: r.interval_ms,
            idle_streak: r.idle_streak,
            dead_letter: r.dead_letter.as_ref().map(StoredDeadLetter::from),
            disabled: r.disabled,
            last_error: r.last_error.as_ref().map(StoredPollErrorRef::from),
            failed_items: FailedItemsRef(&r.failed_items),
        }
    }
}

impl From<StoredTask> for TaskRecord {
    fn from(s: StoredTask) -> Self {
        TaskRecord {
            last_attempt: s.last_attempt.map(Timestamp),
            last_success: s.last_success.map(Timestamp),
            last_change: s.last_change.map(Timestamp),
            digest: s.digest,
            failures: s.failures,
            breaker: s.breaker.into(),
            retry_at: s.retry_at.map(Timestamp),
            backoff_delay_ms: s.backoff_delay_ms,
            next_run: Timestamp(s.next_run),
            interval_ms: s.interval_ms,
            idle_streak: s.idle_streak,
            dead_letter: s.dead_letter.map(DeadLetterRecord::from),
            disabled: s.disabled,
            last_error: s.last_error.map(PollError::from),
            failed_items: s.failed_items.into_iter().map(FailedItem::from).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
enum StoredBreaker {
    #[default]
    #[serde(rename = "closed")]
    Closed,
    #[serde(rename = "open")]
    Open,
    #[serde(rename = "half_open")]
    HalfOpen,
}

impl From<BreakerState> for StoredBreaker {
    fn from(b: BreakerState) -> Self {
        match b {
            BreakerState::Closed => StoredBreaker::Closed,
            BreakerState::Open => StoredBreaker::Open,
            BreakerState::HalfOpen => StoredBreaker::HalfOpen,
        }
    }
}

impl From<StoredBreaker> for BreakerState {
    fn from(b: StoredBreaker) -> Self {
        match b {
            StoredBreaker::Closed => BreakerState::Closed,
            StoredBreaker::Open => BreakerState::Open,
            StoredBreaker::HalfOpen => BreakerState::HalfOpen,
        }
    }
}

/// The dead-letter state: small and all numbers, so written by value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
struct StoredDeadLetter {
    #[serde(rename = "reason")]
    reason: StoredDeadLetterReason,
    #[serde(rename = "since")]
    since: u64,
    #[serde(rename = "next_recheck")]
    next_recheck: u64,
    #[serde(rename = "rechecks")]
    rechecks: u32,
}

impl From<&DeadLetterRecord> for StoredDeadLetter {
    fn from(d: &DeadLetterRecord) -> Self {
        StoredDeadLetter {
            reason: match d.reason {
                DeadLetterReason::MaxRetryAttempts => StoredDeadLetterReason::MaxRetryAttempts,
                DeadLetterReason::PermanentFailure => StoredDeadLetterReason::PermanentFailure,
            },
            since: d.since.0,
            next_recheck: d.next_recheck.0,
            rechecks: d.rechecks,
        }
    }
}

impl From<StoredDeadLetter> for DeadLetterRecord {
    fn from(d: StoredDeadLetter) -> Self {
        DeadLetterRecord {
            reason: match d.reason {
                StoredDeadLetterReason::MaxRetryAttempts => DeadLetterReason::MaxRetryAttempts,
                StoredDeadLetterReason::PermanentFailure => DeadLetterReason::PermanentFailure,
            },
            since: Timestamp(d.since),
            next_recheck: Timestamp(d.next_recheck),
            rechecks: d.rechecks,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
enum StoredDeadLetterReason {
    #[default]
    #[serde(rename = "max_retry_attempts")]
    MaxRetryAttempts,
    #[serde(rename = "permanent_failure")]
    PermanentFailure,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum StoredErrorCategory {
    #[serde(rename = "transient")]
    Transient,
    #[serde(rename = "permanent")]
    Permanent,
}

impl From<ErrorCategory> for StoredErrorCategory {
    fn from(c: ErrorCategory) -> Self {
        match c {
            ErrorCategory::Transient => StoredErrorCategory::Transient,
            ErrorCategory::Permanent => StoredErrorCategory::Permanent,
        }
    }
}

impl From<StoredErrorCategory> for ErrorCategory {
    fn from(c: StoredErrorCategory) -> Self {
        match c {
            StoredErrorCategory::Transient => ErrorCategory::Transient,
            StoredErrorCategory::Permanent => ErrorCategory::Permanent,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum StoredErrorKind {
    #[serde(rename = "timeout")]
    Timeout,
    #[serde(rename = "connect")]
    Connect,
    #[serde(rename = "dns")]
    Dns,
    #[serde(rename = "http")]
    Http,
    #[serde(rename = "rate_limited")]
    RateLimited,
    #[serde(rename = "tls")]
    Tls,
    #[serde(rename = "body")]
    Body,
    #[serde(rename = "invalid_url")]
    InvalidUrl,
    #[serde(rename = "invalid_credentials")]
    InvalidCredentials,
    #[serde(rename = "other")]
    Other,
}

impl From<ErrorKind> for StoredErrorKind {
    fn from(k: ErrorKind) -> Self {
        match k {
            ErrorKind::Timeout => StoredErrorKind::Timeout,
            ErrorKind::Connect => StoredErrorKind::Connect,
            ErrorKind::Dns => StoredErrorKind::Dns,
            ErrorKind::Http => StoredErrorKind::Http,
            ErrorKind::RateLimited => StoredErrorKind::RateLimited,
            ErrorKind::Tls => StoredErrorKind::Tls,
            ErrorKind::Body => StoredErrorKind::Body,
            ErrorKind::InvalidUrl => StoredErrorKind::InvalidUrl,
            ErrorKind::InvalidCredentials => StoredErrorKind::InvalidCredentials,
            ErrorKind::Other => StoredErrorKind::Other,
        }
    }
}

impl From<StoredErrorKind> for ErrorKind {
    fn from(k: StoredErrorKind) -> Self {
        match k {
            StoredErrorKind::Timeout => ErrorKind::Timeout,
            StoredErrorKind::Connect => ErrorKind::Connect,
            StoredErrorKind::Dns => ErrorKind::Dns,
            StoredErrorKind::Http => ErrorKind::Http,
            StoredErrorKind::RateLimited => ErrorKind::RateLimited,
            StoredErrorKind::Tls => ErrorKind::Tls,
            StoredErrorKind::Body => ErrorKind::Body,
            StoredErrorKind::InvalidUrl => ErrorKind::InvalidUrl,
            StoredErrorKind::InvalidCredentials => ErrorKind::InvalidCredentials,
            StoredErrorKind::Other => ErrorKind::Other,
        }
    }
}

/// A poll error as read back: category, kind and message are required.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct StoredPollError {
    #[serde(rename = "category")]
    category: StoredErrorCategory,
    #[serde(rename = "kind")]
    kind: StoredErrorKind,
    #[serde(rename = "message")]
    message: String,
    #[serde(rename = "status")]
    status: Option<u16>,
    #[serde(rename = "retry_after", default, with = "duration_str::option")]
    retry_after: Option<Duration>,
}

#[derive(Debug, Serialize)]
struct StoredPollErrorRef<'a> {
    #[serde(rename = "category")]
    category: StoredErrorCategory,
    #[serde(rename = "kind")]
    kind: StoredErrorKind,
    #[serde(rename = "message")]
    message: &'a str,
    #[serde(rename = "status")]
    status: Option<u16>,
    #[serde(rename = "retry_after", with = "duration_str::option")]
    retry_after: Option<Duration>,
}

impl<'a> From<&'a PollError> for StoredPollErrorRef<'a> {
    fn from(e: &'a PollError) -> Self {
        StoredPollErrorRef {
            category: e.category.into(),
            kind: e.kind.into(),
            message: &e.message,
            status: e.status,
            retry_after: e.retry_after,
        }
    }
}

impl From<StoredPollError> for PollError {
    fn from(e: StoredPollError) -> Self {
        PollError {
            category: e.category.into(),
            kind: e.kind.into(),
            message: e.message,
            status: e.status,
            retry_after: e.retry_after,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct StoredFailedItem {
    #[serde(rename = "item")]
    item: String,
    #[serde(rename = "error")]
    error: StoredPollError,
}

impl From<StoredFailedItem> for FailedItem {
    fn from(f: StoredFailedItem) -> Self {
        FailedItem {
            item: f.item,
            error: f.error.into(),
        }
    }
}

#[derive(Debug, Serialize)]
struct StoredFailedItemRef<'a> {
    #[serde(rename = "item")]
    item: &'a str,
    #[serde(rename = "error")]
    error: StoredPollErrorRef<'a>,
}

/// The failed items, written straight from the record's list.
#[derive(Debug)]
struct FailedItemsRef<'a>(&'a [FailedItem]);

impl FailedItemsRef<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for FailedItemsRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|f| StoredFailedItemRef {
            item: &f.item,
            error: StoredPollErrorRef::from(&f.error),
        }))
    }
}

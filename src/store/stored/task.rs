//! A `tasks` value: a task's schedule, failures, breaker and dead-letter
//! state ([`TaskRecord`]). Written by every group commit and read back, all
//! 100,000 of them, at a restart, so it is written in format 2, compact
//! binary (postcard: varint numbers, length-prefixed text), from a
//! borrowing view of the record. Format 1 (JSON), which releases before it
//! wrote, is still read and upgraded ([`Versioned::upgrade`]), and still
//! written for the cluster's gossip ([`encode_v1`]).
//!
//! Enums are one-byte codes fixed here ([`breaker_code`] and its kin), not
//! serde variant indexes, so reordering a domain enum cannot change a file.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::super::codec::{self, Encodes, FORMAT_JSON_V1, Versioned};
use crate::model::{
    BreakerState, DeadLetterReason, DeadLetterRecord, ErrorCategory, ErrorKind, FailedItem, PollError, TaskRecord,
    Timestamp, duration_str,
};

/// Format 2: postcard.
pub(crate) const TASK_BINARY_V2: u8 = 2;

/// A task record as read back, from either format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredTask(TaskRecord);

impl From<StoredTask> for TaskRecord {
    fn from(s: StoredTask) -> Self {
        s.0
    }
}

impl<'de> Deserialize<'de> for StoredTask {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v2 = TaskV2::deserialize(d)?;
        v2.into_record().map(StoredTask).map_err(serde::de::Error::custom)
    }
}

impl Versioned for StoredTask {
    const WHAT: &'static str = "task record";
    const VERSION: u8 = TASK_BINARY_V2;

    fn decode_current(payload: &[u8]) -> Result<Self, String> {
        // Not through `Deserialize`: postcard drops a custom error's text,
        // and an unknown code should be named.
        codec::from_binary::<TaskV2<'static>>(payload)?
            .into_record()
            .map(StoredTask)
    }

    fn upgrade(version: u8, payload: &[u8]) -> Result<Self, String> {
        match version {
            FORMAT_JSON_V1 => serde_json::from_slice::<TaskV1>(payload)
                .map(|v1| StoredTask(v1.into()))
                .map_err(|e| format!("bad JSON: {e}")),
            other => Err(codec::unknown_version(other, Self::VERSION)),
        }
    }
}

/// A task record as written: a borrowing view, so the group commit copies
/// only numbers (and, for a task whose fan-out items failed, one small list).
#[derive(Debug, Serialize)]
pub(crate) struct StoredTaskRef<'a>(TaskV2<'a>);

impl Encodes for StoredTaskRef<'_> {
    type Value = StoredTask;

    fn encode_payload(&self, out: Vec<u8>) -> Result<Vec<u8>, String> {
        codec::to_binary(&self.0, out)
    }
}

impl<'a> From<&'a TaskRecord> for StoredTaskRef<'a> {
    fn from(r: &'a TaskRecord) -> Self {
        StoredTaskRef(TaskV2 {
            last_attempt: r.last_attempt.map(|t| t.0),
            last_success: r.last_success.map(|t| t.0),
            last_change: r.last_change.map(|t| t.0),
            digest: r.digest,
            failures: r.failures,
            breaker: breaker_code(r.breaker),
            retry_at: r.retry_at.map(|t| t.0),
            backoff_delay_ms: r.backoff_delay_ms,
            next_run: r.next_run.0,
            interval_ms: r.interval_ms,
            idle_streak: r.idle_streak,
            dead_letter: r.dead_letter.as_ref().map(|d| DeadLetterV2 {
                reason: reason_code(d.reason),
                since: d.since.0,
                next_recheck: d.next_recheck.0,
                rechecks: d.rechecks,
            }),
            disabled: r.disabled,
            last_error: r.last_error.as_ref().map(ErrorV2::from),
            failed_items: r
                .failed_items
                .iter()
                .map(|f| FailedItemV2 {
                    item: Cow::Borrowed(&f.item),
                    error: ErrorV2::from(&f.error),
                })
                .collect(),
        })
    }
}

/// Format 2's fields, in order (postcard has no field names: the order and
/// the types are the format). Read back owned, written borrowed.
#[derive(Debug, Serialize, Deserialize)]
struct TaskV2<'a> {
    last_attempt: Option<u64>,
    last_success: Option<u64>,
    last_change: Option<u64>,
    digest: Option<u64>,
    failures: u32,
    breaker: u8,
    retry_at: Option<u64>,
    backoff_delay_ms: u64,
    next_run: u64,
    interval_ms: u64,
    idle_streak: u32,
    dead_letter: Option<DeadLetterV2>,
    disabled: bool,
    last_error: Option<ErrorV2<'a>>,
    failed_items: Vec<FailedItemV2<'a>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct DeadLetterV2 {
    reason: u8,
    since: u64,
    next_recheck: u64,
    rechecks: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct ErrorV2<'a> {
    category: u8,
    kind: u8,
    message: Cow<'a, str>,
    status: Option<u16>,
    retry_after: Option<Duration>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FailedItemV2<'a> {
    item: Cow<'a, str>,
    error: ErrorV2<'a>,
}

impl<'a> From<&'a PollError> for ErrorV2<'a> {
    fn from(e: &'a PollError) -> Self {
        ErrorV2 {
            category: category_code(e.category),
            kind: kind_code(e.kind),
            message: Cow::Borrowed(&e.message),
            status: e.status,
            retry_after: e.retry_after,
        }
    }
}

impl ErrorV2<'_> {
    fn into_error(self) -> Result<PollError, String> {
        Ok(PollError {
            category: category_of(self.category)?,
            kind: kind_of(self.kind)?,
            message: self.message.into_owned(),
            status: self.status,
            retry_after: self.retry_after,
        })
    }
}

impl TaskV2<'_> {
    fn into_record(self) -> Result<TaskRecord, String> {
        Ok(TaskRecord {
            last_attempt: self.last_attempt.map(Timestamp),
            last_success: self.last_success.map(Timestamp),
            last_change: self.last_change.map(Timestamp),
            digest: self.digest,
            failures: self.failures,
            breaker: breaker_of(self.breaker)?,
            retry_at: self.retry_at.map(Timestamp),
            backoff_delay_ms: self.backoff_delay_ms,
            next_run: Timestamp(self.next_run),
            interval_ms: self.interval_ms,
            idle_streak: self.idle_streak,
            dead_letter: match self.dead_letter {
                None => None,
                Some(d) => Some(DeadLetterRecord {
                    reason: reason_of(d.reason)?,
                    since: Timestamp(d.since),
                    next_recheck: Timestamp(d.next_recheck),
                    rechecks: d.rechecks,
                }),
            },
            disabled: self.disabled,
            last_error: self.last_error.map(ErrorV2::into_error).transpose()?,
            failed_items: self
                .failed_items
                .into_iter()
                .map(|f| {
                    Ok(FailedItem {
                        item: f.item.into_owned(),
                        error: f.error.into_error()?,
                    })
                })
                .collect::<Result<_, String>>()?,
        })
    }
}

// Each enum's one-byte code, both ways. Exhaustive matches: a new variant
// does not compile until it has a code of its own. Codes are never reused.

pub(crate) fn breaker_code(b: BreakerState) -> u8 {
    match b {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
    }
}

fn breaker_of(code: u8) -> Result<BreakerState, String> {
    Ok(match code {
        0 => BreakerState::Closed,
        1 => BreakerState::Open,
        2 => BreakerState::HalfOpen,
        _ => return Err(unknown_code("breaker state", code)),
    })
}

pub(crate) fn reason_code(r: DeadLetterReason) -> u8 {
    match r {
        DeadLetterReason::MaxRetryAttempts => 0,
        DeadLetterReason::PermanentFailure => 1,
    }
}

fn reason_of(code: u8) -> Result<DeadLetterReason, String> {
    Ok(match code {
        0 => DeadLetterReason::MaxRetryAttempts,
        1 => DeadLetterReason::PermanentFailure,
        _ => return Err(unknown_code("dead-letter reason", code)),
    })
}

pub(crate) fn category_code(c: ErrorCategory) -> u8 {
    match c {
        ErrorCategory::Transient => 0,
        ErrorCategory::Permanent => 1,
    }
}

fn category_of(code: u8) -> Result<ErrorCategory, String> {
    Ok(match code {
        0 => ErrorCategory::Transient,
        1 => ErrorCategory::Permanent,
        _ => return Err(unknown_code("error category", code)),
    })
}

pub(crate) fn kind_code(k: ErrorKind) -> u8 {
    match k {
        ErrorKind::Timeout => 0,
        ErrorKind::Connect => 1,
        ErrorKind::Dns => 2,
        ErrorKind::Http => 3,
        ErrorKind::RateLimited => 4,
        ErrorKind::Tls => 5,
        ErrorKind::Body => 6,
        ErrorKind::InvalidUrl => 7,
        ErrorKind::InvalidCredentials => 8,
        ErrorKind::Other => 9,
    }
}

fn kind_of(code: u8) -> Result<ErrorKind, String> {
    Ok(match code {
        0 => ErrorKind::Timeout,
        1 => ErrorKind::Connect,
        2 => ErrorKind::Dns,
        3 => ErrorKind::Http,
        4 => ErrorKind::RateLimited,
        5 => ErrorKind::Tls,
        6 => ErrorKind::Body,
        7 => ErrorKind::InvalidUrl,
        8 => ErrorKind::InvalidCredentials,
        9 => ErrorKind::Other,
        _ => return Err(unknown_code("error kind", code)),
    })
}

fn unknown_code(what: &str, code: u8) -> String {
    format!("unknown {what} code {code}")
}

/// A format-1 task record (JSON), as releases before format 2 wrote it. A
/// missing field takes its default, so a record from a release that had
/// fewer fields still reads.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default)]
struct TaskV1 {
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

impl From<TaskV1> for TaskRecord {
    fn from(s: TaskV1) -> Self {
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

// Format 1's writer. The database no longer writes it; the cluster's
// gossip does (`store::wire`), so that members of the release before
// format 2 still read the task records a member publishes during a
// rolling upgrade.

/// A task record in format 1: `[1]` and its JSON.
pub(crate) fn encode_v1(record: &TaskRecord) -> Result<Vec<u8>, String> {
    let mut out = vec![FORMAT_JSON_V1];
    serde_json::to_writer(&mut out, &TaskV1Ref::from(record)).map_err(|e| e.to_string())?;
    Ok(out)
}

/// A task record as format 1 wrote it: the same fields, in the same order, as
/// [`TaskV1`] reads; `failed_items` is left out when empty.
#[derive(Debug, Serialize)]
struct TaskV1Ref<'a> {
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

impl<'a> From<&'a TaskRecord> for TaskV1Ref<'a> {
    fn from(r: &'a TaskRecord) -> Self {
        TaskV1Ref {
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

impl From<BreakerState> for StoredBreaker {
    fn from(b: BreakerState) -> Self {
        match b {
            BreakerState::Closed => StoredBreaker::Closed,
            BreakerState::Open => StoredBreaker::Open,
            BreakerState::HalfOpen => StoredBreaker::HalfOpen,
        }
    }
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

impl From<ErrorCategory> for StoredErrorCategory {
    fn from(c: ErrorCategory) -> Self {
        match c {
            ErrorCategory::Transient => StoredErrorCategory::Transient,
            ErrorCategory::Permanent => StoredErrorCategory::Permanent,
        }
    }
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

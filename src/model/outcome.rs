//! What a poll came back with: a classified error (SPEC §3) or a success.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    Transient,
    Permanent,
}

impl ErrorCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Transient => "transient",
            ErrorCategory::Permanent => "permanent",
        }
    }
}

/// What went wrong, finer than the category; used in messages and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Timeout,
    Connect,
    Dns,
    Http,
    RateLimited,
    Tls,
    Body,
    InvalidUrl,
    InvalidCredentials,
    Other,
}

impl ErrorKind {
    /// The kind as the API and the logs name it (`rate_limited`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::Dns => "dns",
            ErrorKind::Http => "http",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Tls => "tls",
            ErrorKind::Body => "body",
            ErrorKind::InvalidUrl => "invalid_url",
            ErrorKind::InvalidCredentials => "invalid_credentials",
            ErrorKind::Other => "other",
        }
    }
}

/// A classified poll failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PollError {
    pub category: ErrorCategory,
    pub kind: ErrorKind,
    /// Short, operator-facing, one line.
    pub message: String,
    pub status: Option<u16>,
    /// From a `Retry-After` header (seconds or HTTP date), already capped.
    #[serde(default, with = "duration_str::option")]
    pub retry_after: Option<Duration>,
}

impl PollError {
    pub fn new(category: ErrorCategory, kind: ErrorKind, message: impl Into<String>) -> Self {
        PollError {
            category,
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }
    /// A 429 is a rate signal: counted as transient, but it never advances
    /// the failure streak.
    pub fn is_rate_limited(&self) -> bool {
        self.kind == ErrorKind::RateLimited
    }
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A successful poll.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PollSuccess {
    pub status: u16,
    /// First 8 bytes of the SHA-256 of the body: change detection. For a
    /// fan-out, a digest over the successful items' digests, in item order.
    pub digest: u64,
    pub body_bytes: u64,
    /// What a `shape_from` group learned: the length of the array its JSON
    /// pointer names, and the items' `item_field` values.
    pub shape: Option<ShapeUpdate>,
    /// Fan-out items that failed in a run that still succeeded (at least one
    /// item did).
    pub failed_items: Vec<FailedItem>,
    /// The body, for a group with `forward = true` (to ship to the event
    /// sink); for a fan-out, a JSON object of the items' bodies by item.
    pub body: Option<Vec<u8>>,
    /// The body parsed as JSON, for a group with value rules to run them
    /// on; for a fan-out, each successful item's body. `None` for a group
    /// without rules.
    pub json: Option<PolledJson>,
    /// The raw body and its content type, for a group with
    /// `keep_body = true` (the data API serves the last good one); a body
    /// over `max_body_bytes` is not kept and says so. For a fan-out, each
    /// successful item's. `None` for a group without `keep_body`.
    pub kept_body: Option<KeptBodies>,
    /// The facts a group with `facts` learned about its instance (those
    /// its body had), and the rows of its lookup tables (a fan-out's,
    /// learned over the items that answered). `None` for a group without
    /// facts or tables.
    pub facts: Option<crate::values::Facts>,
}

/// Something a successful poll has per body it fetched: one for a group
/// without `fan_out`, one per successful item for a fan-out.
#[derive(Debug, Clone, PartialEq)]
pub enum Polled<T> {
    /// The group's one body.
    One(T),
    /// A fan-out's successful items, in item order, with what each gave.
    /// Failed items are absent (they are in [`PollSuccess::failed_items`]).
    Items(Vec<(String, T)>),
}

/// The JSON documents a poll hands to a group's value rules
/// ([`PollSuccess::json`]).
pub type PolledJson = Polled<serde_json::Value>;

/// The bodies a `keep_body` group keeps ([`PollSuccess::kept_body`]).
pub type KeptBodies = Polled<KeptBody>;

/// One response body kept for the data API (`keep_body = true`).
#[derive(Debug, Clone, PartialEq)]
pub enum KeptBody {
    /// The body, at most `max_body_bytes` long.
    Kept {
        /// The response's `Content-Type`; empty if it had none.
        content_type: String,
        bytes: Vec<u8>,
    },
    /// The body was larger than `max_body_bytes` and was not kept (the poll
    /// still succeeded): its size.
    TooLarge { bytes: u64 },
}

/// A shape count learned from a response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ShapeUpdate {
    pub count: u64,
    /// The items in array order: `item_field` values, or the names
    /// `item_fields` make; empty without either.
    pub items: Vec<String>,
}

/// One failed item of a fan-out run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedItem {
    pub item: String,
    pub error: PollError,
}

pub type PollResult = Result<PollSuccess, PollError>;

//! Events shipped by the sink (§5): one JSON object per line (NDJSON).
//!
//! This file holds the envelope ([`Event`]: time, id, kind) and its
//! encoding as a line; each kind's fields are in `kinds.rs`, event ids in
//! `id.rs`.
//!
//! # Schema
//!
//! The schema is stable: fields are only ever added, never renamed, retyped
//! or removed. Every event is one JSON object on one line, ending `\n`. Field
//! order is as listed (for readability only; consumers must not rely on it).
//! Times are RFC 3339 UTC with milliseconds, e.g. `2026-11-30T04:40:00.123Z`.
//!
//! Common fields, on every event:
//!
//! | field  | type   | meaning                                                        |
//! |--------|--------|----------------------------------------------------------------|
//! | `time` | string | when it happened (RFC 3339 UTC, milliseconds)                  |
//! | `id`   | string | **change events only** (`breaker`, `dead_letter`, `settings`, `operator`; absent on `poll` and `test`): a stable, unique id (a ULID), the same on every delivery of the event |
//! | `kind` | string | `poll`, `breaker`, `dead_letter`, `settings`, `operator`, `test` |
//! | `maintenance` | bool | **absent unless true**: the instance the event is about is in a maintenance window (`poll`, `breaker`, `dead_letter`), or the event is a window's own `maintenance.start` / `maintenance.end` |
//!
//! Change events are durable: written to the database in the same
//! transaction as the change they record, and delivered at least once
//! (across restarts and failed attempts), so a receiver de-duplicates them
//! by `id`. Poll events are best effort, held in memory only. See
//! docs/EVENTS.md.
//!
//! ## `poll` — one poll of an endpoint group finished
//!
//! | field          | type                 | meaning                                                        |
//! |----------------|----------------------|----------------------------------------------------------------|
//! | `instance`     | string               | instance name                                                  |
//! | `type`         | string               | instance type (`http`, a preset or operator type)              |
//! | `group`        | string               | endpoint group                                                 |
//! | `result`       | string               | `success` or `error`                                           |
//! | `duration_ms`  | number               | wall time of the poll in milliseconds (microsecond precision)  |
//! | `status`       | number \| null       | HTTP status when a response arrived                            |
//! | `changed`      | bool                 | **success only** (absent on errors): the body differs from the previous successful poll |
//! | `error`        | object \| null       | `{"category": "transient"\|"permanent", "kind": …, "message": …}`; null on success |
//! | `failed_items` | array                | **absent when empty**: fan-out items that failed in a run that still succeeded, `[{"item", "message", "status"}]` (`status` number \| null) |
//! | `body`         | any                  | **absent unless the engine includes it**: the response body, as JSON when it parses, else as a string |
//!
//! `error.kind` is one of `timeout`, `connect`, `dns`, `http`, `rate_limited`,
//! `tls`, `body`, `invalid_url`, `invalid_credentials`, `other`.
//!
//! ## `breaker` — a circuit breaker changed state
//!
//! | field      | type           | meaning                                           |
//! |------------|----------------|---------------------------------------------------|
//! | `instance` | string         | instance name                                     |
//! | `type`     | string         | instance type                                     |
//! | `group`    | string         | endpoint group                                    |
//! | `from`     | string         | `closed`, `open` or `half_open`                   |
//! | `to`       | string         | `closed`, `open` or `half_open`                   |
//! | `failures` | number         | consecutive failures at the transition            |
//! | `retry_at` | string \| null | when an open breaker lets the next probe through  |
//!
//! ## `dead_letter` — a task entered, left or was acted on in the dead-letter queue
//!
//! | field      | type           | meaning                                                                 |
//! |------------|----------------|-------------------------------------------------------------------------|
//! | `instance` | string         | instance name                                                           |
//! | `type`     | string         | instance type                                                           |
//! | `group`    | string         | endpoint group                                                          |
//! | `action`   | string         | `entered`, `left`, `rechecked`, `retried`, `discarded`, `enabled`       |
//! | `reason`   | string \| null | why it is there: `max_retry_attempts` or `permanent_failure`            |
//! | `error`    | string \| null | the last error message                                                  |
//! | `actor`    | string \| null | who did it, for operator-driven actions (`retried`, `discarded`, `enabled`) |
//!
//! ## `settings` — an operator changed settings
//!
//! | field     | type   | meaning                                                            |
//! |-----------|--------|--------------------------------------------------------------------|
//! | `actor`   | string | who changed them                                                   |
//! | `section` | string | `monitoring`, `sink` or `budget`                                   |
//! | `change`  | any    | what changed, as JSON; secrets (sink header values…) are masked    |
//!
//! ## `operator` — an operator acted on the inventory
//!
//! | field    | type   | meaning                                                                  |
//! |----------|--------|--------------------------------------------------------------------------|
//! | `actor`  | string | who did it                                                               |
//! | `action` | string | dotted verb: `instance.create`, `instance.update`, `instance.delete`, `token.create`, `token.revoke`, `password.change`, `account.create`, `login`, `login.failed`, `token.failed`, `maintenance.create`, `maintenance.delete`, `maintenance.start`, `maintenance.end` |
//! | `target` | string | what it was done to, e.g. the instance name                              |
//! | `instances`, `reason` | array, string | `maintenance.*` only: the instances the window covers and why it was made |
//! | `count`, `first`, `last`, `source` | number, string, string, string | `login.failed` and `token.failed` only: the failures from one address within one window this event stands for (see docs/EVENTS.md) |
//!
//! ## `test` — sent by the "send test event" button
//!
//! | field     | type   | meaning             |
//! |-----------|--------|---------------------|
//! | `actor`   | string | who pressed it      |
//! | `message` | string | free text           |
//!
//! ## Examples
//!
//! ```text
//! {"time":"2026-11-30T04:40:00.123Z","kind":"poll","instance":"web-1","type":"http","group":"status","result":"success","duration_ms":12.5,"status":200,"changed":false,"error":null}
//! {"time":"2026-11-30T04:40:01.000Z","kind":"poll","instance":"web-1","type":"http","group":"status","result":"error","duration_ms":10000.0,"status":null,"error":{"category":"transient","kind":"timeout","message":"timed out after 10s"}}
//! {"time":"2026-11-30T04:40:01.000Z","id":"01KB9WJ0R8N5CV3M9Q4TB6ZK2E","kind":"breaker","instance":"web-1","type":"http","group":"status","from":"closed","to":"open","failures":3,"retry_at":"2026-11-30T04:40:31.000Z"}
//! {"time":"2026-11-30T04:41:00.000Z","id":"01KB9WKV00JQZ0F8W3H1X5D7MA","kind":"dead_letter","instance":"web-1","type":"http","group":"status","action":"entered","reason":"max_retry_attempts","error":"timed out after 10s","actor":null}
//! {"time":"2026-11-30T04:42:00.000Z","id":"01KB9WNNG0S2E7Y4R6K8P0C3VB","kind":"settings","actor":"admin","section":"sink","change":{"batch_size":500}}
//! {"time":"2026-11-30T04:43:00.000Z","id":"01KB9WQG80A9D3T5M2W7H4F6RN","kind":"operator","actor":"admin","action":"instance.delete","target":"web-1"}
//! {"time":"2026-11-30T04:44:00.000Z","kind":"test","actor":"admin","message":"test event from Pollster"}
//! ```

mod id;
mod kinds;

#[cfg(test)]
mod tests;

pub use id::new_event_id;
pub use kinds::{
    BreakerEvent, DeadLetterAction, DeadLetterEvent, EventError, EventFailedItem, FailureCount, OperatorEvent,
    PollEvent, PollOutcome, PoolEvent, PoolTransition, ReloadSummary, SettingsEvent, SettingsSection, TestEvent,
};

use crate::model::Timestamp;
use crate::store::OutboxEvent;
use rand::Rng;
use serde::{Serialize, Serializer};

/// `2026-11-30T04:40:00.123Z`: RFC 3339 UTC with milliseconds.
pub fn rfc3339_millis(t: Timestamp) -> String {
    t.to_rfc3339_millis()
}

fn ser_time<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339_millis(*t))
}

fn ser_opt_time<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&rfc3339_millis(*t)),
        None => s.serialize_none(),
    }
}

/// One event: a time and what happened. Build it with [`Event::poll`],
/// [`Event::breaker`], [`Event::dead_letter`], [`Event::settings`],
/// [`Event::operator`] or [`Event::test`]; ship it with `Sink::emit`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    #[serde(serialize_with = "ser_time")]
    pub time: Timestamp,
    /// The stable id of a change event (set by [`Event::with_new_id`] when
    /// it is written to the outbox); absent on poll and test events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(flatten)]
    pub kind: EventKind,
    /// The instance the event is about is in a maintenance window (set by
    /// [`Event::in_maintenance`]); absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub maintenance: bool,
}

/// The kind-specific part of an [`Event`]; the variant is the `kind` field.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    Poll(PollEvent),
    Breaker(BreakerEvent),
    DeadLetter(DeadLetterEvent),
    Settings(SettingsEvent),
    Operator(OperatorEvent),
    Test(TestEvent),
    Pool(PoolEvent),
}

impl Event {
    pub fn poll(time: Timestamp, poll: PollEvent) -> Event {
        Event {
            time,
            id: None,
            maintenance: false,
            kind: EventKind::Poll(poll),
        }
    }

    /// A budget pool's transition: a change event, given its `id` when it
    /// is staged in the outbox.
    pub fn pool(time: Timestamp, pool: PoolEvent) -> Event {
        Event {
            time,
            id: None,
            maintenance: false,
            kind: EventKind::Pool(pool),
        }
    }

    pub fn breaker(time: Timestamp, breaker: BreakerEvent) -> Event {
        Event {
            time,
            id: None,
            maintenance: false,
            kind: EventKind::Breaker(breaker),
        }
    }

    pub fn dead_letter(time: Timestamp, dead_letter: DeadLetterEvent) -> Event {
        Event {
            time,
            id: None,
            maintenance: false,
            kind: EventKind::DeadLetter(dead_letter),
        }
    }

    /// `change` must already have its secrets masked.
    pub fn settings(time: Timestamp, actor: &str, section: SettingsSection, change: serde_json::Value) -> Event {
        Event {
            time,
            id: None,
            maintenance: false,
            kind: EventKind::Settings(SettingsEvent {
                actor: actor.into(),
                section,
                change,
            }),
        }
    }

    /// E.g. `Event::operator(now, "admin", "instance.create", "web-1")`.
    pub fn operator(time: Timestamp, actor: &str, action: &str, target: &str) -> Event {
        Event {
            time,
            id: None,
            maintenance: false,
            kind: EventKind::Operator(OperatorEvent {
                actor: actor.into(),
                action: action.into(),
                target: target.into(),
                fields: Vec::new(),
                failures: None,
                reload: None,
                instances: None,
                reason: None,
            }),
        }
    }

    /// The event with `maintenance: true` when `on` (its instance is in a
    /// maintenance window).
    pub fn in_maintenance(mut self, on: bool) -> Event {
        self.maintenance = on;
        self
    }

    /// An operator event naming the fields a change set (never their values).
    pub fn with_fields(mut self, fields: Vec<String>) -> Event {
        if let EventKind::Operator(o) = &mut self.kind {
            o.fields = fields;
        }
        self
    }

    /// A `config.reload` operator event with what the reload did.
    pub fn with_reload(mut self, reload: ReloadSummary) -> Event {
        if let EventKind::Operator(o) = &mut self.kind {
            o.reload = Some(reload);
        }
        self
    }

    /// A `maintenance.*` operator event: the instances the window covers
    /// and its reason.
    pub fn with_window(mut self, instances: Vec<String>, reason: &str) -> Event {
        if let EventKind::Operator(o) = &mut self.kind {
            o.instances = Some(instances);
            o.reason = Some(reason.to_string());
        }
        self
    }

    /// An operator event standing for several failures (`login.failed`,
    /// `token.failed`).
    pub fn with_failures(mut self, failures: FailureCount) -> Event {
        if let EventKind::Operator(o) = &mut self.kind {
            o.failures = Some(failures);
        }
        self
    }

    pub fn test(time: Timestamp, actor: &str, message: &str) -> Event {
        Event {
            time,
            id: None,
            maintenance: false,
            kind: EventKind::Test(TestEvent {
                actor: actor.into(),
                message: message.into(),
            }),
        }
    }

    /// The `kind` field: `poll`, `breaker`, `dead_letter`, `settings`,
    /// `operator`, `test` or `pool`.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            EventKind::Poll(_) => "poll",
            EventKind::Breaker(_) => "breaker",
            EventKind::DeadLetter(_) => "dead_letter",
            EventKind::Settings(_) => "settings",
            EventKind::Operator(_) => "operator",
            EventKind::Test(_) => "test",
            EventKind::Pool(_) => "pool",
        }
    }

    /// Whether the event records a change (breaker, dead-letter, settings,
    /// operator): those are durable and carry an `id`; poll and test events
    /// are best effort.
    pub fn is_change(&self) -> bool {
        matches!(
            self.kind,
            EventKind::Breaker(_) | EventKind::DeadLetter(_) | EventKind::Settings(_) | EventKind::Operator(_)
        )
    }

    /// Whether the event records who did what (an operator action, a
    /// settings change, an operator's dead-letter retry, discard or
    /// enable): those go to the audit trail too, whether or not a sink is
    /// configured.
    pub fn is_audit(&self) -> bool {
        match &self.kind {
            EventKind::Settings(_) | EventKind::Operator(_) => true,
            EventKind::DeadLetter(d) => d.actor.is_some(),
            _ => false,
        }
    }

    /// The event with a new id ([`new_event_id`]) from its time and `rng`.
    pub fn with_new_id(mut self, rng: &mut impl Rng) -> Event {
        self.id = Some(new_event_id(self.time, rng));
        self
    }

    /// The event as an outbox row, with a new id: the line stored is the
    /// line sent, every time it is sent.
    pub fn to_outbox(&self, rng: &mut impl Rng) -> OutboxEvent {
        let event = self.clone().with_new_id(rng);
        OutboxEvent::new(event.id.clone().unwrap_or_default(), event.to_line())
    }

    /// The event as one NDJSON line: compact JSON (no raw newlines: they are
    /// escaped inside strings) followed by `\n`.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_else(|e| {
            // Unreachable with these types (string keys, no fallible
            // serializers); keep the line well-formed regardless.
            serde_json::json!({
                "time": rfc3339_millis(self.time),
                "kind": self.kind_name(),
                "serialization_error": e.to_string(),
            })
            .to_string()
        });
        line.push('\n');
        line
    }
}

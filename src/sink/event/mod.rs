//! Events shipped by the sink (§5): one JSON object per line (NDJSON).
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
//! | `action` | string | dotted verb: `instance.create`, `instance.update`, `instance.delete`, `token.create`, `token.revoke`, `password.change` |
//! | `target` | string | what it was done to, e.g. the instance name                              |
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

use crate::model::{
    BreakerState, DeadLetterReason, ErrorCategory, ErrorKind, FailedItem, PollError, PollResult, Timestamp,
};
use crate::store::OutboxEvent;
use rand::{Rng, RngExt};
use serde::{Serialize, Serializer};
use std::time::Duration;

/// Crockford's base 32, as ULIDs use it.
const ULID_ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A new event id: a ULID (26 characters of Crockford base 32: 48 bits of
/// `time` in milliseconds, then 80 random bits), e.g.
/// `01JDQ9Y3V2K8S6R0ZP4M5TQW7A`. Unique without coordination (a clash needs
/// two events in the same millisecond drawing the same 80 bits), and ids of
/// events far enough apart sort by time.
pub fn new_event_id(time: Timestamp, rng: &mut impl Rng) -> String {
    let random: u128 = rng.random::<u128>() & ((1u128 << 80) - 1);
    let value = (u128::from(time.0 & ((1u64 << 48) - 1)) << 80) | random;
    (0..26)
        .map(|i| {
            let shift = 125 - 5 * i;
            char::from(ULID_ALPHABET[((value >> shift) & 31) as usize])
        })
        .collect()
}

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
}

impl Event {
    pub fn poll(time: Timestamp, poll: PollEvent) -> Event {
        Event {
            time,
            id: None,
            kind: EventKind::Poll(poll),
        }
    }

    pub fn breaker(time: Timestamp, breaker: BreakerEvent) -> Event {
        Event {
            time,
            id: None,
            kind: EventKind::Breaker(breaker),
        }
    }

    pub fn dead_letter(time: Timestamp, dead_letter: DeadLetterEvent) -> Event {
        Event {
            time,
            id: None,
            kind: EventKind::DeadLetter(dead_letter),
        }
    }

    /// `change` must already have its secrets masked.
    pub fn settings(time: Timestamp, actor: &str, section: SettingsSection, change: serde_json::Value) -> Event {
        Event {
            time,
            id: None,
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
            kind: EventKind::Operator(OperatorEvent {
                actor: actor.into(),
                action: action.into(),
                target: target.into(),
            }),
        }
    }

    pub fn test(time: Timestamp, actor: &str, message: &str) -> Event {
        Event {
            time,
            id: None,
            kind: EventKind::Test(TestEvent {
                actor: actor.into(),
                message: message.into(),
            }),
        }
    }

    /// The `kind` field: `poll`, `breaker`, `dead_letter`, `settings`,
    /// `operator` or `test`.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            EventKind::Poll(_) => "poll",
            EventKind::Breaker(_) => "breaker",
            EventKind::DeadLetter(_) => "dead_letter",
            EventKind::Settings(_) => "settings",
            EventKind::Operator(_) => "operator",
            EventKind::Test(_) => "test",
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

    /// The event with a new id ([`new_event_id`]) from its time and `rng`.
    pub fn with_new_id(mut self, rng: &mut impl Rng) -> Event {
        self.id = Some(new_event_id(self.time, rng));
        self
    }

    /// The event as an outbox row, with a new id: the line stored is the
    /// line sent, every time it is sent.
    pub fn to_outbox(&self, rng: &mut impl Rng) -> OutboxEvent {
        let event = self.clone().with_new_id(rng);
        OutboxEvent {
            line: event.to_line(),
            id: event.id.unwrap_or_default(),
        }
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestEvent {
    pub actor: String,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PollSuccess, ShapeUpdate};
    use serde_json::{Value, json};

    const T: Timestamp = Timestamp(1_796_013_600_123); // 2026-11-30T04:40:00.123Z

    fn parse(e: &Event) -> Value {
        let line = e.to_line();
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1, "one line: {line:?}");
        serde_json::from_str(&line).expect("valid JSON")
    }

    #[test]
    fn event_ids_are_ulids_of_the_time_and_random_bits() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let a = new_event_id(T, &mut rng);
        let b = new_event_id(T, &mut rng);
        assert_eq!(a.len(), 26);
        assert!(a.bytes().all(|c| ULID_ALPHABET.contains(&c)), "{a}");
        assert_ne!(a, b, "random bits differ");
        assert_eq!(a[..10], b[..10], "the first 10 characters are the time");
        // 48 bits of milliseconds: 0 is all zeros, the largest is 7ZZZZZZZZZ.
        assert_eq!(&new_event_id(Timestamp(0), &mut rng)[..10], "0000000000");
        assert_eq!(&new_event_id(Timestamp((1 << 48) - 1), &mut rng)[..10], "7ZZZZZZZZZ");
        assert!(
            new_event_id(Timestamp(T.0 + 1), &mut rng) > b,
            "a later millisecond sorts after"
        );
    }

    #[test]
    fn change_events_carry_their_id_in_the_stored_line() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let e = Event::operator(T, "admin", "instance.create", "web-1");
        assert!(e.is_change());
        assert!(parse(&e).get("id").is_none(), "no id until it is given one");
        let row = e.to_outbox(&mut rng);
        let v: Value = serde_json::from_str(&row.line).expect("json");
        assert_eq!(v["id"], row.id.as_str());
        assert_eq!(v["action"], "instance.create");
        assert!(
            row.line.starts_with("{\"time\":\"2026-11-30T04:40:00.123Z\",\"id\":"),
            "{}",
            row.line
        );
        assert_ne!(e.to_outbox(&mut rng).id, row.id, "a new id per outbox row");
        assert!(!Event::test(T, "a", "m").is_change());
        let poll = PollEvent::success("a", "t", "g", Duration::ZERO, 200, false);
        assert!(!Event::poll(T, poll).is_change());
    }

    #[test]
    fn time_is_rfc3339_utc_with_millis() {
        assert_eq!(rfc3339_millis(T), "2026-11-30T04:40:00.123Z");
        assert_eq!(rfc3339_millis(Timestamp(0)), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn poll_success_fields() {
        let e = Event::poll(
            T,
            PollEvent::success("web-1", "http", "status", Duration::from_micros(12_345), 200, true),
        );
        let v = parse(&e);
        assert_eq!(
            v,
            json!({"time": "2026-11-30T04:40:00.123Z", "kind": "poll", "instance": "web-1", "type": "http",
                   "group": "status", "result": "success", "duration_ms": 12.345, "status": 200,
                   "changed": true, "error": null})
        );
        assert_eq!(
            e.to_line(),
            "{\"time\":\"2026-11-30T04:40:00.123Z\",\"kind\":\"poll\",\"instance\":\"web-1\",\"type\":\"http\",\
             \"group\":\"status\",\"result\":\"success\",\"duration_ms\":12.345,\"status\":200,\"changed\":true,\
             \"error\":null}\n",
            "field order as documented"
        );
    }

    #[test]
    fn poll_error_has_no_changed_and_an_error_object() {
        let mut err = PollError::new(
            ErrorCategory::Transient,
            ErrorKind::Http,
            "HTTP 503 Service Unavailable",
        );
        err.status = Some(503);
        let e = Event::poll(
            T,
            PollEvent::from_result("web-1", "http", "status", Duration::from_secs(1), &Err(err), true),
        );
        let v = parse(&e);
        assert_eq!(v["result"], "error");
        assert_eq!(v["status"], 503);
        assert!(v.get("changed").is_none());
        assert_eq!(
            v["error"],
            json!({"category": "transient", "kind": "http", "message": "HTTP 503 Service Unavailable"})
        );
        assert_eq!(v["duration_ms"], 1000.0);
        assert!(v.get("failed_items").is_none());
        assert!(v.get("body").is_none());

        let timeout = PollError::new(ErrorCategory::Transient, ErrorKind::Timeout, "timed out after 10s");
        let v = parse(&Event::poll(
            T,
            PollEvent::error("a", "t", "g", Duration::ZERO, &timeout),
        ));
        assert_eq!(v["status"], Value::Null);
        assert_eq!(v["error"]["kind"], "timeout");
    }

    #[test]
    fn poll_failed_items_and_body() {
        let mut item_err = PollError::new(ErrorCategory::Permanent, ErrorKind::Http, "HTTP 404 Not Found");
        item_err.status = Some(404);
        let ok = PollSuccess {
            status: 200,
            digest: 7,
            body_bytes: 10,
            shape: Some(ShapeUpdate::default()),
            body: None,
            failed_items: vec![
                FailedItem {
                    item: "node-2".into(),
                    error: item_err,
                },
                FailedItem {
                    item: "node-3".into(),
                    error: PollError::new(ErrorCategory::Transient, ErrorKind::Timeout, "timed out"),
                },
            ],
        };
        let e = PollEvent::from_result("pve", "proxmox", "nodes", Duration::from_millis(5), &Ok(ok), false)
            .with_body(br#"{"data": [1, 2]}"#);
        let v = parse(&Event::poll(T, e));
        assert_eq!(v["changed"], false);
        assert_eq!(v["error"], Value::Null);
        assert_eq!(
            v["failed_items"],
            json!([{"item": "node-2", "message": "HTTP 404 Not Found", "status": 404},
                   {"item": "node-3", "message": "timed out", "status": null}])
        );
        assert_eq!(v["body"], json!({"data": [1, 2]}));

        let text = PollEvent::success("a", "t", "g", Duration::ZERO, 200, false).with_body(b"plain\ntext");
        let v = parse(&Event::poll(T, text));
        assert_eq!(v["body"], "plain\ntext");
    }

    #[test]
    fn breaker_fields() {
        let e = Event::breaker(
            T,
            BreakerEvent {
                instance: "web-1".into(),
                type_name: "http".into(),
                group: "status".into(),
                from: BreakerState::Closed,
                to: BreakerState::Open,
                failures: 3,
                retry_at: Some(Timestamp(T.0 + 30_000)),
            },
        );
        let v = parse(&e);
        assert_eq!(
            v,
            json!({"time": "2026-11-30T04:40:00.123Z", "kind": "breaker", "instance": "web-1", "type": "http",
                   "group": "status", "from": "closed", "to": "open", "failures": 3,
                   "retry_at": "2026-11-30T04:40:30.123Z"})
        );
        let half = BreakerEvent {
            instance: "a".into(),
            type_name: "t".into(),
            group: "g".into(),
            from: BreakerState::Open,
            to: BreakerState::HalfOpen,
            failures: 3,
            retry_at: None,
        };
        let v = parse(&Event::breaker(T, half));
        assert_eq!(v["to"], "half_open");
        assert_eq!(v["retry_at"], Value::Null);
    }

    #[test]
    fn dead_letter_fields() {
        let e = DeadLetterEvent::new("web-1", "http", "status", DeadLetterAction::Entered)
            .with_reason(DeadLetterReason::MaxRetryAttempts)
            .with_error("timed out after 10s");
        let v = parse(&Event::dead_letter(T, e));
        assert_eq!(
            v,
            json!({"time": "2026-11-30T04:40:00.123Z", "kind": "dead_letter", "instance": "web-1",
                   "type": "http", "group": "status", "action": "entered", "reason": "max_retry_attempts",
                   "error": "timed out after 10s", "actor": null})
        );
        for (action, name) in [
            (DeadLetterAction::Left, "left"),
            (DeadLetterAction::Rechecked, "rechecked"),
            (DeadLetterAction::Retried, "retried"),
            (DeadLetterAction::Discarded, "discarded"),
            (DeadLetterAction::Enabled, "enabled"),
        ] {
            let v = parse(&Event::dead_letter(
                T,
                DeadLetterEvent::new("a", "t", "g", action).with_actor("admin"),
            ));
            assert_eq!(v["action"], name);
            assert_eq!(v["actor"], "admin");
            assert_eq!(v["reason"], Value::Null);
        }
    }

    #[test]
    fn settings_operator_test_fields() {
        let v = parse(&Event::settings(
            T,
            "admin",
            SettingsSection::Sink,
            json!({"headers": {"Authorization": "(hidden)"}}),
        ));
        assert_eq!(
            v,
            json!({"time": "2026-11-30T04:40:00.123Z", "kind": "settings", "actor": "admin", "section": "sink",
                   "change": {"headers": {"Authorization": "(hidden)"}}})
        );
        for (s, name) in [
            (SettingsSection::Monitoring, "monitoring"),
            (SettingsSection::Budget, "budget"),
        ] {
            assert_eq!(parse(&Event::settings(T, "a", s, Value::Null))["section"], name);
        }
        let v = parse(&Event::operator(T, "admin", "instance.create", "web-1"));
        assert_eq!(
            v,
            json!({"time": "2026-11-30T04:40:00.123Z", "kind": "operator", "actor": "admin",
                   "action": "instance.create", "target": "web-1"})
        );
        let e = Event::test(T, "admin", "hello\n\"world\"");
        assert_eq!(e.kind_name(), "test");
        let v = parse(&e);
        assert_eq!(
            v,
            json!({"time": "2026-11-30T04:40:00.123Z", "kind": "test", "actor": "admin",
                   "message": "hello\n\"world\""})
        );
        assert_eq!(
            e.to_line(),
            "{\"time\":\"2026-11-30T04:40:00.123Z\",\"kind\":\"test\",\"actor\":\"admin\",\
             \"message\":\"hello\\n\\\"world\\\"\"}\n"
        );
    }
}

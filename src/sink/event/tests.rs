//! Each event kind as the JSON line a receiver gets: fields, order,
//! omissions, and the ids of change events.

use super::id::ULID_ALPHABET;
use super::*;
use crate::model::{
    BreakerState, DeadLetterReason, ErrorCategory, ErrorKind, FailedItem, PollError, PollSuccess, ShapeUpdate,
};
use serde_json::{Value, json};
use std::time::Duration;

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
    let mut rng = crate::model::random::StdRng::seed_from_u64(7);
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
    let mut rng = crate::model::random::StdRng::seed_from_u64(1);
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
        json: None,
        kept_body: None,
        facts: None,
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

#[test]
fn a_pool_event_names_the_transition_the_demand_the_target_and_the_groups() {
    let e = Event::pool(
        T,
        PoolEvent {
            pool: "org".into(),
            transition: PoolTransition::Shedding,
            demand_rps: 2.4,
            target_rps: 2.8,
            effective_budget_rps: 4.0,
            budget_rps: 8.0,
            groups: vec!["net/health".into(), "net/inventory".into()],
        },
    );
    assert!(!e.is_change(), "best effort, like a poll event");
    assert_eq!(e.kind_name(), "pool");
    assert_eq!(
        e.to_line(),
        "{\"time\":\"2026-11-30T04:40:00.123Z\",\"kind\":\"pool\",\"pool\":\"org\",\"transition\":\"shedding\",\
         \"demand_rps\":2.4,\"target_rps\":2.8,\"effective_budget_rps\":4.0,\"budget_rps\":8.0,\
         \"groups\":[\"net/health\",\"net/inventory\"]}\n"
    );
}

//! Maintenance windows: the API (made, listed, ended; each refused field
//! named), a window surviving a restart, and, on paused time, what a window
//! does to the engine: a failing instance inside one is never
//! dead-lettered while one outside is, its events carry the flag, and
//! `pollster_maintenance_active` turns on and off at the window's edges.

use crate::common::paused::{self, Engine, START};
use crate::common::*;
use pollster::core::maintenance::{MaintenanceTarget, MaintenanceWindow, Schedule};
use pollster::engine::ports::Fetch;
use pollster::fleet::Behaviour;
use pollster::model::{
    BaseUrl, ErrorCategory, ErrorKind, GroupDef, InstanceConfig, PollError, PollResult, PollSuccess, TaskKey, TypeDef,
};
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Every instance answers 200 until `fail_from`, then HTTP 500.
struct FailingFrom {
    fail_from: Instant,
}

#[async_trait::async_trait]
impl Fetch for FailingFrom {
    async fn fetch(
        &self,
        _instance: &InstanceConfig,
        _base: Option<&BaseUrl>,
        _group: &GroupDef,
        _items: &[String],
    ) -> PollResult {
        if Instant::now() < self.fail_from {
            return Ok(PollSuccess {
                status: 200,
                digest: 1,
                body_bytes: 2,
                ..Default::default()
            });
        }
        Err(PollError {
            status: Some(500),
            ..PollError::new(ErrorCategory::Transient, ErrorKind::Http, "HTTP 500")
        })
    }
}

fn gauge(metrics: &str, instance: &str) -> Option<String> {
    let prefix = format!("pollster_maintenance_active{{instance=\"{instance}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

async fn sleep_until(e: &Engine, minutes: f64) {
    let at = e.origin + Duration::from_secs_f64(minutes * 60.0);
    tokio::time::sleep_until(at).await;
}

/// The paused appliance's config: `inside` and `outside` of type `t`
/// (one group, `probe`, every 10 s), failure rules of seconds: backoff 1 s
/// doubling to 60 s, breaker after 3, dead letter after 5.
fn engine_config(dir: &std::path::Path) -> pollster::config::Config {
    let mut c = paused::failure_config(dir, Duration::from_secs(10), Duration::from_secs(3600));
    c.types.push(TypeDef {
        name: "t".into(),
        groups: vec![GroupDef::new("probe", "", 1, Duration::from_secs(10))],
    });
    c.instances = ["inside", "outside"]
        .iter()
        .map(|n| InstanceConfig {
            timeout: Duration::from_secs(1),
            ..InstanceConfig::new(n, "t", "http://scripted.invalid/")
        })
        .collect();
    c
}

/// The `maintenance.*` actions in the audit trail, oldest first.
fn maintenance_audit(e: &Engine) -> Vec<String> {
    let store = e.store.as_ref().expect("store");
    let mut actions: Vec<String> = store
        .audit_page(None, 1000)
        .expect("audit")
        .iter()
        .filter_map(|a| serde_json::from_str::<Value>(&a.line).ok())
        .filter_map(|v| v["action"].as_str().map(str::to_string))
        .filter(|a| a.starts_with("maintenance."))
        .collect();
    actions.reverse();
    actions
}

/// A window from `from` to `to` minutes after START, for `inside`.
fn window(from: u64, to: u64) -> MaintenanceWindow {
    MaintenanceWindow {
        id: "w1".into(),
        target: MaintenanceTarget::Instances(vec!["inside".into()]),
        schedule: Schedule::Once {
            start: START.plus(Duration::from_secs(from * 60)),
            end: START.plus(Duration::from_secs(to * 60)),
        },
        reason: "firmware".into(),
        created: START,
        created_by: "test".into(),
        open_since: None,
    }
}

#[tokio::test(start_paused = true)]
async fn an_opening_is_recorded_once_across_restarts_and_a_closing_while_stopped_at_the_next_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = Instant::now();
    {
        let store = pollster::store::Store::open(dir.path()).expect("open");
        store.put_maintenance_with_events(&window(1, 10), &[]).expect("put");
    }
    let fetch = || {
        Arc::new(FailingFrom {
            fail_from: origin + Duration::from_secs(24 * 3600),
        })
    };
    let e = Engine::serve(engine_config(dir.path()), paused::ports(origin, fetch()), origin).await;
    sleep_until(&e, 2.0).await;
    assert_eq!(maintenance_audit(&e), ["maintenance.start"]);
    e.stop().await;
    let e = Engine::serve(engine_config(dir.path()), paused::ports(origin, fetch()), origin).await;
    sleep_until(&e, 5.0).await;
    assert_eq!(maintenance_audit(&e), ["maintenance.start"], "not recorded again");
    e.stop().await;
    // Stopped while the window closes at 10 min.
    tokio::time::sleep_until(origin + Duration::from_secs(12 * 60)).await;
    let e = Engine::serve(engine_config(dir.path()), paused::ports(origin, fetch()), origin).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(maintenance_audit(&e), ["maintenance.start", "maintenance.end"]);
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_instance_in_a_window_is_never_dead_lettered_and_one_outside_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = Instant::now();
    // The window: from START + 2 min to START + 20 min, for `inside`.
    let window = window(2, 20);
    {
        let store = pollster::store::Store::open(dir.path()).expect("open");
        store.put_maintenance_with_events(&window, &[]).expect("put");
    }
    let mut c = engine_config(dir.path());
    // A sink nobody answers: change events wait in the outbox, to be read.
    let mut sink = pollster::config::SinkConfig::new("http://127.0.0.1:9/ingest");
    sink.buffering = Duration::from_secs(3600);
    sink.retry_limit = Duration::from_secs(24 * 3600);
    c.sink = Some(sink);
    let fetch = Arc::new(FailingFrom {
        fail_from: origin + Duration::from_secs(180),
    });
    let e = Engine::serve(c, paused::ports(origin, fetch), origin).await;
    let metrics = e.metrics.clone().expect("metrics");

    sleep_until(&e, 1.0).await;
    assert_eq!(
        gauge(&metrics.render(), "inside").as_deref(),
        Some("0"),
        "a window ahead: 0"
    );
    assert_eq!(gauge(&metrics.render(), "outside"), None, "no window: no series");
    sleep_until(&e, 2.0).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        gauge(&metrics.render(), "inside").as_deref(),
        Some("1"),
        "on at the window's start"
    );

    // Both fail from minute 3: five failures take 15 s.
    sleep_until(&e, 19.0).await;
    let rec = |n: &str| e.shared.task_record(&TaskKey::new(n, "probe")).expect("task");
    assert!(
        rec("outside").dead_letter.is_some(),
        "outside the window: dead-lettered"
    );
    let inside = rec("inside");
    assert!(inside.dead_letter.is_none(), "inside the window: never dead-lettered");
    assert!(
        inside.failures > 10,
        "it kept being polled: {} failures",
        inside.failures
    );
    assert_eq!(
        inside.breaker,
        pollster::model::BreakerState::Open,
        "the breaker still protects the target"
    );

    sleep_until(&e, 20.0).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(gauge(&metrics.render(), "inside"), None, "off at the window's end");

    // The window's edges are in the audit trail, flagged.
    let store = e.store.clone().expect("store");
    let audit = store.audit_page(None, 1000).expect("audit");
    let actions: Vec<Value> = audit
        .iter()
        .map(|a| serde_json::from_str::<Value>(&a.line).expect("json"))
        .filter(|v| v["action"].as_str().is_some_and(|a| a.starts_with("maintenance.")))
        .collect();
    let named: Vec<&str> = actions.iter().filter_map(|v| v["action"].as_str()).collect();
    assert!(named.contains(&"maintenance.start"), "{named:?}");
    assert!(named.contains(&"maintenance.end"), "{named:?}");
    for a in &actions {
        assert_eq!(a["maintenance"], true, "{a}");
        assert_eq!(a["target"], "w1", "{a}");
        assert_eq!(a["instances"], json!(["inside"]), "{a}");
    }

    // The change events about `inside` carry the flag; those about
    // `outside` do not.
    let rows = store.outbox_page(0, 100_000).expect("outbox");
    let events: Vec<Value> = rows
        .iter()
        .map(|(_, r)| serde_json::from_str::<Value>(&r.as_ref().expect("a row").line).expect("json"))
        .collect();
    let breaker_of = |n: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|v| v["kind"] == "breaker" && v["instance"] == n)
            .collect()
    };
    let (inside, outside) = (breaker_of("inside"), breaker_of("outside"));
    assert!(!inside.is_empty() && !outside.is_empty(), "{events:?}");
    assert!(inside.iter().all(|v| v["maintenance"] == true), "{inside:?}");
    assert!(outside.iter().all(|v| v.get("maintenance").is_none()), "{outside:?}");
    assert!(
        events
            .iter()
            .any(|v| v["kind"] == "dead_letter" && v["instance"] == "outside" && v["action"] == "entered"),
        "{events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|v| v["kind"] == "dead_letter" && v["instance"] == "inside"),
        "{events:?}"
    );
    drop((metrics, store));
    e.stop().await;
}

/// The body of a refusal and its field.
async fn refused(app: &TestApp, body: Value) -> String {
    let (status, answer) = app.send(Method::POST, "/api/maintenance", Some(body.clone())).await;
    assert_eq!(status, 422, "{body} -> {answer}");
    assert_eq!(answer["error"]["code"], "invalid", "{answer}");
    answer["error"]["field"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_field_of_a_window_is_refused_with_422_naming_it() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let cases = [
        (json!({"instances": ["nope"], "duration": "1h"}), "instances"),
        (json!({"duration": "1h"}), "instances"),
        (json!({"instances": ["x"], "type": "fast", "duration": "1h"}), "type"),
        (json!({"pool": "nope", "duration": "1h"}), "pool"),
        (json!({"type": "nope", "duration": "1h"}), "type"),
        (
            json!({"instances": ["x"], "start": "2099-01-02T00:00:00Z", "end": "2099-01-01T00:00:00Z"}),
            "end",
        ),
        (
            json!({"instances": ["x"], "days": ["mon"], "at": "02:00", "duration": "1h", "timezone": "Mars/Olympus"}),
            "timezone",
        ),
        (json!({"instances": ["x"], "duration": "8d"}), "duration"),
        (
            json!({"instances": ["x"], "days": ["mon"], "at": "02:00", "duration": "170h"}),
            "duration",
        ),
        (
            json!({"instances": ["x"], "days": ["mon"], "at": "2am", "duration": "1h"}),
            "at",
        ),
        (
            json!({"instances": ["x"], "days": ["funday"], "at": "02:00", "duration": "1h"}),
            "days",
        ),
        (json!({"instances": ["x"], "duration": "1h", "colour": "red"}), "colour"),
    ];
    for (body, field) in cases {
        assert_eq!(refused(&app, body.clone()).await, field, "{body}");
    }
    assert_eq!(app.get_json("/api/maintenance").await["count"], 0, "nothing was made");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_is_made_listed_shown_in_the_metrics_and_ended() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let (status, w) = app
        .send(
            Method::POST,
            "/api/maintenance",
            Some(json!({"instances": ["x"], "duration": "1h", "reason": "swap the disk"})),
        )
        .await;
    assert_eq!(status, 201, "{w}");
    assert_eq!(w["active"], true, "{w}");
    assert_eq!(w["covers"], json!(["x"]));
    assert_eq!(w["reason"], "swap the disk");
    let id = w["id"].as_str().expect("id").to_string();
    let list = app.get_json("/api/maintenance").await;
    assert_eq!(list["count"], 1, "{list}");
    assert_eq!(list["windows"][0]["id"], id.as_str());
    assert!(list["windows"][0]["nextEnd"].is_string(), "{list}");

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while gauge(&app.metrics().await, "x").as_deref() != Some("1") {
        assert!(std::time::Instant::now() < deadline, "the gauge never turned on");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (status, ended) = app.send(Method::DELETE, &format!("/api/maintenance/{id}"), None).await;
    assert_eq!(status, 200, "{ended}");
    assert_eq!(app.get_json("/api/maintenance").await["count"], 0);
    let (status, _) = app.send(Method::DELETE, &format!("/api/maintenance/{id}"), None).await;
    assert_eq!(status, 404);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while gauge(&app.metrics().await, "x").is_some() {
        assert!(std::time::Instant::now() < deadline, "the gauge never went away");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Made, started, deleted, ended: each in the audit trail.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let actions: Vec<String> = app
            .store()
            .audit_page(None, 100)
            .expect("audit")
            .iter()
            .filter_map(|a| serde_json::from_str::<Value>(&a.line).ok())
            .filter_map(|v| v["action"].as_str().map(str::to_string))
            .collect();
        let all = [
            "maintenance.create",
            "maintenance.start",
            "maintenance.delete",
            "maintenance.end",
        ];
        if all.iter().all(|a| actions.iter().any(|x| x == a)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{actions:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_survives_a_restart() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let (status, w) = app
        .send(
            Method::POST,
            "/api/maintenance",
            Some(json!({"type": "fast", "days": ["sun", "sat"], "at": "02:30", "duration": "2h", "timezone": "Europe/Berlin", "reason": "weekly"})),
        )
        .await;
    assert_eq!(status, 201, "{w}");
    let app = app.restart().await;
    let list = app.get_json("/api/maintenance").await;
    assert_eq!(list["count"], 1, "{list}");
    let back = &list["windows"][0];
    assert_eq!(back["id"], w["id"]);
    assert_eq!(back["type"], "fast");
    assert_eq!(back["days"], json!(["sat", "sun"]));
    assert_eq!((&back["at"], &back["duration"]), (&json!("02:30"), &json!("2h")));
    assert_eq!(back["timezone"], "Europe/Berlin");
    assert_eq!(back["covers"], json!(["x"]));
    app.stop().await;
}

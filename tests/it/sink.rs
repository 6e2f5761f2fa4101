//! The event sink on the running appliance: what the engine, the API and
//! the operator ship to a real receiver on loopback, the sink settings API
//! (secrets write-only, live apply, stored across restarts), the test event,
//! the sink metrics, and change events that outlive a restart.

use crate::common;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use common::TestApp;
use pollster::config::SinkConfig;
use pollster::fleet::Behaviour;
use pollster::model::{GroupDef, TypeDef};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Records every event it accepts (and the Authorization header of each
/// request); answers 200, or 503 without recording while `down`.
#[derive(Clone, Default)]
struct Receiver {
    events: Arc<Mutex<Vec<Value>>>,
    auth: Arc<Mutex<Vec<String>>>,
    down: Arc<AtomicBool>,
    /// Events refused while down.
    refused: Arc<Mutex<Vec<Value>>>,
}

async fn ingest(State(r): State<Receiver>, headers: HeaderMap, body: String) -> StatusCode {
    if r.down.load(Ordering::SeqCst) {
        let mut refused = r.refused.lock().expect("lock");
        refused.extend(body.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()));
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    if let Some(a) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        r.auth.lock().expect("lock").push(a.to_string());
    }
    let mut events = r.events.lock().expect("lock");
    for line in body.lines().filter(|l| !l.is_empty()) {
        events.push(serde_json::from_str(line).expect("each line is JSON"));
    }
    StatusCode::OK
}

async fn start_receiver() -> (Receiver, String) {
    let r = Receiver::default();
    let app = axum::Router::new()
        .route("/ingest", axum::routing::post(ingest))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/ingest", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (r, url)
}

impl Receiver {
    fn events(&self) -> Vec<Value> {
        self.events.lock().expect("lock").clone()
    }

    /// Wait until an event matching `pred` arrived.
    async fn wait(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            if let Some(e) = self.events().into_iter().find(|e| pred(e)) {
                return e;
            }
            if start.elapsed() > Duration::from_secs(10) {
                panic!("no {what} event; received: {:#?}", self.events());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn sink(url: &str) -> SinkConfig {
    let mut s = SinkConfig::new(url);
    s.buffering = Duration::from_millis(50);
    s.headers.insert("Authorization".into(), "Bearer s3cret-token".into());
    s
}

#[tokio::test]
async fn the_engine_and_the_operator_ship_their_events() {
    let (rx, url) = start_receiver().await;
    let app = TestApp::spawn_with(
        vec![("ok", Behaviour::Changing), ("locked", Behaviour::Unauthorized)],
        &BTreeMap::new(),
        |c| {
            c.sink = Some(sink(&url));
            let mut fwd = GroupDef::new("state", "", 1, Duration::from_millis(100));
            fwd.forward = true;
            c.types.push(TypeDef {
                name: "fwd".into(),
                groups: vec![fwd],
            });
            let mut i = common::instance("ok-fwd", "fwd", c.instances[0].url.clone());
            i.labels.insert("role".into(), "forwarded".into());
            c.instances.push(i);
        },
    )
    .await;
    let poll = rx
        .wait("poll success", |e| {
            e["kind"] == "poll" && e["instance"] == "ok" && e["result"] == "success"
        })
        .await;
    for field in ["time", "type", "group", "duration_ms", "status", "changed"] {
        assert!(!poll[field].is_null(), "{field} in {poll}");
    }
    assert!(
        poll.get("body").is_none(),
        "no body unless the group forwards it: {poll}"
    );
    let fwd = rx
        .wait("a forwarded body", |e| e["kind"] == "poll" && e["instance"] == "ok-fwd")
        .await;
    assert!(fwd["body"].is_object(), "the forward group's body is shipped: {fwd}");
    let failed = rx
        .wait("poll error", |e| e["kind"] == "poll" && e["instance"] == "locked")
        .await;
    assert_eq!(failed["result"], "error");
    assert_eq!(failed["status"], 401);
    assert_eq!(failed["error"]["category"], "permanent");
    let entered = rx
        .wait("dead-letter entry", |e| {
            e["kind"] == "dead_letter" && e["instance"] == "locked" && e["action"] == "entered"
        })
        .await;
    assert_eq!(entered["reason"], "permanent_failure");
    rx.wait("breaker open", |e| {
        e["kind"] == "breaker" && e["instance"] == "locked" && e["to"] == "open"
    })
    .await;
    // Secrets travel, but only in the header.
    assert!(
        rx.auth.lock().expect("lock").iter().all(|a| a == "Bearer s3cret-token"),
        "the configured header is sent"
    );

    // Operator actions and settings changes, with who did them.
    let (status, _) = app
        .send(
            reqwest::Method::POST,
            "/api/monitoring/scheduler/dead-letter/locked/probe/retry",
            None,
        )
        .await;
    assert_eq!(status, 202);
    let retried = rx
        .wait("operator retry", |e| {
            e["kind"] == "dead_letter" && e["action"] == "retried"
        })
        .await;
    assert!(
        retried["actor"].as_str().is_some_and(|a| a.starts_with("token:")),
        "{retried}"
    );
    let (status, _) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"failure": {"breaker_threshold": 4}})),
        )
        .await;
    assert_eq!(status, 200);
    let changed = rx
        .wait("settings change", |e| {
            e["kind"] == "settings" && e["section"] == "monitoring"
        })
        .await;
    assert_eq!(changed["change"]["failure"]["breaker_threshold"], 4);
    let (status, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "added", "url": app.fleet.url("ok")})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    rx.wait("instance added", |e| {
        e["kind"] == "operator" && e["action"] == "instance.create" && e["target"] == "added"
    })
    .await;

    // Every line carried a time and a kind; no event arrived twice.
    let all = rx.events();
    assert!(all.iter().all(|e| e["time"].is_string() && e["kind"].is_string()));
    let lines: Vec<String> = all.iter().map(|e| e.to_string()).collect();
    let unique: std::collections::BTreeSet<&String> = lines.iter().collect();
    assert_eq!(unique.len(), lines.len(), "no duplicates");

    let metrics = app.metrics().await;
    let sent: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("pollster_sink_events_total{outcome=\"sent\"} "))
        .and_then(|v| v.parse().ok())
        .expect("sent counter");
    assert!(sent >= all.len() as f64 - 1.0, "sent {sent}, received {}", all.len());
    assert!(metrics.contains("pollster_sink_queue_depth "));
    app.stop().await;
}

#[tokio::test]
async fn sink_settings_keep_secrets_apply_at_once_and_survive_a_restart() {
    let (rx, url) = start_receiver().await;
    let (rx2, url2) = start_receiver().await;
    let app = TestApp::spawn_with(vec![("ok", Behaviour::Healthy)], &BTreeMap::new(), |c| {
        c.sink = Some(sink(&url));
    })
    .await;
    let doc = app.get_json("/api/settings/sink").await;
    assert_eq!(doc["sink"]["url"], url.as_str());
    assert_eq!(doc["sink"]["headers"]["Authorization"], "(hidden)", "{doc}");
    assert!(!doc.to_string().contains("s3cret"), "secrets are write-only: {doc}");
    assert_eq!(doc["status"]["enabled"], true);

    // A bad value is refused, naming the field; nothing changes.
    let (status, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/sink",
            Some(json!({"batch_size": 0})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "batch_size");

    // Moving to another receiver, echoing the hidden header back: the
    // stored value is not sent to a new host, so it must be given again.
    let mut change = doc["sink"].clone();
    change["url"] = json!(url2);
    let (status, body) = app
        .send(reqwest::Method::PUT, "/api/settings/sink", Some(change.clone()))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "headers.Authorization");
    change["headers"]["Authorization"] = json!("Bearer s3cret-token");
    let (status, body) = app.send(reqwest::Method::PUT, "/api/settings/sink", Some(change)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app.send(reqwest::Method::POST, "/api/settings/sink/test", None).await;
    assert_eq!(status, 200, "{body}");
    let test = rx2.wait("test event", |e| e["kind"] == "test").await;
    assert!(test["actor"].as_str().is_some_and(|a| a.starts_with("token:")));
    rx2.wait("polls at the new receiver", |e| e["kind"] == "poll").await;
    assert_eq!(
        rx2.auth.lock().expect("lock").first().map(String::as_str),
        Some("Bearer s3cret-token"),
        "the stored header value was kept"
    );
    let before = rx.events().len();

    // Turned off: nothing more is shipped, and it stays off after a restart
    // although the config file names a sink.
    let (status, body) = app
        .send(reqwest::Method::PUT, "/api/settings/sink", Some(Value::Null))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sink"], Value::Null);
    assert_eq!(body["status"]["enabled"], false);
    let (status, body) = app.send(reqwest::Method::POST, "/api/settings/sink/test", None).await;
    assert_eq!(status, 409, "with no sink there is nothing to test: {body}");
    assert_eq!(body["error"]["code"], "sink_disabled");
    let app = app.restart().await;
    let doc = app.get_json("/api/settings/sink").await;
    assert_eq!(doc["sink"], Value::Null, "{doc}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.events().len(), before, "the first receiver gets nothing new");
    app.stop().await;
}

#[tokio::test]
async fn an_operator_action_reaches_a_receiver_that_was_down_across_a_restart() {
    let (rx, url) = start_receiver().await;
    rx.down.store(true, Ordering::SeqCst);
    let app = TestApp::spawn_with(vec![("ok", Behaviour::Healthy)], &BTreeMap::new(), |c| {
        c.sink = Some(sink(&url));
    })
    .await;
    let (status, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "added-while-down", "url": app.fleet.url("ok")})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let is_action = |e: &Value| e["kind"] == "operator" && e["target"] == "added-while-down";
    // The receiver is asked, refuses, and the event stays stored.
    let start = Instant::now();
    let refused_id = loop {
        let seen = rx.refused.lock().expect("lock").iter().find(|e| is_action(e)).cloned();
        if let Some(e) = seen {
            break e["id"].as_str().expect("a change event has an id").to_string();
        }
        // A bound on waiting, not a timing claim: the retry schedule's
        // backoff after the refused poll batches can pass 10 s on a busy
        // machine.
        assert!(start.elapsed() < Duration::from_secs(30), "the sink never tried");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let metrics = app.metrics().await;
    assert!(
        metrics.lines().any(|l| l
            .strip_prefix("pollster_sink_outbox_depth ")
            .is_some_and(|v| v.parse::<f64>().is_ok_and(|v| v >= 1.0))),
        "the backlog is shown"
    );

    // Stopped (its last flush fails too) and started again on the same data.
    let app = app.restart().await;
    rx.down.store(false, Ordering::SeqCst);
    let got = rx.wait("the operator action after the restart", is_action).await;
    assert_eq!(got["id"], refused_id.as_str(), "the same id as before the restart");
    assert_eq!(got["action"], "instance.create");
    assert!(got["actor"].as_str().is_some_and(|a| a.starts_with("token:")), "{got}");
    // Change events all carry an id; poll events need none.
    let events = rx.events();
    for e in events.iter().filter(|e| e["kind"] != "poll" && e["kind"] != "test") {
        assert!(e["id"].is_string(), "a change event without an id: {e}");
    }
    // Delivered, so no longer stored: nothing is sent twice once accepted.
    let start = Instant::now();
    loop {
        let metrics = app.metrics().await;
        if metrics.lines().any(|l| l == "pollster_sink_outbox_depth 0") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the outbox never emptied:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let copies = rx.events().iter().filter(|e| is_action(e)).count();
    assert_eq!(copies, 1, "delivered once when every attempt was answered");
    app.stop().await;
}

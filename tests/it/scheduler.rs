//! The running appliance against simulated targets on loopback, through its
//! API: the health JSON's shape, operator actions, paging, live settings and
//! a graceful shutdown. The failure rules themselves (backoff, breaker, dead
//! letter, recheck) are proved on paused time in `engine`.

use crate::common;

use common::*;
use pollster::fleet::Behaviour;
use reqwest::Method;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_has_the_documented_shape() {
    let app = TestApp::spawn(vec![("ok-1", Behaviour::Healthy), ("ok-2", Behaviour::Changing)]).await;
    let h = app
        .wait_health(WAIT, "both tasks to succeed", |h| {
            h["staleness"]
                .as_array()
                .is_some_and(|s| s.len() == 2 && s.iter().all(|t| t["lastSuccess"].is_string()))
        })
        .await;
    for key in ["updatedAt", "enabled", "queue", "deadLetter", "breakers", "staleness"] {
        assert!(h.get(key).is_some(), "missing {key}: {h:#}");
    }
    assert!(h["updatedAt"].as_str().is_some_and(|s| s.ends_with('Z')));
    assert_eq!(h["enabled"], true);
    assert!(h["queue"]["depth"].as_u64().is_some());
    assert!(h["queue"]["dueWithinSeconds"].as_u64().is_some());
    assert_eq!(
        h["queue"]["perType"]["fast"].as_u64().unwrap_or(0) + h["queue"]["inFlight"].as_u64().unwrap_or(0),
        2
    );
    assert_eq!(h["deadLetter"]["count"], 0);
    assert_eq!(h["breakers"], json!([]));
    let s = staleness(&h, "ok-1").expect("staleness entry");
    assert_eq!(s["type"], "fast");
    assert!(s["score"].as_f64().is_some_and(|x| (0.0..=1.0).contains(&x)));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_retry_and_discard() {
    let env = BTreeMap::new();
    let app = TestApp::spawn_with(
        vec![("a", Behaviour::Unauthorized), ("b", Behaviour::Unauthorized)],
        &env,
        |c| c.monitoring_file.failure.dead_letter_recheck = std::time::Duration::from_secs(3600),
    )
    .await;
    app.wait_health(WAIT, "two dead-letter entries", |h| h["deadLetter"]["count"] == 2)
        .await;

    // Unknown task, and a task that is not dead-lettered.
    let (s, body) = app
        .send(
            Method::POST,
            "/api/monitoring/scheduler/dead-letter/nope/probe/retry",
            None,
        )
        .await;
    assert_eq!(s, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");

    // Retry after the target is fixed: it leaves the queue right away,
    // although its recheck is an hour away.
    app.fleet.set("a", Behaviour::Healthy);
    let (s, body) = app
        .send(
            Method::POST,
            "/api/monitoring/scheduler/dead-letter/a/probe/retry",
            None,
        )
        .await;
    assert_eq!(s, 202, "{body}");
    app.wait_health(WAIT, "a to recover", |h| {
        dead_letter(h, "a").is_none() && h["deadLetter"]["count"] == 1
    })
    .await;
    let (s, _) = app
        .send(
            Method::POST,
            "/api/monitoring/scheduler/dead-letter/a/probe/retry",
            None,
        )
        .await;
    assert_eq!(s, 409, "a is no longer dead-lettered");

    // Discard: out of the queue, and not polled any more.
    let (s, body) = app
        .send(Method::DELETE, "/api/monitoring/scheduler/dead-letter/b/probe", None)
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["disabled"], true);
    let h = app.health().await;
    assert_eq!(h["deadLetter"]["count"], 0);
    assert!(staleness(&h, "b").is_none(), "a discarded task is not reported");
    // That it is not polled is proved on paused time
    // (engine::a_discarded_task_is_not_polled_until_it_is_enabled_again).
    app.fleet.set("b", Behaviour::Healthy);
    let list = app.get_json("/api/monitoring/scheduler/dead-letter").await;
    assert_eq!(list["count"], 0);

    // Enabling it again polls it at once.
    let (s, _) = app
        .send(Method::POST, "/api/monitoring/scheduler/tasks/b/probe/enable", None)
        .await;
    assert_eq!(s, 200);
    app.wait_health(WAIT, "b to succeed", |h| {
        staleness(h, "b").is_some_and(|s| s["lastSuccess"].is_string())
    })
    .await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_list_paginates() {
    let app = TestApp::spawn(vec![
        ("d1", Behaviour::NotFound),
        ("d2", Behaviour::NotFound),
        ("d3", Behaviour::NotFound),
    ])
    .await;
    app.wait_health(WAIT, "three entries", |h| h["deadLetter"]["count"] == 3)
        .await;
    let p1 = app.get_json("/api/monitoring/scheduler/dead-letter?per_page=2").await;
    let p2 = app
        .get_json("/api/monitoring/scheduler/dead-letter?per_page=2&page=2")
        .await;
    assert_eq!(
        (p1["count"].as_u64(), p1["tasks"].as_array().map(|a| a.len())),
        (Some(3), Some(2))
    );
    assert_eq!(p2["tasks"].as_array().map(|a| a.len()), Some(1));
    let (s, body) = app
        .send(Method::GET, "/api/monitoring/scheduler/dead-letter?per_page=0", None)
        .await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "per_page");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_apply_at_once_and_env_locks_fields() {
    let env = BTreeMap::from([("POLLSTER_SCHEDULER_WORKERS".to_string(), "4".to_string())]);
    let app = TestApp::spawn_with(vec![("idle", Behaviour::Healthy)], &env, |_| {}).await;
    let s = app.get_json("/api/settings/monitoring").await;
    assert_eq!(s["adaptive"]["enabled"], true);
    assert_eq!(s["adaptive"]["base_interval"], "200ms");
    assert_eq!(s["scheduler"]["workers"], 4);
    assert_eq!(s["locked"]["scheduler.workers"], "POLLSTER_SCHEDULER_WORKERS");

    let (st, body) = app
        .send(
            Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"scheduler": {"workers": 8}})),
        )
        .await;
    assert_eq!(st, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("POLLSTER_SCHEDULER_WORKERS"))
    );

    let (st, body) = app
        .send(
            Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"adaptive": {"min_interval": "5s"}})),
        )
        .await;
    assert_eq!(st, 422, "{body}");
    assert_eq!(body["error"]["field"], "adaptive.min_interval");

    // Nothing half-saved: a bad field next to a good one changes neither.
    let (st, _) = app
        .send(
            Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"adaptive": {"enabled": false}, "failure": {"backoff_initial": "later"}})),
        )
        .await;
    assert_eq!(st, 422);
    assert_eq!(app.health().await["enabled"], true);

    let (st, body) = app
        .send(
            Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"adaptive": {"enabled": false}})),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["adaptive"]["enabled"], false);
    assert_eq!(app.health().await["enabled"], false, "applied without a restart");

    // Committed: a restart on the same data directory keeps it.
    let app = app.restart().await;
    let s = app.get_json("/api/settings/monitoring").await;
    assert_eq!(s["adaptive"]["enabled"], false);
    assert_eq!(app.health().await["enabled"], false);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_flushes_state() {
    let env = BTreeMap::new();
    // A flush window far longer than the test: only the shutdown flush can
    // have written the task's state.
    let app = TestApp::spawn_with(vec![("fresh", Behaviour::Healthy)], &env, |c| {
        c.monitoring_file.scheduler.state_flush_interval = Duration::from_secs(60)
    })
    .await;
    app.wait_health(WAIT, "a success", |h| {
        staleness(h, "fresh").is_some_and(|s| s["lastSuccess"].is_string())
    })
    .await;
    let dir = app.data_dir.path().to_path_buf();
    let keep = app.keep_data_dir().await;
    let store = pollster::store::Store::open(&dir).expect("database is free after shutdown");
    let (tasks, bad) = store.load_tasks().expect("load");
    assert!(bad.is_empty());
    let (_, rec) = tasks.iter().find(|(k, _)| &*k.instance == "fresh").expect("task row");
    assert!(rec.last_success.is_some(), "{rec:?}");
    assert!(rec.digest.is_some());
    drop(keep);
}

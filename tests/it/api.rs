//! The JSON API: authentication on every route, instance validation, the
//! OpenAPI document, backups, and the metrics listener.

use crate::common;

use common::*;
use pollster::fleet::Behaviour;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

/// A metric line to find: name, some of its labels, and maybe its value.
type Expected<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<&'a str>);

/// Walk the OpenAPI document: every documented operation, and every route
/// the router serves, refuses a request without a token (or with a bad one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_route_refuses_a_request_without_a_token() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let doc = app.get_json("/api/openapi.json").await;
    let paths = doc["paths"].as_object().expect("paths");
    let mut checked = 0;
    for (path, item) in paths {
        // Pages (`/status`) redirect a browser to the login page; asked for
        // JSON they answer 401 like the API.
        let path = &if path.starts_with("/api") {
            path.clone()
        } else {
            format!("{path}?format=json")
        };
        let concrete = path
            .replace("{instance}", "x")
            .replace("{group}", "probe")
            .replace("{name}", "x");
        for (method, _) in item
            .as_object()
            .expect("path item")
            .iter()
            .filter(|(m, _)| *m != "parameters")
        {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            for auth in [
                None,
                Some("Bearer pst_0000000000000000000000000000000000000000"),
                Some("Basic eDp5"),
            ] {
                let mut req = app.client.request(m.clone(), app.url(&concrete));
                if let Some(a) = auth {
                    req = req.header("authorization", a);
                }
                let r = req.json(&json!({})).send().await.expect("request");
                assert_eq!(r.status().as_u16(), 401, "{method} {path} with {auth:?}");
                let body: Value = r.json().await.expect("json error");
                assert_eq!(body["error"]["code"], "unauthorized");
            }
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} operations documented");
    // Routes that are not documented are refused too, not leaked as 404s.
    let r = app
        .client
        .get(app.url("/api/does-not-exist"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 401);
    // Liveness and readiness need no token.
    assert_eq!(
        app.client
            .get(app.url("/healthz"))
            .send()
            .await
            .expect("req")
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        app.client
            .get(app.url("/readyz"))
            .send()
            .await
            .expect("req")
            .status()
            .as_u16(),
        200
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_crud_with_validation_naming_the_field() {
    let app = TestApp::spawn_with(
        vec![("provisioned-1", Behaviour::Healthy), ("added", Behaviour::Changing)],
        &Default::default(),
        |c| c.instances.retain(|i| i.name != "added"),
    )
    .await;
    let url = app.fleet.url("added");

    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "bad name!", "type": "fast", "url": url})),
        )
        .await;
    assert_eq!(s, 422, "{body}");
    assert_eq!(body["error"]["field"], "name");

    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "added", "type": "fast", "url": "ftp://x"})),
        )
        .await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "url");

    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "added", "type": "nosuch", "url": url})),
        )
        .await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "type");

    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "added", "type": "fast", "url": url, "timeout": "soon"})),
        )
        .await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "timeout");

    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "added", "type": "fast", "url": url, "colour": 1})),
        )
        .await;
    assert_eq!(s, 422, "unknown fields are refused: {body}");

    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "added", "type": "fast", "url": url, "timeout": "2s",
                "auth": {"kind": "bearer", "token": "very-secret"}})),
        )
        .await;
    assert_eq!(s, 201, "{body}");
    assert_eq!(body["auth"], json!({"kind": "bearer"}), "secrets are write-only");
    assert!(!body.to_string().contains("very-secret"));

    let (s, _) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "added", "type": "fast", "url": url})),
        )
        .await;
    assert_eq!(s, 409, "duplicate name");
    let (s, _) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "provisioned-1", "type": "fast", "url": url})),
        )
        .await;
    assert_eq!(s, 409, "duplicate of a provisioned name");

    // It is polled right away.
    app.wait_health(WAIT, "added instance polled", |h| {
        staleness(h, "added").is_some_and(|s| s["lastSuccess"].is_string())
    })
    .await;

    let list = app.get_json("/api/instances").await;
    assert_eq!(list["count"], 2);
    let one = app.get_json("/api/instances/provisioned-1").await;
    assert_eq!(one["provisioned"], true);

    // Provisioned instances are read-only here.
    let (s, body) = app
        .send(
            Method::PUT,
            "/api/instances/provisioned-1",
            Some(json!({"type": "fast", "url": url})),
        )
        .await;
    assert_eq!((s, body["error"]["code"].as_str()), (409, Some("provisioned")));
    let (s, _) = app.send(Method::DELETE, "/api/instances/provisioned-1", None).await;
    assert_eq!(s, 409);

    // PUT without auth keeps the stored credentials; a renamed body is refused.
    let (s, body) = app
        .send(
            Method::PUT,
            "/api/instances/added",
            Some(json!({"type": "fast", "url": url, "timeout": "3s"})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["timeout"], "3s");
    assert_eq!(body["auth"]["kind"], "bearer");
    let (s, body) = app
        .send(
            Method::PUT,
            "/api/instances/added",
            Some(json!({"name": "other", "type": "fast", "url": url})),
        )
        .await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("name")));

    let (s, body) = app.send(Method::POST, "/api/instances/added/test", None).await;
    assert_eq!(s, 200);
    assert_eq!(body["results"][0]["ok"], true, "{body}");

    let (s, _) = app.send(Method::DELETE, "/api/instances/added", None).await;
    assert_eq!(s, 204);
    let (s, _) = app.send(Method::GET, "/api/instances/added", None).await;
    assert_eq!(s, 404);
    let h = app.health().await;
    assert!(staleness(&h, "added").is_none(), "its tasks are gone");

    let (s, body) = app
        .send(Method::POST, "/api/instances", Some(json!("not an object")))
        .await;
    assert_eq!(s, 422, "{body}");
    let r = app
        .client
        .post(app.url("/api/instances"))
        .bearer_auth(&app.token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 400);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_is_a_consistent_openable_copy_encrypted_with_the_passphrase() {
    const PASS: &str = "correct horse battery";
    let app = TestApp::spawn(vec![("b", Behaviour::Unauthorized)]).await;
    app.wait_health(WAIT, "dead-letter entry", |h| h["deadLetter"]["count"] == 1)
        .await;
    let post = |pass: Value| {
        app.client
            .post(app.url("/api/admin/backup"))
            .bearer_auth(&app.token)
            .json(&pass)
            .send()
    };
    // GET is gone; a short or missing passphrase names the field.
    assert_eq!(app.get("/api/admin/backup").await.status().as_u16(), 405);
    for body in [json!({"passphrase": "eleven char"}), json!({})] {
        let r = post(body.clone()).await.expect("request");
        assert_eq!(r.status().as_u16(), 422, "{body}");
        let err: Value = r.json().await.expect("json");
        assert_eq!(err["error"]["field"], "passphrase", "{err}");
        assert!(
            !err.to_string().contains("eleven char"),
            "the passphrase is never echoed: {err}"
        );
    }
    let r = post(json!({"passphrase": PASS})).await.expect("request");
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.headers()
            .get("content-disposition")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains(".redb.age"))
    );
    let file = r.bytes().await.expect("body");
    assert!(file.starts_with(b"age-encryption.org/v1\n"));
    let bytes = pollster::secrets::backup::decrypt(&file, PASS).expect("opens with the passphrase");
    assert!(pollster::secrets::backup::decrypt(&file, "not the passphrase").is_err());
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pollster.redb"), &bytes).expect("write");
    let copy = pollster::store::Store::open(dir.path()).expect("backup opens");
    let (tasks, bad) = copy.load_tasks().expect("tasks");
    assert!(bad.is_empty());
    assert!(
        tasks
            .iter()
            .any(|(k, r)| &*k.instance == "b" && r.dead_letter.is_some()),
        "{tasks:?}"
    );
    assert!(!copy.list_tokens().expect("tokens").is_empty());
    drop(copy);

    // Backups asked for at the same moment each get a whole copy.
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let req = app
                .client
                .post(app.url("/api/admin/backup"))
                .bearer_auth(&app.token)
                .json(&json!({"passphrase": PASS}));
            tokio::spawn(async move { req.send().await.expect("request") })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = h.await.expect("task");
        assert_eq!(r.status().as_u16(), 200, "backup {i}");
        let file = r.bytes().await.expect("body");
        let bytes = pollster::secrets::backup::decrypt(&file, PASS).expect("decrypts");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("pollster.redb"), &bytes).expect("write");
        let copy = pollster::store::Store::open(dir.path()).expect("backup opens");
        assert!(!copy.list_tokens().expect("tokens").is_empty(), "backup {i}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_have_the_spec_names_and_pass_promtool() {
    let app = TestApp::spawn_with(
        vec![("m-ok", Behaviour::Healthy), ("m-bad", Behaviour::Unauthorized)],
        &std::collections::BTreeMap::new(),
        |c| {
            c.budgets.push(pollster::model::BudgetConfig {
                name: "p".into(),
                requests_per_second: 100.0,
                shared_fraction: 1.0,
                burst: 10,
            });
            c.instances[0].budget = Some("p".into());
            c.instances[0].labels.insert("critical".into(), "true".into());
        },
    )
    .await;
    app.wait_health(WAIT, "a success and a dead-letter entry", |h| {
        h["deadLetter"]["count"] == 1 && staleness(h, "m-ok").is_some_and(|s| s["lastSuccess"].is_string())
    })
    .await;
    let body = app.metrics().await;
    // (name, labels, value) — label order is the encoder's, so match by set.
    let expect: &[Expected] = &[
        (
            "pollster_monitor_poll_total",
            &[
                ("instance_type", "fast"),
                ("instance", "m-ok"),
                ("group", "probe"),
                ("result", "success"),
            ],
            None,
        ),
        (
            "pollster_monitor_poll_total",
            &[("instance", "m-bad"), ("result", "error")],
            Some("1"),
        ),
        (
            "pollster_monitor_poll_duration_seconds_bucket",
            &[
                ("instance_type", "fast"),
                ("instance", "m-ok"),
                ("group", "probe"),
                ("le", "30"),
            ],
            None,
        ),
        (
            "pollster_monitor_poll_duration_seconds_count",
            &[("instance", "m-bad")],
            Some("1"),
        ),
        (
            "pollster_monitor_poll_staleness_seconds",
            &[("instance_type", "fast"), ("instance", "m-ok"), ("group", "probe")],
            None,
        ),
        ("pollster_monitor_poll_queue_depth", &[], None),
        (
            "pollster_monitor_poll_errors_total",
            &[("instance", "m-bad"), ("category", "permanent")],
            Some("1"),
        ),
        (
            "pollster_monitor_poll_last_success_timestamp_seconds",
            &[("instance", "m-ok"), ("group", "probe")],
            None,
        ),
        ("pollster_monitor_dead_letter_tasks", &[], Some("1")),
        (
            "pollster_monitor_breaker_state",
            &[("instance", "m-bad"), ("state", "open")],
            Some("1"),
        ),
        (
            "pollster_monitor_breaker_state",
            &[("instance", "m-ok"), ("state", "closed")],
            Some("1"),
        ),
        ("pollster_instance_cadence_seconds", &[("instance", "m-ok")], None),
        (
            "pollster_scheduler_interval_seconds",
            &[("pool", "p"), ("group", "fast/probe")],
            Some("0.1"),
        ),
        (
            "pollster_scheduler_stretch_factor",
            &[("pool", "p"), ("group", "fast/probe")],
            Some("1"),
        ),
        // The priority 1 probe (floor 0.1 s) runs at the 200 ms adaptive
        // base of the test settings: the plan counts it as it runs.
        ("pollster_scheduler_estimated_demand_rps", &[("pool", "p")], Some("5")),
        ("pollster_scheduler_budget_rps", &[("pool", "p")], Some("100")),
        ("pollster_scheduler_effective_budget_rps", &[("pool", "p")], Some("100")),
        (
            "pollster_scheduler_budget_utilization_ratio",
            &[("pool", "p")],
            Some("0.05"),
        ),
        ("pollster_scheduler_over_budget", &[("pool", "p")], Some("0")),
        ("pollster_scheduler_budget_wait_seconds_count", &[("pool", "p")], None),
        (
            "pollster_instance_info",
            &[
                ("instance", "m-ok"),
                ("instance_type", "fast"),
                ("pool", "p"),
                ("critical", "true"),
            ],
            Some("1"),
        ),
        (
            "pollster_instance_info",
            &[("instance", "m-bad"), ("pool", ""), ("critical", "false")],
            Some("1"),
        ),
        ("process_resident_memory_bytes", &[], None),
    ];
    for (name, labels, value) in expect {
        let found = body.lines().any(|line| {
            let Some(rest) = line.strip_prefix(name) else {
                return false;
            };
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return false;
            }
            labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
                && value.is_none_or(|v| rest.ends_with(&format!(" {v}")))
        });
        assert!(found, "missing {name} {labels:?} {value:?} in\n{body}");
    }
    for family in ["pollster_monitor_poll_inflight", "pollster_monitor_poll_queue_depth"] {
        assert!(body.contains(&format!("# HELP {family} ")), "no help for {family}");
    }
    // The metrics are not on the API listener.
    let r = app.client.get(app.url("/metrics")).send().await.expect("req");
    let text = r.text().await.unwrap_or_default();
    assert!(!text.contains("# HELP"), "metrics leaked on the API listener");

    promtool::check_metrics(&body);
    app.stop().await;
}

/// `[metrics] per_instance_histograms = false`: the duration histogram is
/// one series per instance type and group, and every other per-task
/// family keeps its `instance` label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_per_instance_histograms_only_the_duration_histogram_loses_instance() {
    let app = TestApp::spawn_with(
        vec![("h-1", Behaviour::Healthy), ("h-2", Behaviour::Healthy)],
        &std::collections::BTreeMap::new(),
        |c| c.metrics.per_instance_histograms = false,
    )
    .await;
    app.wait_health(WAIT, "a success of each", |h| {
        ["h-1", "h-2"]
            .iter()
            .all(|i| staleness(h, i).is_some_and(|s| s["lastSuccess"].is_string()))
    })
    .await;
    let body = app.metrics().await;
    let durations: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("pollster_monitor_poll_duration_seconds"))
        .collect();
    assert!(!durations.is_empty(), "no duration histogram in\n{body}");
    assert!(durations.iter().all(|l| !l.contains("instance=\"")), "{durations:#?}");
    let count = durations
        .iter()
        .find(|l| l.starts_with("pollster_monitor_poll_duration_seconds_count{"))
        .expect("a count");
    assert!(count.contains("group=\"probe\""), "{count}");
    let n: u64 = count.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number");
    assert!(n >= 2, "both instances' polls are in the one series: {count}");
    for family in [
        "pollster_monitor_poll_total{",
        "pollster_monitor_poll_staleness_seconds{",
        "pollster_monitor_poll_last_success_timestamp_seconds{",
        "pollster_monitor_breaker_state{",
    ] {
        for instance in ["h-1", "h-2"] {
            assert!(
                body.lines()
                    .any(|l| l.starts_with(family) && l.contains(&format!("instance=\"{instance}\""))),
                "{family} of {instance} missing in\n{body}"
            );
        }
    }
    promtool::check_metrics(&body);
    app.stop().await;
}

/// A scrape of more than one chunk is streamed (no `Content-Length`) and
/// arrives whole: every family once, every instance's series, a valid text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_of_many_chunks_is_streamed_and_arrives_whole() {
    let names: Vec<String> = (0..60).map(|i| format!("s-{i:02}")).collect();
    let app = TestApp::spawn(names.iter().map(|n| (n.as_str(), Behaviour::Healthy)).collect()).await;
    app.wait_health(WAIT, "a success of each", |h| {
        names
            .iter()
            .all(|i| staleness(h, i).is_some_and(|s| s["lastSuccess"].is_string()))
    })
    .await;
    let r = reqwest::get(format!("http://{}/metrics", app.metrics_addr))
        .await
        .expect("scrape");
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("content-length").is_none(), "{:?}", r.headers());
    assert_eq!(
        r.headers().get("transfer-encoding").and_then(|v| v.to_str().ok()),
        Some("chunked")
    );
    let body = r.text().await.expect("the whole body");
    assert!(
        body.len() > 2 * pollster::metrics::CHUNK,
        "{} bytes: not several chunks",
        body.len()
    );
    assert!(body.ends_with('\n'));
    for name in &names {
        let count = format!("pollster_monitor_poll_duration_seconds_count{{instance_type=\"fast\",instance=\"{name}\"");
        assert!(body.contains(&count), "{count} missing");
    }
    let mut families: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .collect();
    let listed = families.len();
    families.dedup();
    assert_eq!(families.len(), listed, "a family twice");
    assert!(families.windows(2).all(|w| w[0] < w[1]), "families in name order");
    promtool::check_metrics(&body);
    app.stop().await;
}

/// GET with the test token, answering (status, `Allow`, parsed JSON body).
async fn raw(app: &TestApp, method: Method, path: &str) -> (u16, Option<String>, Value) {
    let r = app
        .client
        .request(method, app.url(path))
        .bearer_auth(&app.token)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let allow = r
        .headers()
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = r.text().await.unwrap_or_default();
    (status, allow, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Bad input of every kind gets a 4xx JSON error naming the field, never a
/// 5xx or a plain-text answer (found by the schemathesis run in CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_4xx_json_error_naming_the_field() {
    let app = TestApp::spawn_with(vec![("q", Behaviour::Healthy)], &Default::default(), |c| {
        c.monitoring_file.scheduler.workers = 7
    })
    .await;
    let dl = "/api/monitoring/scheduler/dead-letter";
    for (query, status, field) in [
        ("per_page=abc", 422, "per_page"),
        ("per_page=null", 422, "per_page"),
        ("page=0", 422, "page"),
        ("page=1000001", 422, "page"),
        ("page=105962369393604813635190784", 422, "page"),
        ("per_page=1&per_page=2", 400, "per_page"),
    ] {
        let (s, _, body) = raw(&app, Method::GET, &format!("{dl}?{query}")).await;
        assert_eq!(
            (s, body["error"]["field"].as_str()),
            (status, Some(field)),
            "{query}: {body}"
        );
    }
    // The last page there can be is fine, and empty.
    let (s, _, body) = raw(&app, Method::GET, &format!("{dl}?page=1000000&per_page=500")).await;
    assert_eq!((s, body["tasks"].as_array().map(Vec::len)), (200, Some(0)), "{body}");
    let (s, _, body) = raw(&app, Method::GET, "/api/instances?q=a&q=b").await;
    assert_eq!((s, body["error"]["field"].as_str()), (400, Some("q")), "{body}");
    let (s, _, body) = raw(&app, Method::GET, "/status?format=xml").await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("format")), "{body}");
    let (s, _, body) = raw(&app, Method::GET, "/status?format=json").await;
    assert_eq!(s, 200);
    assert!(body["pools"].is_array(), "{body}");

    // Credentials of kind none take no other field (serde would drop it).
    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "n", "type": "fast", "url": app.fleet.url("q"),
                "auth": {"kind": "none", "token": "x"}})),
        )
        .await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("auth")), "{body}");
    // A missing field is named, nested ones with their path.
    for (doc, field) in [
        (json!({"name": "n"}), "url"),
        (
            json!({"name": "n", "type": "fast", "url": app.fleet.url("q"), "auth": {"kind": "bearer"}}),
            "auth.token",
        ),
    ] {
        let (s, body) = app.send(Method::POST, "/api/instances", Some(doc.clone())).await;
        assert_eq!(
            (s, body["error"]["field"].as_str()),
            (422, Some(field)),
            "{doc}: {body}"
        );
    }
    // An array is not an instance (serde would read it as the fields in order).
    let (s, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!(["n", "fast", app.fleet.url("q")])),
        )
        .await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("")), "{body}");

    // Monitoring settings: a merge patch of known sections and fields only.
    for (patch, field) in [
        (json!({"": null}), ""),
        (json!({"scheduler": {"wokers": null}}), "scheduler.wokers"),
        (json!({"locked": [null]}), "locked"),
        (json!({"failure": []}), "failure"),
    ] {
        let (s, body) = app
            .send(Method::PUT, "/api/settings/monitoring", Some(patch.clone()))
            .await;
        assert_eq!(
            (s, body["error"]["field"].as_str()),
            (422, Some(field)),
            "{patch}: {body}"
        );
    }
    let (s, body) = app
        .send(
            Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"scheduler": {"workers": 3}})),
        )
        .await;
    assert_eq!((s, &body["scheduler"]["workers"]), (200, &json!(3)), "{body}");
    let (s, body) = app
        .send(
            Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"scheduler": {"workers": null}, "failure": null})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["scheduler"]["workers"], 7, "back to the config file's value");

    // The sink: turning it off takes no other field; `enabled` is a boolean.
    for (patch, field) in [
        (json!({"enabled": false, "url": {}}), "url"),
        (json!({"enabled": "no"}), "enabled"),
        (json!({"enabled": true}), "url"),
    ] {
        let (s, body) = app.send(Method::PUT, "/api/settings/sink", Some(patch.clone())).await;
        assert_eq!(
            (s, body["error"]["field"].as_str()),
            (422, Some(field)),
            "{patch}: {body}"
        );
    }
    // A test event: 409 with no sink; with one that cannot be reached the
    // test ran and says so (200), the server did not fail.
    let (s, body) = app.send(Method::POST, "/api/settings/sink/test", None).await;
    assert_eq!(
        (s, body["error"]["code"].as_str()),
        (409, Some("sink_disabled")),
        "{body}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nowhere = format!("http://{}/", closed.local_addr().expect("addr"));
    drop(closed);
    let (s, body) = app
        .send(Method::PUT, "/api/settings/sink", Some(json!({"url": nowhere})))
        .await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = app.send(Method::POST, "/api/settings/sink/test", None).await;
    assert_eq!((s, &body["ok"]), (200, &json!(false)), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");

    // A method a route does not serve is 405 with `Allow`, pages included.
    for (method, path) in [
        (Method::TRACE, "/status?format=json"),
        (Method::PATCH, "/status"),
        (Method::PATCH, "/api/instances"),
    ] {
        let (s, allow, _) = raw(&app, method.clone(), path).await;
        assert_eq!(s, 405, "{method} {path}");
        assert!(allow.is_some_and(|a| a.contains("GET")), "{method} {path}");
    }
    app.stop().await;
}

/// An enormous interval pushes a recheck past the year 9999: the API shows
/// the last second RFC 3339 can write instead of failing the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_past_the_year_9999_do_not_break_the_api() {
    let app = TestApp::spawn(vec![("far", Behaviour::Unauthorized)]).await;
    let (s, body) = app
        .send(
            Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"failure": {"dead_letter_recheck": "20000years"}})),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    // The entry is made (or, if it was made before the change, rechecked
    // once more) with the new recheck interval.
    let last = "9999-12-31T23:59:59Z";
    let h = app
        .wait_health(WAIT, "dead-letter entry rechecked in 20000 years", |h| {
            dead_letter(h, "far").is_some_and(|d| d["nextRun"] == last)
        })
        .await;
    assert_eq!(breaker(&h, "far").expect("open")["retryAt"], last, "{h}");
    let list = app.get_json("/api/monitoring/scheduler/dead-letter").await;
    assert_eq!(list["tasks"][0]["nextRun"], last, "{list}");
    app.stop().await;
}

/// The document and the router agree on every path: a method the document
/// does not list for a path is refused with 405, and `Allow` names exactly
/// the documented methods (and HEAD beside GET).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_method_the_router_serves() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let doc = app.get_json("/api/openapi.json").await;
    let paths = doc["paths"].as_object().expect("paths");
    let mut checked = 0;
    for (path, item) in paths.iter().filter(|(p, _)| p.starts_with("/api/")) {
        let concrete = path
            .replace("{instance}", "x")
            .replace("{group}", "probe")
            .replace("{name}", "x");
        let mut documented: Vec<String> = item
            .as_object()
            .expect("path item")
            .keys()
            .filter(|m| *m != "parameters")
            .map(|m| m.to_uppercase())
            .collect();
        if documented.iter().any(|m| m == "GET") {
            documented.push("HEAD".into());
        }
        documented.sort();
        let r = app
            .client
            .patch(app.url(&concrete))
            .bearer_auth(&app.token)
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 405, "PATCH {path}");
        let allow = r
            .headers()
            .get("allow")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let mut served: Vec<String> = allow.split(',').map(|m| m.trim().to_string()).collect();
        served.sort();
        assert_eq!(served, documented, "{path}: Allow {allow:?}");
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} paths documented");
    app.stop().await;
}

/// The OpenAPI document is valid OpenAPI 3.0 where schemathesis found it
/// was not, and names the instance types this appliance knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_uses_openapi_3_0_keywords_and_lists_the_types() {
    fn walk(v: &Value, at: &str, bad: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if (k == "exclusiveMinimum" || k == "exclusiveMaximum") && !v.is_boolean() {
                        bad.push(format!("{at}/{k}"));
                    }
                    walk(v, &format!("{at}/{k}"), bad);
                }
            }
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| walk(v, &format!("{at}/{i}"), bad)),
            _ => {}
        }
    }
    let app = TestApp::spawn(vec![("o", Behaviour::Healthy)]).await;
    let doc = app.get_json("/api/openapi.json").await;
    assert_eq!(doc["openapi"], "3.0.3");
    let mut bad = Vec::new();
    walk(&doc, "", &mut bad);
    assert!(bad.is_empty(), "OpenAPI 3.0 takes booleans here: {bad:?}");
    let types = &doc["components"]["schemas"]["InstanceInput"]["properties"]["type"]["enum"];
    for t in ["http", "fast", "pve"] {
        assert!(
            types.as_array().is_some_and(|a| a.contains(&json!(t))),
            "{t} in {types}"
        );
    }
    app.stop().await;
}

async fn values_text(app: &TestApp, query: &str) -> (u16, String) {
    let r = reqwest::get(format!("http://{}/values{query}", app.metrics_addr))
        .await
        .expect("scrape");
    (r.status().as_u16(), r.text().await.expect("text"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_and_the_data_api_serve_the_latest_answers_without_calling_the_target() {
    let app = TestApp::spawn_with(
        vec![("a", Behaviour::Changing), ("b", Behaviour::Healthy)],
        &Default::default(),
        |c| {
            c.types.push(valued_type());
            for i in &mut c.instances {
                i.type_name = "valued".into();
            }
        },
    )
    .await;
    let b_up = "# HELP fleet_up The target answers ok\n# TYPE fleet_up gauge\nfleet_up{instance=\"b\",name=\"b\"} 1\n";
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (_, all) = values_text(&app, "").await;
        if all.contains("fleet_requests_total{instance=\"a\"}") && all.contains("instance=\"b\"") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no values in time:\n{all}\n{}\n{}",
            app.get_json("/api/instances/b/data").await,
            app.get_json("/api/monitoring/scheduler/health").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One instance: exactly its samples (b has no `seq`: skipped, counted).
    assert_eq!(values_text(&app, "?instance=b").await, (200, b_up.to_string()));
    let (status, all) = values_text(&app, "").await;
    assert_eq!(status, 200);
    assert!(all.contains("fleet_up{instance=\"a\",name=\"a\"} 1\n"), "{all}");
    assert_eq!(all.matches("# HELP fleet_up").count(), 1, "{all}");
    promtool::check_metrics(&all);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("pollster_values_errors_total{group=\"probe\",metric=\"fleet_requests_total\",reason=\"missing\",type=\"valued\"}"),
        "{metrics}"
    );
    let (status, body) = values_text(&app, "?instance=nope").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["error"]["field"],
        "instance"
    );
    assert_eq!(values_text(&app, "?bogus=1").await.0, 422);

    // The data API: the same values with their age, and the body's URL.
    let data = app.get_json("/api/instances/b/data").await;
    let g = &data["groups"][0];
    assert_eq!(data["instance"], "b");
    assert_eq!(g["group"], "probe");
    assert_eq!(g["fresh"], true);
    assert_eq!(
        g["values"],
        json!([{"metric": "fleet_up", "labels": {"name": "b"}, "value": 1.0}])
    );
    assert!(g["ageSeconds"].as_f64().expect("age") < WAIT.as_secs_f64(), "{g}");
    assert_eq!(g["body"], "/api/instances/b/data/probe/body");
    let r = app.get("/api/instances/b/data/probe/body").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert!(r.headers().contains_key("last-modified") && r.headers().contains_key("age"));
    let etag = r.headers()["etag"].to_str().expect("etag").to_string();
    assert_eq!(r.text().await.expect("body"), r#"{"instance":"b","status":"ok"}"#);
    let hits = app.fleet.hits("b");
    let reading = std::time::Instant::now();
    for _ in 0..50 {
        let r = app
            .client
            .get(app.url("/api/instances/b/data/probe/body"))
            .bearer_auth(&app.token)
            .header("if-none-match", &etag)
            .send()
            .await
            .expect("req");
        assert_eq!(r.status(), 304);
    }
    // Reads are served from the cache: the target sees its schedule only,
    // at most one poll per 100 ms (the fastest interval), however long the
    // 50 reads took on a busy machine.
    let polls = app.fleet.hits("b") - hits;
    let allowed = reading.elapsed().as_millis() as u64 / 100 + 2;
    assert!(
        polls <= allowed,
        "{polls} polls during 50 reads (the schedule allows {allowed})"
    );
    // A changing body changes its ETag at a later poll.
    let first = app.get("/api/instances/a/data/probe/body").await.headers()["etag"].clone();
    let deadline = std::time::Instant::now() + WAIT;
    while app.get("/api/instances/a/data/probe/body").await.headers()["etag"] == first {
        assert!(std::time::Instant::now() < deadline, "a's ETag never changed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.get("/api/instances/nope/data").await.status(), 404);
    assert_eq!(app.get("/api/instances/b/data/nope/body").await.status(), 404);
    assert_eq!(app.get("/api/instances/b/data/probe/body?item=x").await.status(), 400);

    // Test shows what the rules make of a fresh answer.
    let (status, t) = app.send(Method::POST, "/api/instances/b/test", None).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["results"][0]["values"], g["values"]);
    assert_eq!(
        t["results"][0]["valueErrors"],
        json!([{"metric": "fleet_requests_total", "reason": "missing", "count": 1}])
    );

    // A dead-lettered target's samples are no longer served.
    app.fleet.set("b", Behaviour::NotFound);
    let deadline = std::time::Instant::now() + WAIT;
    while !values_text(&app, "?instance=b").await.1.is_empty() {
        assert!(std::time::Instant::now() < deadline, "b's samples still served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let g = &app.get_json("/api/instances/b/data").await["groups"][0];
    assert_eq!(g["fresh"], false);
    assert!(!values_text(&app, "").await.1.contains("instance=\"b\""));
    app.stop().await;
}

/// A secret never comes back in an error: a URL's userinfo (even of a URL
/// that does not parse), a blank passphrase, `(hidden)` where no stored
/// value stands behind it; and a backup is in the audit trail, with who
/// asked for it and from where.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_echo_no_secret_and_a_backup_is_audited() {
    let app = TestApp::spawn(vec![]).await;
    // Port 99999: the URL does not parse, and the 422 is about it.
    let body = json!({"name": "leak", "type": "fast", "url": "http://u:PW-never-echoed@h:99999/x"});
    let (s, _, err) = raw_send(&app, Method::POST, "/api/instances", body).await;
    assert_eq!((s, err["error"]["field"].as_str()), (422, Some("url")), "{err}");
    assert!(!err.to_string().contains("PW-never-echoed"), "{err}");
    assert!(!err.to_string().contains("u:"), "the user is masked too: {err}");

    // `(hidden)` with nothing stored behind it: a 422 naming the field,
    // never saved as the text.
    for (path, method, body, field) in [
        (
            "/api/settings/sink",
            Method::PUT,
            json!({"url": "http://127.0.0.1:9/", "headers": {"Authorization": "(hidden)"}}),
            "headers.Authorization",
        ),
        (
            "/api/instances",
            Method::POST,
            json!({"name": "h", "type": "fast", "url": "http://127.0.0.1:9/",
                   "auth": {"kind": "bearer", "token": "(hidden)"}}),
            "auth.token",
        ),
        (
            "/api/instances",
            Method::POST,
            json!({"name": "h", "type": "fast", "url": "http://u:(hidden)@127.0.0.1:9/"}),
            "url",
        ),
    ] {
        let (s, _, err) = raw_send(&app, method, path, body.clone()).await;
        assert_eq!((s, err["error"]["field"].as_str()), (422, Some(field)), "{body}: {err}");
    }
    let (_, sink) = app.send(Method::GET, "/api/settings/sink", None).await;
    assert!(sink["sink"].is_null(), "{sink}");
    let (s, _) = app.send(Method::GET, "/api/instances/h", None).await;
    assert_eq!(s, 404);

    // Twelve spaces are no passphrase.
    let r = app
        .client
        .post(app.url("/api/admin/backup"))
        .bearer_auth(&app.token)
        .json(&json!({"passphrase": " ".repeat(12)}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 422);
    let err: Value = r.json().await.expect("json");
    assert_eq!(err["error"]["field"], "passphrase", "{err}");

    let r = app
        .client
        .post(app.url("/api/admin/backup"))
        .bearer_auth(&app.token)
        .json(&json!({"passphrase": "correct horse battery"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let name = r
        .headers()
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split('"').nth(1))
        .expect("file name")
        .to_string();
    let audit = app.get_json("/api/admin/audit?limit=50").await;
    let entries = audit["entries"].as_array().expect("entries");
    let backup = entries
        .iter()
        .find(|e| e["action"] == "backup.create")
        .unwrap_or_else(|| panic!("no backup.create in {audit}"));
    assert!(
        backup["actor"].as_str().unwrap_or_default().starts_with("token:tests("),
        "{backup}"
    );
    assert_eq!(backup["source"], "127.0.0.1", "{backup}");
    assert_eq!(backup["target"], name.as_str(), "{backup}");
    let left: Vec<_> = std::fs::read_dir(app.data_dir.path())
        .expect("ls")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".backup"))
        .collect();
    assert!(left.is_empty(), "work files left: {left:?}");
    app.stop().await;
}

async fn raw_send(app: &TestApp, method: Method, path: &str, body: Value) -> (u16, String, Value) {
    let r = app
        .client
        .request(method, app.url(path))
        .bearer_auth(&app.token)
        .json(&body)
        .send()
        .await
        .expect("request");
    let s = r.status().as_u16();
    let text = r.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or(Value::Null);
    (s, text, v)
}

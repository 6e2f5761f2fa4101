//! Budget pools end to end: AIMD against a rate-limited API on loopback
//! (simulated minutes on a fake clock), the over-budget gate at startup and
//! on live changes, shedding under a profile, fan-out partial success, and
//! the plan on `/status`, the groups API and `/metrics`.

use crate::common;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use common::TestApp;
use pollster::core::Scheduler;
use pollster::core::catalog::Catalog;
use pollster::engine::budget::BudgetState;
use pollster::model::{
    BudgetConfig, GroupDef, InstanceConfig, MonitoringSettings, PollResult, Profile, TaskKey, Timestamp, TypeDef,
};
use pollster::poll::Poller;
use rand::SeedableRng;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------- a rate-limited API on a fake clock

/// An API on loopback that allows `limit` requests per second of the
/// *simulated* clock and answers 429 with `Retry-After: 1` beyond it.
#[derive(Clone)]
struct RateLimitedApi {
    clock: Arc<AtomicU64>,
    limit: u32,
    windows: Arc<Mutex<HashMap<u64, u32>>>,
}

async fn limited(State(api): State<RateLimitedApi>) -> axum::response::Response {
    let second = api.clock.load(Ordering::SeqCst) / 1000;
    let n = {
        let mut w = api.windows.lock().expect("lock");
        let n = w.entry(second).or_insert(0);
        *n += 1;
        *n
    };
    if n > api.limit {
        (StatusCode::TOO_MANY_REQUESTS, [("Retry-After", "1")], "slow down").into_response()
    } else {
        (StatusCode::OK, [("Content-Type", "application/json")], "{\"ok\":true}").into_response()
    }
}

async fn start_api(api: RateLimitedApi) -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(limited).with_state(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn svc_type() -> TypeDef {
    TypeDef {
        name: "svc".into(),
        groups: vec![
            GroupDef::new("status", "/status", 1, Duration::from_secs(5)),
            GroupDef::new("metrics", "/metrics", 3, Duration::from_secs(1)),
            GroupDef::new("inventory", "/inventory", 4, Duration::from_secs(2)),
        ],
    }
}

/// The pure scheduler, the engine's budget state and the real poller, run
/// on a fake clock in 50 ms steps for `minutes`: every due task is polled
/// for real against the API, and 429s feed AIMD exactly as the engine does.
/// Returns 429s per simulated minute and the success times of the
/// priority-1 tasks.
async fn simulate(minutes: u64, configured_rps: f64, api_limit: u32) -> (Vec<u32>, HashMap<TaskKey, Vec<u64>>, f64) {
    let clock = Arc::new(AtomicU64::new(0));
    let api = RateLimitedApi {
        clock: clock.clone(),
        limit: api_limit,
        windows: Arc::default(),
    };
    let addr = start_api(api).await;

    let mut settings = MonitoringSettings::default();
    settings.adaptive.enabled = false; // the plan alone sets the cadence
    let mut cat = Catalog::new(
        vec![svc_type()],
        vec![BudgetConfig {
            name: "api".into(),
            requests_per_second: configured_rps,
            shared_fraction: 1.0,
            burst: 2,
        }],
    );
    for i in 0..3 {
        let mut inst = InstanceConfig::new(&format!("svc-{i}"), "svc", &format!("http://{addr}"));
        inst.budget = Some("api".into());
        cat.insert(inst, true);
    }
    let poller = Poller::new().expect("poller");
    let start = Timestamp(1_800_000_000_000);
    let mut now = start;
    let mut sched = Scheduler::new(settings.clone());
    let mut budgets = BudgetState::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);

    let replan = |budgets: &mut BudgetState, sched: &mut Scheduler, now: Timestamp| {
        budgets.resolve(&cat, &settings.scheduler, now);
        sched.set_pool("api", budgets.effective_rps("api"), 2, now);
        for (k, meta) in pollster::core::plan::tasks(&cat, &settings.scheduler, &budgets.plans, &budgets.shapes) {
            sched.place(k, meta, None, now, true);
        }
    };
    replan(&mut budgets, &mut sched, now);

    let mut per_minute = vec![0u32; minutes as usize];
    let mut p1_successes: HashMap<TaskKey, Vec<u64>> = HashMap::new();
    let end = start.plus(Duration::from_secs(minutes * 60));
    while now < end {
        let (changed, resolve) = budgets.tick(now, &settings.scheduler);
        for (pool, rate) in changed {
            sched.set_pool(&pool, rate, 2, now);
        }
        if resolve {
            replan(&mut budgets, &mut sched, now);
        }
        while let Some(d) = sched.pop_due(now) {
            clock.store(now.0 - start.0, Ordering::SeqCst);
            let target = cat.target(&d.key).expect("target");
            let result: PollResult = poller.poll(&target.instance, target.group(), &[]).await;
            if let Err(e) = &result
                && e.is_rate_limited()
            {
                per_minute[(now.since(start).as_secs() / 60) as usize] += 1;
                let (signal, rate) = budgets
                    .on_rate_limited("api", now, e.retry_after, &settings.scheduler)
                    .expect("pool");
                if signal.decreased {
                    sched.set_pool("api", rate, 2, now);
                }
                if let Some(until) = signal.paused_until {
                    sched.pause_pool("api", until, now);
                }
                if signal.resolve {
                    replan(&mut budgets, &mut sched, now);
                }
            }
            if result.is_ok() && d.meta.priority == 1 {
                p1_successes.entry(d.key.clone()).or_default().push(now.0 - start.0);
            }
            sched.complete(&d.key, &result, now, &mut rng);
        }
        // Every plan keeps priority 1 at its floor.
        let plan = &budgets.plans["api"].plan;
        let status = plan.groups.iter().find(|g| g.name == "status").expect("status group");
        assert_eq!(status.interval_s, 5.0, "priority 1 keeps its floor");
        assert!(!status.shed);
        now = now.plus(Duration::from_millis(50));
    }
    (per_minute, p1_successes, budgets.effective_rps("api"))
}

#[tokio::test]
async fn aimd_brings_429s_to_zero_within_five_simulated_minutes() {
    // Demand at the floors is 3 × (1/5 + 1 + 1/2) = 5.1 rps, which fits the
    // configured 10 rps at 70 % — but the API really allows 4 rps. AIMD
    // halves the budget on the first 429s (at most once per 30 s), then
    // recovers by 0.1 rps a minute; only after several more minutes does
    // recovery probe past the real limit again (a single 429 then starts the
    // next saw tooth).
    let (per_minute, p1, effective) = simulate(7, 10.0, 4).await;
    eprintln!("429s per simulated minute: {per_minute:?}; effective budget at the end: {effective:.2} rps");
    assert!(
        per_minute[0] > 0,
        "the configured budget is above the real limit: {per_minute:?}"
    );
    for (m, n) in per_minute.iter().enumerate().skip(1) {
        assert_eq!(*n, 0, "429s in simulated minute {}: {per_minute:?}", m + 1);
    }
    assert!(effective < 4.0, "AIMD settled below the real limit, at {effective}");
    // Priority 1 keeps its 5 s floor: from minute 2 on, no gap between two
    // successful status polls of one instance is longer than 5 s plus a
    // token-bucket slot.
    assert_eq!(p1.len(), 3, "every instance's status task succeeded");
    for (key, times) in &p1 {
        let late: Vec<u64> = times.iter().copied().filter(|t| *t >= 120_000).collect();
        assert!(late.len() >= 55, "{key}: {} status polls after minute 2", late.len());
        for w in late.windows(2) {
            let gap = w[1] - w[0];
            assert!(gap <= 6_000, "{key}: {gap} ms between status polls (floor 5 s)");
        }
    }
}

#[tokio::test]
async fn without_rate_limits_aimd_never_moves() {
    let (per_minute, _, effective) = simulate(3, 10.0, 1000).await;
    assert!(per_minute.iter().all(|n| *n == 0), "{per_minute:?}");
    assert_eq!(effective, 10.0);
}

// ---------------------------------------------------------------- the gate, shedding and the plan on the live appliance

/// A type whose groups cost far more than a small pool allows.
fn heavy_type() -> TypeDef {
    let mut big = GroupDef::new("report", "", 3, Duration::from_secs(60));
    big.cost = 50.0;
    TypeDef {
        name: "heavy".into(),
        groups: vec![GroupDef::new("probe", "", 1, Duration::from_secs(5)), big],
    }
}

fn small_pool() -> BudgetConfig {
    BudgetConfig {
        name: "small".into(),
        requests_per_second: 1.0,
        shared_fraction: 1.0,
        burst: 5,
    }
}

/// The appliance with one healthy fleet member `a`, the `heavy` type and
/// the `small` pool, then `tweak`.
async fn spawn_with_small_pool(tweak: impl FnOnce(&mut pollster::config::Config)) -> TestApp {
    TestApp::spawn_with(
        vec![("a", pollster::fleet::Behaviour::Healthy)],
        &BTreeMap::new(),
        |c| {
            c.types.push(heavy_type());
            c.budgets.push(small_pool());
            tweak(c);
        },
    )
    .await
}

#[tokio::test]
async fn adding_an_instance_that_would_overrun_a_pool_is_refused_with_409() {
    let app = spawn_with_small_pool(|c| {
        // One light instance in the pool: `http` probes at 1/5 rps, fits 0.7.
        let mut light = common::instance("light", "http", c.instances[0].url.clone());
        light.budget = Some("small".into());
        c.instances.push(light);
    })
    .await;
    let url = app.fleet.url("a");
    // light 0.2 + probe 0.2 + report 50 requests per 240 s at its cap
    // (60 s × 4) = 0.61 rps: fits.
    let (status, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "h1", "type": "heavy", "url": url, "budget": "small"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // A second heavy instance needs 0.2 + 0.2 + 0.2 + 100/240 > 0.7 even
    // stretched to the cap: refused, with the gate's message.
    let (status, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "h2", "type": "heavy", "url": url, "budget": "small"})),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "over_budget");
    let msg = body["error"]["message"].as_str().unwrap_or_default();
    for needle in ["\"small\"", "rps", "availability", "standard", "full"] {
        assert!(msg.contains(needle), "message names {needle}: {msg}");
    }
    // Nothing was saved.
    let (status, _) = app.send(reqwest::Method::GET, "/api/instances/h2", None).await;
    assert_eq!(status, 404);
    // Outside any pool the same instance is fine.
    let (status, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "h2", "type": "heavy", "url": url})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // Lowering the target so the pool no longer fits is refused too.
    let (status, body) = app
        .send(
            reqwest::Method::PUT,
            "/api/settings/monitoring",
            Some(json!({"scheduler": {"target_utilization": 0.3}})),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "over_budget");

    // Budget pools: listed, validated per field, gated, stored and applied.
    let list = app.get_json("/api/budgets").await;
    assert_eq!(list["budgets"][0]["name"], "small", "{list}");
    assert_eq!(list["budgets"][0]["budget_rps"], 1.0);
    let put = |body: Value| app.send(reqwest::Method::PUT, "/api/budgets/small", Some(body));
    let (status, body) = put(json!({"requests_per_second": -1})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "requests_per_second", "{body}");
    let (status, body) = put(json!({"burst": "many"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "burst", "{body}");
    let (status, body) = put(json!({"requests_per_second": 0.5})).await;
    assert_eq!(status, 409, "a smaller budget no longer fits: {body}");
    assert_eq!(body["error"]["code"], "over_budget");
    let (status, body) = put(json!({"requests_per_second": 5.0, "shared_fraction": 0.5})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["budget_rps"], 2.5);
    let plan = app.get_json("/status?format=json").await;
    let pool = plan["pools"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "small"))
        .cloned()
        .expect("pool");
    assert_eq!(pool["budget_rps"], 2.5, "{pool}");
    assert_eq!(pool["effective_budget_rps"], 2.5, "{pool}");
    // Now the second heavy instance fits.
    let (status, body) = app
        .send(
            reqwest::Method::POST,
            "/api/instances",
            Some(json!({"name": "h3", "type": "heavy", "url": url, "budget": "small"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // The change survives a restart.
    let app = app.restart().await;
    let list = app.get_json("/api/budgets").await;
    assert_eq!(list["budgets"][0]["budget_rps"], 2.5, "{list}");
    assert_eq!(list["budgets"][0]["instances"], 3, "{list}");
    app.stop().await;
}

#[tokio::test]
async fn a_profile_sheds_priority_3_and_4_groups_and_status_shows_the_plan() {
    let app = spawn_with_small_pool(|c| {
        c.monitoring_file.scheduler.profile = Some(Profile::Full);
        for name in ["h1", "h2", "h3"] {
            let mut i = common::instance(name, "heavy", c.instances[0].url.clone());
            i.budget = Some("small".into());
            c.instances.push(i);
        }
    })
    .await;
    let doc = app.get_json("/status?format=json").await;
    let pool = doc["pools"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "small"))
        .unwrap_or_else(|| panic!("pool small in {doc:#}"));
    assert_eq!(pool["over_budget"], true, "{pool:#}");
    assert_eq!(pool["budget_rps"], 1.0);
    let groups = pool["groups"].as_array().expect("groups");
    let report = groups.iter().find(|g| g["name"] == "report").expect("report");
    assert_eq!(report["shed"], true, "{report:#}");
    assert_eq!(report["stretch_factor"], 4.0, "stretched to its cap first: {report:#}");
    let probe = groups.iter().find(|g| g["name"] == "probe").expect("probe");
    assert_eq!(probe["interval_seconds"], 5.0);
    assert_eq!(probe["shed"], false);
    // The groups API returns the same plan (`last_ran` moves between the
    // two reads: the unbudgeted probe runs every 100 ms).
    let api = app.get_json("/api/monitoring/scheduler/groups").await;
    let plan_of = |pools: &Value| {
        let mut pools = pools.clone();
        for g in pools
            .as_array_mut()
            .into_iter()
            .flatten()
            .flat_map(|p| p["groups"].as_array_mut().map(|g| g.iter_mut()).into_iter().flatten())
        {
            g["last_ran"] = Value::Null;
        }
        pools
    };
    assert_eq!(plan_of(&api["pools"]), plan_of(&doc["pools"]));
    // The probes run; the shed reports do not (that a shed group is never
    // dispatched is proved on paused time, in `scheduling`).
    app.wait_health(Duration::from_secs(20), "every heavy probe to run", |h| {
        ["h1", "h2", "h3"].iter().all(|name| {
            h["staleness"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|t| t["instance"] == *name && t["group"] == "probe" && t["lastSuccess"].is_string())
            })
        })
    })
    .await;
    let polled: Vec<Value> = app.health().await["staleness"].as_array().cloned().unwrap_or_default();
    for s in polled.iter().filter(|s| s["group"] == "report") {
        assert_eq!(s["lastSuccess"], Value::Null, "a shed group never ran: {s}");
    }
    // The page shows the pool card, the badge and the stretched row.
    let page = app.get("/status").await.text().await.expect("page");
    assert!(page.contains("Pool small"), "{page}");
    assert!(page.contains("over budget"));
    assert!(page.contains("data-group=\"heavy/report\""));
    assert!(page.contains("class=\"stretched\""));
    // The dashboard summarises the pool.
    let dash = app.get("/").await.text().await.expect("dashboard");
    assert!(dash.contains("Budget pools"), "{dash}");
    assert!(dash.contains("href=\"/status#pool-small\""));
    // Metrics carry the plan.
    let metrics = app.metrics().await;
    for needle in [
        "pollster_scheduler_interval_seconds{group=\"heavy/report\",pool=\"small\"} 240",
        "pollster_scheduler_stretch_factor{group=\"heavy/report\",pool=\"small\"} 4",
        "pollster_scheduler_budget_rps{pool=\"small\"} 1",
        "pollster_scheduler_effective_budget_rps{pool=\"small\"} 1",
        "pollster_scheduler_estimated_demand_rps{pool=\"small\"}",
        "pollster_scheduler_budget_utilization_ratio{pool=\"small\"}",
        "pollster_scheduler_over_budget{pool=\"small\"} 1",
        "pollster_instance_cadence_seconds{instance=\"h1\"}",
    ] {
        assert!(metrics.contains(needle), "metrics contain {needle}");
    }
    app.stop().await;
}

#[tokio::test]
async fn startup_over_budget_without_a_profile_fails_with_the_gate_message() {
    let data_dir = tempfile::tempdir().expect("tempdir");
    let mut c = common::fast_config(&BTreeMap::new());
    c.server.data_dir = data_dir.path().to_path_buf();
    c.types.push(heavy_type());
    c.budgets.push(small_pool());
    for name in ["h1", "h2"] {
        let mut i = common::instance(name, "heavy", "http://127.0.0.1:9/".into());
        i.budget = Some("small".into());
        c.instances.push(i);
    }
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let err = match pollster::app::Application::build_with_listeners(c.clone(), api, metrics).await {
        Ok(_) => panic!("an over-budget pool with no profile must not start"),
        Err(e) => e,
    };
    assert!(matches!(err, pollster::app::AppError::OverBudget(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("\"small\""), "{msg}");
    assert!(msg.contains("availability (priority 1 only: 0.400 rps, fits)"), "{msg}");
    // Mode fixed skips the gate.
    c.monitoring_file.scheduler.mode = pollster::model::SchedulerMode::Fixed;
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let app = pollster::app::Application::build_with_listeners(c, api, metrics)
        .await
        .expect("fixed mode starts");
    drop(app);
}

// ---------------------------------------------------------------- shape and fan-out

#[derive(Clone, Default)]
struct Cluster {
    hits: Arc<Mutex<BTreeMap<String, u32>>>,
}

async fn cluster_api(State(c): State<Cluster>, uri: axum::http::Uri) -> axum::response::Response {
    let path = uri.path().to_string();
    *c.hits.lock().expect("lock").entry(path.clone()).or_insert(0) += 1;
    let json = |body: &str| (StatusCode::OK, [("Content-Type", "application/json")], body.to_string()).into_response();
    match path.as_str() {
        "/api/nodes" => json(r#"{"data":[{"node":"n1"},{"node":"n2"},{"node":"bad"}]}"#),
        "/api/ha" => json(r#"{"data":[]}"#),
        "/api/nodes/bad/status" => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
        p if p.starts_with("/api/nodes/") => json(r#"{"cpu":0.1}"#),
        _ => json("{}"),
    }
}

fn cluster_type() -> TypeDef {
    let mut nodes = GroupDef::new("nodes", "/nodes", 1, Duration::from_millis(100));
    nodes.shape_from = Some("/data".into());
    nodes.item_field = Some("node".into());
    let mut status = GroupDef::new("node_status", "/nodes/{item}/status", 2, Duration::from_millis(100));
    status.fan_out = Some("nodes".into());
    let mut ha = GroupDef::new("ha", "/ha", 4, Duration::from_millis(100));
    ha.shape_from = Some("/data".into());
    let mut ha_status = GroupDef::new("ha_status", "/ha/status", 3, Duration::from_millis(100));
    ha_status.enabled_when = Some("ha".into());
    TypeDef {
        name: "cluster".into(),
        groups: vec![nodes, status, ha, ha_status],
    }
}

#[tokio::test]
async fn fan_out_polls_every_item_and_a_partial_success_counts_as_success() {
    let cluster = Cluster::default();
    let app_state = cluster.clone();
    let router = axum::Router::new().fallback(cluster_api).with_state(app_state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    let app = TestApp::spawn_with(vec![], &BTreeMap::new(), |c| {
        c.types.push(cluster_type());
        c.instances
            .push(common::instance("pve-1", "cluster", format!("http://{addr}/api")));
    })
    .await;
    let h = app
        .wait_health(Duration::from_secs(10), "a partial fan-out run", |h| {
            h["partial"]
                .as_array()
                .is_some_and(|p| p.iter().any(|x| x["group"] == "node_status"))
        })
        .await;
    // The run succeeded: no breaker, a last success, and the failed item
    // is reported with its status.
    let status = h["staleness"]
        .as_array()
        .and_then(|s| s.iter().find(|x| x["group"] == "node_status"))
        .expect("node_status task");
    assert!(status["lastSuccess"].is_string(), "{status}");
    assert!(
        h["breakers"].as_array().is_some_and(|b| b.is_empty()),
        "{:#}",
        h["breakers"]
    );
    let partial = h["partial"]
        .as_array()
        .and_then(|p| p.iter().find(|x| x["group"] == "node_status"))
        .expect("partial");
    assert_eq!(partial["failedItems"][0]["item"], "bad", "{partial}");
    assert_eq!(partial["failedItems"][0]["status"], 500, "{partial}");
    assert_eq!(partial["failedItems"].as_array().map(|a| a.len()), Some(1));
    // One request per item; the group gated on an empty shape never ran.
    let hits = cluster.hits.lock().expect("lock").clone();
    for p in ["/api/nodes/n1/status", "/api/nodes/n2/status", "/api/nodes/bad/status"] {
        assert!(hits.get(p).copied().unwrap_or(0) > 0, "{p} polled: {hits:?}");
    }
    assert_eq!(
        hits.get("/api/ha/status"),
        None,
        "ha_status is held while ha = 0: {hits:?}"
    );
    // The learned shape shows in the plan.
    let plan = app.get_json("/api/monitoring/scheduler/groups").await;
    let pool = &plan["pools"][0];
    assert_eq!(pool["name"], "unbudgeted");
    assert_eq!(pool["shape"]["nodes"], 3, "{pool:#}");
    assert_eq!(pool["shape"]["ha"], 0, "{pool:#}");
    let fan = pool["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "node_status"))
        .expect("node_status");
    assert_eq!(fan["cost_per_cycle"], 3.0, "one request per node: {fan}");
    app.stop().await;
}

/// The plan of pool `api` as `/api/monitoring/scheduler/groups` shows it.
async fn api_pool(app: &TestApp) -> Value {
    let plan = app.get_json("/api/monitoring/scheduler/groups").await;
    plan["pools"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "api"))
        .cloned()
        .expect("pool api")
}

#[tokio::test]
async fn a_429_on_the_live_appliance_pauses_the_pool_and_a_second_lowers_its_budget_without_a_breaker() {
    let app = TestApp::spawn_with(
        vec![(
            "limited",
            pollster::fleet::Behaviour::RateLimited {
                per_second: 0,
                retry_after_secs: 1,
            },
        )],
        &BTreeMap::new(),
        |c| {
            c.budgets.push(BudgetConfig {
                name: "api".into(),
                requests_per_second: 100.0,
                shared_fraction: 1.0,
                burst: 10,
            });
            c.instances[0].budget = Some("api".into());
        },
    )
    .await;
    let start = std::time::Instant::now();
    // The first 429 is lone: the pool is paused by its Retry-After, the budget stays.
    let pool = loop {
        let pool = api_pool(&app).await;
        if pool["paused_until"].is_string() {
            break pool;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no pause: {pool:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(pool["effective_budget_rps"], 100.0, "{pool:#}");
    assert_eq!(app.fleet.hits("limited"), 1, "nothing is sent while the pool is paused");
    // Its retry after the pause gets a 429 again: halved once, paused again.
    let pool = loop {
        let pool = api_pool(&app).await;
        if pool["effective_budget_rps"].as_f64().is_some_and(|e| e < 100.0) {
            break pool;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no AIMD move: {pool:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(pool["effective_budget_rps"], 50.0, "{pool:#}");
    assert!(pool["paused_until"].is_string(), "{pool:#}");
    assert_eq!(app.fleet.hits("limited"), 2);
    // `/status` says since when, how fast it recovers and when the budget is back.
    let page = app.get("/status").await.text().await.expect("page");
    assert!(
        page.contains("AIMD since ") && page.contains("full budget expected at "),
        "{page}"
    );
    // A 429 is not the instance's fault: no breaker, no dead letter.
    let h = app.health().await;
    assert!(h["breakers"].as_array().is_some_and(|b| b.is_empty()), "{h:#}");
    assert_eq!(h["deadLetter"]["count"], 0);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("pollster_scheduler_rate_limited_total{pool=\"api\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("pollster_scheduler_effective_budget_rps{pool=\"api\"} 50"));
    assert!(
        metrics.contains("pollster_scheduler_aimd_decreases_total{pool=\"api\"} 1"),
        "{metrics}"
    );
    app.stop().await;
}

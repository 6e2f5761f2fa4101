//! The real binary: bad configuration exit codes, admin commands, and a
//! restart after SIGKILL on the same data directory.

use pollster::fleet::{Behaviour, Fleet};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::port;

use port::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_pollster");

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write config");
    p
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn bad_config_exits_2_naming_file_key_and_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        ("typo.toml", "[scheduler]\nwokers = 4\n", "scheduler.wokers"),
        (
            "duration.toml",
            "[adaptive]\nbase_interval = \"ten seconds\"\n",
            "ten seconds",
        ),
        (
            "order.toml",
            "[adaptive]\nmin_interval = \"20s\"\n",
            "adaptive.min_interval",
        ),
        (
            "range.toml",
            "[scheduler]\ntarget_utilization = 3.0\n",
            "scheduler.target_utilization",
        ),
        (
            "dup.toml",
            "[[instances]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/\"\n[[instances]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/\"\n",
            "instances[1].name",
        ),
        (
            "type.toml",
            "[[instances]]\nname = \"a\"\ntype = \"nope\"\nurl = \"http://127.0.0.1:1/\"\n",
            "nope",
        ),
        ("syntax.toml", "[server\nlisten = 1\n", "syntax.toml"),
    ];
    for (name, text, expect) in cases {
        let p = write(dir.path(), name, text);
        let path = p.to_string_lossy().to_string();
        let (code, _, err) = run(&["check-config", &path]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(&path), "{name}: file not named: {err}");
        assert!(err.contains(expect), "{name}: expected {expect:?} in {err}");
        let (code, _, err2) = run(&["serve", "--config", &path]);
        assert_eq!(code, 2, "serve {name}: {err2}");
    }
    let (code, _, err) = run(&["check-config", "/nonexistent/pollster.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/pollster.toml"), "{err}");

    let good = write(dir.path(), "good.toml", "[adaptive]\nmin_interval = \"250ms\"\n");
    let (code, out, err) = run(&["check-config", &good.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("OK"));
}

/// The worked example of the budget solver as a config file: budget 1 rps,
/// target 0.7, groups a(p1, 60 s, cost 30), b(p3, 300 s, 60), c(p4, 300 s,
/// 60), d(p4, 600 s, 60), e(p4, ungated, 900 s, 90).
fn worked_example(profile: &str) -> String {
    let group = |name: &str, priority: u8, floor: &str, cost: u32, gated: bool| {
        format!(
            "[[types.groups]]\nname = \"{name}\"\npath = \"/{name}\"\npriority = {priority}\nfloor = \"{floor}\"\ncost = {cost}\ngated = {gated}\n"
        )
    };
    format!(
        "[scheduler]\n{profile}\n[[budgets]]\nname = \"org\"\nrequests_per_second = 1.0\n\n[[types]]\nname = \"ex\"\n{}{}{}{}{}\n[[instances]]\nname = \"one\"\ntype = \"ex\"\nurl = \"http://127.0.0.1:1/\"\nbudget = \"org\"\n",
        group("a", 1, "60s", 30, true),
        group("b", 3, "5m", 60, true),
        group("c", 4, "5m", 60, true),
        group("d", 4, "10m", 60, true),
        group("e", 4, "15m", 90, false),
    )
}

/// A `[server]` section of its own for a config that `serve` may get as
/// far as opening: never the default ports (a machine may be running
/// Pollster on them) nor the default data directory.
fn server_section(data: &Path, api_port: u16, metrics_port: u16) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{api_port}\"\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\ndata_dir = \"{}\"\n\n",
        data.display()
    )
}

/// What the gate says about the worked example with no profile: the pool,
/// the demand, the target and the choices.
const GATE_MESSAGE: [&str; 6] = [
    "\"org\"",
    "0.725 rps",
    "0.700 rps",
    "availability (priority 1 only: 0.500 rps, fits)",
    "standard",
    "full",
];

#[test]
fn plan_solves_the_worked_example_and_the_gate_refuses_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let with_profile = write(dir.path(), "full.toml", &worked_example("profile = \"full\""));
    let path = with_profile.to_string_lossy().to_string();
    let (code, out, err) = run(&["plan", "--config", &path, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).expect("plan JSON");
    let pool = &doc["pools"][0];
    assert_eq!(pool["name"], "org");
    assert_eq!(pool["budget_rps"], 1.0);
    assert_eq!(pool["effective_budget_rps"], 1.0);
    assert_eq!(pool["target_utilization"], 0.7);
    assert_eq!(pool["over_budget"], true);
    // Every group at its stretch cap is 0.725 rps: over the 0.7 rps target,
    // but the 1 rps budget carries it, so nothing is shed.
    let demand = pool["total_demand_rps"].as_f64().expect("demand");
    assert!((demand - 0.725).abs() < 1e-9, "{demand}");
    let g = |name: &str| {
        pool["groups"]
            .as_array()
            .and_then(|gs| gs.iter().find(|g| g["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("group {name} in {pool:#}"))
    };
    for (name, interval, shed) in [
        ("a", 60.0, false),
        ("b", 1200.0, false),
        ("c", 1200.0, false),
        ("d", 2400.0, false),
        ("e", 900.0, false),
    ] {
        let x = g(name);
        assert_eq!(x["interval_seconds"], interval, "{name}: {x}");
        assert_eq!(x["shed"], shed, "{name}: {x}");
        assert_eq!(x["type"], "ex");
        for field in [
            "priority",
            "floor_seconds",
            "stretch_factor",
            "cost_per_cycle",
            "demand_rps",
            "pinned",
        ] {
            assert!(!x[field].is_null(), "{name}: {field} missing in {x}");
        }
    }
    assert_eq!(g("c")["stretch_factor"], 4.0);
    // Shared by members: the one pool has one owner, which carries all of
    // its tasks and demand; the others own nothing.
    let (code, out, err) = run(&["plan", "--config", &path, "--format", "json", "--members", "3"]);
    assert_eq!(code, 0, "{err}");
    let shared: Value = serde_json::from_str(&out).expect("plan JSON");
    let members = shared["members"].as_array().expect("members");
    let names: Vec<&str> = members.iter().filter_map(|m| m["name"].as_str()).collect();
    assert_eq!(names, ["member-1", "member-2", "member-3"]);
    let owners: Vec<&Value> = members
        .iter()
        .filter(|m| m["units"] == serde_json::json!(["org"]))
        .collect();
    assert_eq!(owners.len(), 1, "{members:?}");
    let rps = owners[0]["rps"].as_f64().expect("rps");
    assert!((rps - demand).abs() < 1e-9, "{rps} against {demand}");
    assert!(owners[0]["tasks"].as_u64().is_some_and(|t| t > 0));
    let idle = members
        .iter()
        .filter(|m| m["tasks"] == 0 && m["units"] == serde_json::json!([]));
    assert_eq!(idle.count(), 2);
    let (code, table, err) = run(&["plan", "--config", &path, "--members", "east,west"]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("members: 2") && table.contains("pool:org"), "{table}");
    for bad in ["0", "a,a", "a,,b"] {
        let (code, _, err) = run(&["plan", "--config", &path, "--members", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains("--members"), "{bad}: {err}");
    }
    let (code, table, err) = run(&["plan", "--config", &path]);
    assert_eq!(code, 0, "{err}");
    for needle in ["pool org", "OVER BUDGET", "the budget carries it", "ex/c", "20m"] {
        assert!(table.contains(needle), "{needle:?} in {table}");
    }

    // With no profile the same plan is refused at startup and by
    // check-config, with the pool, the demand, the target and the choices.
    let server = server_section(&dir.path().join("data"), free_port(), free_port());
    let gated = write(dir.path(), "gated.toml", &format!("{server}{}", worked_example("")));
    let path = gated.to_string_lossy().to_string();
    for args in [
        vec!["check-config", path.as_str()],
        vec!["serve", "--config", path.as_str()],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        for needle in GATE_MESSAGE {
            assert!(err.contains(needle), "{args:?}: {needle:?} in {err}");
        }
    }
    // `plan` still shows it.
    let (code, out, _) = run(&["plan", "--config", &path, "--format", "json"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"over_budget\": true"), "{out}");
}

#[test]
fn the_gate_refuses_an_over_budget_config_before_the_port_is_taken() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Held for the whole test: `serve` finds its API port taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let server = server_section(&dir.path().join("data"), port, free_port());

    let gated = write(dir.path(), "gated.toml", &format!("{server}{}", worked_example("")));
    let (code, _, err) = run(&["serve", "--config", &gated.to_string_lossy()]);
    assert_eq!(code, 2, "a configuration error, not a bind failure: {err}");
    for needle in GATE_MESSAGE {
        assert!(err.contains(needle), "{needle:?} in {err}");
    }

    // The port really is taken: with a profile the gate lets the same plan
    // through, and only then does `serve` fail, naming the address.
    let ok = write(
        dir.path(),
        "full.toml",
        &format!("{server}{}", worked_example("profile = \"full\"")),
    );
    let (code, _, err) = run(&["serve", "--config", &ok.to_string_lossy()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("cannot listen on 127.0.0.1:{port}")), "{err}");
    drop(taken);
}

#[test]
fn version_and_help() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.contains(env!("CARGO_PKG_VERSION")));
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for cmd in ["serve", "demo", "check-config", "plan", "admin"] {
        assert!(out.contains(cmd), "{cmd} missing from --help");
    }
}

struct Server {
    child: Child,
    api: String,
    token: String,
}

impl Server {
    fn start(config: &Path, api_port: u16, token: &str) -> Server {
        let log =
            std::fs::File::create(config.with_extension(format!("log.{}", std::process::id()))).expect("log file");
        let child = Command::new(BIN)
            .args(["serve", "--config", &config.to_string_lossy()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("server starts");
        Server {
            child,
            api: format!("http://127.0.0.1:{api_port}"),
            token: token.into(),
        }
    }

    async fn wait_ready(&self, client: &reqwest::Client) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(r) = client.get(format!("{}/readyz", self.api)).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("server not ready");
    }

    async fn health(&self, client: &reqwest::Client) -> Value {
        client
            .get(format!("{}/api/monitoring/scheduler/health", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("health")
            .json()
            .await
            .expect("json")
    }

    fn kill9(mut self) {
        // SIGKILL: no chance to flush.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find<'a>(list: &'a Value, instance: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|e| e["instance"] == instance)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_sigkill_and_overdue_tasks_are_spread() {
    const HEALTHY: usize = 100;
    let mut members = vec![
        ("dead".to_string(), Behaviour::Unauthorized),
        ("tripped".to_string(), Behaviour::ServerError),
    ];
    for i in 0..HEALTHY {
        members.push((format!("ok-{i:03}"), Behaviour::Healthy));
    }
    let fleet = Fleet::start("127.0.0.1:0".parse().expect("addr"), members.clone())
        .await
        .expect("fleet");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let api_port = free_port();
    let metrics_port = free_port();
    let mut cfg = format!(
        "[server]\nlisten = \"127.0.0.1:{api_port}\"\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\ndata_dir = \"{}\"\n\n\
         [adaptive]\nenabled = false\n\n\
         [scheduler]\nstate_flush_interval = \"100ms\"\n\n\
         [failure]\nbackoff_initial = \"60s\"\nbackoff_jitter = 0.0\nbreaker_threshold = 1\n\n\
         [[types]]\nname = \"every4s\"\n[[types.groups]]\nname = \"probe\"\npath = \"\"\npriority = 1\nfloor = \"4s\"\n\n",
        data.display()
    );
    for (name, _) in &members {
        cfg.push_str(&format!(
            "[[instances]]\nname = \"{name}\"\ntype = \"every4s\"\nurl = \"{}\"\ntimeout = \"1s\"\n\n",
            fleet.url(name)
        ));
    }
    let config = write(dir.path(), "pollster.toml", &cfg);
    let cfg_path = config.to_string_lossy().to_string();

    let (code, token, err) = run(&["admin", "create-token", "--config", &cfg_path, "--name", "test"]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_string();
    assert!(token.starts_with("pst_"));
    let (code, read_token, err) = run(&[
        "admin",
        "create-token",
        "--config",
        &cfg_path,
        "--name",
        "grafana",
        "--scope",
        "read",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("created read API token"), "{err}");
    let read_token = read_token.trim().to_string();

    let client = reqwest::Client::new();
    let server = Server::start(&config, api_port, &token);
    server.wait_ready(&client).await;
    let health = client
        .get(format!("http://127.0.0.1:{api_port}/api/monitoring/scheduler/health"))
        .bearer_auth(&read_token)
        .send()
        .await
        .expect("get");
    assert_eq!(health.status().as_u16(), 200, "a read token reads the health");
    let backup = client
        .post(format!("http://127.0.0.1:{api_port}/api/admin/backup"))
        .bearer_auth(&read_token)
        .json(&serde_json::json!({"passphrase": "a long enough passphrase"}))
        .send()
        .await
        .expect("post");
    assert_eq!(backup.status().as_u16(), 403, "a read token takes no backup");

    // Wait until the dead-letter entry and the open breaker are visible: from
    // then on they are acknowledged, so they must survive a SIGKILL.
    let mut before = Value::Null;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        before = server.health(&client).await;
        let tripped = find(&before["breakers"], "tripped").is_some_and(|b| b["state"] == "open");
        let all_polled = fleet.total_hits() >= (HEALTHY + 2) as u64;
        if find(&before["deadLetter"]["tasks"], "dead").is_some() && tripped && all_polled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dead_before = find(&before["deadLetter"]["tasks"], "dead")
        .cloned()
        .expect("dead-lettered");
    let tripped_before = find(&before["breakers"], "tripped").cloned().expect("breaker open");

    // The running server holds the database: admin commands refuse politely.
    let (code, _, err) = run(&["admin", "dlq", "list", "--config", &cfg_path]);
    assert_eq!(code, 1);
    assert!(err.contains("running Pollster server"), "{err}");

    // Let one flush window pass for the healthy tasks' timing state.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill9();

    // Offline admin: the dead-letter queue is readable from the file.
    let (code, out, err) = run(&["admin", "dlq", "list", "--config", &cfg_path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("dead/probe"), "{out}");

    // Wait until every healthy task is overdue, then restart.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let hits_at_restart = fleet.total_hits();
    let tripped_hits = fleet.hits("tripped");
    let restarted = Instant::now();
    let server = Server::start(&config, api_port, &token);

    // Record when each post-restart poll lands.
    let mut timeline = Vec::new();
    let mut last = hits_at_restart;
    while restarted.elapsed() < Duration::from_secs(8) && last < hits_at_restart + HEALTHY as u64 {
        let now = fleet.total_hits();
        for _ in last..now {
            timeline.push(restarted.elapsed());
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        timeline.len() >= HEALTHY * 9 / 10,
        "only {} polls after restart",
        timeline.len()
    );
    // Overdue tasks are spread over their phase window (here 2 s), not fired
    // as one burst: the 10th and 80th polls are far apart.
    let spread = timeline[HEALTHY * 8 / 10] - timeline[HEALTHY / 10];
    assert!(
        spread >= Duration::from_millis(700),
        "overdue polls fired in a burst: {spread:?} {timeline:?}"
    );

    server.wait_ready(&client).await;
    let after = server.health(&client).await;
    let dead_after = find(&after["deadLetter"]["tasks"], "dead").expect("dead-letter entry survived SIGKILL");
    assert_eq!(dead_after["nextRun"], dead_before["nextRun"], "recheck time kept");
    assert_eq!(dead_after["failures"], dead_before["failures"]);
    let tripped_after = find(&after["breakers"], "tripped").expect("open breaker survived SIGKILL");
    assert_eq!(tripped_after["state"], "open");
    assert_eq!(tripped_after["retryAt"], tripped_before["retryAt"], "retry time kept");
    assert_eq!(
        fleet.hits("tripped"),
        tripped_hits,
        "an open breaker is not probed before retryAt"
    );
    assert_eq!(
        fleet.hits("dead"),
        1,
        "a dead-lettered task is not probed before its recheck"
    );

    // A second server on the same data directory is refused.
    let second_api = free_port();
    let second_cfg = write(
        dir.path(),
        "second.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:{second_api}\"\nmetrics_listen = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n",
            free_port(),
            data.display()
        ),
    );
    let (code, _, err) = run(&["serve", "--config", &second_cfg.to_string_lossy()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("in use by another pollster process"), "{err}");
    drop(server);
    fleet.stop().await;
}

#[test]
fn admin_set_password_reads_stdin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_string_lossy().to_string();
    let mut child = Command::new(BIN)
        .args(["admin", "set-password", "--data-dir", &d])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"a-long-password\n")
        .expect("write");
    let out = child.wait_with_output().expect("exit");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let store = pollster::store::Store::open(dir.path()).expect("open");
    let u = store.get_user("admin").expect("read").expect("admin exists");
    assert!(pollster::accounts::verify_password("a-long-password", &u.password_hash));
    drop(store);

    let mut child = Command::new(BIN)
        .args(["admin", "set-password", "--data-dir", &d])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    child.stdin.take().expect("stdin").write_all(b"short\n").expect("write");
    let out = child.wait_with_output().expect("exit");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 8"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_and_flushes() {
    let fleet = Fleet::start(
        "127.0.0.1:0".parse().expect("addr"),
        vec![("t".to_string(), Behaviour::Healthy)],
    )
    .await
    .expect("fleet");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let api_port = free_port();
    let cfg = format!(
        "[server]\nlisten = \"127.0.0.1:{api_port}\"\nmetrics_listen = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n\
         [scheduler]\nstate_flush_interval = \"60s\"\n\
         [[instances]]\nname = \"t\"\nurl = \"{}\"\n",
        free_port(),
        data.display(),
        fleet.url("t")
    );
    let config = write(dir.path(), "pollster.toml", &cfg);
    let client = reqwest::Client::new();
    let mut server = Server::start(&config, api_port, "");
    server.wait_ready(&client).await;
    let start = Instant::now();
    while fleet.hits("t") == 0 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = server.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(status.success());
    let stopped = Instant::now();
    let code = loop {
        if let Some(s) = server.child.try_wait().expect("wait") {
            break s.code();
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "did not stop within 10 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code, Some(0));
    let store = pollster::store::Store::open(&data).expect("open");
    let (tasks, _) = store.load_tasks().expect("load");
    assert!(
        tasks
            .iter()
            .any(|(k, r)| &*k.instance == "t" && r.last_success.is_some()),
        "the shutdown flush wrote the poll's state: {tasks:?}"
    );
    fleet.stop().await;
}

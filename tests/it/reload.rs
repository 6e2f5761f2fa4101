//! Reloading the config file on a running `pollster serve` (a real process):
//! SIGHUP puts an edited file in force as a diff — an added instance is
//! polled, a removed one is gone from the API and `/values`, an unchanged
//! one keeps its schedule, breaker and dead-letter entry — and a bad file
//! changes nothing, with the metric at 0, one ERROR naming the key, and
//! `POST /api/admin/reload` answering 422 with the same field.

use pollster::fleet::{Behaviour, Fleet};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::port::free_port;
use crate::common::{breaker, dead_letter, staleness};

const BIN: &str = env!("CARGO_BIN_EXE_pollster");

struct Server {
    child: Child,
    log: PathBuf,
    api: String,
    metrics: String,
    token: String,
    client: reqwest::Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("get");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn health(&self) -> Value {
        self.get("/api/monitoring/scheduler/health").await.1
    }

    async fn metrics(&self, path: &str) -> String {
        self.client
            .get(format!("{}{path}", self.metrics))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    }

    async fn reload_api(&self) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}/api/admin/reload", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("post");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn wait_ready(&self) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(r) = self.client.get(format!("{}/readyz", self.api)).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("server not ready: {}", self.log());
    }

    fn hangup(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "SIGHUP sent");
    }

    /// Wait (real time: a separate process) until `done` holds of the
    /// health document, or fail saying `what`.
    async fn wait_for(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let h = self.health().await;
            if done(&h) {
                return h;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "{what}: {h}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The config file: `[server]` on free ports, failure rules that open a
/// breaker at the first error, an hourly type (polled once at the start,
/// then not for an hour: a state that was reset would show) and a 4 s one.
fn config(data: &Path, api: u16, metrics: u16, extra_server: &str, instances: &[(&str, &str, String, &str)]) -> String {
    let rule = "[[types.groups.values]]\nmetric = \"fleet_up\"\nhelp = \"The target answers ok\"\n\
                value = \"/status\"\nmap = { ok = 1 }\nmap_default = 0\nlabels = { name = \"/instance\" }\n\n";
    let mut cfg = format!(
        "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\ndata_dir = \"{}\"\n{extra_server}\n\
         [adaptive]\nenabled = false\n\n\
         [scheduler]\nstate_flush_interval = \"100ms\"\n\n\
         [failure]\nbackoff_initial = \"60s\"\nbackoff_jitter = 0.0\nbreaker_threshold = 1\n\n\
         [[types]]\nname = \"hourly\"\n[[types.groups]]\nname = \"probe\"\npath = \"\"\npriority = 1\nfloor = \"1h\"\n{rule}\
         [[types]]\nname = \"every4s\"\n[[types.groups]]\nname = \"probe\"\npath = \"\"\npriority = 1\nfloor = \"4s\"\n{rule}",
        data.display()
    );
    for (name, ty, url, timeout) in instances {
        cfg.push_str(&format!(
            "[[instances]]\nname = \"{name}\"\ntype = \"{ty}\"\nurl = \"{url}\"\ntimeout = \"{timeout}\"\n\n"
        ));
    }
    cfg
}

/// Whether the duration histogram has a series per instance.
fn durations_by_instance(metrics: &str) -> bool {
    metrics
        .lines()
        .any(|l| l.starts_with("pollster_monitor_poll_duration_seconds_count{") && l.contains("instance=\""))
}

fn has_instance(list: &Value, name: &str) -> bool {
    list["instances"]
        .as_array()
        .is_some_and(|a| a.iter().any(|i| i["name"] == name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_the_file_as_a_diff_and_a_bad_file_changes_nothing() {
    let fleet = Fleet::start(
        "127.0.0.1:0".parse().expect("addr"),
        vec![
            ("keep".into(), Behaviour::Healthy),
            ("dead".into(), Behaviour::Unauthorized),
            ("tripped".into(), Behaviour::ServerError),
            ("gone".into(), Behaviour::Healthy),
            ("new".into(), Behaviour::Healthy),
        ],
    )
    .await
    .expect("fleet");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (api, metrics) = (free_port(), free_port());
    let file = dir.path().join("pollster.toml");
    let first = [
        ("keep", "hourly", fleet.url("keep"), "1s"),
        ("dead", "every4s", fleet.url("dead"), "1s"),
        ("tripped", "every4s", fleet.url("tripped"), "1s"),
        ("gone", "every4s", fleet.url("gone"), "1s"),
    ];
    std::fs::write(&file, config(&data, api, metrics, "", &first)).expect("write");
    let cfg = file.to_string_lossy().to_string();
    let out = Command::new(BIN)
        .args(["admin", "create-token", "--config", &cfg, "--name", "ops"])
        .output()
        .expect("create-token");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();

    let log = dir.path().join("serve.log");
    let child = Command::new(BIN)
        .args(["serve", "--config", &cfg])
        .env_remove("RUST_LOG")
        .env_remove("POLLSTER_LOG_LEVEL")
        .env_remove("POLLSTER_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("serve starts");
    let server = Server {
        child,
        log,
        api: format!("http://127.0.0.1:{api}"),
        metrics: format!("http://127.0.0.1:{metrics}"),
        token,
        client: reqwest::Client::new(),
    };
    server.wait_ready().await;
    let before = server
        .wait_for("every instance polled, a dead letter and an open breaker", |h| {
            dead_letter(h, "dead").is_some()
                && breaker(h, "tripped").is_some_and(|b| b["state"] == "open")
                && staleness(h, "keep").is_some_and(|s| !s["lastSuccess"].is_null())
                && staleness(h, "gone").is_some_and(|s| !s["lastSuccess"].is_null())
        })
        .await;
    let m = server.metrics("/metrics").await;
    assert!(m.contains("pollster_config_last_reload_successful 1"), "{m}");
    assert!(m.contains("pollster_config_reloads_total{result=\"success\"} 0"), "{m}");
    assert!(durations_by_instance(&m), "the histogram has instance by default: {m}");
    assert!(server.metrics("/values").await.contains("name=\"gone\""));

    // The edit: `gone` removed, `new` added, `tripped` changed (its timeout),
    // `keep` and `dead` untouched; a listener setting that needs a restart;
    // and the duration histogram without `instance`, which applies at once.
    let second = [
        ("keep", "hourly", fleet.url("keep"), "1s"),
        ("dead", "every4s", fleet.url("dead"), "1s"),
        ("tripped", "every4s", fleet.url("tripped"), "2s"),
        ("new", "every4s", fleet.url("new"), "1s"),
    ];
    std::fs::write(
        &file,
        format!(
            "[metrics]\nper_instance_histograms = false\n\n{}",
            config(&data, api, metrics, "max_connections = 100\n", &second)
        ),
    )
    .expect("write");
    let keep_hits = fleet.hits("keep");
    server.hangup();
    let after = server
        .wait_for("the new instance polled", |h| {
            staleness(h, "new").is_some_and(|s| !s["lastSuccess"].is_null())
        })
        .await;
    let gone_hits = fleet.hits("gone");

    // Unchanged and changed instances kept their state.
    for key in ["nextRun", "failures", "since"] {
        assert_eq!(
            dead_letter(&after, "dead").expect("still dead-lettered")[key],
            dead_letter(&before, "dead").expect("dead-lettered")[key],
            "the dead-letter entry's {key} is kept"
        );
    }
    let (b0, b1) = (
        breaker(&before, "tripped").expect("open"),
        breaker(&after, "tripped").expect("still open"),
    );
    assert_eq!(b1["state"], "open");
    assert_eq!(b1["retryAt"], b0["retryAt"], "the changed instance keeps its breaker");
    assert_eq!(
        staleness(&after, "keep").expect("keep")["lastSuccess"],
        staleness(&before, "keep").expect("keep")["lastSuccess"],
        "the unchanged instance keeps its record"
    );
    assert_eq!(fleet.hits("keep"), keep_hits, "and its next run (an hour away)");

    // The removed one is gone: from the API, the health, `/values`, polling.
    assert!(staleness(&after, "gone").is_none(), "{after}");
    assert_eq!(server.get("/api/instances/gone").await.0, 404);
    let list = server.get("/api/instances").await.1;
    assert!(has_instance(&list, "new") && !has_instance(&list, "gone"), "{list}");
    let values = server.metrics("/values").await;
    assert!(!values.contains("name=\"gone\""), "{values}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(fleet.hits("gone"), gone_hits, "a removed instance is not polled");

    let m = server.metrics("/metrics").await;
    assert!(m.contains("pollster_config_reloads_total{result=\"success\"} 1"), "{m}");
    assert!(m.contains("pollster_config_last_reload_successful 1"), "{m}");
    assert!(!durations_by_instance(&m), "{m}");
    assert!(
        m.contains("pollster_monitor_poll_duration_seconds_count{instance_type=\"every4s\",group=\"probe\"}"),
        "{m}"
    );
    assert!(
        m.contains("pollster_monitor_poll_total{instance_type=\"hourly\",instance=\"keep\""),
        "{m}"
    );
    let log = server.log();
    assert!(log.contains("config reloaded"), "{log}");
    assert!(
        log.contains("server.max_connections changed in the config file; it takes effect at the next start"),
        "{log}"
    );
    let audit = server.get("/api/admin/audit").await.1;
    let reloads: Vec<&Value> = audit["entries"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["action"] == "config.reload").collect())
        .unwrap_or_default();
    assert_eq!(reloads.len(), 1, "{audit}");
    assert_eq!(reloads[0]["actor"], "signal", "{audit}");

    // A bad file: nothing changes, the metric says so, the ERROR and the
    // API's 422 name the key.
    std::fs::write(
        &file,
        config(&data, api, metrics, "", &second).replace("floor = \"4s\"", "floor = \"soon\""),
    )
    .expect("write");
    server.hangup();
    let start = Instant::now();
    while !server.log().contains("config reload failed") {
        assert!(start.elapsed() < Duration::from_secs(10), "no ERROR: {}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("config reload failed"))
        .expect("the ERROR line");
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("types[1].groups[0].floor"), "{line}");
    assert!(line.contains("soon"), "{line}");
    let m = server.metrics("/metrics").await;
    assert!(m.contains("pollster_config_last_reload_successful 0"), "{m}");
    assert!(m.contains("pollster_config_reloads_total{result=\"failure\"} 1"), "{m}");
    let (status, body) = server.reload_api().await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "types[1].groups[0].floor", "{body}");
    let new_hits = fleet.hits("new");
    let h = server
        .wait_for("everything still polls", |h| {
            staleness(h, "new").is_some() && dead_letter(h, "dead").is_some()
        })
        .await;
    assert!(
        staleness(&h, "keep").is_some() && staleness(&h, "gone").is_none(),
        "{h}"
    );
    let start = Instant::now();
    while fleet.hits("new") <= new_hits {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the 4 s instance stopped polling"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Fixed again, through the API, with a new log level: 200 with what
    // changed.
    let fixed = config(&data, api, metrics, "max_connections = 100\n", &second);
    std::fs::write(&file, format!("[log]\nlevel = \"warn\"\n\n{fixed}")).expect("write");
    let (status, body) = server.reload_api().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["logLevelChanged"], true, "{body}");
    assert_eq!(body["instancesAdded"], serde_json::json!([]), "{body}");
    assert_eq!(
        body["restartNeeded"],
        serde_json::json!(["server.max_connections"]),
        "{body}"
    );
    let m = server.metrics("/metrics").await;
    assert!(m.contains("pollster_config_last_reload_successful 1"), "{m}");
    assert!(durations_by_instance(&m), "[metrics] gone: the default again: {m}");
    drop(server);
    fleet.stop().await;
}

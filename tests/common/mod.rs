//! Shared helpers for integration tests: the real server in-process on port 0,
//! a simulated fleet on loopback, and typed request helpers.
#![allow(dead_code)]

pub mod auth_target;
pub mod paused;
// The port helper is the torture harness's (it is also built into examples/torture.rs).
pub(crate) use crate::torture::port;
pub mod promtool;
pub mod webdriver;

pub use port::free_port;

use pollster::app::Application;
use pollster::config::{self, Config};
use pollster::fleet::{Behaviour, Fleet};
use pollster::model::{GroupDef, InstanceConfig, TypeDef};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub struct TestApp {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub token: String,
    pub client: reqwest::Client,
    pub fleet: Fleet,
    pub data_dir: tempfile::TempDir,
    /// The running server's database (for checks a client cannot make).
    store: Option<pollster::store::Store>,
    config: Config,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

/// A type whose one group polls as fast as the adaptive bounds allow, so the
/// failure rules run in milliseconds.
pub fn fast_type() -> TypeDef {
    TypeDef {
        name: "fast".into(),
        groups: vec![GroupDef::new("probe", "", 1, Duration::from_millis(100))],
    }
}

/// A type whose one group keeps its body and turns the fleet's answer
/// (`{"instance": NAME, "status": "ok"}`, plus `"seq": N` when changing)
/// into two metrics.
pub fn valued_type() -> pollster::model::TypeDef {
    let mut g = pollster::model::GroupDef::new("probe", "", 1, Duration::from_millis(100));
    g.keep_body = true;
    for rule in [
        "metric = \"fleet_up\"\nhelp = \"The target answers ok\"\nvalue = \"/status\"\nmap = { ok = 1 }\nmap_default = 0\nlabels = { name = \"/instance\" }",
        "metric = \"fleet_requests_total\"\nhelp = \"Requests the target has answered\"\nkind = \"counter\"\nvalue = \"/seq\"",
    ] {
        g.values.push(toml::from_str(rule).expect("rule"));
    }
    pollster::model::TypeDef {
        name: "valued".into(),
        groups: vec![g],
    }
}

pub fn instance(name: &str, type_name: &str, url: String) -> InstanceConfig {
    InstanceConfig {
        timeout: Duration::from_millis(500),
        max_response_bytes: 1 << 20,
        ..InstanceConfig::new(name, type_name, &url)
    }
}

/// Config with failure rules shortened to milliseconds and adaptive bounds
/// of 100 ms … 1 s.
pub fn fast_config(env: &BTreeMap<String, String>) -> Config {
    let mut c = config::load(None, env).expect("default config loads");
    let m = &mut c.monitoring_file;
    m.adaptive.min_interval = Duration::from_millis(100);
    m.adaptive.base_interval = Duration::from_millis(200);
    m.adaptive.max_interval = Duration::from_secs(1);
    m.failure.backoff_initial = Duration::from_millis(150);
    m.failure.backoff_jitter = 0.0;
    m.failure.backoff_max = Duration::from_secs(2);
    m.failure.dead_letter_recheck = Duration::from_millis(1500);
    m.scheduler.state_flush_interval = Duration::from_millis(100);
    c.types.push(fast_type());
    c
}

impl TestApp {
    /// Start the fleet, then the app with one `fast` instance per fleet member.
    pub async fn spawn(members: Vec<(&str, Behaviour)>) -> TestApp {
        Self::spawn_with(members, &BTreeMap::new(), |_| {}).await
    }

    pub async fn spawn_with(
        members: Vec<(&str, Behaviour)>,
        env: &BTreeMap<String, String>,
        tweak: impl FnOnce(&mut Config),
    ) -> TestApp {
        let fleet = Fleet::start(
            "127.0.0.1:0".parse().expect("addr"),
            members.iter().map(|(n, b)| (n.to_string(), b.clone())).collect(),
        )
        .await
        .expect("fleet starts");
        let data_dir = tempfile::tempdir().expect("tempdir");
        let mut c = fast_config(env);
        c.server.data_dir = data_dir.path().to_path_buf();
        c.instances = members.iter().map(|(n, _)| instance(n, "fast", fleet.url(n))).collect();
        tweak(&mut c);
        Self::start(fleet, data_dir, c).await
    }

    /// [`TestApp::spawn_with`] with no fleet members, on an existing data
    /// directory (one [`TestApp::keep_data_dir`] gave back).
    pub async fn spawn_in(data_dir: tempfile::TempDir, tweak: impl FnOnce(&mut Config)) -> TestApp {
        let fleet = Fleet::start("127.0.0.1:0".parse().expect("addr"), vec![])
            .await
            .expect("fleet starts");
        let mut c = fast_config(&BTreeMap::new());
        c.server.data_dir = data_dir.path().to_path_buf();
        tweak(&mut c);
        Self::start(fleet, data_dir, c).await
    }

    async fn start(fleet: Fleet, data_dir: tempfile::TempDir, c: Config) -> TestApp {
        let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let app = Application::build_with_listeners(c.clone(), api, metrics)
            .await
            .expect("app builds");
        let (token, _) = app
            .store()
            .create_token(
                "tests",
                pollster::store::TokenScope::Admin,
                pollster::model::Timestamp::now(),
            )
            .expect("token");
        let addr = app.api_addr();
        let metrics_addr = app.metrics_addr();
        let store = app.store();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            app.run_until_stopped(async {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
        });
        TestApp {
            addr,
            metrics_addr,
            token,
            // The server closes connections idle for 10 s.
            client: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(5))
                .build()
                .expect("client"),
            fleet,
            data_dir,
            store: Some(store),
            config: c,
            stop: Some(tx),
            server: Some(server),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("request")
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let r = self.get(path).await;
        assert!(r.status().is_success(), "GET {path}: {}", r.status());
        r.json().await.expect("json")
    }

    pub async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.client.request(method, self.url(path)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// One scrape of the metrics listener.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.metrics_addr))
            .await
            .expect("scrape")
            .text()
            .await
            .expect("metrics text")
    }

    pub async fn health(&self) -> Value {
        self.get_json("/api/monitoring/scheduler/health").await
    }

    /// Poll the health API until `pred` holds; panic with the last document
    /// after `within`.
    pub async fn wait_health(&self, within: Duration, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let h = self.health().await;
            if pred(&h) {
                return h;
            }
            if start.elapsed() > within {
                panic!("timed out waiting for {what}; last health: {h:#}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop gracefully and start again on the same data directory and fleet.
    pub async fn restart(mut self) -> TestApp {
        self.shutdown().await;
        let fleet = std::mem::replace(
            &mut self.fleet,
            Fleet::start("127.0.0.1:0".parse().expect("addr"), vec![])
                .await
                .expect("fleet"),
        );
        let data_dir = std::mem::replace(&mut self.data_dir, tempfile::tempdir().expect("tempdir"));
        Self::start(fleet, data_dir, self.config.clone()).await
    }

    /// The running server's database (for checks a client cannot make).
    pub fn store(&self) -> &pollster::store::Store {
        self.store.as_ref().expect("the server runs")
    }

    async fn shutdown(&mut self) {
        // Let go of the database first: the server waits for every handle.
        self.store = None;
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            let _ = s.await;
        }
    }

    /// Stop gracefully and hand back the data directory for inspection.
    pub async fn keep_data_dir(mut self) -> tempfile::TempDir {
        self.shutdown().await;
        std::mem::replace(&mut self.data_dir, tempfile::tempdir().expect("tempdir"))
    }

    pub async fn stop(mut self) {
        self.store = None;
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            let _ = s.await;
        }
    }
}

pub fn breaker<'a>(h: &'a Value, instance: &str) -> Option<&'a Value> {
    h["breakers"].as_array()?.iter().find(|b| b["instance"] == instance)
}

pub fn dead_letter<'a>(h: &'a Value, instance: &str) -> Option<&'a Value> {
    h["deadLetter"]["tasks"]
        .as_array()?
        .iter()
        .find(|b| b["instance"] == instance)
}

pub fn staleness<'a>(h: &'a Value, instance: &str) -> Option<&'a Value> {
    h["staleness"].as_array()?.iter().find(|b| b["instance"] == instance)
}

/// The `pollster` binary run with `args` (no `RUST_LOG`, no
/// `POLLSTER_SECRET_KEY_FILE` from the caller): its exit code, and its
/// standard output followed by its standard error.
pub fn run_pollster(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pollster"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("POLLSTER_SECRET_KEY_FILE")
        .output()
        .expect("binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

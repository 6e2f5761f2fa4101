//! Crash torture of change-event delivery: the real `pollster` binary ships
//! its events to a receiver on loopback (in this process) that is down
//! (503), slow, or up, while operator actions are made through the API, and
//! is killed with SIGKILL with change events still queued; a last start
//! with the receiver up must deliver every operator action that the API
//! acknowledged (2xx), each with an `id`, and the same `id` every time it
//! arrives. Lean on purpose: a handful of kills, no fleet process (the
//! instances it adds poll the receiver itself, which answers 404, so
//! breaker and dead-letter events join the outbox too).

use crate::torture::port::try_free_port;
use axum::extract::State;
use axum::http::StatusCode;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 503, nothing recorded.
    Down,
    /// 200 after a delay (long enough for a kill to land mid-request).
    Slow,
    Up,
}

#[derive(Default)]
struct Received {
    mode: Option<Mode>,
    /// Every event in a request answered 200, in arrival order.
    events: Vec<Value>,
    /// Requests refused or answered, by mode.
    requests: BTreeMap<String, u64>,
}

#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Received>>);

impl Receiver {
    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn ingest(State(r): State<Receiver>, body: String) -> StatusCode {
    let mode = r.lock().mode.unwrap_or(Mode::Down);
    *r.lock().requests.entry(format!("{mode:?}")).or_default() += 1;
    match mode {
        Mode::Down => return StatusCode::SERVICE_UNAVAILABLE,
        Mode::Slow => tokio::time::sleep(Duration::from_millis(400)).await,
        Mode::Up => {}
    }
    let events: Vec<Value> = body.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    r.lock().events.extend(events);
    StatusCode::OK
}

#[derive(Debug, Clone)]
pub struct Options {
    pub pollster: PathBuf,
    pub seed: u64,
    pub kills: usize,
    /// Operator actions tried per run (before its kill).
    pub actions: (usize, usize),
    pub work_dir: PathBuf,
}

#[derive(Debug, Default)]
pub struct Report {
    pub kills: usize,
    /// Operator actions the API answered 2xx.
    pub acknowledged: usize,
    /// Of those, delivered before the last start.
    pub delivered_before_last: usize,
    /// Acknowledged actions never delivered.
    pub missing: Vec<String>,
    /// Change events received without an `id`.
    pub without_id: usize,
    /// Change events received.
    pub change_events: usize,
    /// Ids received more than once (allowed: at least once).
    pub redelivered: usize,
    /// Ids received twice with different content.
    pub id_conflicts: usize,
    pub requests: BTreeMap<String, u64>,
    pub duration: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "event torture: {} kills, {} operator actions acknowledged ({} delivered before the last start), \
             {} change events received ({} ids more than once, {} conflicting), {} without id, {} missing, \
             receiver requests {:?}, {:.1} s",
            self.kills,
            self.acknowledged,
            self.delivered_before_last,
            self.change_events,
            self.redelivered,
            self.id_conflicts,
            self.without_id,
            self.missing.len(),
            self.requests,
            self.duration.as_secs_f64()
        )
    }
}

/// `pollster serve`, killed with SIGKILL when dropped.
struct Server(Child);

impl Server {
    fn start(pollster: &Path, config: &Path, log: &Path) -> Result<Server, String> {
        Ok(Server(crate::torture::procs::spawn_serve(pollster, config, log)?))
    }

    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

async fn wait_ready(http: &reqwest::Client, api: &str, server: &mut Server) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(format!("the server exited on start: {status}"));
        }
        if matches!(http.get(format!("{api}/readyz")).send().await, Ok(r) if r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("the server did not answer within 30 s".into())
}

fn is_change(kind: &str) -> bool {
    matches!(kind, "breaker" | "dead_letter" | "settings" | "operator" | "pool")
}

/// Runs the torture. `Err` when it cannot run at all; what it finds is in
/// the report.
pub async fn run(opts: &Options) -> Result<Report, String> {
    let began = Instant::now();
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut report = Report::default();
    std::fs::create_dir_all(&opts.work_dir).map_err(|e| format!("{}: {e}", opts.work_dir.display()))?;

    let rx = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let rx_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let app = axum::Router::new()
        .route("/ingest", axum::routing::post(ingest))
        .with_state(rx.clone());
    let receiver = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let data = opts.work_dir.join("data");
    let (api_port, metrics_port) = (try_free_port()?, try_free_port()?);
    let config = opts.work_dir.join("pollster.toml");
    let log = opts.work_dir.join("pollster.log");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{api_port}\"\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\
             data_dir = \"{}\"\n\n[scheduler]\nstate_flush_interval = \"100ms\"\n\n\
             [sink]\nurl = \"http://{rx_addr}/ingest\"\nbuffering = \"50ms\"\nbatch_size = 20\n",
            data.display()
        ),
    )
    .map_err(|e| format!("{}: {e}", config.display()))?;
    let token = crate::torture::procs::create_token(&opts.pollster, &config, "events")?;
    let api = format!("http://127.0.0.1:{api_port}");
    // The server closes a connection idle for 10 s; a pooled one is not
    // reused near that moment.
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;

    let mut acknowledged: Vec<String> = Vec::new();
    let mut next = 0;
    for kill in 0..opts.kills {
        // Mostly down or slow, so events are queued when the kill lands.
        let mode = match rng.random_range(0..10) {
            0..=4 => Mode::Down,
            5..=7 => Mode::Slow,
            _ => Mode::Up,
        };
        rx.lock().mode = Some(mode);
        let mut server = Server::start(&opts.pollster, &config, &log)?;
        wait_ready(&http, &api, &mut server)
            .await
            .map_err(|e| format!("start {}: {e}", kill + 1))?;
        let actions = rng.random_range(opts.actions.0..=opts.actions.1);
        for _ in 0..actions {
            let name = format!("ev-{next}");
            next += 1;
            // Polled, these answer 404 from the receiver: dead-letter and
            // breaker events join the operator's.
            let body = serde_json::json!({"name": name, "url": format!("http://{rx_addr}/target/{name}")});
            let resp = http
                .post(format!("{api}/api/instances"))
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await;
            if let Ok(r) = resp
                && r.status().is_success()
            {
                acknowledged.push(name);
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..120))).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..400))).await;
        server.kill9();
        report.kills += 1;
    }

    let created = |events: &[Value]| -> BTreeSet<String> {
        events
            .iter()
            .filter(|e| e["kind"] == "operator" && e["action"] == "instance.create")
            .filter_map(|e| e["target"].as_str().map(String::from))
            .collect()
    };
    report.delivered_before_last = {
        let got = created(&rx.lock().events);
        acknowledged.iter().filter(|n| got.contains(*n)).count()
    };
    report.acknowledged = acknowledged.len();

    // The last start, with the receiver up: everything acknowledged arrives.
    rx.lock().mode = Some(Mode::Up);
    let mut server = Server::start(&opts.pollster, &config, &log)?;
    wait_ready(&http, &api, &mut server)
        .await
        .map_err(|e| format!("last start: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = created(&rx.lock().events);
        report.missing = acknowledged.iter().filter(|n| !got.contains(*n)).cloned().collect();
        if report.missing.is_empty() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill9();
    receiver.abort();

    let r = rx.lock();
    let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
    for e in r.events.iter().filter(|e| e["kind"].as_str().is_some_and(is_change)) {
        report.change_events += 1;
        let Some(id) = e["id"].as_str() else {
            report.without_id += 1;
            continue;
        };
        match by_id.get(id) {
            Some(seen) if seen == e => report.redelivered += 1,
            Some(_) => report.id_conflicts += 1,
            None => {
                by_id.insert(id.to_string(), e.clone());
            }
        }
    }
    report.requests = r.requests.clone();
    report.duration = began.elapsed();
    Ok(report)
}

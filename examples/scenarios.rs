//! Scheduling quality against a rate-limited org API (issue #16), in real
//! time: `tests/it/scheduling.rs`'s scenarios with the release binary as a
//! separate process, so a restart can be a real SIGKILL. Results and how to
//! read them: docs/BENCHMARKS.md, section 9.
//!
//! ```text
//! cargo build --release --bin pollster --example scenarios
//! target/release/examples/scenarios --scenario a
//! target/release/examples/scenarios --scenario b
//! target/release/examples/scenarios --scenario b --restart-at 240
//! ```
//!
//! A loopback HTTP server plays a Meraki-like organization: one token bucket
//! of 10 rps with a burst of 10, answering 429 with `Retry-After: 1` when it
//! is empty, which another integration drains too (2 rps and once the whole
//! bucket for half a second in scenario A, 6 rps in scenario B). It also
//! takes Pollster's event sink, to see the `pool` events. Pollster runs
//! `pollster serve` on a generated config: 18 instances of a four-group type
//! (status p1, devices p2, health p3, inventory p4) in one pool of 10 rps ×
//! 0.8 with burst 10, profile `full`. The org records every request it
//! answered; the pool's plan and effective budget are read from the
//! appliance every second (`/api/monitoring/scheduler/groups`, `/metrics`).
//! The run ends with the table per minute and the verdict on each goal.

#[path = "common/release.rs"]
mod release;

use clap::{Parser, ValueEnum};
use pollster::fleet::sim::org::{GROUPS, INSTANCES, OrgBucket, POOL, SHARE_RPS, incident};
use release::default_bin;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When, in scenario A, the other integration empties the whole bucket (for
/// `org::DRAIN_MS`).
const DRAIN_AT_MS: u64 = 120_000;
/// 429s in this window after a (re)start are the start's own.
const COLD_START_MS: u64 = 10_000;
/// Stale: unpolled for longer than max(3 × the interval, this).
const STALE_FLOOR_S: f64 = 120.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// A lone 429: the other integration spends 2 rps and once takes the
    /// whole bucket.
    A,
    /// Sustained overload: the other integration spends 6 rps.
    B,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// Length of the run.
    #[arg(long, default_value_t = 9)]
    minutes: u64,
    /// SIGKILL Pollster this many seconds into the run and start it again
    /// on the same data directory.
    #[arg(long)]
    restart_at: Option<u64>,
    /// The `pollster` binary (default: next to this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Keep the config, Pollster's log, the org's request log and the
    /// samples in this directory (default: a temporary one, removed).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() {
    let args = Args::parse();
    let bin = args.bin.clone().unwrap_or_else(default_bin);
    assert!(
        bin.exists(),
        "{} not found: run `cargo build --release --bin pollster` first",
        bin.display()
    );
    let temp = tempfile::tempdir().expect("a temporary directory");
    let dir = args.out.clone().unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("the output directory");

    let origin = Instant::now();
    let (other_rps, drain_at_ms) = match args.scenario {
        Scenario::A => (2, Some(DRAIN_AT_MS)),
        Scenario::B => (6, None),
    };
    let org = OrgApi::new(origin, other_rps, drain_at_ms);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    let org_addr = runtime.block_on(serve_org(org.clone()));
    let appliance = Appliance::configure(&bin, &dir, org_addr);
    eprintln!(
        "scenario {:?}: org API on {org_addr}, Pollster API on {}, metrics on {}; {} minutes{}",
        args.scenario,
        appliance.api,
        appliance.metrics,
        args.minutes,
        args.restart_at
            .map(|s| format!(", SIGKILL and restart at {s} s"))
            .unwrap_or_default()
    );

    // The run's clock starts with the process: its first 10 s are the cold start.
    org.restart_clock();
    let mut child = appliance.start();
    let end = Duration::from_secs(args.minutes * 60);
    let mut samples = Vec::new();
    let mut restarted_ms = None;
    let mut next = Duration::from_secs(1);
    while next <= end {
        std::thread::sleep(next.saturating_sub(org.elapsed()));
        if let Some(at) = args.restart_at
            && restarted_ms.is_none()
            && next >= Duration::from_secs(at)
        {
            child.kill_hard();
            restarted_ms = Some(org.elapsed().as_millis() as u64);
            child = appliance.start();
            eprintln!("{:>4} s: SIGKILL, started again", at);
        }
        samples.push(Sample::read(&appliance, org.elapsed()));
        if next.as_secs() % 60 == 0 {
            eprintln!(
                "{:>4} s: {}",
                next.as_secs(),
                samples.last().map(Sample::line).unwrap_or_default()
            );
        }
        next += Duration::from_secs(1);
    }
    child.stop();
    let end_ms = end.as_millis() as u64;
    let calls = org.calls();
    let events = org.pool_events();
    let log = std::fs::read_to_string(dir.join("pollster.log")).unwrap_or_default();
    write_records(&dir, &calls, &samples);

    let f = Figures::of(&calls, end_ms);
    print_minutes(&f, &samples);
    print_timeline(&samples);
    let said = Said::of(&log, &events);
    let verdicts = goals(args.scenario, &f, &samples, &said, restarted_ms);
    println!();
    print_totals(&f, &said, &samples, restarted_ms);
    println!();
    println!("| goal | figure | verdict |");
    println!("|---|---|---|");
    for v in &verdicts {
        println!("| {} | {} | {} |", v.goal, v.figure, v.verdict());
    }
    if args.out.is_some() {
        eprintln!(
            "kept in {}: pollster.toml, pollster.log, calls.csv, samples.csv",
            dir.display()
        );
    }
}

// ---------------------------------------------------------------------------
// The org API

/// One request of Pollster's that the org API answered.
#[derive(Debug, Clone)]
struct Call {
    instance: String,
    group: String,
    /// Milliseconds after the run's origin.
    at_ms: u64,
    limited: bool,
}

/// A `pool` event the sink received.
#[derive(Debug, Clone)]
struct PoolEvent {
    at_ms: u64,
    transition: String,
    groups: Vec<String>,
}

/// The fake org API: its bucket, what it answered, and the sink's events.
struct OrgApi {
    origin: Mutex<Instant>,
    bucket: Mutex<OrgBucket>,
    calls: Mutex<Vec<Call>>,
    events: Mutex<Vec<PoolEvent>>,
    /// A counter in the bodies that change at every poll.
    changes: AtomicU64,
}

impl OrgApi {
    fn new(origin: Instant, other_rps: u64, drain_at_ms: Option<u64>) -> Arc<OrgApi> {
        Arc::new(OrgApi {
            origin: Mutex::new(origin),
            bucket: Mutex::new(OrgBucket::new(other_rps, drain_at_ms)),
            calls: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            changes: AtomicU64::new(1_000),
        })
    }

    /// Time 0 of the run is now (the org's bucket starts full then).
    fn restart_clock(&self) {
        *lock(&self.origin) = Instant::now();
    }

    fn elapsed(&self) -> Duration {
        lock(&self.origin).elapsed()
    }

    fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    fn pool_events(&self) -> Vec<PoolEvent> {
        lock(&self.events).clone()
    }

    /// Take a token for one request at `at_ms`: false when the bucket is
    /// empty (a 429).
    fn admit(&self, at_ms: u64) -> bool {
        lock(&self.bucket).admit(at_ms)
    }

    /// A group's answer. Status changes at every poll during an incident
    /// (minutes 2, 5 and 8: adaptive polling goes towards its 5 s minimum,
    /// then back to its 10 s base) and every 2 minutes otherwise; devices
    /// never; health and inventory at every poll, as counters do (so they
    /// run at their planned intervals and do not back off).
    fn body(&self, instance: &str, group: &str, at_ms: u64) -> Option<Value> {
        let change = || self.changes.fetch_add(1, Ordering::Relaxed);
        Some(match group {
            "status" => {
                let version = if incident(at_ms) { change() } else { at_ms / 120_000 };
                json!({"instance": instance, "online": 40, "alerting": version % 3, "version": version})
            }
            "devices" => json!([{"serial": format!("{instance}-0001"), "model": "MX68"},
                                {"serial": format!("{instance}-0002"), "model": "MR46"}]),
            "health" => json!({"instance": instance, "uplinks": [{"interface": "wan1", "latency_ms": change() % 40}]}),
            "inventory" => json!({"instance": instance, "checked": change()}),
            _ => return None,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serve the org API (`GET /i/{instance}/{group}`) and the event sink
/// (`POST /sink`) on a loopback port.
async fn serve_org(org: Arc<OrgApi>) -> SocketAddr {
    use axum::extract::{Path, State};
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};

    async fn poll(State(org): State<Arc<OrgApi>>, Path((instance, group)): Path<(String, String)>) -> Response {
        let at_ms = org.elapsed().as_millis() as u64;
        let admitted = org.admit(at_ms);
        let json = [(header::CONTENT_TYPE, "application/json")];
        let answer = if admitted {
            match org.body(&instance, &group, at_ms) {
                Some(body) => (StatusCode::OK, json, body.to_string()).into_response(),
                None => return StatusCode::NOT_FOUND.into_response(),
            }
        } else {
            let body = r#"{"errors":["API rate limit exceeded for organization"]}"#;
            (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "1")], json, body).into_response()
        };
        lock(&org.calls).push(Call {
            instance,
            group,
            at_ms,
            limited: !admitted,
        });
        answer
    }

    async fn sink(State(org): State<Arc<OrgApi>>, body: String) -> StatusCode {
        let at_ms = org.elapsed().as_millis() as u64;
        let mut events = lock(&org.events);
        for line in body.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if v["kind"] == "pool" {
                events.push(PoolEvent {
                    at_ms,
                    transition: v["transition"].as_str().unwrap_or("?").to_string(),
                    groups: v["groups"]
                        .as_array()
                        .map(|g| g.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                        .unwrap_or_default(),
                });
            }
        }
        StatusCode::OK
    }

    let app = axum::Router::new()
        .route("/i/{instance}/{group}", get(poll))
        .route("/sink", post(sink))
        .with_state(org);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("a local address");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("org API: {e}");
        }
    });
    addr
}

// ---------------------------------------------------------------------------
// The appliance

/// How to start `pollster serve` on the run's config and data directory.
struct Appliance {
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    api: SocketAddr,
    metrics: SocketAddr,
    /// A read token for the plan (`/api/monitoring/scheduler/groups`).
    token: String,
}

impl Appliance {
    /// Write the config (the issue's setup) and create an API token.
    fn configure(bin: &Path, dir: &Path, org: SocketAddr) -> Appliance {
        let (api, metrics) = (free_port(), free_port());
        let mut config = format!(
            "[server]\nlisten = \"{api}\"\nmetrics_listen = \"{metrics}\"\ndata_dir = \"{}\"\n\n\
             [scheduler]\nprofile = \"full\"\n\n\
             [sink]\nurl = \"http://{org}/sink\"\nbuffering = \"1s\"\n\n\
             [[budgets]]\nname = \"{POOL}\"\nrequests_per_second = 10.0\nshared_fraction = 0.8\nburst = 10\n\n\
             [[types]]\nname = \"net\"\n",
            dir.join("data").display(),
        );
        for (name, priority, floor) in GROUPS {
            let _ = write!(
                config,
                "[[types.groups]]\nname = \"{name}\"\npath = \"/{name}\"\npriority = {priority}\nfloor = \"{floor}s\"\n"
            );
        }
        for i in 0..INSTANCES {
            let _ = write!(
                config,
                "\n[[instances]]\nname = \"net-{i:02}\"\ntype = \"net\"\nurl = \"http://{org}/i/net-{i:02}\"\n\
                 budget = \"{POOL}\"\ntimeout = \"5s\"\n"
            );
        }
        let file = dir.join("pollster.toml");
        std::fs::write(&file, config).expect("the config is written");
        let out = Command::new(bin)
            .args(["admin", "create-token", "--config"])
            .arg(&file)
            .args(["--name", "scenarios"])
            .output()
            .expect("pollster admin create-token runs");
        assert!(
            out.status.success(),
            "create-token: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Appliance {
            bin: bin.to_path_buf(),
            config: file,
            log: dir.join("pollster.log"),
            api: api.parse().expect("an address"),
            metrics: metrics.parse().expect("an address"),
            token: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        }
    }

    /// `pollster serve`, its log (INFO and up) appended to `pollster.log`.
    fn start(&self) -> Running {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the log file opens");
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        Running(Some(child))
    }
}

/// A running `pollster serve`; stopped (SIGTERM) when dropped.
struct Running(Option<Child>);

impl Running {
    /// SIGKILL (`kill -9`): no shutdown flush, as a crash.
    fn kill_hard(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then SIGKILL if it has not stopped within 20 s.
    fn stop(&mut self) {
        let Some(mut c) = self.0.take() else {
            return;
        };
        let _ = Command::new("kill").arg(c.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("pollster did not stop within 20 s of SIGTERM; killing it");
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("a local address").to_string()
}

/// A `GET` over a fresh connection with a 2 s timeout: the body of a 200,
/// or `None` (Pollster may be down: the restart).
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
}

// ---------------------------------------------------------------------------
// What the appliance says, every second

/// The pool as the appliance showed it at one second of the run.
#[derive(Debug, Default, Clone)]
struct Sample {
    at_s: u64,
    /// The plan could be read (Pollster was up).
    up: bool,
    effective_rps: f64,
    demand_rps: f64,
    target_rps: f64,
    over_budget: bool,
    paused: bool,
    /// Planned interval of each group, `None` while shed.
    planned: BTreeMap<String, Option<f64>>,
    /// `pollster_scheduler_rate_limited_total` and `…_aimd_decreases_total`
    /// of the pool (since the process started).
    rate_limited: Option<u64>,
    decreases: Option<u64>,
}

impl Sample {
    fn read(a: &Appliance, at: Duration) -> Sample {
        let mut s = Sample {
            at_s: at.as_secs_f64().round() as u64,
            ..Sample::default()
        };
        let plan = get(a.api, "/api/monitoring/scheduler/groups", Some(&a.token))
            .and_then(|b| serde_json::from_str::<Value>(&b).ok());
        let pool = plan.as_ref().and_then(|p| {
            p["pools"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["name"] == POOL))
        });
        if let Some(p) = pool {
            s.up = true;
            s.effective_rps = p["effective_budget_rps"].as_f64().unwrap_or(f64::NAN);
            s.demand_rps = p["total_demand_rps"].as_f64().unwrap_or(f64::NAN);
            s.target_rps = p["target_rps"].as_f64().unwrap_or(f64::NAN);
            s.over_budget = p["over_budget"].as_bool().unwrap_or(false);
            s.paused = p.get("paused_until").is_some_and(|v| !v.is_null());
            for g in p["groups"].as_array().into_iter().flatten() {
                let name = g["name"].as_str().unwrap_or("?").to_string();
                let shed = g["shed"].as_bool().unwrap_or(false);
                s.planned
                    .insert(name, (!shed).then(|| g["interval_seconds"].as_f64()).flatten());
            }
        }
        if let Some(text) = get(a.metrics, "/metrics", None) {
            s.rate_limited = counter(&text, "pollster_scheduler_rate_limited_total");
            s.decreases = counter(&text, "pollster_scheduler_aimd_decreases_total");
        }
        s
    }

    fn shed(&self) -> Vec<&str> {
        self.planned
            .iter()
            .filter(|(_, iv)| iv.is_none())
            .map(|(g, _)| g.as_str())
            .collect()
    }

    /// One line for the progress output.
    fn line(&self) -> String {
        if !self.up {
            return "Pollster not answering".into();
        }
        format!(
            "effective budget {:.2} rps, demand {:.2} / target {:.2} rps, shed [{}]{}",
            self.effective_rps,
            self.demand_rps,
            self.target_rps,
            self.shed().join(","),
            if self.paused { ", paused" } else { "" }
        )
    }
}

/// The value of a counter's `pool="org"` series in a Prometheus text page.
fn counter(text: &str, name: &str) -> Option<u64> {
    let prefix = format!("{name}{{pool=\"{POOL}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// The org's request log and the samples as CSV, for a closer look.
fn write_records(dir: &Path, calls: &[Call], samples: &[Sample]) {
    let mut c = String::from("at_ms,instance,group,status\n");
    for call in calls {
        let status = if call.limited { 429 } else { 200 };
        let _ = writeln!(c, "{},{},{},{status}", call.at_ms, call.instance, call.group);
    }
    let _ = std::fs::write(dir.join("calls.csv"), c);
    let mut s =
        String::from("at_s,up,effective_rps,demand_rps,target_rps,over_budget,paused,shed,rate_limited,decreases\n");
    for x in samples {
        let _ = writeln!(
            s,
            "{},{},{:.3},{:.3},{:.3},{},{},{},{},{}",
            x.at_s,
            x.up,
            x.effective_rps,
            x.demand_rps,
            x.target_rps,
            x.over_budget,
            x.paused,
            x.shed().join(" "),
            x.rate_limited.map(|v| v.to_string()).unwrap_or_default(),
            x.decreases.map(|v| v.to_string()).unwrap_or_default(),
        );
    }
    let _ = std::fs::write(dir.join("samples.csv"), s);
}

// ---------------------------------------------------------------------------
// Figures

/// The figures the goals are stated in, from the org's request log.
#[derive(Debug)]
struct Figures {
    end_ms: u64,
    /// Times of the 429s, ms after the origin.
    limited_ms: Vec<u64>,
    /// Requests and 429s in each minute.
    sent: Vec<usize>,
    limited: Vec<usize>,
    /// Successful status polls in each minute: 108 with every task at its
    /// 10 s adaptive base, 216 at its 5 s floor.
    status_polls: Vec<usize>,
    /// Per group and minute: the largest age (time since the last
    /// successful poll, from the origin if none) of any of its tasks, s.
    worst_age_s: BTreeMap<&'static str, Vec<f64>>,
    /// Per group: the longest time any task went without a successful poll.
    longest_gap_s: BTreeMap<&'static str, f64>,
    /// When each priority 1/2 request was sent, ms after the origin.
    p12_ms: Vec<u64>,
}

impl Figures {
    fn of(calls: &[Call], end_ms: u64) -> Figures {
        let minutes = end_ms.div_ceil(60_000) as usize;
        let minute = |ms: u64| ((ms / 60_000) as usize).min(minutes - 1);
        let (mut sent, mut limited) = (vec![0; minutes], vec![0; minutes]);
        let mut status_polls = vec![0; minutes];
        let mut limited_ms = Vec::new();
        let mut p12_ms = Vec::new();
        let mut successes: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
        for c in calls.iter().filter(|c| c.at_ms <= end_ms) {
            sent[minute(c.at_ms)] += 1;
            if GROUPS.iter().any(|g| g.0 == c.group && g.1 <= 2) {
                p12_ms.push(c.at_ms);
            }
            if c.limited {
                limited[minute(c.at_ms)] += 1;
                limited_ms.push(c.at_ms);
            } else {
                if c.group == "status" {
                    status_polls[minute(c.at_ms)] += 1;
                }
                successes.entry((&c.instance, &c.group)).or_default().push(c.at_ms);
            }
        }
        let mut worst_age_s = BTreeMap::new();
        let mut longest_gap_s = BTreeMap::new();
        for (group, _, _) in GROUPS {
            let mut worst = vec![0.0f64; minutes];
            let mut longest = 0u64;
            for i in 0..INSTANCES {
                let instance = format!("net-{i:02}");
                let mut times = vec![0];
                times.extend(successes.get(&(instance.as_str(), group)).into_iter().flatten());
                times.push(end_ms);
                for w in times.windows(2) {
                    let (from, to) = (w[0], w[1]);
                    longest = longest.max(to - from);
                    // The age grows from 0 at `from` to `to - from` at `to`:
                    // in each minute it overlaps, its largest value is at the
                    // minute's end or at `to`, whichever comes first.
                    for (m, worst) in worst.iter_mut().enumerate() {
                        let (m0, m1) = (m as u64 * 60_000, (m as u64 + 1) * 60_000);
                        if from < m1 && to > m0 {
                            *worst = worst.max((to.min(m1) - from) as f64 / 1000.0);
                        }
                    }
                }
            }
            worst_age_s.insert(group, worst);
            longest_gap_s.insert(group, longest as f64 / 1000.0);
        }
        Figures {
            end_ms,
            limited_ms,
            sent,
            limited,
            status_polls,
            worst_age_s,
            longest_gap_s,
            p12_ms,
        }
    }

    /// What priority 1/2 groups sent in the `window_ms` up to `at_ms`, in rps.
    fn p12_rps(&self, at_ms: u64, window_ms: u64) -> f64 {
        let from = at_ms.saturating_sub(window_ms);
        let n = self.p12_ms.iter().filter(|&&t| t > from && t <= at_ms).count();
        n as f64 * 1000.0 / window_ms as f64
    }

    fn limited_between(&self, from_ms: u64, to_ms: u64) -> Vec<u64> {
        self.limited_ms
            .iter()
            .copied()
            .filter(|&t| t >= from_ms && t < to_ms)
            .collect()
    }
}

/// What the appliance said about the pool: its log and its sink events.
#[derive(Debug, Default)]
struct Said {
    /// `(message, count)` of the pool transitions in Pollster's log.
    log: Vec<(&'static str, usize)>,
    events: BTreeMap<String, usize>,
    /// Every event as `transition@seconds`, in order.
    timeline: Vec<String>,
    /// The first `shedding` event's groups.
    shed_groups: Vec<String>,
}

impl Said {
    fn of(log: &str, events: &[PoolEvent]) -> Said {
        let messages = [
            "pool over budget",
            "pool shedding groups",
            "pool restored",
            "a lone HTTP 429",
            "AIMD decrease",
            "AIMD recovered",
            "AIMD resumed",
        ];
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for e in events {
            *counts.entry(e.transition.clone()).or_default() += 1;
        }
        Said {
            log: messages
                .iter()
                .map(|m| (*m, log.lines().filter(|l| l.contains(m)).count()))
                .collect(),
            events: counts,
            timeline: events
                .iter()
                .map(|e| format!("{}@{:.0}s", e.transition, e.at_ms as f64 / 1000.0))
                .collect(),
            shed_groups: events
                .iter()
                .find(|e| e.transition == "shedding")
                .map(|e| e.groups.clone())
                .unwrap_or_default(),
        }
    }

    fn logged(&self, message: &str) -> usize {
        self.log.iter().find(|(m, _)| *m == message).map_or(0, |(_, n)| *n)
    }
}

fn print_minutes(f: &Figures, samples: &[Sample]) {
    println!(
        "| minute | sent | 429 | sent rps | status polls | worst age s: status p1 | devices p2 | health p3 \
         | inventory p4 | planned s: health / inventory (end) | effective budget rps (min / end) | shed (s of 60) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|");
    for m in 0..f.sent.len() {
        let in_minute: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.up && s.at_s > m as u64 * 60 && s.at_s <= (m as u64 + 1) * 60)
            .collect();
        let min = in_minute.iter().map(|s| s.effective_rps).fold(f64::INFINITY, f64::min);
        let last = in_minute.last().map_or(f64::NAN, |s| s.effective_rps);
        let mut shed: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &in_minute {
            for g in s.shed() {
                *shed.entry(g).or_default() += 1;
            }
        }
        let shed: Vec<String> = shed.iter().map(|(g, n)| format!("{g} {n}")).collect();
        let age = |g: &str| f.worst_age_s[g][m];
        let planned = |g: &str| match in_minute.last().and_then(|s| s.planned.get(g)) {
            Some(Some(iv)) => format!("{iv:.0}"),
            Some(None) => "shed".into(),
            None => "?".into(),
        };
        println!(
            "| {} | {} | {} | {:.2} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} / {} | {:.2} / {:.2} | {} |",
            m + 1,
            f.sent[m],
            f.limited[m],
            f.sent[m] as f64 / 60.0,
            f.status_polls[m],
            age("status"),
            age("devices"),
            age("health"),
            age("inventory"),
            planned("health"),
            planned("inventory"),
            min,
            last,
            if shed.is_empty() { "-".into() } else { shed.join(", ") },
        );
    }
}

/// The effective budget every 15 s, with the shed groups when any.
fn print_timeline(samples: &[Sample]) {
    let points: Vec<String> = samples
        .iter()
        .filter(|s| s.at_s % 15 == 0)
        .map(|s| {
            if !s.up {
                return format!("{}s:down", s.at_s);
            }
            let shed = s.shed();
            let mark = if shed.is_empty() {
                String::new()
            } else {
                format!("(shed {})", shed.join("+"))
            };
            format!(
                "{}s:{:.2}{mark}{}",
                s.at_s,
                s.effective_rps,
                if s.paused { "(paused)" } else { "" }
            )
        })
        .collect();
    println!();
    println!("effective budget (rps) every 15 s: {}", points.join(" "));
}

fn print_totals(f: &Figures, said: &Said, samples: &[Sample], restarted_ms: Option<u64>) {
    let sent: usize = f.sent.iter().sum();
    let secs = f.end_ms as f64 / 1000.0;
    println!(
        "total: {sent} requests ({:.2} rps), {} 429s at {:?} s",
        sent as f64 / secs,
        f.limited_ms.len(),
        f.limited_ms.iter().map(|t| *t as f64 / 1000.0).collect::<Vec<_>>()
    );
    let gaps: Vec<String> = f.longest_gap_s.iter().map(|(g, s)| format!("{g} {s:.1}")).collect();
    println!("longest time without a successful poll (s): {}", gaps.join(", "));
    let counters = |pick: fn(&Sample) -> Option<u64>| -> u64 {
        // The counters start again at 0 with each process: add each
        // process's last reading.
        let mut total = 0;
        let mut last = 0;
        for s in samples {
            match pick(s) {
                Some(v) if v < last => {
                    total += last;
                    last = v;
                }
                Some(v) => last = v,
                None => {}
            }
        }
        total + last
    };
    println!(
        "Pollster counted {} 429s (pollster_scheduler_rate_limited_total) and {} AIMD decreases \
         (pollster_scheduler_aimd_decreases_total)",
        counters(|s| s.rate_limited),
        counters(|s| s.decreases)
    );
    let log: Vec<String> = said
        .log
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(m, n)| format!("\"{m}\" ×{n}"))
        .collect();
    println!(
        "log: {}",
        if log.is_empty() {
            "no pool transition".into()
        } else {
            log.join(", ")
        }
    );
    let events: Vec<String> = said.events.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
    println!(
        "sink pool events: {}{}; in order: {}",
        if events.is_empty() {
            "none".into()
        } else {
            events.join(", ")
        },
        if said.shed_groups.is_empty() {
            String::new()
        } else {
            format!(" (shed: {})", said.shed_groups.join(", "))
        },
        said.timeline.join(" ")
    );
    if let Some(at) = restarted_ms {
        let before = samples.iter().rev().find(|s| s.up && s.at_s * 1000 < at);
        let after = samples.iter().find(|s| s.up && s.at_s * 1000 > at);
        println!(
            "restart at {:.1} s: effective budget {} rps before the SIGKILL, {} rps at the first reading after ({})",
            at as f64 / 1000.0,
            before.map_or("?".into(), |s| format!("{:.2}", s.effective_rps)),
            after.map_or("?".into(), |s| format!("{:.2}", s.effective_rps)),
            after.map_or("?".into(), |s| format!("{} s", s.at_s)),
        );
    }
}

// ---------------------------------------------------------------------------
// Goals

/// One goal of the issue and how the run did.
struct Verdict {
    goal: String,
    figure: String,
    /// `None`: the run cannot decide it (too short).
    passed: Option<bool>,
}

impl Verdict {
    fn verdict(&self) -> &'static str {
        match self.passed {
            Some(true) => "PASS",
            Some(false) => "**FAIL**",
            None => "undecided",
        }
    }
}

/// The largest planned interval a group had while it was not shed (its
/// floor if it never had one).
fn largest_planned(samples: &[Sample], group: &str) -> f64 {
    let floor = GROUPS.iter().find(|g| g.0 == group).map_or(0.0, |g| g.2 as f64);
    samples
        .iter()
        .filter_map(|s| s.planned.get(group).copied().flatten())
        .fold(floor, f64::max)
}

/// How far back a sample looks at what priority 1/2 sent.
const P12_WINDOW_MS: u64 = 30_000;
/// The engine compares what groups run at with its plan every 10 s: a
/// plan that lags by up to that long is not a shed of its own.
const REPLAN_S: usize = 10;

/// B: nothing that fits is shed. A sample from minute 3 on that sheds a
/// group although what priority 1 and 2 sent in the last 30 s (the org's
/// request log), plus health and inventory at their caps (the largest
/// interval the plan gave them), was within the effective budget in force.
/// Runs of such samples up to the engine's re-plan check (10 s) are its
/// lag; a longer one fails.
fn nothing_that_fits_is_shed(f: &Figures, samples: &[Sample]) -> Verdict {
    let capped: f64 = GROUPS
        .iter()
        .filter(|g| g.1 >= 3)
        .map(|g| INSTANCES as f64 / largest_planned(samples, g.0))
        .sum();
    let (mut count, mut run, mut longest) = (0usize, 0usize, 0usize);
    let mut worst_at = None;
    for s in samples.iter().filter(|s| s.up && s.at_s >= 180) {
        let fits = f.p12_rps(s.at_s * 1000, P12_WINDOW_MS) + capped <= s.effective_rps;
        if fits && !s.shed().is_empty() {
            count += 1;
            run += 1;
            if run > longest {
                longest = run;
                worst_at = Some(s.at_s + 1 - run as u64);
            }
        } else {
            run = 0;
        }
    }
    Verdict {
        goal: format!(
            "B: nothing that fits is shed (p1/p2 sent in the last 30 s + p3/p4 at their caps, {capped:.2} rps, \
             within the effective budget), beyond a {REPLAN_S} s re-plan lag"
        ),
        figure: format!(
            "{count} samples; longest run {longest} s{}",
            worst_at.map_or(String::new(), |t| format!(" from {t} s"))
        ),
        passed: Some(longest <= REPLAN_S),
    }
}

fn goals(scenario: Scenario, f: &Figures, samples: &[Sample], said: &Said, restarted_ms: Option<u64>) -> Vec<Verdict> {
    let mut v = Vec::new();
    let secs = |ts: &[u64]| format!("{:?} s", ts.iter().map(|t| *t as f64 / 1000.0).collect::<Vec<_>>());
    let cold = f.limited_between(0, COLD_START_MS);
    match scenario {
        Scenario::A => {
            v.push(Verdict {
                goal: "A: at most one 429 in the whole run".into(),
                figure: format!("{} ({})", f.limited_ms.len(), secs(&f.limited_ms)),
                passed: Some(f.limited_ms.len() <= 1),
            });
            v.push(Verdict {
                goal: "A: no 429 from the cold start (first 10 s)".into(),
                figure: format!("{}", cold.len()),
                passed: Some(cold.is_empty()),
            });
            for g in ["health", "inventory"] {
                let bound = (3.0 * largest_planned(samples, g)).max(STALE_FLOOR_S);
                v.push(Verdict {
                    goal: format!("A: {g} never unpolled longer than max(3 × planned, 2 min)"),
                    figure: format!("longest {:.1} s, bound {bound:.0} s", f.longest_gap_s[g]),
                    passed: Some(f.longest_gap_s[g] <= bound),
                });
            }
            v.push(budget_back(f, samples));
        }
        Scenario::B => {
            let late: usize = f.limited.iter().skip(5).sum();
            v.push(Verdict {
                goal: "B: 429s per minute at 0 from minute 6 on".into(),
                figure: format!("per minute {:?}", f.limited),
                passed: (f.limited.len() > 5).then_some(late == 0),
            });
            let shed_seconds = samples.iter().filter(|s| !s.shed().is_empty()).count();
            let over_seconds = samples.iter().filter(|s| s.over_budget).count();
            let stretched = ["health", "inventory"].iter().any(|g| {
                let floor = GROUPS.iter().find(|x| x.0 == *g).map_or(0.0, |x| x.2 as f64);
                samples
                    .last()
                    .is_some_and(|s| s.planned.get(*g).is_some_and(|iv| iv.is_none_or(|iv| iv > floor)))
            });
            let told = said.logged("pool shedding groups") + said.logged("pool over budget");
            let events = said.events.get("shedding").copied().unwrap_or(0)
                + said.events.get("over_budget").copied().unwrap_or(0);
            v.push(Verdict {
                goal: "B: the pool sheds what it must, and says so (log and sink event)".into(),
                figure: format!(
                    "shed {shed_seconds} s, over budget {over_seconds} s, stretched or shed at the end: {stretched}; \
                     {told} WARN lines, {events} sink events"
                ),
                passed: Some((shed_seconds > 0 || stretched) && told > 0 && events > 0),
            });
            // Issue #32: the room is used, 429s stay rare, and what the
            // room carries is stretched rather than shed.
            let mut effective: Vec<f64> = samples
                .iter()
                .filter(|s| s.up && (180..=360).contains(&s.at_s))
                .map(|s| s.effective_rps)
                .collect();
            effective.sort_by(f64::total_cmp);
            let median = effective.get(effective.len() / 2).copied();
            v.push(Verdict {
                goal: "B: median effective budget in minutes 3–6 ≥ 3.2 rps (80 % of the room)".into(),
                figure: median.map_or("no samples".into(), |m| format!("{m:.2} rps")),
                passed: median.map(|m| m >= 3.2),
            });
            let from5 = f.limited_between(5 * 60_000, f.end_ms);
            let worst_minute = f.limited.iter().skip(5).copied().max().unwrap_or(0);
            v.push(Verdict {
                goal: "B: from minute 5 on at most 2 429s, never 2 in a minute".into(),
                figure: format!("{} ({})", from5.len(), secs(&from5)),
                passed: (f.limited.len() > 5).then_some(from5.len() <= 2 && worst_minute <= 1),
            });
            let late: Vec<&Sample> = samples.iter().filter(|s| s.up && s.at_s >= 180).collect();
            let late_shed = late.iter().filter(|s| !s.shed().is_empty()).count();
            v.push(Verdict {
                goal: "B: from minute 3 on, a group shed in at most 15 % of the samples".into(),
                figure: format!("{late_shed} of {} samples", late.len()),
                passed: (!late.is_empty()).then_some(late_shed * 100 <= late.len() * 15),
            });
            v.push(nothing_that_fits_is_shed(f, samples));
            let last_rps = f.sent.last().map_or(0.0, |n| *n as f64 / 60.0);
            v.push(Verdict {
                goal: "B: in the last minute Pollster sends at most the 4 rps left to it".into(),
                figure: format!("{last_rps:.2} rps"),
                passed: Some(last_rps <= 4.0),
            });
        }
    }
    for g in ["status", "devices"] {
        v.push(Verdict {
            goal: format!(
                "{}: {g} never stale (unpolled ≤ 2 min)",
                if scenario == Scenario::B { "B" } else { "A (held)" }
            ),
            figure: format!("longest {:.1} s", f.longest_gap_s[g]),
            passed: Some(f.longest_gap_s[g] <= STALE_FLOOR_S),
        });
    }
    if let Some(at) = restarted_ms {
        let first = f.limited_between(at, at + 60_000);
        v.push(Verdict {
            goal: "restart: at most 2 429s in the first minute after a SIGKILL".into(),
            figure: format!("{} ({})", first.len(), secs(&first)),
            passed: (f.end_ms >= at + 60_000).then_some(first.len() <= 2),
        });
    }
    v
}

/// A: the effective budget back to 90 % of the share within 5 minutes of
/// the last 429.
fn budget_back(f: &Figures, samples: &[Sample]) -> Verdict {
    let goal = "A: effective budget ≥ 90 % of the share within 5 min of the last 429".to_string();
    let Some(&last) = f.limited_ms.last() else {
        let low = samples
            .iter()
            .filter(|s| s.up)
            .map(|s| s.effective_rps)
            .fold(f64::INFINITY, f64::min);
        return Verdict {
            goal,
            figure: format!("no 429; lowest effective budget {low:.2} rps"),
            passed: Some(true),
        };
    };
    let by_s = last / 1000 + 300;
    let back = samples
        .iter()
        .find(|s| s.up && s.at_s * 1000 > last && s.effective_rps >= 0.9 * SHARE_RPS)
        .map(|s| s.at_s);
    let low = samples
        .iter()
        .filter(|s| s.up && s.at_s * 1000 > last)
        .map(|s| s.effective_rps)
        .fold(f64::INFINITY, f64::min);
    let figure = match back {
        Some(t) => format!(
            "last 429 at {:.1} s, lowest after it {low:.2} rps, ≥ 7.2 rps at {t} s",
            last as f64 / 1000.0
        ),
        None => format!(
            "last 429 at {:.1} s, lowest after it {low:.2} rps, never back to 7.2 rps",
            last as f64 / 1000.0
        ),
    };
    let passed = match back {
        Some(t) => Some(t <= by_s),
        None if f.end_ms / 1000 >= by_s => Some(false),
        None => None,
    };
    Verdict { goal, figure, passed }
}

//! meraki-dashboard-exporter and Pollster side by side, each polling its own
//! copy of the simulated Meraki organization in real time (issue #31).
//! Results and how to read them: docs/BENCHMARKS.md, section 10.
//!
//! ```text
//! cargo build --release --bin pollster --example meraki_side
//! target/release/examples/meraki_side --minutes 15
//! target/release/examples/meraki_side --minutes 15 --scale 2
//! ```
//!
//! Two loopback HTTP servers play the organization of
//! `pollster::fleet::sim::meraki` at the Dashboard API v1 paths, each with
//! its own bucket of 10 requests a second (burst 10, 429 with
//! `Retry-After: 1` when empty) and nobody else spending it. The exporter
//! (`python -m meraki_dashboard_exporter`, at its defaults: fast 60 s,
//! medium 300 s, slow 900 s) polls one; the release `pollster serve`, with
//! one `meraki` instance in a pool of 10 rps, polls the other. `--scale 2`
//! serves an organization twice as big: every network and device a second
//! time under ids with a suffix, with its own per-network and per-device
//! answers.
//!
//! Each org records every request it answered. At the end the run prints,
//! for each poller: API calls per minute, 429s, the worst age of device
//! up-ness (`/devices/availabilities`, where both take it) and of sensor
//! readings (`/sensor/readings/latest`) from their first answer on, the CPU
//! seconds and the peak RSS of the process, and the series it serves.

#[path = "../tests/common/port.rs"]
mod port;
#[path = "common/release.rs"]
mod release;

use clap::Parser;
use pollster::fleet::sim::org::OrgBucket;
use pollster::fleet::sim::{self, SimApi, meraki};
use port::free_port;
use release::default_bin;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Any key of 30 characters or more: the orgs take every key.
const API_KEY: &str = "6bec40cf957de430a6f1f2baa056b99a4fac9ea0";
/// The answers move with the tick: one every this many seconds.
const TICK_EVERY_S: u64 = 10;
/// The tick at the start (the recorded parity answer's).
const TICK0: u64 = 95;
/// Where each poller reads device up-ness and sensor readings.
const DEVICE_UP: &str = "/devices/availabilities";
const SENSORS: &str = "/sensor/readings/latest";

#[derive(Debug, Parser)]
struct Args {
    /// Length of the run.
    #[arg(long, default_value_t = 15)]
    minutes: u64,
    /// The organization's size: 1 is the simulator's, 2 has every network
    /// and device twice.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    scale: u32,
    /// The exporter's Python (default: MERAKI_EXPORTER_PYTHON, else
    /// /opt/meraki-exporter-venv/bin/python, as `.ci/run` installs it).
    #[arg(long)]
    python: Option<PathBuf>,
    /// The `pollster` binary (default: next to this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Keep the configs, the logs and each org's request log here.
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
    let python = args
        .python
        .clone()
        .or_else(|| std::env::var_os("MERAKI_EXPORTER_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/opt/meraki-exporter-venv/bin/python"));
    assert!(
        python.exists(),
        "{} not found: .ci/run installs meraki-dashboard-exporter in /opt/meraki-exporter-venv",
        python.display()
    );
    let temp = tempfile::tempdir().expect("a temporary directory");
    let dir = args.out.clone().unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("the output directory");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    let origin = Instant::now();
    let theirs = Org::new(origin, args.scale);
    let ours = Org::new(origin, args.scale);
    let their_addr = runtime.block_on(serve(theirs.clone()));
    let our_addr = runtime.block_on(serve(ours.clone()));

    let mut exporter = start_exporter(&python, &dir, their_addr);
    let pollster = start_pollster(&bin, &dir, our_addr);
    let mut pollster_child = pollster.child;
    eprintln!(
        "scale {}: exporter (pid {}) on org {their_addr}, Pollster (pid {}) on org {our_addr}; {} minutes",
        args.scale,
        exporter.id(),
        pollster_child.id(),
        args.minutes
    );

    let end = Duration::from_secs(args.minutes * 60);
    let mut next = Duration::from_secs(60);
    while next <= end {
        std::thread::sleep(next.saturating_sub(origin.elapsed()));
        for (who, org) in [("exporter", &theirs), ("pollster", &ours)] {
            let calls = org.calls();
            let limited = calls.iter().filter(|c| c.limited).count();
            eprintln!(
                "{:>4} s: {who:<8} {:>6} calls, {limited} 429s",
                next.as_secs(),
                calls.len()
            );
        }
        next += Duration::from_secs(60);
    }
    let end_ms = origin.elapsed().as_millis() as u64;

    let their_metrics = format!("http://127.0.0.1:{}/metrics", exporter_port(&dir));
    let their_series = scrape(&runtime, &their_metrics, "meraki_");
    let our_series = scrape(&runtime, &format!("http://{}/values", pollster.metrics), "meraki_");
    let their_use = Usage::of(exporter.id());
    let our_use = Usage::of(pollster_child.id());
    let _ = exporter.kill();
    let _ = exporter.wait();
    let _ = Command::new("kill").arg(pollster_child.id().to_string()).status();
    let _ = pollster_child.wait();

    write_calls(&dir.join("exporter-calls.csv"), &theirs.calls());
    write_calls(&dir.join("pollster-calls.csv"), &ours.calls());
    let rows = [
        Figures::of(
            "meraki-dashboard-exporter 0.26.0",
            &theirs.calls(),
            end_ms,
            their_use,
            their_series,
        ),
        Figures::of("Pollster", &ours.calls(), end_ms, our_use, our_series),
    ];
    println!();
    println!(
        "scale {} ({} networks, {} devices), {} minutes",
        args.scale,
        count(&ours, "/networks"),
        count(&ours, "/devices"),
        args.minutes
    );
    println!();
    println!(
        "| poller | API calls/min | 429s | worst age, device up | worst age, sensors | CPU s | peak RSS MiB | meraki_ series |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!("{}", r.row());
    }
    if args.out.is_some() {
        eprintln!("kept in {}", dir.display());
    }
}

// ---------------------------------------------------------------------------
// The organizations

/// One request an org answered.
#[derive(Debug, Clone)]
struct Call {
    /// Milliseconds after the run's origin.
    at_ms: u64,
    /// The path below the organization, or the whole path for a network or
    /// device call.
    path: String,
    limited: bool,
}

/// One simulated organization, its bucket and what it answered.
struct Org {
    origin: Instant,
    scale: u32,
    bucket: Mutex<OrgBucket>,
    calls: Mutex<Vec<Call>>,
}

impl Org {
    fn new(origin: Instant, scale: u32) -> Arc<Org> {
        Arc::new(Org {
            origin,
            scale,
            // Nobody else spends this org's 10 rps.
            bucket: Mutex::new(OrgBucket::new(0, None)),
            calls: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The answer to `path?query` at `at_ms`: the simulator's, scaled.
    fn answer(&self, path: &str, query: &str, at_ms: u64) -> Option<Value> {
        let tick = TICK0 + at_ms / 1000 / TICK_EVERY_S;
        // A network or device of a copy: its id has the copy's suffix.
        let (plain, copy) = strip_copy(path);
        let body = sim::answer(SimApi::Meraki, &plain, query, tick)?;
        Some(match copy {
            Some(k) => copy_ids(&body, k),
            None => scaled(body, self.scale),
        })
    }
}

/// The suffix that marks copy `k` (2, 3 …) of a network or device id.
fn suffix(k: u32) -> String {
    format!("x{k}")
}

/// `path` with every segment's copy suffix removed, and the copy it named.
fn strip_copy(path: &str) -> (String, Option<u32>) {
    let mut copy = None;
    let segments: Vec<String> = path
        .split('/')
        .map(|s| {
            for k in 2..=8u32 {
                if let Some(base) = s.strip_suffix(&suffix(k))
                    && is_id(base)
                {
                    copy = Some(k);
                    return base.to_string();
                }
            }
            s.to_string()
        })
        .collect();
    (segments.join("/"), copy)
}

/// A network id (`L_…`, `N_…`) or a device serial (`XXXX-XXXX-XXXX`).
fn is_id(s: &str) -> bool {
    s.starts_with("L_") || s.starts_with("N_") || (s.len() == 14 && s.matches('-').count() == 2)
}

/// An org of `scale` copies: each element of a list that names a network
/// or a device comes `scale` times, the copies under suffixed ids and names.
fn scaled(body: Value, scale: u32) -> Value {
    match body {
        Value::Array(items) if scale > 1 => {
            let mut out = Vec::with_capacity(items.len() * scale as usize);
            for item in items {
                let copies = names_an_id(&item);
                out.push(item.clone());
                if copies {
                    for k in 2..=scale {
                        out.push(copy_ids(&item, k));
                    }
                }
            }
            Value::Array(out)
        }
        other => other,
    }
}

fn names_an_id(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    o.iter()
        .any(|(k, v)| matches!(k.as_str(), "serial" | "networkId" | "id") && v.as_str().is_some_and(is_id))
        || o.get("network").is_some_and(names_an_id)
}

/// `v` as copy `k`: every network id and serial suffixed, names too.
fn copy_ids(v: &Value, k: u32) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(key, x)| {
                    let copied = match (key.as_str(), x) {
                        ("serial" | "networkId" | "id", Value::String(s)) if is_id(s) => {
                            Value::String(format!("{s}{}", suffix(k)))
                        }
                        ("name", Value::String(s)) => Value::String(format!("{s} {k}")),
                        _ => copy_ids(x, k),
                    };
                    (key.clone(), copied)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|x| copy_ids(x, k)).collect()),
        other => other.clone(),
    }
}

/// How many networks or devices the org lists (`what` below the org).
fn count(org: &Org, what: &str) -> usize {
    let path = format!("/api/v1/organizations/{}{what}", meraki::ORG_ID);
    org.answer(&path, "", 0)
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(0)
}

async fn serve(org: Arc<Org>) -> SocketAddr {
    use axum::extract::State;
    use axum::http::{StatusCode, Uri, header};
    use axum::response::{IntoResponse, Response};

    async fn any(State(org): State<Arc<Org>>, uri: Uri) -> Response {
        let at_ms = org.origin.elapsed().as_millis() as u64;
        let admitted = org.bucket.lock().unwrap_or_else(|e| e.into_inner()).admit(at_ms);
        let json = [(header::CONTENT_TYPE, "application/json")];
        let (path, query) = (uri.path(), uri.query().unwrap_or_default());
        let answer = if admitted {
            match org.answer(path, query, at_ms) {
                Some(body) => (StatusCode::OK, json, body.to_string()).into_response(),
                None => (StatusCode::NOT_FOUND, json, r#"{"errors":["Not found"]}"#).into_response(),
            }
        } else {
            let body = r#"{"errors":["API rate limit exceeded for organization"]}"#;
            (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "1")], json, body).into_response()
        };
        let org_base = format!("/api/v1/organizations/{}", meraki::ORG_ID);
        org.calls.lock().unwrap_or_else(|e| e.into_inner()).push(Call {
            at_ms,
            path: path.strip_prefix(&org_base).unwrap_or(path).to_string(),
            limited: !admitted,
        });
        answer
    }

    let app = axum::Router::new().fallback(any).with_state(org);
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
// The pollers

fn start_exporter(python: &Path, dir: &Path, org: SocketAddr) -> Child {
    // A clean working directory: the exporter reads `.env` from it.
    let work = dir.join("exporter");
    std::fs::create_dir_all(&work).expect("the exporter's directory");
    let port = free_port();
    std::fs::write(dir.join("exporter.port"), port.to_string()).expect("the exporter's port is kept");
    let log = std::fs::File::create(dir.join("exporter.log")).expect("the exporter's log");
    Command::new(python)
        .args(["-m", "meraki_dashboard_exporter"])
        .current_dir(&work)
        .env("MERAKI_EXPORTER_MERAKI__API_BASE_URL", format!("http://{org}/api/v1"))
        .env("MERAKI_EXPORTER_MERAKI__API_KEY", API_KEY)
        .env("MERAKI_EXPORTER_SERVER__HOST", "127.0.0.1")
        .env("MERAKI_EXPORTER_SERVER__PORT", port.to_string())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env_remove("HTTPS_PROXY")
        .env_remove("HTTP_PROXY")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the exporter's log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", python.display()))
}

fn exporter_port(dir: &Path) -> u16 {
    std::fs::read_to_string(dir.join("exporter.port"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("the exporter's port")
}

struct Appliance {
    child: Child,
    metrics: SocketAddr,
}

/// `pollster serve` with one `meraki` instance in a pool of the org's
/// 10 rps, as an operator would configure it.
fn start_pollster(bin: &Path, dir: &Path, org: SocketAddr) -> Appliance {
    let (api, metrics) = (free_port(), free_port());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\ndata_dir = \"{}\"\n\n\
         [[budgets]]\nname = \"meraki-org\"\nrequests_per_second = 10.0\n\n\
         [[instances]]\nname = \"org\"\ntype = \"meraki\"\nurl = \"http://{org}/api/v1/organizations/{}\"\n\
         budget = \"meraki-org\"\nauth = {{ kind = \"bearer\", token = \"{API_KEY}\" }}\n",
        dir.join("data").display(),
        meraki::ORG_ID,
    );
    let file = dir.join("pollster.toml");
    std::fs::write(&file, config).expect("the config is written");
    let log = std::fs::File::create(dir.join("pollster.log")).expect("the log file");
    let child = Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(&file)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    Appliance {
        child,
        metrics: format!("127.0.0.1:{metrics}").parse().expect("an address"),
    }
}

/// The series of `prefix` a poller serves at `url`, by family.
fn scrape(runtime: &tokio::runtime::Runtime, url: &str, prefix: &str) -> BTreeMap<String, usize> {
    let text = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .ok()?;
        client.get(url).send().await.ok()?.text().await.ok()
    });
    let mut families = BTreeMap::new();
    for line in text.unwrap_or_default().lines().filter(|l| l.starts_with(prefix)) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        *families.entry(name.to_string()).or_insert(0) += 1;
    }
    families
}

/// A process's CPU seconds (its own and its waited-for children's) and
/// its peak resident set, from /proc.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu_s: f64,
    peak_rss_mib: f64,
}

impl Usage {
    fn of(pid: u32) -> Usage {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: utime is the
        // 14th field of the line, stime, cutime and cstime follow.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
        // SAFETY: sysconf reads a constant of the system.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let cpu_s = f.get(11..15).map(|t| t.iter().sum::<f64>()).unwrap_or(0.0) / hz.max(1.0);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let peak_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        Usage {
            cpu_s,
            peak_rss_mib: peak_kib / 1024.0,
        }
    }
}

// ---------------------------------------------------------------------------
// Figures

struct Figures {
    who: String,
    calls_per_min: f64,
    limited: usize,
    device_up: Age,
    sensors: Age,
    usage: Usage,
    series: usize,
    families: usize,
}

/// The worst age of a datum: the longest time without a fresh answer of
/// its endpoint, from its first answer to the end of the run.
#[derive(Debug, Clone, Copy)]
struct Age {
    first_s: Option<f64>,
    worst_s: f64,
}

impl Age {
    fn of(calls: &[Call], endpoint: &str, end_ms: u64) -> Age {
        let times: Vec<u64> = calls
            .iter()
            .filter(|c| !c.limited && c.path.split('?').next() == Some(endpoint))
            .map(|c| c.at_ms)
            .collect();
        let Some(&first) = times.first() else {
            return Age {
                first_s: None,
                worst_s: f64::INFINITY,
            };
        };
        let mut worst = end_ms.saturating_sub(*times.last().unwrap_or(&first));
        for w in times.windows(2) {
            worst = worst.max(w[1] - w[0]);
        }
        Age {
            first_s: Some(first as f64 / 1000.0),
            worst_s: worst as f64 / 1000.0,
        }
    }

    fn cell(&self) -> String {
        match self.first_s {
            Some(first) => format!("{:.0} s (first at {first:.0} s)", self.worst_s),
            None => "never answered".to_string(),
        }
    }
}

impl Figures {
    fn of(who: &str, calls: &[Call], end_ms: u64, usage: Usage, series: BTreeMap<String, usize>) -> Figures {
        Figures {
            who: who.to_string(),
            calls_per_min: calls.len() as f64 / (end_ms as f64 / 60_000.0),
            limited: calls.iter().filter(|c| c.limited).count(),
            device_up: Age::of(calls, DEVICE_UP, end_ms),
            sensors: Age::of(calls, SENSORS, end_ms),
            usage,
            series: series.values().sum(),
            families: series.len(),
        }
    }

    fn row(&self) -> String {
        format!(
            "| {} | {:.1} | {} | {} | {} | {:.1} | {:.0} | {} in {} families |",
            self.who,
            self.calls_per_min,
            self.limited,
            self.device_up.cell(),
            self.sensors.cell(),
            self.usage.cpu_s,
            self.usage.peak_rss_mib,
            self.series,
            self.families
        )
    }
}

fn write_calls(file: &Path, calls: &[Call]) {
    let mut out = String::from("at_ms,limited,path\n");
    for c in calls {
        out.push_str(&format!("{},{},{}\n", c.at_ms, c.limited, c.path));
    }
    let _ = std::fs::write(file, out);
}

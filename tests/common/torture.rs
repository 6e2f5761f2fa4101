//! Crash torture: the real `pollster` binary polls a `pollster-fleet` process
//! full of failing targets and is killed with SIGKILL at random points, many
//! times over, on the same data directory. Shared by `tests/torture.rs` (a few
//! kills in a debug build) and `examples/torture.rs` (hundreds, release).
//!
//! What one cycle does:
//!
//! 1. Start `pollster serve` and wait until `/readyz` answers (the database
//!    opened and the stored state is loaded: the API is served only after
//!    that). Check at once that every dead-letter entry acknowledged so far
//!    is still listed, with the same `since`, that every acknowledged discard
//!    is still discarded, and that every acknowledged retry kept its effect.
//! 2. Flip a few healthy fleet instances to failing (HTTP 500, 401 or no
//!    answer), so new entries keep arriving; at a random moment maybe act as
//!    an operator (discard an entry, or make its target healthy and retry it)
//!    and record what the 2xx answer promised.
//! 3. After a random uptime, list the dead-letter queue through the API (the
//!    entries are now *acknowledged*: an operator has seen them) and SIGKILL
//!    the server straight away. Optionally read the file offline with
//!    `pollster admin dlq list`, which must open it and list every entry.
//! 4. Wait a random downtime, read every task's stored next run from the
//!    file (it must open, and every record must decode), and start again
//!    (step 1), watching each fleet instance's request count from the moment
//!    the process starts.
//!
//! No burst: from the stored next runs and the engine's documented placement
//! rule ([`predicted_first_polls`]) the driver knows when every task is due
//! after the start; the first polls seen in any `window` must stay within
//! [`allowed_first_polls`] of the busiest window that predicts. Overdue tasks
//! fired together would put all of them into one window. Polling resumed:
//! every task that schedule says was due while the run was watched must have
//! been polled. The fleet's total request rate after each start is recorded
//! and reported beside the steady rate, but not checked against a fixed
//! multiple of it: it also counts retries of failing targets, and under a
//! kill every few seconds the cadence itself drifts (docs/TORTURE.md).
//!
//! Some kills land during startup instead (before the API answers). The
//! first start is not a cold start (see `seed_store`), and the steady rate
//! and its peak are measured over one interval before the first kill; the
//! same measure after the last restart must show polling going on as before.
//!
//! Which entries must survive: an entry whose target keeps failing can only
//! leave the queue by an operator action, so every acknowledged entry of a
//! target that answers 500, 401 or nothing must be listed after every
//! restart, with the `since` it was acknowledged with (a lost entry would
//! come back, if at all, with a new `since`). Entries of `flapping` targets
//! may leave legitimately (a recheck in an up phase succeeds) and are only
//! counted; targets the driver made healthy leave the set.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// First polls after a restart may exceed the schedule's prediction in any
/// window by this factor, plus [`NOISE_SIGMAS`] standard deviations of a
/// Poisson count and one poll for an operator retry: the prediction knows
/// the engine's start only to within its startup time, and the samples are
/// 50 ms apart.
pub const PREDICTION_SLACK: f64 = 1.25;
pub const NOISE_SIGMAS: f64 = 4.0;

/// Failing behaviours the driver flips healthy instances to.
const FLIP_TO: [&str; 3] = ["server_error", "unauthorized", "hung"];

/// Behaviours whose dead-letter entries can never leave on their own.
fn always_fails(kind: &str) -> bool {
    matches!(kind, "server_error" | "unauthorized" | "hung" | "not_found")
}

#[derive(Debug, Clone)]
pub struct Options {
    /// The `pollster` binary.
    pub pollster: PathBuf,
    /// The `pollster-fleet` binary.
    pub fleet: PathBuf,
    /// SIGKILLs in all (early kills included).
    pub kills: usize,
    pub seed: u64,
    /// Fleet instances (= tasks: one group each).
    pub instances: usize,
    /// `pollster-fleet --mix`.
    pub mix: String,
    /// Poll interval of every task (adaptive scheduling is off) and the
    /// dead-letter recheck interval, so every task is polled about once per
    /// `floor` whether it is dead-lettered or not.
    pub floor: Duration,
    pub flap_period: Duration,
    /// Instance timeout (how long a `hung` poll takes).
    pub timeout: Duration,
    pub workers: usize,
    /// `scheduler.state_flush_interval`.
    pub flush: Duration,
    /// Time from ready to the kill.
    pub uptime: (Duration, Duration),
    /// Time from the kill to the next start.
    pub downtime: (Duration, Duration),
    /// Healthy instances flipped to failing per cycle.
    pub flips: (usize, usize),
    /// Chance of an operator action (discard or retry) per cycle.
    pub action_chance: f64,
    /// Chance that a kill lands during startup, before the API answers.
    pub early_kill_chance: f64,
    /// Sliding window of the post-restart rate.
    pub window: Duration,
    /// How long after ready the rate is watched (at most until the kill).
    pub observe: Duration,
    /// Read the file offline (`pollster admin dlq list`) after each kill.
    pub offline_check: bool,
    /// Data directory, config and server log live here.
    pub work_dir: PathBuf,
    /// One line per cycle on stderr.
    pub progress: bool,
}

impl Options {
    /// A run small enough for CI in a debug build.
    pub fn ci(pollster: PathBuf, fleet: PathBuf, seed: u64, work_dir: PathBuf) -> Options {
        Options {
            pollster,
            fleet,
            kills: 12,
            seed,
            instances: 400,
            mix: "healthy=60,server_error=12,unauthorized=8,hung=5,flapping=15".into(),
            floor: Duration::from_secs(4),
            flap_period: Duration::from_secs(3),
            timeout: Duration::from_millis(800),
            workers: 64,
            flush: Duration::from_millis(100),
            uptime: (Duration::from_millis(200), Duration::from_millis(2600)),
            downtime: (Duration::ZERO, Duration::from_secs(1)),
            flips: (2, 6),
            action_chance: 0.6,
            early_kill_chance: 0.1,
            window: Duration::from_millis(500),
            observe: Duration::from_secs(2),
            offline_check: true,
            work_dir,
            progress: true,
        }
    }
}

/// What a run saw. `violations` empty means every check passed.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub seed: u64,
    pub instances: usize,
    pub kills: usize,
    pub early_kills: usize,
    pub restarts_ok: usize,
    /// (entry, restart) pairs checked present after a restart.
    pub entries_checked: u64,
    /// Distinct entries acknowledged that had to survive.
    pub entries_acknowledged: usize,
    /// (entry, kill) pairs checked in the file offline after a kill.
    pub offline_checked: u64,
    /// Acknowledged entries not found after a restart, or while running
    /// (each lost entry counted once).
    pub missing: u64,
    /// (entry, kill) pairs not found in the file offline.
    pub offline_missing: u64,
    /// Entries of flapping targets acknowledged (not required to stay).
    pub flapping_acknowledged: usize,
    pub discards: usize,
    pub discard_checks: u64,
    pub discards_lost: u64,
    pub retries: usize,
    pub retry_checks: u64,
    pub retries_lost: u64,
    pub refused_actions: usize,
    pub flips: usize,
    pub max_dead_letter: usize,
    /// Server runs checked against the stored schedule.
    pub rate_checks: usize,
    /// Busiest window of first polls after a restart ÷ the busiest the
    /// stored schedule predicts.
    pub max_first_poll_ratio: f64,
    pub first_poll_ratios: Vec<f64>,
    /// Tasks the schedule said were due while a run was watched, and how
    /// many of them were not polled.
    pub resume_checked: usize,
    pub resume_unpolled: usize,
    /// Longest time from ready to the first poll.
    pub max_first_poll: Duration,
    /// The fleet's total request rate after restarts (busiest window; not
    /// a check: it also counts retries of failing targets and moves with
    /// the cadence): the highest, and each run's ÷ the steady peak.
    pub max_rate_rps: f64,
    pub max_ratio: f64,
    pub ratios: Vec<f64>,
    /// Configured rate: tasks not discarded ÷ floor, at the end.
    pub configured_rps: f64,
    /// Measured over `floor` with no kill, before the first kill and after
    /// the last restart: the average, and the highest rate over `window`
    /// (the steady peak).
    pub measured_before_rps: f64,
    pub measured_after_rps: f64,
    pub peak_before_rps: f64,
    pub peak_after_rps: f64,
    pub window: Duration,
    pub max_ready: Duration,
    pub duration: Duration,
    pub violations: Vec<String>,
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed                         {}", self.seed)?;
        writeln!(f, "instances                    {}", self.instances)?;
        writeln!(
            f,
            "kills (SIGKILL)              {} ({} during startup)",
            self.kills, self.early_kills
        )?;
        // Every kill but an early one is followed by a start that must
        // come up; an early kill is itself such a start, killed on purpose.
        writeln!(
            f,
            "restarts that came up        {}/{}",
            self.restarts_ok,
            self.kills - self.early_kills
        )?;
        writeln!(f, "slowest start to ready       {} ms", self.max_ready.as_millis())?;
        writeln!(f, "entries acknowledged         {}", self.entries_acknowledged)?;
        writeln!(f, "entries checked at restart   {}", self.entries_checked)?;
        writeln!(f, "entries checked offline      {}", self.offline_checked)?;
        writeln!(
            f,
            "missing entries              {} (offline: {})",
            self.missing, self.offline_missing
        )?;
        writeln!(f, "flapping entries seen        {}", self.flapping_acknowledged)?;
        writeln!(f, "largest dead-letter queue    {}", self.max_dead_letter)?;
        writeln!(f, "targets flipped to failing   {}", self.flips)?;
        writeln!(
            f,
            "discards acked / checked / lost   {} / {} / {}",
            self.discards, self.discard_checks, self.discards_lost
        )?;
        writeln!(
            f,
            "retries acked / checked / lost    {} / {} / {}",
            self.retries, self.retry_checks, self.retries_lost
        )?;
        writeln!(f, "operator actions refused     {}", self.refused_actions)?;
        writeln!(f, "configured rate              {:.1} polls/s", self.configured_rps)?;
        writeln!(
            f,
            "steady average before/after  {:.1} / {:.1} polls/s",
            self.measured_before_rps, self.measured_after_rps
        )?;
        writeln!(
            f,
            "steady peak before/after     {:.1} / {:.1} polls/s over {} ms",
            self.peak_before_rps,
            self.peak_after_rps,
            self.window.as_millis()
        )?;
        writeln!(
            f,
            "first polls ÷ predicted      max {:.2}, median {:.2} (busiest {} ms; {} restarts; allowed {PREDICTION_SLACK} × + {NOISE_SIGMAS} σ)",
            self.max_first_poll_ratio,
            median(&self.first_poll_ratios),
            self.window.as_millis(),
            self.rate_checks
        )?;
        writeln!(
            f,
            "due tasks polled             {} of {}",
            self.resume_checked - self.resume_unpolled,
            self.resume_checked
        )?;
        writeln!(
            f,
            "first poll after ready       within {} ms",
            self.max_first_poll.as_millis()
        )?;
        writeln!(
            f,
            "post-restart total rate      max {:.0} polls/s; ÷ steady peak max {:.2}, median {:.2}",
            self.max_rate_rps,
            self.max_ratio,
            median(&self.ratios)
        )?;
        writeln!(f, "duration                     {:.0} s", self.duration.as_secs_f64())?;
        writeln!(f, "violations                   {}", self.violations.len())?;
        for v in &self.violations {
            writeln!(f, "  - {v}")?;
        }
        Ok(())
    }
}

/// The highest rate over any `window` in `samples` (time since start, a
/// monotonic counter). Windows shorter than `window` (at the end) are not
/// counted; `None` if the samples span less than one window.
pub fn max_window_rate(samples: &[(Duration, u64)], window: Duration) -> Option<f64> {
    let mut best: Option<f64> = None;
    let mut j = 0;
    for i in 0..samples.len() {
        let (ti, hi) = samples[i];
        if ti < window {
            continue;
        }
        // Latest sample at least `window` before sample i.
        while j + 1 < i && samples[j + 1].0 + window <= ti {
            j += 1;
        }
        let (tj, hj) = samples[j];
        if tj + window > ti {
            continue;
        }
        let dt = (ti - tj).as_secs_f64();
        let rate = hi.saturating_sub(hj) as f64 / dt;
        best = Some(best.map_or(rate, |b: f64| b.max(rate)));
    }
    best
}

/// The most of `times` (sorted) that fall in any half-open `window`.
pub fn max_in_window(times: &[Duration], window: Duration) -> usize {
    let mut most = 0;
    let mut j = 0;
    for i in 0..times.len() {
        while times[i] - times[j] >= window {
            j += 1;
        }
        most = most.max(i - j + 1);
    }
    most
}

/// When the engine first polls each task after a start, by its documented
/// rule (SPEC §2, docs/DESIGN.md): a task whose stored next run is still
/// ahead keeps it; an overdue one is placed at `start + offset`, its phase
/// offset in [0, interval / 2). `stored` is each task's stored next run
/// (Unix ms; `None` if the task is disabled, so never polled), `offsets` the
/// tasks' phase offsets, `spawn_ms` when the process was started (Unix ms)
/// and `start` when the engine placed its tasks, after `spawn_ms`. Times
/// are since `spawn_ms`.
pub fn predicted_first_polls(
    stored: &[Option<u64>],
    offsets: &[Duration],
    spawn_ms: u64,
    start: Duration,
) -> Vec<Duration> {
    let mut out: Vec<Duration> = stored
        .iter()
        .zip(offsets)
        .filter_map(|(next, offset)| first_poll_at(*next, *offset, spawn_ms, start))
        .collect();
    out.sort();
    out
}

/// [`predicted_first_polls`] for one task.
fn first_poll_at(stored: Option<u64>, offset: Duration, spawn_ms: u64, start: Duration) -> Option<Duration> {
    let next = stored?;
    let start_ms = spawn_ms + start.as_millis() as u64;
    Some(if next < start_ms {
        start + offset
    } else {
        Duration::from_millis(next - spawn_ms)
    })
}

/// The most first polls one window may hold when the schedule predicts
/// `predicted` in its busiest window.
pub fn allowed_first_polls(predicted: usize) -> usize {
    let p = predicted as f64;
    (PREDICTION_SLACK * p + NOISE_SIGMAS * p.sqrt()).ceil() as usize + 1
}

/// One dead-letter entry as the API lists it.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    since: String,
    next_run: String,
    reason: String,
}

type Key = (String, String);

fn key_str(k: &Key) -> String {
    format!("{}/{}", k.0, k.1)
}

/// The fleet child process and its control API.
struct FleetProc {
    child: Child,
    base: String,
}

impl FleetProc {
    fn spawn(opts: &Options) -> Result<FleetProc, String> {
        let mut child = Command::new(&opts.fleet)
            .args(["--bind", "127.0.0.1:0", "--threads", "1"])
            .args(["--count", &opts.instances.to_string(), "--mix", &opts.mix])
            .args(["--flap-period", &ms(opts.flap_period)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", opts.fleet.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let mut lines = BufReader::new(stderr).lines();
        let base = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(a) = line.strip_prefix("listening on ") {
                        break a.trim().to_string();
                    }
                }
                _ => {
                    let status = child.wait();
                    return Err(format!("pollster-fleet exited before listening: {status:?}"));
                }
            }
        };
        // Keep draining so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        Ok(FleetProc { child, base })
    }
}

impl Drop for FleetProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `pollster serve` process.
struct ServerProc {
    child: Child,
    started: Instant,
}

impl ServerProc {
    fn start(opts: &Options, config: &Path, log: &Path, n: usize) -> Result<ServerProc, String> {
        let mut file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let _ = writeln!(file, "==== start {n}");
        let child = Command::new(&opts.pollster)
            .args(["serve", "--config", &config.to_string_lossy()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", opts.pollster.display()))?;
        Ok(ServerProc {
            child,
            started: Instant::now(),
        })
    }

    /// SIGKILL (what `Child::kill` sends on Unix): no chance to flush.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// HTTP access to the appliance's API and the fleet's control API.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    api: String,
    fleet: String,
    token: String,
}

const PER_PAGE: usize = 500;

impl Client {
    async fn get_json(&self, url: &str, auth: bool) -> Result<Value, String> {
        let mut req = self.http.get(url);
        if auth {
            req = req.bearer_auth(&self.token);
        }
        let resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        resp.json().await.map_err(|e| format!("GET {url}: {e}"))
    }

    async fn ready(&self) -> bool {
        matches!(self.http.get(format!("{}/readyz", self.api)).send().await, Ok(r) if r.status().is_success())
    }

    /// The whole dead-letter queue. Pages are read one by one, so the list
    /// is read again when its count changed in between.
    async fn dead_letters(&self) -> Result<BTreeMap<Key, Entry>, String> {
        let mut last = BTreeMap::new();
        for _ in 0..5 {
            let mut out = BTreeMap::new();
            let mut count = None;
            let mut consistent = true;
            for page in 1.. {
                let url = format!(
                    "{}/api/monitoring/scheduler/dead-letter?page={page}&per_page={PER_PAGE}",
                    self.api
                );
                let v = self.get_json(&url, true).await?;
                let c = v["count"].as_u64().ok_or("dead-letter list without count")? as usize;
                if count.is_some_and(|x| x != c) {
                    consistent = false;
                }
                count = Some(c);
                let tasks = v["tasks"].as_array().ok_or("dead-letter list without tasks")?;
                for t in tasks {
                    let s = |f: &str| t[f].as_str().unwrap_or_default().to_string();
                    out.insert(
                        (s("instance"), s("group")),
                        Entry {
                            since: s("since"),
                            next_run: s("nextRun"),
                            reason: s("reason"),
                        },
                    );
                }
                if tasks.len() < PER_PAGE || page * PER_PAGE >= c {
                    break;
                }
            }
            if consistent && Some(out.len()) == count {
                return Ok(out);
            }
            last = out;
        }
        // Still changing: what was seen is still what was seen.
        Ok(last)
    }

    /// POST/DELETE an operator action; the status and the JSON answer.
    async fn action(&self, retry: bool, k: &Key) -> Result<(u16, Value), String> {
        let base = format!("{}/api/monitoring/scheduler/dead-letter/{}/{}", self.api, k.0, k.1);
        let req = if retry {
            self.http.post(format!("{base}/retry"))
        } else {
            self.http.delete(base)
        };
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| format!("operator action on {}: {e}", key_str(k)))?;
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// Every instance's request count, in fleet order.
    async fn fleet_hits(&self) -> Result<Vec<u64>, String> {
        #[derive(serde::Deserialize)]
        struct Hits {
            hits: u64,
        }
        #[derive(serde::Deserialize)]
        struct List {
            instances: Vec<Hits>,
        }
        let url = format!("{}/_control", self.fleet);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let list: List = resp.json().await.map_err(|e| format!("GET {url}: {e}"))?;
        Ok(list.instances.into_iter().map(|i| i.hits).collect())
    }

    /// Every fleet instance: behaviour kind and hits.
    async fn fleet_instances(&self) -> Result<Vec<(String, String, u64)>, String> {
        let v = self.get_json(&format!("{}/_control", self.fleet), false).await?;
        let list = v["instances"].as_array().ok_or("fleet list without instances")?;
        Ok(list
            .iter()
            .map(|i| {
                (
                    i["name"].as_str().unwrap_or_default().to_string(),
                    i["behaviour"]["kind"].as_str().unwrap_or_default().to_string(),
                    i["hits"].as_u64().unwrap_or(0),
                )
            })
            .collect())
    }

    async fn hits(&self, name: &str) -> Result<u64, String> {
        let v = self.get_json(&format!("{}/_control/{name}", self.fleet), false).await?;
        v["hits"].as_u64().ok_or_else(|| "fleet instance without hits".into())
    }

    async fn flip(&self, name: &str, kind: &str) -> Result<(), String> {
        let url = format!("{}/_control/{name}", self.fleet);
        let resp = self
            .http
            .put(&url)
            .body(format!(r#"{{"kind":"{kind}"}}"#))
            .send()
            .await
            .map_err(|e| format!("PUT {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("PUT {url}: HTTP {}", resp.status()));
        }
        Ok(())
    }
}

/// What a [`Sampler`] saw: the fleet's request total over time, and when
/// each instance (in fleet order) was first polled after the base counts.
#[derive(Debug, Default)]
struct Sampled {
    totals: Vec<(Duration, u64)>,
    first: Vec<Option<Duration>>,
}

/// Reads every instance's request count (`GET /_control`) every 50 ms
/// until stopped.
struct Sampler {
    state: Arc<Mutex<Sampled>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Times are since `from`; first polls count from the hits in `base`.
    fn start(client: Client, from: Instant, base: Vec<u64>) -> Sampler {
        let state = Arc::new(Mutex::new(Sampled {
            totals: Vec::new(),
            first: vec![None; base.len()],
        }));
        let out = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let sent = from.elapsed();
                if let Ok(hits) = client.fleet_hits().await {
                    // The counts were read somewhere between sending and
                    // receiving: take the middle.
                    let t = (sent + from.elapsed()) / 2;
                    let mut s = out.lock().unwrap_or_else(|e| e.into_inner());
                    for ((h, b), f) in hits.iter().zip(&base).zip(s.first.iter_mut()) {
                        if f.is_none() && h > b {
                            *f = Some(t);
                        }
                    }
                    s.totals.push((t, hits.iter().sum()));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Sampler { state, task }
    }

    fn stop(self) -> Sampled {
        self.task.abort();
        std::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn pick(rng: &mut StdRng, range: (Duration, Duration)) -> Duration {
    if range.1 <= range.0 {
        return range.0;
    }
    range.0 + (range.1 - range.0).mul_f64(rng.random_range(0.0..1.0))
}

fn config_text(opts: &Options, fleet: &str, api: u16, metrics: u16, data: &Path, names: &[String]) -> String {
    let floor = ms(opts.floor);
    let mut cfg = format!(
        "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\ndata_dir = \"{}\"\n\n\
         [adaptive]\nenabled = false\n\n\
         [scheduler]\nworkers = {}\nstate_flush_interval = \"{}\"\n\n\
         [failure]\nbackoff_initial = \"200ms\"\nbackoff_max = \"2s\"\nbreaker_threshold = 2\n\
         dead_letter_after = 3\ndead_letter_recheck = \"{floor}\"\n\n\
         [[types]]\nname = \"torture\"\n[[types.groups]]\nname = \"probe\"\npath = \"\"\npriority = 1\nfloor = \"{floor}\"\n",
        data.display(),
        opts.workers,
        ms(opts.flush),
    );
    for name in names {
        cfg.push_str(&format!(
            "\n[[instances]]\nname = \"{name}\"\ntype = \"torture\"\nurl = \"{fleet}/i/{name}\"\ntimeout = \"{}\"\n",
            ms(opts.timeout)
        ));
    }
    cfg
}

/// What the driver knows and must check.
struct State {
    /// Fleet behaviour of every instance, as the driver set it.
    kind: HashMap<String, String>,
    /// Acknowledged entries that must stay, with the `since` they had.
    must_stay: BTreeMap<Key, String>,
    /// Flapping entries seen (not required to stay).
    flapping_seen: BTreeMap<Key, String>,
    /// Acknowledged discards: the target's hits when the discard was answered.
    discarded: BTreeMap<Key, u64>,
    /// Acknowledged retries: the `nextRun` the answer promised.
    retried: BTreeMap<Key, String>,
    acknowledged: std::collections::BTreeSet<Key>,
}

impl State {
    /// Take in a listing the operator has now seen: entries of always
    /// failing targets join the set that must stay; a must-stay entry
    /// missing or with another `since` is a violation.
    fn acknowledge(&mut self, list: &BTreeMap<Key, Entry>, when: &str, report: &mut Report) {
        for (k, e) in list {
            let kind = self.kind.get(&k.0).map(String::as_str).unwrap_or("");
            if self.retried.contains_key(k) || self.discarded.contains_key(k) {
                continue;
            }
            if always_fails(kind) {
                if let Some(since) = self.must_stay.get(k)
                    && *since != e.since
                {
                    report.missing += 1;
                    report.violations.push(format!(
                        "{when}: {} left the dead-letter queue and came back (since {since} → {})",
                        key_str(k),
                        e.since
                    ));
                }
                self.must_stay.insert(k.clone(), e.since.clone());
                self.acknowledged.insert(k.clone());
            } else if kind == "flapping" {
                self.flapping_seen.insert(k.clone(), e.since.clone());
            }
        }
        report.entries_acknowledged = self.acknowledged.len();
        report.flapping_acknowledged = self.flapping_seen.len();
        report.max_dead_letter = report.max_dead_letter.max(list.len());
    }

    /// Every must-stay entry is in `list` with its `since`. Returns the keys
    /// that are not.
    fn absent(&self, list: &BTreeMap<Key, Entry>) -> Vec<Key> {
        self.must_stay
            .iter()
            .filter(|(k, since)| list.get(*k).is_none_or(|e| &e.since != *since))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// Runs the torture. `Err` only when it cannot run at all (a binary missing,
/// the fleet not starting); what it finds is in [`Report::violations`].
pub async fn run(opts: &Options) -> Result<Report, String> {
    let began = Instant::now();
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut report = Report {
        seed: opts.seed,
        instances: opts.instances,
        ..Report::default()
    };
    std::fs::create_dir_all(&opts.work_dir).map_err(|e| format!("{}: {e}", opts.work_dir.display()))?;
    let fleet = FleetProc::spawn(opts)?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let mut client = Client {
        http,
        api: String::new(),
        fleet: fleet.base.clone(),
        token: String::new(),
    };
    let instances = client.fleet_instances().await?;
    let names: Vec<String> = instances.iter().map(|(n, _, _)| n.clone()).collect();
    let mut st = State {
        kind: instances.iter().map(|(n, k, _)| (n.clone(), k.clone())).collect(),
        must_stay: BTreeMap::new(),
        flapping_seen: BTreeMap::new(),
        discarded: BTreeMap::new(),
        retried: BTreeMap::new(),
        acknowledged: Default::default(),
    };

    let data = opts.work_dir.join("data");
    let api_port = free_port()?;
    let metrics_port = free_port()?;
    let config = opts.work_dir.join("pollster.toml");
    let log = opts.work_dir.join("pollster.log");
    std::fs::write(
        &config,
        config_text(opts, &fleet.base, api_port, metrics_port, &data, &names),
    )
    .map_err(|e| format!("{}: {e}", config.display()))?;
    client.api = format!("http://127.0.0.1:{api_port}");
    seed_store(&data)?;
    let out = Command::new(&opts.pollster)
        .args(["admin", "create-token", "--config", &config.to_string_lossy()])
        .args(["--name", "torture"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", opts.pollster.display()))?;
    if !out.status.success() {
        return Err(format!("create-token failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    client.token = String::from_utf8_lossy(&out.stdout).trim().to_string();

    let configured = |st: &State| (opts.instances - st.discarded.len()) as f64 / opts.floor.as_secs_f64();
    report.window = opts.window;

    // First start, then let the cadence settle and measure the steady rate.
    let mut starts = 0;
    let mut server = ServerProc::start(opts, &config, &log, starts)?;
    starts += 1;
    wait_ready(&client, &mut server).await?;
    tokio::time::sleep(opts.floor * 3 / 2).await;
    (report.measured_before_rps, report.peak_before_rps) = measure(&client, opts.floor, opts.window).await?;
    let list = client.dead_letters().await?;
    st.acknowledge(&list, "warm-up", &mut report);

    let offsets: Vec<Duration> = names
        .iter()
        .map(|n| pollster::core::phase::offset(&pollster::model::TaskKey::new(n, "probe"), opts.floor))
        .collect();
    let mut log_scanned = 0u64;
    let mut ready_at = Instant::now();
    // What the file held when the running server started, and when.
    let mut schedule: Option<(Vec<Option<u64>>, u64)> = None;
    let mut sampler = Sampler::start(client.clone(), server.started, client.fleet_hits().await?);
    let mut kills = 0;
    while kills < opts.kills {
        let uptime = pick(&mut rng, opts.uptime);
        let action_at = ready_at + uptime.mul_f64(rng.random_range(0.0..1.0));
        let kill_at = ready_at + uptime;
        let flips = rng.random_range(opts.flips.0..=opts.flips.1);
        flip_some(&client, &mut st, &mut rng, flips, &mut report).await?;
        if rng.random_bool(opts.action_chance) {
            sleep_until(action_at).await;
            operator_action(&client, &mut st, &mut rng, &mut report).await?;
        }
        sleep_until(kill_at).await;
        // The acknowledgement: the operator sees the list, then the kill.
        let list = client.dead_letters().await?;
        for k in st.absent(&list) {
            // A must-stay entry gone while the server runs. Counted once:
            // if it is listed again it is a new entry.
            report.missing += 1;
            st.must_stay.remove(&k);
            report
                .violations
                .push(format!("kill {}: {} missing while running", kills + 1, key_str(&k)));
        }
        st.acknowledge(&list, &format!("kill {}", kills + 1), &mut report);
        server.kill9();
        kills += 1;
        report.kills += 1;
        let killed = Instant::now();
        let sampled = sampler.stop();
        let ready = ready_at.duration_since(server.started);
        record_samples(&opts.work_dir, kills, ready, &sampled.totals);
        let checked = report.rate_checks;
        if let Some((stored, spawn_ms)) = &schedule {
            check_run(opts, &sampled, stored, &offsets, *spawn_ms, ready, &mut report);
        }

        if opts.offline_check {
            offline_check(opts, &config, &st, kills, &mut report);
        }
        tokio::time::sleep(pick(&mut rng, opts.downtime)).await;

        // A kill during startup now and then: no checks, just the kill.
        if kills < opts.kills && rng.random_bool(opts.early_kill_chance) {
            let mut early = ServerProc::start(opts, &config, &log, starts)?;
            starts += 1;
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
            early.kill9();
            kills += 1;
            report.kills += 1;
            report.early_kills += 1;
        }

        // The schedule the next start begins from, read from the file.
        schedule = match stored_schedule(&data, &names) {
            Ok(stored) => Some((stored, unix_ms())),
            Err(e) => {
                report.violations.push(format!("after kill {kills}: {e}"));
                None
            }
        };
        let base = client.fleet_hits().await?;
        server = ServerProc::start(opts, &config, &log, starts)?;
        starts += 1;
        if let Some((_, spawn_ms)) = &mut schedule {
            *spawn_ms = unix_ms();
        }
        sampler = Sampler::start(client.clone(), server.started, base);
        if let Err(e) = wait_ready(&client, &mut server).await {
            report.violations.push(format!("restart after kill {kills}: {e}"));
            break;
        }
        ready_at = Instant::now();
        report.restarts_ok += 1;
        report.max_ready = report.max_ready.max(ready_at.duration_since(server.started));
        after_restart(&client, &mut st, kills, &mut report).await?;
        scan_log(&log, &mut log_scanned, kills, &mut report);
        if opts.progress {
            let run = match report.first_poll_ratios.last() {
                Some(r) if report.rate_checks > checked => format!("first polls {r:.2}× predicted"),
                _ => "not watched".into(),
            };
            eprintln!(
                "kill {kills:>4}/{}: down {:>5} ms, ready in {:>4} ms, must stay {:>4}, discarded {:>3}, run before: {run}",
                opts.kills,
                ready_at.duration_since(killed).as_millis(),
                ready_at.duration_since(server.started).as_millis(),
                st.must_stay.len(),
                st.discarded.len(),
            );
        }
    }
    drop(sampler);

    // The last restart: watch its rate, then a steady window with no kill.
    tokio::time::sleep(opts.observe).await;
    (report.measured_after_rps, report.peak_after_rps) = measure(&client, opts.floor, opts.window).await?;
    if let Ok(list) = client.dead_letters().await {
        for k in st.absent(&list) {
            report.missing += 1;
            report.violations.push(format!("end: {} missing", key_str(&k)));
        }
    }
    report.configured_rps = configured(&st);
    // Polling goes on at the rate it had before the kills (discarded tasks
    // are no longer polled).
    let expected = report.measured_before_rps * (opts.instances - st.discarded.len()) as f64 / opts.instances as f64;
    if report.measured_after_rps < 0.75 * expected {
        report.violations.push(format!(
            "after the last restart: {:.0} polls/s, {expected:.0} expected",
            report.measured_after_rps
        ));
    }
    drop(server);
    drop(fleet);
    report.duration = began.elapsed();
    Ok(report)
}

/// One record of a task that is not configured, so the first start is not a
/// cold start: a cold start polls every task at once and, with adaptive
/// polling off, keeps them in lockstep for good (docs/BENCHMARKS.md, hot
/// spot 6), which is not what a restart is about. With a record present
/// every task starts at its phase offset, as on a real first start of a
/// growing fleet; the stray record is deleted at startup.
fn seed_store(data: &Path) -> Result<(), String> {
    use pollster::model::{TaskKey, TaskRecord};
    let store = pollster::store::Store::open(data).map_err(|e| e.to_string())?;
    store
        .write_tasks(&[(TaskKey::new("phase-seed", "probe"), Some(TaskRecord::default()))])
        .map_err(|e| e.to_string())
}

async fn sleep_until(t: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await;
}

async fn wait_ready(client: &Client, server: &mut ServerProc) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(status) = server.exited() {
            return Err(format!("the server exited on start: {status}"));
        }
        if client.ready().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("the server did not answer within 30 s".into())
}

/// The fleet's request rate over `over`: the average, and the highest over
/// any `window`.
async fn measure(client: &Client, over: Duration, window: Duration) -> Result<(f64, f64), String> {
    let base = client.fleet_hits().await?;
    let sampler = Sampler::start(client.clone(), Instant::now(), base);
    tokio::time::sleep(over).await;
    let samples = sampler.stop().totals;
    let (Some(a), Some(b)) = (samples.first(), samples.last()) else {
        return Err("no fleet samples".into());
    };
    let average = b.1.saturating_sub(a.1) as f64 / (b.0 - a.0).as_secs_f64().max(1e-3);
    Ok((average, max_window_rate(&samples, window).unwrap_or(average)))
}

/// Flip `n` healthy instances to a failing behaviour.
async fn flip_some(
    client: &Client,
    st: &mut State,
    rng: &mut StdRng,
    n: usize,
    report: &mut Report,
) -> Result<(), String> {
    let mut healthy: Vec<String> = st
        .kind
        .iter()
        .filter(|(name, k)| k.as_str() == "healthy" && !st.retried.keys().any(|r| &r.0 == *name))
        .map(|(n, _)| n.clone())
        .collect();
    healthy.sort();
    for _ in 0..n.min(healthy.len()) {
        let name = healthy.swap_remove(rng.random_range(0..healthy.len()));
        let to = FLIP_TO[rng.random_range(0..FLIP_TO.len())];
        client.flip(&name, to).await?;
        st.kind.insert(name, to.to_string());
        report.flips += 1;
    }
    Ok(())
}

/// Discard an entry, or make its target healthy and retry it; record what
/// the answer promised.
async fn operator_action(client: &Client, st: &mut State, rng: &mut StdRng, report: &mut Report) -> Result<(), String> {
    let list = client.dead_letters().await?;
    st.acknowledge(&list, "operator", report);
    let candidates: Vec<Key> = st.must_stay.keys().filter(|k| list.contains_key(*k)).cloned().collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let k = candidates[rng.random_range(0..candidates.len())].clone();
    if rng.random_bool(0.5) {
        let (status, _) = client.action(false, &k).await?;
        if status == 200 {
            let hits = client.hits(&k.0).await?;
            st.must_stay.remove(&k);
            st.discarded.insert(k, hits);
            report.discards += 1;
        } else {
            report.refused_actions += 1;
        }
    } else {
        // Healthy first, so the probe the retry starts succeeds.
        client.flip(&k.0, "healthy").await?;
        st.kind.insert(k.0.clone(), "healthy".into());
        st.must_stay.remove(&k);
        let (status, body) = client.action(true, &k).await?;
        if status == 202 {
            let next = body["nextRun"].as_str().unwrap_or_default().to_string();
            st.retried.insert(k, next);
            report.retries += 1;
        } else {
            report.refused_actions += 1;
        }
    }
    Ok(())
}

/// The checks right after a restart.
async fn after_restart(client: &Client, st: &mut State, kill: usize, report: &mut Report) -> Result<(), String> {
    let mut list = client.dead_letters().await?;
    let mut absent = st.absent(&list);
    if !absent.is_empty() {
        // Read once more in case a page shifted between reads.
        list = client.dead_letters().await?;
        absent = st.absent(&list);
    }
    report.entries_checked += (st.must_stay.len() - absent.len()) as u64;
    for k in &absent {
        report.missing += 1;
        let now = list
            .get(k)
            .map_or("absent".to_string(), |e| format!("since {}", e.since));
        report.violations.push(format!(
            "restart after kill {kill}: acknowledged entry {} (since {}) lost: {now}",
            key_str(k),
            st.must_stay[k]
        ));
    }
    // Counted once: if it is listed again it is a new entry.
    for k in &absent {
        st.must_stay.remove(k);
    }
    for (k, hits) in &st.discarded {
        report.discard_checks += 1;
        let now = client.hits(&k.0).await?;
        if list.contains_key(k) || now != *hits {
            report.discards_lost += 1;
            report.violations.push(format!(
                "restart after kill {kill}: discarded {} is back (listed: {}, polls since the discard: {})",
                key_str(k),
                list.contains_key(k),
                now.saturating_sub(*hits)
            ));
        }
    }
    let mut done = Vec::new();
    for (k, next) in &st.retried {
        report.retry_checks += 1;
        match list.get(k) {
            // The probe succeeded: the task left the queue.
            None => done.push(k.clone()),
            // Not probed yet: the recheck time is the one the retry set.
            Some(e) if e.next_run == *next => {}
            Some(e) => {
                report.retries_lost += 1;
                report.violations.push(format!(
                    "restart after kill {kill}: retried {} has nextRun {} (reason {}), the retry promised {next}",
                    key_str(k),
                    e.next_run,
                    e.reason
                ));
            }
        }
    }
    for k in done {
        st.retried.remove(&k);
    }
    st.acknowledge(&list, &format!("restart after kill {kill}"), report);
    Ok(())
}

/// The file itself, read by `pollster admin dlq list` while no server runs.
fn offline_check(opts: &Options, config: &Path, st: &State, kill: usize, report: &mut Report) {
    let out = Command::new(&opts.pollster)
        .args(["admin", "dlq", "list", "--config", &config.to_string_lossy()])
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            report.violations.push(format!(
                "after kill {kill}: `pollster admin dlq list` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            return;
        }
        Err(e) => {
            report
                .violations
                .push(format!("after kill {kill}: cannot run pollster: {e}"));
            return;
        }
    };
    // TASK FAILURES SINCE NEXT-RECHECK LAST-ERROR
    let listed: HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let task = f.next()?.to_string();
            let _failures = f.next()?;
            Some((task, f.next()?.to_string()))
        })
        .collect();
    for (k, since) in &st.must_stay {
        report.offline_checked += 1;
        if listed.get(&key_str(k)) != Some(since) {
            report.offline_missing += 1;
            report.violations.push(format!(
                "after kill {kill}: acknowledged entry {} (since {since}) not in the file",
                key_str(k)
            ));
        }
    }
    for k in st.discarded.keys() {
        if listed.contains_key(&key_str(k)) {
            report.discards_lost += 1;
            report
                .violations
                .push(format!("after kill {kill}: discarded {} back in the file", key_str(k)));
        }
    }
}

/// One server run, from its start to the kill, against the schedule the file
/// held when it started (`stored`, `spawn_ms`); `ready` is when its API
/// answered, since the start.
fn check_run(
    opts: &Options,
    sampled: &Sampled,
    stored: &[Option<u64>],
    offsets: &[Duration],
    spawn_ms: u64,
    ready: Duration,
    report: &mut Report,
) {
    let Some(&(last, _)) = sampled.totals.last() else {
        return;
    };
    let end = last.min(ready + opts.observe);
    if end < opts.window {
        return;
    }
    // The busiest window of first polls, seen and predicted. The engine
    // placed its tasks somewhere between the start and ready: take the
    // busier prediction of the two.
    let mut seen: Vec<Duration> = sampled.first.iter().flatten().copied().filter(|t| *t <= end).collect();
    seen.sort();
    let seen_max = max_in_window(&seen, opts.window);
    let predicted_max = [Duration::ZERO, ready]
        .into_iter()
        .map(|start| {
            let p = predicted_first_polls(stored, offsets, spawn_ms, start);
            let p: Vec<Duration> = p.into_iter().filter(|t| *t <= end).collect();
            max_in_window(&p, opts.window)
        })
        .max()
        .unwrap_or(0);
    let allowed = allowed_first_polls(predicted_max);
    report.rate_checks += 1;
    let ratio = seen_max as f64 / predicted_max.max(1) as f64;
    report.first_poll_ratios.push(ratio);
    report.max_first_poll_ratio = report.max_first_poll_ratio.max(ratio);
    if seen_max > allowed {
        report.violations.push(format!(
            "kill {}: burst after the restart before it: {seen_max} first polls in {} ms, \
             the stored schedule predicts at most {predicted_max} (allowed {allowed})",
            report.kills,
            opts.window.as_millis()
        ));
    }

    // Polling resumed: every task the schedule says was due by half a
    // second before the end (placed at ready, the latest start) was polled.
    let cutoff = end.saturating_sub(Duration::from_millis(500));
    let mut due_count = 0;
    let mut unpolled = 0;
    for (i, (next, offset)) in stored.iter().zip(offsets).enumerate() {
        if first_poll_at(*next, *offset, spawn_ms, ready).is_some_and(|t| t <= cutoff) {
            due_count += 1;
            if sampled.first.get(i).is_none_or(|f| f.is_none()) {
                unpolled += 1;
            }
        }
    }
    report.resume_checked += due_count;
    report.resume_unpolled += unpolled;
    if unpolled > due_count / 100 + 2 {
        report.violations.push(format!(
            "kill {}: polling did not resume after the restart before it: {unpolled} of {due_count} due tasks not polled",
            report.kills
        ));
    }
    if let Some(first) = seen.first() {
        report.max_first_poll = report.max_first_poll.max(first.saturating_sub(ready));
    }

    // The fleet's total rate, for the report: ÷ the steady average and peak.
    let totals: Vec<(Duration, u64)> = sampled.totals.iter().copied().filter(|(t, _)| *t <= end).collect();
    if let Some(max) = max_window_rate(&totals, opts.window) {
        report.max_ratio = report.max_ratio.max(max / report.peak_before_rps.max(1.0));
        report.ratios.push(max / report.peak_before_rps.max(1.0));
        report.max_rate_rps = report.max_rate_rps.max(max);
    }
}

/// Appends one server run's totals to `rates.csv` in the work directory
/// (kill, ms since the process started, ms of ready, fleet requests).
fn record_samples(dir: &Path, kill: usize, ready: Duration, samples: &[(Duration, u64)]) {
    let Ok(mut f) = File::options().create(true).append(true).open(dir.join("rates.csv")) else {
        return;
    };
    for (t, h) in samples {
        let _ = writeln!(f, "{kill},{},{},{h}", t.as_millis(), ready.as_millis());
    }
}

/// Every task's stored next run (Unix ms; `None` if disabled), in fleet
/// order, read from the file while no server runs. The file must open and
/// every record must decode.
fn stored_schedule(data: &Path, names: &[String]) -> Result<Vec<Option<u64>>, String> {
    let store = pollster::store::Store::open(data).map_err(|e| format!("the database does not open: {e}"))?;
    let (tasks, corrupt) = store.load_tasks().map_err(|e| format!("cannot read task state: {e}"))?;
    if let Some(c) = corrupt.first() {
        return Err(format!("{} unreadable task record(s), first: {c}", corrupt.len()));
    }
    let by_instance: HashMap<&str, &pollster::model::TaskRecord> =
        tasks.iter().map(|(k, r)| (&*k.instance, r)).collect();
    Ok(names
        .iter()
        .map(|n| match by_instance.get(n.as_str()) {
            Some(r) if r.disabled => None,
            Some(r) => Some(r.next_run.0),
            // Never stored: placed at its offset like an overdue one.
            None => Some(0),
        })
        .collect())
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// New panics in the server log since the last scan.
fn scan_log(log: &Path, scanned: &mut u64, kill: usize, report: &mut Report) {
    let Ok(text) = std::fs::read(log) else { return };
    let from = (*scanned as usize).min(text.len());
    let new = String::from_utf8_lossy(&text[from..]);
    for line in new.lines().filter(|l| l.contains("panicked")) {
        report.violations.push(format!("by kill {kill}: server log: {line}"));
    }
    *scanned = text.len() as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rate() {
        let s: Vec<(Duration, u64)> = (0..=20).map(|i| (Duration::from_millis(i * 100), i * 10)).collect();
        let r = max_window_rate(&s, Duration::from_millis(500)).expect("rate");
        assert!((r - 100.0).abs() < 1e-9, "{r}");
        let mut b = s.clone();
        for x in b.iter_mut().skip(10) {
            x.1 += 200;
        }
        let r = max_window_rate(&b, Duration::from_millis(500)).expect("rate");
        assert!((r - 500.0).abs() < 1e-9, "{r}");
        assert_eq!(max_window_rate(&s[..3], Duration::from_millis(500)), None);
    }

    #[test]
    fn busiest_window() {
        let ms = |v: &[u64]| v.iter().map(|m| Duration::from_millis(*m)).collect::<Vec<_>>();
        assert_eq!(max_in_window(&[], Duration::from_millis(500)), 0);
        assert_eq!(
            max_in_window(&ms(&[0, 100, 499, 500, 900]), Duration::from_millis(500)),
            3
        );
        assert_eq!(max_in_window(&ms(&[0, 600, 1200]), Duration::from_millis(500)), 1);
    }

    #[test]
    fn the_prediction_keeps_times_ahead_and_places_overdue_tasks_at_their_offset() {
        let spawn = 1_000_000;
        let stored = [Some(spawn + 3_000), Some(spawn - 5_000), None, Some(spawn + 200)];
        let offsets = [
            Duration::from_millis(10),
            Duration::from_millis(1_500),
            Duration::ZERO,
            Duration::from_millis(700),
        ];
        let ms = Duration::from_millis;
        // The engine placed its tasks 300 ms after the start: the last task
        // (due at 200 ms) was overdue by then; the disabled one never polls.
        assert_eq!(
            predicted_first_polls(&stored, &offsets, spawn, ms(300)),
            vec![ms(1_000), ms(1_800), ms(3_000)]
        );
        assert_eq!(
            predicted_first_polls(&stored, &offsets, spawn, Duration::ZERO),
            vec![ms(200), ms(1_500), ms(3_000)]
        );
        assert_eq!(allowed_first_polls(0), 1);
        assert_eq!(allowed_first_polls(100), 166);
    }
}

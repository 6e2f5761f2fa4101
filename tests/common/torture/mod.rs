//! Crash torture: the real `pollster` binary polls a `pollster-fleet` process
//! full of failing targets and is killed with SIGKILL at random points, many
//! times over, on the same data directory. Shared by `tests/it/crash.rs` (a few
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

#[path = "../port.rs"]
pub(crate) mod port;

mod checks;
pub(crate) mod procs;
mod report;
mod schedule;

use checks::{State, after_restart, flip_some, offline_check, operator_action, scan_log};
use port::try_free_port;
use procs::{Client, FleetProc, Sampler, ServerProc, key_str, ms};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use report::Report;
use schedule::{check_run, max_window_rate, record_samples, stored_schedule, unix_ms};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    // The server closes a connection idle for 10 s; a pooled one is not
    // reused near that moment.
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(5))
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
    let api_port = try_free_port()?;
    let metrics_port = try_free_port()?;
    let config = opts.work_dir.join("pollster.toml");
    let log = opts.work_dir.join("pollster.log");
    std::fs::write(
        &config,
        config_text(opts, &fleet.base, api_port, metrics_port, &data, &names),
    )
    .map_err(|e| format!("{}: {e}", config.display()))?;
    client.api = format!("http://127.0.0.1:{api_port}");
    seed_store(&data)?;
    client.token = procs::create_token(&opts.pollster, &config, "torture")?;

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
        for k in st.confirm_absent(&client, &list).await? {
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
        for k in st.confirm_absent(&client, &list).await? {
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

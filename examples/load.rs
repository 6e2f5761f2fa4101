//! Load harness: the real appliance in-process against a simulated fleet in a
//! separate process, measuring achieved poll rate, dispatch lateness, CPU and
//! memory. Results and how to read them: docs/BENCHMARKS.md.
//!
//! ```text
//! cargo build --release --bin pollster-fleet
//! cargo run --release --example load -- --instances 2000 --interval 1s --seconds 20
//! cargo run --release --example load -- --instances 100000 --interval 1h --seconds 5 --idle
//! ```
//!
//! Every instance has one group (priority 1, floor = `--interval`) and
//! adaptive scheduling is off, so every task polls at exactly the interval.
//! A fresh data directory means a cold start (every task due at once);
//! `--phased` seeds the store so tasks start at their phase offsets instead.
//! Rate mode measures for `--seconds` after `--warmup`; `--idle` reports RSS
//! per task after one round of polls. Metrics are read from the collectors,
//! not through a scrape (which walks every task); `--scrape` adds scrapes to
//! measure what they cost.

use clap::Parser;
use pollster::app::Application;
use pollster::engine::EngineHandle;
use pollster::metrics::Metrics;
use pollster::model::{InstanceConfig, TaskKey, TaskRecord, TypeDef};
use prometheus::core::Collector;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Clock ticks per second of /proc/*/stat times (USER_HZ; 100 on Linux).
const CLK_TCK: f64 = 100.0;
const SCRAPE_EVERY: Duration = Duration::from_secs(15);

#[derive(Debug, Parser)]
struct Args {
    /// Instances (= tasks: one group each).
    #[arg(long, default_value_t = 2000)]
    instances: usize,
    /// Poll interval of every task.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Measurement window (rate mode) or settle time after the first round
    /// (idle mode), in seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// `scheduler.workers`: concurrent polls.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Memory mode: one round of polls, then RSS per task.
    #[arg(long)]
    idle: bool,
    /// Start tasks at their phase offsets instead of all at once.
    #[arg(long)]
    phased: bool,
    /// Print dispatch rate, p99 lateness and polls in flight every 250 ms.
    #[arg(long)]
    timeline: bool,
    /// Render /metrics as a scrape does, then GET it (and /values, with
    /// `--values`) from the metrics listener (once in idle mode, every 15 s
    /// else).
    #[arg(long)]
    scrape: bool,
    /// `[metrics] per_instance_histograms`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    per_instance_histograms: bool,
    /// Value rules in the group, each making one sample of the fleet's
    /// answer (`/status` mapped ok = 1, the instance name as a label).
    #[arg(long, default_value_t = 0)]
    values: usize,
}

fn main() {
    let args = Args::parse();
    let fleet = Fleet::spawn(args.instances);
    eprintln!("fleet: {} instances on {}", args.instances, fleet.addr);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    let data_dir = tempfile::tempdir().expect("a temporary data directory");
    if args.phased {
        // One record of a task that is not configured: the store is not
        // empty, so new tasks get phase offsets (and the record is deleted).
        let store = pollster::store::Store::open(data_dir.path()).expect("the store opens");
        let seed = (TaskKey::new("phase-seed", "probe"), Some(TaskRecord::default()));
        store.write_tasks(&[seed]).expect("the seed record is written");
    }

    let rss_before = rss_bytes();
    let built = Instant::now();
    let config = config(&args, fleet.addr, data_dir.path());
    let (shared, stop, server) = runtime.block_on(async {
        let api = tokio::net::TcpListener::bind("127.0.0.1:0").await;
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await;
        let app = Application::build_with_listeners(config, api.expect("bind"), metrics.expect("bind"))
            .await
            .expect("the appliance builds");
        let shared = Running {
            engine: app.engine(),
            metrics: app.metrics(),
            metrics_url: format!("http://{}/metrics", app.metrics_addr()),
            runtime: tokio::runtime::Handle::current(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until_stopped(async {
            let _ = rx.await;
        }));
        (shared, tx, server)
    });
    let startup = built.elapsed();

    let mut scrapes = Vec::new();
    let (a, b, burst) = if args.idle {
        measure_idle(&args, &shared, &fleet, built, &mut scrapes)
    } else {
        std::thread::sleep(args.warmup);
        let a = Snapshot::take(&shared, &fleet);
        (a, watch(&args, &shared, &fleet, &mut scrapes), None)
    };
    let rss = rss_bytes();
    let (ok, errors) = poll_totals(&shared);
    let mode = if args.idle { "idle" } else { "rate" };
    let start = if args.phased { "phased" } else { "cold" };
    let startup = startup.as_secs_f64();
    println!(
        "mode: {mode}, start: {start}, workers: {}, startup: {startup:.2} s",
        args.workers
    );
    println!("polls: {ok} ok / {errors} errors");
    for (how, took, bytes) in &scrapes {
        println!(
            "scrape ({how}): {:.1} MiB in {} ms",
            *bytes as f64 / 1048576.0,
            took.as_millis()
        );
    }
    print_row(&args, &a, &b, burst, rss, rss_before);

    drop(stop);
    runtime.block_on(async {
        match tokio::time::timeout(Duration::from_secs(20), server).await {
            Ok(Ok(Ok(()))) => {}
            other => eprintln!("the appliance did not stop cleanly: {other:?}"),
        }
    });
}

/// The fleet child process.
struct Fleet {
    child: Child,
    addr: SocketAddr,
}

impl Fleet {
    fn spawn(count: usize) -> Fleet {
        let exe = std::env::current_exe().expect("the path of this executable");
        let bin = exe
            .parent()
            .and_then(|d| d.parent())
            .map(|d| d.join("pollster-fleet"))
            .expect("examples/ has a parent directory");
        assert!(
            bin.exists(),
            "{} not found: run `cargo build --release --bin pollster-fleet` first",
            bin.display()
        );
        let mut child = Command::new(&bin)
            .args(["--count", &count.to_string(), "--mix", "healthy=100"])
            .args(["--bind", "127.0.0.1:0", "--threads", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => match line.strip_prefix("listening on http://") {
                    Some(a) => break a.trim().parse().expect("the fleet prints a socket address"),
                    None => eprintln!("fleet: {line}"),
                },
                _ => panic!("pollster-fleet exited before listening: {:?}", child.wait()),
            }
        };
        // Keep draining stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("fleet: {l}")));
        Fleet { child, addr }
    }

    fn cpu_secs(&self) -> f64 {
        cpu_secs(&self.child.id().to_string())
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(args: &Args, fleet: SocketAddr, data_dir: &std::path::Path) -> pollster::config::Config {
    let mut c = pollster::config::load(None, &BTreeMap::new()).expect("default config loads");
    c.server.data_dir = data_dir.to_path_buf();
    c.monitoring_file.adaptive.enabled = false;
    c.monitoring_file.scheduler.workers = args.workers;
    c.metrics.per_instance_histograms = args.per_instance_histograms;
    // Written as config-file JSON so fields added later take their defaults.
    let floor = pollster::model::duration_str::format(args.interval);
    let values: Vec<_> = (0..args.values)
        .map(|v| {
            json!({"metric": format!("bench_status_{v}"), "value": "/status",
                   "labels": {"name": "/instance"}, "map": {"ok": 1}})
        })
        .collect();
    let ty = json!({"name": "bench", "groups": [
        {"name": "probe", "priority": 1, "floor": floor, "values": values}
    ]});
    c.types
        .push(serde_json::from_value::<TypeDef>(ty).expect("a valid type"));
    c.instances = (0..args.instances)
        .map(|i| {
            let name = pollster::fleet::instance_name(i);
            let url = format!("http://{fleet}/i/{name}");
            let inst = json!({"name": name, "type": "bench", "url": url, "timeout": "5s"});
            serde_json::from_value::<InstanceConfig>(inst).expect("a valid instance")
        })
        .collect();
    c
}

/// The running appliance, as the measurements read it.
struct Running {
    engine: EngineHandle,
    metrics: Metrics,
    /// `GET /metrics` on the appliance's metrics listener.
    metrics_url: String,
    runtime: tokio::runtime::Handle,
}

impl Running {
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }
}

/// Counts a scrape's bytes and keeps none, as a client that reads as fast
/// as they come.
struct CountBytes(usize);

impl pollster::metrics::ChunkSink for CountBytes {
    fn chunk(&mut self, chunk: Vec<u8>) -> bool {
        self.0 += chunk.len();
        true
    }
}

/// One scrape as `GET /metrics` makes it (written in chunks, not kept),
/// then one through the metrics listener, read chunk by chunk and dropped.
fn scrape(shared: &Running, values: bool) -> Vec<Scrape> {
    let t = Instant::now();
    let CountBytes(bytes) = shared.metrics().write(CountBytes(0));
    let mut out = vec![("written", t.elapsed(), bytes)];
    let get = |what: &'static str, url: String| {
        shared.runtime.block_on(async {
            let t = Instant::now();
            let mut r = reqwest::get(&url).await.expect(what);
            assert!(r.status().is_success(), "{what}: {}", r.status());
            let mut bytes = 0;
            while let Some(chunk) = r.chunk().await.expect("the body") {
                bytes += chunk.len();
            }
            (what, t.elapsed(), bytes)
        })
    };
    out.push(get("GET /metrics", shared.metrics_url.clone()));
    // With value rules, the values too: what a scrape of both costs.
    if values {
        out.push(get("GET /values", shared.metrics_url.replace("/metrics", "/values")));
    }
    out
}

/// How a scrape was made, how long it took, its bytes.
type Scrape = (&'static str, Duration, usize);

/// Wait until every task has been polled once (the cold-start burst), then
/// settle for `--seconds`: the snapshots around the burst and its rate.
fn measure_idle(
    args: &Args,
    shared: &Running,
    fleet: &Fleet,
    built: Instant,
    scrapes: &mut Vec<Scrape>,
) -> (Snapshot, Snapshot, Option<f64>) {
    let n = args.instances as u64;
    let start = Snapshot::take(shared, fleet);
    let limit = Duration::from_secs(120 + n / 500);
    let round = loop {
        let dispatched = shared.metrics().dispatch_lateness.get_sample_count();
        if dispatched >= n && shared.in_flight() == 0 {
            break built.elapsed();
        }
        assert!(
            built.elapsed() < limit,
            "after {limit:?} only {dispatched} of {n} dispatched"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let end = Snapshot::take(shared, fleet);
    if args.scrape {
        scrapes.extend(scrape(shared, args.values > 0));
    }
    std::thread::sleep(Duration::from_secs(args.seconds));
    (start, end, Some(n as f64 / round.as_secs_f64()))
}

/// Sleep through the measurement window, printing a timeline and scraping
/// every [`SCRAPE_EVERY`] if asked; the snapshot at its end.
fn watch(args: &Args, shared: &Running, fleet: &Fleet, scrapes: &mut Vec<Scrape>) -> Snapshot {
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let (step, mut next_scrape) = (Duration::from_millis(250), Instant::now());
    let mut prev = Snapshot::take(shared, fleet);
    while (args.timeline || args.scrape) && Instant::now() + step < end {
        if args.scrape && Instant::now() >= next_scrape {
            scrapes.extend(scrape(shared, args.values > 0));
            next_scrape += SCRAPE_EVERY;
        }
        std::thread::sleep(step);
        if args.timeline {
            let cur = Snapshot::take(shared, fleet);
            let secs = cur.at.duration_since(prev.at).as_secs_f64();
            let rate = (cur.count - prev.count) as f64 / secs;
            let p99 = quantile(&prev, &cur, 0.99) * 1e3;
            let (in_flight, cores) = (shared.in_flight(), (cur.cpu - prev.cpu) / secs);
            eprintln!("{rate:>7.0} dispatches/s  p99 {p99:>6.1} ms  in flight {in_flight:>3}  {cores:.2} cores");
            prev = cur;
        }
    }
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    Snapshot::take(shared, fleet)
}

/// Counters at one instant.
struct Snapshot {
    at: Instant,
    completed: u64,
    /// (upper bound, cumulative count) of each lateness bucket.
    buckets: Vec<(f64, u64)>,
    count: u64,
    cpu: f64,
    fleet_cpu: f64,
    /// (busy, stolen) CPU time of the whole machine.
    machine_cpu: (f64, f64),
}

impl Snapshot {
    fn take(shared: &Running, fleet: &Fleet) -> Snapshot {
        let fam = shared.metrics().dispatch_lateness.collect();
        let h = fam
            .first()
            .and_then(|f| f.get_metric().first())
            .expect("the lateness histogram has one series")
            .get_histogram();
        // A dispatch is a completion once it is no longer in flight.
        let in_flight = shared.in_flight() as u64;
        Snapshot {
            at: Instant::now(),
            completed: h.get_sample_count().saturating_sub(in_flight),
            buckets: h
                .get_bucket()
                .iter()
                .map(|b| (b.upper_bound(), b.cumulative_count()))
                .collect(),
            count: h.get_sample_count(),
            cpu: cpu_secs("self"),
            fleet_cpu: fleet.cpu_secs(),
            machine_cpu: machine_cpu_secs(),
        }
    }
}

/// The `q` quantile of the observations between two snapshots, linear within
/// its bucket; infinite past the last bucket.
fn quantile(a: &Snapshot, b: &Snapshot, q: f64) -> f64 {
    let total = b.count.saturating_sub(a.count);
    if total == 0 {
        return f64::NAN;
    }
    let rank = q * total as f64;
    let mut prev = (0.0, 0u64);
    for ((upper, cb), (_, ca)) in b.buckets.iter().zip(&a.buckets) {
        let cum = cb.saturating_sub(*ca);
        if cum as f64 >= rank {
            let frac = (rank - prev.1 as f64) / ((cum - prev.1) as f64).max(1.0);
            return prev.0 + (upper - prev.0) * frac;
        }
        prev = (*upper, cum);
    }
    f64::INFINITY
}

/// Sum of `pollster_monitor_poll_total`: (success, error).
fn poll_totals(shared: &Running) -> (u64, u64) {
    shared.metrics().poll.totals()
}

/// The result table: one row for the window between `a` and `b`. `burst`
/// replaces the achieved rate (idle mode: the first round, from the build).
fn print_row(args: &Args, a: &Snapshot, b: &Snapshot, burst: Option<f64>, rss: u64, rss_before: u64) {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let polls = b.completed.saturating_sub(a.completed) as f64;
    let (cpu, fleet_cpu) = (b.cpu - a.cpu, b.fleet_cpu - a.fleet_cpu);
    // Everything else busy on the machine (other processes, and interrupts
    // of the loopback traffic), and time the hypervisor gave to other guests.
    let other = (b.machine_cpu.0 - a.machine_cpu.0) - cpu - fleet_cpu;
    let steal = b.machine_cpu.1 - a.machine_cpu.1;
    println!(
        "| instances | configured polls/s | achieved polls/s | p50 lateness ms | p99 lateness ms \
         | Pollster CPU µs/poll | Pollster cores | RSS MiB | RSS/task KiB | fleet cores | other cores | steal cores |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} |",
        args.instances,
        args.instances as f64 / args.interval.as_secs_f64(),
        burst.unwrap_or(polls / secs),
        quantile(a, b, 0.50) * 1e3,
        quantile(a, b, 0.99) * 1e3,
        cpu * 1e6 / polls,
        cpu / secs,
        rss as f64 / 1048576.0,
        rss.saturating_sub(rss_before) as f64 / args.instances as f64 / 1024.0,
        fleet_cpu / secs,
        other / secs,
        steal / secs,
    );
}

/// utime + stime of a process (`self` or a pid), in seconds.
fn cpu_secs(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat is readable");
    // The command name may contain spaces; the fields after it do not.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).expect("a /proc stat line");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) of the line; `rest` starts at field 3.
    let ticks = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / CLK_TCK
}

/// CPU time of the whole machine (all cores) from /proc/stat: (busy, stolen
/// by the hypervisor). Busy counts user, nice, system, irq and softirq.
fn machine_cpu_secs() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat is readable");
    let cpu = stat.lines().next().expect("the cpu line of /proc/stat");
    // user nice system idle iowait irq softirq steal
    let t: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let busy = t[0] + t[1] + t[2] + t[5] + t[6];
    (busy as f64 / CLK_TCK, t[7] as f64 / CLK_TCK)
}

/// Resident set size of this process, in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status is readable");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS in /proc/self/status")
}

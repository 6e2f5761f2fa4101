//! Side-by-side benchmark: the same N targets polled at the same interval by
//! (a) Pollster (`pollster serve`, a real process with a config file),
//! (b) Prometheus and vmagent scraping them as scrape targets (vmagent
//! remote-writes to a sink here that drops each batch), and (c) the raw hyper
//! client loop of `examples/floor.rs`, one after the other against one
//! `pollster-fleet` process. `bench/compare.sh` builds what it needs and runs
//! it; results and how to read them: docs/BENCHMARKS.md.
//!
//! ```text
//! compare --instances 10000 --interval 1s --warmup 15s --seconds 30
//! compare --instances 10000 --interval 1s --only floor,pollster,pollster-values --values 10
//! ```
//!
//! `pollster-values` is Pollster again, with `--values` value rules in its
//! group: each reads `/status` of the fleet's JSON answer
//! (`{"instance":NAME,"status":"ok"}`, `map = { ok = 1 }`), with the
//! instance name as a label, so every poll parses the body and makes
//! `--values` samples. With it the fleet answers JSON instead of the
//! Prometheus text format (for every client of the run, so `pollster` and
//! `pollster-values` poll the same bytes), and Prometheus cannot be run.
//!
//! For each client, after `--warmup`, over `--seconds`:
//! * polls: requests the fleet answered (its `/_control/stats` hit count), so
//!   the three are counted the same way;
//! * CPU: utime + stime of the client's process (all threads) from
//!   `/proc/PID/stat`; reported per 1,000 polls and as cores;
//! * RSS: `VmRSS` at the end of the window;
//! * lateness: Pollster's `pollster_scheduler_dispatch_lateness_seconds`
//!   (scraped just before and just after the window, outside the CPU
//!   measurement), the floor's own histogram, and for Prometheus the
//!   deviation of its measured scrape interval from the configured one
//!   (`prometheus_target_interval_length_seconds`, quantiles over its summary
//!   window): Prometheus has no dispatch-lateness figure of its own.

#[path = "../tests/common/port.rs"]
mod port;

use port::free_port;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

const CLK_TCK: f64 = 100.0;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    instances: usize,
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Which clients to run, in order: floor, pollster, pollster-values,
    /// prometheus, vmagent.
    #[arg(long, value_delimiter = ',', default_value = "floor,pollster,prometheus,vmagent")]
    only: Vec<String>,
    /// Value rules (one sample each) in the group of `pollster-values`.
    #[arg(long, default_value_t = 10)]
    values: usize,
    /// `scheduler.workers` of Pollster.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// The Prometheus binary.
    #[arg(long, default_value = "prometheus")]
    prometheus: PathBuf,
    /// The vmagent binary (Debian's `victoria-metrics` package).
    #[arg(long, default_value = "vmagent")]
    vmagent: PathBuf,
    /// During Pollster's window, also load its UI and API with this many
    /// concurrent clients: the window split between the health API, the
    /// dashboard and the instances list (two pages and a search); prints
    /// their latency.
    #[arg(long, default_value_t = 0)]
    ui_clients: usize,
    /// After Pollster's window, kill it with SIGKILL and start it again this
    /// many times, timing each start until the fleet sees its first poll.
    #[arg(long, default_value_t = 0)]
    restarts: usize,
    /// Pollster's instances in its database, as the API makes them (written
    /// in one transaction before the first start), not in the config file.
    #[arg(long)]
    store_instances: bool,
    /// Keep each client's scratch directory (config, data) and print where.
    #[arg(long)]
    keep: bool,
    /// Where the binaries are (default: next to this example's directory,
    /// i.e. target/release).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// One client's figures over the window.
#[derive(Debug, Clone)]
struct Row {
    client: String,
    polls: u64,
    secs: f64,
    cpu: f64,
    rss: u64,
    p50_ms: f64,
    p99_ms: f64,
    fleet_cpu: f64,
    /// Everything else the machine did meanwhile (other processes, this
    /// harness, loopback interrupts): runs where it is high are disturbed.
    other_cpu: f64,
}

fn main() {
    let args = Args::parse();
    let bin_dir = args.bin_dir.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().expect("the path of this executable");
        exe.parent()
            .and_then(Path::parent)
            .expect("examples/ has a parent directory")
            .to_path_buf()
    });
    let json = args.only.iter().any(|c| c == "pollster-values");
    assert!(
        !(json && args.only.iter().any(|c| c == "prometheus" || c == "vmagent")),
        "pollster-values needs the fleet's JSON answers, which Prometheus and vmagent cannot scrape: run them separately"
    );
    let fleet = Fleet::spawn(
        &bin_dir.join("pollster-fleet"),
        args.instances,
        if json { "json" } else { "prometheus" },
    );
    eprintln!("fleet: {} instances on {}", args.instances, fleet.addr);
    let mut rows = Vec::new();
    for client in &args.only {
        let scratch = tempfile::tempdir().expect("a scratch directory");
        let row = match client.as_str() {
            "floor" => run_floor(&args, &bin_dir, &fleet),
            "pollster" => run_pollster(&args, &bin_dir, &fleet, scratch.path(), 0),
            "pollster-values" => run_pollster(&args, &bin_dir, &fleet, scratch.path(), args.values),
            "prometheus" => run_prometheus(&args, &fleet, scratch.path()),
            "vmagent" => run_vmagent(&args, &fleet, scratch.path()),
            other => panic!("unknown client {other:?} (floor, pollster, pollster-values, prometheus, vmagent)"),
        };
        eprintln!("{row:?}");
        if args.keep {
            eprintln!("{client}: kept {}", scratch.keep().display());
        }
        rows.push(row);
        // Let the fleet's connections from this client close.
        std::thread::sleep(Duration::from_secs(2));
    }
    print!("{}", table(&args, &rows));
    let per_k = |client: &str| {
        rows.iter()
            .find(|r| r.client == client)
            .map(|r| r.cpu / (r.polls as f64 / 1000.0))
    };
    // Against each peer, Pollster's ratio beside the floor's: no client
    // that polls through hyper can go below the floor's.
    for peer in ["vmagent", "prometheus"] {
        if let Some(theirs) = per_k(peer) {
            let ratio = |client: &str| per_k(client).map_or("—".to_string(), |c| format!("{:.2}×", c / theirs));
            println!(
                "CPU per poll against {peer}: Pollster {}, floor {}",
                ratio("pollster"),
                ratio("floor")
            );
        }
    }
    if let (Some(with), Some(without)) = (per_k("pollster-values"), per_k("pollster")) {
        println!(
            "\nCPU per poll with {} value rules: {:.2}× without",
            args.values,
            with / without
        );
    }
}

fn table(args: &Args, rows: &[Row]) -> String {
    let configured = args.instances as f64 / args.interval.as_secs_f64();
    let floor = rows.iter().find(|r| r.client == "floor");
    let per_k = |r: &Row| r.cpu / (r.polls as f64 / 1000.0);
    let ms = |v: f64| {
        if v.is_nan() {
            "—".to_string()
        } else {
            format!("{v:.1}")
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| client | configured polls/s | achieved polls/s | CPU s per 1,000 polls | × floor | cores | RSS MiB | × floor | p50 lateness ms | p99 lateness ms | fleet cores | other cores |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let (cpu_x, rss_x) = match floor {
            Some(f) => (
                format!("{:.2}", per_k(r) / per_k(f)),
                format!("{:.2}", r.rss as f64 / f.rss as f64),
            ),
            None => ("—".into(), "—".into()),
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.4} | {} | {:.2} | {:.1} | {} | {} | {} | {:.2} | {:.2} |",
            r.client,
            configured,
            r.polls as f64 / r.secs,
            per_k(r),
            cpu_x,
            r.cpu / r.secs,
            r.rss as f64 / 1048576.0,
            rss_x,
            ms(r.p50_ms),
            ms(r.p99_ms),
            r.fleet_cpu / r.secs,
            r.other_cpu / r.secs,
        );
    }
    out
}

/// Counters at the edges of the window.
struct Mark {
    at: Instant,
    cpu: f64,
    hits: u64,
    fleet_cpu: f64,
    /// Busy CPU time of the whole machine (all processes, interrupts).
    machine_cpu: f64,
}

impl Mark {
    fn take(pid: u32, fleet: &Fleet) -> Mark {
        Mark {
            at: Instant::now(),
            cpu: cpu_secs(pid),
            hits: fleet.hits(),
            fleet_cpu: cpu_secs(fleet.child.id()),
            machine_cpu: machine_busy_secs(),
        }
    }
}

fn row(client: &str, a: &Mark, b: &Mark, pid: u32, (p50_ms, p99_ms): (f64, f64)) -> Row {
    Row {
        client: client.into(),
        polls: b.hits - a.hits,
        secs: b.at.duration_since(a.at).as_secs_f64(),
        cpu: b.cpu - a.cpu,
        rss: rss_bytes(pid),
        p50_ms,
        p99_ms,
        fleet_cpu: b.fleet_cpu - a.fleet_cpu,
        other_cpu: (b.machine_cpu - a.machine_cpu) - (b.cpu - a.cpu) - (b.fleet_cpu - a.fleet_cpu),
    }
}

/// Busy time of all cores from /proc/stat (user, nice, system, irq, softirq).
fn machine_busy_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let t: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(7)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let busy = t.first().unwrap_or(&0) + t.get(1).unwrap_or(&0) + t.get(2).unwrap_or(&0);
    (busy + t.get(5).unwrap_or(&0) + t.get(6).unwrap_or(&0)) as f64 / CLK_TCK
}

fn run_floor(args: &Args, bin_dir: &Path, fleet: &Fleet) -> Row {
    let bin = bin_dir.join("examples").join("floor");
    let child = Command::new(&bin)
        .args(["--base", &format!("http://{}", fleet.addr)])
        .args(["--instances", &args.instances.to_string()])
        .args(["--interval", &humantime::format_duration(args.interval).to_string()])
        .args(["--warmup", &humantime::format_duration(args.warmup).to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let mut child = Guard(child);
    let pid = child.0.id();
    std::thread::sleep(args.warmup);
    let a = Mark::take(pid, fleet);
    std::thread::sleep(Duration::from_secs(args.seconds));
    let b = Mark::take(pid, fleet);
    let rss = rss_bytes(pid);
    let mut out = String::new();
    BufReader::new(child.0.stdout.take().expect("piped stdout"))
        .read_line(&mut out)
        .expect("the floor's report");
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("the floor prints JSON");
    let ms = |k: &str| report[k].as_f64().unwrap_or(f64::NAN);
    Row {
        rss,
        ..row("floor", &a, &b, pid, (ms("p50_ms"), ms("p99_ms")))
    }
}

/// `values`: value rules in the group (0 for none), each giving one sample
/// per poll.
fn run_pollster(args: &Args, bin_dir: &Path, fleet: &Fleet, dir: &Path, values: usize) -> Row {
    let (api, metrics) = (free_port(), free_port());
    let floor = humantime::format_duration(args.interval).to_string();
    let mut config = format!(
        "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\n\
         data_dir = \"{}\"\n\n[adaptive]\nenabled = false\n\n[scheduler]\nworkers = {}\n\n\
         [[types]]\nname = \"bench\"\n[[types.groups]]\nname = \"probe\"\npriority = 1\nfloor = \"{floor}\"\n",
        dir.join("data").display(),
        args.workers,
    );
    for v in 0..values {
        let _ = write!(
            config,
            "\n[[types.groups.values]]\nmetric = \"bench_status_{v}\"\nhelp = \"Benchmark value {v}\"\n\
             value = \"/status\"\nlabels = {{ name = \"/instance\" }}\nmap = {{ ok = 1 }}\n"
        );
    }
    if args.store_instances {
        let instances: Vec<pollster::model::InstanceConfig> = (0..args.instances)
            .map(|i| {
                let name = pollster::fleet::instance_name(i);
                let url = format!("http://{}/i/{name}", fleet.addr);
                pollster::model::InstanceConfig {
                    timeout: Duration::from_secs(5),
                    ..pollster::model::InstanceConfig::new(&name, "bench", &url)
                }
            })
            .collect();
        let data = dir.join("data");
        std::fs::create_dir_all(&data).expect("the data directory");
        let store = pollster::store::Store::open(&data).expect("the store opens");
        store.put_instances(&instances).expect("the instances are written");
    } else {
        for i in 0..args.instances {
            let name = pollster::fleet::instance_name(i);
            let _ = write!(
                config,
                "\n[[instances]]\nname = \"{name}\"\ntype = \"bench\"\nurl = \"http://{}/i/{name}\"\ntimeout = \"5s\"\n",
                fleet.addr
            );
        }
    }
    let file = dir.join("pollster.toml");
    std::fs::write(&file, config).expect("the config is written");
    let bin = bin_dir.join("pollster");
    let token = if args.ui_clients > 0 {
        let out = Command::new(&bin)
            .args(["admin", "create-token", "--config"])
            .arg(&file)
            .args(["--name", "bench"])
            .output()
            .expect("pollster admin create-token runs");
        assert!(
            out.status.success(),
            "create-token: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        String::new()
    };
    let child = serve(&bin, &file);
    let pid = child.0.id();
    let metrics_addr: SocketAddr = format!("127.0.0.1:{metrics}").parse().expect("an address");
    std::thread::sleep(args.warmup);
    let before = lateness_buckets(&http_get(metrics_addr, "/metrics"));
    let a = Mark::take(pid, fleet);
    if args.ui_clients > 0 {
        let api_addr: SocketAddr = format!("127.0.0.1:{api}").parse().expect("an address");
        // The health API, the dashboard, the instances list (its first
        // page, a later page, and a search for the last instance's name
        // without its last digit, which reads every name) in turn, each for
        // an equal part of the window.
        let last = pollster::fleet::instance_name(args.instances - 1);
        let search = format!("/instances?q={}", &last[..last.len() - 1]);
        let paths = [
            "/api/monitoring/scheduler/health",
            "/",
            "/instances",
            "/instances?page=50",
            search.as_str(),
        ];
        let part = Duration::from_secs(args.seconds) / paths.len() as u32;
        for path in paths {
            let l = ui_load(api_addr, path, &token, args.ui_clients, part);
            println!(
                "ui load {path}: {} clients, {} requests ({:.0}/s), {} failed, latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                args.ui_clients,
                l.count,
                l.count as f64 / part.as_secs_f64(),
                l.failed,
                l.p50_ms,
                l.p99_ms,
                l.max_ms
            );
        }
    } else {
        std::thread::sleep(Duration::from_secs(args.seconds));
    }
    let b = Mark::take(pid, fleet);
    let rss = rss_bytes(pid);
    let after = lateness_buckets(&http_get(metrics_addr, "/metrics"));
    let q = |q| quantile(&before, &after, q) * 1e3;
    if values > 0 {
        // Outside the window: the rules did make their samples.
        let started = Instant::now();
        let text = http_get(metrics_addr, "/values");
        let samples = text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
        println!(
            "pollster-values: /values has {samples} samples ({} expected: {} instances × {values} rules), {:.1} MB, {:.0} ms",
            args.instances * values,
            args.instances,
            text.len() as f64 / 1e6,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    let mut child = child;
    for i in 0..args.restarts {
        let _ = child.0.kill();
        let _ = child.0.wait();
        std::thread::sleep(Duration::from_millis(500));
        let hits = fleet.hits();
        let started = Instant::now();
        child = serve(&bin, &file);
        while fleet.hits() == hits {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no poll 120 s after the restart"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let first = started.elapsed();
        let ready_url = format!("127.0.0.1:{api}").parse().expect("an address");
        http_get(ready_url, "/readyz");
        println!(
            "restart {}: SIGKILL, start to first poll {:.0} ms, to /readyz 200 {:.0} ms",
            i + 1,
            first.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    Row {
        rss,
        ..row(
            if values > 0 { "pollster-values" } else { "pollster" },
            &a,
            &b,
            pid,
            (q(0.50), q(0.99)),
        )
    }
}

/// The scrape config Prometheus and vmagent both read: one static target
/// per instance, its path in `__metrics_path__`, scraped at the interval.
fn scrape_config(args: &Args, fleet: &Fleet) -> String {
    let ms = args.interval.as_millis();
    let mut config = format!(
        "global:\n  scrape_interval: {ms}ms\n  scrape_timeout: {ms}ms\nscrape_configs:\n  - job_name: fleet\n    static_configs:\n",
    );
    for i in 0..args.instances {
        let name = pollster::fleet::instance_name(i);
        let _ = write!(
            config,
            "      - targets: ['{}']\n        labels: {{instance: '{name}', __metrics_path__: '/i/{name}'}}\n",
            fleet.addr
        );
    }
    config
}

/// Starts a scraper, waits out the warm-up and measures the window.
fn measure(client: &str, mut command: Command, fleet: &Fleet, args: &Args) -> (Guard, Mark, Mark) {
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {client}: {e}"));
    let child = Guard(child);
    let pid = child.0.id();
    std::thread::sleep(args.warmup);
    let a = Mark::take(pid, fleet);
    std::thread::sleep(Duration::from_secs(args.seconds));
    let b = Mark::take(pid, fleet);
    (child, a, b)
}

fn run_prometheus(args: &Args, fleet: &Fleet, dir: &Path) -> Row {
    let port = free_port();
    let secs = args.interval.as_secs_f64();
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, scrape_config(args, fleet)).expect("the config is written");
    let mut command = Command::new(&args.prometheus);
    command
        .arg(format!("--config.file={}", file.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn");
    let (child, a, b) = measure("prometheus", command, fleet, args);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("an address");
    let text = http_get(addr, "/metrics");
    let jitter = |q: &str| {
        text.lines()
            .filter(|l| l.starts_with("prometheus_target_interval_length_seconds{"))
            .find(|l| l.contains(&format!("quantile=\"{q}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(f64::NAN, |v| (v - secs).abs() * 1e3)
    };
    row("prometheus", &a, &b, child.0.id(), (jitter("0.5"), jitter("0.99")))
}

/// vmagent (Debian's `victoria-metrics` package) scraping the same targets
/// and remote-writing every sample to a sink in this process that reads and
/// drops each batch, so what is measured is vmagent's own scrape, parse,
/// relabel and compress-and-send work. It has no figure for how late a
/// scrape starts, so its lateness columns are empty.
fn run_vmagent(args: &Args, fleet: &Fleet, dir: &Path) -> Row {
    let sink = null_sink();
    let file = dir.join("vmagent.yml");
    std::fs::write(&file, scrape_config(args, fleet)).expect("the config is written");
    let mut command = Command::new(&args.vmagent);
    command
        .arg(format!("-promscrape.config={}", file.display()))
        .arg(format!("-remoteWrite.url=http://{sink}/api/v1/write"))
        .arg(format!(
            "-remoteWrite.tmpDataPath={}",
            dir.join("vmagent-data").display()
        ))
        .arg(format!("-httpListenAddr=127.0.0.1:{}", free_port()))
        .arg("-loggerLevel=ERROR");
    let (child, a, b) = measure("vmagent", command, fleet, args);
    row("vmagent", &a, &b, child.0.id(), (f64::NAN, f64::NAN))
}

/// A remote-write receiver that answers every request `204 No Content`
/// after reading its body (HTTP/1.1 keep-alive, `Content-Length` bodies, as
/// vmagent sends them), one thread per connection.
fn null_sink() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port for the sink");
    let addr = listener.local_addr().expect("the sink's address");
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err()
                        || reader.get_mut().write_all(b"HTTP/1.1 204 No Content\r\n\r\n").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Latency of one UI/API load run.
struct UiLoad {
    count: usize,
    failed: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// `clients` concurrent keep-alive clients requesting `path` back to back
/// for `duration`, with the API token.
fn ui_load(addr: SocketAddr, path: &str, token: &str, clients: usize, duration: Duration) -> UiLoad {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let url = format!("http://{addr}{path}");
    let (mut lat, failed) = runtime.block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().expect("a client");
        let end = tokio::time::Instant::now() + duration;
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let (client, url, token) = (client.clone(), url.clone(), token.to_string());
            tasks.push(tokio::spawn(async move {
                let (mut lat, mut failed) = (Vec::new(), 0usize);
                while tokio::time::Instant::now() < end {
                    let t = Instant::now();
                    let ok = match client.get(&url).bearer_auth(&token).send().await {
                        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                        _ => false,
                    };
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                    failed += usize::from(!ok);
                }
                (lat, failed)
            }));
        }
        let mut all = (Vec::new(), 0);
        for t in tasks {
            let (lat, failed) = t.await.expect("a load task");
            all.0.extend(lat);
            all.1 += failed;
        }
        all
    });
    lat.sort_by(f64::total_cmp);
    let at = |q: f64| {
        lat.get(((lat.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(f64::NAN)
    };
    UiLoad {
        count: lat.len(),
        failed,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: lat.last().copied().unwrap_or(f64::NAN),
    }
}

/// `pollster serve --config FILE`, killed when the guard is dropped.
fn serve(bin: &Path, file: &Path) -> Guard {
    let child = Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(file)
        .env("RUST_LOG", "warn")
        // An admin exists, so the dashboard renders rather than sending to /setup.
        .env("POLLSTER_ADMIN_PASSWORD", "side-by-side-benchmark")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    Guard(child)
}

/// Kills the child when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Fleet {
    child: Child,
    addr: SocketAddr,
}

impl Fleet {
    /// `body`: `prometheus` or `json`.
    fn spawn(bin: &Path, count: usize, body: &str) -> Fleet {
        let mut child = Command::new(bin)
            .args(["--count", &count.to_string(), "--mix", "healthy=100"])
            .args(["--bind", "127.0.0.1:0", "--threads", "1", "--body", body])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(a) = line.strip_prefix("listening on http://") {
                        break a.trim().parse().expect("the fleet prints a socket address");
                    }
                }
                _ => panic!("pollster-fleet exited before listening: {:?}", child.wait()),
            }
        };
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("fleet: {l}")));
        Fleet { child, addr }
    }

    fn hits(&self) -> u64 {
        let body = http_get(self.addr, "/_control/stats");
        let stats: serde_json::Value = serde_json::from_str(&body).expect("fleet stats are JSON");
        stats["total_hits"].as_u64().expect("total_hits")
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking `GET` over a fresh connection: the body, or a panic naming the
/// URL (every server here is ours and on loopback).
fn http_get(addr: SocketAddr, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let attempt = (|| -> std::io::Result<String> {
            let mut s = TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(60)))?;
            write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
            let mut raw = Vec::new();
            s.read_to_end(&mut raw)?;
            let text = String::from_utf8_lossy(&raw).into_owned();
            let (head, body) = text
                .split_once("\r\n\r\n")
                .ok_or_else(|| std::io::Error::other("no header end"))?;
            if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
                return Err(std::io::Error::other(head.lines().next().unwrap_or("").to_string()));
            }
            Ok(body.to_string())
        })();
        match attempt {
            Ok(body) => return body,
            Err(e) if Instant::now() < deadline => {
                eprintln!("GET http://{addr}{path}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("GET http://{addr}{path}: {e}"),
        }
    }
}

/// `le` → cumulative count of the dispatch-lateness histogram.
fn lateness_buckets(text: &str) -> BTreeMap<u64, (f64, u64)> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("pollster_scheduler_dispatch_lateness_seconds_bucket{le=\"") else {
            continue;
        };
        let Some((le, value)) = rest.split_once("\"} ") else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::NAN)
        };
        let count = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
        // Keyed by the bound's bits so the map sorts by bound (all positive).
        out.insert(le.to_bits(), (le, count));
    }
    out
}

/// The `q` quantile of the observations between two scrapes, linear within
/// its bucket.
fn quantile(a: &BTreeMap<u64, (f64, u64)>, b: &BTreeMap<u64, (f64, u64)>, q: f64) -> f64 {
    let delta: Vec<(f64, u64)> = b
        .iter()
        .map(|(k, (le, cb))| (*le, cb.saturating_sub(a.get(k).map_or(0, |x| x.1))))
        .collect();
    let total = delta.last().map_or(0, |d| d.1);
    if total == 0 {
        return f64::NAN;
    }
    let rank = q * total as f64;
    let mut prev = (0.0, 0u64);
    for (upper, cum) in delta {
        if cum as f64 >= rank {
            if upper.is_infinite() {
                return prev.0;
            }
            let frac = (rank - prev.1 as f64) / ((cum - prev.1) as f64).max(1.0);
            return prev.0 + (upper - prev.0) * frac;
        }
        prev = (upper, cum);
    }
    f64::INFINITY
}

/// utime + stime of a process and all its threads, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / CLK_TCK
}

fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

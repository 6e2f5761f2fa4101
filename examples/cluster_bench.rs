//! Cluster mode measured on real `pollster serve` processes on loopback:
//! how long a killed member's units wait for a new owner, how long a
//! member that comes back waits for its own, what the targets see twice
//! meanwhile, what gossip costs in bytes, and what membership costs an idle
//! member in CPU. Results and how to read them: docs/BENCHMARKS.md,
//! section 11.
//!
//! ```text
//! cargo build --release --bin pollster --example cluster_bench
//! target/release/examples/cluster_bench                       # all three parts, about 10 min
//! target/release/examples/cluster_bench --only failover --kills 10
//! target/release/examples/cluster_bench --only gossip --members 10 --units 50
//! target/release/examples/cluster_bench --only cpu --window 60
//! ```
//!
//! One HTTP target in this process answers every instance (`/i/NAME`, 200
//! and a small JSON body) and records when each request came, so a request
//! that follows the previous one to the same instance too soon is seen.
//! Every instance polls one group whose floor is 2, 3, 4 or 5 s, adaptive
//! scheduling off, so one poller asks each instance exactly once per floor.
//! Each pool's budget (5 rps) is more than its four instances ask (2 rps at
//! most), so the budget never stretches an interval.
//!
//! * **failover**: three members (`min_members = 2`) share `--pools` pools
//!   of `--pool-size` instances and `--lone` instances without a pool.
//!   `--kills` times: SIGKILL a member that owns units (each in turn),
//!   time from the kill until the surviving members' `GET /api/cluster`
//!   list every unit it owned (read every 100 ms), start it again and time
//!   until its own `GET /api/cluster` lists them all again (the
//!   hand-back). Then: every unit once, every member live and ready, 5 s
//!   of quiet, and the next kill. A *duplicate* is a request to an instance
//!   less than half its floor after the one before it; they are counted on
//!   the moved units' instances from the kill to the restart (takeover),
//!   and from the restart to the next kill (hand-back), and on every other
//!   instance over the same spans (which must stay at zero).
//! * **gossip**: `pollster_cluster_gossip_bytes_total{direction}` of each
//!   member's `/metrics`, read once every unit has one owner (and 5 s
//!   later) and again `--window` seconds later, with 3 and with `--members`
//!   members, idle (3 units: one pool of two and two instances without a
//!   pool) and sharing `--units` units (a fifth of them pools of four).
//! * **cpu**: three members with `[cluster]` and no instance, and beside
//!   them one `pollster serve` with the same file but no `[cluster]`;
//!   utime + stime of each process from `/proc/PID/stat` over `--window`
//!   seconds, as CPU seconds a minute.
//!
//! Each part prints its figures as it ends, and the busy CPU of the whole
//! machine over it (from `/proc/stat`), so other load shows.

#[path = "../tests/common/port.rs"]
mod port;
#[path = "common/release.rs"]
mod release;

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use clap::{Parser, ValueEnum};
use port::free_port;
use release::default_bin;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Clock ticks per second of /proc/*/stat times (USER_HZ; 100 on Linux).
const CLK_TCK: f64 = 100.0;
/// How often the takeover and the hand-back are looked for.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// A takeover or a hand-back not seen in this long is reported as missed.
const GIVE_UP: Duration = Duration::from_secs(60);
/// Quiet time after the members settle, before the next kill or a
/// measurement window: the moves' last requests are behind it.
const QUIET: Duration = Duration::from_secs(5);
/// Each pool's budget: above what its instances ask at their floors.
const POOL_RPS: f64 = 5.0;
/// The floors the instances poll at, in turn.
const FLOORS_S: [u64; 4] = [2, 3, 4, 5];

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Part {
    Failover,
    Gossip,
    Cpu,
}

#[derive(Debug, Parser)]
struct Args {
    /// SIGKILLs (each followed by a restart) in the failover part.
    #[arg(long, default_value_t = 10)]
    kills: usize,
    /// Pools of the failover part's fleet.
    #[arg(long, default_value_t = 6)]
    pools: usize,
    /// Instances in each pool of the failover part.
    #[arg(long, default_value_t = 4)]
    pool_size: usize,
    /// Instances without a pool in the failover part (a unit each).
    #[arg(long, default_value_t = 4)]
    lone: usize,
    /// Members of the larger cluster in the gossip part (the smaller has 3).
    #[arg(long, default_value_t = 10)]
    members: usize,
    /// Units the members share in the gossip part's loaded runs.
    #[arg(long, default_value_t = 50)]
    units: usize,
    /// Length of each gossip and CPU measurement, in seconds.
    #[arg(long, default_value_t = 60)]
    window: u64,
    /// Print, for each kill, when each moved instance was asked, in seconds
    /// from the kill and from the restart.
    #[arg(long)]
    timeline: bool,
    /// Run one part only.
    #[arg(long, value_enum)]
    only: Option<Part>,
    /// The `pollster` binary (default: next to this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Keep the configs, data directories and logs here (default: a
    /// temporary directory, removed at the end).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let bin = args.bin.clone().unwrap_or_else(default_bin);
    assert!(
        bin.exists(),
        "{} not found: run `cargo build --release --bin pollster` first",
        bin.display()
    );
    let temp = tempfile::tempdir().expect("a temporary directory");
    let dir = match &args.out {
        Some(d) => {
            std::fs::create_dir_all(d).expect("the --out directory");
            d.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let key = write_key(&dir);
    let target = Target::start().await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("an HTTP client");
    let bench = Bench {
        bin,
        dir,
        key,
        target,
        client,
    };
    let started = Instant::now();
    let runs = |p: Part| args.only.is_none_or(|o| o == p);
    if runs(Part::Failover) {
        bench.failover(&args).await;
    }
    if runs(Part::Gossip) {
        bench.gossip(&args).await;
    }
    if runs(Part::Cpu) {
        bench.cpu(&args).await;
    }
    eprintln!("done in {:.1} min", started.elapsed().as_secs_f64() / 60.0);
}

/// The 32-byte cluster key every member seals its gossip with, mode 0600 as
/// `serve` demands.
fn write_key(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("cluster.key");
    std::fs::write(&path, pollster::secrets::DataKey::from_bytes([7; 32]).to_file_text()).expect("write the key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod 0600 the key");
    path
}

/// What every part works with.
struct Bench {
    bin: PathBuf,
    dir: PathBuf,
    key: PathBuf,
    target: Target,
    client: reqwest::Client,
}

/// The requests each instance received, by instance name.
#[derive(Clone, Default)]
struct RequestLog(Arc<Mutex<HashMap<String, Vec<Instant>>>>);

/// The HTTP target of every instance: `/i/NAME` answers 200 and records
/// the time of the request, which the simulated fleet does not keep.
struct Target {
    base: String,
    log: RequestLog,
}

impl Target {
    async fn start() -> Target {
        let log = RequestLog::default();
        let app = axum::Router::new()
            .route("/i/{name}", axum::routing::get(answer))
            .with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the target on loopback");
        let addr = listener.local_addr().expect("the target's address");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("the target serves") });
        Target {
            base: format!("http://{addr}"),
            log,
        }
    }

    fn url(&self, name: &str) -> String {
        format!("{}/i/{name}", self.base)
    }

    /// When `name` was asked, in order.
    fn requests(&self, name: &str) -> Vec<Instant> {
        self.log
            .0
            .lock()
            .expect("the request log")
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}

async fn answer(State(log): State<RequestLog>, UrlPath(name): UrlPath<String>) -> Json<Value> {
    log.0
        .lock()
        .expect("the request log")
        .entry(name.clone())
        .or_default()
        .push(Instant::now());
    Json(json!({ "instance": name, "status": "ok" }))
}

/// A unit of ownership: a pool and its instances, or one instance without a
/// pool (then `name` is the instance's).
struct UnitSpec {
    name: String,
    pool: bool,
    /// Each instance and its floor.
    instances: Vec<(String, Duration)>,
}

/// `pools` pools of `pool_size` instances and `lone` instances without a
/// pool, their names starting with `prefix`; the floors go round
/// [`FLOORS_S`].
fn layout(prefix: &str, pools: usize, pool_size: usize, lone: usize) -> Vec<UnitSpec> {
    let mut n = 0;
    let mut next = |name: String| {
        n += 1;
        (name, Duration::from_secs(FLOORS_S[(n - 1) % FLOORS_S.len()]))
    };
    let mut units: Vec<UnitSpec> = (0..pools)
        .map(|p| UnitSpec {
            name: format!("{prefix}pool-{p}"),
            pool: true,
            instances: (0..pool_size).map(|i| next(format!("{prefix}p{p}-{i}"))).collect(),
        })
        .collect();
    units.extend((0..lone).map(|i| {
        let (name, floor) = next(format!("{prefix}lone-{i}"));
        UnitSpec {
            name: name.clone(),
            pool: false,
            instances: vec![(name, floor)],
        }
    }));
    units
}

/// The part of the config every member shares: one type per floor, the
/// pools and the instances, adaptive scheduling off.
fn shared_config(target: &Target, units: &[UnitSpec]) -> String {
    let mut cfg = String::from("[adaptive]\nenabled = false\n\n");
    for f in FLOORS_S {
        cfg.push_str(&format!(
            "[[types]]\nname = \"every{f}s\"\n[[types.groups]]\nname = \"probe\"\npath = \"\"\npriority = 1\nfloor = \"{f}s\"\n\n"
        ));
    }
    for u in units.iter().filter(|u| u.pool) {
        cfg.push_str(&format!(
            "[[budgets]]\nname = \"{}\"\nrequests_per_second = {POOL_RPS}\n\n",
            u.name
        ));
    }
    for u in units {
        for (name, floor) in &u.instances {
            let budget = if u.pool {
                format!("budget = \"{}\"\n", u.name)
            } else {
                String::new()
            };
            cfg.push_str(&format!(
                "[[instances]]\nname = \"{name}\"\ntype = \"every{}s\"\nurl = \"{}\"\ntimeout = \"1s\"\n{budget}\n",
                floor.as_secs(),
                target.url(name)
            ));
        }
    }
    cfg
}

/// A UDP port free on loopback now, for a member's gossip.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

/// A member's `[cluster]` section.
struct Membership<'a> {
    gossip: u16,
    seeds: &'a [u16],
    key: &'a Path,
    min_members: usize,
}

/// One `pollster serve` process, with its own config, data directory, log
/// and API token.
struct Member {
    name: String,
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    api: String,
    metrics: String,
    token: String,
    child: Option<Child>,
}

impl Member {
    /// Writes the member's config (`[server]` on free loopback ports, the
    /// `[cluster]` of `membership` if any, then `shared`) and makes an API
    /// token in its data directory.
    fn new(bin: &Path, dir: &Path, name: &str, membership: Option<&Membership>, shared: &str) -> Member {
        let (api, metrics) = (free_port(), free_port());
        let data = dir.join(name);
        let mut text = format!(
            "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\ndata_dir = \"{}\"\n\n",
            data.display()
        );
        if let Some(m) = membership {
            let seeds: Vec<String> = m.seeds.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
            text.push_str(&format!(
                "[cluster]\nname = \"bench\"\nmember = \"{name}\"\nlisten = \"127.0.0.1:{}\"\nseeds = [{}]\nkey_file = \"{}\"\nmin_members = {}\n\n",
                m.gossip,
                seeds.join(", "),
                m.key.display(),
                m.min_members
            ));
        }
        text.push_str(shared);
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, text).expect("write a member's config");
        let out = Command::new(bin)
            .args(["admin", "create-token", "--config"])
            .arg(&config)
            .args(["--name", "bench"])
            .output()
            .expect("run pollster admin create-token");
        assert!(
            out.status.success(),
            "create-token for {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Member {
            name: name.into(),
            bin: bin.to_path_buf(),
            log: config.with_extension("log"),
            config,
            api: format!("http://127.0.0.1:{api}"),
            metrics: format!("http://127.0.0.1:{metrics}/metrics"),
            token: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            child: None,
        }
    }

    /// Starts `pollster serve`, its log appended to the member's log file.
    fn start(&mut self) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open a member's log file");
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start pollster serve");
        self.child = Some(child);
    }

    /// SIGKILL, and reap it.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn running(&self) -> bool {
        self.child.is_some()
    }

    /// utime + stime of the process so far, in seconds.
    fn cpu_secs(&self) -> f64 {
        let pid = self.child.as_ref().expect("a running member").id();
        cpu_secs(pid)
    }

    /// `GET /api/cluster`, or `None` while the member does not answer.
    async fn cluster(&self, client: &reqwest::Client) -> Option<Value> {
        let r = client
            .get(format!("{}/api/cluster", self.api))
            .bearer_auth(&self.token)
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    }

    /// The units this member says it polls, from its own `GET /api/cluster`.
    async fn units(&self, client: &reqwest::Client) -> Option<BTreeSet<String>> {
        let c = self.cluster(client).await?;
        own_units(&c, &self.name)
    }

    /// The sealed gossip bytes this member has sent and received.
    async fn gossip_bytes(&self, client: &reqwest::Client) -> Option<(f64, f64)> {
        let text = client.get(&self.metrics).send().await.ok()?.text().await.ok()?;
        let read = |direction: &str| {
            let series = format!("pollster_cluster_gossip_bytes_total{{direction=\"{direction}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&series))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        Some((read("sent")?, read("received")?))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The units `member` lists as its own in a `GET /api/cluster` answer.
fn own_units(cluster: &Value, member: &str) -> Option<BTreeSet<String>> {
    let me = cluster["members"].as_array()?.iter().find(|m| m["name"] == member)?;
    Some(
        me["units"]
            .as_array()?
            .iter()
            .filter_map(|u| u.as_str().map(str::to_string))
            .collect(),
    )
}

fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat is readable");
    // The command name may contain spaces; the fields after it do not.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).expect("a /proc stat line");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) of the line; `rest` starts at field 3.
    let ticks = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    ticks as f64 / CLK_TCK
}

/// Busy CPU seconds of the whole machine (all cores: user, nice, system,
/// irq, softirq) from /proc/stat.
fn machine_busy_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat is readable");
    let cpu = stat.lines().next().expect("the cpu line of /proc/stat");
    let t: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .take(7)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    (t[0] + t[1] + t[2] + t[5] + t[6]) as f64 / CLK_TCK
}

/// The machine's busy cores since `from` (busy seconds, start time).
fn busy_cores(from: (f64, Instant)) -> f64 {
    (machine_busy_secs() - from.0) / from.1.elapsed().as_secs_f64()
}

fn machine_mark() -> (f64, Instant) {
    (machine_busy_secs(), Instant::now())
}

/// `n` members of one cluster, each in `dir/NAME`, sharing `shared`, with
/// `min_members` a majority; started.
fn start_cluster(bench: &Bench, dir: &Path, prefix: &str, n: usize, shared: &str) -> Vec<Member> {
    std::fs::create_dir_all(dir).expect("a directory for the members");
    let ports: Vec<u16> = (0..n).map(|_| free_udp_port()).collect();
    let mut members: Vec<Member> = ports
        .iter()
        .enumerate()
        .map(|(i, &gossip)| {
            let membership = Membership {
                gossip,
                seeds: &ports,
                key: &bench.key,
                min_members: n / 2 + 1,
            };
            Member::new(&bench.bin, dir, &format!("{prefix}{i}"), Some(&membership), shared)
        })
        .collect();
    for m in &mut members {
        m.start();
    }
    members
}

/// Each running member's units, when every running member answers, sees
/// just the running members, all live and ready and none paused, and the
/// units they poll are `all` with each once.
async fn settled(
    client: &reqwest::Client,
    members: &[Member],
    all: &BTreeSet<String>,
) -> Option<BTreeMap<String, BTreeSet<String>>> {
    let running: BTreeSet<&str> = members
        .iter()
        .filter(|m| m.running())
        .map(|m| m.name.as_str())
        .collect();
    let mut split = BTreeMap::new();
    for m in members.iter().filter(|m| m.running()) {
        let c = m.cluster(client).await?;
        let listed = c["members"].as_array()?;
        let names: BTreeSet<&str> = listed.iter().filter_map(|x| x["name"].as_str()).collect();
        let well = listed.iter().all(|x| {
            let name = x["name"].as_str().unwrap_or_default();
            !running.contains(name) || (x["state"] == "live" && x["ready"] == true)
        });
        if !running.is_subset(&names) || !well || c["pollingPaused"] != false {
            return None;
        }
        split.insert(m.name.clone(), own_units(&c, &m.name)?);
    }
    let mut seen = BTreeSet::new();
    let once = split.values().flatten().all(|u| seen.insert(u.clone()));
    (once && seen == *all).then_some(split)
}

/// Waits up to `limit` for [`settled`]; the split and how long it took.
async fn wait_settled(
    client: &reqwest::Client,
    members: &[Member],
    all: &BTreeSet<String>,
    limit: Duration,
) -> (BTreeMap<String, BTreeSet<String>>, Duration) {
    let start = Instant::now();
    loop {
        if let Some(split) = settled(client, members, all).await {
            return (split, start.elapsed());
        }
        assert!(
            start.elapsed() < limit,
            "the members did not settle in {limit:?} (logs in {})",
            members[0].log.parent().map(Path::display).expect("a log directory")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One kill and restart of the failover part.
struct Event {
    victim: String,
    units: BTreeSet<String>,
    killed: Instant,
    /// Kill until the survivors list every unit the victim had.
    taken: Option<Duration>,
    /// Kill until a survivor shows it `suspect` (or `down`).
    suspect: Option<Duration>,
    /// Kill until every survivor shows it `down`.
    down: Option<Duration>,
    restarted: Instant,
    /// Restart until the victim lists its units again.
    back: Option<Duration>,
    /// Restart until no survivor lists any of them.
    released: Option<Duration>,
    /// Before the next kill.
    ended: Instant,
}

/// What the survivors' `GET /api/cluster` showed after a kill, in time
/// from the kill.
#[derive(Default)]
struct Takeover {
    taken: Option<Duration>,
    suspect: Option<Duration>,
    down: Option<Duration>,
}

/// What the target saw in one span: on the moved instances and on the
/// others.
#[derive(Default)]
struct Seen {
    /// Requests less than half a floor after the one before.
    duplicates: usize,
    /// Requests less than 0.9 of a floor after the one before (the
    /// duplicates among them), on the moved instances.
    early: usize,
    /// The same, on instances of units that did not move.
    duplicates_elsewhere: usize,
    /// Each duplicate: the instance, its floor, the gap, and when it came
    /// after the span's start.
    details: Vec<String>,
    /// The most a moved instance waited beyond its floor, ending in the
    /// span.
    late: Duration,
    /// From the span's start until every moved instance was asked again.
    all_asked: Option<Duration>,
}

/// What the target saw from `from` to `to` (requests in `(from, to]`).
fn seen(target: &Target, units: &[UnitSpec], moved: &BTreeSet<String>, from: Instant, to: Instant) -> Seen {
    let mut s = Seen::default();
    let mut all_asked = Some(Duration::ZERO);
    for u in units {
        let is_moved = moved.contains(&u.name);
        for (name, floor) in &u.instances {
            let times = target.requests(name);
            let mut first_after = None;
            for pair in times.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if b <= from || b > to {
                    continue;
                }
                first_after.get_or_insert(b);
                if is_moved && (b - a).as_secs_f64() < floor.as_secs_f64() * 0.9 {
                    s.early += 1;
                }
                if b - a < *floor / 2 {
                    let place = if is_moved { "" } else { ", a unit that did not move" };
                    s.details.push(format!(
                        "{name} (floor {} s{place}): {:.2} s after the request before, {:.2} s into the span",
                        floor.as_secs(),
                        (b - a).as_secs_f64(),
                        (b - from).as_secs_f64()
                    ));
                    if is_moved {
                        s.duplicates += 1;
                    } else {
                        s.duplicates_elsewhere += 1;
                    }
                }
                if is_moved {
                    s.late = s.late.max((b - a).saturating_sub(*floor));
                }
            }
            if is_moved {
                all_asked = match (all_asked, first_after) {
                    (Some(worst), Some(t)) => Some(worst.max(t - from)),
                    _ => None,
                };
            }
        }
    }
    s.all_asked = all_asked;
    s
}

/// Median (the mean of the middle two of an even count) and maximum.
fn median_max(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((median, v[n - 1]))
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "missed".into(), |d| format!("{:.1}", d.as_secs_f64()))
}

fn median_max_row(label: &str, values: &[f64], missed: usize) -> String {
    match median_max(values) {
        Some((med, max)) => format!("| {label} | {med:.1} | {max:.1} | {missed} |"),
        None => format!("| {label} | – | – | {missed} |"),
    }
}

impl Bench {
    /// Kills and restarts, timed; duplicates counted on the moved units.
    async fn failover(&self, args: &Args) {
        eprintln!("== failover: 3 members, {} kills", args.kills);
        let units = layout("", args.pools, args.pool_size, args.lone);
        let all: BTreeSet<String> = units.iter().map(|u| u.name.clone()).collect();
        let shared = shared_config(&self.target, &units);
        let mut members = start_cluster(self, &self.dir.join("failover"), "m", 3, &shared);
        let (_, took) = wait_settled(&self.client, &members, &all, GIVE_UP).await;
        eprintln!("settled {:.1} s after the start", took.as_secs_f64());
        tokio::time::sleep(QUIET).await;
        let baseline_from = Instant::now();
        tokio::time::sleep(QUIET * 2).await;
        let baseline = seen(&self.target, &units, &BTreeSet::new(), baseline_from, Instant::now());
        let machine = machine_mark();
        let mut events: Vec<Event> = Vec::new();
        for k in 0..args.kills {
            let (split, _) = wait_settled(&self.client, &members, &all, GIVE_UP).await;
            // Each member in turn, skipping one that owns nothing.
            let vi = (0..members.len())
                .map(|j| (k + j) % members.len())
                .find(|&i| !split[&members[i].name].is_empty())
                .expect("a member that owns units");
            let victim = members[vi].name.clone();
            let moved = split[&victim].clone();
            members[vi].kill9();
            let killed = Instant::now();
            let Takeover { taken, suspect, down } = self.takeover(&members, &victim, &moved).await;
            // Let the new owners poll every moved instance once.
            tokio::time::sleep(Duration::from_secs(FLOORS_S[FLOORS_S.len() - 1] + 1)).await;
            members[vi].start();
            let restarted = Instant::now();
            let mut back = None;
            let mut released = None;
            while restarted.elapsed() < GIVE_UP && (back.is_none() || released.is_none()) {
                if back.is_none()
                    && members[vi]
                        .units(&self.client)
                        .await
                        .is_some_and(|u| moved.is_subset(&u))
                {
                    back = Some(restarted.elapsed());
                }
                if released.is_none() {
                    let mut held = BTreeSet::new();
                    let mut all_answered = true;
                    for m in members.iter().filter(|m| m.name != victim) {
                        match m.units(&self.client).await {
                            Some(u) => held.extend(u),
                            None => all_answered = false,
                        }
                    }
                    if all_answered && held.is_disjoint(&moved) {
                        released = Some(restarted.elapsed());
                    }
                }
                tokio::time::sleep(LOOK_EVERY).await;
            }
            wait_settled(&self.client, &members, &all, GIVE_UP).await;
            tokio::time::sleep(QUIET).await;
            let ev = Event {
                victim,
                units: moved,
                killed,
                taken,
                suspect,
                down,
                restarted,
                back,
                released,
                ended: Instant::now(),
            };
            eprintln!(
                "kill {}: {} ({} units) taken over in {} s, back in {} s (released by the others in {} s)",
                k + 1,
                ev.victim,
                ev.units.len(),
                secs(ev.taken),
                secs(ev.back),
                secs(ev.released)
            );
            events.push(ev);
        }
        let busy = busy_cores(machine);
        drop(members);

        println!(
            "\n## Failover: 3 members, {} units ({} pools of {}, {} without a pool), floors 2-5 s, {} kills\n",
            all.len(),
            args.pools,
            args.pool_size,
            args.lone,
            events.len()
        );
        println!(
            "| kill | member | units | suspect s | down s | takeover s | all asked again s | most late s | dup. (early) takeover | hand-back s | released s | most late s | dup. (early) hand-back | dup. elsewhere |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let (mut taken, mut back, mut dup_take, mut dup_back) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut details = Vec::new();
        for (i, ev) in events.iter().enumerate() {
            let t = seen(&self.target, &units, &ev.units, ev.killed, ev.restarted);
            let b = seen(&self.target, &units, &ev.units, ev.restarted, ev.ended);
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {} ({}) | {} | {} | {:.1} | {} ({}) | {} |",
                i + 1,
                ev.victim,
                ev.units.len(),
                secs(ev.suspect),
                secs(ev.down),
                secs(ev.taken),
                secs(t.all_asked),
                t.late.as_secs_f64(),
                t.duplicates,
                t.early,
                secs(ev.back),
                secs(ev.released),
                b.late.as_secs_f64(),
                b.duplicates,
                b.early,
                t.duplicates_elsewhere + b.duplicates_elsewhere
            );
            taken.extend(ev.taken.map(|d| d.as_secs_f64()));
            back.extend(ev.back.map(|d| d.as_secs_f64()));
            dup_take.push(t.duplicates as f64);
            dup_back.push(b.duplicates as f64);
            for (span, s) in [("takeover", &t), ("hand-back", &b)] {
                details.extend(s.details.iter().map(|d| format!("kill {}, {span}: {d}", i + 1)));
            }
        }
        let missed = |v: &[f64]| events.len() - v.len();
        println!("\n| | median | max | missed |\n|---|---|---|---|");
        println!("{}", median_max_row("takeover (s)", &taken, missed(&taken)));
        println!("{}", median_max_row("hand-back (s)", &back, missed(&back)));
        println!("{}", median_max_row("duplicates per takeover", &dup_take, 0));
        println!("{}", median_max_row("duplicates per hand-back", &dup_back, 0));
        println!(
            "\nbefore the first kill, over {:.0} s: {} duplicates; machine busy {busy:.2} cores during the kills",
            (QUIET * 2).as_secs_f64(),
            baseline.duplicates_elsewhere
        );
        if args.timeline {
            for ev in &events {
                self.print_timeline(&units, ev);
            }
        }
        if !details.is_empty() {
            println!("\nThe duplicates:\n");
            for d in details {
                println!("- {d}");
            }
        }
    }

    /// When each instance of `ev`'s units was asked, from a floor before
    /// the kill to the event's end: seconds from the kill, `|` at the
    /// restart.
    fn print_timeline(&self, units: &[UnitSpec], ev: &Event) {
        println!(
            "\nkill of {}: takeover {} s, restart at {:.1} s, hand-back {} s later, released {} s later",
            ev.victim,
            secs(ev.taken),
            (ev.restarted - ev.killed).as_secs_f64(),
            secs(ev.back),
            secs(ev.released)
        );
        for u in units.iter().filter(|u| ev.units.contains(&u.name)) {
            for (name, floor) in &u.instances {
                let from = ev.killed - *floor;
                let mut line = format!("  {name} (floor {} s):", floor.as_secs());
                let mut restarted = false;
                for t in self
                    .target
                    .requests(name)
                    .into_iter()
                    .filter(|&t| t > from && t <= ev.ended)
                {
                    if !restarted && t > ev.restarted {
                        line.push_str(" |");
                        restarted = true;
                    }
                    let at = if t >= ev.killed {
                        (t - ev.killed).as_secs_f64()
                    } else {
                        -(ev.killed - t).as_secs_f64()
                    };
                    line.push_str(&format!(" {at:.1}"));
                }
                println!("{line}");
            }
        }
    }

    /// Reads the survivors' `GET /api/cluster` every [`LOOK_EVERY`] from
    /// the kill of `victim` until they list every unit of `moved` and all
    /// show it `down` (or [`GIVE_UP`] passes).
    async fn takeover(&self, members: &[Member], victim: &str, moved: &BTreeSet<String>) -> Takeover {
        let start = Instant::now();
        let mut t = Takeover::default();
        while start.elapsed() < GIVE_UP && (t.taken.is_none() || t.down.is_none()) {
            let mut held = BTreeSet::new();
            let mut states = Vec::new();
            for m in members.iter().filter(|m| m.running()) {
                let Some(c) = m.cluster(&self.client).await else {
                    states.push(String::new());
                    continue;
                };
                held.extend(own_units(&c, &m.name).unwrap_or_default());
                let state = c["members"]
                    .as_array()
                    .and_then(|l| l.iter().find(|x| x["name"] == victim))
                    .and_then(|x| x["state"].as_str())
                    .unwrap_or_default();
                states.push(state.to_string());
            }
            let at = start.elapsed();
            if t.suspect.is_none() && states.iter().any(|s| s == "suspect" || s == "down") {
                t.suspect = Some(at);
            }
            if t.down.is_none() && states.iter().all(|s| s == "down") {
                t.down = Some(at);
            }
            if t.taken.is_none() && moved.is_subset(&held) {
                t.taken = Some(at);
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
        t
    }

    /// Gossip bytes per member at 3 and at `--members` members, idle and
    /// sharing `--units` units.
    async fn gossip(&self, args: &Args) {
        let pools = args.units / 5;
        let loaded = (pools, 4, args.units - pools);
        let idle = (1, 2, 2);
        let mut rows = Vec::new();
        for (n, (label, (pools, size, lone))) in [
            (3, ("idle", idle)),
            (3, ("loaded", loaded)),
            (args.members, ("idle", idle)),
            (args.members, ("loaded", loaded)),
        ] {
            let tag = format!("g{n}{label}-");
            eprintln!("== gossip: {n} members, {label}");
            let units = layout(&tag, pools, size, lone);
            let all: BTreeSet<String> = units.iter().map(|u| u.name.clone()).collect();
            let shared = shared_config(&self.target, &units);
            let members = start_cluster(self, &self.dir.join(&tag), &format!("{tag}m"), n, &shared);
            let (_, took) = wait_settled(&self.client, &members, &all, Duration::from_secs(120)).await;
            tokio::time::sleep(QUIET).await;
            let machine = machine_mark();
            let before = self.read_gossip(&members).await;
            let t0 = Instant::now();
            tokio::time::sleep(Duration::from_secs(args.window)).await;
            let after = self.read_gossip(&members).await;
            let window = t0.elapsed().as_secs_f64();
            let busy = busy_cores(machine);
            let sent: Vec<f64> = before.iter().zip(&after).map(|(a, b)| (b.0 - a.0) / window).collect();
            let received: Vec<f64> = before.iter().zip(&after).map(|(a, b)| (b.1 - a.1) / window).collect();
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let (lo, hi) = sent
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            eprintln!(
                "settled in {:.1} s; sent {:.0} B/s per member ({lo:.0}-{hi:.0}), received {:.0}; machine busy {busy:.2} cores",
                took.as_secs_f64(),
                mean(&sent),
                mean(&received)
            );
            rows.push(format!(
                "| {n} | {label} | {} | {:.0} | {lo:.0}–{hi:.0} | {:.0} | {busy:.2} |",
                all.len(),
                mean(&sent),
                mean(&received)
            ));
            drop(members);
        }
        println!("\n## Gossip bytes per member, over {} s\n", args.window);
        println!(
            "| members | fleet | units | sent B/s (mean) | sent B/s (min–max) | received B/s (mean) | machine busy cores |"
        );
        println!("|---|---|---|---|---|---|---|");
        for r in rows {
            println!("{r}");
        }
    }

    /// Each member's (sent, received) gossip bytes.
    async fn read_gossip(&self, members: &[Member]) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        for m in members {
            let bytes = m
                .gossip_bytes(&self.client)
                .await
                .unwrap_or_else(|| panic!("{}'s gossip byte counters", m.name));
            out.push(bytes);
        }
        out
    }

    /// CPU of three idle members against three idle servers without
    /// `[cluster]`, over the same window (three of each, as one tick of
    /// /proc/PID/stat is 10 ms).
    async fn cpu(&self, args: &Args) {
        eprintln!("== cpu: 3 idle members and 3 servers without [cluster]");
        let shared = shared_config(&self.target, &[]);
        let dir = self.dir.join("cpu");
        let members = start_cluster(self, &dir, "c", 3, &shared);
        let mut alone: Vec<Member> = (0..3)
            .map(|i| Member::new(&self.bin, &dir, &format!("alone{i}"), None, &shared))
            .collect();
        for a in &mut alone {
            a.start();
        }
        wait_settled(&self.client, &members, &BTreeSet::new(), GIVE_UP).await;
        tokio::time::sleep(QUIET).await;
        let machine = machine_mark();
        let before: Vec<f64> = members.iter().chain(&alone).map(Member::cpu_secs).collect();
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(args.window)).await;
        let per_min = 60.0 / t0.elapsed().as_secs_f64();
        let used: Vec<f64> = members
            .iter()
            .chain(&alone)
            .zip(&before)
            .map(|(m, b)| (m.cpu_secs() - b) * per_min)
            .collect();
        let busy = busy_cores(machine);
        drop(members);
        drop(alone);
        println!("\n## CPU of an idle server, over {} s\n", args.window);
        println!("| server | CPU s/min (mean of 3) | each |\n|---|---|---|");
        for (label, cpu) in [
            ("member of 3, no instance", &used[..3]),
            ("without `[cluster]`, no instance", &used[3..]),
        ] {
            let each: Vec<String> = cpu.iter().map(|c| format!("{c:.2}")).collect();
            let mean = cpu.iter().sum::<f64>() / cpu.len() as f64;
            println!("| {label} | {mean:.3} | {} |", each.join(", "));
        }
        println!("\nmachine busy {busy:.2} cores");
    }
}

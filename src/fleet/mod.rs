//! A simulated fleet of HTTP APIs, served on one listener from one process.
//!
//! Pollster's `demo` command, its integration tests and its load benchmarks
//! need many fake API instances whose behaviour can be flipped during a run.
//! [`Fleet::start`] serves every instance of a fixed list on one socket:
//! instance `name` answers on `/i/{name}` and on any path below it
//! (`/i/{name}/{*rest}`, so a type with several groups can point its group
//! paths there), with one [`Behaviour`] at a time — healthy, changing, slow,
//! flapping, rate-limited, failing, hung, huge, invalid UTF-8, not found.
//!
//! The fleet must never be the bottleneck of a benchmark, so a request costs
//! one `HashMap` lookup (the map is built once at start and never changes),
//! a relaxed atomic increment, a short read lock to copy the behaviour out,
//! and no allocation for the idle (`Healthy`) case: its body is built once per
//! instance. `Huge` bodies are streamed from a static buffer; `Hung` requests
//! park on a pending future (no thread, no timer) until the client gives up.
//!
//! A control API shares the listener:
//!
//! | request | answer |
//! |---|---|
//! | `GET /_control` | every instance with its behaviour and hits, plus totals |
//! | `GET /_control/stats` | totals: instances, hits, hung requests open, instances per behaviour kind |
//! | `GET /_control/{name}` | one instance |
//! | `PUT /_control/{name}` (body: a [`Behaviour`] as JSON, e.g. `{"kind":"slow","delay_ms":500}`) | flips it, answers with the new state |
//!
//! Unknown instances answer 404 with a JSON body, on the instance paths and on
//! the control API alike. (`/_control/stats` shadows an instance named `stats`
//! in the control API only; such an instance still serves on `/i/stats` and can
//! be flipped with [`Fleet::set`].)
//!
//! [`Fleet::stop`] (or dropping the [`Fleet`]) closes the listener and every
//! open connection, including hung and slow ones, so a stopped fleet never
//! leaves tasks behind in the runtime.

mod body;
mod server;
pub mod sim;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the figures of simulated APIs move (see [`sim`]).
pub const SIM_TICK: Duration = Duration::from_secs(10);

/// How long [`Fleet::stop`] waits for the server task to wind down before
/// aborting it (connections are closed at once, so this is only a backstop).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What an instance does with each request it receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Behaviour {
    /// 200, the same small JSON body every time (an idle target).
    Healthy,
    /// 200, a body that changes on every request (it carries a counter).
    Changing,
    /// 200 after a delay.
    Slow { delay_ms: u64 },
    /// Healthy for `period_ms`, then 503 for `period_ms`, and so on, by time
    /// since the fleet started (a period of 0 counts as 1 ms).
    Flapping { period_ms: u64 },
    /// 429 with `Retry-After: retry_after_secs` for every request beyond
    /// `per_second` within the current second (seconds counted from the fleet's
    /// start); 200 otherwise.
    RateLimited { per_second: u32, retry_after_secs: u32 },
    /// 500.
    ServerError,
    /// 401 with a `WWW-Authenticate` challenge.
    Unauthorized,
    /// Reads the request and never answers; the connection stays open until
    /// the client gives up (or the fleet stops).
    Hung,
    /// 200 with a JSON body of exactly `bytes` bytes (`{`, spaces, `}`),
    /// streamed from a static buffer.
    Huge { bytes: u64 },
    /// 200 with a body that is not UTF-8, labelled `application/json`.
    InvalidUtf8,
    /// 404.
    NotFound,
}

/// The parameters [`Behaviour::from_key`] and [`parse_mix`] give behaviours
/// that take any, when a mix is written as bare keys (`slow=5`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixDefaults {
    /// `slow`: delay before answering.
    pub slow_delay_ms: u64,
    /// `flapping`: length of each healthy and each failing phase.
    pub flap_period_ms: u64,
    /// `rate_limited`: requests allowed per second.
    pub rate_per_second: u32,
    /// `rate_limited`: the `Retry-After` value of a 429.
    pub retry_after_secs: u32,
    /// `huge`: body size.
    pub huge_bytes: u64,
}

impl Default for MixDefaults {
    /// Slow 2 s, flapping every 20 s, 1 request/s with `Retry-After: 5`, 8 MiB.
    fn default() -> Self {
        MixDefaults {
            slow_delay_ms: 2_000,
            flap_period_ms: 20_000,
            rate_per_second: 1,
            retry_after_secs: 5,
            huge_bytes: 8 * 1024 * 1024,
        }
    }
}

impl Behaviour {
    /// Every key [`Behaviour::key`] returns, in declaration order.
    pub const KEYS: [&'static str; 11] = [
        "healthy",
        "changing",
        "slow",
        "flapping",
        "rate_limited",
        "server_error",
        "unauthorized",
        "hung",
        "huge",
        "invalid_utf8",
        "not_found",
    ];

    /// The snake_case name of the variant (also its JSON `kind`).
    pub fn key(&self) -> &'static str {
        match self {
            Behaviour::Healthy => "healthy",
            Behaviour::Changing => "changing",
            Behaviour::Slow { .. } => "slow",
            Behaviour::Flapping { .. } => "flapping",
            Behaviour::RateLimited { .. } => "rate_limited",
            Behaviour::ServerError => "server_error",
            Behaviour::Unauthorized => "unauthorized",
            Behaviour::Hung => "hung",
            Behaviour::Huge { .. } => "huge",
            Behaviour::InvalidUtf8 => "invalid_utf8",
            Behaviour::NotFound => "not_found",
        }
    }

    /// The behaviour named `key` (one of [`Behaviour::KEYS`]), its parameters
    /// taken from `defaults`; `None` for an unknown key.
    pub fn from_key(key: &str, defaults: &MixDefaults) -> Option<Behaviour> {
        Some(match key {
            "healthy" => Behaviour::Healthy,
            "changing" => Behaviour::Changing,
            "slow" => Behaviour::Slow {
                delay_ms: defaults.slow_delay_ms,
            },
            "flapping" => Behaviour::Flapping {
                period_ms: defaults.flap_period_ms,
            },
            "rate_limited" => Behaviour::RateLimited {
                per_second: defaults.rate_per_second,
                retry_after_secs: defaults.retry_after_secs,
            },
            "server_error" => Behaviour::ServerError,
            "unauthorized" => Behaviour::Unauthorized,
            "hung" => Behaviour::Hung,
            "huge" => Behaviour::Huge {
                bytes: defaults.huge_bytes,
            },
            "invalid_utf8" => Behaviour::InvalidUtf8,
            "not_found" => Behaviour::NotFound,
            _ => return None,
        })
    }
}

/// One instance of the fleet, as [`Fleet::start_members`] takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    pub behaviour: Behaviour,
    /// When set, the healthy answers are the simulated API's body for the
    /// path below `/i/{name}` ([`sim::answer`]; 404 for a path it does not
    /// have) instead of the generic `{"instance":…,"status":"ok"}`.
    pub sim: Option<sim::SimApi>,
}

impl Member {
    /// A member with the generic body.
    pub fn new(name: impl Into<String>, behaviour: Behaviour) -> Member {
        Member {
            name: name.into(),
            behaviour,
            sim: None,
        }
    }

    /// A member that simulates `api`.
    pub fn simulating(name: impl Into<String>, behaviour: Behaviour, api: sim::SimApi) -> Member {
        Member {
            name: name.into(),
            behaviour,
            sim: Some(api),
        }
    }
}

impl From<(String, Behaviour)> for Member {
    fn from((name, behaviour): (String, Behaviour)) -> Member {
        Member::new(name, behaviour)
    }
}

/// One instance as the control API and [`Fleet::snapshot`] report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceStatus {
    pub name: String,
    pub behaviour: Behaviour,
    pub hits: u64,
}

/// Totals, as `GET /_control/stats` reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetStats {
    /// Number of instances.
    pub instances: usize,
    /// Requests received by all instances together.
    pub total_hits: u64,
    /// Requests to `Hung` instances whose connection is still open.
    pub hung_open: u64,
    /// Instances per behaviour kind (kinds with no instance are left out).
    pub by_kind: BTreeMap<String, usize>,
}

/// What the `Healthy`, `Slow`, flapping-up and rate-limit-admitted answers
/// carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyFormat {
    /// `{"instance":"NAME","status":"ok"}`, `application/json`.
    #[default]
    Json,
    /// The same facts in the Prometheus text exposition format
    /// (`text/plain; version=0.0.4`), so that Prometheus can scrape the
    /// instances as targets: two samples, `fleet_up` and `fleet_info`.
    Prometheus,
}

impl BodyFormat {
    fn body(self, name: &str) -> Bytes {
        Bytes::from(match self {
            BodyFormat::Json => format!(r#"{{"instance":"{name}","status":"ok"}}"#),
            BodyFormat::Prometheus => format!(
                "# TYPE fleet_up gauge\nfleet_up 1\n# TYPE fleet_info gauge\nfleet_info{{instance_name=\"{name}\",status=\"ok\"}} 1\n"
            ),
        })
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            BodyFormat::Json => "application/json",
            BodyFormat::Prometheus => "text/plain; version=0.0.4",
        }
    }
}

/// Per-instance state; shared by the handlers and the [`Fleet`] handle.
struct Instance {
    name: String,
    behaviour: RwLock<Behaviour>,
    hits: AtomicU64,
    /// Rate-limit window: the second (since fleet start) in the high 32 bits,
    /// the requests counted in it in the low 32.
    window: AtomicU64,
    /// The `Healthy` body, built once.
    healthy_body: Bytes,
    /// The API it simulates: its healthy answers come from [`sim::answer`].
    sim: Option<sim::SimApi>,
}

impl Instance {
    fn new(member: Member, format: BodyFormat) -> Instance {
        let healthy_body = format.body(&member.name);
        Instance {
            name: member.name,
            behaviour: RwLock::new(member.behaviour),
            hits: AtomicU64::new(0),
            window: AtomicU64::new(0),
            healthy_body,
            sim: member.sim,
        }
    }

    fn behaviour(&self) -> Behaviour {
        self.behaviour.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_behaviour(&self, b: Behaviour) {
        *self.behaviour.write().unwrap_or_else(PoisonError::into_inner) = b;
    }

    fn status(&self) -> InstanceStatus {
        InstanceStatus {
            name: self.name.clone(),
            behaviour: self.behaviour(),
            hits: self.hits.load(Ordering::Relaxed),
        }
    }
}

/// Counts one request in the rate-limit `window` for `second`; true if it is
/// within `per_second` for that second. Lock-free: one CAS loop on a packed
/// (second, count) word, so concurrent requests are counted exactly.
fn admit(window: &AtomicU64, second: u64, per_second: u32) -> bool {
    let second = second & u64::from(u32::MAX);
    let mut current = window.load(Ordering::Relaxed);
    loop {
        let (w, count) = (current >> 32, current & u64::from(u32::MAX));
        let count = if w == second {
            count.saturating_add(1).min(u64::from(u32::MAX))
        } else {
            1
        };
        match window.compare_exchange_weak(current, (second << 32) | count, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return count <= u64::from(per_second),
            Err(actual) => current = actual,
        }
    }
}

/// Everything the request handlers share.
struct Shared {
    started: Instant,
    by_name: HashMap<String, Arc<Instance>>,
    /// The instances in the order given to [`Fleet::start`].
    order: Vec<Arc<Instance>>,
    /// Requests to `Hung` instances still open.
    hung_open: AtomicU64,
    /// The format of the healthy answers.
    format: BodyFormat,
}

impl Shared {
    fn new(members: Vec<Member>, format: BodyFormat) -> std::io::Result<Shared> {
        let mut by_name = HashMap::with_capacity(members.len());
        let mut order = Vec::with_capacity(members.len());
        for member in members {
            let name = member.name.clone();
            if !valid_name(&name) {
                return Err(invalid_input(format!(
                    "instance name {name:?} must be non-empty and use only A-Z a-z 0-9 - . _ ~"
                )));
            }
            let instance = Arc::new(Instance::new(member, format));
            if by_name.insert(name, Arc::clone(&instance)).is_some() {
                return Err(invalid_input(format!("duplicate instance name {:?}", instance.name)));
            }
            order.push(instance);
        }
        Ok(Shared {
            started: Instant::now(),
            by_name,
            order,
            hung_open: AtomicU64::new(0),
            format,
        })
    }

    /// The simulation tick now: one every [`SIM_TICK`] since the fleet started.
    fn sim_tick(&self) -> u64 {
        (self.started.elapsed().as_millis() / SIM_TICK.as_millis()) as u64
    }

    fn total_hits(&self) -> u64 {
        self.order.iter().map(|i| i.hits.load(Ordering::Relaxed)).sum()
    }

    fn stats(&self) -> FleetStats {
        let mut by_kind = BTreeMap::new();
        for i in &self.order {
            *by_kind.entry(i.behaviour().key().to_string()).or_insert(0) += 1;
        }
        FleetStats {
            instances: self.order.len(),
            total_hits: self.total_hits(),
            hung_open: self.hung_open.load(Ordering::Relaxed),
            by_kind,
        }
    }
}

/// Names go into URL paths and config files unescaped, so they are limited to
/// URL-unreserved characters.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

fn invalid_input(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
}

/// A running fleet. Dropping it stops serving, like [`Fleet::stop`] without
/// waiting.
pub struct Fleet {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop_tx: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("addr", &self.addr)
            .field("instances", &self.shared.order.len())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// Serve the given instances on `bind` (use `127.0.0.1:0` for tests).
    /// Instance `name` answers on `/i/{name}` and any sub-path
    /// `/i/{name}/{*rest}`.
    ///
    /// Fails if the socket cannot be bound, or with `InvalidInput` if a name
    /// is duplicated, empty, or uses characters other than `A-Z a-z 0-9 - . _ ~`.
    /// Must be called within a tokio runtime.
    pub async fn start(bind: SocketAddr, instances: Vec<(String, Behaviour)>) -> std::io::Result<Fleet> {
        Fleet::start_with(bind, instances, BodyFormat::Json).await
    }

    /// [`Fleet::start`], with the healthy answers in `format`.
    pub async fn start_with(
        bind: SocketAddr,
        instances: Vec<(String, Behaviour)>,
        format: BodyFormat,
    ) -> std::io::Result<Fleet> {
        Fleet::start_members(bind, instances.into_iter().map(Member::from).collect(), format).await
    }

    /// [`Fleet::start_with`], where members may simulate an API
    /// ([`Member::simulating`]).
    pub async fn start_members(bind: SocketAddr, members: Vec<Member>, format: BodyFormat) -> std::io::Result<Fleet> {
        let shared = Arc::new(Shared::new(members, format)?);
        let listener = tokio::net::TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(server::serve(listener, Arc::clone(&shared), stop_rx));
        tracing::debug!(%addr, instances = shared.order.len(), "fleet started");
        Ok(Fleet {
            addr,
            shared,
            stop_tx,
            task: Some(task),
        })
    }

    /// The bound address (with the real port when bound to port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT`, with loopback in place of an unspecified bind
    /// address (`0.0.0.0` / `::`), so the URL is always connectable locally.
    pub fn base_url(&self) -> String {
        let ip = match self.addr.ip() {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.addr.port()))
    }

    /// The URL of instance `name`: `http://127.0.0.1:PORT/i/name` (whether or
    /// not the name exists).
    pub fn url(&self, name: &str) -> String {
        format!("{}/i/{name}", self.base_url())
    }

    /// Flip instance `name` to `b`; the next request it receives follows it.
    /// False if there is no such instance.
    pub fn set(&self, name: &str, b: Behaviour) -> bool {
        match self.shared.by_name.get(name) {
            Some(instance) => {
                instance.set_behaviour(b);
                true
            }
            None => false,
        }
    }

    /// The current behaviour of instance `name`.
    pub fn behaviour(&self, name: &str) -> Option<Behaviour> {
        self.shared.by_name.get(name).map(|i| i.behaviour())
    }

    /// Requests received by instance `name` (0 if unknown).
    pub fn hits(&self, name: &str) -> u64 {
        self.shared
            .by_name
            .get(name)
            .map_or(0, |i| i.hits.load(Ordering::Relaxed))
    }

    /// Requests received by all instances together.
    pub fn total_hits(&self) -> u64 {
        self.shared.total_hits()
    }

    /// Every instance, in start order, with its behaviour and hits.
    pub fn snapshot(&self) -> Vec<InstanceStatus> {
        self.shared.order.iter().map(|i| i.status()).collect()
    }

    /// Totals, as `GET /_control/stats` reports them.
    pub fn stats(&self) -> FleetStats {
        self.shared.stats()
    }

    /// A Pollster config snippet: one `[[instances]]` entry (name, type,
    /// url) per instance, in start order: `type = "http"`, or the shipped
    /// type of the API a member simulates (`pve`, …).
    pub fn config_snippet(&self) -> String {
        let base = self.base_url();
        let mut out = format!("# pollster-fleet: {} instances on {base}\n", self.shared.order.len());
        for i in &self.shared.order {
            // Names are URL-unreserved characters only: no TOML escaping needed.
            let ty = i.sim.map_or("http", sim::SimApi::type_name);
            out.push_str(&format!(
                "\n[[instances]]\nname = \"{0}\"\ntype = \"{ty}\"\nurl = \"{base}/i/{0}\"\n",
                i.name
            ));
        }
        out
    }

    /// Stop serving: close the listener and every open connection (hung and
    /// slow requests included), and wait for the server task to finish.
    pub async fn stop(mut self) {
        let _ = self.stop_tx.send(true);
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(STOP_GRACE, &mut task).await.is_err() {
                tracing::warn!(addr = %self.addr, "fleet did not stop in time; aborting it");
                task.abort();
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Closes the listener and all connections; the task then ends by itself.
        let _ = self.stop_tx.send(true);
    }
}

/// A deterministic mix for `count` instances: names `inst-0000`, `inst-0001`, …
/// (four digits, more when needed) with behaviours apportioned by `weights`.
///
/// Each behaviour gets `count * weight / total` instances, rounded by largest
/// remainder (ties to the earlier entry), so 1000 instances at 80/20 are
/// exactly 800/200. The kinds are interleaved evenly (smooth weighted
/// round-robin) rather than in blocks, so any prefix of the list is itself
/// close to the mix. Entries with weight 0 get no instance; if all weights are
/// 0 (or there are none) every instance is `Healthy`.
pub fn mix(count: usize, weights: &[(Behaviour, u32)]) -> Vec<(String, Behaviour)> {
    let total: u128 = weights.iter().map(|(_, w)| u128::from(*w)).sum();
    if total == 0 {
        return (0..count).map(|i| (instance_name(i), Behaviour::Healthy)).collect();
    }
    // Largest-remainder apportionment of `count` by weight.
    let n = count as u128;
    let mut shares: Vec<u128> = weights.iter().map(|(_, w)| n * u128::from(*w) / total).collect();
    let assigned: u128 = shares.iter().sum();
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    // Stable sort: equal remainders keep entry order.
    by_remainder.sort_by_key(|&i| std::cmp::Reverse(n * u128::from(weights[i].1) % total));
    for &i in by_remainder.iter().take((n - assigned) as usize) {
        shares[i] += 1;
    }
    // Smooth weighted round-robin over the shares: every step each entry gains
    // its share, the largest accumulator (earliest on ties) is picked and pays
    // `count`. Over `count` steps entry i is picked exactly shares[i] times.
    let mut acc = vec![0i128; weights.len()];
    let mut out = Vec::with_capacity(count);
    for idx in 0..count {
        let mut best = 0;
        for (i, a) in acc.iter_mut().enumerate() {
            *a += shares[i] as i128;
        }
        for i in 1..acc.len() {
            if acc[i] > acc[best] {
                best = i;
            }
        }
        acc[best] -= n as i128;
        out.push((instance_name(idx), weights[best].0.clone()));
    }
    out
}

/// `inst-0000`, `inst-0001`, …
pub fn instance_name(index: usize) -> String {
    format!("inst-{index:04}")
}

/// Why a mix specification was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MixError {
    #[error("mix entry {0:?} is not of the form kind=weight")]
    Malformed(String),
    #[error("unknown behaviour {key:?} in mix (known: {})", Behaviour::KEYS.join(", "))]
    UnknownKind { key: String },
    #[error("weight {value:?} for {key:?} is not a non-negative integer")]
    BadWeight { key: String, value: String },
    #[error("behaviour {0:?} appears twice in mix")]
    Duplicate(String),
    #[error("mix has no positive weight")]
    NoWeight,
}

/// Parse `healthy=80,changing=10,slow=5,server_error=5` into weights for
/// [`mix`]; parameters of `slow`, `flapping`, `rate_limited` and `huge` come
/// from `defaults`. Whitespace around entries, keys and weights is ignored.
pub fn parse_mix(spec: &str, defaults: &MixDefaults) -> Result<Vec<(Behaviour, u32)>, MixError> {
    let mut out: Vec<(Behaviour, u32)> = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| MixError::Malformed(entry.to_string()))?;
        let (key, value) = (key.trim(), value.trim());
        let behaviour =
            Behaviour::from_key(key, defaults).ok_or_else(|| MixError::UnknownKind { key: key.to_string() })?;
        let weight = value.parse::<u32>().map_err(|_| MixError::BadWeight {
            key: key.to_string(),
            value: value.to_string(),
        })?;
        if out.iter().any(|(b, _)| b.key() == key) {
            return Err(MixError::Duplicate(key.to_string()));
        }
        out.push((behaviour, weight));
    }
    if out.iter().all(|(_, w)| *w == 0) {
        return Err(MixError::NoWeight);
    }
    Ok(out)
}

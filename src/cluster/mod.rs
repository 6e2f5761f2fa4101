//! Members that share one fleet (`[cluster]`, docs/CLUSTER.md).
//!
//! Membership and the shared state come from chitchat: each member has a
//! versioned key/value state, kept in sync by anti-entropy gossip over UDP
//! ([`seal`] seals every datagram), and a phi-accrual failure detector says
//! who is down. Once per gossip interval each member:
//!
//! 1. reads every member's state into a [`view::Member`];
//! 2. decides ([`view::decide`]) who may own units (live, ready, not
//!    paused, the majority's config hash) and which units are its own by
//!    rendezvous hashing ([`crate::core::ownership`]);
//! 3. lets go at once of units another member now owns, and takes the
//!    units it gained once no live member still says it polls them, from
//!    the last owner's gossiped state ([`gossip`]): the pool's AIMD state
//!    and its dead-letter entries;
//! 4. publishes its own state: ready, paused, config hash, the units it
//!    polls, its load, and each unit's state.
//!
//! A dead-letter action asked of a member that does not poll the task is
//! carried out by the member that does ([`forward`]).
//!
//! A starting member owns nothing for a settle time, so it hears the
//! others before it takes anything; a stopping member gives its units up
//! and says so before it goes, so they move at once.

pub mod forward;
pub mod gossip;
pub mod seal;
#[cfg(test)]
mod tests;
pub mod view;

use crate::config::ClusterConfig;
use crate::core::ownership::Unit;
use crate::core::scheduler::OperatorOp;
use crate::engine::EngineError;
use crate::engine::{Adoption, EngineHandle, UnitState};
use crate::model::{TaskKey, TaskRecord, Timestamp};
use chitchat::transport::Transport;
use chitchat::{Chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, NodeState};
use forward::Refusal;
use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts, Registry};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use view::{Change, Member, MemberState};

/// A member waits this many gossip intervals after its start before it
/// owns anything: it has heard the others by then.
const SETTLE_ROUNDS: u32 = 5;
/// A gained unit another member still polls is taken anyway after this
/// many intervals (that member is stuck, or its word does not arrive).
const HANDOFF_ROUNDS: u32 = 5;
/// A member not heard for this many intervals is `suspect`.
const SUSPECT_ROUNDS: u32 = 3;
/// Ownership changes kept for `GET /api/cluster`.
const CHANGES_KEPT_FOR: Duration = Duration::from_secs(3600);
/// A unit's state is published again when it changed, at most this often
/// (its dead-letter entries at once).
const REPUBLISH_EVERY: Duration = Duration::from_secs(5);

/// How long the every-task state of a unit let go stays in gossip: long
/// enough for its next owner to take it (a few rounds); then it is cut
/// back to what a member publishes of a unit it owns (the AIMD state and
/// the dead-lettered and discarded tasks), so a big pool's records do not
/// stay on every member.
const LET_GO_KEPT: Duration = Duration::from_secs(30);
/// A forwarded dead-letter action waits at least this long for the owner's
/// answer (and ten gossip intervals).
const FORWARD_WAIT: Duration = Duration::from_secs(15);
/// Forwarded actions carried out are remembered this long, so one is not
/// carried out twice.
const SERVED_KEPT_FOR: Duration = Duration::from_secs(3600);

/// A future the engine answers an operator action with.
pub type OpFuture = Pin<Box<dyn Future<Output = Result<TaskRecord, EngineError>> + Send>>;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster: cannot start gossip on {listen}/udp: {message}")]
    Start { listen: SocketAddr, message: String },
    #[error("cluster: {0}")]
    Address(String),
}

/// What a member works with: the engine in production, a stand-in in the
/// in-process tests.
pub trait Fleet: Send + Sync + 'static {
    /// Every unit of the whole catalog.
    fn units(&self) -> Vec<Unit>;
    /// The hash of what members share (instances, types, pools, settings).
    fn config_hash(&self) -> String;
    /// State is loaded and polling could run.
    fn ready(&self) -> bool;
    /// Tasks on this member's schedule and their demand (rps).
    fn load(&self) -> (usize, f64);
    /// The state of each unit it owns; with `every_task`, the records of
    /// its healthy tasks too (for units about to be let go).
    fn unit_states(&self, every_task: bool) -> Vec<(Unit, UnitState)>;
    /// Own these units from now on.
    fn set_scope(&self, owned: BTreeSet<Unit>, adopted: Adoption);
    /// The unit `instance` is polled in, if the catalog has it.
    fn unit_of_instance(&self, instance: &str) -> Option<Unit>;
    /// Carry out an operator action on a task this member polls.
    fn operator_action(&self, key: TaskKey, actor: String, op: OperatorOp) -> OpFuture;
    fn now(&self) -> Timestamp;
}

/// The cluster's metrics (docs/CLUSTER.md).
#[derive(Clone)]
pub struct ClusterMetrics {
    pub members: IntGaugeVec,
    pub units_owned: IntGauge,
    pub ownership_changes: IntCounter,
    pub config_mismatch: IntGauge,
    pub polling_paused: IntGauge,
    pub packets_rejected: IntCounter,
    /// Sealed gossip bytes, by `direction` (`sent`, `received`).
    pub gossip_bytes: prometheus::IntCounterVec,
}

impl ClusterMetrics {
    pub fn new() -> Result<ClusterMetrics, prometheus::Error> {
        let members = IntGaugeVec::new(
            Opts::new(
                "pollster_cluster_members",
                "Members of the cluster this member knows, by state (live, suspect, down).",
            ),
            &["state"],
        )?;
        for s in ["live", "suspect", "down"] {
            members.with_label_values(&[s]).set(0);
        }
        Ok(ClusterMetrics {
            members,
            units_owned: IntGauge::new(
                "pollster_cluster_units_owned",
                "Units (budget pools, and instances with no pool) this member polls.",
            )?,
            ownership_changes: IntCounter::new(
                "pollster_cluster_ownership_changes_total",
                "Units whose owner changed in this member's view.",
            )?,
            config_mismatch: IntGauge::new(
                "pollster_cluster_config_mismatch",
                "1 while this member's config hash differs from the majority's: it owns nothing.",
            )?,
            polling_paused: IntGauge::new(
                "pollster_cluster_polling_paused",
                "1 while this member sees fewer live members than cluster.min_members: it polls nothing.",
            )?,
            packets_rejected: IntCounter::new(
                "pollster_cluster_packets_rejected_total",
                "Gossip datagrams dropped because they do not open under the cluster's key.",
            )?,
            gossip_bytes: prometheus::IntCounterVec::new(
                Opts::new(
                    "pollster_cluster_gossip_bytes_total",
                    "Gossip bytes on the wire (sealed datagrams), by direction (sent, received).",
                ),
                &["direction"],
            )?,
        })
    }

    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.members.clone()))?;
        registry.register(Box::new(self.units_owned.clone()))?;
        registry.register(Box::new(self.ownership_changes.clone()))?;
        registry.register(Box::new(self.config_mismatch.clone()))?;
        registry.register(Box::new(self.polling_paused.clone()))?;
        registry.register(Box::new(self.packets_rejected.clone()))?;
        registry.register(Box::new(self.gossip_bytes.clone()))?;
        Ok(())
    }
}

/// One member as `GET /api/cluster` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberStatus {
    pub name: String,
    pub state: MemberState,
    pub ready: bool,
    pub address: SocketAddr,
    pub config_hash: Option<String>,
    pub last_heard: Option<Timestamp>,
    pub units: Vec<String>,
    pub tasks: usize,
    pub rps: f64,
}

/// What this member knows of the cluster, for the API, the pages and the
/// tests.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub member: String,
    pub min_members: usize,
    pub paused: bool,
    pub mismatch: bool,
    /// This member has settled and may own units.
    pub settled: bool,
    /// Members by name (this one included).
    pub members: Vec<MemberStatus>,
    /// The units this member polls.
    pub owned: BTreeSet<Unit>,
    /// Ownership changes of the last hour, oldest first.
    pub changes: Vec<Change>,
}

impl Status {
    /// This member's place among the members not down, by name: `(2, 3)`
    /// for "member 2 of 3".
    pub fn place(&self) -> (usize, usize) {
        let up: Vec<&MemberStatus> = self.members.iter().filter(|m| m.state != MemberState::Down).collect();
        let at = up.iter().position(|m| m.name == self.member).map_or(0, |i| i + 1);
        (at, up.len())
    }
}

/// A running member: its gossip and the loop that acts on it.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("member", &lock(&self.inner.status).member)
            .finish()
    }
}

struct Inner {
    me: String,
    interval: Duration,
    status: Mutex<Status>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    chitchat: Arc<tokio::sync::Mutex<Chitchat>>,
    /// Forwarded actions waiting for their answer, by id.
    pending: Mutex<HashMap<String, oneshot::Sender<Result<TaskRecord, Refusal>>>>,
}

/// How to start a member.
pub struct Setup {
    pub config: ClusterConfig,
    /// This member's name (`config.member`, else the host name).
    pub member: String,
    /// Where the others reach it.
    pub advertise: SocketAddr,
    /// A number that grows with each start (chitchat's generation).
    pub generation: u64,
}

impl Setup {
    /// From the config: the member's name and the address it advertises
    /// (`advertise`, else `listen` when it is a specific address, else the
    /// address this host reaches the first seed from, else its host name's).
    pub async fn from_config(config: &ClusterConfig, now: Timestamp) -> Result<Setup, ClusterError> {
        let advertise = match config.advertise {
            Some(a) => a,
            None if !config.listen.ip().is_unspecified() => config.listen,
            None => advertise_address(config).await?,
        };
        Ok(Setup {
            member: config.member_name(),
            config: config.clone(),
            advertise,
            generation: now.0,
        })
    }
}

/// The address this host reaches the first seed it can resolve from (a
/// connected UDP socket sends nothing), else its host name's first address
/// that is not loopback.
async fn advertise_address(config: &ClusterConfig) -> Result<SocketAddr, ClusterError> {
    let port = config.listen.port();
    for seed in &config.seeds {
        let Ok(mut addrs) = tokio::net::lookup_host(seed.as_str()).await else {
            continue;
        };
        let Some(to) = addrs.next() else { continue };
        let bind: SocketAddr = if to.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        if let Ok(s) = tokio::net::UdpSocket::bind(bind).await
            && s.connect(to).await.is_ok()
            && let Ok(local) = s.local_addr()
        {
            return Ok(SocketAddr::new(local.ip(), port));
        }
    }
    let host = crate::config::host_name();
    if let Ok(addrs) = tokio::net::lookup_host((host.as_str(), port)).await
        && let Some(a) = addrs.into_iter().find(|a| !a.ip().is_loopback())
    {
        return Ok(a);
    }
    Err(ClusterError::Address(format!(
        "cannot tell which address the other members reach this one at (listen is {}, no seed resolves, and the host name {host:?} has no address that is not loopback); set cluster.advertise",
        config.listen
    )))
}

impl Cluster {
    /// Starts gossip on `transport` and the loop that acts on it.
    pub async fn start(
        setup: Setup,
        fleet: Arc<dyn Fleet>,
        metrics: ClusterMetrics,
        transport: &dyn Transport,
    ) -> Result<Cluster, ClusterError> {
        let cfg = &setup.config;
        let interval = cfg.gossip_interval;
        let chitchat_config = ChitchatConfig {
            chitchat_id: ChitchatId::new(setup.member.as_str(), setup.generation, setup.advertise),
            cluster_id: cfg.name.clone(),
            gossip_interval: interval,
            listen_addr: cfg.listen,
            seed_nodes: cfg.seeds.clone(),
            failure_detector_config: FailureDetectorConfig {
                phi_threshold: 8.0,
                sampling_window_size: 1_000,
                max_interval: interval * 10,
                initial_interval: interval,
                dead_node_grace_period: Duration::from_secs(24 * 3600),
            },
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
        };
        let initial = vec![
            (gossip::READY.to_string(), "0".to_string()),
            (gossip::PAUSED.to_string(), "0".to_string()),
            (gossip::HASH.to_string(), fleet.config_hash()),
            (gossip::UNITS.to_string(), "[]".to_string()),
        ];
        let handle = chitchat::spawn_chitchat(chitchat_config, initial, transport)
            .await
            .map_err(|e| ClusterError::Start {
                listen: cfg.listen,
                message: format!("{e:#}"),
            })?;
        tracing::info!(
            cluster = %cfg.name,
            member = %setup.member,
            listen = %cfg.listen,
            advertise = %setup.advertise,
            seeds = ?cfg.seeds,
            min_members = cfg.min_members,
            "cluster: gossip started; owning nothing until the others are heard"
        );
        let (stop, stop_rx) = watch::channel(false);
        let inner = Arc::new(Inner {
            me: setup.member.clone(),
            interval,
            chitchat: handle.chitchat(),
            pending: Mutex::new(HashMap::new()),
            status: Mutex::new(Status {
                member: setup.member.clone(),
                min_members: cfg.min_members,
                ..Status::default()
            }),
            stop,
            task: Mutex::new(None),
        });
        let state = Loop {
            me: setup.member,
            min_members: cfg.min_members,
            interval,
            fleet,
            metrics,
            handle,
            inner: inner.clone(),
            owned: BTreeSet::new(),
            rounds: 0,
            heard: HashMap::new(),
            waiting_since: BTreeMap::new(),
            published: BTreeMap::new(),
            let_go: BTreeMap::new(),
            owners: BTreeMap::new(),
            changes: VecDeque::new(),
            served: HashMap::new(),
        };
        let task = tokio::spawn(state.run(stop_rx));
        *lock(&inner.task) = Some(task);
        Ok(Cluster { inner })
    }

    /// What this member knows now.
    pub fn status(&self) -> Status {
        lock(&self.inner.status).clone()
    }

    /// Has the member that polls `key`'s unit carry out `op`, and waits for
    /// its answer: the task's record after it, or why not.
    pub async fn forward(&self, key: &TaskKey, actor: &str, op: OperatorOp) -> Result<TaskRecord, Refusal> {
        let id = format!("{:016x}", rand::random::<u64>());
        let request = forward::Request {
            instance: key.instance.to_string(),
            group: key.group.to_string(),
            op,
            actor: format!("{actor} on {}", self.inner.me),
        };
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.pending).insert(id.clone(), tx);
        let rkey = forward::request_key(&id);
        self.inner
            .chitchat
            .lock()
            .await
            .self_node_state()
            .set(&rkey, forward::encode_request(&request));
        tracing::info!(task = %key, op = ?request.op, id = %id, "cluster: forwarding a dead-letter action to the member that polls the task");
        let wait = FORWARD_WAIT.max(self.inner.interval * 10);
        let answer = tokio::time::timeout(wait, rx).await;
        lock(&self.inner.pending).remove(&id);
        self.inner.chitchat.lock().await.self_node_state().delete(&rkey);
        match answer {
            Ok(Ok(result)) => result,
            _ => Err(Refusal::NoAnswer(wait.as_secs())),
        }
    }

    /// Stops at once, as a killed process would: no word to the others.
    #[cfg(test)]
    pub(crate) fn crash(&self) {
        if let Some(t) = lock(&self.inner.task).take() {
            t.abort();
        }
    }

    /// Gives every unit up, says so, waits about two gossip rounds for the
    /// word to spread, and stops gossip.
    pub async fn shutdown(&self) {
        let _ = self.inner.stop.send(true);
        let task = lock(&self.inner.task).take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The keys of a member's state the loop reads every round.
struct NodeStateCopy {
    heartbeat: u64,
    keys: BTreeMap<&'static str, String>,
}

impl NodeStateCopy {
    fn of(ns: &NodeState) -> NodeStateCopy {
        let keys = [gossip::READY, gossip::PAUSED, gossip::HASH, gossip::UNITS, gossip::LOAD]
            .into_iter()
            .filter_map(|k| ns.get(k).map(|v| (k, v.to_string())))
            .collect();
        NodeStateCopy {
            heartbeat: ns.heartbeat().into(),
            keys,
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.keys.get(key).map(String::as_str)
    }
}

/// A member's state as read from gossip (the newest generation of each
/// name).
struct Heard {
    member: Member,
    address: SocketAddr,
    heartbeat: u64,
    load: gossip::Load,
}

/// A unit's state as one member published it: the member, when (its
/// clock, ms), and the state.
type Published = (String, u64, UnitState);

struct Loop {
    me: String,
    min_members: usize,
    interval: Duration,
    fleet: Arc<dyn Fleet>,
    metrics: ClusterMetrics,
    handle: ChitchatHandle,
    inner: Arc<Inner>,
    /// The units this member polls.
    owned: BTreeSet<Unit>,
    /// Gossip intervals since the start.
    rounds: u32,
    /// Each member's last heartbeat and when it moved (our clock).
    heard: HashMap<String, (u64, Timestamp)>,
    /// Units this member should own that another member still polls, and
    /// since which round.
    waiting_since: BTreeMap<Unit, u32>,
    /// What was last published of each unit: content and time.
    published: BTreeMap<Unit, (gossip::Content, Timestamp)>,
    /// Units let go with every task's record, to be cut back after
    /// [`LET_GO_KEPT`].
    let_go: BTreeMap<Unit, LetGo>,
    /// The owners in this member's view, last round.
    owners: BTreeMap<Unit, Option<String>>,
    changes: VecDeque<Change>,
    /// Forwarded actions this member carried out, by id, and when.
    served: HashMap<String, Timestamp>,
}

/// A unit let go with every task's record (see [`LET_GO_KEPT`]).
struct LetGo {
    at: Timestamp,
    /// What stays: the AIMD state and the dead-lettered and discarded rows.
    trimmed: gossip::Content,
    /// How many chunks the let-go wrote.
    chunks: usize,
}

impl Loop {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.round().await,
                _ = stop.changed() => break,
            }
        }
        self.leave().await;
    }

    /// Stop polling, publish the last state of every unit, say so, and let
    /// two rounds of gossip carry it before gossip stops.
    async fn leave(mut self) {
        let states = self.fleet.unit_states(true);
        self.fleet.set_scope(BTreeSet::new(), Adoption::default());
        let now = self.fleet.now();
        let mut keys: Vec<(String, String)> =
            vec![(gossip::READY.into(), "0".into()), (gossip::UNITS.into(), "[]".into())];
        for (u, st) in &states {
            keys.extend(gossip::encode_unit(u, now.0, &gossip::encode_content(st)));
        }
        self.handle
            .with_chitchat(|c| {
                let ns = c.self_node_state();
                for (k, v) in &keys {
                    ns.set(k, v);
                }
            })
            .await;
        self.owned.clear();
        tokio::time::sleep(self.interval * 2).await;
        tracing::info!("cluster: left; the other members take this member's units");
        let _ = self.handle.shutdown().await;
    }

    async fn round(&mut self) {
        self.rounds = self.rounds.saturating_add(1);
        let now = self.fleet.now();
        let my_hash = self.fleet.config_hash();
        let settled = self.rounds > SETTLE_ROUNDS && self.fleet.ready();
        let heard = self.read().await;
        let members = self.members(&heard, now, &my_hash, settled);
        let decision = view::decide(&self.me, &my_hash, &members, self.min_members);
        let units = self.fleet.units();

        // Who owns what in this member's view, and what moved.
        let owners = view::owners(&units, &decision);
        let moved = view::changes(now, &self.owners, &owners);
        if !self.owners.is_empty() || self.rounds > SETTLE_ROUNDS {
            self.metrics.ownership_changes.inc_by(moved.len() as u64);
            self.changes.extend(moved);
        }
        self.owners = owners;
        while self.changes.front().is_some_and(|c| now.since(c.at) > CHANGES_KEPT_FOR) {
            self.changes.pop_front();
        }

        // What this member owns now.
        let wanted = if settled {
            view::mine(&self.me, &units, &decision)
        } else {
            BTreeSet::new()
        };
        let heard_members: Vec<Member> = heard.values().map(|h| h.member.clone()).collect();
        let (free, waiting) = view::takeable(&self.me, &wanted, &heard_members);
        self.waiting_since.retain(|u, _| waiting.contains(u));
        let mut next: BTreeSet<Unit> = self.owned.intersection(&wanted).cloned().collect();
        next.extend(free.iter().cloned());
        for u in &waiting {
            if self.owned.contains(u) {
                next.insert(u.clone());
                continue;
            }
            let since = *self.waiting_since.entry(u.clone()).or_insert(self.rounds);
            if self.rounds - since >= HANDOFF_ROUNDS {
                tracing::warn!(unit = %u, "cluster: taking a unit another member still says it polls (it did not let go in time)");
                next.insert(u.clone());
            }
        }
        if next != self.owned {
            self.take(next, &heard).await;
        }
        if decision.paused != lock(&self.inner.status).paused {
            if decision.paused {
                tracing::warn!(
                    live = decision.live,
                    min_members = self.min_members,
                    "cluster: fewer live members than cluster.min_members; polling nothing until more are heard"
                );
            } else {
                tracing::info!(live = decision.live, "cluster: enough live members again; polling");
            }
        }
        if decision.mismatch != lock(&self.inner.status).mismatch && decision.mismatch {
            tracing::warn!(
                config_hash = %my_hash,
                majority = ?decision.majority_hash,
                "cluster: this member's config differs from the majority's; it owns nothing until the files agree"
            );
        }
        self.publish(now, &my_hash, settled, decision.paused).await;
        self.report(now, &heard, &decision, settled);
        self.forwarded(now).await;
    }

    /// Forwarded dead-letter actions: carry out those asked of a task this
    /// member polls (once each), hand the answers to the actions this
    /// member forwarded, and delete the answers nobody waits for.
    async fn forwarded(&mut self, now: Timestamp) {
        let waiting: Vec<String> = lock(&self.inner.pending).keys().cloned().collect();
        let (requests, answers, open, mine) = self
            .handle
            .with_chitchat(|c| {
                let live: BTreeSet<ChitchatId> = c.live_nodes().cloned().collect();
                let mut requests: Vec<(String, forward::Request)> = Vec::new();
                let mut answers: Vec<(String, String)> = Vec::new();
                let mut open: BTreeSet<String> = BTreeSet::new();
                for (id, ns) in c.node_states() {
                    for (k, v) in ns.iter_prefix(forward::REQUEST_PREFIX) {
                        let rid = k[forward::REQUEST_PREFIX.len()..].to_string();
                        open.insert(rid.clone());
                        // A request of a member that is down has nobody
                        // waiting for its answer.
                        if live.contains(id)
                            && let Some(r) = forward::decode_request(&v.value)
                        {
                            requests.push((rid, r));
                        }
                    }
                    for w in &waiting {
                        if let Some(v) = ns.get(&forward::reply_key(w)) {
                            answers.push((w.clone(), v.to_string()));
                        }
                    }
                }
                let mine: Vec<String> = c
                    .self_node_state()
                    .iter_prefix(forward::REPLY_PREFIX)
                    .map(|(k, _)| k[forward::REPLY_PREFIX.len()..].to_string())
                    .collect();
                (requests, answers, open, mine)
            })
            .await;
        for (id, text) in answers {
            if let Some(tx) = lock(&self.inner.pending).remove(&id) {
                let _ = tx.send(forward::decode_reply(&text));
            }
        }
        let gone: Vec<String> = mine.into_iter().filter(|id| !open.contains(id)).collect();
        if !gone.is_empty() {
            self.handle
                .with_chitchat(|c| {
                    let ns = c.self_node_state();
                    for id in &gone {
                        ns.delete(&forward::reply_key(id));
                    }
                })
                .await;
        }
        self.served.retain(|_, at| now.since(*at) <= SERVED_KEPT_FOR);
        for (id, request) in requests {
            if self.served.contains_key(&id) {
                continue;
            }
            let Some(unit) = self.fleet.unit_of_instance(&request.instance) else {
                continue;
            };
            if !self.owned.contains(&unit) {
                continue;
            }
            self.served.insert(id.clone(), now);
            let key = request.key();
            tracing::info!(task = %key, op = ?request.op, actor = %request.actor, id = %id, "cluster: carrying out a forwarded dead-letter action");
            let action = self
                .fleet
                .operator_action(key.clone(), request.actor.clone(), request.op);
            let chitchat = self.handle.chitchat();
            tokio::spawn(async move {
                let result = match action.await {
                    Ok(rec) => Ok((key, rec)),
                    Err(EngineError::Op(e)) => Err(Refusal::Op(e)),
                    Err(e) => Err(Refusal::Failed(e.to_string())),
                };
                chitchat
                    .lock()
                    .await
                    .self_node_state()
                    .set(forward::reply_key(&id), forward::encode_reply(&result));
            });
        }
    }

    /// Every member's state, read from gossip.
    async fn read(&mut self) -> BTreeMap<String, Heard> {
        let me = self.me.clone();
        let (nodes, live, dead) = self
            .handle
            .with_chitchat(|c| {
                let live: BTreeSet<ChitchatId> = c.live_nodes().cloned().collect();
                let dead: BTreeSet<ChitchatId> = c.dead_nodes().cloned().collect();
                let nodes: Vec<(ChitchatId, NodeStateCopy)> = c
                    .node_states()
                    .iter()
                    .map(|(id, ns)| (id.clone(), NodeStateCopy::of(ns)))
                    .collect();
                (nodes, live, dead)
            })
            .await;
        let mut out: BTreeMap<String, (u64, Heard)> = BTreeMap::new();
        for (id, ns) in nodes {
            let name = id.node_id.to_string();
            if out.get(&name).is_some_and(|(g, _)| *g > id.generation_id) {
                continue;
            }
            let state = if name == me || live.contains(&id) {
                MemberState::Live
            } else if dead.contains(&id) {
                MemberState::Down
            } else {
                // Known but not yet judged: not heard enough to be live.
                MemberState::Suspect
            };
            let member = Member {
                name: name.clone(),
                state,
                ready: ns.get(gossip::READY) == Some("1"),
                config_hash: ns.get(gossip::HASH).map(str::to_string),
                paused: ns.get(gossip::PAUSED) == Some("1"),
                units: ns.get(gossip::UNITS).map(gossip::decode_units).unwrap_or_default(),
            };
            let load = ns
                .get(gossip::LOAD)
                .and_then(|l| serde_json::from_str(l).ok())
                .unwrap_or_default();
            out.insert(
                name,
                (
                    id.generation_id,
                    Heard {
                        member,
                        address: id.gossip_advertise_addr,
                        heartbeat: ns.heartbeat,
                        load,
                    },
                ),
            );
        }
        out.into_iter().map(|(k, (_, h))| (k, h)).collect()
    }

    /// Own `next` from now on: units lost stop at once; units gained start
    /// from the newest state any member published of them.
    async fn take(&mut self, next: BTreeSet<Unit>, heard: &BTreeMap<String, Heard>) {
        let gained: Vec<Unit> = next.difference(&self.owned).cloned().collect();
        let lost: Vec<Unit> = self.owned.difference(&next).cloned().collect();
        let newest: Vec<(Unit, Option<Published>)> = self
            .handle
            .with_chitchat(|c| {
                gained
                    .iter()
                    .map(|u| {
                        let key = gossip::head_key(u);
                        let mut best: Option<Published> = None;
                        for (id, ns) in c.node_states() {
                            let Some(at) = ns.get(&key).and_then(gossip::head_at) else {
                                continue;
                            };
                            if best.as_ref().is_some_and(|(_, b, _)| *b >= at) {
                                continue;
                            }
                            if let Some((at, st)) = gossip::decode_unit(u, |k| ns.get(k)) {
                                best = Some((id.node_id.to_string(), at, st));
                            }
                        }
                        (u.clone(), best)
                    })
                    .collect()
            })
            .await;
        let mut adopted = Adoption::default();
        for (u, best) in newest {
            match best {
                Some((from, at, st)) => {
                    let budget = st.aimd.as_ref().map(|a| a.effective_rps);
                    tracing::info!(
                        unit = %u,
                        from = %from,
                        published = %Timestamp(at).to_rfc3339(),
                        effective_budget_rps = ?budget,
                        dead_letters = st.records.iter().filter(|(_, r)| r.dead_letter.is_some()).count(),
                        "cluster: taking over a unit from its last owner's state"
                    );
                    if let (Unit::Pool(p), Some(a)) = (&u, st.aimd) {
                        adopted.aimd.push((p.clone(), a));
                    }
                    adopted.records.extend(st.records);
                }
                None => tracing::info!(unit = %u, "cluster: taking a unit no member published a state of"),
            }
        }
        for u in &lost {
            let to = self.owners.get(u).cloned().flatten();
            let to_state = to.as_ref().and_then(|t| heard.get(t)).map(|h| h.member.state);
            tracing::info!(unit = %u, to = ?to, to_state = ?to_state.map(MemberState::as_str), "cluster: letting a unit go to its new owner");
        }
        // The last state of what is let go, before the engine forgets it:
        // every task's record, so the next owner polls each when it is due
        // rather than again at once.
        let states = self.fleet.unit_states(true);
        let now = self.fleet.now();
        self.fleet.set_scope(next.clone(), adopted);
        let mut last: Vec<(String, String)> = Vec::new();
        for (u, st) in states.iter().filter(|(u, _)| lost.contains(u)) {
            let content = gossip::encode_content(st);
            last.extend(gossip::encode_unit(u, now.0, &content));
            let trimmed = UnitState {
                aimd: st.aimd.clone(),
                records: st
                    .records
                    .iter()
                    .filter(|(_, r)| r.dead_letter.is_some() || r.disabled)
                    .cloned()
                    .collect(),
            };
            self.let_go.insert(
                u.clone(),
                LetGo {
                    at: now,
                    trimmed: gossip::encode_content(&trimmed),
                    chunks: content.1.len(),
                },
            );
            // Published afresh if it comes back.
            self.published.remove(u);
        }
        let units = gossip::encode_units(&next);
        self.handle
            .with_chitchat(|c| {
                let ns = c.self_node_state();
                for (k, v) in &last {
                    ns.set(k, v);
                }
                ns.set(gossip::UNITS, &units);
            })
            .await;
        self.owned = next;
    }

    /// This member's own keys, and the state of each unit it owns (again
    /// when it changed, the dead-letter entries at once).
    async fn publish(&mut self, now: Timestamp, hash: &str, settled: bool, paused: bool) {
        let (tasks, rps) = self.fleet.load();
        let load = serde_json::to_string(&gossip::Load {
            tasks,
            rps: (rps * 1000.0).round() / 1000.0,
        })
        .unwrap_or_default();
        let mut keys: Vec<(String, String)> = vec![
            (gossip::READY.into(), if settled { "1" } else { "0" }.into()),
            (gossip::PAUSED.into(), if paused { "1" } else { "0" }.into()),
            (gossip::HASH.into(), hash.to_string()),
            (gossip::UNITS.into(), gossip::encode_units(&self.owned)),
            (gossip::LOAD.into(), load),
        ];
        let mut stale: Vec<String> = Vec::new();
        let chunk = |u: &Unit, i: usize| format!("{}/{i}", gossip::head_key(u));
        let expired: Vec<Unit> = self
            .let_go
            .iter()
            .filter(|(_, g)| now.since(g.at) >= LET_GO_KEPT)
            .map(|(u, _)| u.clone())
            .collect();
        for u in expired {
            // Owned again: its own publication stands, and only the chunks
            // beyond it go (once it is out). Else the head is written again
            // as of the let-go (no newer than it was), with the trimmed rows.
            let kept = if self.owned.contains(&u) {
                match self.published.get(&u) {
                    Some((c, _)) => c.1.len(),
                    None => continue,
                }
            } else {
                let g = &self.let_go[&u];
                keys.extend(gossip::encode_unit(&u, g.at.0, &g.trimmed));
                g.trimmed.1.len()
            };
            if let Some(g) = self.let_go.remove(&u) {
                stale.extend((kept..g.chunks).map(|i| chunk(&u, i)));
            }
        }
        for (u, st) in self.fleet.unit_states(false) {
            let content = gossip::encode_content(&st);
            let due = match self.published.get(&u) {
                None => true,
                Some((before, at)) => {
                    *before != content && (before.1 != content.1 || now.since(*at) >= REPUBLISH_EVERY)
                }
            };
            if !due {
                continue;
            }
            if let Some((before, _)) = self.published.get(&u)
                && before.1.len() > content.1.len()
            {
                stale.extend((content.1.len()..before.1.len()).map(|i| chunk(&u, i)));
            }
            keys.extend(gossip::encode_unit(&u, now.0, &content));
            self.published.insert(u, (content, now));
        }
        self.handle
            .with_chitchat(|c| {
                let ns = c.self_node_state();
                for (k, v) in &keys {
                    ns.set(k, v);
                }
                for k in &stale {
                    ns.delete(k);
                }
            })
            .await;
    }

    /// The status the API shows, and the metrics.
    fn report(&mut self, now: Timestamp, heard: &BTreeMap<String, Heard>, d: &view::Decision, settled: bool) {
        let suspect_after = self.interval * SUSPECT_ROUNDS;
        let mut members: Vec<MemberStatus> = heard
            .iter()
            .map(|(name, h)| {
                let last = self.heard.get(name).map(|(_, t)| *t);
                let mut state = h.member.state;
                if *name != self.me && state == MemberState::Live && last.is_some_and(|t| now.since(t) > suspect_after)
                {
                    state = MemberState::Suspect;
                }
                let mine = *name == self.me;
                let units = if mine { &self.owned } else { &h.member.units };
                let (tasks, rps) = if mine {
                    self.fleet.load()
                } else {
                    (h.load.tasks, h.load.rps)
                };
                MemberStatus {
                    name: name.clone(),
                    state,
                    ready: if mine { settled } else { h.member.ready },
                    address: h.address,
                    config_hash: h.member.config_hash.clone(),
                    last_heard: if mine { Some(now) } else { last },
                    units: units.iter().map(|u| u.name().to_string()).collect(),
                    tasks,
                    rps,
                }
            })
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let mut counts: BTreeMap<&str, i64> = BTreeMap::from([("live", 0), ("suspect", 0), ("down", 0)]);
        for m in &members {
            *counts.entry(m.state.as_str()).or_default() += 1;
        }
        for (s, n) in counts {
            self.metrics.members.with_label_values(&[s]).set(n);
        }
        self.metrics.units_owned.set(self.owned.len() as i64);
        self.metrics.config_mismatch.set(i64::from(d.mismatch));
        self.metrics.polling_paused.set(i64::from(d.paused));
        let mut st = lock(&self.inner.status);
        st.paused = d.paused;
        st.mismatch = d.mismatch;
        st.settled = settled;
        st.members = members;
        st.owned = self.owned.clone();
        st.changes = self.changes.iter().cloned().collect();
    }

    /// Members as the decision needs them: a live member not heard for a
    /// few intervals is suspect; this member as it is now.
    fn members(
        &mut self,
        heard: &BTreeMap<String, Heard>,
        now: Timestamp,
        my_hash: &str,
        settled: bool,
    ) -> Vec<Member> {
        let suspect_after = self.interval * SUSPECT_ROUNDS;
        let mut out = Vec::new();
        for (name, h) in heard {
            let entry = self.heard.entry(name.clone()).or_insert((h.heartbeat, now));
            if entry.0 != h.heartbeat {
                *entry = (h.heartbeat, now);
            }
            let mut m = h.member.clone();
            if *name == self.me {
                m.ready = settled;
                m.config_hash = Some(my_hash.to_string());
                m.units = self.owned.clone();
            } else if m.state == MemberState::Live && now.since(entry.1) > suspect_after {
                m.state = MemberState::Suspect;
            }
            out.push(m);
        }
        if !heard.contains_key(&self.me) {
            out.push(Member {
                name: self.me.clone(),
                state: MemberState::Live,
                ready: settled,
                config_hash: Some(my_hash.to_string()),
                paused: false,
                units: self.owned.clone(),
            });
        }
        out
    }
}

/// The engine as a member's fleet.
pub struct EngineFleet {
    engine: EngineHandle,
    /// The catalog and settings last hashed (the catalog held, so its
    /// address is not reused while compared), and their hash.
    hash: Mutex<Option<CachedHash>>,
}

type CachedHash = (
    Arc<crate::core::catalog::Catalog>,
    crate::model::MonitoringSettings,
    String,
);

impl EngineFleet {
    pub fn new(engine: EngineHandle) -> EngineFleet {
        EngineFleet {
            engine,
            hash: Mutex::new(None),
        }
    }
}

/// The hash members compare: the instances, types and pools of the whole
/// catalog and the monitoring settings in force, as JSON, SHA-256, the
/// first 8 bytes in hex. Not `[server]`, `data_dir` nor the member's own
/// `[cluster]` keys: those are each member's.
pub fn config_hash(cat: &crate::core::catalog::Catalog, settings: &crate::model::MonitoringSettings) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut put = |tag: &str, v: serde_json::Value| {
        h.update(tag.as_bytes());
        h.update([0]);
        h.update(v.to_string().as_bytes());
        h.update([0]);
    };
    for (name, t) in &cat.types {
        put(&format!("type:{name}"), serde_json::to_value(&**t).unwrap_or_default());
    }
    for b in &cat.budgets {
        put(&format!("pool:{}", b.name), serde_json::to_value(b).unwrap_or_default());
    }
    for (name, e) in &cat.instances {
        put(
            &format!("instance:{name}"),
            serde_json::to_value(&*e.config).unwrap_or_default(),
        );
    }
    put("settings", serde_json::to_value(settings).unwrap_or_default());
    hex::encode(&h.finalize()[..8])
}

impl Fleet for EngineFleet {
    fn units(&self) -> Vec<Unit> {
        crate::core::ownership::units_of(&self.engine.full_catalog())
    }

    fn config_hash(&self) -> String {
        let cat = self.engine.full_catalog();
        let settings = self.engine.monitoring();
        let mut cached = lock(&self.hash);
        if let Some((c, s, h)) = &*cached
            && Arc::ptr_eq(c, &cat)
            && *s == settings
        {
            return h.clone();
        }
        let h = config_hash(&cat, &settings);
        *cached = Some((cat, settings, h.clone()));
        h
    }

    fn ready(&self) -> bool {
        self.engine.is_ready()
    }

    fn load(&self) -> (usize, f64) {
        self.engine.load()
    }

    fn unit_states(&self, every_task: bool) -> Vec<(Unit, UnitState)> {
        self.engine.unit_states(every_task)
    }

    fn set_scope(&self, owned: BTreeSet<Unit>, adopted: Adoption) {
        self.engine.set_scope(owned, adopted)
    }

    fn unit_of_instance(&self, instance: &str) -> Option<Unit> {
        self.engine
            .full_catalog()
            .instances
            .get(instance)
            .map(|e| crate::core::ownership::unit_of(&e.config))
    }

    fn operator_action(&self, key: TaskKey, actor: String, op: OperatorOp) -> OpFuture {
        let engine = self.engine.clone();
        Box::pin(async move { engine.operator_action(&key, &actor, op).await })
    }

    fn now(&self) -> Timestamp {
        self.engine.now()
    }
}

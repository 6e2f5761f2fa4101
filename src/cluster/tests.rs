//! Three members in one process, on chitchat's in-memory transport with
//! one datagram in seven dropped, on paused time: units owned once, a
//! killed member's units taken over within the bound from its gossiped
//! state, and given back when it returns with no unit polled twice for
//! longer than a gossip round.

use super::*;
use crate::core::aimd::{AimdState, Announced, Recovery};
use crate::model::{DeadLetterReason, DeadLetterRecord, TaskKey, TaskRecord};
use async_trait::async_trait;
use chitchat::ChitchatMessage;
use chitchat::transport::{ChannelTransport, Socket};
use std::sync::atomic::{AtomicUsize, Ordering};

const BASE_MS: u64 = 1_790_000_000_000;
const INTERVAL: Duration = Duration::from_secs(1);

/// What a member's engine would do, recorded.
struct FakeFleet {
    units: Vec<Unit>,
    /// The budget this member's pools run at (what it publishes).
    effective_rps: f64,
    start: tokio::time::Instant,
    scope: Mutex<BTreeSet<Unit>>,
    adopted: Mutex<Vec<Adoption>>,
    /// The operator actions carried out here.
    ops: Mutex<Vec<(TaskKey, String, OperatorOp)>>,
}

impl FakeFleet {
    fn new(units: &[Unit], effective_rps: f64) -> Arc<FakeFleet> {
        Arc::new(FakeFleet {
            units: units.to_vec(),
            effective_rps,
            start: tokio::time::Instant::now(),
            scope: Mutex::new(BTreeSet::new()),
            adopted: Mutex::new(Vec::new()),
            ops: Mutex::new(Vec::new()),
        })
    }

    fn owned(&self) -> BTreeSet<Unit> {
        lock(&self.scope).clone()
    }
}

/// The task a unit's dead-letter entry is for.
fn dead_task(u: &Unit) -> TaskKey {
    TaskKey::new(&format!("{}-inst", u.name()), "devices")
}

impl Fleet for FakeFleet {
    fn units(&self) -> Vec<Unit> {
        self.units.clone()
    }
    fn config_hash(&self) -> String {
        "same".into()
    }
    fn ready(&self) -> bool {
        true
    }
    fn load(&self) -> (usize, f64) {
        (lock(&self.scope).len(), 0.5)
    }
    /// With `every_task`, 120 healthy tasks besides the dead-lettered one
    /// (three chunks in gossip).
    fn unit_states(&self, every_task: bool) -> Vec<(Unit, UnitState)> {
        let now = self.now();
        lock(&self.scope)
            .iter()
            .map(|u| {
                let aimd = matches!(u, Unit::Pool(_)).then(|| AimdState {
                    configured_rps: 10.0,
                    effective_rps: self.effective_rps,
                    last_decrease: Some(now),
                    last_429: Some(now),
                    last_429_rps: Some(self.effective_rps + 1.0),
                    held_rps: None,
                    probe_after: None,
                    recovery: Recovery::Additive,
                    at: now,
                    announced: Announced::default(),
                });
                let rec = TaskRecord {
                    failures: 5,
                    dead_letter: Some(DeadLetterRecord {
                        reason: DeadLetterReason::MaxRetryAttempts,
                        since: Timestamp(BASE_MS),
                        next_recheck: Timestamp(BASE_MS + 600_000),
                        rechecks: 0,
                    }),
                    ..TaskRecord::default()
                };
                let mut records = vec![(dead_task(u), rec)];
                if every_task {
                    records.extend((0..120).map(|i| {
                        let key = TaskKey::new(&format!("{}-{i}", u.name()), "devices");
                        (key, TaskRecord::default())
                    }));
                }
                (u.clone(), UnitState { aimd, records })
            })
            .collect()
    }
    fn set_scope(&self, owned: BTreeSet<Unit>, adopted: Adoption) {
        *lock(&self.scope) = owned;
        lock(&self.adopted).push(adopted);
    }
    fn now(&self) -> Timestamp {
        Timestamp(BASE_MS + self.start.elapsed().as_millis() as u64)
    }
    fn unit_of_instance(&self, instance: &str) -> Option<Unit> {
        self.units
            .iter()
            .find(|u| dead_task(u).instance.as_ref() == instance)
            .cloned()
    }
    /// A retry of a dead-lettered task takes it out of the queue; any
    /// other action is refused as not dead-lettered.
    fn operator_action(&self, key: TaskKey, actor: String, op: OperatorOp) -> OpFuture {
        let owned = self
            .unit_of_instance(&key.instance)
            .is_some_and(|u| lock(&self.scope).contains(&u));
        lock(&self.ops).push((key.clone(), actor, op));
        Box::pin(async move {
            match op {
                _ if !owned => Err(EngineError::Op(crate::core::scheduler::OpError::NotFound(
                    key.to_string(),
                ))),
                OperatorOp::Retry => Ok(TaskRecord {
                    failures: 0,
                    ..TaskRecord::default()
                }),
                _ => Err(EngineError::Op(crate::core::scheduler::OpError::NotDeadLettered(
                    key.to_string(),
                ))),
            }
        })
    }
}

/// chitchat's in-memory transport, dropping one datagram in seven.
struct Lossy(ChannelTransport, Arc<AtomicUsize>);

struct LossySocket(Box<dyn Socket>, Arc<AtomicUsize>);

#[async_trait]
impl Transport for Lossy {
    async fn open(&self, addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        Ok(Box::new(LossySocket(self.0.open(addr).await?, self.1.clone())))
    }
}

#[async_trait]
impl Socket for LossySocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        if self.1.fetch_add(1, Ordering::Relaxed) % 7 == 6 {
            return Ok(());
        }
        self.0.send(to, msg).await
    }
    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        self.0.recv().await
    }
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 17_000 + i as u16))
}

async fn member(i: usize, fleet: Arc<FakeFleet>, transport: &Lossy, generation: u64) -> Cluster {
    let config = ClusterConfig {
        name: "lab".into(),
        member: Some(format!("m{i}")),
        listen: addr(i),
        advertise: Some(addr(i)),
        seeds: (0..3).map(|j| addr(j).to_string()).collect(),
        key_file: None,
        min_members: 2,
        gossip_interval: INTERVAL,
    };
    let setup = Setup {
        member: format!("m{i}"),
        advertise: addr(i),
        generation,
        config,
    };
    Cluster::start(setup, fleet, ClusterMetrics::new().unwrap(), transport)
        .await
        .unwrap()
}

/// How many of its own gossip keys `m` publishes that `pick` picks.
async fn own_keys(m: &Cluster, pick: impl Fn(&str) -> bool) -> usize {
    let mut chitchat = m.inner.chitchat.lock().await;
    chitchat.self_node_state().key_values().filter(|(k, _)| pick(k)).count()
}

/// Chunks of unit states past the first that `members` publish.
async fn extra_chunks(members: Vec<&Cluster>) -> usize {
    let past_first = |k: &str| {
        k.starts_with(gossip::UNIT_PREFIX)
            && k.rsplit('/')
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i >= 1)
    };
    let mut n = 0;
    for m in members {
        n += own_keys(m, past_first).await;
    }
    n
}

/// How many of `fleets` own each unit now.
fn owners_now(fleets: &[Arc<FakeFleet>]) -> BTreeMap<Unit, usize> {
    let mut out = BTreeMap::new();
    for f in fleets {
        for u in f.owned() {
            *out.entry(u).or_insert(0) += 1;
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_killed_members_units_move_within_the_bound_from_its_gossiped_state_and_come_back_without_double_polling() {
    let mut units: Vec<Unit> = (0..20).map(|i| Unit::Pool(format!("pool-{i}"))).collect();
    units.extend((0..4).map(|i| Unit::Instance(format!("pve-{i}"))));
    let transport = Lossy(ChannelTransport::default(), Arc::new(AtomicUsize::new(0)));
    let fleets: Vec<Arc<FakeFleet>> = (0..3).map(|i| FakeFleet::new(&units, 2.0 + i as f64)).collect();
    let mut members = Vec::new();
    for (i, f) in fleets.iter().enumerate() {
        members.push(member(i, f.clone(), &transport, 1).await);
    }

    // Settled: every unit has exactly one owner, and every member some.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let owners = owners_now(&fleets);
    assert_eq!(owners.len(), units.len(), "every unit is owned");
    assert!(owners.values().all(|&n| n == 1), "no unit is owned twice: {owners:?}");
    assert!(fleets.iter().all(|f| !f.owned().is_empty()));
    let status = members[0].status();
    assert_eq!(status.place().1, 3);
    assert!(status.members.iter().all(|m| m.state == MemberState::Live && m.ready));

    // Kill m2: its units move to the two others within 30 s.
    let lost = fleets[2].owned();
    members[2].crash();
    let killed = tokio::time::Instant::now();
    let survivors = [fleets[0].clone(), fleets[1].clone()];
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if owners_now(&survivors).len() == units.len() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "m2's units not taken over in 30 s"
        );
    }
    let took = killed.elapsed();
    assert!(
        took > Duration::from_secs(3),
        "taken over before m2 could be judged down: {took:?}"
    );
    // The new owner started from what m2 published: its budget (4.0 rps)
    // and its dead-letter entry.
    for u in &lost {
        let owner = survivors.iter().find(|f| f.owned().contains(u)).unwrap();
        let adoptions = lock(&owner.adopted);
        let got = adoptions.iter().rev().find(|a| a.records.contains_key(&dead_task(u)));
        let got = got.unwrap_or_else(|| panic!("{u}: m2's dead-letter entry was not taken over"));
        assert!(got.records[&dead_task(u)].dead_letter.is_some());
        if let Unit::Pool(p) = u {
            let budget = got
                .aimd
                .iter()
                .find(|(name, _)| name == p)
                .map(|(_, a)| a.effective_rps);
            assert_eq!(
                budget,
                Some(4.0),
                "{u}: the new owner's first budget is m2's gossiped one"
            );
        }
    }
    assert!(
        members[0]
            .status()
            .members
            .iter()
            .any(|m| m.name == "m2" && m.state == MemberState::Down),
        "m2 shows as down"
    );

    // m2 comes back (a new generation): its units go back to it, and no
    // unit is owned by two members for longer than one gossip round.
    let fleet2 = FakeFleet::new(&units, 4.0);
    let all = [fleets[0].clone(), fleets[1].clone(), fleet2.clone()];
    let _m2 = member(2, fleet2.clone(), &transport, 2).await;
    let back = tokio::time::Instant::now();
    let mut doubled_since: BTreeMap<Unit, tokio::time::Instant> = BTreeMap::new();
    let mut longest = Duration::ZERO;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = tokio::time::Instant::now();
        let owners = owners_now(&all);
        doubled_since.retain(|u, _| owners.get(u).copied().unwrap_or(0) > 1);
        for (u, n) in &owners {
            if *n > 1 {
                let since = *doubled_since.entry(u.clone()).or_insert(now);
                longest = longest.max(now - since);
            }
        }
        if fleet2.owned() == lost && owners.values().all(|&n| n == 1) && owners.len() == units.len() {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "m2's units not back in 30 s: {owners:?}"
        );
    }
    assert!(longest <= INTERVAL, "a unit was polled by two members for {longest:?}");

    // What the survivors let go carried every task (three chunks); after
    // LET_GO_KEPT it is cut back to the dead-letter entry (one chunk).
    assert!(
        extra_chunks(vec![&members[0], &members[1]]).await > 0,
        "the units let go carried every task's record"
    );
    tokio::time::sleep(super::LET_GO_KEPT + INTERVAL * 3).await;
    assert_eq!(
        extra_chunks(vec![&members[0], &members[1], &_m2]).await,
        0,
        "a let-go's every-task records stay in gossip"
    );
    let changes = members[0].status().changes;
    assert!(
        changes.iter().any(|c| c.from.as_deref() == Some("m2"))
            && changes.iter().any(|c| c.to.as_deref() == Some("m2")),
        "the changes name m2's units leaving and coming back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_member_alone_below_min_members_polls_nothing() {
    let units: Vec<Unit> = (0..5).map(|i| Unit::Pool(format!("p{i}"))).collect();
    let transport = Lossy(ChannelTransport::default(), Arc::new(AtomicUsize::new(0)));
    let fleet = FakeFleet::new(&units, 1.0);
    let m = member(0, fleet.clone(), &transport, 1).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(fleet.owned().is_empty(), "alone with min_members = 2 it owns nothing");
    let st = m.status();
    assert!(st.paused);
    assert_eq!(st.place(), (1, 1));
    // A second member comes: both poll, each unit once.
    let fleet1 = FakeFleet::new(&units, 1.0);
    let _m1 = member(1, fleet1.clone(), &transport, 1).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let owners = owners_now(&[fleet.clone(), fleet1.clone()]);
    assert_eq!(owners.len(), 5);
    assert!(owners.values().all(|&n| n == 1));
    assert!(!m.status().paused);
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_action_asked_of_another_member_is_carried_out_once_by_the_owner() {
    let units: Vec<Unit> = (0..6).map(|i| Unit::Pool(format!("p{i}"))).collect();
    let transport = Lossy(ChannelTransport::default(), Arc::new(AtomicUsize::new(0)));
    let fleets: Vec<Arc<FakeFleet>> = (0..3).map(|_| FakeFleet::new(&units, 1.0)).collect();
    let mut members = Vec::new();
    for (i, f) in fleets.iter().enumerate() {
        members.push(member(i, f.clone(), &transport, 1).await);
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    // A unit m0 does not poll, and who does.
    let unit = units
        .iter()
        .find(|u| !fleets[0].owned().contains(u))
        .expect("m0 does not own every unit")
        .clone();
    let owner = fleets.iter().position(|f| f.owned().contains(&unit)).expect("an owner");
    let task = dead_task(&unit);

    let asked = tokio::time::Instant::now();
    let rec = members[0].forward(&task, "admin", OperatorOp::Retry).await;
    assert_eq!(rec.map(|r| r.failures), Ok(0), "the owner's record comes back");
    assert!(asked.elapsed() <= INTERVAL * 5, "answered in {:?}", asked.elapsed());
    let ops = lock(&fleets[owner].ops).clone();
    assert_eq!(
        ops,
        vec![(task.clone(), "admin on m0".to_string(), OperatorOp::Retry)],
        "carried out once, by the owner"
    );
    for (i, f) in fleets.iter().enumerate() {
        if i != owner {
            assert!(lock(&f.ops).is_empty(), "m{i} does not poll the task and did nothing");
        }
    }

    // The owner's refusal comes back as its refusal.
    let refused = members[0].forward(&task, "admin", OperatorOp::Discard).await;
    assert!(
        matches!(
            refused,
            Err(Refusal::Op(crate::core::scheduler::OpError::NotDeadLettered(_)))
        ),
        "{refused:?}"
    );

    // Some rounds later the requests and answers are gone from gossip, and
    // nothing was carried out again.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(lock(&fleets[owner].ops).len(), 2);
    for m in &members {
        let left = own_keys(m, |k| {
            k.starts_with(forward::REQUEST_PREFIX) || k.starts_with(forward::REPLY_PREFIX)
        })
        .await;
        assert_eq!(left, 0, "{}: forwarded keys left", m.inner.me);
    }

    // A task no member polls is not answered, and says so.
    let nobody = TaskKey::new("not-in-the-catalog", "devices");
    let r = members[1].forward(&nobody, "admin", OperatorOp::Retry).await;
    assert!(matches!(r, Err(Refusal::NoAnswer(15))), "{r:?}");
}

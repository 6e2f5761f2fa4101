//! Scheduling quality against a rate-limited org API (issue #16), on paused
//! time: the whole appliance in process, its polls answered by a fake org
//! API with one token bucket (10 rps, burst 10, 429 with `Retry-After: 1`
//! when empty) that another integration drains too. 18 instances of a
//! four-group type (status p1, devices p2, health p3, inventory p4) whose
//! floors demand 150 % of the plan target share one pool of 10 rps × 0.8.
//!
//! - **A, a lone 429**: the other integration spends 2 rps, and once empties
//!   the whole bucket. At most one 429, none from the cold start; no
//!   priority 3/4 group unpolled for longer than max(3 × its planned
//!   interval, 2 min); the budget back to 90 % of the share within 5 min.
//! - **B, sustained overload** (issue #32): the other integration spends 6
//!   rps, leaving 4. The median effective budget in minutes 3–6 is at least
//!   80 % of that room; from minute 5 on at most two 429s, never two in a
//!   minute, and none in the 3 minutes after the first decrease settles;
//!   priority 1/2 tasks are never stale; the pool sheds what it must. A
//!   restart under B causes no 429 storm, keeps the room used, and does not
//!   announce again what it announced before.
//! - **The pool says so**: its transitions under B reach a real receiver on
//!   loopback as change events, also when the receiver was down until after
//!   a restart.

use crate::common::paused::{self, Engine, START};
use axum::extract::State;
use axum::http::StatusCode;
use pollster::config::SinkConfig;
use pollster::engine::ports::Fetch;
use pollster::fleet::sim::org::{self, GROUPS, INSTANCES, OrgBucket, POOL, SHARE_RPS};
use pollster::model::{
    BaseUrl, BudgetConfig, ErrorCategory, ErrorKind, GroupDef, InstanceConfig, PollError, PollResult, PollSuccess,
    Profile, TypeDef,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// One request the org API answered.
#[derive(Debug, Clone)]
struct Call {
    instance: String,
    group: String,
    /// Milliseconds after the run's origin.
    at_ms: u64,
    limited: bool,
}

/// The fake org API: one token bucket shared with another integration,
/// modelled on tokio's clock (its requests are played when Pollster asks).
struct OrgApi {
    origin: Instant,
    bucket: Mutex<OrgBucket>,
    calls: Mutex<Vec<Call>>,
    changes: AtomicU64,
}

impl OrgApi {
    fn new(origin: Instant, other_rps: u64, drain_at: Option<Duration>) -> Arc<OrgApi> {
        Arc::new(OrgApi {
            origin,
            bucket: Mutex::new(OrgBucket::new(other_rps, drain_at.map(|d| d.as_millis() as u64))),
            calls: Mutex::new(Vec::new()),
            changes: AtomicU64::new(1_000),
        })
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("lock").clone()
    }
}

#[async_trait::async_trait]
impl Fetch for OrgApi {
    async fn fetch(
        &self,
        instance: &InstanceConfig,
        _base: Option<&BaseUrl>,
        group: &GroupDef,
        _items: &[String],
    ) -> PollResult {
        let at_ms = (Instant::now() - self.origin).as_millis() as u64;
        let limited = { !self.bucket.lock().expect("lock").admit(at_ms) };
        self.calls.lock().expect("lock").push(Call {
            instance: instance.name.to_string(),
            group: group.name.clone(),
            at_ms,
            limited,
        });
        if limited {
            return Err(PollError {
                status: Some(429),
                retry_after: Some(Duration::from_secs(1)),
                ..PollError::new(ErrorCategory::Transient, ErrorKind::RateLimited, "HTTP 429")
            });
        }
        // Status changes at every poll in the incident minutes (2, 5 and 8:
        // adaptive polling goes towards its minimum, then back to base) and
        // every 2 minutes otherwise, devices never; health and inventory
        // change at every poll (so they run at their planned intervals).
        let digest = match group.name.as_str() {
            "status" if org::incident(at_ms) => self.changes.fetch_add(1, Ordering::Relaxed),
            "status" => at_ms / 120_000 + 1,
            "devices" => 1,
            _ => self.changes.fetch_add(1, Ordering::Relaxed),
        };
        Ok(PollSuccess {
            status: 200,
            digest,
            body_bytes: 2,
            ..Default::default()
        })
    }
}

/// The suite's engines: the org's pool of 18 instances.
impl Engine {
    async fn org(dir: &std::path::Path, origin: Instant, api: Arc<OrgApi>) -> Engine {
        Engine::org_with_sink(dir, origin, api, None).await
    }

    async fn org_with_sink(
        dir: &std::path::Path,
        origin: Instant,
        api: Arc<OrgApi>,
        sink: Option<SinkConfig>,
    ) -> Engine {
        let mut c = paused::config(dir);
        c.sink = sink;
        c.monitoring_file.scheduler.profile = Some(Profile::Full);
        c.types.push(TypeDef {
            name: "net".into(),
            groups: GROUPS
                .iter()
                .map(|(name, priority, floor)| {
                    GroupDef::new(name, &format!("/{name}"), *priority, Duration::from_secs(*floor))
                })
                .collect(),
        });
        c.budgets.push(BudgetConfig {
            name: POOL.into(),
            requests_per_second: 10.0,
            shared_fraction: 0.8,
            burst: 10,
        });
        c.instances = (0..INSTANCES)
            .map(|i| InstanceConfig {
                budget: Some(POOL.to_string()),
                ..InstanceConfig::new(&format!("net-{i:02}"), "net", "http://org.invalid/")
            })
            .collect();
        Engine::serve(c, paused::ports(origin, api), origin).await
    }
}

/// What the run looked like, second by second.
#[derive(Debug, Default)]
struct Sample {
    at_s: u64,
    effective_rps: f64,
    /// Planned interval of each group (`None` while shed).
    planned: BTreeMap<String, Option<f64>>,
    over_budget: bool,
}

/// Run `seconds` of the engine, sampling the pool every second.
async fn run(e: &Engine, origin: Instant, seconds: u64) -> Vec<Sample> {
    let mut samples = Vec::new();
    for _ in 0..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = START.plus(Instant::now() - origin);
        let reading = e.shared.plan_reading(now);
        let (status, effective) = reading.pools.iter().find(|(p, _)| p.name == POOL).expect("pool");
        // `SCHEDULING_PLAN=1` prints the pool's plan every 10 s.
        if std::env::var("SCHEDULING_PLAN").is_ok()
            && (now.since(START).as_secs() % 10 == 0 || std::env::var("SCHEDULING_PLAN").is_ok_and(|v| v == "all"))
        {
            eprintln!(
                "{:>4}s eff {:.2} target {:.2} demand {:.2} {:?}",
                now.since(START).as_secs(),
                effective,
                status.plan.target_rps,
                status.plan.total_demand_rps,
                status
                    .plan
                    .groups
                    .iter()
                    .map(|g| format!(
                        "{}:{:.1}{}:{:.2}",
                        g.name,
                        g.interval_s,
                        if g.shed { "(shed)" } else { "" },
                        g.demand_rps
                    ))
                    .collect::<Vec<_>>()
            );
        }
        samples.push(Sample {
            at_s: now.since(START).as_secs(),
            effective_rps: *effective,
            planned: status
                .plan
                .groups
                .iter()
                .map(|g| (g.name.clone(), (!g.shed).then_some(g.interval_s)))
                .collect(),
            over_budget: status.plan.over_budget,
        });
    }
    samples
}

/// The figures the goals are stated in.
#[derive(Debug)]
struct Figures {
    /// Times of the 429s, ms after the origin.
    limited_ms: Vec<u64>,
    /// 429s in each minute.
    per_minute: Vec<usize>,
    /// Per group: the longest time any of its tasks went without a
    /// successful poll (from `from_ms` to `to_ms`, ends included), seconds.
    longest_gap_s: BTreeMap<String, f64>,
    /// Requests per second Pollster sent, per minute.
    sent_rps: Vec<f64>,
}

fn figures(calls: &[Call], from_ms: u64, to_ms: u64) -> Figures {
    let calls: Vec<&Call> = calls
        .iter()
        .filter(|c| c.at_ms >= from_ms && c.at_ms <= to_ms)
        .collect();
    let minutes = (to_ms - from_ms).div_ceil(60_000) as usize;
    let mut per_minute = vec![0; minutes];
    let mut sent = vec![0usize; minutes];
    let mut limited_ms = Vec::new();
    let mut successes: HashMap<(&str, &str), Vec<u64>> = HashMap::new();
    for c in &calls {
        let m = (((c.at_ms - from_ms) / 60_000) as usize).min(minutes - 1);
        sent[m] += 1;
        if c.limited {
            per_minute[m] += 1;
            limited_ms.push(c.at_ms);
        } else {
            successes.entry((&c.instance, &c.group)).or_default().push(c.at_ms);
        }
    }
    let mut longest_gap_s: BTreeMap<String, f64> = BTreeMap::new();
    for (group, _, _) in GROUPS {
        let mut worst = 0;
        for i in 0..INSTANCES {
            let instance = format!("net-{i:02}");
            let mut times = vec![from_ms];
            times.extend(successes.get(&(instance.as_str(), group)).into_iter().flatten());
            times.push(to_ms);
            worst = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0).max(worst);
        }
        longest_gap_s.insert(group.to_string(), worst as f64 / 1000.0);
    }
    Figures {
        limited_ms,
        per_minute,
        longest_gap_s,
        sent_rps: sent.iter().map(|n| *n as f64 / 60.0).collect(),
    }
}

/// `SCHEDULING_DUMP=FROM-TO` (ms) prints the org API's calls in that window.
fn dump(calls: &[Call]) {
    let Ok(window) = std::env::var("SCHEDULING_DUMP") else {
        return;
    };
    let Some((from, to)) = window.split_once('-') else {
        return;
    };
    let (from, to): (u64, u64) = (from.parse().unwrap_or(0), to.parse().unwrap_or(0));
    for c in calls.iter().filter(|c| c.at_ms >= from && c.at_ms <= to) {
        eprintln!(
            "{:>7} {} {:<9} {}",
            c.at_ms,
            c.instance,
            c.group,
            if c.limited { "429" } else { "" }
        );
    }
}

fn report(name: &str, f: &Figures, samples: &[Sample]) {
    let budget: Vec<String> = samples
        .iter()
        .filter(|s| s.at_s % 30 == 0)
        .map(|s| format!("{}s:{:.2}", s.at_s, s.effective_rps))
        .collect();
    let shed: BTreeMap<&str, usize> = GROUPS
        .iter()
        .map(|(g, _, _)| (*g, samples.iter().filter(|s| s.planned.get(*g) == Some(&None)).count()))
        .collect();
    eprintln!(
        "{name}: 429s {} at {:?} ms; per minute {:?}; sent rps per minute {:.2?}; longest gap (s) {:?}; \
         seconds shed {:?}; effective budget {}",
        f.limited_ms.len(),
        f.limited_ms,
        f.per_minute,
        f.sent_rps,
        f.longest_gap_s,
        shed,
        budget.join(" ")
    );
}

/// The largest planned interval a group had while it was not shed (its
/// floor if it never had one).
fn largest_planned(samples: &[Sample], group: &str) -> f64 {
    let floor = GROUPS.iter().find(|g| g.0 == group).map(|g| g.2 as f64).unwrap_or(0.0);
    samples
        .iter()
        .filter_map(|s| s.planned.get(group).copied().flatten())
        .fold(floor, f64::max)
}

fn assert_priority_1_and_2_never_stale(f: &Figures) {
    // Stale: older than max(3 × interval, 2 min); status runs at ≤ 10 s and
    // devices at 30 s, so 2 minutes is the bound of both.
    for g in ["status", "devices"] {
        assert!(
            f.longest_gap_s[g] <= 120.0,
            "{g} went {} s without a successful poll",
            f.longest_gap_s[g]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_429_costs_no_priority_3_or_4_data_and_the_budget_comes_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = Instant::now();
    // The other integration spends 2 rps, and at 2 minutes takes the whole
    // bucket for half a second.
    let api = OrgApi::new(origin, 2, Some(Duration::from_secs(120)));
    let e = Engine::org(dir.path(), origin, api.clone()).await;
    let samples = run(&e, origin, 9 * 60).await;
    e.stop().await;
    let f = figures(&api.calls(), 0, 9 * 60_000);
    report("scenario A", &f, &samples);

    assert!(
        f.limited_ms.iter().all(|&t| t >= 120_000),
        "the cold start drew 429s: {:?}",
        f.limited_ms
    );
    assert!(f.limited_ms.len() <= 1, "more than one 429: {:?}", f.limited_ms);
    for g in ["health", "inventory"] {
        let bound = (3.0 * largest_planned(&samples, g)).max(120.0);
        assert!(
            f.longest_gap_s[g] <= bound,
            "{g} went {} s without a poll (bound {bound} s)",
            f.longest_gap_s[g]
        );
    }
    assert_priority_1_and_2_never_stale(&f);
    if let Some(&last) = f.limited_ms.last() {
        let by = last / 1000 + 5 * 60;
        let back = samples
            .iter()
            .find(|s| s.at_s > last / 1000 && s.effective_rps >= 0.9 * SHARE_RPS)
            .map(|s| s.at_s);
        assert!(
            back.is_some_and(|t| t <= by),
            "the budget was not back to 90 % of the share by {by} s (back at {back:?})"
        );
    }
}

/// What the org leaves Pollster in scenario B: 10 rps less the other
/// integration's 6.
const ROOM_RPS: f64 = 4.0;

/// The median effective budget of the samples from `from_s` to `to_s`.
fn median_effective(samples: &[Sample], from_s: u64, to_s: u64) -> f64 {
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|s| s.at_s >= from_s && s.at_s <= to_s)
        .map(|s| s.effective_rps)
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// From minute 3 on (the first decrease long settled, the budget back near
/// the room) no sample of the plan sheds a group: health and inventory are
/// stretched to their caps, which the room carries, also through the
/// incident minutes, whose speed-up of status the bucket serves from the
/// room the plan leaves (before, 105 of 108 samples shed them).
fn assert_nothing_that_fits_is_shed(samples: &[Sample]) {
    let late: Vec<&Sample> = samples.iter().filter(|s| s.at_s >= 180).collect();
    let shed: Vec<u64> = late
        .iter()
        .filter(|s| s.planned.values().any(|iv| iv.is_none()))
        .map(|s| s.at_s)
        .collect();
    assert!(
        !late.is_empty() && shed.is_empty(),
        "a group is shed in {} of the {} samples from minute 3 on, at {shed:?} s",
        shed.len(),
        late.len()
    );
}

/// Scenario B's checks on a run of `minutes` from `from_ms`.
fn assert_overload_settles(f: &Figures, samples: &[Sample]) {
    // The room is used: in minutes 3–6 the median effective budget is at
    // least 80 % of it (a failed probe steps back to the rate that held
    // instead of halving).
    let median = median_effective(samples, 180, 360);
    assert!(
        median >= 0.8 * ROOM_RPS,
        "median effective budget {median:.2} rps in minutes 3-6, below 80 % of the {ROOM_RPS} rps of room"
    );
    // From minute 5 on: at most two 429s, never more than one a minute.
    let late: Vec<u64> = f.limited_ms.iter().copied().filter(|&t| t >= 5 * 60_000).collect();
    assert!(
        late.len() <= 2 && f.per_minute.iter().skip(5).all(|&n| n <= 1),
        "429s from minute 5 on: {late:?}; per minute {:?}",
        f.per_minute
    );
    assert_priority_1_and_2_never_stale(f);
    // The pool sheds (or stretches) what it must: at the end Pollster sends
    // no more than the 4 rps the org has left for it.
    let last = samples.last().expect("samples");
    let stretched_or_shed = ["health", "inventory"].iter().any(|g| {
        let floor = GROUPS.iter().find(|x| x.0 == *g).map(|x| x.2 as f64).unwrap_or(0.0);
        last.planned[*g].is_none_or(|iv| iv > floor)
    });
    assert!(stretched_or_shed, "nothing stretched or shed under overload");
    assert!(
        f.sent_rps.last().is_some_and(|r| *r <= 4.0),
        "sending {:?} rps per minute with 4 rps left",
        f.sent_rps
    );
}

#[tokio::test(start_paused = true)]
async fn under_sustained_overload_429s_stop_within_five_minutes_and_priority_1_and_2_stay_fresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = Instant::now();
    let api = OrgApi::new(origin, 6, None);
    let e = Engine::org(dir.path(), origin, api.clone()).await;
    let samples = run(&e, origin, 9 * 60).await;
    e.stop().await;
    dump(&api.calls());
    let f = figures(&api.calls(), 0, 9 * 60_000);
    report("scenario B", &f, &samples);
    assert_overload_settles(&f, &samples);
    // Fast recovery stops below the rate the pool was sending when the 429
    // came, under the 4 rps the org leaves it: no second round of 429s
    // follows the first decrease (it came 62 s after it when fast recovery
    // aimed at 90 % of the 8 rps budget). The additive step meets the
    // limit again once: that failed probe steps back to the rate that
    // held, and is the only 429 of those 3 minutes.
    let decreased_s = samples
        .windows(2)
        .find(|w| w[1].effective_rps < w[0].effective_rps)
        .map(|w| w[1].at_s)
        .expect("the budget was decreased");
    let settled_ms = (decreased_s + 5) * 1000;
    let quiet_until_ms = settled_ms + 3 * 60_000;
    let second_round: Vec<u64> = f
        .limited_ms
        .iter()
        .copied()
        .filter(|&t| t > settled_ms && t <= quiet_until_ms)
        .collect();
    assert!(
        second_round.len() <= 1,
        "a round of 429s within 3 minutes after the decrease at {decreased_s} s settled: {second_round:?}"
    );
    assert_nothing_that_fits_is_shed(&samples);
    assert!(
        samples.iter().any(|s| s.over_budget),
        "the pool never said it was over budget"
    );
}

#[tokio::test(start_paused = true)]
async fn a_restart_under_sustained_overload_resumes_aimd_without_a_429_storm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = Instant::now();
    let api = OrgApi::new(origin, 6, None);
    let e = Engine::org(dir.path(), origin, api.clone()).await;
    run(&e, origin, 6 * 60).await;
    let before = e.shared.pool_effective_rps(POOL);
    e.stop().await;
    let restarted_ms = (Instant::now() - origin).as_millis() as u64;
    let e = Engine::org(dir.path(), origin, api.clone()).await;
    let after = e.shared.pool_effective_rps(POOL);
    let samples = run(&e, origin, 3 * 60).await;
    e.stop().await;
    dump(&api.calls());
    let f = figures(&api.calls(), restarted_ms, restarted_ms + 3 * 60_000);
    report("scenario B after a restart", &f, &samples);
    assert!(
        (after - before).abs() < 0.01 * SHARE_RPS,
        "the effective budget was {before} rps before the restart and {after} rps after it"
    );
    assert!(
        f.per_minute[0] <= 2,
        "{} 429s in the first minute after the restart: {:?}",
        f.per_minute[0],
        f.limited_ms
    );
    // The rate that held comes back with the state: the room stays used,
    // and what it carries is not shed.
    let median = median_effective(&samples, 0, u64::MAX);
    assert!(
        median >= 0.8 * ROOM_RPS,
        "median effective budget {median:.2} rps after the restart"
    );
    assert_nothing_that_fits_is_shed(&samples);
}

/// An event sink receiver on loopback: records the events of every batch it
/// accepts; answers 503 (recording nothing) while `down`.
#[derive(Clone, Default)]
struct Receiver {
    events: Arc<Mutex<Vec<serde_json::Value>>>,
    down: Arc<AtomicBool>,
}

async fn ingest(State(r): State<Receiver>, body: String) -> StatusCode {
    if r.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let mut events = r.events.lock().expect("lock");
    for line in body.lines().filter(|l| !l.is_empty()) {
        events.push(serde_json::from_str(line).expect("each line is JSON"));
    }
    StatusCode::OK
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let r = Receiver::default();
        let app = axum::Router::new()
            .route("/ingest", axum::routing::post(ingest))
            .with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/ingest", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (r, url)
    }

    fn pool_events(&self) -> Vec<serde_json::Value> {
        let events = self.events.lock().expect("lock");
        events.iter().filter(|e| e["kind"] == "pool").cloned().collect()
    }
}

#[tokio::test(start_paused = true)]
async fn pool_transitions_reach_a_receiver_that_was_down_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let origin = Instant::now();
    let (receiver, url) = Receiver::start().await;
    receiver.down.store(true, Ordering::SeqCst);
    let mut sink = SinkConfig::new(&url);
    sink.buffering = Duration::from_millis(50);
    // Scenario B for a minute: a lone 429, then a decrease that puts the
    // pool over budget (its groups stretched to their caps, none shed). The
    // receiver is down all along, and at the shutdown.
    let api = OrgApi::new(origin, 6, None);
    let e = Engine::org_with_sink(dir.path(), origin, api.clone(), Some(sink.clone())).await;
    run(&e, origin, 60).await;
    e.stop().await;
    let restart = START.plus(Instant::now() - origin);
    assert!(receiver.pool_events().is_empty(), "the receiver was down");
    receiver.down.store(false, Ordering::SeqCst);
    // After the restart the outbox is read again and shipped.
    let e = Engine::org_with_sink(dir.path(), origin, api, Some(sink)).await;
    let before_restart = |ev: &serde_json::Value| {
        ev["time"]
            .as_str()
            .is_some_and(|t| t < restart.to_rfc3339_millis().as_str())
    };
    let wall = std::time::Instant::now();
    let (decrease, over) = loop {
        let events = receiver.pool_events();
        let find = |transition: &str| {
            events
                .iter()
                .find(|ev| ev["transition"] == transition && before_restart(ev))
                .cloned()
        };
        if let (Some(d), Some(s)) = (find("aimd_decrease"), find("over_budget")) {
            break (d, s);
        }
        assert!(
            wall.elapsed() < Duration::from_secs(30),
            "no AIMD decrease and over budget from before the restart; pool events received: {events:#?}"
        );
        // Paused time: the engine and the sink's driver move on meanwhile.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The restart does not announce again what was announced before it:
    // the last announced state is stored with the AIMD row.
    run(&e, origin, 5).await;
    e.stop().await;
    let again: Vec<serde_json::Value> = receiver
        .pool_events()
        .into_iter()
        .filter(|ev| {
            !before_restart(ev)
                && ["shedding", "over_budget", "restored"].contains(&ev["transition"].as_str().unwrap_or_default())
        })
        .collect();
    assert!(
        again.is_empty(),
        "announced again after the restart at {restart:?}: {again:#?}; all: {:?}",
        receiver
            .pool_events()
            .iter()
            .map(|ev| format!("{} {} {}", ev["time"], ev["transition"], ev["groups"]))
            .collect::<Vec<_>>()
    );
    for ev in [&decrease, &over] {
        assert_eq!(ev["pool"], POOL, "{ev}");
        assert!(
            ev["id"].as_str().is_some_and(|id| !id.is_empty()),
            "a change event: {ev}"
        );
        for field in ["demand_rps", "target_rps", "effective_budget_rps", "budget_rps"] {
            assert!(ev[field].as_f64().is_some_and(|v| v > 0.0), "{field} in {ev}");
        }
        assert_eq!(ev["budget_rps"].as_f64(), Some(SHARE_RPS), "{ev}");
    }
    // Halved from the share: the groups at their caps exceed the target,
    // a share of the budget, but the budget itself carries them.
    for ev in [&decrease, &over] {
        assert_eq!(ev["effective_budget_rps"].as_f64(), Some(SHARE_RPS / 2.0), "{ev}");
    }
    let (demand, target) = (over["demand_rps"].as_f64(), over["target_rps"].as_f64());
    assert!(
        target < demand && demand <= Some(SHARE_RPS / 2.0),
        "over the target, within the budget: {over}"
    );
    assert_eq!(over["groups"].as_array().map(Vec::len), Some(0), "nothing shed: {over}");
}

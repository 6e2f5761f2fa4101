//! The engine's behaviours on paused time: the whole appliance in process,
//! with a scripted [`Fetch`] in place of HTTP, the engine's clock following
//! tokio's virtual clock and a fixed seed. Minutes of schedule run in
//! milliseconds, and every figure is exact: backoff between failures, the
//! dead-letter threshold and recheck, the breaker's half-open probe, a 429's
//! pause and AIMD, an operator's retry, and a cold start's spread; and,
//! with a task store whose commits fail, that nothing uncommitted shows.

use crate::common::paused::{self, Engine, START};
use pollster::config;
use pollster::core::scheduler::OperatorOp;
use pollster::engine::EngineError;
use pollster::engine::ports::{Fetch, Ports, TaskStore};
use pollster::model::{
    BaseUrl, BreakerState, BudgetConfig, ErrorCategory, ErrorKind, GroupDef, InstanceConfig, PollError, PollResult,
    PollSuccess, Polled, TaskKey, TaskRecord, TypeDef,
};
use pollster::store::{LoadedTasks, OutboxEvent, StoreError};
use pollster::values::ValueRule;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How a scripted target answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Ok,
    /// HTTP 500: transient.
    ServerError,
    /// HTTP 401: permanent.
    Unauthorized,
    /// HTTP 429 with this `Retry-After`.
    RateLimited(Duration),
}

/// A [`Fetch`] that answers per instance as told, and records when each
/// instance was asked (on tokio's clock).
#[derive(Default)]
struct Scripted {
    answers: Mutex<HashMap<String, Answer>>,
    /// The `temp` each instance's body carries (21.5 unless set).
    temp: Mutex<HashMap<String, f64>>,
    calls: Mutex<Vec<(String, Instant)>>,
}

impl Scripted {
    fn set(&self, instance: &str, a: Answer) {
        self.answers.lock().expect("lock").insert(instance.to_string(), a);
    }

    fn calls_of(&self, instance: &str) -> Vec<Instant> {
        let calls = self.calls.lock().expect("lock");
        calls.iter().filter(|(i, _)| i == instance).map(|(_, t)| *t).collect()
    }

    fn all_calls(&self) -> Vec<(String, Instant)> {
        self.calls.lock().expect("lock").clone()
    }
}

fn error(category: ErrorCategory, kind: ErrorKind, status: u16) -> PollError {
    PollError {
        status: Some(status),
        ..PollError::new(category, kind, format!("HTTP {status}"))
    }
}

#[async_trait::async_trait]
impl Fetch for Scripted {
    async fn fetch(
        &self,
        instance: &InstanceConfig,
        _base: Option<&BaseUrl>,
        _group: &GroupDef,
        _items: &[String],
    ) -> PollResult {
        self.calls
            .lock()
            .expect("lock")
            .push((instance.name.to_string(), Instant::now()));
        let answer = self
            .answers
            .lock()
            .expect("lock")
            .get(instance.name.as_str())
            .copied()
            .unwrap_or(Answer::Ok);
        match answer {
            Answer::Ok => Ok(PollSuccess {
                status: 200,
                digest: 1,
                body_bytes: 2,
                json: Some(Polled::One(
                    serde_json::json!({"temp": self.temp.lock().expect("lock").get(instance.name.as_str()).copied().unwrap_or(21.5)}),
                )),
                ..Default::default()
            }),
            Answer::ServerError => Err(error(ErrorCategory::Transient, ErrorKind::Http, 500)),
            Answer::Unauthorized => Err(error(ErrorCategory::Permanent, ErrorKind::InvalidCredentials, 401)),
            Answer::RateLimited(after) => Err(PollError {
                retry_after: Some(after),
                ..error(ErrorCategory::Transient, ErrorKind::RateLimited, 429)
            }),
        }
    }
}

/// Task state in memory, whose commits fail while `failing` is set (a full
/// disk, a failed redb write): nothing of a failed batch is kept. (Change
/// events are dropped: no sink is configured, so there are none.)
#[derive(Default)]
struct FlakyTasks {
    rows: Mutex<HashMap<TaskKey, TaskRecord>>,
    failing: AtomicBool,
}

impl FlakyTasks {
    fn fail(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }

    fn row(&self, instance: &str) -> Option<TaskRecord> {
        self.rows
            .lock()
            .expect("lock")
            .get(&TaskKey::new(instance, "probe"))
            .cloned()
    }
}

impl TaskStore for FlakyTasks {
    fn load_tasks(&self) -> Result<LoadedTasks, StoreError> {
        let rows = self.rows.lock().expect("lock");
        Ok((rows.iter().map(|(k, r)| (k.clone(), r.clone())).collect(), Vec::new()))
    }

    fn write_tasks_with_events(
        &self,
        batch: &[(TaskKey, Option<TaskRecord>)],
        _events: &[OutboxEvent],
    ) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Io {
                path: "tasks".into(),
                source: std::io::Error::other("no space left on device"),
            });
        }
        let mut rows = self.rows.lock().expect("lock");
        for (key, record) in batch {
            match record {
                Some(r) => rows.insert(key.clone(), r.clone()),
                None => rows.remove(key),
            };
        }
        Ok(())
    }
}

const INTERVAL: Duration = Duration::from_secs(10);

/// The suite's engines: one scripted group, `probe`.
impl Engine {
    /// `instances` of type `t` (one group, `probe`, every 10 s), failure
    /// rules: backoff 1 s doubling to 60 s without jitter, breaker after 3,
    /// dead letter after 5, recheck after 30 min.
    /// `origin`: when the test's clock read [`START`], so an engine started
    /// later (a restart) goes on from the time the first one left.
    async fn start(
        dir: &std::path::Path,
        origin: Instant,
        instances: &[&str],
        fetch: Arc<Scripted>,
        pool: Option<f64>,
    ) -> Engine {
        Engine::start_with(dir, origin, instances, fetch, pool, None).await
    }

    /// [`Engine::start`] with its task state in `tasks` rather than the
    /// database.
    async fn start_with(
        dir: &std::path::Path,
        origin: Instant,
        instances: &[&str],
        fetch: Arc<Scripted>,
        pool: Option<f64>,
        tasks: Option<Arc<dyn TaskStore>>,
    ) -> Engine {
        let mut c = paused::failure_config(dir, INTERVAL, Duration::from_secs(1800));
        let mut probe = GroupDef::new("probe", "", 1, INTERVAL);
        probe.values.push(
            toml::from_str::<ValueRule>("metric = \"t_temp_celsius\"\nhelp = \"Temperature\"\nvalue = \"/temp\"")
                .expect("rule"),
        );
        c.types.push(TypeDef {
            name: "t".into(),
            groups: vec![probe],
        });
        if let Some(rps) = pool {
            c.budgets.push(BudgetConfig {
                name: "api".into(),
                requests_per_second: rps,
                shared_fraction: 1.0,
                burst: 1,
            });
        }
        c.instances = instances
            .iter()
            .map(|n| InstanceConfig {
                timeout: Duration::from_secs(1),
                budget: pool.map(|_| "api".to_string()),
                ..InstanceConfig::new(n, "t", "http://scripted.invalid/")
            })
            .collect();
        let ports = Ports {
            tasks,
            ..paused::ports(origin, fetch)
        };
        Engine::serve(c, ports, origin).await
    }

    fn record(&self, instance: &str) -> TaskRecord {
        self.shared.task_record(&TaskKey::new(instance, "probe")).expect("task")
    }
}

fn gaps(calls: &[Instant]) -> Vec<Duration> {
    calls.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn five_failures_back_off_then_dead_letter_and_a_recovery_leaves_at_recheck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    fetch.set("broken", Answer::ServerError);
    let e = Engine::start(dir.path(), Instant::now(), &["broken"], fetch.clone(), None).await;
    tokio::time::sleep(Duration::from_secs(20 * 60)).await;
    let calls = fetch.calls_of("broken");
    assert_eq!(calls.len(), 5, "five attempts, then nothing until the recheck");
    assert_eq!(
        gaps(&calls),
        [1, 2, 4, 8].map(Duration::from_secs),
        "backoff 1 s doubling"
    );
    let rec = e.record("broken");
    let dl = rec.dead_letter.as_ref().expect("dead-lettered");
    assert_eq!(rec.failures, 5);
    assert_eq!(rec.breaker, BreakerState::Open);
    assert_eq!(rec.retry_at, Some(dl.since.plus(Duration::from_secs(1800))));

    fetch.set("broken", Answer::Ok);
    tokio::time::sleep(Duration::from_secs(11 * 60)).await;
    let calls = fetch.calls_of("broken");
    assert!(calls.len() >= 6, "rechecked");
    assert_eq!(calls[5] - calls[4], Duration::from_secs(1800), "the recheck is on time");
    let rec = e.record("broken");
    assert!(rec.dead_letter.is_none(), "left the dead-letter queue");
    assert_eq!((rec.failures, rec.breaker), (0, BreakerState::Closed));
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_dead_letters_at_once_and_an_operator_retry_probes_now() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    fetch.set("locked-out", Answer::Unauthorized);
    let e = Engine::start(dir.path(), Instant::now(), &["locked-out"], fetch.clone(), None).await;
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(fetch.calls_of("locked-out").len(), 1, "no retry of a permanent failure");
    let rec = e.record("locked-out");
    assert_eq!(rec.failures, 1);
    assert!(rec.dead_letter.is_some());

    fetch.set("locked-out", Answer::Ok);
    let asked = Instant::now();
    e.shared
        .operator_action(&TaskKey::new("locked-out", "probe"), "test", OperatorOp::Retry)
        .await
        .expect("retry");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = fetch.calls_of("locked-out");
    assert_eq!(calls.len(), 2, "the retry probed");
    assert!(calls[1] - asked < Duration::from_millis(100), "at once");
    assert!(e.record("locked-out").dead_letter.is_none());
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_discarded_task_is_not_polled_until_it_is_enabled_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    fetch.set("gone", Answer::Unauthorized);
    let e = Engine::start(dir.path(), Instant::now(), &["gone"], fetch.clone(), None).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(e.record("gone").dead_letter.is_some(), "dead-lettered by the 401");
    let key = TaskKey::new("gone", "probe");
    e.shared
        .operator_action(&key, "test", OperatorOp::Discard)
        .await
        .expect("discard");
    // Fixed, but discarded: an hour (two rechecks) passes without a poll.
    fetch.set("gone", Answer::Ok);
    let polled = fetch.calls_of("gone").len();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(fetch.calls_of("gone").len(), polled, "a discarded task is not polled");
    assert!(e.record("gone").dead_letter.is_none(), "out of the queue");

    let asked = Instant::now();
    e.shared
        .operator_action(&key, "test", OperatorOp::Enable)
        .await
        .expect("enable");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = fetch.calls_of("gone");
    assert_eq!(calls.len(), polled + 1, "enabled, it is polled");
    assert!(calls[polled] - asked < Duration::from_millis(100), "at once");
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_after_three_failures_and_its_half_open_probe_closes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    fetch.set("flaky", Answer::ServerError);
    let e = Engine::start(dir.path(), Instant::now(), &["flaky"], fetch.clone(), None).await;
    // Three failures, 1 s and 2 s apart, from the task's first (phased) run.
    while fetch.calls_of("flaky").len() < 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(fetch.calls_of("flaky").len(), 3);
    let rec = e.record("flaky");
    assert_eq!(rec.breaker, BreakerState::Open);
    let retry_at = rec.retry_at.expect("a retry time");
    fetch.set("flaky", Answer::Ok);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let calls = fetch.calls_of("flaky");
    assert!(calls.len() >= 4, "probed");
    let probe = e.at(calls[3]);
    assert!(
        probe.0.abs_diff(retry_at.0) <= 5,
        "probe at {probe:?}, retry at {retry_at:?}"
    );
    let rec = e.record("flaky");
    assert_eq!((rec.failures, rec.breaker), (0, BreakerState::Closed));
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lone_429_pauses_the_pool_and_a_second_one_halves_the_budget_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    let names = ["a", "b", "c"];
    let e = Engine::start(dir.path(), Instant::now(), &names, fetch.clone(), Some(4.0)).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let before = e.shared.pool_effective_rps("api");
    assert_eq!(before, 4.0);
    fetch.set("a", Answer::RateLimited(Duration::from_secs(20)));
    // Until a's next poll answers 429: a lone 429 pauses the pool, no more.
    let n = fetch.calls_of("a").len();
    while fetch.calls_of("a").len() == n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_429 = *fetch.calls_of("a").last().expect("call");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(e.shared.pool_effective_rps("api"), 4.0, "a lone 429 only pauses");
    // Its retry, after the pause, answers 429 again: the 429s recur.
    while fetch.calls_of("a").len() == n + 1 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let limited_at = *fetch.calls_of("a").last().expect("call");
    assert!(limited_at - first_429 >= Duration::from_secs(20), "the pool paused");
    fetch.set("a", Answer::Ok);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(e.shared.pool_effective_rps("api"), 2.0, "halved");
    tokio::time::sleep(Duration::from_secs(40)).await;
    let after: Vec<_> = fetch.all_calls().into_iter().filter(|(_, t)| *t > limited_at).collect();
    let first = after.first().expect("polling resumed").1;
    assert!(
        first - limited_at >= Duration::from_secs(20),
        "the pool polled {:?} after a Retry-After of 20 s",
        first - limited_at
    );
    let later = e.shared.pool_effective_rps("api");
    assert!(
        (2.0..2.1).contains(&later),
        "halved once, then recovering slowly: {later}"
    );
    let rec = e.record("a");
    assert_eq!(
        (rec.failures, rec.breaker),
        (0, BreakerState::Closed),
        "a 429 is no failure"
    );
    // Recovery: +0.1 rps a minute after the cooldown.
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    let recovered = e.shared.pool_effective_rps("api");
    assert!(recovered > 2.0 && recovered <= 4.0, "{recovered}");
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_cold_start_spreads_first_polls_and_a_restart_resumes_the_cadence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let names: Vec<String> = (0..20).map(|i| format!("i{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let fetch = Arc::new(Scripted::default());
    let origin = Instant::now();
    let started = origin;
    // (A restart's engine goes on from the time the first one left.)
    let e = Engine::start(dir.path(), origin, &refs, fetch.clone(), None).await;
    tokio::time::sleep(INTERVAL * 2).await;
    // A cold start polls everything at once, then leaves lockstep: the
    // second round is spread over the interval.
    let nth = |i: usize| -> Vec<Duration> {
        refs.iter()
            .map(|n| fetch.calls_of(n).get(i).copied().expect("polled") - started)
            .collect()
    };
    let spread =
        |v: &[Duration]| v.iter().max().copied().unwrap_or_default() - v.iter().min().copied().unwrap_or_default();
    let (firsts, seconds) = (nth(0), nth(1));
    assert_eq!(spread(&firsts), Duration::ZERO, "{firsts:?}");
    assert!(
        spread(&seconds) >= INTERVAL / 4,
        "second round within {:?}: {seconds:?}",
        spread(&seconds)
    );
    let distinct: std::collections::BTreeSet<u128> = seconds.iter().map(|d| d.as_millis() / 100).collect();
    assert!(distinct.len() >= 15, "the second round bunches up: {seconds:?}");
    tokio::time::sleep(Duration::from_secs(25)).await;
    let last_before: HashMap<&str, Instant> = refs
        .iter()
        .map(|n| (*n, *fetch.calls_of(n).last().expect("polled")))
        .collect();
    let stopping = Instant::now();
    e.stop().await;
    assert!(
        Instant::now() - stopping < Duration::from_secs(1),
        "a slow stop: {:?}",
        Instant::now() - stopping
    );

    // Restarted two seconds later, on the same file.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted = Instant::now();
    let fetch2 = Arc::new(Scripted::default());
    let e = Engine::start(dir.path(), origin, &refs, fetch2.clone(), None).await;
    tokio::time::sleep(INTERVAL).await;
    let mut on_time = 0;
    for n in &refs {
        let first = *fetch2.calls_of(n).first().expect("polled after the restart");
        let due = last_before[n] + INTERVAL;
        if due >= restarted {
            // Not yet due: it keeps its cadence.
            assert!(
                first.max(due) - first.min(due) <= Duration::from_millis(5),
                "{n}: due {:?} after the restart, polled {:?} after it",
                due - restarted,
                first - restarted
            );
            on_time += 1;
        } else {
            // Overdue: spread over its phase window, not all at once.
            assert!(first >= restarted && first - restarted <= INTERVAL, "{n}");
        }
    }
    assert!(on_time > 0, "no task kept its cadence across the restart");
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_operator_retry_whose_commit_fails_leaves_the_task_dead_lettered_and_unprobed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    fetch.set("locked-out", Answer::Unauthorized);
    let tasks = Arc::new(FlakyTasks::default());
    let e = Engine::start_with(
        dir.path(),
        Instant::now(),
        &["locked-out"],
        fetch.clone(),
        None,
        Some(tasks.clone()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    assert_eq!(fetch.calls_of("locked-out").len(), 1);
    let before = e.record("locked-out");
    assert!(before.dead_letter.is_some());
    assert_eq!(
        tasks.row("locked-out"),
        Some(before.clone()),
        "the move went through the port"
    );

    fetch.set("locked-out", Answer::Ok);
    tasks.fail(true);
    let key = TaskKey::new("locked-out", "probe");
    let err = e
        .shared
        .operator_action(&key, "test", OperatorOp::Retry)
        .await
        .expect_err("the commit failed");
    assert!(matches!(err, EngineError::Store(StoreError::Io { .. })), "{err}");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        fetch.calls_of("locked-out").len(),
        1,
        "no probe for an action that was not committed"
    );
    assert_eq!(e.record("locked-out"), before, "the task did not move");
    assert_eq!(tasks.row("locked-out"), Some(before));

    // Once commits work again, the same action goes through.
    tasks.fail(false);
    e.shared
        .operator_action(&key, "test", OperatorOp::Retry)
        .await
        .expect("retry");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fetch.calls_of("locked-out").len(), 2, "the retry probed");
    assert!(e.record("locked-out").dead_letter.is_none());
    assert!(tasks.row("locked-out").is_some_and(|r| r.dead_letter.is_none()));
    e.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_move_whose_commit_fails_is_not_shown_and_is_planned_again_at_the_recheck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    fetch.set("locked-out", Answer::Unauthorized);
    let tasks = Arc::new(FlakyTasks::default());
    tasks.fail(true);
    let e = Engine::start_with(
        dir.path(),
        Instant::now(),
        &["locked-out"],
        fetch.clone(),
        None,
        Some(tasks.clone()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10 * 60)).await;
    let calls = fetch.calls_of("locked-out");
    assert_eq!(calls.len(), 1, "the failure was permanent");
    let rec = e.record("locked-out");
    assert!(rec.dead_letter.is_none(), "a move that was not committed is not shown");
    assert_eq!(
        rec.next_run,
        e.at(calls[0]).plus(Duration::from_secs(1800)),
        "due again when the move planned its recheck"
    );
    assert_eq!(tasks.row("locked-out"), None);

    tasks.fail(false);
    tokio::time::sleep(Duration::from_secs(21 * 60)).await;
    let calls = fetch.calls_of("locked-out");
    assert_eq!(calls.len(), 2, "polled again at that time");
    assert_eq!(calls[1] - calls[0], Duration::from_secs(1800));
    let rec = e.record("locked-out");
    assert!(rec.dead_letter.is_some(), "the move, planned afresh, was committed");
    assert_eq!(tasks.row("locked-out").map(|r| r.dead_letter.is_some()), Some(true));
    e.stop().await;
}

fn served(e: &Engine) -> String {
    e.shared.values_exposition(None).expect("exposition")
}

#[tokio::test(start_paused = true)]
async fn values_are_served_while_fresh_and_vanish_when_stale_or_dead_lettered_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fetch = Arc::new(Scripted::default());
    fetch.temp.lock().expect("lock").insert("b".into(), 30.0);
    let origin = Instant::now();
    let e = Engine::start(dir.path(), origin, &["a", "b"], fetch.clone(), None).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        served(&e),
        "# HELP t_temp_celsius Temperature\n# TYPE t_temp_celsius gauge\n\
         t_temp_celsius{instance=\"a\"} 21.5\nt_temp_celsius{instance=\"b\"} 30\n"
    );
    assert_eq!(
        e.shared.values_exposition(Some("b")).expect("b exists"),
        "# HELP t_temp_celsius Temperature\n# TYPE t_temp_celsius gauge\nt_temp_celsius{instance=\"b\"} 30\n"
    );
    assert_eq!(e.shared.values_exposition(Some("nope")), None);

    // b is dead-lettered (a permanent failure): its sample goes at once.
    fetch.set("b", Answer::Unauthorized);
    // (After a cold start the second round is spread over an interval.)
    tokio::time::sleep(INTERVAL * 2).await;
    assert!(e.record("b").dead_letter.is_some());
    assert!(!served(&e).contains("instance=\"b\""), "{}", served(&e));
    assert_eq!(e.shared.values_exposition(Some("b")).expect("b exists"), "");

    // A new figure replaces the old one at the next poll.
    fetch.temp.lock().expect("lock").insert("a".into(), 22.0);
    tokio::time::sleep(INTERVAL + Duration::from_secs(1)).await;
    assert!(
        served(&e).contains("t_temp_celsius{instance=\"a\"} 22\n"),
        "{}",
        served(&e)
    );

    // a only gets 429s from now on (no failure streak, no dead letter): its
    // sample is served until it is older than max(3 × 10 s, 2 min).
    let last_ok = e.record("a").last_success.expect("polled");
    fetch.set("a", Answer::RateLimited(Duration::from_secs(5)));
    let until = |ms: u64| {
        let at = e.origin + Duration::from_millis(last_ok.0 - START.0 + ms);
        tokio::time::sleep_until(at)
    };
    until(119_000).await;
    assert!(served(&e).contains("instance=\"a\"} 22"), "fresh at 119 s");
    until(121_000).await;
    assert_eq!(served(&e), "", "stale at 121 s");

    // Back to normal, then a restart: the stored sample is served before
    // the first poll after it (which fails), and the dead letter stays out.
    fetch.set("a", Answer::Ok);
    tokio::time::sleep(INTERVAL).await;
    assert!(served(&e).contains("instance=\"a\"} 22"));
    e.stop().await;
    let fetch2 = Arc::new(Scripted::default());
    fetch2.set("a", Answer::ServerError);
    let e = Engine::start(dir.path(), origin, &["a", "b"], fetch2.clone(), None).await;
    assert_eq!(
        served(&e),
        "# HELP t_temp_celsius Temperature\n# TYPE t_temp_celsius gauge\nt_temp_celsius{instance=\"a\"} 22\n"
    );
    e.stop().await;

    // Started without instance a, nothing of it is served or kept.
    let e = Engine::start(dir.path(), origin, &["b"], fetch2.clone(), None).await;
    assert_eq!(served(&e), "");
    assert!(e.shared.values_of(&TaskKey::new("a", "probe")).is_none());
    e.stop().await;
}

/// Answers a two-group type: `site` gives the fact `site` (failing while
/// `site_down` is set), `count` a body its rule labels with that fact.
#[derive(Default)]
struct FactFetch {
    site_down: AtomicBool,
    calls: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Fetch for FactFetch {
    async fn fetch(
        &self,
        _instance: &InstanceConfig,
        _base: Option<&BaseUrl>,
        group: &GroupDef,
        _items: &[String],
    ) -> PollResult {
        self.calls.lock().expect("lock").push(group.name.clone());
        match group.name.as_str() {
            "site" if self.site_down.load(Ordering::SeqCst) => {
                Err(error(ErrorCategory::Transient, ErrorKind::Http, 500))
            }
            "site" => Ok(PollSuccess {
                status: 200,
                facts: Some(BTreeMap::from([("site".to_string(), "berlin".to_string())])),
                ..Default::default()
            }),
            _ => Ok(PollSuccess {
                status: 200,
                json: Some(Polled::One(serde_json::json!({"n": 3}))),
                ..Default::default()
            }),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn samples_that_name_a_fact_wait_for_it_without_another_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = config::load(None, &BTreeMap::new()).expect("defaults");
    c.server.data_dir = dir.path().to_path_buf();
    c.monitoring_file.adaptive.enabled = false;
    c.monitoring_file.failure.backoff_initial = Duration::from_secs(1);
    c.monitoring_file.failure.backoff_jitter = 0.0;
    let mut site = GroupDef::new("site", "/site", 1, Duration::from_secs(60));
    site.facts.insert("site".into(), "/name".into());
    let mut count = GroupDef::new("count", "/count", 1, Duration::from_secs(600));
    count.values.push(
        toml::from_str::<ValueRule>(
            "metric = \"f_items\"\nhelp = \"Items\"\nvalue = \"/n\"\nlabels = { site = \"{@fact.site}\" }",
        )
        .expect("rule"),
    );
    c.types.push(TypeDef {
        name: "f".into(),
        groups: vec![site, count],
    });
    c.instances = vec![InstanceConfig::new("x", "f", "http://scripted.invalid/")];
    let fetch = Arc::new(FactFetch::default());
    fetch.site_down.store(true, Ordering::SeqCst);
    let e = Engine::serve(c, Ports::paused(START, 7, fetch.clone()), Instant::now()).await;
    let shared = e.shared.clone();
    let count_calls = || {
        fetch
            .calls
            .lock()
            .expect("lock")
            .iter()
            .filter(|g| *g == "count")
            .count()
    };

    // The cold start polls both; the site is down, so the count's sample
    // waits (counted as missing) and nothing is served.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count_calls(), 1);
    assert_eq!(shared.values_exposition(Some("x")).expect("x"), "");
    assert!(shared.facts_of("x").is_none());

    // The site answers at its retry: the waiting sample is served, with
    // the time of its own poll, and the count group (floor 10 min) is not
    // asked again.
    fetch.site_down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        shared.values_exposition(Some("x")).expect("x"),
        "# HELP f_items Items\n# TYPE f_items gauge\nf_items{instance=\"x\",site=\"berlin\"} 3\n"
    );
    assert_eq!(count_calls(), 1, "no extra request for the waiting group");
    let v = shared.values_of(&TaskKey::new("x", "count")).expect("values");
    assert_eq!(v.values.polled_at, START, "recorded at its own poll's time");

    // Later polls read the fact at once.
    let before = shared.values_of(&TaskKey::new("x", "count")).expect("values");
    tokio::time::sleep(Duration::from_secs(1800)).await;
    assert!(count_calls() >= 2);
    let after = shared.values_of(&TaskKey::new("x", "count")).expect("values");
    assert!(after.values.polled_at > before.values.polled_at);
    assert!(
        shared
            .values_exposition(Some("x"))
            .expect("x")
            .contains("site=\"berlin\"} 3")
    );
    drop(shared);
    e.stop().await;
}

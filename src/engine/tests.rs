//! The engine's commit-before-visible rule for operator actions and
//! dead-letter moves, and change events committed with the state they
//! record, against a real store.

use super::Shared;
use super::settings::SettingsLayers;
use crate::core::catalog::Catalog;
use crate::core::scheduler::OperatorOp;
use crate::core::task::TaskMeta;
use crate::model::{
    BreakerState, DeadLetterReason, DeadLetterRecord, MonitoringSettings, TaskKey, TaskRecord, Timestamp,
};
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

fn shared(dir: &std::path::Path) -> Arc<Shared> {
    shared_with_sink(dir, None)
}

/// With a sink configured (never started: nothing is sent, events stay in
/// the outbox).
fn shared_with_sink(dir: &std::path::Path, sink: Option<crate::config::SinkConfig>) -> Arc<Shared> {
    let settings = MonitoringSettings::default();
    let layers = SettingsLayers {
        file: settings.clone(),
        saved: serde_json::Value::Null,
        env: Default::default(),
    };
    Shared::new(
        Store::open(dir).expect("store"),
        std::sync::Arc::new(crate::poll::Poller::new().expect("poller")),
        &crate::engine::ports::Ports::default(),
        Catalog::new(vec![], vec![]),
        layers,
        settings,
        sink,
    )
    .expect("shared")
}

/// Puts a dead-lettered task on the schedule, as a restart would.
fn dead_lettered(shared: &Shared, key: &TaskKey, now: Timestamp) -> TaskRecord {
    let recheck = now.plus(Duration::from_secs(1800));
    let rec = TaskRecord {
        failures: 1,
        breaker: BreakerState::Open,
        retry_at: Some(recheck),
        next_run: recheck,
        dead_letter: Some(DeadLetterRecord {
            reason: DeadLetterReason::PermanentFailure,
            since: now,
            next_recheck: recheck,
            rechecks: 0,
        }),
        ..TaskRecord::default()
    };
    let meta = TaskMeta::new("http", 1, Duration::from_secs(10));
    shared
        .core()
        .scheduler
        .place(key.clone(), meta, Some(rec.clone()), now, false);
    rec
}

#[tokio::test]
async fn an_operator_action_that_cannot_be_committed_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared(dir.path());
    // The store refuses this key (an instance name with a NUL), so the
    // commit fails.
    let key = TaskKey::new("bad\0name", "probe");
    let now = shared.now();
    let rec = dead_lettered(&shared, &key, now);
    for op in [OperatorOp::Discard, OperatorOp::Retry] {
        let err = shared.operator_action(&key, "test", op).await;
        assert!(err.is_err(), "{op:?}: {err:?}");
        let c = shared.core();
        let s = &c.scheduler;
        let t = s.get(&key).expect("task");
        assert_eq!(t.rec, rec, "{op:?}: the record is unchanged");
        assert!(!t.frozen, "{op:?}: released");
        assert_eq!(s.dead_letters().len(), 1, "{op:?}: still listed");
        assert_eq!(
            s.next_wakeup(),
            Some(rec.next_run),
            "{op:?}: still queued for its recheck"
        );
    }
    // Nor is anything left for the group commit to write later.
    let (dirty, _) = shared.core().scheduler.take_dirty();
    assert!(dirty.iter().all(|(k, r)| k != &key || r == &rec), "{dirty:?}");
}

#[tokio::test]
async fn an_operator_action_is_on_disk_when_it_is_visible() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared(dir.path());
    let key = TaskKey::new("web-1", "probe");
    let now = shared.now();
    dead_lettered(&shared, &key, now);
    let rec = shared
        .operator_action(&key, "test", OperatorOp::Discard)
        .await
        .expect("discarded");
    assert!(rec.disabled && rec.dead_letter.is_none());
    assert!(shared.core().scheduler.dead_letters().is_empty());
    let (stored, _) = shared.store.load_tasks().expect("load");
    assert_eq!(stored, vec![(key.clone(), rec)], "committed before it was shown");
    assert_eq!(
        shared
            .operator_action(&key, "test", OperatorOp::Discard)
            .await
            .err()
            .map(|e| e.to_string()),
        Some("task web-1/probe is not in the dead-letter queue".to_string())
    );
}

fn sink_on() -> Option<crate::config::SinkConfig> {
    Some(crate::config::SinkConfig::new("http://127.0.0.1:9/never-started"))
}

fn outbox(shared: &Shared) -> Vec<serde_json::Value> {
    shared
        .store
        .outbox_page(0, 100)
        .expect("page")
        .into_iter()
        .map(|(_, e)| serde_json::from_str(&e.expect("row").line).expect("json"))
        .collect()
}

#[tokio::test]
async fn an_operator_action_commits_its_event_with_it_and_a_failed_one_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared_with_sink(dir.path(), sink_on());
    let bad = TaskKey::new("bad\0name", "probe");
    let now = shared.now();
    dead_lettered(&shared, &bad, now);
    assert!(shared.operator_action(&bad, "test", OperatorOp::Discard).await.is_err());
    assert!(outbox(&shared).is_empty(), "no event for a change that was not made");

    let key = TaskKey::new("web-1", "probe");
    dead_lettered(&shared, &key, now);
    shared
        .operator_action(&key, "token:ci(1234)", OperatorOp::Retry)
        .await
        .expect("retried");
    let events = outbox(&shared);
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(
        (e["kind"].as_str(), e["action"].as_str()),
        (Some("dead_letter"), Some("retried"))
    );
    assert_eq!(e["actor"], "token:ci(1234)");
    assert!(e["id"].as_str().is_some_and(|id| id.len() == 26), "{e}");
}

#[tokio::test]
async fn staged_change_events_go_with_the_group_commit_or_wait_for_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared_with_sink(dir.path(), sink_on());
    let now = shared.now();
    let bad = TaskKey::new("bad\0name", "probe");
    dead_lettered(&shared, &bad, now);
    let event = crate::sink::Event::operator(now, "a", "instance.update", "x");
    {
        let mut c = shared.core();
        c.scheduler.mark_dirty([bad.clone()]);
        c.staged.push(shared.sink.stage(&event).expect("staged"));
    }
    assert!(shared.flush().await.is_err(), "the store refuses the key");
    assert!(outbox(&shared).is_empty(), "not without its state");
    assert_eq!(shared.core().staged.len(), 1, "kept for the next flush");
    // The bad record is given up; the next flush writes the event alone.
    let _ = shared.core().scheduler.take_dirty();
    shared.flush().await.expect("flush");
    assert_eq!(outbox(&shared).len(), 1);
    assert!(shared.core().staged.is_empty());

    // With the sink off, an operator action is staged for the audit trail
    // alone.
    let dir = tempfile::tempdir().expect("tempdir");
    let off = shared_with_sink(dir.path(), None);
    let row = off.sink.stage(&event).expect("an audit row");
    assert!(!row.deliver && row.audit.is_some());
}

/// A poll that fails for good: with the default settings, a dead-letter
/// entry is planned at once.
fn fails_for_good() -> crate::model::PollResult {
    Err(crate::model::PollError::new(
        crate::model::ErrorCategory::Permanent,
        crate::model::ErrorKind::Http,
        "HTTP 401 Unauthorized",
    ))
}

/// Dispatch `key` (a new task, due now) and plan its completion with `result`.
fn planned_completion(
    shared: &Shared,
    key: &TaskKey,
    result: &crate::model::PollResult,
    now: Timestamp,
) -> crate::core::scheduler::Prepared {
    let mut c = shared.core();
    let s = &mut c.scheduler;
    s.place(
        key.clone(),
        TaskMeta::new("http", 1, Duration::from_secs(10)),
        None,
        now,
        true,
    );
    let d = s.pop_due(now).expect("due");
    s.prepare_completion(&d.key, result, now, &mut crate::model::random::seeded(1))
        .expect("planned")
}

#[tokio::test]
async fn a_dead_letter_move_that_cannot_be_committed_is_not_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared_with_sink(dir.path(), sink_on());
    let now = shared.now();
    // The store refuses this key, so the commit fails.
    let bad = TaskKey::new("bad\0name", "probe");
    let result = fails_for_good();
    let p = planned_completion(&shared, &bad, &result, now);
    assert!(p.transition.must_commit());
    let planned_run = p.record.next_run;
    let events = super::worker::change_events(&shared.sink, &p, &result, now);
    assert!(!events.is_empty());

    let done = super::worker::commit_then_apply(&shared, p, events, now).await;
    assert_eq!(done.dead_letter, None, "reported as not moved");
    {
        let c = shared.core();
        let s = &c.scheduler;
        assert!(s.dead_letters().is_empty(), "not shown");
        assert_eq!(s.in_flight(), 0, "the poll is over");
        let t = s.get(&bad).expect("task");
        assert!(t.rec.dead_letter.is_none());
        assert_eq!(
            s.next_wakeup(),
            Some(planned_run),
            "due again when the plan said, not at once"
        );
    }
    assert!(shared.core().staged.is_empty(), "its events went with it");
    assert!(outbox(&shared).is_empty());

    // The same move on a key the store takes: on disk, with its event,
    // before it is shown.
    let good = TaskKey::new("web-1", "probe");
    let p = planned_completion(&shared, &good, &result, now);
    let events = super::worker::change_events(&shared.sink, &p, &result, now);
    let sent = events.len();
    let done = super::worker::commit_then_apply(&shared, p, events, now).await;
    assert!(done.must_commit());
    assert_eq!(shared.core().scheduler.dead_letters().len(), 1);
    let (stored, _) = shared.store.load_tasks().expect("load");
    assert!(
        stored.iter().any(|(k, r)| k == &good && r.dead_letter.is_some()),
        "{stored:?}"
    );
    assert_eq!(outbox(&shared).len(), sent, "the entry and its breaker opening");
}

/// A cluster's member: units gained start from the adopted state (the
/// pool's budget and the dead-letter entries), units lost leave the
/// schedule, and their records come back when the unit does.
#[tokio::test]
async fn a_member_takes_a_unit_from_the_adopted_state_and_parks_a_unit_it_lets_go() {
    use crate::core::aimd::{AimdState, Announced, Recovery};
    use crate::core::ownership::Unit;
    use crate::model::{BudgetConfig, InstanceConfig};
    use std::collections::BTreeSet;

    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared(dir.path());
    let pool = BudgetConfig {
        name: "org".into(),
        requests_per_second: 10.0,
        shared_fraction: 1.0,
        burst: 1,
    };
    let mut cat = Catalog::new(vec![], vec![pool]);
    let mut a = InstanceConfig::new("org-a", "http", "http://127.0.0.1:9/");
    a.budget = Some("org".into());
    cat.insert(a, true);
    cat.insert(InstanceConfig::new("lone", "http", "http://127.0.0.1:9/"), true);
    let group = cat.types["http"].groups[0].name.to_string();
    shared.start_scoped(BTreeSet::new());
    shared.set_catalog(cat);
    assert_eq!(shared.core().scheduler.len(), 0, "a member owns nothing at first");
    assert_eq!(shared.full_catalog().instances.len(), 2);

    let now = shared.now();
    let key = TaskKey::new("org-a", &group);
    let mut records = super::Records::default();
    records.insert(
        key.clone(),
        TaskRecord {
            failures: 5,
            dead_letter: Some(DeadLetterRecord {
                reason: DeadLetterReason::MaxRetryAttempts,
                since: now,
                next_recheck: now.plus(Duration::from_secs(600)),
                rechecks: 0,
            }),
            next_run: now.plus(Duration::from_secs(600)),
            ..TaskRecord::default()
        },
    );
    let gossiped = AimdState {
        configured_rps: 10.0,
        effective_rps: 3.5,
        last_decrease: Some(now),
        last_429: Some(now),
        last_429_rps: Some(4.0),
        held_rps: None,
        probe_after: None,
        recovery: Recovery::Additive,
        at: now,
        announced: Announced::default(),
    };
    let org = BTreeSet::from([Unit::Pool("org".into())]);
    shared.set_scope(
        org.clone(),
        super::Adoption {
            aimd: vec![("org".into(), gossiped)],
            records,
        },
    );
    assert_eq!(
        shared.pool_effective_rps("org"),
        3.5,
        "the pool goes on at the last owner's budget"
    );
    {
        let c = shared.core();
        let t = c.scheduler.get(&key).expect("the pool's task is on the schedule");
        assert!(t.rec.dead_letter.is_some(), "its dead-letter entry came with it");
        assert!(
            c.scheduler.tasks().all(|t| &*t.key.instance == "org-a"),
            "nothing of the lone instance"
        );
    }
    assert_eq!(shared.catalog().instances.len(), 1);
    let published = shared.unit_states(false);
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].1.aimd.as_ref().map(|a| a.effective_rps), Some(3.5));
    assert_eq!(published[0].1.records.len(), 1);

    // Let the pool go, take the lone instance: the pool's task leaves.
    shared.set_scope(
        BTreeSet::from([Unit::Instance("lone".into())]),
        super::Adoption::default(),
    );
    assert!(shared.core().scheduler.get(&key).is_none());
    assert!(shared.core().scheduler.tasks().all(|t| &*t.key.instance == "lone"));
    // The pool comes back with nothing in gossip: the parked record.
    let both = BTreeSet::from([Unit::Pool("org".into()), Unit::Instance("lone".into())]);
    shared.set_scope(both, super::Adoption::default());
    let c = shared.core();
    assert!(c.scheduler.get(&key).and_then(|t| t.rec.dead_letter.as_ref()).is_some());
}

/// A unit let go publishes every task's record, and the member that takes
/// it goes on at that cadence: a task polled just before the hand-over is
/// not polled again at once.
#[tokio::test]
async fn a_unit_handed_over_keeps_its_cadence_on_the_next_owner() {
    use crate::core::ownership::Unit;
    use crate::model::InstanceConfig;
    use std::collections::BTreeSet;

    let catalog = || {
        let mut cat = Catalog::new(vec![], vec![]);
        cat.insert(InstanceConfig::new("lone", "http", "http://127.0.0.1:9/"), true);
        cat
    };
    let lone = BTreeSet::from([Unit::Instance("lone".into())]);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let (a, b) = (shared(dir_a.path()), shared(dir_b.path()));
    for m in [&a, &b] {
        m.start_scoped(BTreeSet::new());
        m.set_catalog(catalog());
    }
    a.set_scope(lone.clone(), super::Adoption::default());
    let key = a.core().scheduler.tasks().next().expect("a task of lone").key.clone();

    // Only what is dead-lettered or discarded while the unit is owned; every
    // task when it is let go.
    assert!(
        a.unit_states(false)[0].1.records.is_empty(),
        "a healthy task is not gossiped every round"
    );
    let released = a.unit_states(true);
    assert_eq!(released.len(), 1);
    let mut records: super::Records = released[0].1.records.iter().cloned().collect();
    let rec = records.get_mut(&key).expect("the healthy task's record is published");
    // As if the last owner had just polled it: next due in 20 s.
    let next = a.now().plus(Duration::from_secs(20));
    rec.next_run = next;
    rec.last_success = Some(a.now());
    a.set_scope(BTreeSet::new(), super::Adoption::default());
    assert_eq!(a.core().scheduler.len(), 0);

    b.set_scope(
        lone,
        super::Adoption {
            aimd: Vec::new(),
            records,
        },
    );
    {
        let c = b.core();
        let t = c.scheduler.get(&key).expect("the next owner polls it");
        assert_eq!(
            t.rec.next_run, next,
            "due when the last owner would have polled it, not now"
        );
        assert!(t.rec.last_success.is_some());
    }

    // Fell due while the unit moved: due at once, not up to an interval on.
    b.set_scope(BTreeSet::new(), super::Adoption::default());
    let mut rec = TaskRecord::default();
    let before = b.now();
    rec.next_run = Timestamp(before.0 - 2_000);
    rec.last_success = Some(before);
    b.set_scope(
        BTreeSet::from([Unit::Instance("lone".into())]),
        super::Adoption {
            aimd: Vec::new(),
            records: super::Records::from_iter([(key.clone(), rec)]),
        },
    );
    let after = b.now();
    let c = b.core();
    let due = c.scheduler.get(&key).expect("polled again").rec.next_run;
    assert!(
        before <= due && due <= after,
        "due now: {due:?} not in [{before:?}, {after:?}]"
    );
}

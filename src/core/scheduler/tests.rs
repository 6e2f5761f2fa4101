use super::*;
use crate::model::random::SmallRng;
use crate::model::{ErrorCategory, ErrorKind, PollError, PollResult, PollSuccess};
use rand::SeedableRng;

const SEC: u64 = 1000;

fn meta(planned_secs: u64) -> TaskMeta {
    TaskMeta::new("http", 1, Duration::from_secs(planned_secs))
}
fn ok(d: u64) -> PollResult {
    Ok(PollSuccess {
        status: 200,
        digest: d,
        body_bytes: 2,
        ..Default::default()
    })
}
fn fail() -> PollResult {
    Err(PollError::new(
        ErrorCategory::Transient,
        ErrorKind::Connect,
        "connection refused",
    ))
}
fn k(i: &str) -> TaskKey {
    TaskKey::new(i, "probe")
}

fn pooled(planned_secs: u64) -> TaskMeta {
    TaskMeta {
        pool: Some(Arc::from("org")),
        ..meta(planned_secs)
    }
}

fn fixed() -> MonitoringSettings {
    let mut m = MonitoringSettings::default();
    m.adaptive.enabled = false;
    m
}

#[test]
fn a_pool_bucket_spaces_dispatches_and_keeps_each_task_on_its_cadence() {
    let mut s = Scheduler::new(fixed());
    let t0 = Timestamp(100 * SEC);
    s.set_pool("org", 1.0, 1, t0);
    for i in ["a", "b", "c"] {
        s.place(k(i), pooled(60), None, t0, true);
    }
    // One token: one dispatch now, the other two get the next slots.
    let first = s.pop_due(t0).expect("one dispatch");
    assert!(s.pop_due(t0).is_none(), "the bucket is empty");
    let slots: Vec<Timestamp> = ["a", "b", "c"]
        .iter()
        .filter(|i| **i != &*first.key.instance)
        .map(|i| s.get(&k(i)).map(|t| t.rec.next_run).unwrap_or_default())
        .collect();
    let mut sorted = slots.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [t0.plus(Duration::from_secs(1)), t0.plus(Duration::from_secs(2))]
    );
    // A reserved slot dispatches without charging the bucket again; its
    // cadence continues from the slot (a priority 3/4 task is also moved by
    // its spread, so that tasks that fell due together do not stay a
    // train); the wait counts from when it first fell due.
    let slot = t0.plus(Duration::from_secs(1));
    let second = s.pop_due(slot).expect("second slot");
    assert_eq!(second.due, slot);
    assert_eq!(second.first_due, t0);
    s.complete(&second.key, &ok(1), slot, &mut SmallRng::seed_from_u64(1));
    let next = s.get(&second.key).map(|t| t.rec.next_run);
    assert_eq!(
        next,
        Some(slot.plus(Duration::from_secs(60))),
        "slot + interval: a priority 1 task keeps its cadence"
    );
    // An unbudgeted task is never held up by the pool.
    s.place(k("free"), meta(60), None, t0, true);
    let d = s.pop_due(t0.plus(Duration::from_secs(1))).expect("unbudgeted dispatch");
    assert_eq!(&*d.key.instance, "free");
}

#[test]
fn tasks_that_waited_on_the_bucket_together_are_spread_over_the_next_interval() {
    // 18 tasks of one group, due together, in a pool of 4 rps with a burst
    // of 8: the bucket lines them up 250 ms apart. Polled and answered, they
    // must not come back as that train (16 requests in about 2 s).
    let mut s = Scheduler::new(fixed());
    let t0 = Timestamp(100 * SEC);
    s.set_pool("org", 4.0, 8, t0);
    let keys: Vec<TaskKey> = (0..18)
        .map(|i| TaskKey::new(&format!("net-{i:02}"), "devices"))
        .collect();
    let stored = TaskRecord {
        next_run: t0,
        ..TaskRecord::default()
    };
    for key in &keys {
        // Priority 3: a group the plan may stretch (priority 1/2 keep
        // their cadence).
        let health = TaskMeta {
            priority: 3,
            ..pooled(30)
        };
        s.place(key.clone(), health, Some(stored.clone()), t0, false);
    }
    let mut rng = SmallRng::seed_from_u64(7);
    let mut now = t0;
    let mut first_round = Vec::new();
    while first_round.len() < keys.len() {
        while let Some(d) = s.pop_due(now) {
            first_round.push(now);
            s.complete(&d.key, &ok(1), now, &mut rng);
        }
        now = now.plus(Duration::from_millis(50));
    }
    // What the pool really sent, for the AIMD controller: every dispatch,
    // once, whether it waited for a slot or not.
    let sent: Vec<(String, f64)> = s.take_sent().into_iter().map(|(p, n)| (p.to_string(), n)).collect();
    assert_eq!(sent, [("org".to_string(), 18.0)]);
    assert_eq!(s.take_sent()[0].1, 0.0, "read once");
    let train = first_round.last().expect("polls").since(first_round[0]);
    assert!(train <= Duration::from_secs(3), "the bucket's train: {train:?}");
    let mut next: Vec<Timestamp> = keys.iter().filter_map(|k| s.get(k).map(|t| t.rec.next_run)).collect();
    next.sort();
    let span = next.last().expect("next runs").since(next[0]);
    assert!(
        span >= Duration::from_secs(8),
        "the next round is spread over the interval, not a train: {span:?}"
    );
    // No two-second window of the next round holds more than the bucket
    // lets through in it (its burst of 8 plus 2 s at 4 rps would be 16).
    let crowded = next
        .iter()
        .map(|a| {
            next.iter()
                .filter(|b| **b >= *a && b.since(*a) < Duration::from_secs(2))
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(crowded <= 8, "{crowded} of the next round fall due within 2 s");
}

#[test]
fn a_paused_pool_dispatches_nothing_until_the_pause_ends() {
    let mut s = Scheduler::new(fixed());
    let t0 = Timestamp(100 * SEC);
    s.set_pool("org", 10.0, 5, t0);
    s.place(k("a"), pooled(60), None, t0, true);
    s.place(k("b"), pooled(60), None, t0, true);
    let until = t0.plus(Duration::from_secs(7));
    s.pause_pool("org", until, t0);
    assert!(s.pop_due(t0).is_none());
    assert!(s.pop_due(until.minus(Duration::from_millis(1))).is_none());
    // After the pause: one at once, the next at the steady rate.
    assert!(s.pop_due(until).is_some());
    assert!(s.pop_due(until).is_none(), "no burst right after a pause");
    assert!(s.pop_due(until.plus(Duration::from_millis(100))).is_some());
    // A shorter pause never shortens a longer one.
    s.pause_pool("org", t0, t0);
    assert_eq!(s.pool_bucket("org").and_then(|b| b.paused_until(t0)), Some(until));
}

#[test]
fn a_held_task_leaves_the_queue_and_returns_when_released() {
    let mut s = Scheduler::new(fixed());
    let t0 = Timestamp(100 * SEC);
    s.place(k("a"), meta(10), None, t0, true);
    assert_eq!(s.queue_len(), 1);
    let held = TaskMeta {
        hold: Some(task::Hold::Shed),
        ..meta(10)
    };
    s.update_meta(&k("a"), held, t0);
    assert_eq!(s.queue_len(), 0);
    assert!(s.pop_due(t0.plus(Duration::from_secs(60))).is_none());
    let released = t0.plus(Duration::from_secs(60));
    s.update_meta(&k("a"), meta(10), released);
    assert_eq!(s.queue_len(), 1);
    // Overdue: due again at its phase offset, within half its interval.
    let next = s.get(&k("a")).map(|t| t.rec.next_run).expect("task");
    assert!(
        next >= released && next <= released.plus(Duration::from_secs(5)),
        "{next:?}"
    );
    assert!(s.pop_due(next).is_some(), "due again once released");
}

#[test]
fn tasks_released_from_a_hold_together_are_spread_over_their_phase_window() {
    let mut s = Scheduler::new(fixed());
    let t0 = Timestamp(100 * SEC);
    let names: Vec<String> = (0..18).map(|i| format!("net-{i:02}")).collect();
    let shed = TaskMeta {
        hold: Some(task::Hold::Shed),
        ..pooled(60)
    };
    for n in &names {
        s.place(k(n), shed.clone(), None, t0, true);
    }
    let released = t0.plus(Duration::from_secs(600));
    for n in &names {
        s.update_meta(&k(n), pooled(60), released);
    }
    let due: std::collections::BTreeSet<Timestamp> = names
        .iter()
        .filter_map(|n| s.get(&k(n)).map(|t| t.rec.next_run))
        .collect();
    assert!(due.len() >= 15, "released in lockstep: {due:?}");
    assert!(
        due.iter()
            .all(|t| *t >= released && *t <= released.plus(Duration::from_secs(30)))
    );
}

#[test]
fn a_task_in_backoff_returns_at_its_retry_time_when_its_hold_lifts() {
    let mut s = Scheduler::new(fixed());
    let mut rng = SmallRng::seed_from_u64(1);
    let t0 = Timestamp(100 * SEC);
    s.place(k("a"), meta(10), None, t0, true);
    let d = s.pop_due(t0).expect("due");
    s.complete(&d.key, &fail(), t0, &mut rng);
    let retry = s.get(&k("a")).map(|t| t.rec.next_run).expect("task");
    assert!(
        s.get(&k("a"))
            .is_some_and(|t| t.rec.failures == 1 && t.rec.dead_letter.is_none())
    );
    let held = TaskMeta {
        hold: Some(task::Hold::Shed),
        ..meta(10)
    };
    s.update_meta(&k("a"), held, t0);
    assert_eq!(s.queue_len(), 0);
    s.update_meta(&k("a"), meta(10), t0);
    assert_eq!(s.queue_len(), 1, "back on the queue");
    assert_eq!(s.next_wakeup(), Some(retry), "at the retry time it had");
}

#[test]
fn a_new_planned_interval_retimes_a_queued_task() {
    let mut s = Scheduler::new(fixed());
    let t0 = Timestamp(100 * SEC);
    s.place(k("a"), meta(10), None, t0, true);
    let d = s.pop_due(t0).expect("dispatch");
    s.get_mut_for_test(&k("a")).spread = Spread::None;
    s.complete(&d.key, &ok(1), t0, &mut SmallRng::seed_from_u64(1));
    assert_eq!(
        s.get(&k("a")).map(|t| t.rec.next_run),
        Some(t0.plus(Duration::from_secs(10)))
    );
    s.update_meta(&k("a"), meta(45), t0.plus(Duration::from_secs(1)));
    assert_eq!(
        s.get(&k("a")).map(|t| t.rec.next_run),
        Some(t0.plus(Duration::from_secs(45))),
        "last attempt + the new planned interval"
    );
}

#[test]
fn cold_start_polls_at_once_and_later_tasks_get_their_phase() {
    let mut s = Scheduler::new(MonitoringSettings::default());
    let now = Timestamp(100 * SEC);
    s.place(k("a"), meta(5), None, now, true);
    s.place(k("b"), meta(5), None, now, false);
    assert_eq!(s.get(&k("a")).map(|t| t.rec.next_run), Some(now));
    let b = s.get(&k("b")).map(|t| t.rec.next_run).unwrap_or_default();
    assert_eq!(b, now.plus(phase::offset(&k("b"), Duration::from_secs(10))));
}

#[test]
fn a_cold_started_fleet_leaves_lockstep_after_its_first_round() {
    let mut s = Scheduler::new(fixed());
    let mut rng = SmallRng::seed_from_u64(7);
    let now = Timestamp(100 * SEC);
    let iv = Duration::from_secs(10);
    let n = 1000;
    for i in 0..n {
        s.place(k(&format!("inst-{i}")), meta(10), None, now, true);
    }
    // Round one: everything due at once.
    let mut keys = Vec::new();
    while let Some(d) = s.pop_due(now) {
        assert_eq!(d.due, now);
        keys.push(d.key);
    }
    assert_eq!(keys.len(), n);
    for key in &keys {
        s.complete(key, &ok(1), now.plus(Duration::from_millis(20)), &mut rng);
    }
    // Round two: each at its cycle place after one interval, spread over
    // the whole interval in tenths of roughly equal size.
    let mut tenths = [0u32; 10];
    for key in &keys {
        let next = s.get(key).map(|t| t.rec.next_run).unwrap_or_default();
        assert_eq!(next, now.plus(iv).plus(phase::cycle(key, iv)), "{key:?}");
        let into = next.0 - now.plus(iv).0;
        tenths[(into * 10 / iv.as_millis() as u64) as usize] += 1;
    }
    assert!(tenths.iter().all(|c| (60..140).contains(c)), "{tenths:?}");
    // Round three keeps the cadence: the offset is applied once.
    let key = keys[0].clone();
    let second = s.get(&key).map(|t| t.rec.next_run).unwrap_or_default();
    let mut d = s.pop_due(second).expect("due");
    while d.key != key {
        s.complete(&d.key, &ok(1), second, &mut rng);
        d = s.pop_due(second).expect("due");
    }
    s.complete(&key, &ok(1), second, &mut rng);
    assert_eq!(s.get(&key).map(|t| t.rec.next_run), Some(second.plus(iv)));
}

#[test]
fn a_task_is_never_in_flight_twice() {
    let mut s = Scheduler::new(MonitoringSettings::default());
    let now = Timestamp(SEC);
    s.place(k("a"), meta(5), None, now, true);
    assert!(s.pop_due(now).is_some());
    assert!(s.pop_due(now.plus(Duration::from_secs(3600))).is_none());
    assert_eq!((s.in_flight(), s.queue_len()), (1, 0));
    // re-placing an in-flight task does not queue it again
    s.place(k("a"), meta(5), None, now, true);
    assert_eq!(s.queue_len(), 0);
    // nor does an operator enable
    let _ = s.operate(&k("a"), OperatorOp::Enable, now);
    assert_eq!(s.queue_len(), 0);
}

#[test]
fn a_task_that_keeps_succeeding_keeps_its_cadence() {
    let mut settings = MonitoringSettings::default();
    settings.adaptive.enabled = false;
    let mut s = Scheduler::new(settings);
    let mut rng = SmallRng::seed_from_u64(1);
    let start = Timestamp(10 * SEC);
    s.place(k("a"), meta(5), None, start, false);
    let iv = Duration::from_secs(5);
    let first = phase::offset(&k("a"), iv);
    let mut expected = start.plus(first);
    for i in 0..100u64 {
        let d = s.pop_due(expected).expect("due");
        assert_eq!(d.due, expected);
        // every poll takes 1.7 s and the dispatcher was a bit late
        s.complete(&d.key, &ok(i % 3), expected.plus(Duration::from_millis(1700)), &mut rng);
        expected = expected.plus(iv);
        if i == 0 {
            // Once, from the first placement to its place in the cycle.
            expected = expected.plus(phase::settle(&k("a"), iv, first));
            assert_eq!(
                expected.0 % 5_000,
                (start.0 + phase::cycle(&k("a"), iv).as_millis() as u64) % 5_000
            );
        }
        assert_eq!(s.next_wakeup(), Some(expected), "poll {i}");
    }
}

proptest::proptest! {
    /// Poll latency and dispatch lateness never move a succeeding task's
    /// due times: two runs with the same seed and different latencies
    /// see exactly the same sequence of due times.
    #[test]
    fn due_times_do_not_drift_with_latency(
        seed: u64,
        adaptive: bool,
        lat_a in proptest::collection::vec(0u64..4_000, 40),
        lat_b in proptest::collection::vec(0u64..4_000, 40),
        digests in proptest::collection::vec(0u64..3, 40),
    ) {
        let run = |lat: &[u64]| {
            let mut settings = MonitoringSettings::default();
            settings.adaptive.enabled = adaptive;
            let mut s = Scheduler::new(settings);
            let mut rng = SmallRng::seed_from_u64(seed);
            let start = Timestamp(1_000_000);
            s.place(k("a"), meta(5), None, start, false);
            let mut dues = Vec::new();
            for (i, l) in lat.iter().enumerate() {
                let due = s.next_wakeup().unwrap_or_default();
                // dispatched up to 1 s late, finishing `l` ms after that
                let dispatched = due.plus(Duration::from_millis(l / 4));
                let d = s.pop_due(dispatched).expect("due");
                dues.push(d.due);
                s.complete(&d.key, &ok(digests[i]), dispatched.plus(Duration::from_millis(*l)), &mut rng);
            }
            dues
        };
        let a = run(&lat_a);
        let b = run(&lat_b);
        proptest::prop_assert_eq!(&a, &b);
        // The first gap also settles the task at its place in the cycle.
        let settle = phase::settle(&k("a"), Duration::from_secs(5), phase::offset(&k("a"), Duration::from_secs(5)));
        proptest::prop_assert!(a[1].since(a[0]) >= Duration::from_secs(5));
        if !adaptive {
            proptest::prop_assert_eq!(a[1].since(a[0]), Duration::from_secs(5) + settle);
        }
        for w in a[1..].windows(2) {
            let gap = w[1].since(w[0]);
            proptest::prop_assert!(gap >= Duration::from_secs(5), "never below the planned interval: {:?}", gap);
            if !adaptive {
                proptest::prop_assert_eq!(gap, Duration::from_secs(5));
            }
        }
    }
}

#[test]
fn dead_letter_completion_is_planned_before_it_is_visible() {
    let mut settings = MonitoringSettings::default();
    settings.failure.dead_letter_after = 1;
    let mut s = Scheduler::new(settings);
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Timestamp(SEC);
    s.place(k("a"), meta(5), None, now, true);
    let d = s.pop_due(now).expect("due");
    let p = s.prepare_completion(&d.key, &fail(), now, &mut rng).expect("planned");
    assert!(p.transition.must_commit());
    assert!(s.dead_letters().is_empty(), "not visible before apply");
    s.apply(p, now);
    assert_eq!(s.dead_letters().len(), 1);
    assert_eq!(s.queue_len(), 1);
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn a_dead_letter_entry_whose_commit_failed_is_not_shown_and_is_planned_again() {
    let mut settings = MonitoringSettings::default();
    settings.failure.dead_letter_after = 1;
    let mut s = Scheduler::new(settings);
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Timestamp(SEC);
    s.place(k("a"), meta(5), None, now, true);
    let d = s.pop_due(now).expect("due");
    let before = s.get(&k("a")).map(|t| t.rec.clone()).expect("task");
    let p = s.prepare_completion(&d.key, &fail(), now, &mut rng).expect("planned");
    assert!(p.transition.must_commit());
    let planned_run = p.record.next_run;
    assert!(planned_run > now);

    s.keep_unmoved(p, now);
    assert!(s.dead_letters().is_empty(), "an uncommitted entry is never shown");
    assert_eq!(s.in_flight(), 0);
    assert_eq!(s.queue_len(), 1);
    let t = s.get(&k("a")).expect("task");
    assert_eq!(t.rec.failures, before.failures, "the failure is not counted either");
    assert_eq!(t.rec.next_run, planned_run);
    assert!(s.pop_due(now).is_none(), "not due again at once");
    assert!(
        s.take_dirty()
            .0
            .iter()
            .any(|(key, r)| *key == k("a") && r.dead_letter.is_none())
    );

    // Its next completion plans the move again.
    let d = s.pop_due(planned_run).expect("due again");
    let p = s
        .prepare_completion(&d.key, &fail(), planned_run, &mut rng)
        .expect("planned");
    assert!(p.transition.must_commit());
    s.apply(p, planned_run);
    assert_eq!(s.dead_letters().len(), 1);
}

#[test]
fn a_recovery_whose_commit_failed_stays_dead_lettered_until_its_next_probe() {
    let mut settings = MonitoringSettings::default();
    settings.failure.dead_letter_after = 1;
    let mut s = Scheduler::new(settings);
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Timestamp(SEC);
    s.place(k("a"), meta(5), None, now, true);
    let d = s.pop_due(now).expect("due");
    s.complete(&d.key, &fail(), now, &mut rng);
    let recheck = s.get(&k("a")).map(|t| t.rec.next_run).expect("task");
    let d = s.pop_due(recheck).expect("recheck due");
    let p = s
        .prepare_completion(&d.key, &ok(1), recheck, &mut rng)
        .expect("planned");
    assert!(p.transition.must_commit(), "a recovery is a move");
    let planned_run = p.record.next_run;

    s.keep_unmoved(p, recheck);
    assert_eq!(s.dead_letters().len(), 1, "still listed: the recovery is not on disk");
    let rec = &s.get(&k("a")).expect("task").rec;
    assert_eq!(rec.next_run, planned_run);
    assert_eq!(rec.retry_at, Some(planned_run));
    assert_eq!(rec.dead_letter.as_ref().map(|dl| dl.next_recheck), Some(planned_run));
    assert!(s.pop_due(recheck).is_none(), "not probed again at once");
    assert!(s.pop_due(planned_run).is_some());
}

#[test]
fn an_operator_action_changes_nothing_until_it_is_applied() {
    let mut settings = MonitoringSettings::default();
    settings.failure.dead_letter_after = 1;
    let mut s = Scheduler::new(settings.clone());
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Timestamp(SEC);
    s.place(k("a"), meta(5), None, now, true);
    let d = s.pop_due(now).expect("due");
    s.complete(&d.key, &fail(), now, &mut rng);
    let before = s.get(&k("a")).cloned().expect("task");
    let _ = s.take_dirty();

    // Prepared: the record says discarded, the scheduler does not.
    let later = now.plus(Duration::from_secs(60));
    let rec = s.prepare_op(&k("a"), OperatorOp::Discard, later).expect("planned");
    assert!(rec.disabled && rec.dead_letter.is_none());
    assert_eq!(s.get(&k("a")), Some(&before));
    assert_eq!(s.dead_letters().len(), 1);

    // Held while it is committed: still listed, never dispatched, and
    // not put back on the queue by a re-timing.
    s.freeze(&k("a"));
    assert_eq!(s.dead_letters().len(), 1);
    assert_eq!(s.queue_len(), 0);
    let recheck = before.rec.next_run;
    assert!(s.pop_due(recheck.plus(Duration::from_secs(3600))).is_none());
    settings.failure.dead_letter_recheck = Duration::from_secs(1);
    s.set_settings(settings, later, &mut rng);
    s.update_meta(&k("a"), meta(7), later);
    assert_eq!(s.queue_len(), 0);
    assert_eq!(s.get(&k("a")).map(|t| &t.rec), Some(&before.rec));

    // A failed commit releases it as it was.
    s.release(&k("a"), later);
    assert_eq!(s.get(&k("a")).map(|t| &t.rec), Some(&before.rec));
    assert_eq!(s.queue_len(), 1);
    assert_eq!(s.dead_letters().len(), 1);

    // A committed one becomes visible at once, and is not left for the
    // group commit (it is on disk already).
    s.freeze(&k("a"));
    s.apply_op(&k("a"), OperatorOp::Discard, rec.clone(), later);
    assert!(s.dead_letters().is_empty());
    assert_eq!(s.get(&k("a")).map(|t| &t.rec), Some(&rec));
    assert_eq!(s.queue_len(), 0, "a discarded task stays off the queue");
    assert!(s.take_dirty().0.is_empty());
    let rec = s.prepare_op(&k("a"), OperatorOp::Enable, later).expect("enable");
    s.freeze(&k("a"));
    s.apply_op(&k("a"), OperatorOp::Enable, rec, later);
    assert_eq!(s.pop_due(later).map(|d| d.key), Some(k("a")));
}

#[test]
fn operator_retry_and_discard() {
    let mut settings = MonitoringSettings::default();
    settings.failure.dead_letter_after = 1;
    let mut s = Scheduler::new(settings);
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Timestamp(SEC);
    s.place(k("a"), meta(5), None, now, true);
    s.place(k("b"), meta(5), None, now, true);
    for _ in 0..2 {
        let d = s.pop_due(now).expect("due");
        s.complete(&d.key, &fail(), now, &mut rng);
    }
    assert_eq!(s.dead_letters().len(), 2);
    assert_eq!(
        s.operate(&k("zz"), OperatorOp::Retry, now),
        Err(OpError::NotFound("zz/probe".into()))
    );

    let later = now.plus(Duration::from_secs(60));
    s.operate(&k("a"), OperatorOp::Retry, later).expect("retry");
    let d = s.pop_due(later).expect("a is due now");
    assert_eq!(d.key, k("a"));
    s.complete(&d.key, &ok(1), later, &mut rng);
    assert_eq!(s.dead_letters().len(), 1, "a recovered");

    s.operate(&k("b"), OperatorOp::Discard, later).expect("discard");
    assert!(s.dead_letters().is_empty());
    assert!(s.get(&k("b")).is_some_and(|t| t.rec.disabled));
    assert!(!s.queue.contains(&k("b")), "discarded tasks are not polled");
    assert_eq!(
        s.operate(&k("b"), OperatorOp::Discard, later),
        Err(OpError::NotDeadLettered("b/probe".into()))
    );
    s.operate(&k("b"), OperatorOp::Enable, later).expect("enable");
    assert_eq!(s.pop_due(later).map(|d| d.key), Some(k("b")));
}

#[test]
fn resuming_keeps_future_times_and_spreads_overdue_ones() {
    let mut s = Scheduler::new(MonitoringSettings::default());
    let now = Timestamp(1000 * SEC);
    let future = TaskRecord {
        next_run: now.plus(Duration::from_secs(7)),
        ..TaskRecord::default()
    };
    s.place(k("future"), meta(5), Some(future), now, false);
    assert_eq!(
        s.get(&k("future")).map(|t| t.rec.next_run),
        Some(now.plus(Duration::from_secs(7)))
    );

    for i in 0..200 {
        let overdue = TaskRecord {
            next_run: Timestamp(10 * SEC),
            interval_ms: 60_000,
            ..TaskRecord::default()
        };
        s.place(k(&format!("o{i}")), meta(5), Some(overdue), now, false);
    }
    let due_at_once = s.due_within(now, Duration::ZERO);
    assert!(due_at_once < 10, "{due_at_once} overdue tasks fire at once");
    assert!(s.due_within(now, Duration::from_secs(30)) >= 199);
}

#[test]
fn open_breakers_and_dead_letters_keep_their_times_on_resume() {
    let mut s = Scheduler::new(MonitoringSettings::default());
    let now = Timestamp(1000 * SEC);
    let retry = now.plus(Duration::from_secs(15));
    let rec = TaskRecord {
        breaker: BreakerState::Open,
        failures: 3,
        retry_at: Some(retry),
        next_run: retry,
        ..TaskRecord::default()
    };
    s.place(k("a"), meta(5), Some(rec), now, false);
    assert!(s.pop_due(retry.minus(Duration::from_millis(1))).is_none());
    let d = s.pop_due(retry).expect("probe at retryAt");
    assert_eq!(d.breaker, Some((BreakerState::Open, BreakerState::HalfOpen)));
}

#[test]
fn settings_changes_retime_queued_tasks_at_once() {
    let mut s = Scheduler::new(MonitoringSettings::default());
    let mut rng = SmallRng::seed_from_u64(5);
    let now = Timestamp(SEC);
    s.place(k("a"), meta(1), None, now, true);
    let d = s.pop_due(now).expect("due");
    // idle for a long time → long interval
    s.complete(&d.key, &ok(1), now, &mut rng);
    for _ in 0..30 {
        let t = s.next_wakeup().unwrap_or_default();
        let d = s.pop_due(t).expect("due");
        s.complete(&d.key, &ok(1), t, &mut rng);
    }
    let mut m = meta(1);
    m.priority = 3;
    let t = s.next_wakeup().unwrap_or_default();
    s.update_meta(&k("a"), m, t);
    let long = s.next_wakeup().unwrap_or_default();

    let mut fast = MonitoringSettings::default();
    fast.adaptive.max_interval = Duration::from_secs(10);
    fast.adaptive.base_interval = Duration::from_secs(10);
    let at = t;
    s.set_settings(fast, at, &mut rng);
    let last = s.get(&k("a")).and_then(|t| t.rec.last_attempt).unwrap_or_default();
    let next = s.next_wakeup().unwrap_or_default();
    assert!(
        next <= last.plus(Duration::from_millis(10_500)),
        "next {next:?} long {long:?}"
    );

    let mut off = MonitoringSettings::default();
    off.adaptive.enabled = false;
    s.set_settings(off, at, &mut rng);
    assert_eq!(s.next_wakeup(), Some(last.plus(Duration::from_secs(1)).max(at)));
}

#[test]
fn removal_while_in_flight_waits_for_completion() {
    let mut s = Scheduler::new(MonitoringSettings::default());
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Timestamp(SEC);
    s.place(k("a"), meta(5), None, now, true);
    let d = s.pop_due(now).expect("due");
    s.remove(&d.key);
    assert!(s.get(&d.key).is_some());
    s.complete(&d.key, &ok(1), now, &mut rng);
    assert!(s.get(&d.key).is_none());
    let (_, deleted) = s.take_dirty();
    assert_eq!(deleted, vec![k("a")]);
    assert_eq!(s.queue_len(), 0);
}

#[test]
fn a_cancelled_reservation_keeps_the_wait_counted_from_when_the_task_fell_due() {
    let mut s = Scheduler::new(fixed());
    let t0 = Timestamp(100 * SEC);
    s.set_pool("org", 1.0, 1, t0);
    s.place(k("a"), pooled(60), None, t0, true);
    s.place(k("b"), pooled(60), None, t0, true);
    let first = s.pop_due(t0).expect("one dispatch");
    assert!(s.pop_due(t0).is_none());
    let other = if &*first.key.instance == "a" { k("b") } else { k("a") };
    let deferred = |reserved| TaskState::Queued {
        deferred: Some(Deferral { from: t0, reserved }),
    };
    assert_eq!(s.get(&other).map(|t| t.state), Some(deferred(true)));
    // A slower rate voids the slot; the wait still counts from t0.
    s.set_pool("org", 0.5, 1, t0);
    assert_eq!(s.get(&other).map(|t| t.state), Some(deferred(false)));
    let mut at = t0.plus(Duration::from_secs(1));
    let d = loop {
        if let Some(d) = s.pop_due(at) {
            break d;
        }
        at = s.next_wakeup().expect("still queued");
    };
    assert_eq!(d.key, other);
    assert_eq!(d.first_due, t0);
    assert!(s.get(&other).is_some_and(|t| t.state
        == TaskState::InFlight {
            due: d.due,
            removed: false
        }));
}

#[test]
fn an_enable_committed_while_a_poll_runs_keeps_the_task_off_the_queue_until_applied() {
    let mut s = Scheduler::new(fixed());
    let mut rng = SmallRng::seed_from_u64(1);
    let t0 = Timestamp(100 * SEC);
    s.place(k("a"), meta(10), None, t0, true);
    let d = s.pop_due(t0).expect("due");
    let rec = s.prepare_op(&k("a"), OperatorOp::Enable, t0).expect("enable");
    s.freeze(&k("a"));
    assert!(s.get(&k("a")).is_some_and(|t| t.frozen && t.is_in_flight()));
    s.complete(&d.key, &ok(1), t0, &mut rng);
    assert!(s.get(&k("a")).is_some_and(|t| t.frozen && t.is_queued()));
    assert_eq!(s.queue_len(), 0, "not queued while the action is committed");
    s.apply_op(&k("a"), OperatorOp::Enable, rec, t0);
    assert!(s.get(&k("a")).is_some_and(|t| !t.frozen && t.is_queued()));
    assert_eq!(s.queue_len(), 1);
}

#[test]
fn a_probe_that_finishes_while_an_enable_is_committed_keeps_its_result() {
    let mut settings = fixed();
    settings.failure.dead_letter_after = 1;
    let mut s = Scheduler::new(settings);
    let mut rng = SmallRng::seed_from_u64(1);
    let t0 = Timestamp(100 * SEC);
    s.place(k("a"), meta(10), None, t0, true);
    let d = s.pop_due(t0).expect("due");
    s.complete(&d.key, &fail(), t0, &mut rng);
    assert_eq!(s.dead_letters().len(), 1);
    s.take_dirty();

    // The recheck probe runs; an Enable is prepared and frozen meanwhile.
    let at = s.get(&k("a")).expect("task").rec.next_run;
    let probe = s.pop_due(at).expect("the recheck probe");
    let rec = s.prepare_op(&k("a"), OperatorOp::Enable, at).expect("enable");
    assert!(rec.dead_letter.is_some(), "prepared from the record before the probe");
    s.freeze(&k("a"));
    // The probe succeeds: the task leaves the dead-letter queue.
    s.complete(&probe.key, &ok(7), at, &mut rng);
    s.take_dirty();
    // The Enable's commit lands after it: the probe's result stays, and the
    // task is written again so the store does not keep the older record.
    s.apply_op(&k("a"), OperatorOp::Enable, rec, at);
    let t = s.get(&k("a")).expect("task");
    assert!(t.rec.dead_letter.is_none(), "the probe's recovery was kept");
    assert_eq!(t.rec.last_success, Some(at));
    assert!(s.dead_letters().is_empty());
    assert!(
        s.take_dirty()
            .0
            .iter()
            .any(|(key, r)| key == &k("a") && r.dead_letter.is_none()),
        "left for the group commit"
    );
}

#[test]
fn a_hold_parks_a_task_and_a_discard_wins_over_it() {
    let mut settings = fixed();
    settings.failure.dead_letter_after = 1;
    let mut s = Scheduler::new(settings);
    let mut rng = SmallRng::seed_from_u64(1);
    let t0 = Timestamp(100 * SEC);
    s.place(k("a"), meta(10), None, t0, true);
    let d = s.pop_due(t0).expect("due");
    s.complete(&d.key, &fail(), t0, &mut rng);
    assert_eq!(s.dead_letters().len(), 1);
    let held = TaskMeta {
        hold: Some(task::Hold::Profile),
        ..meta(10)
    };
    s.update_meta(&k("a"), held.clone(), t0);
    assert_eq!(
        s.get(&k("a")).map(|t| t.state),
        Some(TaskState::Parked(Parked::Held(task::Hold::Profile)))
    );
    s.operate(&k("a"), OperatorOp::Discard, t0).expect("discard");
    assert_eq!(
        s.get(&k("a")).map(|t| t.state),
        Some(TaskState::Parked(Parked::Discarded))
    );
    // The hold lifts: still discarded, still off the queue.
    s.update_meta(&k("a"), meta(10), t0);
    assert_eq!(
        s.get(&k("a")).map(|t| t.state),
        Some(TaskState::Parked(Parked::Discarded))
    );
    assert_eq!(s.queue_len(), 0);
    s.operate(&k("a"), OperatorOp::Enable, t0).expect("enable");
    assert_eq!(s.get(&k("a")).map(|t| t.state), Some(TaskState::QUEUED));
    assert_eq!(s.queue_len(), 1);
}

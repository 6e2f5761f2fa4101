use super::*;
use proptest::prelude::*;

const BUFFERING: u64 = 2_000;
const RETRY_LIMIT: u64 = 600_000;

/// Test-only constructor for states that would take too many calls to reach.
fn with(buffering_ms: u64, retry_limit_ms: u64, failures: u64, first: Option<u64>, dropped: u32) -> RetrySchedule {
    RetrySchedule {
        buffering_ms,
        retry_limit_ms,
        failures_since_success: failures,
        first_failure_ms: first,
        dropped_in_a_row: dropped,
    }
}

/// `n` failures, all at time `now`.
fn fail_n(mut state: RetrySchedule, n: u64, now: u64) -> RetrySchedule {
    for _ in 0..n {
        state = failed(state, now).state;
    }
    state
}

fn waits(buffering: u64, up_to_failures: u64) -> Vec<u64> {
    (0..=up_to_failures)
        .map(|n| interval(with(buffering, RETRY_LIMIT, n, Some(0), 0)))
        .collect()
}

#[test]
fn create_starts_clean_and_accessors_report_fields() {
    let s = create(1_234, 5_678);
    assert_eq!(s.buffering_ms(), 1_234);
    assert_eq!(s.retry_limit_ms(), 5_678);
    assert_eq!(s.failures(), 0);
    assert_eq!(s.first_failure_ms(), None);
    assert_eq!(s.dropped_in_a_row(), 0);
    assert_eq!(interval(s), 1_234);
}

#[test]
fn zero_and_one_failure_wait_the_buffering_time() {
    for buffering in [0, 1, 2_000, 5_000, 60_000, 90_000, u64::MAX] {
        let s = create(buffering, RETRY_LIMIT);
        assert_eq!(interval(s), buffering);
        assert_eq!(interval(failed(s, 0).state), buffering);
    }
}

#[test]
fn second_failure_waits_max_of_buffering_and_five_seconds_doubled_once() {
    for (buffering, expected) in [
        (0, 10_000),
        (2_000, 10_000),
        (5_000, 10_000),
        (7_000, 14_000),
        (40_000, 60_000),
        (90_000, 90_000),
    ] {
        assert_eq!(interval(fail_n(create(buffering, RETRY_LIMIT), 2, 0)), expected);
    }
}

#[test]
fn backoff_doubles_per_further_failure_up_to_the_cap() {
    assert_eq!(
        waits(2_000, 8),
        [2_000, 2_000, 10_000, 20_000, 40_000, 60_000, 60_000, 60_000, 60_000]
    );
    assert_eq!(
        waits(7_000, 7),
        [7_000, 7_000, 14_000, 28_000, 56_000, 60_000, 60_000, 60_000]
    );
    assert_eq!(waits(0, 6), [0, 0, 10_000, 20_000, 40_000, 60_000, 60_000]);
    assert_eq!(waits(30_000, 4), [30_000, 30_000, 60_000, 60_000, 60_000]);
}

#[test]
fn backoff_is_capped_at_one_minute() {
    for failures in [6, 7, 10, 63, 64, 65, 1_000, u64::from(u32::MAX) + 2, u64::MAX] {
        assert_eq!(interval(with(2_000, RETRY_LIMIT, failures, Some(0), 0)), MAX_BACKOFF_MS);
    }
    assert_eq!(waits(60_000, 5), [60_000; 6]);
}

#[test]
fn buffering_above_one_minute_wins_over_the_cap() {
    assert_eq!(waits(90_000, 10), [90_000; 11]);
    assert_eq!(interval(with(90_000, RETRY_LIMIT, u64::MAX, Some(0), 0)), 90_000);
    assert_eq!(interval(with(u64::MAX, RETRY_LIMIT, u64::MAX, Some(0), 0)), u64::MAX);
}

#[test]
fn many_failures_by_calls_never_overflow() {
    let mut s = create(2_000, u64::MAX);
    let mut now = 0u64;
    for i in 0..200u64 {
        let v = failed(s, now);
        assert!(!v.drop_batch, "failure {i} at {now} dropped with an unreachable limit");
        s = v.state;
        assert!(interval(s) <= MAX_BACKOFF_MS);
        now = now.saturating_add(interval(s));
    }
    assert_eq!(s.failures(), 200);
    assert_eq!(interval(s), MAX_BACKOFF_MS);
    assert_eq!(s.first_failure_ms(), Some(0));
}

#[test]
fn huge_failure_counts_saturate_and_never_overflow() {
    let billions = with(2_000, RETRY_LIMIT, 5_000_000_000, Some(0), 3);
    assert_eq!(interval(billions), MAX_BACKOFF_MS);
    let v = failed(billions, 1_000);
    assert_eq!(v.state.failures(), 5_000_000_001);
    assert!(!v.drop_batch);

    let max = with(2_000, RETRY_LIMIT, u64::MAX, Some(0), u32::MAX);
    let v = failed(max, u64::MAX);
    assert_eq!(v.state.failures(), u64::MAX);
    assert_eq!(v.state.dropped_in_a_row(), u32::MAX);
    assert!(v.drop_batch && v.drop_queue);
    assert_eq!(interval(v.state), MAX_BACKOFF_MS);

    // The doubling base times 2^62 / 2^63 would overflow without saturation.
    for failures in [62, 63, 64, 65, 66] {
        assert_eq!(
            interval(with(u64::MAX / 3, RETRY_LIMIT, failures, None, 0)),
            u64::MAX / 3
        );
    }
}

#[test]
fn extreme_times_and_limits_do_not_panic() {
    let v = failed(create(u64::MAX, u64::MAX), u64::MAX);
    assert!(v.drop_batch, "u64::MAX elapsed+wait saturates to u64::MAX >= limit");
    let v = failed(with(u64::MAX, u64::MAX, 1, Some(0), 0), u64::MAX);
    assert!(v.drop_batch);
    let v = failed(create(0, u64::MAX), u64::MAX);
    assert!(!v.drop_batch);
}

#[test]
fn first_failure_time_is_recorded_once_per_run() {
    let s = create(BUFFERING, RETRY_LIMIT);
    let v1 = failed(s, 1_000);
    assert_eq!(v1.state.first_failure_ms(), Some(1_000));
    assert_eq!(v1.state.failures(), 1);
    let v2 = failed(v1.state, 3_000);
    assert_eq!(v2.state.first_failure_ms(), Some(1_000));
    assert_eq!(v2.state.failures(), 2);
}

#[test]
fn batch_drops_exactly_when_elapsed_plus_wait_reaches_the_limit() {
    // First failure at 10_000; after the 2nd failure the wait is 10_000, so the 2nd failure drops the
    // batch from now - 10_000 + 10_000 >= 30_000, i.e. now >= 30_000.
    let one = failed(create(BUFFERING, 30_000), 10_000).state;
    let below = failed(one, 29_999);
    assert!(!below.drop_batch);
    assert_eq!(below.state.dropped_in_a_row(), 0);
    let at = failed(one, 30_000);
    assert!(at.drop_batch);
    assert!(!at.drop_queue);
    assert_eq!(at.state.dropped_in_a_row(), 1);
}

#[test]
fn first_failure_drops_when_buffering_reaches_the_limit() {
    assert!(failed(create(600_000, 600_000), 0).drop_batch);
    assert!(!failed(create(599_999, 600_000), 0).drop_batch);
}

#[test]
fn zero_retry_limit_drops_every_failing_batch_at_once() {
    let mut s = create(BUFFERING, 0);
    for i in 1..=25u32 {
        let v = failed(s, u64::from(i) * 1_000);
        assert!(v.drop_batch, "failure {i}");
        assert_eq!(v.drop_queue, i >= DROPS_BEFORE_QUEUE_DROP, "failure {i}");
        s = v.state;
    }
    // Even with zero buffering and after a success.
    let v = failed(succeeded(s), 0);
    assert!(v.drop_batch && !v.drop_queue);
    assert!(failed(create(0, 0), 0).drop_batch);
}

#[test]
fn clock_going_backwards_counts_as_no_elapsed_time() {
    let s = failed(create(BUFFERING, 20_000), 50_000).state;
    let v = failed(s, 0);
    assert!(!v.drop_batch, "elapsed 0 + wait 10_000 < 20_000");
    assert_eq!(v.state.first_failure_ms(), Some(50_000));
    let s = failed(create(BUFFERING, 10_000), 50_000).state;
    assert!(failed(s, 0).drop_batch, "elapsed 0 + wait 10_000 >= 10_000");
}

#[test]
fn ten_drops_in_a_row_drop_the_queue() {
    let mut s = create(BUFFERING, 0);
    for i in 1..DROPS_BEFORE_QUEUE_DROP {
        let v = failed(s, 0);
        assert!(v.drop_batch && !v.drop_queue, "drop {i}");
        s = v.state;
    }
    assert_eq!(s.dropped_in_a_row(), 9);
    let v = failed(s, 0);
    assert!(v.drop_batch && v.drop_queue);
    assert_eq!(v.state.dropped_in_a_row(), 10);
}

#[test]
fn choice_a_drop_keeps_failure_run_and_window() {
    // Default limits; drive to the first drop (see the simulation for the times).
    let s = with(BUFFERING, RETRY_LIMIT, 13, Some(0), 0);
    let v = failed(s, 552_000);
    assert!(v.drop_batch);
    assert_eq!(v.state.failures(), 14, "failure count kept");
    assert_eq!(v.state.first_failure_ms(), Some(0), "retry window not restarted");
    // The next batch gets a single attempt: it is dropped on its first failure.
    let next = failed(v.state, 552_000 + interval(v.state));
    assert!(next.drop_batch);
    assert_eq!(next.state.dropped_in_a_row(), 2);
}

#[test]
fn choice_b_every_drop_after_the_tenth_also_drops_the_queue() {
    let mut s = with(BUFFERING, 0, 0, None, DROPS_BEFORE_QUEUE_DROP - 1);
    for drop in 10..=15u32 {
        let v = failed(s, 0);
        assert!(v.drop_batch && v.drop_queue, "drop {drop}");
        assert_eq!(v.state.dropped_in_a_row(), drop, "counter not reset by a queue drop");
        s = v.state;
    }
    let saturated = failed(with(BUFFERING, 0, 0, None, u32::MAX), 0);
    assert!(saturated.drop_queue);
    assert_eq!(saturated.state.dropped_in_a_row(), u32::MAX);
}

#[test]
fn choice_c_interval_after_a_drop_is_the_ongoing_backoff() {
    // Batch drop with few failures: the wait is still the backoff for that count.
    let s = failed(failed(create(BUFFERING, 10_000), 0).state, 0);
    assert!(s.drop_batch && !s.drop_queue);
    assert_eq!(interval(s.state), 10_000);
    // Queue drop deep into a failure run: the capped backoff.
    let q = failed(with(BUFFERING, RETRY_LIMIT, 40, Some(0), 9), 1_000_000);
    assert!(q.drop_queue);
    assert_eq!(interval(q.state), MAX_BACKOFF_MS);
    // And a large buffering time still wins.
    let q = failed(with(90_000, 0, 40, Some(0), 9), 0);
    assert!(q.drop_queue);
    assert_eq!(interval(q.state), 90_000);
}

#[test]
fn success_resets_everything() {
    let s = with(BUFFERING, RETRY_LIMIT, 1_000, Some(42), 17);
    let r = succeeded(s);
    assert_eq!(r, create(BUFFERING, RETRY_LIMIT));
    assert_eq!(interval(r), BUFFERING);
    let v = failed(r, 10_000_000);
    assert!(!v.drop_batch && !v.drop_queue);
    assert_eq!(v.state.first_failure_ms(), Some(10_000_000));
    assert_eq!(v.state.failures(), 1);
}

/// A destination that always fails, default settings (buffering 2 s, retry limit 10 min).
///
/// Waits after the n-th failure: n=1 → 2 s, n=2 → max(2, 5)·2 = 10 s, n=3 → 20 s, n=4 → 40 s,
/// n≥5 → min(80, …) = 60 s. Attempts therefore happen at t = 0, 2, 12, 32, 72 s, then every 60 s:
/// the k-th attempt (k ≥ 5) is at 72 + 60·(k − 5) s. The first failure is at t = 0, so a batch is
/// dropped once t + 60 ≥ 600, i.e. t ≥ 540: the first such attempt is at 72 + 8·60 = 552 s.
/// The window is not restarted by the drop (choice (a)), so every following attempt (one per batch)
/// is dropped too: drops at 552, 612, …, and the 10th at 552 + 9·60 = 1092 s drops the queue —
/// the reference figures.
#[test]
fn always_failing_destination_matches_the_reference_figures() {
    let mut state = create(BUFFERING, RETRY_LIMIT);
    let mut t = 0u64;
    let mut first_batch_drop = None;
    let mut queue_drop = None;
    let mut attempts = Vec::new();
    while queue_drop.is_none() && t <= 3_600_000 {
        attempts.push(t);
        let v = failed(state, t);
        state = v.state;
        if v.drop_batch && first_batch_drop.is_none() {
            first_batch_drop = Some(t);
        }
        if v.drop_queue {
            queue_drop = Some(t);
        }
        t += interval(state);
    }
    assert_eq!(&attempts[..7], [0, 2_000, 12_000, 32_000, 72_000, 132_000, 192_000]);
    assert_eq!(first_batch_drop, Some(552_000));
    assert_eq!(queue_drop, Some(1_092_000));
    assert_eq!(state.dropped_in_a_row(), DROPS_BEFORE_QUEUE_DROP);
}

// ---- property tests ----

#[derive(Debug, Clone, Copy)]
enum Op {
    Fail(u64),
    Succeed,
}

fn buffering() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..=10_000, 0u64..=200_000, any::<u64>()]
}

fn retry_limit() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0u64..=1_000_000, any::<u64>()]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0u64..=2_000_000).prop_map(Op::Fail),
            1 => any::<u64>().prop_map(Op::Fail),
            1 => Just(Op::Succeed),
        ],
        0..80,
    )
}

fn arbitrary_state() -> impl Strategy<Value = RetrySchedule> {
    (
        buffering(),
        retry_limit(),
        prop_oneof![0u64..100, any::<u64>()],
        prop::option::of(any::<u64>()),
        any::<u32>(),
    )
        .prop_map(|(b, r, f, first, d)| with(b, r, f, first, d))
}

fn apply(state: RetrySchedule, op: Op) -> (RetrySchedule, Option<Verdict>) {
    match op {
        Op::Fail(now) => {
            let v = failed(state, now);
            (v.state, Some(v))
        }
        Op::Succeed => (succeeded(state), None),
    }
}

proptest! {
    #[test]
    fn interval_is_within_bounds(state in arbitrary_state()) {
        let wait = interval(state);
        prop_assert!(wait >= state.buffering_ms());
        prop_assert!(wait <= MAX_BACKOFF_MS.max(state.buffering_ms()));
    }

    #[test]
    fn reachable_states_keep_bounds_and_drop_queue_implies_drop_batch(
        b in buffering(), r in retry_limit(), ops in ops()
    ) {
        let mut s = create(b, r);
        for op in ops {
            let (next, verdict) = apply(s, op);
            if let Some(v) = verdict {
                prop_assert!(!v.drop_queue || v.drop_batch);
                prop_assert!(v.state.first_failure_ms().is_some());
                prop_assert_eq!(v.state.failures(), s.failures().saturating_add(1));
            }
            s = next;
            prop_assert!(interval(s) >= b);
            prop_assert!(interval(s) <= MAX_BACKOFF_MS.max(b));
        }
    }

    #[test]
    fn interval_never_decreases_over_consecutive_failures(
        start in arbitrary_state(), times in prop::collection::vec(any::<u64>(), 1..60)
    ) {
        let mut s = start;
        let mut previous = interval(s);
        for now in times {
            let v = failed(s, now);
            let wait = interval(v.state);
            prop_assert!(wait >= previous, "{} < {}", wait, previous);
            previous = wait;
            s = v.state;
        }
    }

    #[test]
    fn failures_within_one_window_only_grow_the_wait(
        b in buffering(), deltas in prop::collection::vec(0u64..120_000, 1..40)
    ) {
        // Time moves forward and the limit is never reached: one batch window.
        let mut s = create(b, u64::MAX);
        let mut now = 0u64;
        let mut previous = interval(s);
        for d in deltas {
            now = now.saturating_add(d);
            let v = failed(s, now);
            if b < u64::MAX / 2 {
                prop_assert!(!v.drop_batch);
            }
            prop_assert!(interval(v.state) >= previous);
            previous = interval(v.state);
            s = v.state;
        }
    }

    #[test]
    fn after_success_wait_is_buffering_and_next_failure_drops_only_if_limit_is_tiny(
        start in arbitrary_state(), now in any::<u64>()
    ) {
        let s = succeeded(start);
        prop_assert_eq!(s, create(start.buffering_ms(), start.retry_limit_ms()));
        prop_assert_eq!(interval(s), s.buffering_ms());
        let v = failed(s, now);
        let expected_drop = s.retry_limit_ms() == 0 || s.buffering_ms() >= s.retry_limit_ms();
        prop_assert_eq!(v.drop_batch, expected_drop);
        prop_assert!(!v.drop_queue);
        prop_assert_eq!(interval(v.state), s.buffering_ms());
    }

    #[test]
    fn identical_inputs_give_identical_outputs(b in buffering(), r in retry_limit(), ops in ops()) {
        let run = || {
            let mut s = create(b, r);
            let mut trace = Vec::new();
            for &op in &ops {
                let (next, verdict) = apply(s, op);
                trace.push((verdict, interval(next)));
                s = next;
            }
            (s, trace)
        };
        prop_assert_eq!(run(), run());
    }
}

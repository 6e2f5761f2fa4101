//! The core's rules on a fake clock: batching, pacing, drops, overflow,
//! reconfiguring, shutdown and the outbox window, with a property test that
//! every pushed line is accounted for exactly once.

use super::*;
use proptest::prelude::*;

fn limits(batch_size: usize, buffering_ms: u64, retry_limit_ms: u64, queue_limit: usize) -> Limits {
    Limits {
        batch_size,
        buffering: Duration::from_millis(buffering_ms),
        retry_limit: Duration::from_millis(retry_limit_ms),
        queue_limit,
    }
}

fn line(n: u64) -> String {
    format!("{{\"n\":{n}}}\n")
}

fn num(line: &str) -> u64 {
    line.trim_end()
        .trim_start_matches("{\"n\":")
        .trim_end_matches('}')
        .parse()
        .expect("a test line")
}

fn nums(b: &Batch) -> Vec<u64> {
    b.lines.iter().map(|l| num(l)).collect()
}

fn t(ms: u64) -> Timestamp {
    Timestamp(ms)
}

fn push_n(core: &mut SinkCore, range: std::ops::Range<u64>, now: u64) {
    for n in range {
        core.push(line(n), t(now));
    }
}

#[track_caller]
fn send(core: &mut SinkCore, now: u64) -> Batch {
    match core.next(t(now)) {
        Next::Send(b) => b,
        other => panic!("expected a batch at {now}, got {other:?}"),
    }
}

fn fail() -> Outcome {
    Outcome::Retryable("HTTP 503 Service Unavailable".into())
}

#[test]
fn batches_by_size() {
    let mut core = SinkCore::new(limits(3, 2000, 600_000, 100));
    assert!(core.push(line(0), t(0)), "first line wakes the driver");
    assert!(!core.push(line(1), t(0)));
    assert_eq!(core.next(t(0)), Next::WaitUntil(t(2000)));
    assert!(core.push(line(2), t(0)), "a full batch wakes the driver");
    push_n(&mut core, 3..7, 0);
    let b = send(&mut core, 0);
    assert_eq!(nums(&b), [0, 1, 2]);
    assert_eq!(b.attempt, 1);
    assert_eq!(core.next(t(0)), Next::Idle, "one batch in flight at a time");
    assert_eq!(core.on_sent(b.id, Outcome::Ok, t(1)), Settled::Delivered(3));
    let b = send(&mut core, 1);
    assert_eq!(nums(&b), [3, 4, 5]);
    core.on_sent(b.id, Outcome::Ok, t(2));
    // The last line waits for the buffering time from its own push.
    assert_eq!(core.next(t(2)), Next::WaitUntil(t(2000)));
    let b = send(&mut core, 2000);
    assert_eq!(nums(&b), [6]);
    core.on_sent(b.id, Outcome::Ok, t(2001));
    assert_eq!(core.next(t(2001)), Next::Idle);
    assert_eq!(core.counters().sent, 7);
    assert_eq!(core.batches(), Batches { ok: 3, failed: 0 });
    assert_eq!(core.depth(), 0);
}

#[test]
fn batches_by_time_from_the_oldest_line() {
    let mut core = SinkCore::new(limits(1000, 2000, 600_000, 100));
    assert_eq!(core.next(t(0)), Next::Idle);
    core.push(line(0), t(100));
    core.push(line(1), t(1500));
    assert_eq!(core.next(t(100)), Next::WaitUntil(t(2100)));
    assert_eq!(core.next(t(2099)), Next::WaitUntil(t(2100)));
    let b = send(&mut core, 2100);
    assert_eq!(nums(&b), [0, 1]);
    core.push(line(2), t(2200));
    assert_eq!(core.next(t(2200)), Next::Idle, "in flight");
    core.on_sent(b.id, Outcome::Ok, t(2300));
    assert_eq!(core.next(t(2300)), Next::WaitUntil(t(4200)));
}

#[test]
fn stale_or_unknown_outcomes_are_ignored() {
    let mut core = SinkCore::new(limits(1, 10, 600_000, 100));
    core.push(line(0), t(0));
    let b = send(&mut core, 0);
    assert_eq!(core.on_sent(b.id + 1, Outcome::Ok, t(1)), Settled::Ignored);
    assert_eq!(core.on_sent(b.id, Outcome::Ok, t(1)), Settled::Delivered(1));
    assert_eq!(
        core.on_sent(b.id, Outcome::Ok, t(1)),
        Settled::Ignored,
        "never counted twice"
    );
    assert_eq!(core.counters().sent, 1);
}

/// Buffering 2 s: the first retry 2 s after the failure, then 10, 20,
/// 40 s, then every 60 s (Serilog's figures in REFERENCE §3).
#[test]
fn retry_pacing_follows_the_schedule() {
    let mut core = SinkCore::new(limits(1000, 2000, 600_000, 100_000));
    push_n(&mut core, 0..5, 0);
    assert_eq!(core.next(t(0)), Next::WaitUntil(t(2000)));
    let first = send(&mut core, 2000);
    let mut now = 2000;
    let mut times = vec![];
    for wait in [2000, 10_000, 20_000, 40_000, 60_000, 60_000, 60_000] {
        let s = core.on_sent(first.id, fail(), t(now));
        assert_eq!(
            s,
            Settled::WillRetry {
                at: t(now + wait),
                failures: times.len() as u64 + 1
            }
        );
        assert_eq!(core.status().retry_wait_ms, wait);
        assert_eq!(core.status().next_attempt_at, Some(t(now + wait)));
        assert_eq!(core.next(t(now + wait - 1)), Next::WaitUntil(t(now + wait)));
        // New lines neither wake nor hurry a retry.
        core.push(line(100 + times.len() as u64), t(now + 1));
        now += wait;
        let b = send(&mut core, now);
        assert_eq!(b.id, first.id, "retried as it was");
        assert_eq!(b.lines, first.lines);
        assert_eq!(b.attempt, times.len() as u32 + 2);
        times.push(now);
    }
    assert_eq!(times, [4000, 14_000, 34_000, 74_000, 134_000, 194_000, 254_000]);
    assert_eq!(core.status().consecutive_failures, 7);
    core.on_sent(first.id, Outcome::Ok, t(now));
    let st = core.status();
    assert_eq!(st.consecutive_failures, 0);
    assert_eq!(st.retry_wait_ms, 0);
    assert_eq!(st.next_attempt_at, None);
    assert_eq!(st.last_success_at, Some(t(254_000)));
    assert_eq!(st.last_failure_at, Some(t(194_000)));
    assert_eq!(st.last_error.as_deref(), Some("HTTP 503 Service Unavailable"));
    // The backlog is old enough to go at once after the recovery.
    let b = send(&mut core, now);
    assert_eq!(nums(&b), (100..107).collect::<Vec<_>>());
    assert_eq!(core.counters().sent, 5);
    assert_eq!(core.batches(), Batches { ok: 1, failed: 7 });
}

/// A short buffering time still backs off from 5 s from the second
/// failure.
#[test]
fn short_buffering_backs_off_from_five_seconds() {
    let mut core = SinkCore::new(limits(10, 20, 600_000, 100));
    core.push(line(0), t(0));
    let b = send(&mut core, 20);
    let mut now = 20;
    for wait in [20, 10_000, 20_000, 40_000, 60_000] {
        core.on_sent(b.id, fail(), t(now));
        assert_eq!(core.next(t(now)), Next::WaitUntil(t(now + wait)));
        now += wait;
        send(&mut core, now);
    }
}

#[test]
fn a_batch_is_dropped_at_the_retry_limit_and_the_next_waits_the_interval() {
    // Defaults: the first batch drops at 552 s after its first failure.
    let mut core = SinkCore::new(limits(1000, 2000, 600_000, 100_000));
    core.push(line(0), t(0));
    let b = send(&mut core, 2000);
    let mut now = 0; // relative to the first failure, shifted below
    let base = 2000;
    loop {
        match core.on_sent(b.id, fail(), t(base + now)) {
            Settled::WillRetry { at, .. } => {
                now = at.0 - base;
                assert_eq!(send(&mut core, base + now).id, b.id);
            }
            Settled::Dropped { events, queue, .. } => {
                assert_eq!((events, queue), (1, 0));
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(now, 552_000);
    assert_eq!(core.counters().dropped_batch, 1);
    assert_eq!(core.depth(), 0);
    // A new batch waits for the interval after the failure, not just the
    // buffering time.
    core.push(line(1), t(base + now + 1));
    assert_eq!(core.next(t(base + now + 1)), Next::WaitUntil(t(base + now + 60_000)));
    let b2 = send(&mut core, base + now + 60_000);
    assert_eq!(nums(&b2), [1]);
    // The first failure time is kept: the next failing batch drops at its
    // first failure.
    assert_eq!(
        core.on_sent(b2.id, fail(), t(base + now + 60_000)),
        Settled::Dropped {
            events: 1,
            queue: 0,
            kept: 0
        }
    );
}

#[test]
fn ten_dropped_batches_drop_the_queue() {
    // retry_limit 0: every failing batch is dropped at once.
    let mut core = SinkCore::new(limits(2, 10, 0, 1000));
    push_n(&mut core, 0..40, 0);
    let mut now = 0;
    for i in 0..9 {
        let b = send(&mut core, now);
        assert_eq!(nums(&b), [2 * i, 2 * i + 1]);
        assert_eq!(
            core.on_sent(b.id, fail(), t(now)),
            Settled::Dropped {
                events: 2,
                queue: 0,
                kept: 0
            }
        );
        now = core.status().next_attempt_at.expect("gated").0;
    }
    assert_eq!(core.depth(), 22);
    let b = send(&mut core, now);
    assert_eq!(nums(&b), [18, 19]);
    assert_eq!(
        core.on_sent(b.id, fail(), t(now)),
        Settled::Dropped {
            events: 2,
            queue: 20,
            kept: 0
        }
    );
    assert_eq!(core.depth(), 0);
    let c = core.counters();
    assert_eq!((c.dropped_batch, c.dropped_queue, c.sent), (20, 20, 0));
    assert_eq!(core.batches().failed, 10);
    // From then on every failure drops the queue too.
    now = core.status().next_attempt_at.expect("gated").0;
    push_n(&mut core, 40..45, now);
    let b = send(&mut core, now + 10);
    assert_eq!(nums(&b), [40, 41]);
    assert_eq!(
        core.on_sent(b.id, fail(), t(now + 10)),
        Settled::Dropped {
            events: 2,
            queue: 3,
            kept: 0
        }
    );
    // A success resets everything.
    now = core.status().next_attempt_at.expect("gated").0;
    push_n(&mut core, 45..50, now);
    let b = send(&mut core, now + 10);
    core.on_sent(b.id, Outcome::Ok, t(now + 10));
    let b = send(&mut core, now + 10);
    assert_eq!(
        core.on_sent(b.id, fail(), t(now + 10)),
        Settled::Dropped {
            events: 2,
            queue: 0,
            kept: 0
        }
    );
}

#[test]
fn overflow_drops_the_oldest() {
    let mut core = SinkCore::new(limits(100, 1000, 600_000, 3));
    push_n(&mut core, 0..5, 0);
    assert_eq!(core.counters().overflow, 2);
    assert_eq!(core.depth(), 3);
    let b = send(&mut core, 1000);
    assert_eq!(nums(&b), [2, 3, 4]);
    // The batch taken out does not count against the limit.
    push_n(&mut core, 5..9, 1000);
    assert_eq!(core.counters().overflow, 3);
    assert_eq!(core.depth(), 6);
    assert_eq!(core.queued(), 3);
}

#[test]
fn rejected_batches_are_dropped_without_touching_the_schedule() {
    let mut core = SinkCore::new(limits(2, 2000, 600_000, 100));
    push_n(&mut core, 0..6, 0);
    let b = send(&mut core, 0);
    assert_eq!(
        core.on_sent(b.id, Outcome::Rejected("HTTP 400 Bad Request".into()), t(5)),
        Settled::Rejected { events: 2, kept: 0 }
    );
    let st = core.status();
    assert_eq!((st.consecutive_failures, st.next_attempt_at), (0, None));
    assert_eq!(st.last_error.as_deref(), Some("HTTP 400 Bad Request"));
    // The next batch flows at once.
    let b = send(&mut core, 5);
    assert_eq!(nums(&b), [2, 3]);
    // After a retryable failure, a rejection of the retry keeps the gate.
    core.on_sent(b.id, fail(), t(10));
    assert_eq!(core.next(t(10)), Next::WaitUntil(t(2010)));
    let b = send(&mut core, 2010);
    assert_eq!(nums(&b), [2, 3]);
    core.on_sent(b.id, Outcome::Rejected("HTTP 413 Payload Too Large".into()), t(2020));
    assert_eq!(core.status().consecutive_failures, 1);
    assert_eq!(core.status().next_attempt_at, Some(t(2010)), "gate kept");
    assert_eq!(nums(&send(&mut core, 2020)), [4, 5]);
    let c = core.counters();
    assert_eq!((c.rejected, c.sent, c.dropped_batch), (4, 0, 0));
    assert_eq!(core.batches(), Batches { ok: 0, failed: 3 });
}

#[test]
fn reconfigure_truncates_the_queue_and_resets_the_schedule() {
    let mut core = SinkCore::new(limits(2, 2000, 600_000, 100));
    push_n(&mut core, 0..10, 0);
    let b = send(&mut core, 0);
    core.on_sent(b.id, fail(), t(0));
    assert_eq!(core.next(t(0)), Next::WaitUntil(t(2000)));
    core.reconfigure(limits(5, 50, 600_000, 3));
    assert_eq!(core.counters().overflow, 5, "8 queued cut to 3, oldest first");
    assert_eq!(core.status().consecutive_failures, 0);
    // The pending batch is retried at once, as it was.
    let r = send(&mut core, 1);
    assert_eq!((r.id, nums(&r)), (b.id, vec![0, 1]));
    core.on_sent(r.id, Outcome::Ok, t(1));
    // Then the remaining lines, on the new buffering time.
    assert_eq!(core.next(t(1)), Next::WaitUntil(t(50)));
    assert_eq!(nums(&send(&mut core, 50)), [7, 8, 9]);
    assert_eq!(core.limits().batch_size, 5);
}

#[test]
fn degenerate_limits_are_clamped() {
    let mut core = SinkCore::new(limits(0, 10, 0, 0));
    core.push(line(0), t(0));
    core.push(line(1), t(0));
    assert_eq!(core.counters().overflow, 1);
    assert_eq!(nums(&send(&mut core, 0)), [1]);
}

#[test]
fn drain_for_shutdown_ignores_timing_and_starts_with_the_pending_batch() {
    let mut core = SinkCore::new(limits(2, 60_000, 600_000, 100));
    push_n(&mut core, 0..7, 0);
    let b = send(&mut core, 0);
    core.on_sent(b.id, fail(), t(0));
    assert_eq!(core.next(t(1)), Next::WaitUntil(t(60_000)));
    let mut sent = vec![];
    while let Some(b) = core.drain_for_shutdown() {
        assert_eq!(core.drain_for_shutdown(), None, "one at a time");
        sent.extend(nums(&b));
        core.on_sent(b.id, Outcome::Ok, t(2));
    }
    assert_eq!(sent, (0..7).collect::<Vec<_>>());
    assert_eq!(core.counters().sent, 7);
}

#[test]
fn abandoned_and_discarded_batches() {
    let mut core = SinkCore::new(limits(2, 10, 600_000, 100));
    push_n(&mut core, 0..3, 0);
    let b = send(&mut core, 0);
    assert!(core.in_flight());
    core.abandon_in_flight();
    assert!(!core.in_flight());
    assert_eq!(core.on_sent(b.id, Outcome::Ok, t(1)), Settled::Ignored, "late outcome");
    let again = core.drain_for_shutdown().expect("the same batch");
    assert_eq!((again.id, again.attempt), (b.id, 2));
    assert_eq!(core.discard_all(), 3);
    assert_eq!(core.on_sent(b.id, Outcome::Ok, t(2)), Settled::Ignored);
    assert_eq!(core.counters().dropped_queue, 3);
    assert_eq!(core.depth(), 0);
}

/// Read everything the fake outbox `rows` holds past the window.
fn load(core: &mut SinkCore, rows: &[(u64, String)], now: u64) {
    while let Some(read) = core.outbox_wanted() {
        let page: Vec<(u64, String)> = rows
            .iter()
            .filter(|(s, _)| *s > read.after)
            .take(read.limit)
            .cloned()
            .collect();
        let seen = page.last().map_or(read.after, |(s, _)| *s);
        core.outbox_loaded(read, page, seen, t(now));
    }
}

fn change_rows(range: std::ops::Range<u64>) -> Vec<(u64, String)> {
    range.map(|n| (n + 1, line(1000 + n))).collect()
}

#[test]
fn change_lines_go_first_and_carry_their_sequences() {
    let mut core = SinkCore::new(limits(4, 100, 600_000, 100));
    push_n(&mut core, 0..3, 0);
    let rows = change_rows(0..2);
    assert!(core.outbox_committed());
    load(&mut core, &rows, 5);
    assert_eq!(core.depth(), 5);
    let b = send(&mut core, 100);
    assert_eq!(nums(&b), [1000, 1001, 0, 1]);
    assert_eq!(&b.seqs[..], [1, 2]);
    assert_eq!(core.on_sent(b.id, Outcome::Ok, t(100)), Settled::Delivered(4));
    assert_eq!(core.outbox_read(), 2);
    assert_eq!(core.outbox_wanted(), None, "nothing new committed");
    assert!(core.outbox_committed());
    assert_eq!(core.outbox_wanted(), Some(OutboxRead { after: 2, limit: 100 }));
}

#[test]
fn dropped_and_rejected_batches_give_their_change_lines_back() {
    // retry_limit 0: the first failure drops a batch.
    let mut core = SinkCore::new(limits(10, 10, 0, 100));
    push_n(&mut core, 0..2, 0);
    core.outbox_committed();
    load(&mut core, &change_rows(0..2), 0);
    let b = send(&mut core, 10);
    assert_eq!(
        core.on_sent(b.id, fail(), t(10)),
        Settled::Dropped {
            events: 2,
            queue: 0,
            kept: 2
        }
    );
    assert_eq!(core.counters().dropped_batch, 2, "the poll lines only");
    let at = core.status().next_attempt_at.expect("paced").0;
    let again = send(&mut core, at);
    assert_eq!(nums(&again), [1000, 1001], "the same change lines, as they were");
    assert_eq!(&again.seqs[..], [1, 2]);
    // A rejection: paced like a failure, kept.
    assert_eq!(
        core.on_sent(again.id, Outcome::Rejected("HTTP 400".into()), t(at)),
        Settled::Rejected { events: 0, kept: 2 }
    );
    let next = core.status().next_attempt_at.expect("paced after a rejection").0;
    assert!(next > at);
    assert_eq!(core.next(t(at)), Next::WaitUntil(t(next)));
    let third = send(&mut core, next);
    assert_eq!(&third.seqs[..], [1, 2]);
    core.on_sent(third.id, Outcome::Ok, t(next));
    assert_eq!(core.counters().sent, 2);
    assert_eq!((core.counters().rejected, core.depth()), (0, 0));
}

#[test]
fn ten_drops_drop_the_poll_queue_but_never_the_change_lines() {
    let mut core = SinkCore::new(limits(1, 10, 0, 1000));
    push_n(&mut core, 0..30, 0);
    core.outbox_committed();
    load(&mut core, &change_rows(0..1), 0);
    let mut now = 0;
    for _ in 0..12 {
        let b = send(&mut core, now);
        core.on_sent(b.id, fail(), t(now));
        now = core.status().next_attempt_at.expect("gated").0;
    }
    assert_eq!(core.queued(), 0, "the poll queue is gone");
    assert_eq!(core.outbox_held(), 1, "the change line is not");
    let b = send(&mut core, now);
    assert_eq!(&b.seqs[..], [1]);
}

#[test]
fn a_smaller_queue_limit_returns_the_newest_change_lines_to_the_outbox() {
    let mut core = SinkCore::new(limits(10, 10, 600_000, 5));
    let rows = change_rows(0..8);
    core.outbox_committed();
    load(&mut core, &rows, 0);
    assert_eq!(core.outbox_held(), 5, "a page is at most queue_limit");
    core.reconfigure(limits(10, 10, 600_000, 2));
    assert_eq!((core.outbox_held(), core.outbox_read()), (2, 2));
    assert_eq!(core.counters().overflow, 0, "nothing lost: they are still stored");
    let mut delivered = vec![];
    for _ in 0..10 {
        load(&mut core, &rows, 0);
        if let Next::Send(b) = core.next(t(1000)) {
            delivered.extend(b.seqs.iter().copied());
            core.on_sent(b.id, Outcome::Ok, t(1000));
        }
    }
    assert_eq!(delivered, (1..=8).collect::<Vec<_>>());
}

#[test]
fn an_outdated_page_is_read_again() {
    let mut core = SinkCore::new(limits(10, 10, 600_000, 5));
    core.outbox_committed();
    let read = core.outbox_wanted().expect("a read");
    core.outbox_loaded(read, change_rows(0..2), 2, t(0));
    // A page for the same read again (e.g. a retry) changes nothing.
    core.outbox_loaded(read, change_rows(0..2), 2, t(0));
    assert_eq!(core.outbox_held(), 2);
    assert!(core.outbox_wanted().is_some(), "asked again");
}

#[test]
fn disabling_forgets_the_window_and_reads_the_outbox_from_the_start() {
    let mut core = SinkCore::new(limits(10, 10, 600_000, 5));
    push_n(&mut core, 0..2, 0);
    core.outbox_committed();
    load(&mut core, &change_rows(0..3), 0);
    assert_eq!(core.discard_all(), 2, "poll lines counted");
    assert_eq!(core.counters().dropped_queue, 2);
    assert_eq!(core.outbox_wanted(), Some(OutboxRead { after: 0, limit: 5 }));
}

#[derive(Debug, Clone)]
enum Op {
    Push(u8),
    Advance(u32),
    Step,
    Ok,
    Retry,
    Reject,
    Reconfigure(usize, u64, u64, usize),
    Shutdown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..5).prop_map(Op::Push),
        3 => (0u32..70_000).prop_map(Op::Advance),
        4 => Just(Op::Step),
        3 => Just(Op::Ok),
        3 => Just(Op::Retry),
        1 => Just(Op::Reject),
        1 => (1usize..6, 10u64..3000, 0u64..200_000, 1usize..12)
            .prop_map(|(b, f, r, q)| Op::Reconfigure(b, f, r, q)),
        1 => Just(Op::Shutdown),
    ]
}

proptest! {
    /// Every pushed line is sent exactly once or counted as dropped,
    /// overflowed or rejected (or is still held), and sent lines arrive
    /// in push order.
    #[test]
    fn lines_are_conserved_and_ordered(
        batch_size in 1usize..6,
        buffering in 10u64..3000,
        retry_limit in 0u64..200_000,
        queue_limit in 1usize..12,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let mut core = SinkCore::new(limits(batch_size, buffering, retry_limit, queue_limit));
        let mut now = 0u64;
        let mut pushed = 0u64;
        let mut in_flight: Option<Batch> = None;
        let mut delivered: Vec<u64> = vec![];
        let mut last_ready_id = 0;
        for op in ops {
            match op {
                Op::Push(k) => for _ in 0..k {
                    core.push(line(pushed), t(now));
                    pushed += 1;
                },
                Op::Advance(ms) => now += u64::from(ms),
                Op::Step => match core.next(t(now)) {
                    Next::Send(b) => {
                        prop_assert!(in_flight.is_none());
                        prop_assert!(b.id >= last_ready_id);
                        last_ready_id = b.id;
                        prop_assert!(!b.lines.is_empty());
                        in_flight = Some(b);
                    }
                    Next::WaitUntil(at) => prop_assert!(at > t(now)),
                    Next::Idle => prop_assert!(in_flight.is_some() || core.queued() == 0),
                },
                Op::Ok | Op::Retry | Op::Reject => if let Some(b) = in_flight.take() {
                    let outcome = match op {
                        Op::Ok => Outcome::Ok,
                        Op::Retry => fail(),
                        _ => Outcome::Rejected("HTTP 400".into()),
                    };
                    let ok = outcome == Outcome::Ok;
                    let settled = core.on_sent(b.id, outcome, t(now));
                    prop_assert_ne!(settled, Settled::Ignored);
                    if ok {
                        delivered.extend(nums(&b));
                    }
                },
                Op::Reconfigure(b, f, r, q) => core.reconfigure(limits(b, f, r, q)),
                Op::Shutdown => if in_flight.is_none() {
                    while let Some(b) = core.drain_for_shutdown() {
                        delivered.extend(nums(&b));
                        core.on_sent(b.id, Outcome::Ok, t(now));
                    }
                    prop_assert_eq!(core.depth(), 0);
                },
            }
            let c = core.counters();
            prop_assert_eq!(c.sent, delivered.len() as u64);
            prop_assert_eq!(
                c.sent + c.dropped_batch + c.dropped_queue + c.overflow + c.rejected + core.depth() as u64,
                pushed
            );
            prop_assert!(core.queued() <= core.limits().queue_limit);
        }
        prop_assert!(delivered.windows(2).all(|w| w[0] < w[1]), "in order, no duplicates: {:?}", delivered);
    }

    /// Change lines are never lost: whatever happens (failures, drops,
    /// rejections, smaller limits), every committed row is delivered
    /// exactly once in this model (no crash), in commit order, and a
    /// row is deleted only after a 2xx for a batch holding it.
    #[test]
    fn change_lines_are_delivered_in_order_and_deleted_only_after_a_2xx(
        batch_size in 1usize..6,
        retry_limit in 0u64..100_000,
        queue_limit in 1usize..8,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut core = SinkCore::new(limits(batch_size, 50, retry_limit, queue_limit));
        let mut table: std::collections::BTreeMap<u64, String> = Default::default();
        let mut committed = 0u64;
        let mut now = 0u64;
        let mut in_flight: Option<Batch> = None;
        let mut delivered: Vec<u64> = vec![];
        let mut largest = 0usize;
        let load = |core: &mut SinkCore, table: &std::collections::BTreeMap<u64, String>, now: u64| {
            if let Some(read) = core.outbox_wanted() {
                let page: Vec<(u64, String)> = table
                    .range(read.after + 1..)
                    .take(read.limit)
                    .map(|(s, l)| (*s, l.clone()))
                    .collect();
                let seen = page.last().map_or(read.after, |(s, _)| *s);
                core.outbox_loaded(read, page, seen, t(now));
            }
        };
        for op in ops {
            match op {
                // Odd pushes are poll lines, even ones commit change rows.
                Op::Push(k) if k % 2 == 1 => {
                    core.push(line(10_000 + now), t(now));
                }
                Op::Push(k) => {
                    for _ in 0..k {
                        committed += 1;
                        table.insert(committed, line(committed));
                    }
                    core.outbox_committed();
                }
                Op::Advance(ms) => now += u64::from(ms),
                Op::Step | Op::Shutdown => {
                    load(&mut core, &table, now);
                    if in_flight.is_none()
                        && let Next::Send(b) = core.next(t(now))
                    {
                        for s in b.seqs.iter() {
                            prop_assert!(table.contains_key(s), "row {} sent after its deletion", s);
                        }
                        in_flight = Some(b);
                    }
                }
                Op::Ok | Op::Retry | Op::Reject => if let Some(b) = in_flight.take() {
                    let outcome = match op {
                        Op::Ok => Outcome::Ok,
                        Op::Retry => fail(),
                        _ => Outcome::Rejected("HTTP 400".into()),
                    };
                    let ok = outcome == Outcome::Ok;
                    core.on_sent(b.id, outcome, t(now));
                    if ok {
                        for s in b.seqs.iter() {
                            table.remove(s);
                            delivered.push(*s);
                        }
                    }
                },
                Op::Reconfigure(b, _, r, q) => core.reconfigure(limits(b, 50, r, q)),
            }
            // Memory stays bounded: the window by `queue_limit` plus a
            // batch given back, the pending batch by its size.
            if let Some(b) = &in_flight {
                largest = largest.max(b.lines.len());
            }
            prop_assert!(core.outbox_held() <= core.limits().queue_limit + 2 * largest);
        }
        // The receiver comes back: everything left goes out.
        if let Some(b) = in_flight.take() {
            core.on_sent(b.id, Outcome::Ok, t(now));
            for s in b.seqs.iter() {
                table.remove(s);
                delivered.push(*s);
            }
        }
        for _ in 0..10_000 {
            if table.is_empty() {
                break;
            }
            now += 70_000;
            load(&mut core, &table, now);
            if let Next::Send(b) = core.next(t(now)) {
                core.on_sent(b.id, Outcome::Ok, t(now));
                for s in b.seqs.iter() {
                    table.remove(s);
                    delivered.push(*s);
                }
            }
        }
        prop_assert!(table.is_empty(), "left in the outbox: {:?}", table.keys().collect::<Vec<_>>());
        prop_assert_eq!(delivered, (1..=committed).collect::<Vec<_>>());
    }
}

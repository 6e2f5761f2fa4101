//! The rules for one task: what a dispatch, a success and a failure do to its
//! breaker, backoff, dead-letter state and next run (§2, §3).
//!
//! Timeline with defaults for a task that keeps failing transiently:
//! failure 1 → retry ≈ 5 s (closed); 2 → ≈ 10 s; 3 → `open`, `retry_at` ≈
//! 20 s; at `retry_at` it turns `half_open` and one probe runs; 4 → `open`,
//! ≈ 40 s; 5 → dead-letter queue, recheck 30 min later, the breaker stays
//! `open` with `retry_at` = the recheck time. Any permanent failure goes to
//! the dead-letter queue at once. A success resets the streak, closes the
//! breaker and returns the task to its normal interval. A 429 is a rate
//! signal: it never advances the streak nor touches the breaker.

use super::{backoff, interval};
use crate::model::{
    AdaptiveSettings, BreakerState, DeadLetterReason, DeadLetterRecord, ErrorCategory, FailureSettings, PollError,
    TaskRecord, Timestamp,
};
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;

/// What the scheduler knows about a task besides its stored record.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskMeta {
    pub type_name: Arc<str>,
    pub priority: u8,
    /// The planned interval: the solver's interval for the task's group in
    /// its pool, or (unbudgeted) the group's floor or pin.
    pub planned: Duration,
    /// The budget pool whose token bucket the task draws from.
    pub pool: Option<Arc<str>>,
    /// Requests one execution costs (a fan-out costs one per item).
    pub cost: f64,
    /// Why the plan keeps the task off the schedule for now, if it does.
    pub hold: Option<Hold>,
}

impl TaskMeta {
    /// An unbudgeted task of cost 1 that is not held.
    pub fn new(type_name: &str, priority: u8, planned: Duration) -> Self {
        TaskMeta {
            type_name: Arc::from(type_name),
            priority,
            planned,
            pool: None,
            cost: 1.0,
            hold: None,
        }
    }
}

/// Why a configured task is not polled right now. A held task keeps its
/// state and returns to its cadence when the hold lifts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hold {
    /// Its pool is over budget even at every group's cap, and its group is
    /// one of the priority 3–4 groups shed to fit.
    Shed,
    /// The scheduler profile leaves its priority out.
    Profile,
    /// Its `enabled_when` shape count is zero or not known yet, or it fans
    /// out over items not learned yet.
    Shape,
}

impl Hold {
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::Shed => "shed",
            Hold::Profile => "profile",
            Hold::Shape => "shape",
        }
    }
}

/// How the dead-letter queue changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterMove {
    Entered(DeadLetterReason),
    /// A recheck probe failed: the task stays, with a new recheck time.
    Rechecked,
    Left,
}

/// What one event did, for logs, metrics and the sink.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transition {
    pub breaker: Option<(BreakerState, BreakerState)>,
    pub dead_letter: Option<DeadLetterMove>,
    /// A successful poll whose digest differed from the previous one.
    pub changed: bool,
    /// The task's instance was in a maintenance window when the poll
    /// finished.
    pub maintenance: bool,
}

impl Transition {
    /// A dead-letter entry or exit must be committed before it is shown.
    pub fn must_commit(&self) -> bool {
        matches!(
            self.dead_letter,
            Some(DeadLetterMove::Entered(_) | DeadLetterMove::Left)
        )
    }
}

/// The interval the task is on now, for staleness and offsets.
pub fn current_interval(rec: &TaskRecord, meta: &TaskMeta, s: &AdaptiveSettings) -> Duration {
    if s.enabled && rec.interval_ms > 0 {
        Duration::from_millis(rec.interval_ms).max(meta.planned)
    } else if s.enabled {
        s.base_interval.max(meta.planned)
    } else {
        meta.planned
    }
}

/// The breaker state to report at `now`: an open breaker whose retry window
/// has elapsed is half-open (its probe is due), except in the dead-letter
/// queue, where the breaker stays open until the recheck succeeds.
pub fn breaker_at(rec: &TaskRecord, now: Timestamp) -> BreakerState {
    if rec.breaker == BreakerState::Open && rec.dead_letter.is_none() && rec.retry_at.is_some_and(|t| t <= now) {
        BreakerState::HalfOpen
    } else {
        rec.breaker
    }
}

/// Operator retry of a dead-lettered task: one probe, due `now`. The task
/// leaves the queue only if that probe succeeds. Returns false if the task
/// is not dead-lettered.
pub fn retry_now(rec: &mut TaskRecord, now: Timestamp) -> bool {
    let Some(dl) = rec.dead_letter.as_mut() else {
        return false;
    };
    dl.next_recheck = now;
    rec.retry_at = Some(now);
    rec.next_run = now;
    true
}

/// Operator discard of a dead-lettered task: out of the queue, and disabled
/// until enabled again. Returns false if the task is not dead-lettered.
pub fn discard(rec: &mut TaskRecord) -> bool {
    if rec.dead_letter.take().is_none() {
        return false;
    }
    rec.disabled = true;
    rec.breaker = BreakerState::Closed;
    rec.retry_at = None;
    true
}

/// The task is being dispatched at `now`: an open breaker whose window has
/// elapsed lets this one probe through as `half_open`.
pub fn on_dispatch(rec: &mut TaskRecord, now: Timestamp) -> Option<(BreakerState, BreakerState)> {
    rec.last_attempt = Some(now);
    if rec.breaker == BreakerState::Open && rec.dead_letter.is_none() && rec.retry_at.is_none_or(|t| t <= now) {
        rec.breaker = BreakerState::HalfOpen;
        return Some((BreakerState::Open, BreakerState::HalfOpen));
    }
    None
}

/// A successful poll. `due` is the time the task was scheduled for: the next
/// run is `due + interval`, so poll latency never pushes the cadence out.
pub fn on_success<R: Rng + ?Sized>(
    rec: &mut TaskRecord,
    meta: &TaskMeta,
    digest: u64,
    due: Timestamp,
    now: Timestamp,
    s: &AdaptiveSettings,
    rng: &mut R,
) -> Transition {
    let mut t = Transition {
        changed: rec.digest != Some(digest),
        ..Transition::default()
    };
    if t.changed {
        rec.idle_streak = 0;
        rec.last_change = Some(now);
    } else {
        rec.idle_streak = rec.idle_streak.saturating_add(1);
    }
    rec.digest = Some(digest);
    rec.last_success = Some(now);
    rec.last_error = None;
    if rec.breaker != BreakerState::Closed {
        t.breaker = Some((rec.breaker, BreakerState::Closed));
    }
    if rec.dead_letter.take().is_some() {
        t.dead_letter = Some(DeadLetterMove::Left);
    }
    rec.failures = 0;
    rec.breaker = BreakerState::Closed;
    rec.retry_at = None;
    rec.backoff_delay_ms = 0;
    let step = interval::on_success(
        t.changed,
        rec.idle_streak,
        rec.interval_ms,
        meta.priority,
        meta.planned,
        s,
        rng,
    );
    if s.enabled {
        rec.interval_ms = step.smoothed_ms;
    }
    rec.next_run = due.plus(step.interval).max(now);
    t
}

/// A failed poll.
pub fn on_failure<R: Rng + ?Sized>(
    rec: &mut TaskRecord,
    err: &PollError,
    now: Timestamp,
    s: &FailureSettings,
    rng: &mut R,
) -> Transition {
    on_failure_in(rec, err, now, s, rng, false)
}

/// A failed poll, `in_maintenance` when the task's instance is in a
/// maintenance window: then the streak, backoff and breaker move as ever,
/// but the failure never moves the task to the dead-letter queue (a task
/// already there is rechecked as ever). The streak is kept, so a task that
/// still fails after the window closes is dead-lettered at its next
/// failure.
pub fn on_failure_in<R: Rng + ?Sized>(
    rec: &mut TaskRecord,
    err: &PollError,
    now: Timestamp,
    s: &FailureSettings,
    rng: &mut R,
    in_maintenance: bool,
) -> Transition {
    let mut t = Transition {
        maintenance: in_maintenance,
        ..Transition::default()
    };
    let before = rec.breaker;
    rec.last_error = Some(err.clone());

    if err.is_rate_limited() {
        // A rate signal, not a fault: the streak, breaker and dead-letter
        // state stay as they were; only the next attempt moves.
        let wait = err
            .retry_after
            .unwrap_or_else(|| backoff::delay(rec.failures.max(1), s, rng));
        let at = now.plus(wait);
        if let Some(dl) = rec.dead_letter.as_mut() {
            dl.next_recheck = at;
            rec.retry_at = Some(at);
        } else if rec.breaker == BreakerState::HalfOpen {
            rec.breaker = BreakerState::Open;
            rec.retry_at = Some(at);
        }
        rec.next_run = at;
        if rec.breaker != before {
            t.breaker = Some((before, rec.breaker));
        }
        return t;
    }

    rec.failures = rec.failures.saturating_add(1);
    let delay = backoff::delay(rec.failures, s, rng);
    rec.backoff_delay_ms = delay.as_millis() as u64;

    if let Some(dl) = rec.dead_letter.as_mut() {
        dl.rechecks = dl.rechecks.saturating_add(1);
        dl.next_recheck = now.plus(s.dead_letter_recheck);
        rec.breaker = BreakerState::Open;
        rec.retry_at = Some(dl.next_recheck);
        rec.next_run = dl.next_recheck;
        t.dead_letter = Some(DeadLetterMove::Rechecked);
    } else if !in_maintenance && (err.category == ErrorCategory::Permanent || rec.failures >= s.dead_letter_after) {
        let reason = if err.category == ErrorCategory::Permanent {
            DeadLetterReason::PermanentFailure
        } else {
            DeadLetterReason::MaxRetryAttempts
        };
        let recheck = now.plus(s.dead_letter_recheck);
        rec.dead_letter = Some(DeadLetterRecord {
            reason,
            since: now,
            next_recheck: recheck,
            rechecks: 0,
        });
        rec.breaker = BreakerState::Open;
        rec.retry_at = Some(recheck);
        rec.next_run = recheck;
        t.dead_letter = Some(DeadLetterMove::Entered(reason));
    } else if rec.failures >= s.breaker_threshold {
        rec.breaker = BreakerState::Open;
        rec.retry_at = Some(now.plus(delay));
        rec.next_run = now.plus(delay);
    } else {
        rec.breaker = BreakerState::Closed;
        rec.retry_at = None;
        rec.next_run = now.plus(delay);
    }
    if rec.breaker != before {
        t.breaker = Some((before, rec.breaker));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorKind;
    use crate::model::random::SmallRng;
    use rand::SeedableRng;

    fn meta() -> TaskMeta {
        TaskMeta::new("http", 3, Duration::from_secs(5))
    }
    fn transient() -> PollError {
        PollError::new(ErrorCategory::Transient, ErrorKind::Timeout, "timed out")
    }
    fn permanent() -> PollError {
        let mut e = PollError::new(ErrorCategory::Permanent, ErrorKind::Http, "HTTP 401 Unauthorized");
        e.status = Some(401);
        e
    }
    fn no_jitter() -> FailureSettings {
        FailureSettings {
            backoff_jitter: 0.0,
            ..FailureSettings::default()
        }
    }
    const SEC: u64 = 1000;

    #[test]
    fn the_spec_timeline_for_a_task_that_keeps_failing() {
        let s = no_jitter();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut r = TaskRecord::default();
        let mut now = Timestamp(1_000 * SEC);

        // failure 1 → ≈ 5 s, closed
        on_dispatch(&mut r, now);
        let t = on_failure(&mut r, &transient(), now, &s, &mut rng);
        assert_eq!(
            (r.failures, r.breaker, r.next_run),
            (1, BreakerState::Closed, now.plus(Duration::from_secs(5)))
        );
        assert_eq!(t, Transition::default());

        // failure 2 → ≈ 10 s, closed
        now = r.next_run;
        on_dispatch(&mut r, now);
        on_failure(&mut r, &transient(), now, &s, &mut rng);
        assert_eq!((r.failures, r.breaker), (2, BreakerState::Closed));
        assert_eq!(r.next_run, now.plus(Duration::from_secs(10)));

        // failure 3 → open, retryAt ≈ 20 s
        now = r.next_run;
        on_dispatch(&mut r, now);
        let t = on_failure(&mut r, &transient(), now, &s, &mut rng);
        assert_eq!(r.breaker, BreakerState::Open);
        assert_eq!(r.retry_at, Some(now.plus(Duration::from_secs(20))));
        assert_eq!(t.breaker, Some((BreakerState::Closed, BreakerState::Open)));

        // at retryAt: half_open, one probe; failure 4 → open, ≈ 40 s
        now = r.retry_at.unwrap_or_default();
        assert_eq!(
            on_dispatch(&mut r, now),
            Some((BreakerState::Open, BreakerState::HalfOpen))
        );
        let t = on_failure(&mut r, &transient(), now, &s, &mut rng);
        assert_eq!(r.breaker, BreakerState::Open);
        assert_eq!(r.retry_at, Some(now.plus(Duration::from_secs(40))));
        assert_eq!(t.breaker, Some((BreakerState::HalfOpen, BreakerState::Open)));

        // failure 5 → dead-letter, recheck 30 min, breaker open with retryAt = recheck
        now = r.retry_at.unwrap_or_default();
        on_dispatch(&mut r, now);
        let t = on_failure(&mut r, &transient(), now, &s, &mut rng);
        let recheck = now.plus(Duration::from_secs(1800));
        assert_eq!(
            t.dead_letter,
            Some(DeadLetterMove::Entered(DeadLetterReason::MaxRetryAttempts))
        );
        assert!(t.must_commit());
        assert_eq!(r.dead_letter.as_ref().map(|d| d.next_recheck), Some(recheck));
        assert_eq!(
            (r.breaker, r.retry_at, r.next_run),
            (BreakerState::Open, Some(recheck), recheck)
        );

        // a failed recheck keeps it there for another 30 min
        now = recheck;
        assert_eq!(
            on_dispatch(&mut r, now),
            None,
            "a dead-letter recheck is not a half-open probe"
        );
        let t = on_failure(&mut r, &transient(), now, &s, &mut rng);
        assert_eq!(t.dead_letter, Some(DeadLetterMove::Rechecked));
        assert!(!t.must_commit());
        assert_eq!(r.failures, 6);
        assert_eq!(r.next_run, now.plus(Duration::from_secs(1800)));

        // a successful recheck leaves the queue and closes the breaker
        now = r.next_run;
        on_dispatch(&mut r, now);
        let t = on_success(&mut r, &meta(), 7, now, now, &AdaptiveSettings::default(), &mut rng);
        assert_eq!(t.dead_letter, Some(DeadLetterMove::Left));
        assert_eq!(t.breaker, Some((BreakerState::Open, BreakerState::Closed)));
        assert_eq!(
            (r.failures, r.breaker, r.retry_at, r.dead_letter.is_none()),
            (0, BreakerState::Closed, None, true)
        );
    }

    #[test]
    fn no_failure_in_a_maintenance_window_dead_letters_and_the_breaker_still_opens() {
        let mut rng = SmallRng::seed_from_u64(1);
        let s = no_jitter();
        let mut r = TaskRecord::default();
        for n in 1..=(s.dead_letter_after + 3) {
            let t = on_failure_in(&mut r, &permanent(), Timestamp(n as u64 * 1000), &s, &mut rng, true);
            assert_eq!(t.dead_letter, None, "failure {n}");
            assert!(t.maintenance);
            assert!(r.dead_letter.is_none());
        }
        assert_eq!(r.breaker, BreakerState::Open, "the breaker still protects the target");
        assert_eq!(r.failures, s.dead_letter_after + 3);
        // The window closed; the target still fails: dead-lettered at once.
        let t = on_failure(&mut r, &transient(), Timestamp(60_000), &s, &mut rng);
        assert!(matches!(t.dead_letter, Some(DeadLetterMove::Entered(_))), "{t:?}");
        assert!(!t.maintenance);
    }

    #[test]
    fn a_permanent_failure_dead_letters_at_once() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut r = TaskRecord::default();
        let now = Timestamp(5 * SEC);
        let t = on_failure(&mut r, &permanent(), now, &no_jitter(), &mut rng);
        assert_eq!(
            t.dead_letter,
            Some(DeadLetterMove::Entered(DeadLetterReason::PermanentFailure))
        );
        assert_eq!(r.failures, 1);
        assert_eq!(r.last_error.as_ref().and_then(|e| e.status), Some(401));
    }

    #[test]
    fn rate_limits_never_advance_the_streak() {
        let mut rng = SmallRng::seed_from_u64(1);
        let s = no_jitter();
        let mut r = TaskRecord::default();
        let now = Timestamp(5 * SEC);
        on_failure(&mut r, &transient(), now, &s, &mut rng);
        on_failure(&mut r, &transient(), now, &s, &mut rng);
        let mut e = PollError::new(ErrorCategory::Transient, ErrorKind::RateLimited, "HTTP 429");
        e.retry_after = Some(Duration::from_secs(7));
        for _ in 0..20 {
            let t = on_failure(&mut r, &e, now, &s, &mut rng);
            assert_eq!(t, Transition::default());
        }
        assert_eq!((r.failures, r.breaker), (2, BreakerState::Closed));
        assert_eq!(r.next_run, now.plus(Duration::from_secs(7)));
        // without Retry-After: its current backoff delay
        e.retry_after = None;
        on_failure(&mut r, &e, now, &s, &mut rng);
        assert_eq!(r.next_run, now.plus(Duration::from_secs(10)));
    }

    #[test]
    fn a_rate_limited_half_open_probe_returns_to_open() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut r = TaskRecord {
            breaker: BreakerState::Open,
            failures: 3,
            retry_at: Some(Timestamp(10)),
            ..TaskRecord::default()
        };
        on_dispatch(&mut r, Timestamp(10));
        assert_eq!(r.breaker, BreakerState::HalfOpen);
        let mut e = PollError::new(ErrorCategory::Transient, ErrorKind::RateLimited, "HTTP 429");
        e.retry_after = Some(Duration::from_secs(3));
        on_failure(&mut r, &e, Timestamp(10), &no_jitter(), &mut rng);
        assert_eq!(
            (r.breaker, r.failures, r.retry_at),
            (BreakerState::Open, 3, Some(Timestamp(3010)))
        );
    }

    #[test]
    fn success_keeps_cadence_from_the_due_time_not_the_finish_time() {
        let mut rng = SmallRng::seed_from_u64(1);
        let s = AdaptiveSettings {
            enabled: false,
            ..AdaptiveSettings::default()
        };
        let mut r = TaskRecord::default();
        let due = Timestamp(100 * SEC);
        // the poll took 3 s
        on_success(&mut r, &meta(), 1, due, due.plus(Duration::from_secs(3)), &s, &mut rng);
        assert_eq!(r.next_run, due.plus(Duration::from_secs(5)));
        // but a poll that overran its whole interval is not scheduled in the past
        let late = due.plus(Duration::from_secs(60));
        on_success(&mut r, &meta(), 1, due, late, &s, &mut rng);
        assert_eq!(r.next_run, late);
    }

    #[test]
    fn change_detection_drives_the_idle_streak() {
        let mut rng = SmallRng::seed_from_u64(1);
        let s = AdaptiveSettings::default();
        let mut r = TaskRecord::default();
        let now = Timestamp(SEC);
        assert!(on_success(&mut r, &meta(), 1, now, now, &s, &mut rng).changed);
        assert!(!on_success(&mut r, &meta(), 1, now, now, &s, &mut rng).changed);
        assert!(!on_success(&mut r, &meta(), 1, now, now, &s, &mut rng).changed);
        assert_eq!(r.idle_streak, 2);
        assert!(on_success(&mut r, &meta(), 2, now, now, &s, &mut rng).changed);
        assert_eq!((r.idle_streak, r.last_change), (0, Some(now)));
    }

    #[test]
    fn success_after_failures_resets_everything() {
        let mut rng = SmallRng::seed_from_u64(1);
        let s = no_jitter();
        let mut r = TaskRecord::default();
        let now = Timestamp(SEC);
        for _ in 0..3 {
            on_failure(&mut r, &transient(), now, &s, &mut rng);
        }
        assert_eq!(r.breaker, BreakerState::Open);
        let at = r.retry_at.unwrap_or_default();
        on_dispatch(&mut r, at);
        let t = on_success(&mut r, &meta(), 9, now, now, &AdaptiveSettings::default(), &mut rng);
        assert_eq!(t.breaker, Some((BreakerState::HalfOpen, BreakerState::Closed)));
        assert_eq!(
            (r.failures, r.backoff_delay_ms, r.retry_at, r.last_error.is_none()),
            (0, 0, None, true)
        );
    }
}

//! Retry schedule of the event sink (SPEC §5): how long to wait before the next delivery attempt, and
//! when to give up on a batch or on the whole queue.
//!
//! Pure functions over a small `Copy` state: no clock, no I/O, no randomness. The caller passes the
//! current time (`now_ms`) in. Every time is in milliseconds (`u64`). Nothing here panics, and all
//! arithmetic saturates, so huge failure counts, huge buffering times or a clock that goes backwards are
//! all harmless.
//!
//! # Rules
//!
//! 1. With at most one failure since the last success, the wait is the buffering time.
//! 2. From the second consecutive failure, the wait starts from `max(buffering, MIN_BACKOFF_MS)` and
//!    doubles per further failure (the second failure being the first further one), capped at
//!    [`MAX_BACKOFF_MS`], and is never shorter than the buffering time:
//!    `max(buffering, min(MAX_BACKOFF_MS, max(buffering, MIN_BACKOFF_MS) * 2^(failures - 1)))`.
//!    So with a 2 s buffering time the waits after 1, 2, 3, … failures are 2, 10, 20, 40, 60, 60, … s —
//!    the reference schedule ("retries at 2, 10, 20, 40, then every 60 s"). A buffering time above one
//!    minute wins over the cap.
//! 3. A failure at `now` records the first failure time of the current run of failures (a run ends only
//!    with a success); the batch is dropped when `now - first + wait >= retry_limit`, where `wait` is the
//!    interval that would follow this failure. A retry limit of zero drops every failing batch at once.
//! 4. [`DROPS_BEFORE_QUEUE_DROP`] (ten) batches dropped in a row drop the whole queue; a success resets
//!    everything.
//!
//! # Choices the rules leave open
//!
//! (a) **A dropped batch does not reset the failure run.** After a drop, both the first-failure time and
//! the failure count are kept; only a success clears them. The destination is still failing, so the
//! backoff keeps its (capped) length instead of hammering it again from 2 s, and the retry-limit window
//! stays spent: once the destination has been failing for the whole retry limit, each later batch is tried
//! exactly once and dropped if that attempt fails. This is what Serilog 4.1+ does and the only choice that
//! reproduces its figures for a destination that is always down (defaults 2 s / 10 min): first batch
//! dropped at 552 s, queue dropped at 1092 s = 552 s + 9 × 60 s. A fresh window per batch (first reset,
//! count kept) would drop one batch every 10 min and the queue only after about 5950 s; resetting both
//! would take about 5580 s. Neither bounds the backlog of a dead destination in a time an operator expects.
//!
//! (b) **After the queue is dropped, the drop counter is not reset.** "Ten batches dropped in a row"
//! stays true for the 11th, 12th, … drop (the last ten drops are still in a row), so every later dropped
//! batch also drops the queue: after ten drops the sink gets out of the way and drains everything on each
//! failed attempt, until a success resets the schedule. The counter saturates at `u32::MAX`.
//!
//! (c) **A drop does not change the wait.** [`interval`] depends only on the failure count and the
//! buffering time, so right after a batch drop or a queue drop it is still the backoff of the ongoing
//! failure run (in practice the 60 s cap, or the buffering time if larger). The next batch's single
//! attempt therefore comes one backoff later, not after the bare buffering time.
//!
//! Further details: if `now` is earlier than the recorded first failure (clock stepped back), the elapsed
//! time counts as zero and the first-failure time is kept.
//!
//! With the defaults and a destination that is always down, attempts come at 0, 2, 12, 32, 72 s and then
//! every 60 s: the first batch is dropped at 552 s and the queue at 1092 s, the reference figures.

/// The smallest backoff from the second consecutive failure on (unless the buffering time is larger).
pub const MIN_BACKOFF_MS: u64 = 5_000;
/// The cap of the doubling backoff; a buffering time above it still wins.
pub const MAX_BACKOFF_MS: u64 = 60_000;
/// Batches dropped in a row (since the last success) from which every dropped batch drops the queue too.
pub const DROPS_BEFORE_QUEUE_DROP: u32 = 10;

/// The state of the retry schedule. Build it with [`create`]; advance it with [`failed`] and
/// [`succeeded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    buffering_ms: u64,
    retry_limit_ms: u64,
    failures_since_success: u64,
    first_failure_ms: Option<u64>,
    dropped_in_a_row: u32,
}

/// What [`failed`] decided: the new state, whether to drop the failed batch, and whether to drop the
/// whole queue too (`drop_queue` implies `drop_batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub state: RetrySchedule,
    pub drop_batch: bool,
    pub drop_queue: bool,
}

impl RetrySchedule {
    /// Failures since the last success (saturating).
    pub fn failures(&self) -> u64 {
        self.failures_since_success
    }

    /// Time of the first failure of the current run of failures, `None` right after a success.
    pub fn first_failure_ms(&self) -> Option<u64> {
        self.first_failure_ms
    }

    /// Batches dropped since the last success (saturating; not reset by a queue drop).
    pub fn dropped_in_a_row(&self) -> u32 {
        self.dropped_in_a_row
    }

    /// The buffering time: the wait between attempts while delivery works.
    pub fn buffering_ms(&self) -> u64 {
        self.buffering_ms
    }

    /// How long a run of failures may keep retrying before batches are dropped.
    pub fn retry_limit_ms(&self) -> u64 {
        self.retry_limit_ms
    }
}

/// A fresh schedule: no failures, nothing dropped.
pub fn create(buffering_ms: u64, retry_limit_ms: u64) -> RetrySchedule {
    RetrySchedule {
        buffering_ms,
        retry_limit_ms,
        failures_since_success: 0,
        first_failure_ms: None,
        dropped_in_a_row: 0,
    }
}

/// Records a successful delivery: resets the failure count, the first-failure time and the drop counter.
pub fn succeeded(state: RetrySchedule) -> RetrySchedule {
    create(state.buffering_ms, state.retry_limit_ms)
}

/// Records one failed delivery attempt at `now_ms` and decides whether to drop the batch and the queue.
pub fn failed(state: RetrySchedule, now_ms: u64) -> Verdict {
    let mut next = state;
    next.failures_since_success = state.failures_since_success.saturating_add(1);
    let first = *next.first_failure_ms.get_or_insert(now_ms);
    let elapsed = now_ms.saturating_sub(first);
    let drop_batch = elapsed.saturating_add(interval(next)) >= next.retry_limit_ms;
    if drop_batch {
        next.dropped_in_a_row = next.dropped_in_a_row.saturating_add(1);
    }
    let drop_queue = drop_batch && next.dropped_in_a_row >= DROPS_BEFORE_QUEUE_DROP;
    Verdict {
        state: next,
        drop_batch,
        drop_queue,
    }
}

/// How long to wait before the next attempt, given the state.
pub fn interval(state: RetrySchedule) -> u64 {
    let buffering = state.buffering_ms;
    if state.failures_since_success <= 1 {
        return buffering;
    }
    let base = buffering.max(MIN_BACKOFF_MS);
    // The second failure is the first "further" one: the base doubled once.
    let doublings = state.failures_since_success - 1;
    // 2^doublings, or "too big" (None) from 2^64 on; the product saturates.
    let factor = u32::try_from(doublings).ok().and_then(|d| 1u64.checked_shl(d));
    let backed_off = factor.map_or(u64::MAX, |f| base.saturating_mul(f));
    backed_off.min(MAX_BACKOFF_MS).max(buffering)
}

#[cfg(test)]
mod tests;

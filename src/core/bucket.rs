//! Token bucket for one budget pool, kept in GCRA form (generic cell rate algorithm) with reservations.
//!
//! Purpose: decide *when* the next request of a pool may be sent so that the pool never exceeds its rate
//! budget, while still allowing a burst from an idle (full) bucket.
//!
//! Rules:
//! - The module is pure: no clock reads, no I/O, no randomness. Time comes in as [`Timestamp`] arguments.
//! - Emission interval `T = 1000 / rate` ms per request (cost 1). A full bucket lets `burst` requests go at
//!   once; after that requests are spaced by `T` (a request of cost `c` uses `c * T`).
//! - State is a single theoretical arrival time (TAT, ms as `f64`, relative to an integer origin so that
//!   `f64` keeps sub-microsecond precision even with epoch-sized timestamps). A request of cost `c` may go
//!   at `s` when `TAT + c·T − burst·T ≤ s` (the bucket has room for it); it then moves the TAT to
//!   `max(TAT, s) + c·T`. A cost larger than the burst waits for a full bucket and then goes into debt, so
//!   later callers wait longer.
//! - [`TokenBucket::reserve`] always succeeds and takes the capacity at once: it hands out a send time and
//!   the next caller is scheduled after it (FIFO: send times never go backwards in call order).
//! - Returned times are never before `now`, never before an active pause, and are rounded UP to a whole
//!   millisecond; the TAT advances from the rounded time, so rounding never lets the rate be exceeded. A
//!   value within 1 µs above a whole ms is snapped down to it first, so `f64` noise (e.g. `3 × 333.33…`)
//!   does not cost a whole extra millisecond. Consequence: when `(burst − cost)·T < 1 ms` (e.g. burst 1 and
//!   a non-integer `T`) a saturated bucket spaces requests by `ceil(c·T)`, slightly under the rate (3 rps
//!   with burst 1 runs at 1000/334 ≈ 2.994 rps); no whole-ms schedule can do better without exceeding the
//!   rate in some window. With burst ≥ 2 and `T` ≥ 1 ms the long-run rate is exact.
//! - A rate ≤ 0, below [`MIN_RATE_RPS`], or non-finite is treated as [`MIN_RATE_RPS`]; a burst of 0 is
//!   treated as 1; a negative or NaN cost is treated as 0. Conversions to `u64` ms saturate: nothing here
//!   panics, divides by zero or overflows.
//! - [`TokenBucket::pause_until`] (a Retry-After) forbids sending before `until` and restarts the bucket
//!   EMPTY of burst at `until`: one request may go at `until`, the following ones at the steady rate, so a
//!   pause never ends in a thundering herd. A pause never shortens an existing one.
//! - [`TokenBucket::set_rate`] (AIMD) keeps the time already taken by reservations handed out (they are not
//!   revisited, and new ones queue after them) and keeps the accrued burst capacity as the same number of
//!   requests (no burst gift on a rate rise, no penalty on a rate cut); only the spacing of what comes next
//!   changes.

use crate::model::Timestamp;

/// Smallest rate the bucket works with; anything lower, non-finite or ≤ 0 is raised to this.
pub const MIN_RATE_RPS: f64 = 0.001;

/// A computed send time at most this far (ms) past a whole millisecond is taken as that millisecond.
const SNAP_MS: f64 = 1e-3;

/// Token bucket of one budget pool. See the module documentation for the rules.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    /// Requests per second (sanitised, ≥ [`MIN_RATE_RPS`]).
    rate: f64,
    /// Requests that may go at once from a full bucket (≥ 1).
    burst: u32,
    /// Integer origin (epoch ms) that `tat` is relative to; set at construction.
    origin: u64,
    /// Theoretical arrival time, ms after `origin`. `tat ≤ now` means the bucket is full.
    tat: f64,
    /// Nothing may be sent before this (never shortened).
    paused_until: Option<Timestamp>,
    /// Latest send time handed out so far (FIFO guard: later reservations never get an earlier time).
    last_send: Timestamp,
    /// Requests sent since [`Self::take_sent`] last read them (what the pool really sent, for AIMD).
    sent: f64,
}

fn sanitize_rate(rate_rps: f64) -> f64 {
    if rate_rps.is_finite() && rate_rps >= MIN_RATE_RPS {
        rate_rps
    } else {
        MIN_RATE_RPS
    }
}

fn sanitize_cost(cost: f64) -> f64 {
    // `NaN > 0.0` is false, so NaN becomes 0 as well.
    if cost > 0.0 { cost } else { 0.0 }
}

impl TokenBucket {
    /// A bucket that starts full: `burst` requests may go at `now`.
    pub fn new(rate_rps: f64, burst: u32, now: Timestamp) -> Self {
        TokenBucket {
            rate: sanitize_rate(rate_rps),
            burst: burst.max(1),
            origin: now.0,
            // Full since forever: even a `now` before the origin (clock stepped back) may send at once.
            tat: f64::NEG_INFINITY,
            paused_until: None,
            last_send: Timestamp(0),
            sent: 0.0,
        }
    }

    /// A request of `cost` went (dispatched, whether or not it waited for a slot).
    pub fn count_sent(&mut self, cost: f64) {
        self.sent += sanitize_cost(cost);
    }

    /// The requests sent since the last call.
    pub fn take_sent(&mut self) -> f64 {
        std::mem::take(&mut self.sent)
    }

    /// Current rate in requests per second (after sanitising).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Burst size in requests (after sanitising: at least 1).
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Emission interval `T` in ms per unit of cost.
    fn interval_ms(&self) -> f64 {
        1000.0 / self.rate
    }

    /// `t` as ms after the origin. Exact while both fit in 53 bits (any realistic epoch-ms value).
    fn rel(&self, t: Timestamp) -> f64 {
        t.0 as f64 - self.origin as f64
    }

    /// The relative time `x` rounded up to a whole ms, as an absolute timestamp (saturating at both ends).
    fn abs_ceil(&self, x: f64) -> Timestamp {
        let ceil = (x - SNAP_MS).ceil();
        // `as i128` saturates (and maps NaN to 0); i128 holds u64 ± any such value without overflow.
        let abs = (self.origin as i128).saturating_add(ceil as i128);
        Timestamp(abs.clamp(0, u64::MAX as i128) as u64)
    }

    /// Earliest time a request of (sanitised) cost `cost` may go, given the current state.
    fn earliest(&self, now: Timestamp, cost: f64) -> Timestamp {
        let t = self.interval_ms();
        let b = f64::from(self.burst);
        // Room for `cost` once TAT − (burst − cost)·T has passed; a cost above the burst waits for a full
        // bucket (TAT itself) and then goes into debt.
        let conform = self.tat - (b - cost.min(b)) * t;
        let mut send = self.abs_ceil(conform).max(now).max(self.last_send);
        if let Some(p) = self.paused_until {
            send = send.max(p);
        }
        send
    }

    /// Reserve `cost` requests (cost ≥ 0; fractional allowed; cost larger than the burst allowed — the
    /// bucket goes into debt and later callers wait longer). Returns the earliest time the caller may send:
    /// `now` when capacity is available, later otherwise. Always succeeds; the capacity is taken at once
    /// (a reservation), so two callers never get the same slot.
    pub fn reserve(&mut self, now: Timestamp, cost: f64) -> Timestamp {
        let cost = sanitize_cost(cost);
        let send = self.earliest(now, cost);
        let send_rel = self.rel(send);
        self.tat = self.tat.max(send_rel) + cost * self.interval_ms();
        self.last_send = send;
        send
    }

    /// When a request of `cost` could go without waiting, without reserving (what [`Self::reserve`] would
    /// return now).
    pub fn available_at(&self, now: Timestamp, cost: f64) -> Timestamp {
        self.earliest(now, sanitize_cost(cost))
    }

    /// Change the rate (AIMD). Reservations already handed out are not revisited: the time they occupy
    /// (the part of the TAT beyond one full burst) is kept as is, so new reservations queue after them at
    /// the new spacing. The accrued capacity (the part within one burst) is kept as the same number of
    /// requests at the new rate: no burst gift, no penalty.
    pub fn set_rate(&mut self, rate_rps: f64, now: Timestamp) {
        let new_rate = sanitize_rate(rate_rps);
        let old_t = self.interval_ms();
        let new_t = 1000.0 / new_rate;
        let now_rel = self.rel(now);
        let ahead = (self.tat - now_rel).max(0.0);
        let burst_span = f64::from(self.burst) * old_t;
        let used_requests = ahead.min(burst_span) / old_t;
        let handed_out_ms = (ahead - burst_span).max(0.0);
        self.tat = now_rel + handed_out_ms + used_requests * new_t;
        self.rate = new_rate;
    }

    /// Nothing may be sent before `until` (a Retry-After). After it, the bucket restarts EMPTY of burst:
    /// one request may go at `until`, the following ones at the steady rate, not as a burst (so a pause does
    /// not end in a thundering herd). A pause never shortens an existing one, and the bucket is never made
    /// fuller than it is (debt already taken stays).
    pub fn pause_until(&mut self, until: Timestamp) {
        let until = match self.paused_until {
            Some(p) if p > until => p,
            _ => until,
        };
        self.paused_until = Some(until);
        // Empty but for the one request the server invited at `until`: TAT = until + (burst − 1)·T.
        let empty = self.rel(until) + f64::from(self.burst - 1) * self.interval_ms();
        self.tat = self.tat.max(empty);
    }

    /// `Some(until)` while `now < until` of the current pause, else `None`.
    pub fn paused_until(&self, now: Timestamp) -> Option<Timestamp> {
        self.paused_until.filter(|&p| now < p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A realistic epoch-ms start, so the tests also exercise `f64` precision at that magnitude.
    const T0: u64 = 1_700_000_000_000;

    fn ts(ms: u64) -> Timestamp {
        Timestamp(T0 + ms)
    }

    #[test]
    fn full_bucket_admits_burst_at_once_then_spaces_by_interval() {
        let mut b = TokenBucket::new(10.0, 3, ts(0));
        let sends: Vec<u64> = (0..6).map(|_| b.reserve(ts(0), 1.0).0 - T0).collect();
        assert_eq!(sends, vec![0, 0, 0, 100, 200, 300]);
    }

    #[test]
    fn idle_bucket_refills_to_burst_but_not_beyond() {
        let mut b = TokenBucket::new(10.0, 2, ts(0));
        b.reserve(ts(0), 1.0);
        b.reserve(ts(0), 1.0);
        // Long idle: full again, but only `burst` go at once.
        let sends: Vec<u64> = (0..4).map(|_| b.reserve(ts(10_000), 1.0).0 - T0).collect();
        assert_eq!(sends, vec![10_000, 10_000, 10_100, 10_200]);
    }

    #[test]
    fn non_integer_interval_rounds_up() {
        // T = 333.33… ms. With burst ≥ 2 the ms rounding costs nothing in the long run: sends at ceil(k·T)
        // after the initial burst (and f64 noise at 1000.000… does not push 1000 to 1001).
        let mut b = TokenBucket::new(3.0, 2, ts(0));
        let sends: Vec<u64> = (0..7).map(|_| b.reserve(ts(0), 1.0).0 - T0).collect();
        assert_eq!(sends, vec![0, 0, 334, 667, 1000, 1334, 1667]);
        // With burst 1 no whole-ms schedule can run at exactly 3 rps without some 333 ms gap (which would
        // exceed the rate), so each gap is ceil(T) = 334 ms: the rate is never exceeded, at a tiny loss.
        let mut b = TokenBucket::new(3.0, 1, ts(0));
        let sends: Vec<u64> = (0..4).map(|_| b.reserve(ts(0), 1.0).0 - T0).collect();
        assert_eq!(sends, vec![0, 334, 668, 1002]);
    }

    #[test]
    fn fractional_costs() {
        let mut b = TokenBucket::new(10.0, 1, ts(0));
        // Four quarter-requests fill one request's worth: all go at once.
        for _ in 0..4 {
            assert_eq!(b.reserve(ts(0), 0.25), ts(0));
        }
        // The bucket is now empty: the next quarter waits T/4 = 25 ms.
        assert_eq!(b.reserve(ts(0), 0.25), ts(25));
        assert_eq!(b.reserve(ts(0), 0.5), ts(75));
    }

    #[test]
    fn cost_above_burst_goes_into_debt() {
        let mut b = TokenBucket::new(10.0, 2, ts(0));
        // A full bucket lets a cost-5 request go at once, leaving a debt of 3 requests.
        assert_eq!(b.reserve(ts(0), 5.0), ts(0));
        // Refill of the debt (3·T) plus the request itself (1·T, within burst 2: waits until level allows).
        // TAT = 500 ms; a cost-1 request needs TAT − (2 − 1)·T = 400 ms.
        assert_eq!(b.reserve(ts(0), 1.0), ts(400));
        // A second large request waits for a completely full bucket (TAT = 600 ms), then debt again.
        assert_eq!(b.reserve(ts(0), 4.0), ts(600));
        assert_eq!(b.reserve(ts(0), 1.0), ts(900));
    }

    #[test]
    fn zero_cost_never_waits_beyond_now_or_fifo() {
        let mut b = TokenBucket::new(1.0, 1, ts(0));
        assert_eq!(b.reserve(ts(0), 1.0), ts(0));
        assert_eq!(b.reserve(ts(0), 1.0), ts(1000));
        // A zero-cost request is still FIFO behind the reservation handed out at 1000.
        assert_eq!(b.reserve(ts(0), 0.0), ts(1000));
        assert_eq!(b.reserve(ts(5000), -3.0), ts(5000));
        assert_eq!(b.reserve(ts(5000), f64::NAN), ts(5000));
    }

    #[test]
    fn pause_blocks_until_then_steady_rate_without_burst() {
        let mut b = TokenBucket::new(10.0, 5, ts(0));
        b.pause_until(ts(2_000));
        assert_eq!(b.paused_until(ts(0)), Some(ts(2_000)));
        assert_eq!(b.paused_until(ts(1_999)), Some(ts(2_000)));
        assert_eq!(b.paused_until(ts(2_000)), None);
        assert_eq!(b.available_at(ts(0), 1.0), ts(2_000));
        // Callers arriving during the pause (and right at its end) get one request at `until`, then T.
        let sends: Vec<u64> = (0..4).map(|i| b.reserve(ts(500 * i), 1.0).0 - T0).collect();
        assert_eq!(sends, vec![2_000, 2_100, 2_200, 2_300]);
        // Fractional cost is held by the pause too.
        let mut b = TokenBucket::new(10.0, 5, ts(0));
        b.pause_until(ts(2_000));
        assert_eq!(b.reserve(ts(0), 0.1), ts(2_000));
    }

    #[test]
    fn pause_never_shortens() {
        let mut b = TokenBucket::new(10.0, 5, ts(0));
        b.pause_until(ts(5_000));
        b.pause_until(ts(1_000));
        assert_eq!(b.paused_until(ts(0)), Some(ts(5_000)));
        assert_eq!(b.reserve(ts(0), 1.0), ts(5_000));
        b.pause_until(ts(8_000));
        assert_eq!(b.paused_until(ts(0)), Some(ts(8_000)));
    }

    #[test]
    fn set_rate_halving_doubles_spacing_afterwards() {
        let mut b = TokenBucket::new(10.0, 2, ts(0));
        let before: Vec<u64> = (0..5).map(|_| b.reserve(ts(0), 1.0).0 - T0).collect();
        assert_eq!(before, vec![0, 0, 100, 200, 300]);
        b.set_rate(5.0, ts(0));
        assert_eq!(b.rate(), 5.0);
        // Already handed out (up to 300) are kept; what follows is spaced by 200 ms.
        let after: Vec<u64> = (0..3).map(|_| b.reserve(ts(0), 1.0).0 - T0).collect();
        assert_eq!(after, vec![500, 700, 900]);
    }

    #[test]
    fn set_rate_keeps_accrued_capacity_proportionally() {
        // Half the burst used, then the rate halves: still half the burst available, no gift, no penalty.
        let mut b = TokenBucket::new(10.0, 4, ts(0));
        b.reserve(ts(0), 1.0);
        b.reserve(ts(0), 1.0);
        b.set_rate(5.0, ts(0));
        let sends: Vec<u64> = (0..4).map(|_| b.reserve(ts(0), 1.0).0 - T0).collect();
        assert_eq!(sends, vec![0, 0, 200, 400]);
        // An idle (full) bucket stays full through a rate rise: a burst, not more.
        let mut b = TokenBucket::new(1.0, 2, ts(0));
        b.set_rate(100.0, ts(10_000));
        let sends: Vec<u64> = (0..3).map(|_| b.reserve(ts(10_000), 1.0).0 - T0).collect();
        assert_eq!(sends, vec![10_000, 10_000, 10_010]);
    }

    #[test]
    fn set_rate_rise_does_not_jump_ahead_of_handed_out_reservations() {
        let mut b = TokenBucket::new(1.0, 1, ts(0));
        let before: Vec<u64> = (0..3).map(|_| b.reserve(ts(0), 1.0).0 - T0).collect();
        assert_eq!(before, vec![0, 1_000, 2_000]);
        b.set_rate(10.0, ts(0));
        assert_eq!(b.reserve(ts(0), 1.0), ts(2_100));
    }

    #[test]
    fn available_at_does_not_reserve() {
        let mut b = TokenBucket::new(10.0, 1, ts(0));
        assert_eq!(b.available_at(ts(0), 1.0), ts(0));
        assert_eq!(b.available_at(ts(0), 1.0), ts(0));
        assert_eq!(b.reserve(ts(0), 1.0), ts(0));
        assert_eq!(b.available_at(ts(0), 1.0), ts(100));
        assert_eq!(b.available_at(ts(0), 1.0), ts(100));
        assert_eq!(b.available_at(ts(0), 2.0), ts(100));
        assert_eq!(b.available_at(ts(50), 1.0), ts(100));
        assert_eq!(b.available_at(ts(150), 1.0), ts(150));
        assert_eq!(b.reserve(ts(0), 1.0), ts(100));
    }

    #[test]
    fn degenerate_inputs_never_panic_or_go_before_now() {
        for rate in [0.0, -5.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-9] {
            let mut b = TokenBucket::new(rate, 0, ts(0));
            assert_eq!(b.rate(), MIN_RATE_RPS);
            assert_eq!(b.burst(), 1);
            assert_eq!(b.reserve(ts(0), 1.0), ts(0));
            // 1 / 0.001 rps = 1000 s per request.
            assert_eq!(b.reserve(ts(0), 1.0), ts(1_000_000));
            b.set_rate(rate, ts(0));
        }
        let mut b = TokenBucket::new(1e300, u32::MAX, Timestamp(0));
        assert_eq!(b.reserve(Timestamp(u64::MAX), 1.0), Timestamp(u64::MAX));
        let mut b = TokenBucket::new(0.0, 1, Timestamp(u64::MAX - 5));
        assert_eq!(b.reserve(Timestamp(u64::MAX - 5), 1.0), Timestamp(u64::MAX - 5));
        assert_eq!(b.reserve(Timestamp(u64::MAX - 5), 1.0), Timestamp(u64::MAX));
        assert_eq!(b.reserve(Timestamp(u64::MAX - 5), f64::INFINITY), Timestamp(u64::MAX));
        assert_eq!(b.reserve(Timestamp(u64::MAX - 5), 1.0), Timestamp(u64::MAX));
        let mut b = TokenBucket::new(10.0, 1, ts(0));
        b.pause_until(Timestamp(u64::MAX));
        assert_eq!(b.reserve(ts(0), 1.0), Timestamp(u64::MAX));
        // A `now` before the origin (clock went backwards) is still honoured.
        let mut b = TokenBucket::new(10.0, 1, ts(1_000));
        assert_eq!(b.reserve(ts(0), 1.0), ts(0));
        assert_eq!(b.reserve(ts(0), 1.0), ts(100));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Reserve { step_ms: u64, cost: f64 },
        Pause { step_ms: u64, for_ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u64..3_000, prop_oneof![Just(1.0), 0.0f64..3.0, 0.0f64..25.0])
                .prop_map(|(step_ms, cost)| Op::Reserve { step_ms, cost }),
            1 => (0u64..3_000, 0u64..10_000).prop_map(|(step_ms, for_ms)| Op::Pause { step_ms, for_ms }),
        ]
    }

    proptest! {
        /// For any sequence of reservations (and pauses) with non-decreasing `now` at a fixed rate:
        ///
        /// 1. every send time is ≥ the `now` it was reserved at;
        /// 2. send times are non-decreasing in call order (FIFO);
        /// 3. the bound. Let requests j..=k (call order) be those whose send times lie in a window
        ///    [t, t + W]. With T = 1000 / rate and TAT_i the TAT after request i:
        ///      TAT_k ≥ s_j + Σ_{i=j..k} c_i·T        (each request adds c_i·T to max(TAT, s_i) ≥ s_j), and
        ///      TAT_k ≤ s_k + max(burst, c_k)·T       (conformance: for c ≤ burst, s ≥ TAT + (c − burst)·T;
        ///                                             for c > burst, s ≥ TAT_{k−1}; pauses only raise TAT
        ///                                             and s, and s ≥ the conformance time).
        ///    Hence  Σ_{i=j..k} c_i ≤ max(burst, c_k) + rate · (s_k − s_j) / 1000
        ///                          ≤ max(burst, c_k) + rate · W / 1000,
        ///    which is tighter than `burst + rate·W/1000 + max cost`. The only extra slack is the 1 µs
        ///    snap of send times (SNAP_MS, i.e. rate·1e-6 requests) plus f64 rounding, covered by `tol`.
        ///
        /// The test checks (3) for every window spanned by two send times (the tightest windows: any other
        /// window contains the same requests as one of these and is at least as wide).
        #[test]
        fn reservations_respect_now_fifo_and_rate_bound(
            rate in prop_oneof![0.01f64..1.0, 1.0f64..50.0, 50.0f64..2_000.0],
            burst in 1u32..20,
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let mut b = TokenBucket::new(rate, burst, ts(0));
            let mut now = ts(0);
            let mut sent: Vec<(u64, f64)> = Vec::new();
            for op in &ops {
                match *op {
                    Op::Reserve { step_ms, cost } => {
                        now = Timestamp(now.0 + step_ms);
                        let s = b.reserve(now, cost);
                        prop_assert!(s >= now, "send {s:?} before now {now:?}");
                        if let Some(&(prev, _)) = sent.last() {
                            prop_assert!(s.0 >= prev, "FIFO violated: {} after {}", s.0, prev);
                        }
                        sent.push((s.0, cost));
                    }
                    Op::Pause { step_ms, for_ms } => {
                        now = Timestamp(now.0 + step_ms);
                        b.pause_until(Timestamp(now.0 + for_ms));
                    }
                }
            }
            let b_f = f64::from(burst);
            let tol = rate * 1e-6 + 1e-9 * (1.0 + sent.iter().map(|&(_, c)| c).sum::<f64>());
            for j in 0..sent.len() {
                // Start each window at the first request with that send time.
                if j > 0 && sent[j - 1].0 == sent[j].0 {
                    continue;
                }
                let mut total = 0.0;
                for k in j..sent.len() {
                    total += sent[k].1;
                    // End each window at the last request with that send time.
                    if k + 1 < sent.len() && sent[k + 1].0 == sent[k].0 {
                        continue;
                    }
                    let w = (sent[k].0 - sent[j].0) as f64;
                    let bound = b_f.max(sent[k].1) + rate * w / 1000.0;
                    prop_assert!(
                        total <= bound + tol,
                        "window [{}, {}] sent {total} > bound {bound} (rate {rate}, burst {burst})",
                        sent[j].0 - T0, sent[k].0 - T0,
                    );
                }
            }
        }

        /// With rate changes and pauses mixed in, send times still never precede `now`, any active pause,
        /// or an earlier reservation; `available_at` predicts `reserve` exactly and never mutates.
        #[test]
        fn rate_changes_keep_fifo_and_now(
            steps in proptest::collection::vec(
                (0u64..2_000, 0.0f64..5.0, prop_oneof![Just(None), (-1.0f64..100.0).prop_map(Some)], 0u64..4),
                1..100,
            ),
        ) {
            let mut b = TokenBucket::new(5.0, 3, ts(0));
            let mut now = ts(0);
            let mut last = Timestamp(0);
            for (step, cost, new_rate, pause) in steps {
                now = Timestamp(now.0 + step);
                if let Some(r) = new_rate {
                    b.set_rate(r, now);
                }
                if pause == 0 {
                    b.pause_until(Timestamp(now.0 + step));
                }
                let before = b.clone();
                let predicted = b.available_at(now, cost);
                prop_assert_eq!(&before, &b);
                let s = b.reserve(now, cost);
                prop_assert_eq!(predicted, s);
                prop_assert!(s >= now && s >= last);
                if let Some(p) = before.paused_until(now) {
                    prop_assert!(s >= p);
                }
                last = s;
            }
        }
    }
}

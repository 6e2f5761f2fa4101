//! A rate-limited organization API's token bucket, shared with another
//! integration: issue #16's scenarios, played by the engine tests
//! (`tests/it/scheduling.rs`, on paused time) and the benchmark harness
//! (`examples/scenarios.rs`, in real time) with the same rules.
//!
//! One bucket of 10 requests a second with a burst of 10, counted in
//! thousandths of a request. The other integration takes a request every
//! `other_period_ms` (when a token is there) and, in scenario A, empties the
//! whole bucket once for [`DRAIN_MS`]. Its requests are played lazily, up to
//! the time of each of Pollster's requests: the bucket is a function of
//! time, so this is the same as playing them as they happen. Pure: times
//! are milliseconds since the run's start, given by the caller.

/// The budget pool of the scenarios' Pollster.
pub const POOL: &str = "org";
/// Instances of the four-group type.
pub const INSTANCES: usize = 18;
/// The pool's share of the org's rate: 10 rps × 0.8.
pub const SHARE_RPS: f64 = 8.0;
/// `(group, priority, floor in seconds)`: at the floors, 18 × (1/5 + 1/30 +
/// 1/6 + 1/15) = 8.4 rps, 150 % of the plan target (8 rps × 0.7).
pub const GROUPS: [(&str, u8, u64); 4] = [
    ("status", 1, 5),
    ("devices", 2, 30),
    ("health", 3, 6),
    ("inventory", 4, 15),
];

/// Minutes 2, 5 and 8 of a run (`[60 s, 120 s)`, …) are incidents: the
/// org's status answers change at every poll, which sends adaptive polling
/// towards its 5 s minimum; otherwise they change every 2 minutes.
pub fn incident(at_ms: u64) -> bool {
    at_ms / 60_000 % 3 == 1
}

/// The org's rate, in thousandths of a request per millisecond: 10 rps.
pub const ORG_RATE_PER_MS: i64 = 10;
/// The org's burst: 10 requests.
pub const ORG_BURST: i64 = 10_000;
/// One request.
pub const REQUEST: i64 = 1_000;
/// How long the other integration's one drain (scenario A) keeps the bucket
/// empty.
pub const DRAIN_MS: u64 = 500;

/// See the module doc.
#[derive(Debug, Clone)]
pub struct OrgBucket {
    tokens: i64,
    at_ms: u64,
    other_period_ms: u64,
    next_other_ms: u64,
    /// When the other integration empties the whole bucket (every 10 ms
    /// while it drains).
    drain_at_ms: Option<u64>,
    draining: u64,
}

impl OrgBucket {
    /// A full bucket at time 0; the other integration spends `other_rps`
    /// and, with `drain_at_ms`, drains the bucket once from then.
    pub fn new(other_rps: u64, drain_at_ms: Option<u64>) -> OrgBucket {
        OrgBucket {
            tokens: ORG_BURST,
            at_ms: 0,
            other_period_ms: 1000 / other_rps.max(1),
            next_other_ms: 0,
            drain_at_ms,
            draining: 0,
        }
    }

    fn refill(&mut self, to_ms: u64) {
        if to_ms > self.at_ms {
            self.tokens = (self.tokens + (to_ms - self.at_ms) as i64 * ORG_RATE_PER_MS).min(ORG_BURST);
            self.at_ms = to_ms;
        }
    }

    /// Run the other integration's requests up to `to_ms`, then refill.
    fn advance(&mut self, to_ms: u64) {
        loop {
            let next = match self.drain_at_ms {
                Some(d) if d < self.next_other_ms => d,
                _ => self.next_other_ms,
            };
            if next > to_ms {
                break;
            }
            self.refill(next);
            if self.drain_at_ms == Some(next) {
                // While it drains, the other integration takes every token.
                self.tokens = 0;
                self.drain_at_ms = (self.draining < DRAIN_MS).then_some(next + 10);
                self.draining += 10;
            } else {
                if self.tokens >= REQUEST {
                    self.tokens -= REQUEST;
                }
                self.next_other_ms += self.other_period_ms;
            }
        }
        self.refill(to_ms);
    }

    /// One of Pollster's requests at `at_ms` (never earlier than the last):
    /// true if it gets a token, false for a 429.
    pub fn admit(&mut self, at_ms: u64) -> bool {
        self.advance(at_ms);
        if self.tokens >= REQUEST {
            self.tokens -= REQUEST;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_holds_a_burst_then_what_the_other_integration_leaves() {
        // 6 rps taken by the other integration: 4 rps left, after a burst.
        let mut b = OrgBucket::new(6, None);
        let first: Vec<bool> = (0..12).map(|_| b.admit(0)).collect();
        assert_eq!(
            first.iter().filter(|ok| **ok).count(),
            9,
            "10 tokens, one taken by the other at 0 ms"
        );
        // Within the rate (2 rps beside the other's 6), every request passes;
        // a burst beyond what refilled does not.
        assert!((1..=20).all(|i| b.admit(i * 500)));
        let burst: Vec<bool> = (0..12).map(|_| b.admit(10_400)).collect();
        let passed = burst.iter().filter(|ok| **ok).count();
        assert!((1..=10).contains(&passed) && !burst[11], "{burst:?}");
        // A drain empties the bucket for DRAIN_MS.
        let mut d = OrgBucket::new(2, Some(1_000));
        assert!(d.admit(900));
        assert!(!d.admit(1_200), "drained");
        assert!(!d.admit(1_400), "still draining");
        assert!(d.admit(1_700), "refilled after the drain");
    }
}

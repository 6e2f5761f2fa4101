//! Exponential backoff with jitter (§3): `initial × multiplier^(n−1)`, jittered
//! by ±`backoff_jitter`, capped at `backoff_max` after the jitter so the cap is
//! a hard ceiling. Computed in floating point from a clamped exponent, so a
//! failure count of any size never overflows.

use crate::model::FailureSettings;
use rand::{Rng, RngExt};
use std::time::Duration;

/// The un-jittered delay after `failures` consecutive failures (≥ 1).
pub fn base_delay(failures: u32, s: &FailureSettings) -> Duration {
    let n = failures.max(1) - 1;
    // 2^64 × anything exceeds any sane cap; clamping keeps powi finite.
    let factor = s.backoff_multiplier.max(1.0).powi(n.min(64) as i32);
    let ms = s.backoff_initial.as_millis() as f64 * factor;
    let cap = s.backoff_max.as_millis() as f64;
    Duration::from_millis(ms.min(cap).max(0.0) as u64)
}

/// The delay to wait after `failures` consecutive failures, with jitter.
pub fn delay<R: Rng + ?Sized>(failures: u32, s: &FailureSettings, rng: &mut R) -> Duration {
    let base = base_delay(failures, s).as_millis() as f64;
    let j = s.backoff_jitter.clamp(0.0, 1.0);
    let factor = if j > 0.0 { 1.0 + rng.random_range(-j..=j) } else { 1.0 };
    let cap = s.backoff_max.as_millis() as f64;
    Duration::from_millis((base * factor).min(cap).max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::random::SmallRng;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn defaults() -> FailureSettings {
        FailureSettings::default()
    }

    #[test]
    fn doubles_from_five_seconds_and_caps_at_five_minutes() {
        let s = defaults();
        let secs: Vec<u64> = (1..=8).map(|n| base_delay(n, &s).as_secs()).collect();
        assert_eq!(secs, vec![5, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn huge_failure_counts_do_not_overflow() {
        let s = defaults();
        assert_eq!(base_delay(u32::MAX, &s), Duration::from_secs(300));
        let mut rng = SmallRng::seed_from_u64(1);
        assert!(delay(u32::MAX, &s, &mut rng) <= Duration::from_secs(300));
    }

    #[test]
    fn zero_jitter_is_exact() {
        let s = FailureSettings {
            backoff_jitter: 0.0,
            ..defaults()
        };
        let mut rng = SmallRng::seed_from_u64(7);
        assert_eq!(delay(3, &s, &mut rng), Duration::from_secs(20));
    }

    #[test]
    fn same_seed_same_delays() {
        let s = defaults();
        let a: Vec<_> = {
            let mut r = SmallRng::seed_from_u64(42);
            (1..10).map(|n| delay(n, &s, &mut r)).collect()
        };
        let b: Vec<_> = {
            let mut r = SmallRng::seed_from_u64(42);
            (1..10).map(|n| delay(n, &s, &mut r)).collect()
        };
        assert_eq!(a, b);
    }

    proptest! {
        #[test]
        fn jitter_stays_within_bounds(n in 1u32..40, seed: u64) {
            let s = defaults();
            let mut rng = SmallRng::seed_from_u64(seed);
            let base = base_delay(n, &s).as_millis() as f64;
            let d = delay(n, &s, &mut rng).as_millis() as f64;
            prop_assert!(d >= (base * 0.8).floor() - 1.0);
            prop_assert!(d <= (base * 1.2).min(300_000.0) + 1.0);
        }

        #[test]
        fn base_delay_is_monotone(n in 1u32..1000) {
            let s = defaults();
            prop_assert!(base_delay(n, &s) <= base_delay(n + 1, &s));
        }
    }
}

//! The adaptive interval (§2): computed once per completed successful poll.
//!
//! A changed response sets the target to `min_interval`; the k-th unchanged
//! poll in a row sets it to min(max, base × 1.5^(k−1)). The target is smoothed
//! (0.6 × target + 0.4 × previous) and the smoothed value is the state carried
//! to the next poll; the interval actually scheduled is that value jittered by
//! ±5 % from the injected RNG and clamped to [min, max]. Priority 1 and 2
//! tasks are never lengthened beyond base. The result is never below the
//! planned interval (the group's floor or pin, later the budget solver's).
//!
//! Keeping the jitter out of the smoothing state is what makes idle back-off
//! monotone: the state only ever moves towards its target.

use crate::model::AdaptiveSettings;
use rand::{Rng, RngExt};
use std::time::Duration;

pub const SMOOTHING_TARGET_WEIGHT: f64 = 0.6;
pub const JITTER: f64 = 0.05;
pub const IDLE_GROWTH: f64 = 1.5;

/// Result of one adaptive step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Smoothed, un-jittered interval: the state for the next step (ms).
    pub smoothed_ms: u64,
    /// The interval to schedule: max(jittered adaptive, planned).
    pub interval: Duration,
}

fn bounds(priority: u8, s: &AdaptiveSettings) -> (f64, f64) {
    let min = s.min_interval.as_millis() as f64;
    let mut max = s.max_interval.as_millis() as f64;
    if priority <= 2 {
        max = max.min(s.base_interval.as_millis() as f64);
    }
    (min, max.max(min))
}

/// The target before smoothing.
pub fn target(changed: bool, idle_streak: u32, priority: u8, s: &AdaptiveSettings) -> f64 {
    let (min, max) = bounds(priority, s);
    if changed || idle_streak == 0 {
        return min;
    }
    let base = s.base_interval.as_millis() as f64;
    let growth = IDLE_GROWTH.powi((idle_streak - 1).min(200) as i32);
    (base * growth).clamp(min, max)
}

/// One step after a successful poll. `previous_ms` is the smoothing state
/// (0 = none yet, which starts from base). `idle_streak` counts unchanged
/// polls in a row including this one (0 when this poll changed).
pub fn on_success<R: Rng + ?Sized>(
    changed: bool,
    idle_streak: u32,
    previous_ms: u64,
    priority: u8,
    planned: Duration,
    s: &AdaptiveSettings,
    rng: &mut R,
) -> Step {
    if !s.enabled {
        return Step {
            smoothed_ms: previous_ms,
            interval: planned,
        };
    }
    let (min, max) = bounds(priority, s);
    let prev = if previous_ms == 0 {
        s.base_interval.as_millis() as f64
    } else {
        previous_ms as f64
    }
    .clamp(min, max);
    let t = target(changed, idle_streak, priority, s);
    let smoothed = (SMOOTHING_TARGET_WEIGHT * t + (1.0 - SMOOTHING_TARGET_WEIGHT) * prev).clamp(min, max);
    schedule(smoothed, min, max, planned, rng)
}

/// Re-time a task after the settings changed: keep its smoothing state, clamp
/// it to the new bounds, and draw a new jittered interval.
pub fn retime<R: Rng + ?Sized>(
    previous_ms: u64,
    priority: u8,
    planned: Duration,
    s: &AdaptiveSettings,
    rng: &mut R,
) -> Step {
    if !s.enabled {
        return Step {
            smoothed_ms: previous_ms,
            interval: planned,
        };
    }
    let (min, max) = bounds(priority, s);
    let prev = if previous_ms == 0 {
        s.base_interval.as_millis() as f64
    } else {
        previous_ms as f64
    };
    schedule(prev.clamp(min, max), min, max, planned, rng)
}

fn schedule<R: Rng + ?Sized>(smoothed: f64, min: f64, max: f64, planned: Duration, rng: &mut R) -> Step {
    let jittered = (smoothed * (1.0 + rng.random_range(-JITTER..=JITTER))).clamp(min, max);
    let interval = Duration::from_millis(jittered.round() as u64).max(planned);
    Step {
        smoothed_ms: smoothed.round() as u64,
        interval,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::random::SmallRng;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn s() -> AdaptiveSettings {
        AdaptiveSettings::default()
    }
    const NO_PLAN: Duration = Duration::from_secs(0);

    #[test]
    fn targets_follow_the_idle_streak() {
        let s = s();
        assert_eq!(target(true, 0, 3, &s), 5_000.0);
        assert_eq!(target(false, 1, 3, &s), 10_000.0);
        assert_eq!(target(false, 2, 3, &s), 15_000.0);
        assert_eq!(target(false, 3, 3, &s), 22_500.0);
        assert_eq!(target(false, 50, 3, &s), 300_000.0);
        assert_eq!(target(false, u32::MAX, 3, &s), 300_000.0);
    }

    #[test]
    fn priority_one_and_two_never_exceed_base() {
        let s = s();
        assert_eq!(target(false, 10, 1, &s), 10_000.0);
        assert_eq!(target(false, 10, 2, &s), 10_000.0);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut prev = 0;
        for k in 1..40 {
            let step = on_success(false, k, prev, 2, NO_PLAN, &s, &mut rng);
            assert!(step.interval <= s.base_interval, "k={k} {:?}", step.interval);
            prev = step.smoothed_ms;
        }
    }

    #[test]
    fn smoothing_mixes_target_and_previous() {
        let s = s();
        let mut rng = SmallRng::seed_from_u64(1);
        // changed: 0.6 × 5 s + 0.4 × 10 s (base, no previous) = 7 s
        let step = on_success(true, 0, 0, 3, NO_PLAN, &s, &mut rng);
        assert_eq!(step.smoothed_ms, 7_000);
        assert!(step.interval >= Duration::from_millis(6_650) && step.interval <= Duration::from_millis(7_350));
    }

    #[test]
    fn disabled_uses_the_planned_interval_alone() {
        let s = AdaptiveSettings { enabled: false, ..s() };
        let mut rng = SmallRng::seed_from_u64(1);
        let step = on_success(true, 0, 9_000, 3, Duration::from_secs(42), &s, &mut rng);
        assert_eq!(step.interval, Duration::from_secs(42));
        assert_eq!(step.smoothed_ms, 9_000);
    }

    #[test]
    fn a_change_brings_an_idle_task_back_towards_min() {
        let s = s();
        let mut rng = SmallRng::seed_from_u64(9);
        let mut prev = 0;
        for k in 1..30 {
            prev = on_success(false, k, prev, 3, NO_PLAN, &s, &mut rng).smoothed_ms;
        }
        assert!(prev > 250_000);
        let mut after = prev;
        for _ in 0..10 {
            let next = on_success(true, 0, after, 3, NO_PLAN, &s, &mut rng).smoothed_ms;
            assert!(next < after);
            after = next;
        }
        assert!(after < 6_000, "{after}");
    }

    proptest! {
        #[test]
        fn idle_tasks_back_off_monotonically(seed: u64, start_changes in 0usize..4, n in 1u32..60) {
            let s = s();
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut prev = 0;
            for _ in 0..start_changes {
                prev = on_success(true, 0, prev, 3, NO_PLAN, &s, &mut rng).smoothed_ms;
            }
            let mut last = on_success(true, 0, prev, 3, NO_PLAN, &s, &mut rng).smoothed_ms;
            for k in 1..=n {
                let next = on_success(false, k, last, 3, NO_PLAN, &s, &mut rng).smoothed_ms;
                prop_assert!(next >= last, "k={} {} < {}", k, next, last);
                prop_assert!(next <= 300_000);
                last = next;
            }
        }

        #[test]
        fn never_below_planned_nor_outside_bounds(
            seed: u64, changed: bool, k in 0u32..100, prev in 0u64..1_000_000,
            prio in 1u8..=4, planned_ms in 0u64..600_000,
        ) {
            let s = s();
            let mut rng = SmallRng::seed_from_u64(seed);
            let planned = Duration::from_millis(planned_ms);
            let step = on_success(changed, k, prev, prio, planned, &s, &mut rng);
            prop_assert!(step.interval >= planned);
            let adaptive_max = if prio <= 2 { s.base_interval } else { s.max_interval };
            prop_assert!(step.interval <= adaptive_max.max(planned));
            prop_assert!(step.interval >= s.min_interval);
        }

        #[test]
        fn jitter_is_within_five_percent_of_the_smoothed_state(seed: u64, changed: bool, k in 0u32..20, prev in 5_000u64..300_000) {
            let s = s();
            let mut rng = SmallRng::seed_from_u64(seed);
            let step = on_success(changed, k, prev, 4, NO_PLAN, &s, &mut rng);
            let sm = step.smoothed_ms as f64;
            let i = step.interval.as_millis() as f64;
            prop_assert!(i >= (sm * 0.95).max(5_000.0) - 1.0 && i <= (sm * 1.05).min(300_000.0) + 1.0);
        }
    }
}

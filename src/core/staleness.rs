//! Staleness: how old a task's data is. The score is age since the last
//! success ÷ the adaptive max interval, capped at 1 (a task that never
//! succeeded scores 1). A task is *stale* — for readiness and alerts — only
//! when its age exceeds max(3 × its interval, 2 min), so a stretched interval
//! never raises a false alarm.

use crate::model::Timestamp;
use std::time::Duration;

pub const STALE_FLOOR: Duration = Duration::from_secs(120);

/// Score in [0, 1]; 0 = fresh, 1 = maximally stale.
pub fn score(last_success: Option<Timestamp>, now: Timestamp, max_interval: Duration) -> f64 {
    let Some(last) = last_success else { return 1.0 };
    let max = max_interval.as_millis().max(1) as f64;
    (now.since(last).as_millis() as f64 / max).clamp(0.0, 1.0)
}

/// The age beyond which a task with this interval counts as stale.
pub fn stale_after(interval: Duration) -> Duration {
    interval.saturating_mul(3).max(STALE_FLOOR)
}

/// Whether the data is stale. `since` is the last success, or, for a task
/// that never succeeded, the time it was placed on the schedule.
pub fn is_stale(since: Timestamp, now: Timestamp, interval: Duration) -> bool {
    now.since(since) > stale_after(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(300);

    #[test]
    fn never_succeeded_is_maximally_stale() {
        assert_eq!(score(None, Timestamp(1_000), MAX), 1.0);
    }

    #[test]
    fn score_grows_with_age_and_caps_at_one() {
        let t0 = Timestamp(1_000_000);
        assert_eq!(score(Some(t0), t0, MAX), 0.0);
        assert!((score(Some(t0), t0.plus(Duration::from_secs(150)), MAX) - 0.5).abs() < 1e-9);
        assert_eq!(score(Some(t0), t0.plus(Duration::from_secs(3000)), MAX), 1.0);
    }

    #[test]
    fn stale_cutoff_follows_a_stretched_interval() {
        assert_eq!(stale_after(Duration::from_secs(10)), Duration::from_secs(120));
        assert_eq!(stale_after(Duration::from_secs(600)), Duration::from_secs(1800));
        let t0 = Timestamp(0);
        // A 10-minute interval is not stale after 20 minutes …
        assert!(!is_stale(
            t0,
            t0.plus(Duration::from_secs(1200)),
            Duration::from_secs(600)
        ));
        // … but is after 31.
        assert!(is_stale(
            t0,
            t0.plus(Duration::from_secs(1860)),
            Duration::from_secs(600)
        ));
    }
}

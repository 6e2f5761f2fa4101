//! Deterministic phase offsets: a task placed on the schedule for the first
//! time starts at a hash of its key, bounded by min(0.5 × interval, 120 s), so
//! tasks never fire in lockstep, and the same task lands at the same phase on
//! every run. After its first poll it moves once to its place in the cycle
//! ([`cycle`]), a hash over the *whole* interval, as Prometheus spreads its
//! scrapes: a fleet placed together then polls at its average rate all the
//! time, not at twice it for the first half of every interval and not at all
//! in the second. The hash is FNV-1a: stable across builds and platforms.

use crate::model::TaskKey;
use std::time::Duration;

pub const MAX_OFFSET: Duration = Duration::from_secs(120);

pub fn key_hash(key: &TaskKey) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.instance.bytes().chain([0u8]).chain(key.group.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The window offsets are drawn from for a task with this interval.
pub fn window(interval: Duration) -> Duration {
    (interval / 2).min(MAX_OFFSET)
}

/// The offset of `key` within [0, window(interval)).
pub fn offset(key: &TaskKey, interval: Duration) -> Duration {
    let w = window(interval).as_millis() as u64;
    if w == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(key_hash(key) % w)
}

/// The place of `key` in its cycle, within [0, interval): where its polls
/// settle after the first. [`offset`] is this place folded into the phase
/// window (for an interval of up to 4 minutes, `offset = cycle mod
/// window`), so the first poll still comes within the window.
pub fn cycle(key: &TaskKey, interval: Duration) -> Duration {
    let w = interval.as_millis() as u64;
    if w == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(key_hash(key) % w)
}

/// How much later than one interval after its first poll a task polls the
/// second time, to move from where it was first placed (`first`, from the
/// placement) to its [`cycle`] place: in [0, interval), once.
pub fn settle(key: &TaskKey, interval: Duration, first: Duration) -> Duration {
    let w = interval.as_millis() as u64;
    if w == 0 {
        return Duration::ZERO;
    }
    let first = first.as_millis() as u64 % w;
    Duration::from_millis((cycle(key, interval).as_millis() as u64 + w - first) % w)
}

/// The offset of `key` within [0, interval): where a task the pool's bucket
/// held up with others goes in its next interval, so that the tasks it lined
/// up at its rate spread over the whole interval instead of meeting it as
/// one train again.
pub fn spread(key: &TaskKey, interval: Duration) -> Duration {
    let w = interval.as_millis() as u64;
    if w == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(key_hash(key).rotate_left(17) % w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_deterministic_and_bounded() {
        let k = TaskKey::new("pve-1", "nodes");
        assert_eq!(offset(&k, Duration::from_secs(60)), offset(&k, Duration::from_secs(60)));
        for i in 0..1000 {
            let k = TaskKey::new(&format!("inst-{i}"), "probe");
            assert!(offset(&k, Duration::from_secs(10)) < Duration::from_secs(5));
            assert!(offset(&k, Duration::from_secs(3600)) < MAX_OFFSET);
        }
    }

    #[test]
    fn the_first_poll_comes_within_the_window_and_the_rest_cover_the_interval() {
        // A fleet placed together: the first polls at their offsets (the
        // first half of the interval), every later one at its cycle place
        // (the whole interval, each tenth a tenth of the fleet), reached
        // by one settle after the first poll.
        for iv in [
            Duration::from_secs(1),
            Duration::from_secs(30),
            Duration::from_secs(3600),
        ] {
            let mut tenths = [0u32; 10];
            for i in 0..10_000 {
                let k = TaskKey::new(&format!("inst-{i}"), "probe");
                let (first, place) = (offset(&k, iv), cycle(&k, iv));
                assert!(first < window(iv) && place < iv);
                let s = settle(&k, iv, first);
                assert!(s < iv);
                // The second poll: one interval and the settle after the
                // first, at the cycle place of the next interval.
                assert_eq!(
                    (first + iv + s).as_millis() % iv.as_millis(),
                    place.as_millis(),
                    "{k:?}"
                );
                if iv <= Duration::from_secs(240) {
                    assert_eq!(first.as_millis(), place.as_millis() % window(iv).as_millis());
                }
                tenths[(place.as_millis() * 10 / iv.as_millis()) as usize] += 1;
            }
            assert!(tenths.iter().all(|n| (900..1100).contains(n)), "{iv:?}: {tenths:?}");
        }
        // A cold start's first poll is at once: it settles by its cycle place.
        let k = TaskKey::new("pve-1", "nodes");
        let iv = Duration::from_secs(10);
        assert_eq!(settle(&k, iv, Duration::ZERO), cycle(&k, iv));
        assert_eq!(settle(&k, Duration::ZERO, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_spread_covers_the_whole_interval() {
        let iv = Duration::from_secs(30);
        let mut halves = [0u32; 2];
        for i in 0..1000 {
            let k = TaskKey::new(&format!("inst-{i}"), "devices");
            let o = spread(&k, iv);
            assert!(o < iv);
            assert_eq!(o, spread(&k, iv), "deterministic");
            halves[usize::from(o >= iv / 2)] += 1;
        }
        // Beyond the phase window (half the interval) too.
        assert!(halves.iter().all(|&n| (400..600).contains(&n)), "{halves:?}");
        assert_eq!(spread(&TaskKey::new("a", "b"), Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn offsets_spread_tasks_out() {
        let mut buckets = [0u32; 10];
        for i in 0..10_000 {
            let k = TaskKey::new(&format!("inst-{i}"), "probe");
            let o = offset(&k, Duration::from_secs(20)).as_millis() as usize;
            buckets[o * 10 / 10_000] += 1;
        }
        for b in buckets {
            assert!((800..1200).contains(&b), "{buckets:?}");
        }
    }

    #[test]
    fn instance_and_group_boundaries_matter() {
        assert_ne!(key_hash(&TaskKey::new("ab", "c")), key_hash(&TaskKey::new("a", "bc")));
    }
}

//! The intervals priority 1 and 2 groups really run at, so the plan counts
//! their demand as it is and not at their floors: adaptive polling runs a
//! group whose data does not change at its base interval (never slower),
//! and that may be twice its floor.
//!
//! Each task's interval is the larger of its planned interval and its
//! adaptive interval, whose state is already smoothed (0.6 × target + 0.4
//! × previous, once per poll); a group's figure then rises slowly and
//! falls fast ([`smooth_running`]).

use crate::core::aimd::RESOLVE_HYSTERESIS;
use std::collections::BTreeMap;
use std::time::Duration;

/// Pool → `(type, group)` → the interval the group runs at, in seconds.
pub type RunningIntervals = BTreeMap<String, BTreeMap<(String, String), f64>>;

/// One task, as [`running_intervals`] counts it.
#[derive(Debug, Clone, Copy)]
pub struct RunningTask<'a> {
    pub pool: &'a str,
    pub type_name: &'a str,
    pub group: &'a str,
    /// Requests one execution costs.
    pub cost: f64,
    /// The interval the task is on now.
    pub interval: Duration,
}

/// Each group's interval such that its summed cost over that interval is
/// the demand its tasks really make: `Σ cost / Σ (cost / interval)`.
/// Tasks with no cost or no interval are left out.
pub fn running_intervals<'a>(tasks: impl IntoIterator<Item = RunningTask<'a>>) -> RunningIntervals {
    let mut sums: BTreeMap<(&str, &str, &str), (f64, f64)> = BTreeMap::new();
    for t in tasks {
        let iv = t.interval.as_secs_f64();
        if !(t.cost > 0.0 && iv > 0.0) {
            continue;
        }
        let e = sums.entry((t.pool, t.type_name, t.group)).or_insert((0.0, 0.0));
        e.0 += t.cost;
        e.1 += t.cost / iv;
    }
    let mut out = RunningIntervals::new();
    for ((pool, ty, group), (cost, demand)) in sums {
        out.entry(pool.to_string())
            .or_default()
            .insert((ty.to_string(), group.to_string()), cost / demand);
    }
    out
}

/// How long the plan takes to follow priority 1/2 groups that speed up: the
/// time constant of [`smooth_running`] while a group's demand rises. A
/// status change sends adaptive polling towards its minimum for as long as
/// the data keeps changing (a minute of changes in scenario B); planning
/// for that spike sheds priority 3/4 groups for as long, although the
/// bucket already holds the pool to its budget. Shedding is for demand
/// that lasts: a change that goes on is followed within minutes (63 % of
/// the way in 5), and until then the speed-up is served from the room the
/// plan leaves, at the bucket's pace.
pub const RUNNING_RISE: Duration = Duration::from_secs(5 * 60);

/// The time constant of [`smooth_running`] while a group's demand falls:
/// when adaptive polling slows down again, what it gives back is planned
/// for at once, since it may be what a shed group needs.
pub const RUNNING_FALL: Duration = Duration::from_secs(10);

/// `prev` moved towards `now` by the share of its time constant that
/// `elapsed` is (`1 − e^(−elapsed/τ)`), in demand (1 / interval): slowly
/// ([`RUNNING_RISE`]) where the demand rises, fast ([`RUNNING_FALL`]) where
/// it falls. Groups new in `now` are taken as they are, and groups gone
/// from it are gone.
pub fn smooth_running(prev: &RunningIntervals, now: &RunningIntervals, elapsed: Duration) -> RunningIntervals {
    let alpha = |tau: Duration| 1.0 - (-elapsed.as_secs_f64() / tau.as_secs_f64()).exp();
    let (rise, fall) = (alpha(RUNNING_RISE), alpha(RUNNING_FALL));
    now.iter()
        .map(|(pool, groups)| {
            let groups = groups
                .iter()
                .map(|(k, &iv)| {
                    let iv = match prev.get(pool).and_then(|g| g.get(k)) {
                        Some(&was) if was > 0.0 && iv > 0.0 => {
                            let (was_d, now_d) = (1.0 / was, 1.0 / iv);
                            let a = if now_d > was_d { rise } else { fall };
                            1.0 / (was_d + a * (now_d - was_d))
                        }
                        _ => iv,
                    };
                    (k.clone(), iv)
                })
                .collect();
            (pool.clone(), groups)
        })
        .collect()
}

/// A group's running demand moved by more than [`RESOLVE_HYSTERESIS`]
/// (20 %) since `then`, or a group came or went: time to re-plan.
pub fn running_moved(then: &RunningIntervals, now: &RunningIntervals) -> bool {
    running_moved_by(then, now, RESOLVE_HYSTERESIS)
}

/// A pool that sheds re-plans on a smaller move: what its priority 1/2
/// groups give back may be what a shed group needs.
pub const SHEDDING_HYSTERESIS: f64 = 0.05;

/// [`running_moved`] with a threshold of its own (a share: 0.05 is 5 %).
pub fn running_moved_by(then: &RunningIntervals, now: &RunningIntervals, threshold: f64) -> bool {
    if then.len() != now.len() {
        return true;
    }
    then.iter().zip(now).any(|((pa, ga), (pb, gb))| {
        pa != pb
            || ga.len() != gb.len()
            || ga.iter().zip(gb).any(|((ka, a), (kb, b))| {
                // Demand goes as 1 / interval.
                ka != kb || (a / b - 1.0).abs() > threshold
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn task(group: &str, cost: f64, secs: u64) -> RunningTask<'_> {
        RunningTask {
            pool: "org",
            type_name: "net",
            group,
            cost,
            interval: Duration::from_secs(secs),
        }
    }

    #[test]
    fn a_group_runs_at_the_interval_that_gives_its_tasks_summed_demand() {
        // Two tasks at 10 s and one at 5 s: 0.4 rps for 3 requests a cycle, 7.5 s.
        let r = running_intervals([task("status", 1.0, 10), task("status", 1.0, 10), task("status", 1.0, 5)]);
        let status = r["org"][&("net".to_string(), "status".to_string())];
        assert!((status - 7.5).abs() < 1e-12, "{status}");
        // Costless tasks are left out.
        let r = running_intervals([task("devices", 0.0, 30)]);
        assert!(r.is_empty());
    }

    #[test]
    fn the_plan_follows_a_lasting_speed_up_not_a_spike() {
        let at = |secs: u64| running_intervals([task("status", 1.0, secs)]);
        let iv = |r: &RunningIntervals| r["org"][&("net".to_string(), "status".to_string())];
        // 10 s of a spike to 5 s moves the figure by 1 − e^(−1/30) of the
        // way in demand, far under the 20 % that re-plans.
        let spiked = smooth_running(&at(10), &at(5), Duration::from_secs(10));
        assert!((iv(&spiked) - 1.0 / (0.1 + (1.0 - (-1.0f64 / 30.0).exp()) * 0.1)).abs() < 1e-9);
        assert!(!running_moved(&at(10), &spiked));
        // A minute of it (scenario B's incident) stays under the 20 % too.
        let mut r = at(10);
        for _ in 0..6 {
            r = smooth_running(&r, &at(5), Duration::from_secs(10));
        }
        assert!(!running_moved(&at(10), &r), "{}", iv(&r));
        // A speed-up that lasts is followed past the hysteresis within minutes.
        for _ in 0..12 {
            r = smooth_running(&r, &at(5), Duration::from_secs(10));
        }
        assert!(running_moved(&at(10), &r), "{}", iv(&r));
        // No time passed: nothing moves; a new group is taken as it is.
        assert_eq!(smooth_running(&at(10), &at(5), Duration::ZERO), at(10));
        assert_eq!(smooth_running(&RunningIntervals::new(), &at(5), Duration::ZERO), at(5));
    }

    #[test]
    fn a_slow_down_is_followed_at_once() {
        let at = |secs: u64| running_intervals([task("status", 1.0, secs)]);
        let iv = |r: &RunningIntervals| r["org"][&("net".to_string(), "status".to_string())];
        // Back from 5 s to 10 s: 10 s later the figure is 1 − e^(−1) of the
        // way there in demand, 20 s later past 86 %.
        let r = smooth_running(&at(5), &at(10), Duration::from_secs(10));
        assert!(
            (iv(&r) - 1.0 / (0.2 - (1.0 - (-1.0f64).exp()) * 0.1)).abs() < 1e-9,
            "{}",
            iv(&r)
        );
        let r = smooth_running(&r, &at(10), Duration::from_secs(10));
        assert!(1.0 / iv(&r) < 0.1 + 0.15 * 0.1, "{}", iv(&r));
        // The same step the other way moves less than a tenth as far.
        let up = smooth_running(&at(10), &at(5), Duration::from_secs(10));
        let down = smooth_running(&at(5), &at(10), Duration::from_secs(10));
        let up_share = (1.0 / iv(&up) - 0.1) / 0.1;
        let down_share = (0.2 - 1.0 / iv(&down)) / 0.1;
        assert!(up_share * 10.0 < down_share, "{up_share} {down_share}");
    }

    #[test]
    fn a_move_of_more_than_twenty_percent_re_plans() {
        let at = |secs: u64| running_intervals([task("status", 1.0, secs)]);
        assert!(!running_moved(&at(10), &at(10)));
        assert!(!running_moved(&at(10), &at(9)));
        assert!(running_moved(&at(10), &at(5)));
        // A shedding pool's smaller threshold.
        assert!(running_moved_by(&at(10), &at(9), SHEDDING_HYSTERESIS));
        assert!(!running_moved_by(&at(100), &at(99), SHEDDING_HYSTERESIS));
        assert!(running_moved(&at(10), &RunningIntervals::new()));
    }

    proptest! {
        /// The running interval lies between the group's shortest and longest task interval, and the
        /// group's demand at it is the sum of its tasks' demands.
        #[test]
        fn the_running_interval_keeps_the_demand(tasks in proptest::collection::vec((0.1f64..5.0, 1u64..600), 1..40)) {
            let list: Vec<RunningTask<'_>> = tasks.iter().map(|&(c, s)| task("g", c, s)).collect();
            let r = running_intervals(list.iter().copied());
            let iv = r["org"][&("net".to_string(), "g".to_string())];
            let lo = tasks.iter().map(|t| t.1).min().unwrap_or(0) as f64;
            let hi = tasks.iter().map(|t| t.1).max().unwrap_or(0) as f64;
            prop_assert!(iv >= lo * (1.0 - 1e-9) && iv <= hi * (1.0 + 1e-9));
            let cost: f64 = tasks.iter().map(|t| t.0).sum();
            let demand: f64 = tasks.iter().map(|t| t.0 / t.1 as f64).sum();
            prop_assert!((cost / iv - demand).abs() <= 1e-9 * demand.max(1.0));
        }
    }
}

use super::*;
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000;
const S: AimdSettings = AimdSettings {
    enabled: true,
    backoff_multiplier: DEFAULT_BACKOFF_MULTIPLIER,
    recovery_rps_per_minute: DEFAULT_RECOVERY_RPS_PER_MINUTE,
};

fn ts(ms: u64) -> Timestamp {
    Timestamp(T0 + ms)
}

fn secs(s: u64) -> Timestamp {
    ts(s * 1000)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn new_starts_at_configured() {
    let a = Aimd::new(10.0, ts(0));
    assert_eq!((a.configured(), a.effective(), a.solved_with()), (10.0, 10.0, 10.0));
    assert_eq!(a.last_decrease(), None);
    assert_eq!(a.paused_until(ts(0)), None);
    assert_eq!(AimdSettings::default(), S);
}

#[test]
fn a_429_halves_the_budget() {
    let mut a = Aimd::new(10.0, ts(0));
    let sig = a.on_rate_limited(secs(1), None, &S);
    assert_eq!(
        sig,
        RateSignal {
            decreased: true,
            paused_until: None,
            resolve: true,
            lone: false,
        }
    );
    assert_eq!(a.effective(), 5.0);
    assert_eq!(a.last_decrease(), Some(secs(1)));
}

#[test]
fn floor_is_half_rps_or_configured_if_lower() {
    let mut a = Aimd::new(10.0, ts(0));
    let mut seen = Vec::new();
    for i in 0..7 {
        a.on_rate_limited(secs(30 * i), None, &S);
        seen.push(a.effective());
    }
    assert_eq!(seen, vec![5.0, 2.5, 1.25, 0.625, 0.5, 0.5, 0.5]);

    // 0.8 backs off to the floor 0.5, not to 0.4.
    let mut a = Aimd::new(0.8, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    assert_eq!(a.effective(), 0.5);

    // Configured 0.2 < AIMD_FLOOR_RPS: the floor is 0.2, a 429 must not RAISE it to 0.5.
    let mut a = Aimd::new(0.2, ts(0));
    assert_eq!(a.floor(), 0.2);
    let sig = a.on_rate_limited(ts(0), None, &S);
    assert!(!sig.decreased && !sig.resolve);
    assert_eq!(a.effective(), 0.2);
}

#[test]
fn at_most_one_decrease_per_cooldown() {
    let mut a = Aimd::new(10.0, ts(0));
    assert!(a.on_rate_limited(ts(0), None, &S).decreased);
    for t in [1, 10_000, 29_999] {
        let sig = a.on_rate_limited(ts(t), None, &S);
        assert!(!sig.decreased);
        assert_eq!(a.effective(), 5.0);
    }
    // The cooldown runs from the decrease, not from the later 429s.
    assert_eq!(a.last_decrease(), Some(ts(0)));
    assert!(a.on_rate_limited(ts(30_000), None, &S).decreased);
    assert_eq!(a.effective(), 2.5);
}

#[test]
fn recovery_is_point_one_per_minute_after_cooldown_capped_at_configured() {
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    // Nothing during the cooldown.
    a.tick(secs(10), &S);
    a.tick(secs(30), &S);
    assert_eq!(a.effective(), 5.0);
    // Continuous: half a minute after the cooldown is +0.05.
    a.tick(secs(60), &S);
    assert!(close(a.effective(), 5.05), "{}", a.effective());
    a.tick(secs(90), &S);
    assert!(close(a.effective(), 5.1), "{}", a.effective());
    // Ten minutes after the cooldown: +1.0, however the ticks fall.
    for s in (91..=630).step_by(7) {
        a.tick(secs(s), &S);
    }
    a.tick(secs(630), &S);
    assert!(close(a.effective(), 6.0), "{}", a.effective());
    // 50 min after the cooldown would be +5.0: capped at exactly configured, never above.
    a.tick(secs(30 + 60 * 50 + 3600), &S);
    assert_eq!(a.effective(), 10.0);
    a.tick(secs(100_000), &S);
    assert_eq!(a.effective(), 10.0);
}

#[test]
fn recovery_skips_cooldown_even_without_ticks_in_it() {
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    // One tick long after: only the 5 minutes after the cooldown count.
    a.tick(secs(30 + 300), &S);
    assert!(close(a.effective(), 5.5), "{}", a.effective());
}

#[test]
fn a_429_forfeits_recovery_since_last_tick_and_never_raises() {
    let s = AimdSettings {
        backoff_multiplier: 1.0,
        ..S
    };
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    a.tick(secs(30), &S);
    // Ten minutes of un-ticked recovery, then a 429 with multiplier 1: unchanged, not raised.
    let sig = a.on_rate_limited(secs(630), None, &s);
    assert!(!sig.decreased);
    assert_eq!(a.effective(), 5.0);
    assert_eq!(a.last_decrease(), Some(secs(630)));
}

#[test]
fn a_lone_429_with_retry_after_only_pauses_and_the_next_one_decreases() {
    let ra = Some(Duration::from_secs(1));
    let mut a = Aimd::new(8.0, ts(0));
    let sig = a.on_rate_limited(secs(100), ra, &S);
    assert!(!sig.decreased && sig.lone, "a lone 429 pauses only");
    assert_eq!((sig.paused_until, a.effective()), (Some(secs(101)), 8.0));
    assert_eq!((a.last_429(), a.last_decrease()), (Some(secs(100)), None));
    // Another within 5 minutes: the 429s recur, the budget is too high.
    let sig = a.on_rate_limited(secs(399), ra, &S);
    assert!(sig.decreased);
    assert_eq!(a.effective(), 4.0);
    // After 5 quiet minutes, a 429 with Retry-After is lone again.
    let mut a = Aimd::new(8.0, ts(0));
    a.on_rate_limited(secs(0), ra, &S);
    assert!(!a.on_rate_limited(secs(300), ra, &S).decreased);
    // Without Retry-After the server said nothing about when to come back: a decrease.
    let mut a = Aimd::new(8.0, ts(0));
    assert!(a.on_rate_limited(secs(0), None, &S).decreased);
}

#[test]
fn fast_recovery_while_shedding_wins_back_ninety_percent_in_two_minutes() {
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    assert_eq!(a.effective(), 5.0);
    // (9 − 5) rps in 2 minutes: 2 rps a minute, from the end of the cooldown.
    assert_eq!(
        a.recovery(),
        Recovery::Fast {
            rps_per_minute: 2.0,
            until_rps: 9.0
        }
    );
    a.tick_shedding(secs(30), &S, true);
    assert_eq!(a.effective(), 5.0, "nothing during the cooldown");
    a.tick_shedding(secs(90), &S, true);
    assert!(close(a.effective(), 7.0), "{}", a.effective());
    // Not shedding: the additive step.
    a.tick_shedding(secs(150), &S, false);
    assert!(close(a.effective(), 7.1), "{}", a.effective());
    // Shedding again: fast, but only up to 90 % of where the 429 came, then additive.
    a.tick_shedding(secs(210), &S, true);
    assert!(close(a.effective(), 9.0), "{}", a.effective());
    a.tick_shedding(secs(270), &S, true);
    assert!(close(a.effective(), 9.1), "{}", a.effective());
}

#[test]
fn fast_recovery_stops_below_the_rate_the_pool_was_sending_when_the_429_came() {
    // Scenario B: a pool of 8 rps whose plan sends 5.5 rps; the API leaves it 4.
    let mut a = Aimd::new(8.0, ts(0));
    a.set_sending(5.5);
    a.on_rate_limited(secs(10), None, &S);
    assert_eq!((a.effective(), a.last_429_rps()), (4.0, Some(5.5)));
    // 90 % of 5.5, not of the 8 rps budget the pool never used: (4.95 − 4) rps in 2 minutes.
    let Recovery::Fast {
        rps_per_minute,
        until_rps,
    } = a.recovery()
    else {
        panic!("{:?}", a.recovery())
    };
    assert!(
        close(until_rps, 4.95) && close(rps_per_minute, 0.475),
        "{:?}",
        a.recovery()
    );
    a.tick_shedding(secs(40 + 120), &S, true);
    assert!(close(a.effective(), 4.95), "{}", a.effective());
    // Then the additive step, shedding or not.
    a.tick_shedding(secs(40 + 180), &S, true);
    assert!(close(a.effective(), 5.05), "{}", a.effective());
}

#[test]
fn the_level_of_a_429_is_never_above_the_budget_in_force() {
    // A plan that sends more than the budget (fixed mode, over budget): the budget is the level.
    let mut a = Aimd::new(8.0, ts(0));
    a.set_sending(12.0);
    a.on_rate_limited(ts(0), None, &S);
    assert_eq!(a.last_429_rps(), Some(8.0));
    assert!(matches!(a.recovery(), Recovery::Fast { until_rps, .. } if close(until_rps, 7.2)));
    // Nonsense from the plan is taken as the budget.
    let mut a = Aimd::new(8.0, ts(0));
    a.set_sending(f64::NAN);
    a.on_rate_limited(ts(0), None, &S);
    assert_eq!(a.last_429_rps(), Some(8.0));
}

#[test]
fn a_pool_sending_below_where_the_decrease_left_it_recovers_only_additively() {
    // Sending 3 rps at 8: the decrease to 4 is already above 90 % of the level.
    let mut a = Aimd::new(8.0, ts(0));
    a.set_sending(3.0);
    a.on_rate_limited(ts(0), None, &S);
    a.tick_shedding(secs(90), &S, true);
    assert!(close(a.effective(), 4.1), "{}", a.effective());
}

#[test]
fn a_429_inside_the_cooldown_does_not_move_the_level_and_the_level_is_saved() {
    let mut a = Aimd::new(8.0, ts(0));
    a.set_sending(5.5);
    a.on_rate_limited(secs(10), None, &S);
    // Re-planned at 4 rps; an echo of the same overload 1 s later.
    a.set_sending(2.8);
    assert!(!a.on_rate_limited(secs(11), None, &S).decreased);
    assert_eq!((a.last_429(), a.last_429_rps()), (Some(secs(11)), Some(5.5)));
    let saved = a.state();
    assert_eq!(saved.last_429_rps, Some(5.5));
    let b = Aimd::resume(8.0, &saved, secs(20));
    assert_eq!((b.last_429_rps(), b.state()), (Some(5.5), saved.clone()));
    // A level saved before it was kept (none), or nonsense, resumes as none.
    for level in [None, Some(f64::NAN), Some(-1.0)] {
        let old = AimdState {
            last_429_rps: level,
            ..saved.clone()
        };
        assert_eq!(Aimd::resume(8.0, &old, secs(20)).last_429_rps(), None);
    }
}

#[test]
fn a_decrease_that_recurs_recovers_at_the_additive_step_even_while_shedding() {
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    a.on_rate_limited(secs(60), None, &S);
    assert_eq!((a.effective(), a.recovery()), (2.5, Recovery::Additive));
    a.tick_shedding(secs(150), &S, true);
    assert!(close(a.effective(), 2.6), "{}", a.effective());
    // Once the 429s stop for 5 minutes, the next decrease may recover fast
    // again (nothing was sent, so no rate held: it halves).
    a.on_rate_limited(secs(60 + 301), None, &S);
    assert!(matches!(a.recovery(), Recovery::Fast { .. }));
}

#[test]
fn a_resumed_controller_goes_on_where_the_saved_one_stopped() {
    let mut a = Aimd::new(8.0, ts(0));
    a.on_rate_limited(secs(10), None, &S);
    a.tick_shedding(secs(70), &S, true);
    let saved = a.state();
    assert_eq!(saved.effective_rps, a.effective());
    assert_eq!(saved.at, secs(70));
    // Restarted 30 s later: the same budget, decrease and recovery.
    let mut b = Aimd::resume(8.0, &saved, secs(100));
    assert_eq!(b.state(), saved);
    assert_eq!((b.effective(), b.solved_with()), (a.effective(), a.effective()));
    // The 30 s it was down count as they would have (here: fast, shedding).
    a.tick_shedding(secs(100), &S, true);
    b.tick_shedding(secs(100), &S, true);
    assert!(close(a.effective(), b.effective()));
    // A budget lowered meanwhile caps it; one raised leaves a backed-off pool where it was.
    assert_eq!(Aimd::resume(3.0, &saved, secs(100)).effective(), 3.0);
    assert_eq!(Aimd::resume(20.0, &saved, secs(100)).effective(), saved.effective_rps);
    // Saved nonsense stays within [floor, configured]; times from the future are dropped.
    let odd = AimdState {
        effective_rps: f64::NAN,
        last_decrease: Some(secs(1_000)),
        recovery: Recovery::Fast {
            rps_per_minute: f64::INFINITY,
            until_rps: 1.0,
        },
        ..saved
    };
    let c = Aimd::resume(8.0, &odd, secs(100));
    assert_eq!(
        (c.effective(), c.last_decrease(), c.recovery()),
        (8.0, None, Recovery::Additive)
    );
}

#[test]
fn the_outlook_says_since_when_how_fast_and_when_the_budget_is_back() {
    let mut a = Aimd::new(10.0, ts(0));
    assert_eq!(a.outlook(ts(0), &S, true), None, "at the full budget");
    a.on_rate_limited(ts(0), None, &S);
    // Shedding: 2 rps a minute to 9 (2 min after the cooldown), then 0.1 a minute to 10 (10 min more).
    let o = a.outlook(secs(10), &S, true).expect("backed off");
    assert_eq!((o.since, o.rps_per_minute), (ts(0), 0.0), "in the cooldown");
    assert_eq!(o.full_at, Some(secs(30 + 120 + 600)));
    let o = a.outlook(secs(40), &S, true).expect("backed off");
    assert_eq!(o.rps_per_minute, 2.0);
    // Not shedding: 0.1 a minute all the way (50 min).
    let o = a.outlook(secs(40), &S, false).expect("backed off");
    assert_eq!(o.rps_per_minute, 0.1);
    assert_eq!(o.full_at, Some(secs(40 + 3000)));
    // No recovery configured: never back.
    let none = AimdSettings {
        recovery_rps_per_minute: 0.0,
        ..S
    };
    assert_eq!(a.outlook(secs(40), &none, false).and_then(|o| o.full_at), None);
    assert_eq!(a.outlook(secs(40), &AimdSettings { enabled: false, ..S }, false), None);
}

#[test]
fn retry_after_pauses_and_never_shortens() {
    let mut a = Aimd::new(10.0, ts(0));
    let sig = a.on_rate_limited(ts(0), Some(Duration::from_secs(10)), &S);
    assert_eq!(sig.paused_until, Some(secs(10)));
    assert_eq!(a.paused_until(secs(9)), Some(secs(10)));
    assert_eq!(a.paused_until(secs(10)), None);
    // A second 429 decreases; a shorter pause does not shorten the first.
    let sig = a.on_rate_limited(secs(1), Some(Duration::from_secs(2)), &S);
    assert!(sig.decreased);
    assert_eq!(sig.paused_until, Some(secs(10)));
    // Inside the cooldown: no decrease, the pause stays.
    let sig = a.on_rate_limited(secs(5), None, &S);
    assert!(!sig.decreased);
    assert_eq!(sig.paused_until, Some(secs(10)));
    // A longer one extends it.
    let sig = a.on_rate_limited(secs(5), Some(Duration::from_secs(20)), &S);
    assert_eq!(sig.paused_until, Some(secs(25)));
    // Once over, the signal reports no pause.
    let sig = a.on_rate_limited(secs(40), None, &S);
    assert_eq!(sig.paused_until, None);
}

#[test]
fn disabled_never_decreases_but_still_pauses() {
    let off = AimdSettings { enabled: false, ..S };
    let mut a = Aimd::new(10.0, ts(0));
    let sig = a.on_rate_limited(ts(0), Some(Duration::from_secs(3)), &off);
    assert_eq!(
        sig,
        RateSignal {
            decreased: false,
            paused_until: Some(secs(3)),
            resolve: false,
            lone: true,
        }
    );
    assert_eq!(a.effective(), 10.0);
    assert_eq!(a.last_decrease(), None);
    // Disabling after a decrease restores the configured budget at the next tick.
    a.on_rate_limited(secs(1), None, &S);
    assert_eq!(a.effective(), 5.0);
    a.mark_solved();
    assert!(a.tick(secs(2), &off));
    assert_eq!(a.effective(), 10.0);
}

#[test]
fn hysteresis_fifteen_percent_no_resolve_twenty_five_percent_resolve() {
    // Downward moves: multiplier 0.85 (−15 %) and 0.75 (−25 %).
    let mut a = Aimd::new(10.0, ts(0));
    let sig = a.on_rate_limited(
        ts(0),
        None,
        &AimdSettings {
            backoff_multiplier: 0.85,
            ..S
        },
    );
    assert!(sig.decreased && !sig.resolve);
    assert!(!a.tick(ts(1), &S));
    let mut a = Aimd::new(10.0, ts(0));
    let sig = a.on_rate_limited(
        ts(0),
        None,
        &AimdSettings {
            backoff_multiplier: 0.75,
            ..S
        },
    );
    assert!(sig.decreased && sig.resolve);
    a.mark_solved();
    assert_eq!(a.solved_with(), 7.5);
    assert!(!a.tick(ts(1), &S));

    // Upward moves by recovery: solved at 5, +15 % = 5.75 after 7.5 min, +25 % = 6.25 after 12.5 min.
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    a.mark_solved();
    assert_eq!(a.solved_with(), 5.0);
    assert!(!a.tick(ts(30_000 + 450_000), &S));
    assert!(close(a.effective(), 5.75));
    assert!(a.tick(ts(30_000 + 750_000), &S));
    assert!(close(a.effective(), 6.25));
    a.mark_solved();
    assert!(!a.tick(ts(30_000 + 750_001), &S));
}

#[test]
fn set_configured_rules() {
    // Not decreased: follows the operator both ways.
    let mut a = Aimd::new(10.0, ts(0));
    a.set_configured(20.0, ts(0));
    assert_eq!((a.configured(), a.effective()), (20.0, 20.0));
    a.set_configured(4.0, ts(0));
    assert_eq!((a.configured(), a.effective()), (4.0, 4.0));
    // Decreased: a raise keeps the backed-off value (recovery climbs to the new budget) ...
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    a.set_configured(20.0, ts(0));
    assert_eq!((a.configured(), a.effective()), (20.0, 5.0));
    a.tick(secs(30 + 60 * 1000), &S);
    assert_eq!(a.effective(), 20.0);
    // ... and a cut takes the minimum.
    let mut a = Aimd::new(10.0, ts(0));
    a.on_rate_limited(ts(0), None, &S);
    a.set_configured(8.0, ts(0));
    assert_eq!(a.effective(), 5.0);
    a.set_configured(3.0, ts(0));
    assert_eq!((a.configured(), a.effective()), (3.0, 3.0));
    // Degenerate budgets are taken as 0.
    a.set_configured(f64::NAN, ts(0));
    assert_eq!((a.configured(), a.effective()), (0.0, 0.0));
    let a = Aimd::new(-1.0, ts(0));
    assert_eq!((a.configured(), a.effective()), (0.0, 0.0));
}

#[test]
fn degenerate_settings_never_panic() {
    for (m, r) in [
        (f64::NAN, f64::NAN),
        (-3.0, -1.0),
        (7.0, f64::INFINITY),
        (f64::INFINITY, 0.0),
    ] {
        let s = AimdSettings {
            enabled: true,
            backoff_multiplier: m,
            recovery_rps_per_minute: r,
        };
        let mut a = Aimd::new(10.0, ts(0));
        a.on_rate_limited(ts(0), Some(Duration::MAX), &s);
        assert!(a.effective() >= a.floor() && a.effective() <= a.configured());
        a.tick(Timestamp(u64::MAX), &s);
        assert!(a.effective() >= a.floor() && a.effective() <= a.configured());
    }
}

/// `rps` requests a second sent from `from` to `to` (seconds), noted and
/// ticked every second, as the engine does.
fn send(a: &mut Aimd, from: u64, to: u64, rps: impl Fn(&Aimd) -> f64, s: &AimdSettings) {
    for t in from + 1..=to {
        let n = rps(a);
        a.note_sent(secs(t), n);
        a.tick(secs(t), s);
    }
}

#[test]
fn a_rate_holds_when_the_pool_sent_it_for_a_whole_probe_window_without_a_429() {
    let mut a = Aimd::new(8.0, secs(0));
    a.on_rate_limited(secs(0), None, &S);
    let flat = AimdSettings {
        recovery_rps_per_minute: 0.0,
        ..S
    };
    assert_eq!(
        (a.effective(), a.held_rps()),
        (4.0, None),
        "a 429 with nothing held halves"
    );
    // Nothing sent: a budget the pool never came near proves nothing.
    send(&mut a, 0, 60, |_| 0.0, &flat);
    assert_eq!(a.held_rps(), None);
    // 3 rps sent in the next window: 59 s of it is not a whole window, 60 s
    // is; what held is what was sent, not the budget.
    send(&mut a, 60, 119, |_| 3.0, &flat);
    assert_eq!(a.held_rps(), None);
    send(&mut a, 119, 120, |_| 3.0, &flat);
    assert!(a.held_rps().is_some_and(|h| close(h, 3.0)), "{:?}", a.held_rps());
    // More sent than the budget (a burst) holds only up to the budget.
    send(&mut a, 122, 200, |_| 6.0, &flat);
    assert_eq!(a.held_rps(), Some(4.0));
    // A 429 that only pauses (a lone one, after 5 quiet minutes) starts a
    // new window: what was sent before it counts for nothing.
    let mut b = Aimd::new(8.0, secs(0));
    send(&mut b, 0, 30, |_| 5.0, &flat);
    let sig = b.on_rate_limited(secs(30), Some(Duration::from_secs(1)), &flat);
    assert!(sig.lone && !sig.decreased);
    send(&mut b, 30, 89, |_| 5.0, &flat);
    assert_eq!(b.held_rps(), None, "less than a window since the 429");
    send(&mut b, 89, 91, |_| 5.0, &flat);
    assert!(b.held_rps().is_some_and(|h| close(h, 5.0)), "{:?}", b.held_rps());
}

#[test]
fn a_failed_probe_steps_back_to_the_rate_that_held_instead_of_halving() {
    let mut a = Aimd::new(8.0, secs(0));
    a.on_rate_limited(secs(0), None, &S);
    assert_eq!(a.effective(), 4.0);
    // Recovery probes upwards while the pool sends all it may; every whole
    // minute without a 429 raises the rate that held.
    send(&mut a, 0, 300, |a| a.effective(), &S);
    let held = a.held_rps().expect("a rate held");
    let probed = a.effective();
    assert!(probed > held && held > 4.0, "probed {probed}, held {held}");
    // The 429 of the probe: back to what held, not half of the probe.
    let sig = a.on_rate_limited(secs(301), None, &S);
    assert!(sig.decreased);
    assert_eq!(a.effective(), held, "stepped back to the rate that held");
    assert!(
        a.effective() > probed * S.backoff_multiplier,
        "halving would have gone lower"
    );
    assert_eq!(a.recovery(), Recovery::Additive);
    // No probing for a quiet spell: the limit is just above.
    send(&mut a, 301, 301 + 299, |a| a.effective(), &S);
    assert_eq!(a.effective(), held, "recovery waits AIMD_QUIET after a failed probe");
    // The rate that held and the quiet spell are saved with the state.
    let resumed = Aimd::resume(8.0, &a.state(), secs(600));
    assert_eq!((resumed.held_rps(), resumed.effective()), (a.held_rps(), held));
    let mut resumed = resumed;
    resumed.tick(secs(600), &S);
    assert_eq!(resumed.effective(), held, "a restart does not end the quiet spell");
    send(&mut a, 600, 660, |a| a.effective(), &S);
    assert!(a.effective() > held, "then it probes again, additively");
}

#[test]
fn a_pool_that_sheds_after_a_step_back_probes_on_through_the_quiet_spell() {
    let mut a = Aimd::new(8.0, secs(0));
    a.on_rate_limited(secs(0), None, &S);
    // It sheds, so it sends 3 rps of its 4 and more: 3 rps is what held.
    send(&mut a, 0, 120, |_| 3.0, &S);
    let held = a.held_rps().expect("3 rps held");
    let probed = a.effective();
    assert!(probed > 4.0, "{probed}");
    a.on_rate_limited(secs(121), None, &S);
    assert_eq!(a.effective(), held, "stepped back");
    // The limit lies between the 3 rps that held and the budget probed.
    // Shedding: its groups are data the operator does not get, so it
    // probes on, fast towards 90 % of the budget probed within 2 minutes
    // after the 30 s cooldown, then at the additive step; a pool that
    // does not shed waits out the quiet spell.
    let until = 0.9 * probed;
    let mut quiet = a.clone();
    quiet.tick_shedding(secs(121 + 150), &S, false);
    assert_eq!(quiet.effective(), held);
    let mut sheds = a.clone();
    sheds.tick_shedding(secs(121 + 90), &S, true);
    assert!(
        close(sheds.effective(), (held + until) / 2.0),
        "{} halfway",
        sheds.effective()
    );
    sheds.tick_shedding(secs(121 + 150), &S, true);
    assert!(close(sheds.effective(), until), "{} after 2 minutes", sheds.effective());
    sheds.tick_shedding(secs(121 + 210), &S, true);
    assert!(
        close(sheds.effective(), until + 0.1),
        "{} a minute later",
        sheds.effective()
    );
    // A probe that failed just above what held (the pool sent all it
    // could): 90 % of it is below the step-back, so the additive step.
    let mut b = Aimd::new(8.0, secs(0));
    b.on_rate_limited(secs(0), None, &S);
    send(&mut b, 0, 300, |b| b.effective(), &S);
    let held = b.held_rps().expect("a rate held");
    b.on_rate_limited(secs(301), None, &S);
    assert_eq!((b.effective(), b.recovery()), (held, Recovery::Additive));
    b.tick_shedding(secs(301 + 150), &S, true);
    assert!(close(b.effective(), held + 0.2), "{} after 2 minutes", b.effective());
}

#[test]
fn a_restart_in_a_quiet_spell_does_not_credit_the_spell_to_a_pool_that_sheds() {
    let mut a = Aimd::new(8.0, secs(0));
    a.on_rate_limited(secs(0), None, &S);
    send(&mut a, 0, 300, |a| a.effective(), &S);
    let held = a.held_rps().expect("a rate held");
    a.on_rate_limited(secs(301), None, &S);
    assert_eq!((a.effective(), a.recovery()), (held, Recovery::Additive));
    // Saved at the step-back; the budget stays put through the quiet spell,
    // so the row is not saved again. A restart 4 minutes later, shedding:
    // the spell earned nothing, so the budget goes on from the step-back.
    let saved = a.state();
    let mut b = Aimd::resume(8.0, &saved, secs(541));
    b.tick_shedding(secs(541), &S, true);
    assert_eq!(b.effective(), held, "the quiet spell is not credited");
    // From the restart on it probes on, as a running pool that sheds does.
    b.tick_shedding(secs(601), &S, true);
    assert!(close(b.effective(), held + 0.1), "{}", b.effective());
    // A restart after the spell ended credits only the time after it.
    let mut c = Aimd::resume(8.0, &saved, secs(301 + 300 + 60));
    c.tick_shedding(secs(301 + 300 + 60), &S, false);
    assert!(close(c.effective(), held + 0.1), "{}", c.effective());
}

#[test]
fn a_step_back_is_never_deeper_than_the_multiplicative_decrease() {
    // The pool sent 1 rps of its 8 for a minute: that held. A 429 that is
    // not lone then steps back, but not below half of the budget.
    let mut a = Aimd::new(8.0, secs(0));
    send(&mut a, 0, 61, |_| 1.0, &S);
    assert_eq!(a.held_rps(), Some(1.0));
    a.on_rate_limited(secs(70), None, &S);
    assert_eq!(a.effective(), 4.0);
}

#[test]
fn a_429_at_or_below_the_rate_that_held_still_halves_and_forgets_it() {
    let mut a = Aimd::new(8.0, secs(0));
    a.on_rate_limited(secs(0), None, &S);
    // A minute of sending 4 rps with additive recovery off: 4 rps held.
    let flat = AimdSettings {
        recovery_rps_per_minute: 0.0,
        ..S
    };
    send(&mut a, 0, 61, |_| 4.0, &flat);
    assert_eq!((a.effective(), a.held_rps()), (4.0, Some(4.0)));
    // The room shrank: a 429 at the rate that held halves, as the seed does.
    let sig = a.on_rate_limited(secs(62), None, &flat);
    assert!(sig.decreased);
    assert_eq!(a.effective(), 2.0);
    assert_eq!(a.held_rps(), None, "what held no longer does");
    // The seed's bounds still hold: one decrease per cooldown, the 0.5 rps floor.
    a.on_rate_limited(secs(70), None, &flat);
    assert_eq!(a.effective(), 2.0, "one decrease per 30 s");
    a.on_rate_limited(secs(92), None, &flat);
    a.on_rate_limited(secs(122), None, &flat);
    a.on_rate_limited(secs(152), None, &flat);
    assert_eq!(a.effective(), AIMD_FLOOR_RPS);
}

/// The fake API of the storm test: `limit` requests per aligned 1 s window, 429 beyond.
struct FakeApi {
    limit: u32,
    window: u64,
    count: u32,
}

impl FakeApi {
    /// `true` = 200, `false` = 429.
    fn request(&mut self, now_ms: u64) -> bool {
        let w = now_ms / 1000;
        if w != self.window {
            self.window = w;
            self.count = 0;
        }
        self.count += 1;
        self.count <= self.limit
    }
}

/// Simulates `minutes` minutes of a pool configured at 10 rps against an API that allows 4 rps.
/// Returns (429s per minute, effective budget at the end of each minute, re-solves per minute).
fn storm(minutes: usize) -> (Vec<u32>, Vec<f64>, Vec<u32>) {
    const STEP_MS: u64 = 100;
    let mut a = Aimd::new(10.0, Timestamp(0));
    let mut api = FakeApi {
        limit: 4,
        window: 0,
        count: 0,
    };
    let mut credit = 0.0;
    let mut per_minute = vec![0u32; minutes];
    let mut resolves = vec![0u32; minutes];
    let mut effective = Vec::new();
    let mut now = 0u64;
    while now < minutes as u64 * 60_000 {
        let minute = (now / 60_000) as usize;
        if a.tick(Timestamp(now), &S) {
            a.mark_solved();
            resolves[minute] += 1;
        }
        // A paused pool sends nothing and accrues no credit (no burst after the pause).
        if a.paused_until(Timestamp(now)).is_none() {
            credit += a.effective() * (STEP_MS as f64 / 1000.0);
            while credit >= 1.0 {
                credit -= 1.0;
                if !api.request(now) {
                    per_minute[minute] += 1;
                    let sig = a.on_rate_limited(Timestamp(now), Some(Duration::from_secs(1)), &S);
                    if sig.resolve {
                        a.mark_solved();
                        resolves[minute] += 1;
                    }
                    credit = 0.0;
                    break;
                }
            }
        }
        now += STEP_MS;
        if now.is_multiple_of(60_000) {
            effective.push(a.effective());
        }
    }
    (per_minute, effective, resolves)
}

#[test]
fn storm_settles_below_the_real_limit() {
    let (per_minute, effective, resolves) = storm(20);
    println!("429s per minute (1..=20): {per_minute:?}");
    println!("effective at end of minute: {effective:.3?}");
    println!("re-solves per minute: {resolves:?}");
    // 10 → 5 at the first 429, 5 → 2.5 after the 30 s cooldown: the first minute has the 429s.
    assert!(per_minute[0] > 0);
    // Recovery from 2.5 at 0.1 rps/min needs 15 min to reach 4 rps again: minutes 2..=10 are quiet.
    assert_eq!(per_minute[4], 0, "minute 5 must have no 429s");
    assert!(per_minute[1..10].iter().all(|&n| n == 0), "{per_minute:?}");
    assert!(effective[0] < 4.0);
}

#[derive(Debug, Clone)]
enum Op {
    Tick(bool),
    RateLimited(Option<u64>),
    SetConfigured(f64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<bool>().prop_map(Op::Tick),
        4 => prop_oneof![Just(None), (0u64..=60_000).prop_map(Some)].prop_map(Op::RateLimited),
        1 => prop_oneof![0.0f64..1.0, 0.0f64..50.0].prop_map(Op::SetConfigured),
    ]
}

proptest! {
    /// Effective always within [min(0.5, configured), configured]; never increases on a 429; 429-driven
    /// decreases are at least 30 s apart (at most one per any 30 s window); pauses never shorten.
    #[test]
    fn invariants_hold_for_any_sequence(
        configured in prop_oneof![0.01f64..1.0, 0.5f64..100.0],
        multiplier in prop_oneof![Just(0.5), 0.0f64..=1.0],
        recovery in prop_oneof![Just(0.1), 0.0f64..10.0],
        steps in proptest::collection::vec((0u64..40_000, op(), any::<bool>()), 1..200),
    ) {
        let mut now = T0;
        let mut a = Aimd::new(configured, Timestamp(now));
        let mut last_decrease: Option<u64> = None;
        let mut pause: Option<u64> = None;
        for (dt, op, enabled) in steps {
            now += dt;
            let s = AimdSettings { enabled, backoff_multiplier: multiplier, recovery_rps_per_minute: recovery };
            let before = a.effective();
            match op {
                Op::Tick(shedding) => {
                    a.tick_shedding(Timestamp(now), &s, shedding);
                }
                Op::RateLimited(ra) => {
                    let sig = a.on_rate_limited(Timestamp(now), ra.map(Duration::from_millis), &s);
                    prop_assert!(a.effective() <= before, "429 raised {before} to {}", a.effective());
                    prop_assert_eq!(sig.decreased, a.effective() < before);
                    if sig.decreased {
                        prop_assert!(enabled);
                        if let Some(prev) = last_decrease {
                            prop_assert!(now - prev >= 30_000, "decreases at {prev} and {now}");
                        }
                        last_decrease = Some(now);
                    }
                    if let Some(ra) = ra {
                        pause = Some(pause.map_or(now + ra, |p| p.max(now + ra)));
                    }
                    let expected = pause.filter(|&p| now < p).map(Timestamp);
                    prop_assert_eq!(sig.paused_until, expected);
                }
                Op::SetConfigured(rps) => a.set_configured(rps, Timestamp(now)),
            }
            let floor = AIMD_FLOOR_RPS.min(a.configured());
            prop_assert!(
                a.effective() >= floor && a.effective() <= a.configured(),
                "effective {} outside [{floor}, {}]", a.effective(), a.configured(),
            );
            prop_assert_eq!(a.paused_until(Timestamp(now)), pause.filter(|&p| now < p).map(Timestamp));
        }
    }
}

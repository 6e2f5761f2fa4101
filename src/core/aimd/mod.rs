//! AIMD (additive-increase / multiplicative-decrease) controller of one budget pool's effective rate.
//!
//! Purpose: when an API answers HTTP 429, back the pool off quickly; when it stops complaining, probe back
//! up slowly towards the operator's configured budget. The effective budget feeds the pool's token bucket
//! and the scheduling plan; big moves ask for the plan to be re-solved.
//!
//! Rules (product spec):
//! - On a 429 (when enabled) the effective budget is multiplied by `backoff_multiplier` (default 0.5) and
//!   floored at `min(AIMD_FLOOR_RPS, configured)`: the floor can never RAISE the rate (a pool configured at
//!   0.2 rps stays at 0.2, it is not lifted to 0.5). A 429 never increases the effective budget.
//! - At most one decrease per [`AIMD_COOLDOWN`] (30 s): a 429 less than 30 s after the last decrease does
//!   not decrease again (one at exactly 30 s does). The cooldown restarts on every 429 that is outside it,
//!   even when the floor left the value unchanged, so a pool hammered at its floor does not start to
//!   recover.
//! - `Retry-After` (parsed and capped at 60 s by the caller) pauses the pool until `now + retry_after`,
//!   never shortening an existing pause; this applies even when AIMD is disabled.
//! - **A lone 429 pauses, it does not halve.** A 429 that carries `Retry-After` and comes when the pool had
//!   no 429 for [`AIMD_QUIET`] (5 min) only pauses the pool: the server said when to come back, and one
//!   429 in a quiet pool is a burst that met someone else's burst, not a budget that is too high. The next
//!   429 within [`AIMD_QUIET`] of it decreases as above (429s that recur are a budget that is too high).
//! - Otherwise the budget recovers additively by `recovery_rps_per_minute` (default 0.1), continuously in
//!   proportion to elapsed time, up to the configured budget and never above it.
//! - **Fast recovery.** After a decrease that did not recur (no other decrease in the [`AIMD_QUIET`] before
//!   it), while no further 429 arrives and the pool is shedding groups, the budget recovers faster: at the
//!   rate that would win back, in [`FAST_RECOVERY`] (2 min), what the decrease took below
//!   [`FAST_RECOVERY_CEILING`] (90 %) of the *level of the 429*; never slower than
//!   `recovery_rps_per_minute`, and only up to that 90 % (then the additive step again). A decrease that
//!   recurs keeps the slow additive step.
//! - **The level of a 429** is the rate the pool was sending when it came: what the plan in force let it
//!   send ([`Aimd::set_sending`], its demand after stretching and shedding), at most the budget in force.
//!   Not the budget: a pool planned at 70 % of it never used the rest, so a 429 says nothing about that
//!   rest, and probing back to 90 % of the budget went past the API's limit (scenario B: a decrease at
//!   8 rps while sending about 5, the org leaving 4; fast recovery towards 7.2 drew a second 429 round).
//!   Kept as [`Aimd::last_429_rps`] (a 429 inside the cooldown is an echo of the one that decreased and
//!   does not move it) and saved with the state.
//! - CHOICE: recovery only starts once the 30 s cooldown after the last decrease has passed; time inside
//!   the cooldown earns nothing. Recovery accrued since the last [`Aimd::tick`] is forfeited when a 429
//!   causes a decrease (the 429 shows the pool was already too fast), which also guarantees that a 429
//!   never raises the rate.
//! - **A failed probe steps back.** The rate that held is the highest rate the pool really sent (its
//!   busiest [`SEND_SLICE`] of 20 s, [`Aimd::note_sent`]) in a whole [`PROBE_WINDOW`] (1 min) with no 429
//!   at all, up to the budget in force at the window's start: a budget the pool never came near proves
//!   nothing about the API. A 429 that decreases while the budget is above it (the pool was probing for
//!   more) steps back to that rate instead of halving, never deeper than the multiplicative decrease: the
//!   limit lies between the two, and halving threw away what had held (scenario B: 5.06 → 2.54 rps with 4
//!   rps of room). Recovery then waits [`AIMD_QUIET`] (5 min) before it probes again, so a limit just above
//!   the held rate costs one 429 per quiet spell, not one a minute, unless the pool sheds groups: shed
//!   groups are data the operator does not get, so it probes on, with fast recovery towards 90 % of the
//!   budget the failed probe ran at (a probe tests its budget, so the limit lies below it; the rate that
//!   held, measured from what a pool that sheds sends, can lie well below the limit: 3.2 rps held where
//!   the API left 4), then at the additive step. A 429 at or below the rate that held still halves (the room shrank) and forgets that
//!   rate. The rate and the quiet spell are saved with the state.
//! - Hysteresis: a re-solve of the plan is due only when the effective budget has moved by MORE than
//!   [`RESOLVE_HYSTERESIS`] (20 %) relative to the budget the plan was last solved with.
//! - Disabled (`enabled == false`): 429s never decrease, and the next `tick` restores the effective budget
//!   to the configured one (the controller has no say); Retry-After still pauses.
//! - Degenerate inputs never panic: a negative or non-finite configured budget is taken as 0; a backoff
//!   multiplier that is NaN is taken as the default 0.5, otherwise clamped to [0, 1]; a NaN or negative
//!   recovery is taken as 0.
//! - The module is pure: no clock reads, no I/O, no randomness; time comes in as [`Timestamp`] arguments.

use crate::model::Timestamp;
use std::time::Duration;

/// Minimum spacing between two decreases; recovery starts only after it.
pub const AIMD_COOLDOWN: Duration = Duration::from_secs(30);
/// The floor of the effective budget, unless the configured budget is lower (then that is the floor).
pub const AIMD_FLOOR_RPS: f64 = 0.5;
/// Relative move of the effective budget (vs. the one last solved with) above which a re-solve is due.
pub const RESOLVE_HYSTERESIS: f64 = 0.2;
/// Default multiplier applied on a 429.
pub const DEFAULT_BACKOFF_MULTIPLIER: f64 = 0.5;
/// Default additive recovery, in requests per second gained per minute.
pub const DEFAULT_RECOVERY_RPS_PER_MINUTE: f64 = 0.1;
/// A 429 with `Retry-After` this long after the previous 429 (or the first one) only pauses the pool; a
/// decrease this soon after the previous decrease recurs (and recovers slowly).
pub const AIMD_QUIET: Duration = Duration::from_secs(5 * 60);
/// Fast recovery wins back what a decrease took in this time.
pub const FAST_RECOVERY: Duration = Duration::from_secs(2 * 60);
/// Fast recovery stops at this share of the budget the last decrease came at.
pub const FAST_RECOVERY_CEILING: f64 = 0.9;
/// A budget in force this long with no 429 at all is a rate that held.
pub const PROBE_WINDOW: Duration = Duration::from_secs(60);
/// What the pool sends is measured over slices this long; a probe window's peak is its busiest slice. Long
/// enough that an API's burst allowance spent in one slice does not pass for a rate (10 s slices took a
/// 10-request burst as 1 rps more than the room).
pub const SEND_SLICE: Duration = Duration::from_secs(20);

/// Operator settings of the controller (shared by all pools).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AimdSettings {
    pub enabled: bool,
    pub backoff_multiplier: f64,
    pub recovery_rps_per_minute: f64,
}

impl Default for AimdSettings {
    fn default() -> Self {
        AimdSettings {
            enabled: true,
            backoff_multiplier: DEFAULT_BACKOFF_MULTIPLIER,
            recovery_rps_per_minute: DEFAULT_RECOVERY_RPS_PER_MINUTE,
        }
    }
}

impl AimdSettings {
    fn multiplier(&self) -> f64 {
        if self.backoff_multiplier.is_nan() {
            DEFAULT_BACKOFF_MULTIPLIER
        } else {
            self.backoff_multiplier.clamp(0.0, 1.0)
        }
    }

    fn recovery_per_ms(&self) -> f64 {
        // `NaN > 0.0` is false: NaN and negatives recover nothing; +inf jumps straight to the cap.
        if self.recovery_rps_per_minute > 0.0 {
            self.recovery_rps_per_minute / 60_000.0
        } else {
            0.0
        }
    }
}

/// AIMD state of one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Aimd {
    /// Operator's budget (rps, ≥ 0).
    configured: f64,
    /// Budget in force (rps), always within `[floor(), configured]`.
    effective: f64,
    /// Last 429 that was outside the cooldown (and so applied a backoff).
    last_decrease: Option<Timestamp>,
    /// Recovery has been accounted up to here.
    last_tick: Timestamp,
    /// Effective budget the plan was last solved with.
    solved_with: f64,
    /// Dispatch of this pool is paused until then (never shortened).
    paused_until: Option<Timestamp>,
    /// The last 429, whatever it did.
    last_429: Option<Timestamp>,
    /// How the budget recovers since the last decrease.
    recovery: Recovery,
    /// What the plan in force lets the pool send (rps); the configured budget until a plan says.
    sending: f64,
    /// The level of the last 429 outside the cooldown: the rate the pool was sending then (rps).
    last_429_rps: Option<f64>,
    /// The highest budget that was in force for a whole [`PROBE_WINDOW`] with no 429 (rps).
    held_rps: Option<f64>,
    /// The probe window in progress: since when, the budget in force at its start, and the highest rate the
    /// pool sent in one of its [`SEND_SLICE`]s.
    window_from: Timestamp,
    window_rps: f64,
    window_peak: f64,
    /// The send slice in progress: since when, and the requests sent in it.
    slice_from: Timestamp,
    slice_sent: f64,
    /// After a failed probe, recovery waits until then.
    probe_after: Option<Timestamp>,
    /// Carried for the engine (see [`AimdState::announced`]).
    announced: Announced,
}

/// How the budget recovers after a decrease.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Recovery {
    /// The additive step only (no decrease yet, or decreases that recur).
    Additive,
    /// Faster while the pool sheds groups: `rps_per_minute` up to `until_rps`.
    Fast { rps_per_minute: f64, until_rps: f64 },
}

/// What of a pool's AIMD state outlives a restart: without it every restart
/// would probe an overloaded API at the full budget again.
#[derive(Debug, Clone, PartialEq)]
pub struct AimdState {
    /// The budget configured when it was saved (rps).
    pub configured_rps: f64,
    /// The budget in force (rps).
    pub effective_rps: f64,
    pub last_decrease: Option<Timestamp>,
    pub last_429: Option<Timestamp>,
    /// The level of the last 429 (rps): the rate the pool was sending when it came.
    pub last_429_rps: Option<f64>,
    /// The highest budget that held for a whole probe window (rps).
    pub held_rps: Option<f64>,
    /// After a failed probe, recovery waits until then.
    pub probe_after: Option<Timestamp>,
    /// The recovery in progress.
    pub recovery: Recovery,
    /// Recovery was accounted up to here.
    pub at: Timestamp,
    /// The pool's plan as last announced (kept here for the engine, which
    /// announces transitions: a restart does not announce it again).
    pub announced: Announced,
}

/// A pool's plan as last announced in the log and by pool events: over
/// budget or not, and the `type/group` names it sheds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announced {
    pub over_budget: bool,
    pub shed: Vec<String>,
}

/// Where a backed-off pool stands: for the status page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outlook {
    /// The last decrease.
    pub since: Timestamp,
    /// How fast the budget recovers now (requests per second per minute; 0 during the cooldown).
    pub rps_per_minute: f64,
    /// When it would be back at the configured budget if no 429 comes and the pool keeps shedding (or
    /// not) as now; `None` when it does not recover.
    pub full_at: Option<Timestamp>,
}

/// What a 429 did to the pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSignal {
    /// The effective budget went down.
    pub decreased: bool,
    /// The pool's dispatch is paused until then (`None` when no pause is in force at `now`).
    pub paused_until: Option<Timestamp>,
    /// The effective budget moved by more than the hysteresis since the last solve: re-solve the plan.
    pub resolve: bool,
    /// A lone 429 (with `Retry-After`, after a quiet spell): it paused the pool and did nothing else.
    pub lone: bool,
}

/// Fast recovery from `effective` up to `until_rps`, winning it back in [`FAST_RECOVERY`]; the additive step
/// alone when `until_rps` is not above `effective`.
fn fast_towards(until_rps: f64, effective: f64) -> Recovery {
    let lost = until_rps - effective;
    if lost > 1e-9 {
        Recovery::Fast {
            rps_per_minute: lost * 60.0 / FAST_RECOVERY.as_secs_f64(),
            until_rps,
        }
    } else {
        Recovery::Additive
    }
}

fn sanitize_configured(rps: f64) -> f64 {
    if rps.is_finite() && rps > 0.0 { rps } else { 0.0 }
}

impl Aimd {
    /// A controller at full budget: effective = solved_with = configured.
    pub fn new(configured_rps: f64, now: Timestamp) -> Self {
        let configured = sanitize_configured(configured_rps);
        Aimd {
            configured,
            effective: configured,
            last_decrease: None,
            last_tick: now,
            solved_with: configured,
            paused_until: None,
            last_429: None,
            recovery: Recovery::Additive,
            sending: configured,
            last_429_rps: None,
            held_rps: None,
            window_from: now,
            window_rps: configured,
            window_peak: 0.0,
            slice_from: now,
            slice_sent: 0.0,
            probe_after: None,
            announced: Announced::default(),
        }
    }

    /// A pool's controller resumed from its saved state, at `configured_rps` now configured: the saved
    /// effective budget (within `[floor, configured]`; a budget changed meanwhile as
    /// [`Self::set_configured`] takes it), the time of the last decrease and of the last 429, and the
    /// recovery in progress. The time Pollster was stopped counts for recovery from `state.at`, as if it
    /// had run: the first [`Self::tick`] credits it (the cooldown still applies).
    pub fn resume(configured_rps: f64, state: &AimdState, now: Timestamp) -> Self {
        let mut a = Aimd::new(state.configured_rps, now);
        if state.effective_rps.is_finite() {
            a.effective = state.effective_rps.clamp(a.floor(), a.configured);
        }
        a.last_decrease = state.last_decrease.filter(|&d| d <= now);
        a.last_429 = state.last_429.filter(|&t| t <= now);
        a.last_429_rps = state.last_429_rps.filter(|r| r.is_finite() && *r >= 0.0);
        a.held_rps = state.held_rps.filter(|r| r.is_finite() && *r >= 0.0);
        // A quiet spell ends at most AIMD_QUIET from now (a clock that went back).
        a.probe_after = state
            .probe_after
            .filter(|&p| p > now)
            .map(|p| p.min(now.plus(AIMD_QUIET)));
        a.announced = state.announced.clone();
        a.recovery = match state.recovery {
            Recovery::Fast {
                rps_per_minute,
                until_rps,
            } if rps_per_minute.is_finite() && until_rps.is_finite() && rps_per_minute >= 0.0 => state.recovery,
            _ => Recovery::Additive,
        };
        a.last_tick = state.at.min(now);
        // A quiet spell in force when the state was saved earns nothing, also while stopped: the state is
        // saved when the budget moves, and it stays put through a quiet spell, so crediting the time since
        // then to a pool that sheds at the restart would jump its budget past the failed probe.
        if let Some(p) = state.probe_after.filter(|&p| p > state.at) {
            a.last_tick = a.last_tick.max(p.min(now));
        }
        a.set_configured(configured_rps, now);
        a.solved_with = a.effective;
        a.window_rps = a.effective;
        a
    }

    /// Where the pool stands while AIMD holds it below its budget (`None` at the full budget, or when
    /// AIMD is off). `shedding` as for [`Self::tick_shedding`].
    pub fn outlook(&self, now: Timestamp, s: &AimdSettings, shedding: bool) -> Option<Outlook> {
        let since = self.last_decrease?;
        if !s.enabled || self.effective >= self.configured {
            return None;
        }
        let additive = s.recovery_rps_per_minute.max(0.0);
        let additive = if additive.is_finite() { additive } else { 0.0 };
        let cooldown_ends = since.plus(AIMD_COOLDOWN);
        let (fast, until) = match self.recovery {
            Recovery::Fast {
                rps_per_minute,
                until_rps,
            } if shedding && self.effective < until_rps => {
                (rps_per_minute.max(additive), until_rps.min(self.configured))
            }
            _ => (additive, self.effective),
        };
        let rps_per_minute = if now < cooldown_ends { 0.0 } else { fast };
        let minutes = |rps: f64, rate: f64| {
            if rps <= 0.0 {
                Some(0.0)
            } else {
                (rate > 0.0).then(|| rps / rate)
            }
        };
        let full_at = minutes(until - self.effective, fast)
            .zip(minutes(self.configured - until.max(self.effective), additive))
            .map(|(a, b)| {
                now.max(cooldown_ends)
                    .plus(Duration::from_secs_f64(((a + b) * 60.0).min(1e9)))
            });
        Some(Outlook {
            since,
            rps_per_minute,
            full_at,
        })
    }

    /// What to save of this controller (see [`AimdState`]).
    pub fn state(&self) -> AimdState {
        AimdState {
            configured_rps: self.configured,
            effective_rps: self.effective,
            last_decrease: self.last_decrease,
            last_429: self.last_429,
            last_429_rps: self.last_429_rps,
            held_rps: self.held_rps,
            probe_after: self.probe_after,
            recovery: self.recovery,
            at: self.last_tick,
            announced: self.announced.clone(),
        }
    }

    /// The operator's configured budget (rps).
    pub fn configured(&self) -> f64 {
        self.configured
    }

    /// The budget in force (rps).
    pub fn effective(&self) -> f64 {
        self.effective
    }

    /// The lowest the effective budget can go: `min(AIMD_FLOOR_RPS, configured)`.
    pub fn floor(&self) -> f64 {
        AIMD_FLOOR_RPS.min(self.configured)
    }

    /// Feed an HTTP 429. Decreases the effective budget (unless disabled or within the cooldown) and applies
    /// `retry_after` as a pause from `now` (also when disabled; never shortening an existing pause).
    pub fn on_rate_limited(&mut self, now: Timestamp, retry_after: Option<Duration>, s: &AimdSettings) -> RateSignal {
        if let Some(ra) = retry_after {
            let until = now.plus(ra);
            self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
        }
        let mut decreased = false;
        let lone = retry_after.is_some() && self.last_429.is_none_or(|t| now.since(t) >= AIMD_QUIET);
        self.last_429 = Some(now);
        // What the pool was sending: the plan's rate, never above the budget in force.
        let level = self.sending.min(self.effective);
        if !self.in_cooldown(now) {
            self.last_429_rps = Some(level);
        }
        if s.enabled && !lone && !self.in_cooldown(now) {
            let before = self.effective;
            let recurs = self.last_decrease.is_some_and(|d| now.since(d) < AIMD_QUIET);
            match self.held_rps {
                // A failed probe: back to the rate that held, and no probing for a quiet spell.
                // Never deeper than the multiplicative decrease would go.
                Some(held) if before > held + 1e-9 => {
                    self.effective = held.max(before * s.multiplier()).clamp(self.floor(), before);
                    self.recovery = fast_towards(FAST_RECOVERY_CEILING * before, self.effective);
                    self.probe_after = Some(now.plus(AIMD_QUIET));
                }
                _ => {
                    let backed_off = (before * s.multiplier()).max(self.floor());
                    // `min(before)`: the floor can never raise the rate (e.g. configured 0.2 < AIMD_FLOOR_RPS).
                    self.effective = backed_off.min(before).clamp(self.floor(), self.configured);
                    // The room shrank below what held: that rate is no longer known to hold.
                    self.held_rps = None;
                    self.probe_after = None;
                    self.recovery = if recurs {
                        Recovery::Additive
                    } else {
                        fast_towards(FAST_RECOVERY_CEILING * level, self.effective)
                    };
                }
            }
            decreased = self.effective < before;
            self.last_decrease = Some(now);
            // Recovery since the last tick is forfeited (see module docs).
            self.last_tick = self.last_tick.max(now);
        }
        // Every 429 starts a new probe window: a rate holds only for a whole one without any.
        self.window_from = now;
        self.window_rps = self.effective;
        self.window_peak = 0.0;
        self.slice_from = now;
        self.slice_sent = 0.0;
        RateSignal {
            decreased,
            paused_until: self.paused_until(now),
            resolve: self.resolve_due(),
            lone,
        }
    }

    fn in_cooldown(&self, now: Timestamp) -> bool {
        self.last_decrease.is_some_and(|d| now.since(d) < AIMD_COOLDOWN)
    }

    /// Apply recovery from the last tick up to `now`. Returns true if a re-solve is due (the effective
    /// budget moved by more than [`RESOLVE_HYSTERESIS`] relative to [`Self::solved_with`]).
    pub fn tick(&mut self, now: Timestamp, s: &AimdSettings) -> bool {
        self.tick_shedding(now, s, false)
    }

    /// [`Self::tick`] for a pool that sheds groups or plans more than its budget carries (`shedding`), or
    /// not: fast recovery, and probing through a quiet spell, apply only while it does (see the module docs).
    pub fn tick_shedding(&mut self, now: Timestamp, s: &AimdSettings, shedding: bool) -> bool {
        if !s.enabled {
            self.effective = self.configured;
        } else {
            // Recovery only counts time after the cooldown following the last decrease, and after the
            // quiet spell that follows a failed probe.
            let start = match self.last_decrease {
                Some(d) => self.last_tick.max(d.plus(AIMD_COOLDOWN)),
                None => self.last_tick,
            };
            // A pool that sheds probes on: its shed groups are data the operator does not get.
            let start = match self.probe_after {
                Some(p) if !shedding => start.max(p),
                _ => start,
            };
            if now > start {
                let ms = now.since(start).as_millis() as f64;
                let additive = s.recovery_per_ms() * ms;
                let mut next = self.effective + additive;
                if let Recovery::Fast {
                    rps_per_minute,
                    until_rps,
                } = self.recovery
                    && shedding
                    && self.effective < until_rps
                {
                    // Fast up to `until_rps`, never slower than the additive step.
                    let fast = self.effective + rps_per_minute / 60_000.0 * ms;
                    next = next.max(fast.min(until_rps));
                }
                if next > self.effective {
                    self.effective = next.min(self.configured);
                }
            }
            // A whole window without a 429: the rate the pool sent at its busiest held, up to the budget
            // in force at the window's start (a budget the pool never came near proves nothing).
            if now.since(self.window_from) >= PROBE_WINDOW && now > self.window_from {
                let held = self.window_peak.min(self.window_rps);
                if held > 0.0 {
                    self.held_rps = Some(self.held_rps.map_or(held, |h| h.max(held)));
                }
                self.window_from = now;
                self.window_rps = self.effective;
                self.window_peak = 0.0;
            }
        }
        self.last_tick = self.last_tick.max(now);
        self.resolve_due()
    }

    fn resolve_due(&self) -> bool {
        if self.solved_with > 0.0 {
            (self.effective - self.solved_with).abs() > RESOLVE_HYSTERESIS * self.solved_with
        } else {
            self.effective != self.solved_with
        }
    }

    /// The plan was re-solved with the current effective budget.
    pub fn mark_solved(&mut self) {
        self.solved_with = self.effective;
    }

    /// The plan in force lets the pool send `rps` (its demand after stretching and shedding): the level
    /// of the next 429 (see the module docs). Nonsense (negative, NaN) is taken as the budget.
    pub fn set_sending(&mut self, rps: f64) {
        self.sending = if rps.is_finite() && rps >= 0.0 {
            rps
        } else {
            self.configured
        };
    }

    /// The effective budget the plan was last solved with.
    pub fn solved_with(&self) -> f64 {
        self.solved_with
    }

    /// The operator changed the budget to `rps`:
    /// - lowered: effective = min(effective, rps) (a backed-off pool stays backed off);
    /// - raised: effective = rps if AIMD had not decreased it (effective == old configured), otherwise it
    ///   stays where it is and recovers towards the new budget at the usual pace.
    ///
    /// Recovery is not applied here (it needs the settings): call [`Self::tick`] first to credit it up to
    /// `now`. The cooldown, the pause and `solved_with` are unchanged (a big move shows up as a re-solve on
    /// the next `tick`). `now` is accepted for API symmetry; these rules do not need it.
    pub fn set_configured(&mut self, rps: f64, _now: Timestamp) {
        let rps = sanitize_configured(rps);
        let not_decreased = self.effective >= self.configured;
        self.configured = rps;
        self.effective = if not_decreased { rps } else { self.effective.min(rps) };
        self.effective = self.effective.clamp(self.floor(), self.configured);
    }

    /// `Some(until)` while the pool is paused by a Retry-After (`now < until`), else `None`.
    pub fn paused_until(&self, now: Timestamp) -> Option<Timestamp> {
        self.paused_until.filter(|&p| now < p)
    }

    /// The last 429 that applied a backoff (outside the cooldown), if any.
    pub fn last_decrease(&self) -> Option<Timestamp> {
        self.last_decrease
    }

    /// The last 429, whether it decreased the budget or only paused the pool.
    pub fn last_429(&self) -> Option<Timestamp> {
        self.last_429
    }

    /// The level of the last 429 outside the cooldown: the rate the pool was sending when it came.
    pub fn last_429_rps(&self) -> Option<f64> {
        self.last_429_rps
    }

    /// How the budget recovers since the last decrease.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// The pool dispatched `requests` since the last call, up to `now`: each [`SEND_SLICE`] gives a rate,
    /// and the busiest slice of a probe window is what that window shows the API accepted.
    pub fn note_sent(&mut self, now: Timestamp, requests: f64) {
        if requests.is_finite() && requests > 0.0 {
            self.slice_sent += requests;
        }
        let elapsed = now.since(self.slice_from);
        if elapsed >= SEND_SLICE {
            self.window_peak = self.window_peak.max(self.slice_sent / elapsed.as_secs_f64());
            self.slice_from = now;
            self.slice_sent = 0.0;
        }
    }

    /// The pool's plan as last announced.
    pub fn announced(&self) -> &Announced {
        &self.announced
    }

    /// The engine announced the pool's plan as `announced`.
    pub fn set_announced(&mut self, announced: Announced) {
        self.announced = announced;
    }

    /// The highest budget that held for a whole [`PROBE_WINDOW`] with no 429, if one is known.
    pub fn held_rps(&self) -> Option<f64> {
        self.held_rps
    }
}

#[cfg(test)]
mod tests;

//! What a torture run saw, and how it prints.

use super::schedule::{NOISE_SIGMAS, PREDICTION_SLACK};
use std::fmt;
use std::time::Duration;

/// What a run saw. `violations` empty means every check passed.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub seed: u64,
    pub instances: usize,
    pub kills: usize,
    pub early_kills: usize,
    pub restarts_ok: usize,
    /// (entry, restart) pairs checked present after a restart.
    pub entries_checked: u64,
    /// Distinct entries acknowledged that had to survive.
    pub entries_acknowledged: usize,
    /// (entry, kill) pairs checked in the file offline after a kill.
    pub offline_checked: u64,
    /// Acknowledged entries not found after a restart, or while running
    /// (each lost entry counted once).
    pub missing: u64,
    /// (entry, kill) pairs not found in the file offline.
    pub offline_missing: u64,
    /// Entries of flapping targets acknowledged (not required to stay).
    pub flapping_acknowledged: usize,
    pub discards: usize,
    pub discard_checks: u64,
    pub discards_lost: u64,
    pub retries: usize,
    pub retry_checks: u64,
    pub retries_lost: u64,
    pub refused_actions: usize,
    pub flips: usize,
    pub max_dead_letter: usize,
    /// Server runs checked against the stored schedule.
    pub rate_checks: usize,
    /// Busiest window of first polls after a restart ÷ the busiest the
    /// stored schedule predicts.
    pub max_first_poll_ratio: f64,
    /// Busiest window of first polls ÷ what it was allowed (must stay ≤ 1).
    pub max_of_allowed: f64,
    pub first_poll_ratios: Vec<f64>,
    /// Tasks the schedule said were due while a run was watched, and how
    /// many of them were not polled.
    pub resume_checked: usize,
    pub resume_unpolled: usize,
    /// Longest time from ready to the first poll.
    pub max_first_poll: Duration,
    /// The fleet's total request rate after restarts (busiest window; not
    /// a check: it also counts retries of failing targets and moves with
    /// the cadence): the highest, and each run's ÷ the steady peak.
    pub max_rate_rps: f64,
    pub max_ratio: f64,
    pub ratios: Vec<f64>,
    /// Configured rate: tasks not discarded ÷ floor, at the end.
    pub configured_rps: f64,
    /// Measured over `floor` with no kill, before the first kill and after
    /// the last restart: the average, and the highest rate over `window`
    /// (the steady peak).
    pub measured_before_rps: f64,
    pub measured_after_rps: f64,
    pub peak_before_rps: f64,
    pub peak_after_rps: f64,
    pub window: Duration,
    pub max_ready: Duration,
    pub duration: Duration,
    pub violations: Vec<String>,
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed                         {}", self.seed)?;
        writeln!(f, "instances                    {}", self.instances)?;
        writeln!(
            f,
            "kills (SIGKILL)              {} ({} during startup)",
            self.kills, self.early_kills
        )?;
        // Every kill but an early one is followed by a start that must
        // come up; an early kill is itself such a start, killed on purpose.
        writeln!(
            f,
            "restarts that came up        {}/{}",
            self.restarts_ok,
            self.kills - self.early_kills
        )?;
        writeln!(f, "slowest start to ready       {} ms", self.max_ready.as_millis())?;
        writeln!(f, "entries acknowledged         {}", self.entries_acknowledged)?;
        writeln!(f, "entries checked at restart   {}", self.entries_checked)?;
        writeln!(f, "entries checked offline      {}", self.offline_checked)?;
        writeln!(
            f,
            "missing entries              {} (offline: {})",
            self.missing, self.offline_missing
        )?;
        writeln!(f, "flapping entries seen        {}", self.flapping_acknowledged)?;
        writeln!(f, "largest dead-letter queue    {}", self.max_dead_letter)?;
        writeln!(f, "targets flipped to failing   {}", self.flips)?;
        writeln!(
            f,
            "discards acked / checked / lost   {} / {} / {}",
            self.discards, self.discard_checks, self.discards_lost
        )?;
        writeln!(
            f,
            "retries acked / checked / lost    {} / {} / {}",
            self.retries, self.retry_checks, self.retries_lost
        )?;
        writeln!(f, "operator actions refused     {}", self.refused_actions)?;
        writeln!(f, "configured rate              {:.1} polls/s", self.configured_rps)?;
        writeln!(
            f,
            "steady average before/after  {:.1} / {:.1} polls/s",
            self.measured_before_rps, self.measured_after_rps
        )?;
        writeln!(
            f,
            "steady peak before/after     {:.1} / {:.1} polls/s over {} ms",
            self.peak_before_rps,
            self.peak_after_rps,
            self.window.as_millis()
        )?;
        writeln!(
            f,
            "first polls ÷ predicted      max {:.2}, median {:.2} (busiest {} ms; {} restarts; allowed {PREDICTION_SLACK} × + {NOISE_SIGMAS} σ)",
            self.max_first_poll_ratio,
            median(&self.first_poll_ratios),
            self.window.as_millis(),
            self.rate_checks
        )?;
        writeln!(f, "first polls ÷ allowed        max {:.2}", self.max_of_allowed)?;
        writeln!(
            f,
            "due tasks polled             {} of {}",
            self.resume_checked - self.resume_unpolled,
            self.resume_checked
        )?;
        writeln!(
            f,
            "first poll after ready       within {} ms",
            self.max_first_poll.as_millis()
        )?;
        writeln!(
            f,
            "post-restart total rate      max {:.0} polls/s; ÷ steady peak max {:.2}, median {:.2}",
            self.max_rate_rps,
            self.max_ratio,
            median(&self.ratios)
        )?;
        writeln!(f, "duration                     {:.0} s", self.duration.as_secs_f64())?;
        writeln!(f, "violations                   {}", self.violations.len())?;
        for v in &self.violations {
            writeln!(f, "  - {v}")?;
        }
        Ok(())
    }
}

//! The monitoring settings (`[adaptive]`, `[scheduler]`, `[failure]`) and
//! their validation, shared by the config file, the settings API and the
//! stored settings.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveSettings {
    pub enabled: bool,
    #[serde(with = "duration_str")]
    pub base_interval: Duration,
    #[serde(with = "duration_str")]
    pub min_interval: Duration,
    #[serde(with = "duration_str")]
    pub max_interval: Duration,
}

impl Default for AdaptiveSettings {
    fn default() -> Self {
        AdaptiveSettings {
            enabled: true,
            base_interval: Duration::from_secs(10),
            min_interval: Duration::from_secs(5),
            max_interval: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerMode {
    Adaptive,
    Fixed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Availability,
    Standard,
    Full,
}

impl Profile {
    /// Highest priority number the profile includes.
    pub fn max_priority(self) -> u8 {
        match self {
            Profile::Availability => 1,
            Profile::Standard => 3,
            Profile::Full => 4,
        }
    }

    /// The name as the config file writes it.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Availability => "availability",
            Profile::Standard => "standard",
            Profile::Full => "full",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    pub mode: SchedulerMode,
    pub workers: usize,
    pub target_utilization: f64,
    pub max_stretch_factor: f64,
    #[serde(with = "duration_str")]
    pub max_interval: Duration,
    #[serde(with = "duration_str")]
    pub resolve_interval: Duration,
    pub aimd_enabled: bool,
    pub aimd_backoff_multiplier: f64,
    pub aimd_recovery_rps_per_minute: f64,
    pub profile: Option<Profile>,
    #[serde(with = "duration_str")]
    pub state_flush_interval: Duration,
    #[serde(with = "duration_str::map")]
    pub group_interval_overrides: BTreeMap<String, Duration>,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            mode: SchedulerMode::Adaptive,
            workers: 16,
            target_utilization: 0.7,
            max_stretch_factor: 4.0,
            max_interval: Duration::from_secs(3600),
            resolve_interval: Duration::from_secs(900),
            aimd_enabled: true,
            aimd_backoff_multiplier: 0.5,
            aimd_recovery_rps_per_minute: 0.1,
            profile: None,
            state_flush_interval: Duration::from_secs(1),
            group_interval_overrides: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailureSettings {
    #[serde(with = "duration_str")]
    pub backoff_initial: Duration,
    pub backoff_multiplier: f64,
    pub backoff_jitter: f64,
    #[serde(with = "duration_str")]
    pub backoff_max: Duration,
    pub breaker_threshold: u32,
    pub dead_letter_after: u32,
    #[serde(with = "duration_str")]
    pub dead_letter_recheck: Duration,
}

impl Default for FailureSettings {
    fn default() -> Self {
        FailureSettings {
            backoff_initial: Duration::from_secs(5),
            backoff_multiplier: 2.0,
            backoff_jitter: 0.2,
            backoff_max: Duration::from_secs(300),
            breaker_threshold: 3,
            dead_letter_after: 5,
            dead_letter_recheck: Duration::from_secs(1800),
        }
    }
}

/// The three sections an operator edits on Settings → System → Monitoring and
/// through `/api/settings/monitoring`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MonitoringSettings {
    pub adaptive: AdaptiveSettings,
    pub scheduler: SchedulerSettings,
    pub failure: FailureSettings,
}

fn range_f64(errs: &mut Vec<FieldError>, field: &str, v: f64, lo: f64, hi: f64) {
    if !(v.is_finite() && v >= lo && v <= hi) {
        errs.push(FieldError::new(field, v, format!("must be between {lo} and {hi}")));
    }
}

fn nonzero(errs: &mut Vec<FieldError>, field: &str, d: Duration) {
    if d.is_zero() {
        errs.push(FieldError::new(
            field,
            duration_str::format(d),
            "must be greater than zero",
        ));
    }
}

impl MonitoringSettings {
    /// Every rule of §7; returns all violations, first one first.
    pub fn validate(&self) -> Result<(), Vec<FieldError>> {
        let mut e = Vec::new();
        let a = &self.adaptive;
        nonzero(&mut e, "adaptive.min_interval", a.min_interval);
        if a.min_interval > a.base_interval {
            e.push(FieldError::new(
                "adaptive.min_interval",
                duration_str::format(a.min_interval),
                format!(
                    "must not exceed base_interval ({})",
                    duration_str::format(a.base_interval)
                ),
            ));
        }
        if a.base_interval > a.max_interval {
            e.push(FieldError::new(
                "adaptive.base_interval",
                duration_str::format(a.base_interval),
                format!(
                    "must not exceed max_interval ({})",
                    duration_str::format(a.max_interval)
                ),
            ));
        }
        let s = &self.scheduler;
        if s.workers == 0 || s.workers > 4096 {
            e.push(FieldError::new(
                "scheduler.workers",
                s.workers,
                "must be between 1 and 4096",
            ));
        }
        range_f64(&mut e, "scheduler.target_utilization", s.target_utilization, 0.1, 1.0);
        range_f64(&mut e, "scheduler.max_stretch_factor", s.max_stretch_factor, 1.0, 16.0);
        range_f64(
            &mut e,
            "scheduler.aimd_backoff_multiplier",
            s.aimd_backoff_multiplier,
            0.1,
            0.9,
        );
        range_f64(
            &mut e,
            "scheduler.aimd_recovery_rps_per_minute",
            s.aimd_recovery_rps_per_minute,
            0.01,
            5.0,
        );
        if s.max_interval < Duration::from_secs(300) || s.max_interval > Duration::from_secs(86400) {
            e.push(FieldError::new(
                "scheduler.max_interval",
                duration_str::format(s.max_interval),
                "must be between 5m and 24h",
            ));
        }
        if s.resolve_interval < Duration::from_secs(60) || s.resolve_interval > Duration::from_secs(86400) {
            e.push(FieldError::new(
                "scheduler.resolve_interval",
                duration_str::format(s.resolve_interval),
                "must be between 1m and 24h",
            ));
        }
        if s.state_flush_interval < Duration::from_millis(10) || s.state_flush_interval > Duration::from_secs(60) {
            e.push(FieldError::new(
                "scheduler.state_flush_interval",
                duration_str::format(s.state_flush_interval),
                "must be between 10ms and 1m",
            ));
        }
        for (k, v) in &s.group_interval_overrides {
            let field = format!("scheduler.group_interval_overrides.{k}");
            if !k.contains('/') || k.starts_with('/') || k.ends_with('/') {
                e.push(FieldError::new(&field, k, "key must be \"type/group\""));
            }
            if v.is_zero() {
                e.push(FieldError::new(&field, "0s", "a pin must be greater than zero"));
            }
        }
        let f = &self.failure;
        nonzero(&mut e, "failure.backoff_initial", f.backoff_initial);
        range_f64(&mut e, "failure.backoff_multiplier", f.backoff_multiplier, 1.0, 10.0);
        range_f64(&mut e, "failure.backoff_jitter", f.backoff_jitter, 0.0, 0.5);
        if f.backoff_max < f.backoff_initial {
            e.push(FieldError::new(
                "failure.backoff_max",
                duration_str::format(f.backoff_max),
                "must not be below backoff_initial",
            ));
        }
        if f.breaker_threshold == 0 || f.breaker_threshold > 100 {
            e.push(FieldError::new(
                "failure.breaker_threshold",
                f.breaker_threshold,
                "must be between 1 and 100",
            ));
        }
        if f.dead_letter_after == 0 || f.dead_letter_after > 100 {
            e.push(FieldError::new(
                "failure.dead_letter_after",
                f.dead_letter_after,
                "must be between 1 and 100",
            ));
        }
        nonzero(&mut e, "failure.dead_letter_recheck", f.dead_letter_recheck);
        if e.is_empty() { Ok(()) } else { Err(e) }
    }
}

//! `[metrics]`: what `/metrics` shows beyond the names §6 fixes.

use serde::{Deserialize, Serialize};

/// `[metrics]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `pollster_monitor_poll_duration_seconds` has a series per task,
    /// labelled by `instance` (the default, as §6 names it); `false` gives
    /// one per instance type and group instead, for fleets where a
    /// histogram per task is too many series. The counters, the last
    /// success, staleness and breaker state keep `instance` either way.
    #[serde(default = "default_true")]
    pub per_instance_histograms: bool,
}

fn default_true() -> bool {
    true
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            per_instance_histograms: true,
        }
    }
}

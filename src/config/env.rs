//! Environment variables (§7): their names, how their values parse, the
//! overrides they impose, and warnings for `POLLSTER_` names that match no
//! setting.
//!
//! Each variable is one row of a table that ties its name to the field it sets
//! and to a setter; the field path is built from the Rust field names, so a
//! renamed field fails to compile instead of silently losing its variable.
//! An empty variable counts as unset.

use super::{
    ClusterConfig, ConfigError, ENVIRONMENT, LogConfig, LogFormat, MetricsAuth, MetricsConfig, ServerConfig, SinkConfig,
};
use crate::model::{MonitoringSettings, Profile, SchedulerMode, duration_str};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// The admin password for automated installs; not a setting, never stored here.
pub(super) const ADMIN_PASSWORD: &str = "POLLSTER_ADMIN_PASSWORD";
/// The data key file, when not `<data_dir>/secret.key` (`crate::secrets`).
pub(super) const SECRET_KEY_FILE: &str = crate::secrets::KEY_FILE_ENV;

type Setter<T> = fn(&mut T, &str) -> Result<(), String>;

/// One environment variable: its name, the dotted field it sets, and how.
pub(super) struct EnvVar<T: 'static> {
    pub var: &'static str,
    pub field: &'static str,
    set: Setter<T>,
}

/// `t.section.key = parse(raw)?` for a nested settings field.
macro_rules! nested {
    ($var:literal, $sec:ident . $key:ident, $parse:expr) => {
        EnvVar {
            var: $var,
            field: concat!(stringify!($sec), ".", stringify!($key)),
            set: |t, raw| {
                t.$sec.$key = $parse(raw)?;
                Ok(())
            },
        }
    };
}

/// `t.key = parse(raw)?` for a field of a flat section.
macro_rules! flat {
    ($var:literal, $sec:literal, $key:ident, $parse:expr) => {
        EnvVar {
            var: $var,
            field: concat!($sec, ".", stringify!($key)),
            set: |t, raw| {
                t.$key = $parse(raw)?;
                Ok(())
            },
        }
    };
}

pub(super) const MONITORING_VARS: &[EnvVar<MonitoringSettings>] = &[
    nested!("ADAPTIVE_POLLING_ENABLED", adaptive.enabled, parse_bool),
    nested!("ADAPTIVE_POLLING_BASE_INTERVAL", adaptive.base_interval, parse_duration),
    nested!("ADAPTIVE_POLLING_MIN_INTERVAL", adaptive.min_interval, parse_duration),
    nested!("ADAPTIVE_POLLING_MAX_INTERVAL", adaptive.max_interval, parse_duration),
    nested!("POLLSTER_SCHEDULER_MODE", scheduler.mode, parse_mode),
    nested!("POLLSTER_SCHEDULER_WORKERS", scheduler.workers, parse_whole),
    nested!(
        "POLLSTER_SCHEDULER_TARGET_UTILIZATION",
        scheduler.target_utilization,
        parse_f64
    ),
    nested!(
        "POLLSTER_SCHEDULER_MAX_STRETCH_FACTOR",
        scheduler.max_stretch_factor,
        parse_f64
    ),
    nested!(
        "POLLSTER_SCHEDULER_MAX_INTERVAL",
        scheduler.max_interval,
        parse_duration
    ),
    nested!(
        "POLLSTER_SCHEDULER_RESOLVE_INTERVAL",
        scheduler.resolve_interval,
        parse_duration
    ),
    nested!("POLLSTER_SCHEDULER_AIMD_ENABLED", scheduler.aimd_enabled, parse_bool),
    nested!(
        "POLLSTER_SCHEDULER_AIMD_BACKOFF_MULTIPLIER",
        scheduler.aimd_backoff_multiplier,
        parse_f64
    ),
    nested!(
        "POLLSTER_SCHEDULER_AIMD_RECOVERY_RPS_PER_MINUTE",
        scheduler.aimd_recovery_rps_per_minute,
        parse_f64
    ),
    nested!("POLLSTER_SCHEDULER_PROFILE", scheduler.profile, parse_profile),
    nested!(
        "POLLSTER_SCHEDULER_STATE_FLUSH_INTERVAL",
        scheduler.state_flush_interval,
        parse_duration
    ),
    nested!(
        "POLLSTER_FAILURE_BACKOFF_INITIAL",
        failure.backoff_initial,
        parse_duration
    ),
    nested!(
        "POLLSTER_FAILURE_BACKOFF_MULTIPLIER",
        failure.backoff_multiplier,
        parse_f64
    ),
    nested!("POLLSTER_FAILURE_BACKOFF_JITTER", failure.backoff_jitter, parse_f64),
    nested!("POLLSTER_FAILURE_BACKOFF_MAX", failure.backoff_max, parse_duration),
    nested!(
        "POLLSTER_FAILURE_BREAKER_THRESHOLD",
        failure.breaker_threshold,
        parse_whole
    ),
    nested!(
        "POLLSTER_FAILURE_DEAD_LETTER_AFTER",
        failure.dead_letter_after,
        parse_whole
    ),
    nested!(
        "POLLSTER_FAILURE_DEAD_LETTER_RECHECK",
        failure.dead_letter_recheck,
        parse_duration
    ),
];

pub(super) const SERVER_VARS: &[EnvVar<ServerConfig>] = &[
    flat!("POLLSTER_LISTEN", "server", listen, parse_addr),
    flat!("POLLSTER_METRICS_LISTEN", "server", metrics_listen, parse_addr),
    flat!("POLLSTER_DATA_DIR", "server", data_dir, parse_path),
    flat!("POLLSTER_TRUST_PROXY", "server", trust_proxy, parse_bool),
    flat!("POLLSTER_TRUSTED_PROXIES", "server", trusted_proxies, parse_list),
    flat!("POLLSTER_MAX_CONNECTIONS", "server", max_connections, parse_whole),
    flat!(
        "POLLSTER_MAX_CONNECTIONS_PER_CLIENT",
        "server",
        max_connections_per_client,
        parse_whole
    ),
    flat!("POLLSTER_TLS_CERT", "server", tls_cert, parse_opt_path),
    flat!("POLLSTER_TLS_KEY", "server", tls_key, parse_opt_path),
    flat!("POLLSTER_METRICS_TLS_CERT", "server", metrics_tls_cert, parse_opt_path),
    flat!("POLLSTER_METRICS_TLS_KEY", "server", metrics_tls_key, parse_opt_path),
    flat!("POLLSTER_METRICS_AUTH", "server", metrics_auth, MetricsAuth::parse),
];

pub(super) const LOG_VARS: &[EnvVar<LogConfig>] = &[
    flat!("POLLSTER_LOG_FORMAT", "log", format, LogFormat::parse),
    flat!("POLLSTER_LOG_LEVEL", "log", level, parse_level),
];

pub(super) const METRICS_VARS: &[EnvVar<MetricsConfig>] = &[flat!(
    "POLLSTER_METRICS_PER_INSTANCE_HISTOGRAMS",
    "metrics",
    per_instance_histograms,
    parse_bool
)];

/// `[cluster]`; any of them set makes a cluster member of a server whose
/// file has no `[cluster]` section.
pub(super) const CLUSTER_VARS: &[EnvVar<ClusterConfig>] = &[
    flat!("POLLSTER_CLUSTER_NAME", "cluster", name, parse_string),
    flat!("POLLSTER_CLUSTER_MEMBER", "cluster", member, parse_opt_string),
    flat!("POLLSTER_CLUSTER_LISTEN", "cluster", listen, parse_addr),
    flat!("POLLSTER_CLUSTER_ADVERTISE", "cluster", advertise, parse_opt_addr),
    flat!("POLLSTER_CLUSTER_SEEDS", "cluster", seeds, parse_list),
    flat!("POLLSTER_CLUSTER_KEY_FILE", "cluster", key_file, parse_opt_path),
    flat!("POLLSTER_CLUSTER_MIN_MEMBERS", "cluster", min_members, parse_whole),
    flat!(
        "POLLSTER_CLUSTER_GOSSIP_INTERVAL",
        "cluster",
        gossip_interval,
        parse_duration
    ),
];

pub(super) const SINK_URL: &str = "POLLSTER_SINK_URL";

/// The log filter's older name, read when `POLLSTER_LOG_LEVEL` is unset.
const RUST_LOG: &str = "RUST_LOG";

pub(super) const SINK_VARS: &[EnvVar<SinkConfig>] = &[
    flat!("POLLSTER_SINK_URL", "sink", url, parse_string),
    flat!("POLLSTER_SINK_BATCH_SIZE", "sink", batch_size, parse_whole),
    flat!("POLLSTER_SINK_BUFFERING", "sink", buffering, parse_duration),
    flat!("POLLSTER_SINK_RETRY_LIMIT", "sink", retry_limit, parse_duration),
    flat!("POLLSTER_SINK_QUEUE_LIMIT", "sink", queue_limit, parse_whole),
    flat!("POLLSTER_SINK_GZIP", "sink", gzip, parse_bool),
];

/// Every variable name Pollster reads, in documentation order.
pub fn known_env_vars() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    v.extend(SERVER_VARS.iter().map(|e| e.var));
    v.extend(MONITORING_VARS.iter().map(|e| e.var));
    v.extend(SINK_VARS.iter().map(|e| e.var));
    v.extend(LOG_VARS.iter().map(|e| e.var));
    v.extend(METRICS_VARS.iter().map(|e| e.var));
    v.extend(CLUSTER_VARS.iter().map(|e| e.var));
    v.push(ADMIN_PASSWORD);
    v.push(SECRET_KEY_FILE);
    v
}

// ---------------------------------------------------------------- parsers

/// `true`/`false`/`1`/`0`/`yes`/`no`, any case.
pub(super) fn parse_bool(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err("must be true, false, 1, 0, yes or no".into()),
    }
}

fn parse_whole<T: FromStr>(raw: &str) -> Result<T, String> {
    raw.trim()
        .parse()
        .map_err(|_| "must be a whole number (not negative, not too large)".into())
}

fn parse_f64(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err("must be a finite number".into()),
    }
}

fn parse_duration(raw: &str) -> Result<Duration, String> {
    duration_str::parse(raw).map_err(|e| format!("{e} (write e.g. 250ms, 10s, 5m, 1h)"))
}

fn parse_mode(raw: &str) -> Result<SchedulerMode, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "adaptive" => Ok(SchedulerMode::Adaptive),
        "fixed" => Ok(SchedulerMode::Fixed),
        _ => Err("must be adaptive or fixed".into()),
    }
}

/// A profile name, or `none` to clear a profile set in the file.
fn parse_profile(raw: &str) -> Result<Option<Profile>, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "availability" => Ok(Some(Profile::Availability)),
        "standard" => Ok(Some(Profile::Standard)),
        "full" => Ok(Some(Profile::Full)),
        "none" => Ok(None),
        _ => Err("must be availability, standard, full or none".into()),
    }
}

fn parse_addr(raw: &str) -> Result<SocketAddr, String> {
    raw.trim()
        .parse()
        .map_err(|_| "must be an address and port, e.g. 0.0.0.0:7655 or [::]:7655".into())
}

fn parse_path(raw: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(raw))
}

fn parse_opt_path(raw: &str) -> Result<Option<PathBuf>, String> {
    Ok(Some(PathBuf::from(raw)))
}

fn parse_opt_string(raw: &str) -> Result<Option<String>, String> {
    Ok(Some(raw.trim().to_string()))
}

fn parse_opt_addr(raw: &str) -> Result<Option<SocketAddr>, String> {
    parse_addr(raw).map(Some)
}

/// Comma-separated, e.g. `10.0.0.5, 10.1.0.0/16`.
fn parse_list(raw: &str) -> Result<Vec<String>, String> {
    Ok(raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

fn parse_string(raw: &str) -> Result<String, String> {
    Ok(raw.trim().to_string())
}

fn parse_level(raw: &str) -> Result<String, String> {
    super::check_level(raw)?;
    Ok(raw.trim().to_string())
}

// ---------------------------------------------------------------- overrides

/// One variable that was set: validated at load, re-applied on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Applied {
    var: &'static str,
    field: &'static str,
    raw: String,
}

/// The settings fixed by environment variables. They win over values saved
/// from the UI, which win over the file: the caller layers saved settings onto
/// [`super::Config::monitoring_file`], then calls [`EnvOverrides::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvOverrides {
    monitoring: Vec<Applied>,
    sink: Vec<Applied>,
}

impl EnvOverrides {
    /// True when no environment variable sets a monitoring or sink setting.
    pub fn is_empty(&self) -> bool {
        self.monitoring.is_empty() && self.sink.is_empty()
    }

    /// Apply the env values onto settings (after saved settings were layered on).
    pub fn apply(&self, s: &mut MonitoringSettings) {
        for a in &self.monitoring {
            let Some(row) = MONITORING_VARS.iter().find(|r| r.var == a.var) else {
                continue;
            };
            // Every value was parsed once in `load`, so this cannot fail; if
            // it somehow does, the setting keeps its layered value.
            if let Err(e) = (row.set)(s, &a.raw) {
                tracing::warn!(variable = a.var, error = %e, "environment override not applied");
            }
        }
    }

    /// Apply the env values onto a sink (after a sink saved from the UI was
    /// put in place of the file's). `POLLSTER_SINK_URL` alone makes one.
    pub fn apply_sink(&self, sink: Option<SinkConfig>) -> Option<SinkConfig> {
        let url = self
            .sink
            .iter()
            .find(|a| a.var == SINK_URL)
            .map(|a| a.raw.trim().to_string());
        let mut sink = match (sink, url) {
            (Some(s), _) => s,
            (None, Some(url)) => SinkConfig::new(url),
            (None, None) => return None,
        };
        for a in &self.sink {
            let Some(row) = SINK_VARS.iter().find(|r| r.var == a.var) else {
                continue;
            };
            if let Err(e) = (row.set)(&mut sink, &a.raw) {
                tracing::warn!(variable = a.var, error = %e, "environment override not applied");
            }
        }
        Some(sink)
    }

    /// `"adaptive.enabled" -> "ADAPTIVE_POLLING_ENABLED"`, etc., for every
    /// monitoring field an environment variable sets (the `locked` map of
    /// `/api/settings/monitoring`).
    pub fn locked(&self) -> BTreeMap<String, String> {
        locked_map(&self.monitoring)
    }

    /// `"sink.url" -> "POLLSTER_SINK_URL"`, etc., for every sink field an
    /// environment variable sets (read-only on the sink settings page).
    pub fn locked_sink(&self) -> BTreeMap<String, String> {
        locked_map(&self.sink)
    }

    /// The variable that sets `field` (dotted, e.g. `scheduler.workers`), if any.
    pub fn variable_for(&self, field: &str) -> Option<&'static str> {
        self.find(field).map(|a| a.var)
    }

    /// The variable that sets `field` and its value as set.
    pub(super) fn setting_for(&self, field: &str) -> Option<(&'static str, &str)> {
        self.find(field).map(|a| (a.var, a.raw.as_str()))
    }

    fn find(&self, field: &str) -> Option<&Applied> {
        self.monitoring.iter().chain(&self.sink).find(|a| a.field == field)
    }
}

fn locked_map(applied: &[Applied]) -> BTreeMap<String, String> {
    applied
        .iter()
        .map(|a| (a.field.to_string(), a.var.to_string()))
        .collect()
}

/// The value of `var`, unless unset or empty.
pub(super) fn value<'a>(env: &'a BTreeMap<String, String>, var: &str) -> Option<&'a str> {
    env.get(var).map(String::as_str).filter(|v| !v.is_empty())
}

/// Apply every variable of `table` that is set onto `target`. A value that
/// does not parse is an error naming the variable and its value.
fn apply_table<T>(
    table: &'static [EnvVar<T>],
    env: &BTreeMap<String, String>,
    target: &mut T,
) -> Result<Vec<Applied>, ConfigError> {
    let mut applied = Vec::new();
    for row in table {
        let Some(raw) = value(env, row.var) else {
            continue;
        };
        (row.set)(target, raw).map_err(|message| env_error(row.var, raw, message))?;
        applied.push(Applied {
            var: row.var,
            field: row.field,
            raw: raw.to_string(),
        });
    }
    Ok(applied)
}

pub(super) fn env_error(var: &str, raw: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(ENVIRONMENT, var, format!("{raw:?}"), message)
}

/// Everything the environment contributes, parsed and applied to the
/// file's values, but not yet validated as a whole.
pub(super) struct FromEnv {
    pub overrides: EnvOverrides,
    pub monitoring: MonitoringSettings,
    pub server: ServerConfig,
    pub sink: Option<SinkConfig>,
    pub log: LogConfig,
    pub metrics: MetricsConfig,
    pub cluster: Option<ClusterConfig>,
    pub admin_password: Option<String>,
    pub secret_key_file: Option<PathBuf>,
    pub warnings: Vec<String>,
}

pub(super) fn read(
    env: &BTreeMap<String, String>,
    monitoring_file: &MonitoringSettings,
    server_file: &ServerConfig,
    sink_file: Option<&SinkConfig>,
    log_file: &LogConfig,
    metrics_file: &MetricsConfig,
    cluster_file: Option<&ClusterConfig>,
) -> Result<FromEnv, ConfigError> {
    let mut warnings = unknown_variable_warnings(env);

    let mut monitoring = monitoring_file.clone();
    let monitoring_applied = apply_table(MONITORING_VARS, env, &mut monitoring)?;

    let mut server = server_file.clone();
    apply_table(SERVER_VARS, env, &mut server)?;

    let mut log = log_file.clone();
    apply_table(LOG_VARS, env, &mut log)?;
    // RUST_LOG, as before `[log]` existed, when POLLSTER_LOG_LEVEL is unset.
    if value(env, "POLLSTER_LOG_LEVEL").is_none()
        && let Some(raw) = value(env, RUST_LOG)
    {
        log.level = parse_level(raw).map_err(|why| env_error(RUST_LOG, raw, why))?;
    }

    let mut metrics = *metrics_file;
    apply_table(METRICS_VARS, env, &mut metrics)?;

    let cluster = match cluster_file {
        Some(c) => {
            let mut c = c.clone();
            apply_table(CLUSTER_VARS, env, &mut c)?;
            Some(c)
        }
        None if CLUSTER_VARS.iter().any(|r| value(env, r.var).is_some()) => {
            let mut c = ClusterConfig::default();
            apply_table(CLUSTER_VARS, env, &mut c)?;
            Some(c)
        }
        None => None,
    };

    let mut sink = sink_file.cloned();
    let mut sink_applied = Vec::new();
    match (&mut sink, value(env, SINK_URL)) {
        (Some(s), _) => sink_applied = apply_table(SINK_VARS, env, s)?,
        (None, Some(url)) => {
            let mut s = SinkConfig::new(url.trim());
            sink_applied = apply_table(SINK_VARS, env, &mut s)?;
            sink = Some(s);
        }
        (None, None) => {
            for row in SINK_VARS.iter().filter(|r| value(env, r.var).is_some()) {
                warnings.push(format!(
                    "environment variable {} is ignored: no sink is configured (set {SINK_URL} or [sink] url)",
                    row.var
                ));
            }
        }
    }

    Ok(FromEnv {
        overrides: EnvOverrides {
            monitoring: monitoring_applied,
            sink: sink_applied,
        },
        monitoring,
        server,
        sink,
        log,
        metrics,
        cluster,
        admin_password: match value(env, ADMIN_PASSWORD) {
            Some(v) => Some(v.to_string()),
            None => credential(env, "admin_password")?,
        },
        secret_key_file: value(env, SECRET_KEY_FILE).map(PathBuf::from),
        warnings,
    })
}

/// A systemd credential (`LoadCredential=NAME:…`): the file `NAME` in
/// `$CREDENTIALS_DIRECTORY`, without its trailing newline.
fn credential(env: &BTreeMap<String, String>, name: &str) -> Result<Option<String>, ConfigError> {
    let Some(dir) = env.get("CREDENTIALS_DIRECTORY").filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let path = std::path::Path::new(dir).join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim_end_matches(['\r', '\n']).to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConfigError::new(
            ENVIRONMENT,
            "CREDENTIALS_DIRECTORY",
            path.display().to_string(),
            format!("cannot read the credential: {e}"),
        )),
    }
}

// ---------------------------------------------------------------- unknown names

/// A warning for every `POLLSTER_…` (or `ADAPTIVE_POLLING_…`) variable that
/// names no setting, with the closest known name.
pub(super) fn unknown_variable_warnings(env: &BTreeMap<String, String>) -> Vec<String> {
    let known = known_env_vars();
    env.keys()
        .filter(|k| k.starts_with("POLLSTER_") || k.starts_with("ADAPTIVE_POLLING_"))
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| match closest_env_var(k, &known) {
            Some(s) => format!("unknown environment variable {k} (did you mean {s}?)"),
            None => format!("unknown environment variable {k}"),
        })
        .collect()
}

/// The known name closest to `name` by edit distance. `POLLSTER_ADAPTIVE_X`
/// is also compared as `ADAPTIVE_POLLING_X`, the adaptive variables' real form.
fn closest_env_var(name: &str, known: &[&'static str]) -> Option<&'static str> {
    let alt = name
        .strip_prefix("POLLSTER_ADAPTIVE_")
        .map(|rest| format!("ADAPTIVE_POLLING_{rest}"));
    known
        .iter()
        .map(|k| {
            let d = strsim::levenshtein(name, k);
            let d = alt.as_deref().map_or(d, |a| d.min(strsim::levenshtein(a, k)));
            (d, *k)
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

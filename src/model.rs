//! Shared vocabulary: settings, instances, types and endpoint groups, timestamps
//! and poll outcomes. Plain data with serde and validation; no I/O.
//!
//! The same serde representation serves the config file (§7), the settings API
//! (§6) and the stored settings, so a value written in one place reads the same
//! in the others.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Milliseconds since the Unix epoch. The scheduling core only ever sees these
/// values; the engine reads the wall clock and passes them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn from_system_time(t: std::time::SystemTime) -> Self {
        Timestamp(
            t.duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        )
    }
    pub fn now() -> Self {
        Self::from_system_time(std::time::SystemTime::now())
    }
    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(d.as_millis().min(u64::MAX as u128) as u64))
    }
    pub fn minus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(d.as_millis().min(u64::MAX as u128) as u64))
    }
    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
    /// RFC 3339 UTC with second precision, e.g. `2025-03-21T18:05:00Z`.
    /// A time past the year 9999 (a retry or recheck pushed out by an
    /// enormous interval) shows as the last second of 9999: RFC 3339 has
    /// four-digit years.
    pub fn to_rfc3339(self) -> String {
        humantime::format_rfc3339_seconds(self.rfc3339_time()).to_string()
    }
    /// The same with milliseconds, e.g. `2025-03-21T18:05:00.123Z`.
    pub fn to_rfc3339_millis(self) -> String {
        humantime::format_rfc3339_millis(self.rfc3339_time()).to_string()
    }
    fn rfc3339_time(self) -> std::time::SystemTime {
        // 9999-12-31T23:59:59.999Z
        const LAST_MS: u64 = 253_402_300_799_999;
        std::time::UNIX_EPOCH + Duration::from_millis(self.0.min(LAST_MS))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

/// (instance, endpoint group): the unit of scheduling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    pub instance: Arc<str>,
    pub group: Arc<str>,
}

impl TaskKey {
    pub fn new(instance: &str, group: &str) -> Self {
        TaskKey {
            instance: Arc::from(instance),
            group: Arc::from(group),
        }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.instance, self.group)
    }
}

/// Serde for `Duration` written as `250ms`, `10s`, `5m`, `1h`.
pub mod duration_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn parse(s: &str) -> Result<Duration, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty duration".into());
        }
        humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
    }

    pub fn format(d: Duration) -> String {
        if d.is_zero() {
            return "0s".into();
        }
        humantime::format_duration(d).to_string().replace(' ', "")
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use super::*;
        use serde::Serialize;
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            d.map(super::format).serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            match Option::<String>::deserialize(d)? {
                None => Ok(None),
                Some(s) => super::parse(&s).map(Some).map_err(serde::de::Error::custom),
            }
        }
    }

    pub mod map {
        use super::*;
        use serde::Serialize;
        use std::collections::BTreeMap;
        pub fn serialize<S: Serializer>(m: &BTreeMap<String, Duration>, s: S) -> Result<S::Ok, S::Error> {
            m.iter()
                .map(|(k, v)| (k.clone(), super::format(*v)))
                .collect::<BTreeMap<_, _>>()
                .serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Duration>, D::Error> {
            let raw = BTreeMap::<String, String>::deserialize(d)?;
            raw.into_iter()
                .map(|(k, v)| super::parse(&v).map(|d| (k, d)))
                .collect::<Result<_, _>>()
                .map_err(serde::de::Error::custom)
        }
    }
}

/// A validation failure that names the offending field (dotted path, e.g.
/// `adaptive.min_interval` or `instances[2].url`) and value.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[error("{field} = {value}: {message}")]
pub struct FieldError {
    pub field: String,
    pub value: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, value: impl fmt::Display, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------- settings

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

// ---------------------------------------------------------------- types

/// One fetch a type makes (§1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDef {
    pub name: String,
    #[serde(default)]
    pub path: String,
    #[serde(default = "default_priority")]
    pub priority: u8,
    #[serde(with = "duration_str", default = "default_floor")]
    pub floor: Duration,
    #[serde(default = "default_cost")]
    pub cost: f64,
    #[serde(default = "default_true")]
    pub gated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_when: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<String>,
    #[serde(default)]
    pub forward: bool,
}

fn default_priority() -> u8 {
    3
}
fn default_floor() -> Duration {
    Duration::from_secs(60)
}
fn default_cost() -> f64 {
    1.0
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeDef {
    pub name: String,
    #[serde(default)]
    pub groups: Vec<GroupDef>,
}

impl GroupDef {
    /// A gated group with cost 1 and no shape, fan-out or forwarding.
    pub fn new(name: &str, path: &str, priority: u8, floor: Duration) -> Self {
        GroupDef {
            name: name.into(),
            path: path.into(),
            priority,
            floor,
            cost: 1.0,
            gated: true,
            enabled_when: None,
            shape_from: None,
            item_field: None,
            fan_out: None,
            forward: false,
        }
    }
}

impl TypeDef {
    /// The built-in `http` type: one group `probe`, GET the instance url,
    /// priority 1, floor 5 s, cost 1.
    pub fn builtin_http() -> TypeDef {
        TypeDef {
            name: "http".into(),
            groups: vec![GroupDef::new("probe", "", 1, Duration::from_secs(5))],
        }
    }

    pub fn validate(&self, field: &str) -> Result<(), FieldError> {
        if !valid_name(&self.name) {
            return Err(FieldError::new(format!("{field}.name"), &self.name, NAME_RULE));
        }
        if self.groups.is_empty() {
            return Err(FieldError::new(
                format!("{field}.groups"),
                "[]",
                "a type needs at least one group",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let gf = format!("{field}.groups[{i}]");
            if !valid_name(&g.name) {
                return Err(FieldError::new(format!("{gf}.name"), &g.name, NAME_RULE));
            }
            if !seen.insert(g.name.as_str()) {
                return Err(FieldError::new(
                    format!("{gf}.name"),
                    &g.name,
                    "duplicate group name in this type",
                ));
            }
            if !(1..=4).contains(&g.priority) {
                return Err(FieldError::new(
                    format!("{gf}.priority"),
                    g.priority,
                    "must be 1, 2, 3 or 4",
                ));
            }
            if g.floor.is_zero() {
                return Err(FieldError::new(
                    format!("{gf}.floor"),
                    "0s",
                    "must be greater than zero",
                ));
            }
            if !(g.cost.is_finite() && g.cost > 0.0) {
                return Err(FieldError::new(
                    format!("{gf}.cost"),
                    g.cost,
                    "must be a positive number",
                ));
            }
            if let Some(p) = &g.shape_from
                && !(p.is_empty() || p.starts_with('/'))
            {
                return Err(FieldError::new(
                    format!("{gf}.shape_from"),
                    p,
                    "must be a JSON pointer: empty (the whole body) or starting with '/'",
                ));
            }
            if g.item_field.is_some() && g.shape_from.is_none() {
                return Err(FieldError::new(
                    format!("{gf}.item_field"),
                    g.item_field.as_deref().unwrap_or_default(),
                    "needs shape_from",
                ));
            }
            let learned = |name: &str| self.groups.iter().find(|o| o.name == name && o.shape_from.is_some());
            if let Some(w) = &g.enabled_when
                && learned(w).is_none()
            {
                return Err(FieldError::new(
                    format!("{gf}.enabled_when"),
                    w,
                    "must name a group of this type that has shape_from",
                ));
            }
            let has_item = g.path.contains("{item}");
            match &g.fan_out {
                Some(f) => {
                    match learned(f) {
                        None => {
                            return Err(FieldError::new(
                                format!("{gf}.fan_out"),
                                f,
                                "must name a group of this type that has shape_from",
                            ));
                        }
                        Some(src) if src.item_field.is_none() => {
                            return Err(FieldError::new(
                                format!("{gf}.fan_out"),
                                f,
                                format!("group {f:?} needs item_field to name the items"),
                            ));
                        }
                        Some(_) => {}
                    }
                    if !has_item {
                        return Err(FieldError::new(
                            format!("{gf}.path"),
                            &g.path,
                            "a fan_out group's path must contain {item}",
                        ));
                    }
                }
                None if has_item => {
                    return Err(FieldError::new(
                        format!("{gf}.path"),
                        &g.path,
                        "{item} is only allowed with fan_out",
                    ));
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// What a secret shows as wherever it is displayed or returned (API, pages,
/// logs, errors). A URL password or sink header value sent back as exactly
/// this keeps the stored one, so an edit form round-trips without the secret.
pub const HIDDEN: &str = "(hidden)";

pub const NAME_RULE: &str =
    "must be 1-64 characters of letters, digits, '-', '_' or '.', starting with a letter or digit";

/// Names of instances, types, groups and pools: safe in URLs, metric labels and keys.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

// ---------------------------------------------------------------- instances

/// How Pollster authenticates to an instance. Secrets are write-only in the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Auth {
    /// A struct variant, not a unit one: serde ignores unknown fields next to
    /// the tag of a unit variant, so `{"kind": "none", "token": "…"}` would
    /// be taken silently.
    None {},
    Bearer {
        token: String,
    },
    Header {
        name: String,
        value: String,
    },
    Basic {
        username: String,
        password: String,
    },
    /// Proxmox API token: `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET`.
    PveToken {
        user: String,
        token_id: String,
        secret: String,
    },
}

impl Default for Auth {
    fn default() -> Self {
        Auth::None {}
    }
}

impl Auth {
    pub fn kind(&self) -> &'static str {
        match self {
            Auth::None {} => "none",
            Auth::Bearer { .. } => "bearer",
            Auth::Header { .. } => "header",
            Auth::Basic { .. } => "basic",
            Auth::PveToken { .. } => "pve_token",
        }
    }
}

pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

/// One API endpoint to poll, as in `[[instances]]` (§7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    pub name: String,
    #[serde(rename = "type", default = "default_type")]
    pub type_name: String,
    pub url: String,
    #[serde(with = "duration_str", default = "default_timeout")]
    pub timeout: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default)]
    pub auth: Auth,
    /// Verify the server certificate against the system roots (default on).
    #[serde(default = "default_true")]
    pub tls_verify: bool,
    /// Trust exactly this certificate, by the SHA-256 of its DER bytes (hex,
    /// colons optional) — for self-signed Proxmox certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_fingerprint: Option<String>,
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// Shape counts for planning before they are learned (and for
    /// `pollster plan`), e.g. `shape = { nodes = 12 }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shape: BTreeMap<String, u64>,
}

fn default_type() -> String {
    "http".into()
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_max_response_bytes() -> u64 {
    DEFAULT_MAX_RESPONSE_BYTES
}

impl InstanceConfig {
    /// An instance with every optional field at its default.
    pub fn new(name: &str, type_name: &str, url: &str) -> Self {
        InstanceConfig {
            name: name.into(),
            type_name: type_name.into(),
            url: url.into(),
            timeout: default_timeout(),
            budget: None,
            labels: BTreeMap::new(),
            enabled: true,
            auth: Auth::None {},
            tls_verify: true,
            tls_fingerprint: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            shape: BTreeMap::new(),
        }
    }

    /// Field-level checks that need no knowledge of types or budgets.
    pub fn validate_fields(&self) -> Result<(), FieldError> {
        if !valid_name(&self.name) {
            return Err(FieldError::new("name", &self.name, NAME_RULE));
        }
        check_http_url("url", &self.url)?;
        if self.timeout < Duration::from_millis(10) || self.timeout > Duration::from_secs(300) {
            return Err(FieldError::new(
                "timeout",
                duration_str::format(self.timeout),
                "must be between 10ms and 5m",
            ));
        }
        if self.max_response_bytes == 0 || self.max_response_bytes > 1 << 30 {
            return Err(FieldError::new(
                "max_response_bytes",
                self.max_response_bytes,
                "must be between 1 and 1073741824",
            ));
        }
        if let Some(fp) = &self.tls_fingerprint
            && parse_fingerprint(fp).is_none()
        {
            return Err(FieldError::new(
                "tls_fingerprint",
                fp,
                "must be 64 hex digits (SHA-256), colons allowed",
            ));
        }
        match &self.auth {
            Auth::None {} => {}
            Auth::Bearer { token } if token.is_empty() || !header_safe(token) => {
                return Err(FieldError::new(
                    "auth.token",
                    HIDDEN,
                    "must be non-empty printable text",
                ));
            }
            Auth::Header { name, value } => {
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_".contains(c)) {
                    return Err(FieldError::new("auth.name", name, "must be a valid HTTP header name"));
                }
                if !header_safe(value) {
                    return Err(FieldError::new("auth.value", HIDDEN, "must be printable text"));
                }
            }
            Auth::Basic { username, password } => {
                if username.is_empty() || username.contains(':') || !header_safe(username) {
                    return Err(FieldError::new(
                        "auth.username",
                        username,
                        "must be non-empty and contain no ':'",
                    ));
                }
                if !header_safe(password) {
                    return Err(FieldError::new("auth.password", HIDDEN, "must be printable text"));
                }
            }
            Auth::PveToken { user, token_id, secret } => {
                if !user.contains('@') || user.contains('!') || !header_safe(user) {
                    return Err(FieldError::new("auth.user", user, "must be USER@REALM"));
                }
                if token_id.is_empty() || token_id.contains('=') || !header_safe(token_id) {
                    return Err(FieldError::new(
                        "auth.token_id",
                        token_id,
                        "must be a non-empty token id",
                    ));
                }
                if secret.is_empty() || !header_safe(secret) {
                    return Err(FieldError::new(
                        "auth.secret",
                        HIDDEN,
                        "must be non-empty printable text",
                    ));
                }
            }
            Auth::Bearer { .. } => {}
        }
        for (k, v) in &self.shape {
            if !valid_name(k) {
                return Err(FieldError::new(format!("shape.{k}"), k, NAME_RULE));
            }
            if *v > 1_000_000 {
                return Err(FieldError::new(format!("shape.{k}"), v, "must be at most 1000000"));
            }
        }
        for (k, v) in &self.labels {
            if !valid_name(k) {
                return Err(FieldError::new(format!("labels.{k}"), k, NAME_RULE));
            }
            if v.len() > 256 {
                return Err(FieldError::new(
                    format!("labels.{k}"),
                    v,
                    "must be at most 256 characters",
                ));
            }
        }
        Ok(())
    }
}

/// An `http://` or `https://` URL with a host.
pub fn check_http_url(field: &str, url: &str) -> Result<(), FieldError> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(()),
        Ok(_) => Err(FieldError::new(
            field,
            url,
            "must be an http:// or https:// URL with a host",
        )),
        Err(e) => Err(FieldError::new(field, url, format!("not a valid URL: {e}"))),
    }
}

pub fn header_safe(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Parse a SHA-256 fingerprint written as hex, with or without colons.
pub fn parse_fingerprint(s: &str) -> Option<[u8; 32]> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(hex).ok()?;
    bytes.try_into().ok()
}

/// `[[budgets]]`: a request budget shared by a set of instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub name: String,
    pub requests_per_second: f64,
    #[serde(default = "default_shared_fraction")]
    pub shared_fraction: f64,
    #[serde(default = "default_burst")]
    pub burst: u32,
}

impl BudgetConfig {
    pub fn validate(&self, field: &str) -> Result<(), FieldError> {
        if !valid_name(&self.name) {
            return Err(FieldError::new(format!("{field}.name"), &self.name, NAME_RULE));
        }
        if !(self.requests_per_second.is_finite() && self.requests_per_second > 0.0 && self.requests_per_second <= 1e6)
        {
            return Err(FieldError::new(
                format!("{field}.requests_per_second"),
                self.requests_per_second,
                "must be a number above 0 and at most 1000000",
            ));
        }
        if !(self.shared_fraction.is_finite() && self.shared_fraction > 0.0 && self.shared_fraction <= 1.0) {
            return Err(FieldError::new(
                format!("{field}.shared_fraction"),
                self.shared_fraction,
                "must be above 0 and at most 1",
            ));
        }
        if !(1..=100).contains(&self.burst) {
            return Err(FieldError::new(
                format!("{field}.burst"),
                self.burst,
                "must be between 1 and 100",
            ));
        }
        Ok(())
    }

    /// The pool's configured budget: `requests_per_second × shared_fraction`.
    pub fn budget_rps(&self) -> f64 {
        self.requests_per_second * self.shared_fraction
    }
}

fn default_shared_fraction() -> f64 {
    1.0
}
fn default_burst() -> u32 {
    10
}

// ---------------------------------------------------------------- poll outcomes

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    Transient,
    Permanent,
}

impl ErrorCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Transient => "transient",
            ErrorCategory::Permanent => "permanent",
        }
    }
}

/// What went wrong, finer than the category; used in messages and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Timeout,
    Connect,
    Dns,
    Http,
    RateLimited,
    Tls,
    Body,
    InvalidUrl,
    InvalidCredentials,
    Other,
}

/// A classified poll failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PollError {
    pub category: ErrorCategory,
    pub kind: ErrorKind,
    /// Short, operator-facing, one line.
    pub message: String,
    pub status: Option<u16>,
    /// From a `Retry-After` header (seconds or HTTP date), already capped.
    #[serde(default, with = "duration_str::option")]
    pub retry_after: Option<Duration>,
}

impl PollError {
    pub fn new(category: ErrorCategory, kind: ErrorKind, message: impl Into<String>) -> Self {
        PollError {
            category,
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }
    /// A 429 is a rate signal: counted as transient, but it never advances
    /// the failure streak.
    pub fn is_rate_limited(&self) -> bool {
        self.kind == ErrorKind::RateLimited
    }
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A successful poll.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PollSuccess {
    pub status: u16,
    /// First 8 bytes of the SHA-256 of the body: change detection. For a
    /// fan-out, a digest over the successful items' digests, in item order.
    pub digest: u64,
    pub body_bytes: u64,
    /// What a `shape_from` group learned: the length of the array its JSON
    /// pointer names, and the items' `item_field` values.
    pub shape: Option<ShapeUpdate>,
    /// Fan-out items that failed in a run that still succeeded (at least one
    /// item did).
    pub failed_items: Vec<FailedItem>,
    /// The body, for a group with `forward = true` (to ship to the event
    /// sink); for a fan-out, a JSON object of the items' bodies by item.
    pub body: Option<Vec<u8>>,
}

/// A shape count learned from a response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ShapeUpdate {
    pub count: u64,
    /// The values of `item_field` in array order; empty without `item_field`.
    pub items: Vec<String>,
}

/// One failed item of a fan-out run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedItem {
    pub item: String,
    pub error: PollError,
}

pub type PollResult = Result<PollSuccess, PollError>;

// ---------------------------------------------------------------- stored task state

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    #[default]
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Why a task sits in the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterReason {
    #[default]
    MaxRetryAttempts,
    PermanentFailure,
}

impl DeadLetterReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::MaxRetryAttempts => "max_retry_attempts",
            DeadLetterReason::PermanentFailure => "permanent_failure",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeadLetterRecord {
    pub reason: DeadLetterReason,
    /// When the task entered the queue.
    pub since: Timestamp,
    /// When the next single probe runs.
    pub next_recheck: Timestamp,
    /// Probes made since it entered.
    pub rechecks: u32,
}

/// Everything the scheduler remembers about one task across restarts (§4).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskRecord {
    pub last_attempt: Option<Timestamp>,
    pub last_success: Option<Timestamp>,
    pub last_change: Option<Timestamp>,
    pub digest: Option<u64>,
    /// Consecutive failures (429s excluded).
    pub failures: u32,
    pub breaker: BreakerState,
    pub retry_at: Option<Timestamp>,
    pub backoff_delay_ms: u64,
    pub next_run: Timestamp,
    /// The adaptive interval last computed (smoothing state), ms.
    pub interval_ms: u64,
    /// Unchanged successful polls in a row.
    pub idle_streak: u32,
    pub dead_letter: Option<DeadLetterRecord>,
    /// Discarded by an operator: not polled until re-enabled.
    pub disabled: bool,
    pub last_error: Option<PollError>,
    /// Fan-out items that failed in the last run, which still succeeded
    /// because at least one item did (at most [`FAILED_ITEMS_KEPT`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_items: Vec<FailedItem>,
}

/// Failed fan-out items kept per task.
pub const FAILED_ITEMS_KEPT: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_past_year_9999_format_as_its_last_second() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(Timestamp(1_742_580_300_000).to_rfc3339(), "2025-03-21T18:05:00Z");
        let last = "9999-12-31T23:59:59Z";
        assert_eq!(Timestamp(253_402_300_799_999).to_rfc3339(), last);
        assert_eq!(Timestamp(253_402_300_800_000).to_rfc3339(), last);
        assert_eq!(
            Timestamp::now()
                .plus(Duration::from_secs(20_000 * 31_557_600))
                .to_rfc3339(),
            last
        );
        assert_eq!(Timestamp(u64::MAX).to_rfc3339(), last);
        assert_eq!(
            Timestamp(1_742_580_300_123).to_rfc3339_millis(),
            "2025-03-21T18:05:00.123Z"
        );
        assert_eq!(Timestamp(u64::MAX).to_rfc3339_millis(), "9999-12-31T23:59:59.999Z");
    }
}

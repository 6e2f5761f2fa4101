//! Startup configuration (§7): the TOML file, environment variables, and the
//! validation that stops a bad configuration before anything runs.
//!
//! Precedence is environment > saved from the UI > file > built-in default.
//! Saved settings live in the store, so this module keeps the two layers it
//! owns apart: [`Config::monitoring_file`] (defaults + file) and
//! [`Config::env`] (the environment's overrides), and the caller puts saved
//! settings between them. Everything here is plain data and pure functions of
//! the file text and an environment map; only [`load`] reads the file and only
//! [`load_from_process_env`] reads the process environment.
//!
//! Every error is one [`ConfigError`] naming the file (or `environment`), the
//! key (or variable), and the value as written.

mod env;
mod file;

pub use env::{EnvOverrides, known_env_vars};

use crate::model::{BudgetConfig, FieldError, HIDDEN, InstanceConfig, MonitoringSettings, TypeDef, duration_str};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `file` of errors caused by environment variables.
pub const ENVIRONMENT: &str = "environment";

/// `[server]`: listeners and the data directory. Not editable at run time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Web UI and JSON API.
    pub listen: SocketAddr,
    /// Prometheus `/metrics`, on its own listener so it is never exposed by accident.
    pub metrics_listen: SocketAddr,
    /// Where the database lives. Relative paths are relative to the working
    /// directory; the packaged file sets `/var/lib/pollster`.
    pub data_dir: PathBuf,
    /// Trust `X-Forwarded-For` / `X-Forwarded-Proto` from a reverse proxy in
    /// front of Pollster (client address for login throttling, HTTPS for the
    /// cookie's `Secure` flag). Off by default: a direct client could forge
    /// them. On its own it trusts a proxy on loopback only; name the proxies
    /// in `trusted_proxies`.
    pub trust_proxy: bool,
    /// The reverse proxies whose `X-Forwarded-*` headers are believed, as
    /// addresses or CIDR ranges (`10.0.0.5`, `10.1.0.0/16`, `::1`). A request
    /// whose peer is not in the list is taken at its socket address.
    pub trusted_proxies: Vec<String>,
    /// Connections the web UI and API listener serves at once; more wait in
    /// the kernel's backlog until one ends (the metrics listener has its own,
    /// smaller cap).
    pub max_connections: usize,
}

impl ServerConfig {
    /// The proxies whose forwarded headers are believed: `trusted_proxies`,
    /// or loopback alone when only `trust_proxy` is on; none otherwise.
    /// Entries that do not parse were refused at load.
    pub fn proxy_nets(&self) -> Vec<ipnet::IpNet> {
        let mut nets: Vec<ipnet::IpNet> = self.trusted_proxies.iter().filter_map(|s| parse_net(s).ok()).collect();
        if nets.is_empty() && self.trust_proxy {
            nets = ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect();
        }
        nets
    }
}

/// `10.0.0.5` (one address) or `10.1.0.0/16`.
pub fn parse_net(raw: &str) -> Result<ipnet::IpNet, String> {
    let raw = raw.trim();
    if let Ok(ip) = raw.parse::<std::net::IpAddr>() {
        return Ok(ipnet::IpNet::from(ip));
    }
    raw.parse::<ipnet::IpNet>()
        .map(|n| n.trunc())
        .map_err(|_| "must be an IP address or a CIDR range, e.g. 10.0.0.5 or 10.1.0.0/16".into())
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 7655)),
            metrics_listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9091)),
            data_dir: PathBuf::from("./data"),
            trust_proxy: false,
            trusted_proxies: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Default `server.max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// `[sink]`: where events are shipped as NDJSON (§5).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub url: String,
    /// Extra request headers, e.g. `Authorization`. Values are secrets: never
    /// shown in `Debug` output or errors.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    #[serde(with = "duration_str", default = "default_buffering")]
    pub buffering: Duration,
    #[serde(with = "duration_str", default = "default_retry_limit")]
    pub retry_limit: Duration,
    #[serde(default = "default_queue_limit")]
    pub queue_limit: usize,
    #[serde(default)]
    pub gzip: bool,
}

fn default_batch_size() -> usize {
    1000
}
fn default_buffering() -> Duration {
    Duration::from_secs(2)
}
fn default_retry_limit() -> Duration {
    Duration::from_secs(600)
}
fn default_queue_limit() -> usize {
    100_000
}

impl SinkConfig {
    /// A sink to `url` with every other field at its default.
    pub fn new(url: impl Into<String>) -> Self {
        SinkConfig {
            url: url.into(),
            headers: BTreeMap::new(),
            batch_size: default_batch_size(),
            buffering: default_buffering(),
            retry_limit: default_retry_limit(),
            queue_limit: default_queue_limit(),
            gzip: false,
        }
    }

    /// Field checks; the field is relative to `[sink]` (`url`, `headers.X`, …).
    pub fn validate(&self) -> Result<(), FieldError> {
        crate::model::check_http_url("url", &self.url)?;
        for (name, value) in &self.headers {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(FieldError::new(
                    format!("headers.{name}"),
                    name,
                    "must be a valid HTTP header name",
                ));
            }
            if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return Err(FieldError::new(
                    format!("headers.{name}"),
                    HIDDEN,
                    "must be printable text",
                ));
            }
        }
        if !(1..=100_000).contains(&self.batch_size) {
            return Err(FieldError::new(
                "batch_size",
                self.batch_size,
                "must be between 1 and 100000",
            ));
        }
        if self.buffering < Duration::from_millis(10) || self.buffering > Duration::from_secs(600) {
            return Err(FieldError::new(
                "buffering",
                duration_str::format(self.buffering),
                "must be between 10ms and 10m",
            ));
        }
        if self.retry_limit > Duration::from_secs(7 * 86400) {
            return Err(FieldError::new(
                "retry_limit",
                duration_str::format(self.retry_limit),
                "must be at most 7d (0s drops a failing batch at once)",
            ));
        }
        if !(1..=10_000_000).contains(&self.queue_limit) {
            return Err(FieldError::new(
                "queue_limit",
                self.queue_limit,
                "must be between 1 and 10000000",
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, &str> = self.headers.keys().map(|k| (k.as_str(), HIDDEN)).collect();
        f.debug_struct("SinkConfig")
            .field("url", &self.url)
            .field("headers", &headers)
            .field("batch_size", &self.batch_size)
            .field("buffering", &self.buffering)
            .field("retry_limit", &self.retry_limit)
            .field("queue_limit", &self.queue_limit)
            .field("gzip", &self.gzip)
            .finish()
    }
}

/// Everything read at startup.
#[derive(Clone)]
pub struct Config {
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// `[server]`, environment applied.
    pub server: ServerConfig,
    /// Defaults + file, BEFORE env: the caller layers saved settings onto this,
    /// then applies [`Config::env`].
    pub monitoring_file: MonitoringSettings,
    /// The environment's overrides of monitoring (and sink) settings.
    pub env: EnvOverrides,
    /// `[sink]`, environment applied; `POLLSTER_SINK_URL` alone enables it.
    pub sink: Option<SinkConfig>,
    /// `[sink]` as the file has it, before the environment (a sink saved
    /// from the UI replaces this, then the environment applies).
    pub sink_file: Option<SinkConfig>,
    pub budgets: Vec<BudgetConfig>,
    /// Operator types from the file; the built-in `http` type
    /// ([`TypeDef::builtin_http`]) is not in this list.
    pub types: Vec<TypeDef>,
    /// Provisioned instances from the file.
    pub instances: Vec<InstanceConfig>,
    /// `POLLSTER_ADMIN_PASSWORD`.
    pub admin_password: Option<String>,
    /// To log at startup, e.g. unknown `POLLSTER_` variables.
    pub warnings: Vec<String>,
}

impl Config {
    /// Monitoring settings with no saved layer: file, then environment.
    pub fn monitoring(&self) -> MonitoringSettings {
        let mut m = self.monitoring_file.clone();
        self.env.apply(&mut m);
        m
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("file", &self.file)
            .field("server", &self.server)
            .field("monitoring_file", &self.monitoring_file)
            .field("env", &self.env)
            .field("sink", &self.sink)
            .field("budgets", &self.budgets)
            .field("types", &self.types)
            .field("instances", &self.instances.len())
            .field("admin_password", &self.admin_password.as_ref().map(|_| HIDDEN))
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Bad configuration: stops startup (exit code 2) and `check-config`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_error(.file, .key, .value, .message))]
pub struct ConfigError {
    /// The file's path, or `environment`.
    pub file: String,
    /// Dotted key (`adaptive.min_interval`, `instances[1].url`), or the
    /// environment variable; empty for errors about the whole file.
    pub key: String,
    /// The value as written (strings quoted); empty when there is none.
    pub value: String,
    pub message: String,
}

fn render_error(file: &str, key: &str, value: &str, message: &str) -> String {
    match (key.is_empty(), value.is_empty()) {
        (true, _) => format!("{file}: {message}"),
        (false, true) => format!("{file}: {key}: {message}"),
        (false, false) => format!("{file}: {key} = {value}: {message}"),
    }
}

impl ConfigError {
    pub fn new(
        file: impl Into<String>,
        key: impl Into<String>,
        value: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError {
            file: file.into(),
            key: key.into(),
            value: value.into(),
            message: message.into(),
        }
    }

    /// From a model validation error; `prefix` makes the field a full key path
    /// (e.g. `instances[1].`).
    fn from_field(file: &str, prefix: &str, e: FieldError) -> Self {
        ConfigError::new(file, format!("{prefix}{}", e.field), quote_plain(&e.value), e.message)
    }
}

/// Show a validated value the way it would be written in TOML: numbers,
/// booleans and lists bare, everything else quoted.
fn quote_plain(v: &str) -> String {
    let bare =
        v.parse::<f64>().is_ok() || matches!(v, "true" | "false" | HIDDEN) || v.starts_with('[') || v.starts_with('{');
    if bare { v.to_string() } else { format!("{v:?}") }
}

/// Load the file (if any) and the given environment, and validate everything.
pub fn load(file: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    load_with_presets(file, env, &crate::presets::all())
}

/// Like [`load`], with the process environment (non-UTF-8 variables skipped).
pub fn load_from_process_env(file: Option<&Path>) -> Result<Config, ConfigError> {
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    load(file, &env)
}

/// Like [`load`], with extra types known besides `http` (the shipped presets).
/// A `[[types]]` entry with a preset's name replaces the preset.
pub fn load_with_presets(
    file: Option<&Path>,
    env: &BTreeMap<String, String>,
    presets: &[TypeDef],
) -> Result<Config, ConfigError> {
    match file {
        None => build(None, None, env, presets),
        Some(path) => {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::new(&name, "", "", format!("cannot read config file: {e}")))?;
            load_str(path, &text, env, presets)
        }
    }
}

/// Like [`load_with_presets`], with the file's contents already read:
/// `text` is what `file` holds (`file` names it in errors and in
/// [`Config::file`]). Bad text of any kind is a [`ConfigError`], never a
/// panic.
pub fn load_str(
    file: &Path,
    text: &str,
    env: &BTreeMap<String, String>,
    presets: &[TypeDef],
) -> Result<Config, ConfigError> {
    let name = file.display().to_string();
    let parsed = file::parse(&name, text)?;
    build(Some((file, name)), Some(parsed), env, presets)
}

/// Validate the file's sections (or the defaults, with no file), then apply
/// and validate the environment.
fn build(
    file: Option<(&Path, String)>,
    f: Option<file::FileConfig>,
    env: &BTreeMap<String, String>,
    presets: &[TypeDef],
) -> Result<Config, ConfigError> {
    let (file, name) = match file {
        Some((path, name)) => (Some(path), name),
        None => (None, String::from("(defaults)")),
    };

    let mut monitoring_file = MonitoringSettings::default();
    let mut server = ServerConfig::default();
    let (mut sink, mut budgets, mut types, mut instances) = (None, vec![], vec![], vec![]);
    if let Some(f) = f {
        monitoring_file = MonitoringSettings {
            adaptive: f.adaptive,
            scheduler: f.scheduler,
            failure: f.failure,
        };
        (server, sink, budgets, types, instances) = (f.server, f.sink, f.budgets, f.types, f.instances);
    }

    // The file must be valid on its own: the environment may go away.
    validate_server(&name, &server)?;
    if let Err(errs) = monitoring_file.validate() {
        return Err(first(&name, "", errs));
    }
    validate_budgets(&name, &budgets)?;
    validate_types(&name, &types)?;
    let known_types = known_types(&types, presets);
    validate_pins(&monitoring_file.scheduler.group_interval_overrides, &known_types)
        .map_err(|e| ConfigError::from_field(&name, "", e))?;
    validate_instances(&name, &instances, &known_types, &budgets)?;
    if let Some(s) = &sink {
        s.validate().map_err(|e| ConfigError::from_field(&name, "sink.", e))?;
    }

    let from_env = env::read(env, &monitoring_file, &server, sink.as_ref())?;
    validate_server(ENVIRONMENT, &from_env.server)?;
    if let Err(errs) = from_env.monitoring.validate() {
        return Err(env_validation_error(&from_env.overrides, errs));
    }
    if let Some(s) = &from_env.sink {
        s.validate().map_err(|e| {
            let field = format!("sink.{}", e.field);
            match from_env.overrides.setting_for(&field) {
                Some((var, raw)) => env::env_error(var, raw, e.message),
                None => ConfigError::from_field(&name, "sink.", e),
            }
        })?;
    }
    let sink_file = sink.clone();
    sink = from_env.sink;

    Ok(Config {
        file: file.map(Path::to_path_buf),
        server: from_env.server,
        monitoring_file,
        env: from_env.overrides,
        sink,
        sink_file,
        budgets,
        types,
        instances,
        admin_password: from_env.admin_password,
        warnings: from_env.warnings,
    })
}

fn first(file: &str, prefix: &str, errs: Vec<FieldError>) -> ConfigError {
    match errs.into_iter().next() {
        Some(e) => ConfigError::from_field(file, prefix, e),
        None => ConfigError::new(file, "", "", "invalid configuration"),
    }
}

/// The file alone was valid, so a violation now is the environment's doing:
/// name the variable that sets the field, or the variables that changed it.
fn env_validation_error(ov: &EnvOverrides, errs: Vec<FieldError>) -> ConfigError {
    let Some(e) = errs.into_iter().next() else {
        return ConfigError::new(ENVIRONMENT, "", "", "invalid configuration");
    };
    if let Some((var, raw)) = ov.setting_for(&e.field) {
        return env::env_error(var, raw, e.message);
    }
    let section = e.field.split('.').next().unwrap_or_default();
    let vars: Vec<String> = ov
        .locked()
        .into_iter()
        .filter(|(field, _)| field.split('.').next() == Some(section))
        .map(|(_, var)| var)
        .collect();
    let culprits = if vars.is_empty() {
        "environment overrides".to_string()
    } else {
        vars.join(", ")
    };
    ConfigError::new(
        ENVIRONMENT,
        e.field,
        quote_plain(&e.value),
        format!("{} (after applying {culprits})", e.message),
    )
}

fn validate_server(file: &str, s: &ServerConfig) -> Result<(), ConfigError> {
    if s.data_dir.as_os_str().is_empty() {
        let key = if file == ENVIRONMENT {
            "POLLSTER_DATA_DIR"
        } else {
            "server.data_dir"
        };
        return Err(ConfigError::new(file, key, "\"\"", "must not be empty"));
    }
    for (i, p) in s.trusted_proxies.iter().enumerate() {
        if let Err(m) = parse_net(p) {
            let key = if file == ENVIRONMENT {
                "POLLSTER_TRUSTED_PROXIES".to_string()
            } else {
                format!("server.trusted_proxies[{i}]")
            };
            return Err(ConfigError::new(file, key, format!("{p:?}"), m));
        }
    }
    if !(1..=65_536).contains(&s.max_connections) {
        let key = if file == ENVIRONMENT {
            "POLLSTER_MAX_CONNECTIONS"
        } else {
            "server.max_connections"
        };
        return Err(ConfigError::new(
            file,
            key,
            s.max_connections.to_string(),
            "must be between 1 and 65536",
        ));
    }
    Ok(())
}

/// Each pool by the rules an API edit of it must pass too
/// ([`BudgetConfig::validate`]), so a pool the file sets can be edited later;
/// names unique.
fn validate_budgets(file: &str, budgets: &[BudgetConfig]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, b) in budgets.iter().enumerate() {
        b.validate(&format!("budgets[{i}]"))
            .map_err(|e| ConfigError::from_field(file, "", e))?;
        if !seen.insert(b.name.as_str()) {
            return Err(ConfigError::new(
                file,
                format!("budgets[{i}].name"),
                format!("{:?}", b.name),
                "duplicate budget name",
            ));
        }
    }
    Ok(())
}

fn validate_types(file: &str, types: &[TypeDef]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, t) in types.iter().enumerate() {
        let field = format!("types[{i}]");
        t.validate(&field).map_err(|e| ConfigError::from_field(file, "", e))?;
        let name = format!("{:?}", t.name);
        if t.name == "http" {
            return Err(ConfigError::new(
                file,
                format!("{field}.name"),
                name,
                "\"http\" is the built-in type and cannot be redefined",
            ));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(ConfigError::new(
                file,
                format!("{field}.name"),
                name,
                "duplicate type name",
            ));
        }
    }
    Ok(())
}

/// `http`, then the presets, then the file's types (which replace presets of
/// the same name).
fn known_types(file_types: &[TypeDef], presets: &[TypeDef]) -> Vec<TypeDef> {
    let builtin = TypeDef::builtin_http();
    let by_name: BTreeMap<&str, &TypeDef> = std::iter::once(&builtin)
        .chain(presets)
        .chain(file_types)
        .map(|t| (t.name.as_str(), t))
        .collect();
    by_name.into_values().cloned().collect()
}

fn type_names(types: &[TypeDef]) -> String {
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    names.join(", ")
}

/// Every pin names an existing `type/group` among `types` (include the
/// built-in `http`; of two types with one name the last counts). The error's field is
/// `scheduler.group_interval_overrides.<key>`, as in
/// [`MonitoringSettings::validate`]; the settings API can use this too.
pub fn validate_pins(overrides: &BTreeMap<String, Duration>, types: &[TypeDef]) -> Result<(), FieldError> {
    for (key, interval) in overrides {
        let field = format!("scheduler.group_interval_overrides.{key}");
        let value = duration_str::format(*interval);
        let Some((type_name, group)) = key.split_once('/') else {
            return Err(FieldError::new(field, value, "key must be \"type/group\""));
        };
        let Some(t) = types.iter().rev().find(|t| t.name == type_name) else {
            return Err(FieldError::new(
                field,
                value,
                format!("no type {type_name:?} (known: {})", type_names(types)),
            ));
        };
        if !t.groups.iter().any(|g| g.name == group) {
            let known: Vec<&str> = t.groups.iter().map(|g| g.name.as_str()).collect();
            return Err(FieldError::new(
                field,
                value,
                format!(
                    "type {type_name:?} has no group {group:?} (its groups: {})",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn validate_instances(
    file: &str,
    instances: &[InstanceConfig],
    types: &[TypeDef],
    budgets: &[BudgetConfig],
) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, inst) in instances.iter().enumerate() {
        let prefix = format!("instances[{i}].");
        inst.validate_fields()
            .map_err(|e| ConfigError::from_field(file, &prefix, e))?;
        if !seen.insert(inst.name.as_str()) {
            return Err(ConfigError::new(
                file,
                format!("{prefix}name"),
                format!("{:?}", inst.name),
                "duplicate instance name",
            ));
        }
        if !types.iter().any(|t| t.name == inst.type_name) {
            return Err(ConfigError::new(
                file,
                format!("{prefix}type"),
                format!("{:?}", inst.type_name),
                format!("unknown type (known: {})", type_names(types)),
            ));
        }
        if let Some(b) = &inst.budget
            && !budgets.iter().any(|x| &x.name == b)
        {
            let known: Vec<&str> = budgets.iter().map(|x| x.name.as_str()).collect();
            let hint = if known.is_empty() {
                "no [[budgets]] are defined".to_string()
            } else {
                format!("known: {}", known.join(", "))
            };
            return Err(ConfigError::new(
                file,
                format!("{prefix}budget"),
                format!("{b:?}"),
                format!("unknown budget ({hint})"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

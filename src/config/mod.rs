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
//!
//! The sections have a file each (`server.rs`, `sink.rs`), as do the file's
//! parsing (`file.rs`), the environment (`env.rs`), the checks across
//! sections (`validate.rs`) and the error (`error.rs`); this file puts them
//! together in [`load`].

mod cluster;
mod env;
mod error;
mod file;
mod log;
mod metrics;
mod server;
mod sink;
mod validate;

pub use cluster::{ClusterConfig, DEFAULT_GOSSIP_INTERVAL, DEFAULT_GOSSIP_PORT, host_name};
pub use env::{EnvOverrides, known_env_vars};
pub use error::{ConfigError, ENVIRONMENT};
pub use log::{DEFAULT_LOG_LEVEL, LogConfig, LogFormat, check_level};
pub use metrics::MetricsConfig;
pub use server::{
    ConnectionTimeouts, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_WRITE_TIMEOUT, MetricsAuth, ServerConfig, parse_net,
};
pub use sink::SinkConfig;
pub use validate::validate_pins;

use crate::model::{BudgetConfig, HIDDEN, InstanceConfig, MonitoringSettings, TypeDef};
use error::{env_validation_error, first};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use validate::{
    known_types, validate_budgets, validate_instances, validate_server, validate_tls_files, validate_types,
};

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
    /// `POLLSTER_SECRET_KEY_FILE`: the data key file, when not
    /// `<data_dir>/secret.key`.
    pub secret_key_file: Option<PathBuf>,
    /// `[log]`, environment applied (`POLLSTER_LOG_FORMAT`,
    /// `POLLSTER_LOG_LEVEL`; `--log-format` on the command line wins).
    pub log: LogConfig,
    /// `[metrics]`, environment applied
    /// (`POLLSTER_METRICS_PER_INSTANCE_HISTOGRAMS`).
    pub metrics: MetricsConfig,
    /// `[cluster]`, environment applied: `None` runs alone, as before.
    pub cluster: Option<ClusterConfig>,
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
            .field("secret_key_file", &self.secret_key_file)
            .field("log", &self.log)
            .field("metrics", &self.metrics)
            .field("cluster", &self.cluster)
            .field("warnings", &self.warnings)
            .finish()
    }
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
    let mut log = LogConfig::default();
    let mut metrics = MetricsConfig::default();
    let mut cluster = None;
    if let Some(f) = f {
        monitoring_file = MonitoringSettings {
            adaptive: f.adaptive,
            scheduler: f.scheduler,
            failure: f.failure,
        };
        (server, sink, budgets, types, instances, log) = (f.server, f.sink, f.budgets, f.types, f.instances, f.log);
        metrics = f.metrics;
        cluster = f.cluster;
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
    log.validate().map_err(|e| ConfigError::from_field(&name, "log.", e))?;
    // Only the key is left out of the file's own check: the environment
    // may name it.

    let from_env = env::read(
        env,
        &monitoring_file,
        &server,
        sink.as_ref(),
        &log,
        &metrics,
        cluster.as_ref(),
    )?;
    if let Some(c) = &from_env.cluster {
        // Named as the file names it, unless a variable set the key.
        c.validate(&name).map_err(|e| {
            let key = e.key.trim_start_matches("cluster.").split('[').next().unwrap_or("");
            let var = format!("POLLSTER_CLUSTER_{}", key.to_ascii_uppercase());
            match env::value(env, &var) {
                Some(raw) => env::env_error(&var, raw, e.message),
                None => e,
            }
        })?;
        c.read_key(&name).map_err(|mut e| {
            if let Some(raw) = env::value(env, "POLLSTER_CLUSTER_KEY_FILE") {
                e = env::env_error("POLLSTER_CLUSTER_KEY_FILE", raw, e.message);
            }
            e
        })?;
    }
    validate_server(ENVIRONMENT, &from_env.server)?;
    // The certificate files are read once, with the environment applied,
    // before anything binds a port.
    validate_tls_files(&name, env, &from_env.server)?;
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
        secret_key_file: from_env.secret_key_file,
        log: from_env.log,
        metrics: from_env.metrics,
        cluster: from_env.cluster,
        warnings: from_env.warnings,
    })
}

#[cfg(test)]
mod tests;

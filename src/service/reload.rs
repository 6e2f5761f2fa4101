//! Reading the config file again on a running server (SIGHUP,
//! `POST /api/admin/reload`, `pollster admin reload`), as Prometheus does:
//! the file and the environment are loaded and checked exactly as
//! `check-config` checks them, then put in force as a diff.
//!
//! - An instance whose definition did not change keeps its schedule,
//!   breaker, dead-letter entry and values; a changed one keeps its state
//!   and only what changed takes effect; a removed one goes, as a removal in
//!   the UI does; a new one is phased in. Every pool is re-planned once.
//! - The settings the file sets, the budget pools, the sink (unless the UI
//!   saved its own), the TLS certificates, the log level and `[metrics]`
//!   are applied live. The listeners, `data_dir`, `max_connections` and the other
//!   `[server]` keys wait for the next start: each that changed is named in
//!   one WARN.
//! - A bad file (or a combination the over-budget gate refuses) changes
//!   nothing: the running config stays, one ERROR names the key and the
//!   value, and the caller gets the same errors.
//! - Instances made in the UI or API are untouched; a file instance with the
//!   name of one of them is refused, naming both.
//!
//! Reloads run one at a time (a second waits for the first), and hold the
//! catalog's and the settings' edit turns while they apply, so a UI change
//! never interleaves with one.

use super::Context;
use super::error::ServiceError;
use super::with_store;
#[cfg(test)]
use crate::config::ServerConfig;
use crate::config::{Config, ConfigError};
use crate::core::catalog::Catalog;
use crate::metrics::Metrics;
use crate::model::{FieldError, MonitoringSettings};
use crate::sink::event::{Event, ReloadSummary};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Sets the log filter in force (`[log] level`, `POLLSTER_LOG_LEVEL`): given
/// by `main`, which owns the subscriber.
pub type SetLogLevel = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Where a reload reads the environment.
#[derive(Debug, Clone)]
pub enum EnvSource {
    /// The process's environment (`pollster serve`).
    Process,
    /// A fixed map (a server run in-process by a test).
    Fixed(BTreeMap<String, String>),
}

/// What reloads need besides the engine: the file, the config in force, the
/// certificates, the log filter and the reload metrics.
pub struct Reloader {
    file: Option<PathBuf>,
    env: EnvSource,
    /// The config in force; its `[server]` and `[log] format` stay those of
    /// the start (they need a restart), so every reload names them again
    /// while the file differs.
    running: tokio::sync::Mutex<Config>,
    tls: crate::tls::TlsHandle,
    log_level: std::sync::OnceLock<SetLogLevel>,
    /// The reload metrics, and `[metrics]` put in force.
    metrics: Metrics,
}

/// What one reload changed (the answer of `POST /api/admin/reload`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReloadReport {
    /// The config file read (absent when the server runs without one: then
    /// the environment alone is read again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Instances of the file that are new (phased in).
    pub instances_added: Vec<String>,
    /// Instances of the file whose definition (or type) changed; they keep
    /// their state.
    pub instances_changed: Vec<String>,
    /// Instances no longer in the file; they, their tasks and values are gone.
    pub instances_removed: Vec<String>,
    /// Types whose definition changed.
    pub types_changed: Vec<String>,
    /// Settings keys whose value in force changed (`adaptive.enabled` …).
    pub settings_changed: Vec<String>,
    /// Budget pools added, changed or removed.
    pub pools_changed: Vec<String>,
    /// Whether the sink's settings in force changed.
    pub sink_changed: bool,
    /// Whether the log filter changed.
    pub log_level_changed: bool,
    /// Whether TLS certificates were read again.
    pub tls_reloaded: bool,
    /// Keys that changed in the file but take effect only at the next start.
    pub restart_needed: Vec<String>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl ReloadReport {
    fn summary(&self) -> ReloadSummary {
        ReloadSummary {
            result: "success".into(),
            instances_added: self.instances_added.len(),
            instances_changed: self.instances_changed.len(),
            instances_removed: self.instances_removed.len(),
            settings_changed: self.settings_changed.len(),
            pools_changed: self.pools_changed.len(),
            error: None,
        }
    }
}

impl Reloader {
    /// `running` is the config the server started with; the reload metrics
    /// count from there, and the start counts as a success at `started`.
    pub fn new(
        running: Config,
        env: EnvSource,
        tls: crate::tls::TlsHandle,
        metrics: Metrics,
        started: crate::model::Timestamp,
    ) -> Reloader {
        metrics.config_reload.succeeded(started, false);
        Reloader {
            file: running.file.clone(),
            env,
            running: tokio::sync::Mutex::new(running),
            tls,
            log_level: std::sync::OnceLock::new(),
            metrics,
        }
    }

    /// How a reload changes the log filter (the process's subscriber, set
    /// up by `main`); without it, a changed `[log] level` is logged as
    /// needing a restart.
    pub fn set_log_level(&self, set: SetLogLevel) {
        let _ = self.log_level.set(set);
    }

    /// Read the file and the environment again and put them in force.
    /// `actor` is `signal`, the token's or user's name, or `cli:<uid>`.
    /// Refused: nothing changed, and the errors name each key.
    pub async fn reload(&self, cx: &Context, actor: &str) -> Result<ReloadReport, ServiceError> {
        let mut running = self.running.lock().await;
        let now = cx.engine.now();
        let target = self
            .file
            .as_ref()
            .map(|f| f.display().to_string())
            .unwrap_or_else(|| crate::config::ENVIRONMENT.to_string());
        match self.reload_locked(cx, &running).await {
            Ok((next, report)) => {
                *running = next;
                self.metrics.config_reload.succeeded(now, true);
                tracing::info!(
                    actor,
                    file = %target,
                    instances_added = ?report.instances_added,
                    instances_changed = ?report.instances_changed,
                    instances_removed = ?report.instances_removed,
                    types_changed = ?report.types_changed,
                    settings_changed = ?report.settings_changed,
                    pools_changed = ?report.pools_changed,
                    sink_changed = report.sink_changed,
                    log_level_changed = report.log_level_changed,
                    "config reloaded"
                );
                let event = Event::operator(now, actor, "config.reload", &target).with_reload(report.summary());
                record(cx, event).await;
                Ok(report)
            }
            Err(e) => {
                self.metrics.config_reload.failed();
                let first = first_error(&e);
                tracing::error!(
                    actor,
                    file = %target,
                    key = %first.0,
                    value = %first.1,
                    error = %e,
                    "config reload failed; the running config stays"
                );
                let summary = ReloadSummary {
                    result: "failure".into(),
                    error: Some(e.to_string()),
                    ..ReloadSummary::default()
                };
                let event = Event::operator(now, actor, "config.reload", &target).with_reload(summary);
                record(cx, event).await;
                Err(e)
            }
        }
    }

    async fn load(&self) -> Result<Config, ServiceError> {
        let file = self.file.clone();
        let env = self.env.clone();
        let loaded = tokio::task::spawn_blocking(move || match env {
            EnvSource::Process => crate::config::load_from_process_env(file.as_deref()),
            EnvSource::Fixed(vars) => crate::config::load(file.as_deref(), &vars),
        })
        .await
        .map_err(ServiceError::internal)?;
        loaded.map_err(|e| ServiceError::Invalid(vec![field_of(e)]))
    }

    async fn reload_locked(&self, cx: &Context, running: &Config) -> Result<(Config, ReloadReport), ServiceError> {
        let mut next = self.load().await?;
        for w in &next.warnings {
            tracing::warn!("{w}");
        }
        let _catalog_turn = cx.engine.edit_catalog().await;
        let _settings_turn = cx.engine.edit_settings().await;
        // A cluster's member polls a share of the catalog; the file describes
        // all of it.
        let current = cx.engine.full_catalog();
        let saved_budgets = with_store(cx, |s| s.get_settings(super::budgets::BUDGETS_KEY)).await?;
        let catalog = catalog_of(&next, &current, saved_budgets)?;
        let settings = cx
            .engine
            .propose_file_settings(&next.monitoring_file, &next.env)
            .map_err(ServiceError::Invalid)?;
        cx.engine
            .check_gate(&catalog, &settings)
            .map_err(|e| ServiceError::Invalid(vec![FieldError::new("budgets", "", e.to_string())]))?;
        let saved_sink = with_store(cx, |s| s.get_settings(crate::store::SINK_SETTINGS)).await?;
        let sink = super::sink::layered(&next, saved_sink);

        // Everything is checked: from here on, the reload is put in force.
        let mut report = diff(&current, &catalog, &cx.engine.monitoring(), &settings);
        report.file = self.file.as_ref().map(|f| f.display().to_string());
        if !self.tls.is_empty() {
            let tls = self.tls.clone();
            let reread = tokio::task::spawn_blocking(move || tls.reload())
                .await
                .map_err(ServiceError::internal)?;
            reread.map_err(|e| {
                ServiceError::Invalid(vec![FieldError::new(
                    "server.tls_cert",
                    "",
                    format!("cannot read the certificates again: {e}"),
                )])
            })?;
            report.tls_reloaded = true;
        }
        report.restart_needed = restart_needed(running, &next);
        for key in &report.restart_needed {
            tracing::warn!(key = %key, "{key} changed in the config file; it takes effect at the next start");
        }
        drop(current);
        cx.engine
            .apply_reload(catalog, next.monitoring_file.clone(), next.env.clone(), settings);
        if !report.instances_removed.is_empty() {
            let gone = report.instances_removed.clone();
            with_store(cx, move |s| {
                for name in &gone {
                    s.delete_instance(name)?;
                }
                Ok(())
            })
            .await?;
        }
        if sink != cx.engine.sink_config() {
            report.sink_changed = true;
            cx.engine.apply_sink_config(sink);
        }
        if next.metrics.per_instance_histograms != self.metrics.per_instance_histograms() {
            tracing::info!(
                per_instance_histograms = next.metrics.per_instance_histograms,
                "metrics.per_instance_histograms changed: the next scrape shows it"
            );
            self.metrics
                .set_per_instance_histograms(next.metrics.per_instance_histograms);
        }
        if next.log.level != running.log.level {
            match self.log_level.get() {
                Some(set) => match set(&next.log.level) {
                    Ok(()) => report.log_level_changed = true,
                    Err(e) => {
                        tracing::warn!(level = %next.log.level, error = %e, "the log level was not changed");
                        next.log.level = running.log.level.clone();
                    }
                },
                None => {
                    report.restart_needed.push("log.level".into());
                    tracing::warn!(
                        key = "log.level",
                        "log.level changed in the config file; it takes effect at the next start"
                    );
                    next.log.level = running.log.level.clone();
                }
            }
        }
        // What needs a restart stays as it runs, so the next reload names it
        // again while the file differs.
        next.server = running.server.clone();
        next.cluster = running.cluster.clone();
        next.log.format = running.log.format;
        next.secret_key_file = running.secret_key_file.clone();
        Ok((next, report))
    }
}

/// Write a reload's change event (and audit entry). A store failure here
/// is logged: the reload is in force either way.
async fn record(cx: &Context, event: Event) {
    let rows: Vec<_> = cx.sink.stage(&event).into_iter().collect();
    if rows.is_empty() {
        return;
    }
    if let Err(e) = with_store(cx, move |s| s.append_outbox(&rows)).await {
        tracing::warn!(error = %e, "cannot record the config reload in the audit trail");
    }
}

/// A config error as a field error: the key (or variable) and the value as
/// written.
fn field_of(e: ConfigError) -> FieldError {
    let message = if e.file == crate::config::ENVIRONMENT || e.file.is_empty() {
        e.message
    } else {
        format!("{} (in {})", e.message, e.file)
    };
    FieldError::new(e.key, e.value, message)
}

fn first_error(e: &ServiceError) -> (String, String) {
    match e {
        ServiceError::Invalid(errs) => errs
            .first()
            .map(|f| (f.field.clone(), f.value.clone()))
            .unwrap_or_default(),
        _ => Default::default(),
    }
}

/// The catalog the reloaded file describes: its types, pools (with those
/// saved from the UI over them) and instances, plus the instances made in
/// the UI or API, untouched.
fn catalog_of(next: &Config, current: &Catalog, saved_budgets: Option<Value>) -> Result<Catalog, ServiceError> {
    let mut cat = Catalog::new(next.types.clone(), next.budgets.clone());
    super::budgets::overlay_saved(&mut cat, saved_budgets);
    for i in &next.instances {
        cat.insert(i.clone(), true);
    }
    let mut errs = Vec::new();
    for (name, e) in current.instances.iter().filter(|(_, e)| !e.provisioned) {
        if let Some(pos) = next.instances.iter().position(|i| i.name.as_str() == name) {
            errs.push(FieldError::new(
                format!("instances[{pos}].name"),
                name,
                format!(
                    "the file's instance {name:?} has the name of an instance made in the UI or API ({name:?}); \
                     rename the file's, or delete the other first"
                ),
            ));
            continue;
        }
        if let Err(mut fe) = cat.check_references(&e.config) {
            fe.message = format!(
                "the instance {name:?} made in the UI or API uses this {}, which the file no longer defines: {}",
                fe.field, fe.message
            );
            errs.push(fe);
            continue;
        }
        cat.insert((*e.config).clone(), false);
    }
    if errs.is_empty() {
        Ok(cat)
    } else {
        Err(ServiceError::Invalid(errs))
    }
}

/// What the reload changes, by name.
fn diff(
    current: &Catalog,
    catalog: &Catalog,
    settings_now: &MonitoringSettings,
    settings_next: &MonitoringSettings,
) -> ReloadReport {
    let mut r = ReloadReport::default();
    for (name, t) in &catalog.types {
        if current.types.get(name).is_some_and(|old| old != t) {
            r.types_changed.push(name.clone());
        }
    }
    let was: BTreeMap<&str, _> = current
        .instances
        .iter()
        .filter(|(_, e)| e.provisioned)
        .map(|(n, e)| (n.as_str(), e))
        .collect();
    for (name, e) in catalog.instances.iter().filter(|(_, e)| e.provisioned) {
        match was.get(name.as_str()) {
            None => r.instances_added.push(name.clone()),
            Some(old) => {
                if old.config != e.config || r.types_changed.contains(&e.config.type_name) {
                    r.instances_changed.push(name.clone());
                }
            }
        }
    }
    for name in was.keys() {
        if !catalog.instances.contains_key(*name) {
            r.instances_removed.push(name.to_string());
        }
    }
    let pools = |c: &Catalog| -> BTreeMap<String, crate::model::BudgetConfig> {
        c.budgets.iter().map(|b| (b.name.clone(), b.clone())).collect()
    };
    let (before, after) = (pools(current), pools(catalog));
    for name in before.keys().chain(after.keys()) {
        if before.get(name) != after.get(name) && !r.pools_changed.contains(name) {
            r.pools_changed.push(name.clone());
        }
    }
    r.pools_changed.sort();
    r.settings_changed = changed_keys(settings_now, settings_next);
    r
}

/// The dotted keys (two levels: `adaptive.enabled`) whose values differ.
fn changed_keys(a: &MonitoringSettings, b: &MonitoringSettings) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(a).unwrap_or(Value::Null),
        serde_json::to_value(b).unwrap_or(Value::Null),
    );
    let mut out = Vec::new();
    let empty = serde_json::Map::new();
    let (sa, sb) = (a.as_object().unwrap_or(&empty), b.as_object().unwrap_or(&empty));
    let sections: std::collections::BTreeSet<&String> = sa.keys().chain(sb.keys()).collect();
    for section in sections {
        let (va, vb) = (sa.get(section), sb.get(section));
        match (va.and_then(Value::as_object), vb.and_then(Value::as_object)) {
            (Some(ka), Some(kb)) => {
                let keys: std::collections::BTreeSet<&String> = ka.keys().chain(kb.keys()).collect();
                for k in keys {
                    if ka.get(k) != kb.get(k) {
                        out.push(format!("{section}.{k}"));
                    }
                }
            }
            _ => {
                if va != vb {
                    out.push(section.clone());
                }
            }
        }
    }
    out
}

/// The keys that changed but need a restart: every `[server]` key (the
/// listeners, their certificates' paths, `data_dir`, the connection caps,
/// the proxies, who may scrape), every `[cluster]` key (the gossip socket,
/// the key, the member's name) and `[log] format`.
fn restart_needed(running: &Config, next: &Config) -> Vec<String> {
    let mut out = changed_section("server", &running.server, &next.server);
    out.extend(changed_section("cluster", &running.cluster, &next.cluster));
    if running.log.format != next.log.format {
        out.push("log.format".into());
    }
    out
}

/// `section.key` for each key of `section` that differs; `section` alone
/// when the section is there in one and not in the other.
fn changed_section<T: serde::Serialize>(section: &str, was: &T, now: &T) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(was).unwrap_or(Value::Null),
        serde_json::to_value(now).unwrap_or(Value::Null),
    );
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .map(|k| format!("{section}.{k}"))
                .collect()
        }
        _ if a != b => vec![section.to_string()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_names_each_leaf_that_differs() {
        let a = MonitoringSettings::default();
        let mut b = a.clone();
        b.adaptive.enabled = !a.adaptive.enabled;
        b.failure.dead_letter_after += 1;
        assert_eq!(
            changed_keys(&a, &b),
            vec!["adaptive.enabled".to_string(), "failure.dead_letter_after".to_string()]
        );
        assert!(changed_keys(&a, &a).is_empty());
    }

    #[test]
    fn restart_needed_names_the_server_and_cluster_keys() {
        let a = ServerConfig::default();
        let mut b = a.clone();
        b.listen = "127.0.0.1:1".parse().unwrap();
        b.max_connections += 1;
        assert_eq!(
            changed_section("server", &a, &b),
            vec!["server.listen".to_string(), "server.max_connections".to_string()]
        );
        assert!(changed_section("server", &a, &a).is_empty());
        let c = crate::config::ClusterConfig::default();
        let mut d = c.clone();
        d.member = Some("m1".into());
        d.min_members = 2;
        assert_eq!(
            changed_section("cluster", &Some(c.clone()), &Some(d)),
            vec!["cluster.member".to_string(), "cluster.min_members".to_string()]
        );
        assert_eq!(changed_section("cluster", &None, &Some(c)), vec!["cluster".to_string()]);
        assert!(changed_section::<Option<crate::config::ClusterConfig>>("cluster", &None, &None).is_empty());
    }
}

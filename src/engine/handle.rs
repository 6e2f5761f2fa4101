//! What the layers above the engine (web, CLI, tests) may ask of it:
//! commands that change state and copies that describe it, never a lock.
//!
//! Every method here takes the engine's locks itself, briefly (through
//! [`super::Shared::budgets`] for the pools, the only way to them), and
//! returns owned data, so no caller can hold a lock across an `.await`. The
//! dashboard, health API and metrics read [`super::snapshot`], which also
//! holds the handle's queries of the schedule and the pools.

use super::settings::SettingsError;
use super::{Shared, lock};
use crate::config::SinkConfig;
use crate::core::plan;
use crate::model::{GroupDef, InstanceConfig, MonitoringSettings, PollResult, TaskKey, TaskRecord, Timestamp};
use rand::Rng;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The one way the layers above the engine (web, the CLI, tests) reach it.
///
/// Cheap to clone. It offers the methods of this module and the read model
/// ([`super::snapshot`]); the engine's mutexes, queues and loops stay
/// behind it, private to `engine/`.
#[derive(Clone)]
pub struct EngineHandle(pub(super) Arc<Shared>);

impl EngineHandle {
    /// A handle on `shared`. The engine makes its own when it starts; a
    /// benchmark or test may make one on a state no engine runs.
    pub fn new(shared: Arc<Shared>) -> Self {
        EngineHandle(shared)
    }

    /// An operator action on one task (retry, discard, enable), committed
    /// before anyone sees it; see `Shared::operator_action`.
    pub async fn operator_action(
        &self,
        key: &TaskKey,
        actor: &str,
        op: crate::core::scheduler::OperatorOp,
    ) -> Result<TaskRecord, super::EngineError> {
        self.0.operator_action(key, actor, op).await
    }

    /// The maintenance windows in force.
    pub fn maintenance_windows(&self) -> Vec<crate::core::maintenance::MaintenanceWindow> {
        self.0.maintenance_windows()
    }

    /// Put a maintenance window in force (already stored).
    pub fn put_maintenance(&self, window: crate::core::maintenance::MaintenanceWindow) {
        self.0.put_maintenance(window)
    }

    /// Take the maintenance window `id` out of force (already deleted from
    /// the store); `false` when none was in force.
    pub fn remove_maintenance(&self, id: &str) -> bool {
        self.0.remove_maintenance(id)
    }

    /// The engine's time (its clock).
    pub fn now(&self) -> Timestamp {
        self.0.now()
    }

    /// The instances, types and budget pools in force.
    pub fn catalog(&self) -> Arc<crate::core::catalog::Catalog> {
        self.0.catalog()
    }

    /// The monitoring settings in force.
    pub fn monitoring(&self) -> MonitoringSettings {
        self.0.monitoring()
    }

    /// Whether the engine has loaded its state and dispatches.
    pub fn is_ready(&self) -> bool {
        self.0.is_ready()
    }

    /// Ready, or why not, at `now`.
    pub fn readiness(&self, now: Timestamp) -> Result<(), String> {
        self.0.readiness(now)
    }

    /// The read model at `now`, as detailed as `detail` asks.
    pub fn snapshot(&self, now: Timestamp, detail: super::snapshot::Detail) -> super::snapshot::Snapshot {
        self.0.snapshot(now, detail)
    }

    /// Refuses a catalog and settings whose plans would not fit their
    /// budgets (the over-budget gate).
    pub fn check_gate(
        &self,
        cat: &crate::core::catalog::Catalog,
        settings: &MonitoringSettings,
    ) -> Result<(), plan::OverBudget> {
        self.0.check_gate(cat, settings)
    }

    /// Put a stored catalog in force: tasks are placed and removed, the
    /// plans solved again.
    pub fn set_catalog(&self, catalog: crate::core::catalog::Catalog) {
        self.0.set_catalog(catalog)
    }

    /// The whole catalog, also the units a cluster's member does not own.
    pub fn full_catalog(&self) -> Arc<crate::core::catalog::Catalog> {
        self.0.full_catalog()
    }

    /// The units a cluster's member owns (`None` alone: all).
    pub fn scope(&self) -> Option<Arc<std::collections::BTreeSet<crate::core::ownership::Unit>>> {
        self.0.scope()
    }

    /// A cluster's member now owns `owned` ([`super::Shared::set_scope`]).
    pub fn set_scope(&self, owned: std::collections::BTreeSet<crate::core::ownership::Unit>, adopted: super::Adoption) {
        self.0.set_scope(owned, adopted)
    }

    /// What a cluster's member publishes of each unit it owns.
    pub fn unit_states(&self, every_task: bool) -> Vec<(crate::core::ownership::Unit, super::UnitState)> {
        self.0.unit_states(every_task)
    }

    /// Tasks on this server's schedule and their planned demand (rps).
    pub fn load(&self) -> (usize, f64) {
        self.0.load()
    }

    /// One pool's budget in force (AIMD applied).
    pub fn pool_effective_rps(&self, pool: &str) -> f64 {
        self.0.pool_effective_rps(pool)
    }

    /// The facts `instance` has learned.
    pub fn facts_of(&self, instance: &str) -> Option<Arc<crate::values::Facts>> {
        self.0.latest.facts_of(instance)
    }

    /// A task's latest values.
    pub fn values_of(&self, key: &TaskKey) -> Option<super::latest::LatestValues> {
        self.0.latest.values_of(key)
    }

    /// A task's kept bodies, by item.
    pub fn bodies_of(&self, key: &TaskKey) -> BTreeMap<String, super::latest::BodyInfo> {
        self.0.latest.bodies_of(key)
    }

    /// Poll `group` of `instance` once, now, outside the schedule (the
    /// instance test); `items` is the fan-out list.
    pub async fn probe(&self, instance: &InstanceConfig, group: &GroupDef, items: &[String]) -> PollResult {
        self.0.fetch.fetch(instance, None, group, items).await
    }
}

/// A turn at a check-then-write change (of the catalog, or of the settings):
/// while it is held, no other change of the same kind starts. Dropping it
/// ends the turn.
pub struct EditTurn<'a> {
    _turn: tokio::sync::MutexGuard<'a, ()>,
}

impl EngineHandle {
    /// Wait for a turn at changing the catalog (instances, budget pools):
    /// check-then-insert stays atomic.
    pub async fn edit_catalog(&self) -> EditTurn<'_> {
        EditTurn {
            _turn: self.0.catalog_edit.lock().await,
        }
    }

    /// Wait for a turn at changing the settings (monitoring, sink):
    /// validate-then-save stays atomic.
    pub async fn edit_settings(&self) -> EditTurn<'_> {
        EditTurn {
            _turn: self.0.settings_edit.lock().await,
        }
    }

    /// The settings document `patch` would make, and the settings it would
    /// put in force, without changing anything.
    pub fn propose_settings(&self, patch: &Value) -> Result<(Value, MonitoringSettings), SettingsError> {
        lock(&self.0.settings).propose(patch)
    }

    /// A proposal from [`EngineHandle::propose_settings`] has been stored: keep
    /// the saved document and put the settings in force.
    pub fn apply_saved_settings(&self, saved: Value, effective: MonitoringSettings) {
        lock(&self.0.settings).saved = saved;
        self.0.apply_settings(effective);
    }

    /// The settings a reloaded file's layer and environment would put in
    /// force, over the settings saved from the UI, without changing anything.
    pub fn propose_file_settings(
        &self,
        file: &MonitoringSettings,
        env: &crate::config::EnvOverrides,
    ) -> Result<MonitoringSettings, Vec<crate::model::FieldError>> {
        let mut layers = lock(&self.0.settings).clone();
        layers.file = file.clone();
        layers.env = env.clone();
        layers.effective()
    }

    /// A reloaded config file in force: its catalog and settings layers at
    /// once, with one re-plan (see `Shared::apply_reload`).
    pub fn apply_reload(
        &self,
        catalog: crate::core::catalog::Catalog,
        file: MonitoringSettings,
        env: crate::config::EnvOverrides,
        settings: MonitoringSettings,
    ) {
        self.0.apply_reload(catalog, file, env, settings)
    }

    /// Settings fields an environment variable sets, with the variable.
    pub fn locked_settings(&self) -> BTreeMap<String, String> {
        lock(&self.0.settings).locked()
    }

    /// Sink fields an environment variable sets, with the variable.
    pub fn locked_sink(&self) -> BTreeMap<String, String> {
        lock(&self.0.settings).env.locked_sink()
    }

    /// The sink's settings in force (environment applied); `None` when off.
    pub fn sink_config(&self) -> Option<SinkConfig> {
        lock(&self.0.sink_config).clone()
    }

    /// Stored new sink settings: put them in force.
    pub fn apply_sink_config(&self, next: Option<SinkConfig>) {
        *lock(&self.0.sink_config) = next.clone();
        self.0.sink.reconfigure(next);
    }

    /// The items a fan-out group polls on `instance`, as last learned
    /// (empty for a group without fan-out).
    pub fn fan_out_items(&self, instance: &InstanceConfig, group: &GroupDef) -> Vec<String> {
        self.0.fan_out_items(instance, group)
    }

    /// The exposition of every fresh sample (of `instance` only, if
    /// given): `None` when `instance` names no configured instance. Built
    /// without the scheduler lock.
    pub fn values_exposition(&self, instance: Option<&str>) -> Option<String> {
        let cat = self.0.catalog();
        if let Some(i) = instance
            && !cat.instances.contains_key(i)
        {
            return None;
        }
        let tasks = self.0.latest.fresh(self.0.now(), instance);
        Some(super::latest::render(&cat.values, &tasks))
    }

    /// A kept body with its bytes: from memory if the group commit has not
    /// written it yet, else from the store (blocking).
    pub fn read_body(
        &self,
        key: &TaskKey,
        item: &str,
    ) -> Result<Option<crate::model::BodyRecord>, crate::store::StoreError> {
        if let Some(b) = self.0.latest.unwritten_body(key, item) {
            return Ok(Some(b));
        }
        self.0.store.read_body(key, item)
    }

    /// A copy of one task's record, as the scheduler holds it now.
    pub fn task_record(&self, key: &TaskKey) -> Option<TaskRecord> {
        self.0.core().scheduler.get(key).map(|t| t.rec.clone())
    }

    /// Polls in flight now.
    pub fn in_flight(&self) -> usize {
        self.0.core().scheduler.in_flight()
    }

    /// Complete every task due at `now` at once, with the result `answer`
    /// gives for the n-th of them, outside the dispatcher and the store:
    /// fills the schedule of a benchmark or test with a realistic mix.
    /// Returns how many were completed.
    pub fn complete_due_now(
        &self,
        now: Timestamp,
        rng: &mut impl Rng,
        mut answer: impl FnMut(usize, &TaskKey) -> PollResult,
    ) -> usize {
        let mut c = self.0.core();
        let s = &mut c.scheduler;
        let mut n = 0;
        while let Some(d) = s.pop_due(now) {
            let result = answer(n, &d.key);
            s.complete(&d.key, &result, now, rng);
            n += 1;
        }
        n
    }
}

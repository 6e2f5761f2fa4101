//! The engine's budget state: one AIMD controller per pool, the solved plan
//! of every pool, and the shapes learned from `shape_from` groups.
//!
//! Plain data behind one mutex in [`Shared`](super::Shared); every rule is
//! in the pure modules it calls (`core::aimd`, `core::solver`,
//! `core::plan`). The clock arrives as arguments.

use crate::core::aimd::{Aimd, AimdSettings, RateSignal};
use crate::core::catalog::Catalog;
use crate::core::plan::{self, PoolStatus, Shapes};
use crate::model::{SchedulerMode, SchedulerSettings, ShapeUpdate, Timestamp};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct BudgetState {
    pub shapes: Shapes,
    pub aimd: BTreeMap<String, Aimd>,
    pub plans: BTreeMap<String, PoolStatus>,
    /// When the plans were last solved.
    pub solved_at: Timestamp,
    /// Warnings of the last solve, logged when they change.
    warnings: Vec<String>,
}

pub fn aimd_settings(s: &SchedulerSettings) -> AimdSettings {
    AimdSettings {
        enabled: s.aimd_enabled && s.mode == SchedulerMode::Adaptive,
        backoff_multiplier: s.aimd_backoff_multiplier,
        recovery_rps_per_minute: s.aimd_recovery_rps_per_minute,
    }
}

impl BudgetState {
    /// The pool's effective budget (AIMD), or 0 for an unknown pool.
    pub fn effective_rps(&self, pool: &str) -> f64 {
        self.aimd.get(pool).map(|a| a.effective()).unwrap_or(0.0)
    }

    /// Bring the AIMD controllers in line with the configured pools and
    /// solve every pool again.
    pub fn resolve(&mut self, cat: &Catalog, s: &SchedulerSettings, now: Timestamp) {
        self.aimd.retain(|name, _| cat.budgets.iter().any(|b| &b.name == name));
        let aimd = aimd_settings(s);
        for b in &cat.budgets {
            let configured = b.budget_rps();
            let a = self
                .aimd
                .entry(b.name.clone())
                .or_insert_with(|| Aimd::new(configured, now));
            if a.configured() != configured {
                a.set_configured(configured, now);
            }
            if !aimd.enabled && a.effective() != a.configured() {
                // AIMD switched off (or mode fixed): back to the configured budget.
                *a = Aimd::new(configured, now);
            }
        }
        let effective: BTreeMap<String, f64> = self.aimd.iter().map(|(k, a)| (k.clone(), a.effective())).collect();
        self.plans = plan::solve_all(cat, &self.shapes, s, &effective);
        for a in self.aimd.values_mut() {
            a.mark_solved();
        }
        self.solved_at = now;
        let warnings: Vec<String> = self
            .plans
            .values()
            .flat_map(|p| p.plan.warnings.iter().map(move |w| format!("pool {}: {w}", p.name)))
            .collect();
        if warnings != self.warnings {
            for w in &warnings {
                tracing::warn!("{w}");
            }
            self.warnings = warnings;
        }
        for p in self.plans.values() {
            if p.plan.over_budget {
                let shed: Vec<String> = p
                    .plan
                    .groups
                    .iter()
                    .filter(|g| g.shed)
                    .map(|g| format!("{}/{}", g.type_name, g.name))
                    .collect();
                tracing::debug!(
                    pool = %p.name,
                    demand_rps = p.plan.total_demand_rps,
                    target_rps = p.plan.target_rps,
                    shed = %shed.join(","),
                    "pool over budget"
                );
            }
        }
    }

    /// Keep a learned shape; true when it differs from what was known.
    pub fn learn(&mut self, instance: &str, group: &str, shape: ShapeUpdate) -> bool {
        let m = self.shapes.entry(instance.to_string()).or_default();
        if m.get(group) == Some(&shape) {
            return false;
        }
        m.insert(group.to_string(), shape);
        true
    }

    /// Forget shapes of instances no longer configured.
    pub fn retain_shapes(&mut self, cat: &Catalog) {
        self.shapes.retain(|i, _| cat.instances.contains_key(i));
    }

    /// A 429 in `pool`: the AIMD signal and the pool's effective budget after it.
    pub fn on_rate_limited(
        &mut self,
        pool: &str,
        now: Timestamp,
        retry_after: Option<Duration>,
        s: &SchedulerSettings,
    ) -> Option<(RateSignal, f64)> {
        let a = self.aimd.get_mut(pool)?;
        let signal = a.on_rate_limited(now, retry_after, &aimd_settings(s));
        Some((signal, a.effective()))
    }

    /// Additive recovery up to `now`. Returns the pools whose effective
    /// budget changed (with the new value) and whether a re-solve is due.
    pub fn tick(&mut self, now: Timestamp, s: &SchedulerSettings) -> (Vec<(String, f64)>, bool) {
        let aimd = aimd_settings(s);
        let mut changed = Vec::new();
        let mut resolve = false;
        for (name, a) in self.aimd.iter_mut() {
            let before = a.effective();
            resolve |= a.tick(now, &aimd);
            if a.effective() != before {
                changed.push((name.clone(), a.effective()));
            }
        }
        (changed, resolve)
    }
}

//! The catalog: which instances and types exist, and the tasks they imply.
//! Rebuilt (copy-on-write) when instances change; workers read it through an
//! `Arc` so a poll never holds a lock.

use crate::core::task::TaskMeta;
use crate::model::{BudgetConfig, GroupDef, InstanceConfig, SchedulerSettings, TaskKey, TypeDef};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct InstanceEntry {
    pub config: Arc<InstanceConfig>,
    /// Defined in the config file: read-only in the UI and API.
    pub provisioned: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub types: BTreeMap<String, Arc<TypeDef>>,
    pub instances: BTreeMap<String, InstanceEntry>,
    pub budgets: Vec<BudgetConfig>,
}

impl Catalog {
    pub fn new(types: Vec<TypeDef>, budgets: Vec<BudgetConfig>) -> Self {
        let mut map = BTreeMap::new();
        let http = TypeDef::builtin_http();
        map.insert(http.name.clone(), Arc::new(http));
        for t in types {
            map.insert(t.name.clone(), Arc::new(t));
        }
        Catalog {
            types: map,
            instances: BTreeMap::new(),
            budgets,
        }
    }

    pub fn insert(&mut self, config: InstanceConfig, provisioned: bool) {
        self.instances.insert(
            config.name.clone(),
            InstanceEntry {
                config: Arc::new(config),
                provisioned,
            },
        );
    }

    /// Every task the catalog implies: one per (enabled instance, group).
    pub fn tasks(&self, s: &SchedulerSettings) -> Vec<(TaskKey, TaskMeta)> {
        let mut out = Vec::new();
        for e in self.instances.values() {
            if !e.config.enabled {
                continue;
            }
            let Some(ty) = self.types.get(&e.config.type_name) else {
                continue;
            };
            let type_name: Arc<str> = Arc::from(ty.name.as_str());
            let instance: Arc<str> = Arc::from(e.config.name.as_str());
            for g in &ty.groups {
                let pin = s.group_interval_overrides.get(&format!("{}/{}", ty.name, g.name));
                out.push((
                    TaskKey {
                        instance: instance.clone(),
                        group: Arc::from(g.name.as_str()),
                    },
                    TaskMeta {
                        type_name: type_name.clone(),
                        priority: g.priority,
                        planned: pin.copied().unwrap_or(g.floor),
                    },
                ));
            }
        }
        out
    }

    /// The instance and group a task polls.
    pub fn target(&self, key: &TaskKey) -> Option<(Arc<InstanceConfig>, GroupDef)> {
        let e = self.instances.get(&*key.instance)?;
        let ty = self.types.get(&e.config.type_name)?;
        let g = ty.groups.iter().find(|g| *g.name == *key.group)?;
        Some((e.config.clone(), g.clone()))
    }

    /// Check an instance against the types and budgets this catalog knows.
    pub fn check_references(&self, i: &InstanceConfig) -> Result<(), crate::model::FieldError> {
        if !self.types.contains_key(&i.type_name) {
            let known: Vec<&str> = self.types.keys().map(|s| s.as_str()).collect();
            return Err(crate::model::FieldError::new(
                "type",
                &i.type_name,
                format!("unknown type (known: {})", known.join(", ")),
            ));
        }
        if let Some(b) = &i.budget
            && !self.budgets.iter().any(|p| &p.name == b)
        {
            return Err(crate::model::FieldError::new("budget", b, "unknown budget pool"));
        }
        Ok(())
    }
}

//! The catalog: which instances, types and budget pools exist. Plain data;
//! the tasks it implies are planned in [`crate::core::plan`]. The engine
//! rebuilds it (copy-on-write) when instances change, and workers read it
//! through an `Arc` so a poll never holds a lock.

use crate::model::{BaseUrl, BudgetConfig, GroupDef, InstanceConfig, TaskKey, TypeDef};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct InstanceEntry {
    pub config: Arc<InstanceConfig>,
    /// `config.url`, parsed once (`None` when it does not parse: the poll
    /// then reports why).
    pub base_url: Option<Arc<BaseUrl>>,
    /// Defined in the config file: read-only in the UI and API.
    pub provisioned: bool,
}

/// What one task polls: its instance (with the URL parsed) and its group,
/// shared with the catalog rather than copied.
#[derive(Debug, Clone)]
pub struct Target {
    pub instance: Arc<InstanceConfig>,
    pub base_url: Option<Arc<BaseUrl>>,
    ty: Arc<TypeDef>,
    index: usize,
}

impl Target {
    pub fn group(&self) -> &GroupDef {
        &self.ty.groups[self.index]
    }
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub types: BTreeMap<String, Arc<TypeDef>>,
    pub instances: BTreeMap<String, InstanceEntry>,
    pub budgets: Vec<BudgetConfig>,
}

impl Catalog {
    /// The built-in `http` type, the shipped presets, then `types` (which
    /// replace presets of the same name).
    pub fn new(types: Vec<TypeDef>, budgets: Vec<BudgetConfig>) -> Self {
        let mut map = BTreeMap::new();
        let http = TypeDef::builtin_http();
        map.insert(http.name.clone(), Arc::new(http));
        for t in crate::presets::all() {
            map.insert(t.name.clone(), Arc::new(t));
        }
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
            config.name.to_string(),
            InstanceEntry {
                base_url: BaseUrl::parse(&config.url).ok().map(Arc::new),
                config: Arc::new(config),
                provisioned,
            },
        );
    }

    /// The instance and group a task polls.
    pub fn target(&self, key: &TaskKey) -> Option<Target> {
        let e = self.instances.get(&*key.instance)?;
        let ty = self.types.get(&e.config.type_name)?;
        let index = ty.groups.iter().position(|g| *g.name == *key.group)?;
        Some(Target {
            instance: e.config.clone(),
            base_url: e.base_url.clone(),
            ty: ty.clone(),
            index,
        })
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

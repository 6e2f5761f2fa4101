//! The catalog: which instances, types and budget pools exist. Plain data;
//! the tasks it implies are planned in [`crate::core::plan`]. The engine
//! rebuilds it (copy-on-write) when instances change, and workers read it
//! through an `Arc` so a poll never holds a lock.

use crate::model::{BaseUrl, BudgetConfig, GroupDef, InstanceConfig, TaskKey, TypeDef};
use crate::values::{MetricKind, Rule};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
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

    pub fn type_name(&self) -> &str {
        &self.ty.name
    }
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub types: BTreeMap<String, Arc<TypeDef>>,
    pub instances: BTreeMap<String, InstanceEntry>,
    pub budgets: Vec<BudgetConfig>,
    /// Every group's value rules, compiled once for the catalog's types.
    pub values: Arc<ValueCatalog>,
}

/// One group's value rules, compiled.
#[derive(Debug)]
pub struct GroupRules {
    pub rules: Vec<Rule>,
    pub max_series: usize,
    /// A digest of the rules as written: samples stored under other rules
    /// (a changed or removed rule) are never served.
    pub fingerprint: u64,
    /// Some label reads an instance fact (`@fact.NAME`) or lookup table
    /// (`@lookup.TABLE[KEY].FIELD`).
    pub uses_facts: bool,
}

impl GroupRules {
    /// Runs the rules on what a successful poll parsed: the one body, or
    /// every successful fan-out item's (as one extraction), with the
    /// instance's facts.
    pub fn run(
        &self,
        json: &crate::model::PolledJson,
        facts: Option<&crate::values::Facts>,
    ) -> crate::values::Extraction {
        let mut x = crate::values::Extractor::new(self.max_series);
        let cx = |item| crate::values::Context {
            item,
            facts,
            ..Default::default()
        };
        match json {
            crate::model::Polled::One(body) => x.feed_in(&self.rules, body, cx(None)),
            crate::model::Polled::Items(items) => {
                for (item, body) in items {
                    x.feed_in(&self.rules, body, cx(Some(item)));
                }
            }
        }
        x.finish()
    }
}

/// A metric that value rules give: its HELP and TYPE (one per metric, as
/// check-config makes sure) and how many groups feed it.
#[derive(Debug, Clone)]
pub struct Family {
    pub help: Arc<str>,
    pub kind: MetricKind,
    pub groups: usize,
}

/// The compiled value rules of every group of every type, and the metric
/// families they give.
#[derive(Debug, Default)]
pub struct ValueCatalog {
    groups: HashMap<(String, String), Arc<GroupRules>>,
    families: BTreeMap<Arc<str>, Family>,
}

impl ValueCatalog {
    /// Compiles the rules of `types`. Rules were checked when the config
    /// was read; one that still fails (a preset bug) leaves its group
    /// without rules, logged.
    pub fn build<'a>(types: impl IntoIterator<Item = &'a TypeDef>) -> ValueCatalog {
        let mut out = ValueCatalog::default();
        for ty in types {
            for g in &ty.groups {
                if g.values.is_empty() {
                    continue;
                }
                let rules = match g.compile_values(&ty.name, &format!("types.{}.groups.{}", ty.name, g.name)) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "a group's value rules do not compile; it gives no values");
                        continue;
                    }
                };
                let mut metrics: Vec<&Arc<str>> = rules.iter().map(|r| &r.metric).collect();
                metrics.sort_unstable();
                metrics.dedup();
                for m in metrics {
                    let rule = rules.iter().find(|r| &r.metric == m).expect("metric of a rule");
                    out.families
                        .entry(m.clone())
                        .and_modify(|f| f.groups += 1)
                        .or_insert(Family {
                            help: rule.help.clone(),
                            kind: rule.kind,
                            groups: 1,
                        });
                }
                let written = serde_json::to_vec(&(&g.values, g.max_series)).unwrap_or_default();
                let digest = Sha256::digest(&written);
                let fingerprint = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
                out.groups.insert(
                    (ty.name.clone(), g.name.to_string()),
                    Arc::new(GroupRules {
                        uses_facts: rules.iter().any(|r| r.labels.iter().any(|l| l.template.uses_facts())),
                        rules,
                        max_series: g.max_series,
                        fingerprint,
                    }),
                );
            }
        }
        out
    }

    /// The compiled rules of `group` of type `type_name`, if it has any.
    pub fn group(&self, type_name: &str, group: &str) -> Option<&Arc<GroupRules>> {
        self.groups.get(&(type_name.to_string(), group.to_string()))
    }

    /// The HELP, TYPE and feeding groups of a metric rules give.
    pub fn family(&self, metric: &str) -> Option<&Family> {
        self.families.get(metric)
    }

    /// Whether any group has value rules.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
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
        let values = Arc::new(ValueCatalog::build(map.values().map(|t| &**t)));
        Catalog {
            types: map,
            instances: BTreeMap::new(),
            budgets,
            values,
        }
    }

    pub fn insert(&mut self, config: InstanceConfig, provisioned: bool) {
        let base_url = BaseUrl::parse(&config.url).ok();
        self.put(config, base_url, provisioned);
    }

    /// [`Catalog::insert`] with the URL already parsed (by
    /// [`InstanceConfig::validate_fields_parsed`]).
    pub fn insert_parsed(&mut self, config: InstanceConfig, base_url: BaseUrl, provisioned: bool) {
        self.put(config, Some(base_url), provisioned);
    }

    fn put(&mut self, config: InstanceConfig, base_url: Option<BaseUrl>, provisioned: bool) {
        self.instances.insert(
            config.name.to_string(),
            InstanceEntry {
                base_url: base_url.map(Arc::new),
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

    /// The compiled value rules of the group `key` polls, if it has any.
    pub fn rules_of(&self, key: &TaskKey) -> Option<&Arc<GroupRules>> {
        let e = self.instances.get(&*key.instance)?;
        self.values.group(&e.config.type_name, &key.group)
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

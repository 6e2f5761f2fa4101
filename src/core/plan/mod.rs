//! Planning: from the catalog and the learned shapes to what each budget
//! pool costs, the solved plan of every pool, the interval and hold each
//! task follows, and the over-budget gate.
//!
//! Pure functions over plain data (the catalog, learned shapes, settings and
//! effective budgets); the engine calls them under its locks, `pollster
//! plan` and `check-config` call them on the config file alone. The solver
//! itself is [`crate::core::solver`]; this module builds its inputs and
//! reads its answers.
//!
//! A group's identity within a pool is `type/group` (the key pins use too).
//! Its cost per cycle is the sum over the pool's enabled instances of that
//! type of `cost × items` for a fan-out group (items: the learned item list,
//! else the count set in the instance's `shape`), or `cost` otherwise.

mod cost;
mod gate;
mod holds;
mod pools;
mod running;
mod solve;
mod tasks;

pub use cost::*;
pub use gate::*;
pub use holds::*;
pub use pools::*;
pub use running::*;
pub use solve::*;
pub use tasks::*;

use crate::model::ShapeUpdate;
use std::collections::{BTreeMap, HashMap};

/// Shapes learned from `shape_from` groups: instance → group → shape.
pub type Shapes = HashMap<String, BTreeMap<String, ShapeUpdate>>;

/// A small catalog the tests of every planning rule share: a cluster type
/// whose `nodes` group learns the shape a per-node fan-out and an
/// `enabled_when` group depend on, in one pool of 10 rps.
#[cfg(test)]
mod fixtures {
    use crate::core::catalog::Catalog;
    use crate::model::{BudgetConfig, GroupDef, InstanceConfig, TypeDef};
    use std::time::Duration;

    pub fn cluster() -> TypeDef {
        let mut nodes = GroupDef::new("nodes", "/nodes", 1, Duration::from_secs(30));
        nodes.shape_from = Some("/data".into());
        nodes.item_field = Some("node".into());
        let mut per_node = GroupDef::new("node_status", "/nodes/{item}/status", 2, Duration::from_secs(60));
        per_node.fan_out = Some("nodes".into());
        per_node.cost = 2.0;
        let mut ha = GroupDef::new("ha", "/ha", 3, Duration::from_secs(60));
        ha.enabled_when = Some("nodes".into());
        TypeDef {
            name: "cluster".into(),
            groups: vec![nodes, per_node, ha],
        }
    }

    pub fn catalog(instances: &[(&str, Option<u64>, bool)]) -> Catalog {
        let mut cat = Catalog::new(
            vec![cluster()],
            vec![BudgetConfig {
                name: "p".into(),
                requests_per_second: 10.0,
                shared_fraction: 1.0,
                burst: 10,
            }],
        );
        for (name, nodes, enabled) in instances {
            let mut i = InstanceConfig::new(name, "cluster", "http://127.0.0.1:1/");
            i.budget = Some("p".into());
            i.enabled = *enabled;
            if let Some(n) = nodes {
                i.shape.insert("nodes".into(), *n);
            }
            cat.insert(i, true);
        }
        cat
    }
}

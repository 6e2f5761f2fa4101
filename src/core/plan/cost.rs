//! What planning counts for one group of one instance: its pin, its shape
//! counts (learned, else configured), its fan-out items, and the requests
//! one execution of it costs.

use super::Shapes;
use crate::model::{GroupDef, InstanceConfig, SchedulerSettings};
use std::time::Duration;

/// Pins by `type/group`.
pub fn pin_of(s: &SchedulerSettings, type_name: &str, group: &str) -> Option<Duration> {
    // Asked for every task of every re-plan: no key is built when nothing
    // is pinned (the usual case).
    if s.group_interval_overrides.is_empty() {
        return None;
    }
    s.group_interval_overrides.get(&format!("{type_name}/{group}")).copied()
}

/// The count of shape `name` of an instance: learned, else configured.
pub fn shape_count(inst: &InstanceConfig, shapes: &Shapes, name: &str) -> Option<u64> {
    shapes
        .get(inst.name.as_str())
        .and_then(|m| m.get(name))
        .map(|s| s.count)
        .or_else(|| inst.shape.get(name).copied())
}

/// The items a fan-out group runs over, as learned.
pub fn fan_out_items<'a>(inst: &InstanceConfig, shapes: &'a Shapes, g: &GroupDef) -> &'a [String] {
    g.fan_out
        .as_ref()
        .and_then(|f| shapes.get(inst.name.as_str())?.get(f))
        .map(|s| s.items.as_slice())
        .unwrap_or(&[])
}

/// Requests one execution of `g` on `inst` costs, as planned: a fan-out is
/// one request per item (learned items, else the configured count).
pub fn execution_cost(inst: &InstanceConfig, shapes: &Shapes, g: &GroupDef) -> f64 {
    match &g.fan_out {
        None => g.cost,
        Some(f) => {
            let learned = fan_out_items(inst, shapes, g).len() as u64;
            let n = if learned > 0 {
                learned
            } else {
                shape_count(inst, shapes, f).unwrap_or(0)
            };
            g.cost * n as f64
        }
    }
}

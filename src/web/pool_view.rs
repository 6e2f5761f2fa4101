//! A solved pool as readers see it: the one shape the status page, the
//! groups API (`/api/monitoring/scheduler/groups`, `/status?format=json`)
//! and `pollster plan --format json` all show, so their field names cannot
//! drift apart. The planning itself is `core::plan`; this only presents it.

use crate::core::plan::{PoolStatus, Unbudgeted};
use crate::core::solver::GroupPlan;
use crate::model::{Profile, SchedulerMode, SchedulerSettings};
use serde::Serialize;
use std::collections::BTreeMap;

/// The name under which unbudgeted instances' groups are shown.
pub const UNBUDGETED: &str = "unbudgeted";

/// One pool's plan as the pages, the JSON API and `pollster plan --format
/// json` show it (one set of field names for all three).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolView {
    pub name: String,
    pub mode: SchedulerMode,
    pub profile: Option<Profile>,
    /// `null` for unbudgeted instances.
    pub budget_rps: Option<f64>,
    pub effective_budget_rps: Option<f64>,
    pub target_utilization: f64,
    pub target_rps: Option<f64>,
    pub total_demand_rps: f64,
    pub utilization: Option<f64>,
    pub over_budget: bool,
    pub fits_after_shedding: bool,
    pub shape: BTreeMap<String, u64>,
    pub instances: usize,
    pub warnings: Vec<String>,
    /// RFC 3339: the pool's dispatch is paused until then (`Retry-After`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<String>,
    pub groups: Vec<GroupView>,
}

/// A group of a pool's plan, with when it last ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupView {
    #[serde(flatten)]
    pub plan: GroupPlan,
    /// RFC 3339: the latest attempt of any of the group's tasks (`null`:
    /// never); absent from `pollster plan`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_ran: Option<Option<String>>,
}

impl GroupView {
    pub fn stretched(&self) -> bool {
        !self.plan.pinned && self.plan.stretch_factor > 1.0 + 1e-9
    }
}

impl PoolView {
    pub fn from_status(p: &PoolStatus) -> PoolView {
        PoolView {
            name: p.name.clone(),
            mode: p.mode,
            profile: p.profile,
            budget_rps: Some(p.plan.budget_rps),
            effective_budget_rps: Some(p.plan.effective_budget_rps),
            target_utilization: p.plan.target_utilization,
            target_rps: Some(p.plan.target_rps),
            total_demand_rps: p.plan.total_demand_rps,
            utilization: Some(p.plan.utilization),
            over_budget: p.plan.over_budget,
            fits_after_shedding: p.plan.fits_after_shedding,
            shape: p.shape.clone(),
            instances: p.instances,
            warnings: p.plan.warnings.clone(),
            paused_until: None,
            groups: p
                .plan
                .groups
                .iter()
                .map(|g| GroupView {
                    plan: g.clone(),
                    last_ran: None,
                })
                .collect(),
        }
    }

    /// Instances with no pool: floors and pins only, no budget.
    pub fn unbudgeted(u: Unbudgeted, s: &SchedulerSettings) -> PoolView {
        PoolView {
            name: UNBUDGETED.into(),
            mode: s.mode,
            profile: s.profile,
            budget_rps: None,
            effective_budget_rps: None,
            target_utilization: s.target_utilization,
            target_rps: None,
            total_demand_rps: u.groups.iter().map(|g| g.demand_rps).sum(),
            utilization: None,
            over_budget: false,
            fits_after_shedding: true,
            shape: u.shape,
            instances: u.instances,
            warnings: Vec::new(),
            paused_until: None,
            groups: u
                .groups
                .into_iter()
                .map(|plan| GroupView { plan, last_ran: None })
                .collect(),
        }
    }
}

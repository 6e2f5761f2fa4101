//! The over-budget gate: the check that refuses a config (at startup, in
//! `check-config`) or a live change whose full plan cannot fit a pool.

use super::{Shapes, pool_inputs, solve_settings};
use crate::core::catalog::Catalog;
use crate::core::solver;
use crate::model::{Profile, SchedulerMode, SchedulerSettings};

/// Why the gate refused: a pool whose full plan does not fit its budget
/// target, with what each profile would need. Its text names the pool, the
/// demand, the target and the three profiles.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "budget pool {pool:?} is over budget: its plan needs {demand_rps:.3} rps even with every eligible group stretched to its cap, \
     above the budget target of {target_rps:.3} rps ({budget_rps:.3} rps × target_utilization {target_utilization}). \
     Set scheduler.profile to one of: {}, {}, {}. \
     Or raise the pool's requests_per_second, or pin longer intervals",
    profiles[0], profiles[1], profiles[2]
)]
pub struct OverBudget {
    pub pool: String,
    /// The full plan's demand, every eligible group stretched to its cap.
    pub demand_rps: f64,
    pub target_rps: f64,
    pub budget_rps: f64,
    pub target_utilization: f64,
    /// Availability, standard and full, in that order.
    pub profiles: [ProfileFit; 3],
}

/// What one profile would need of an over-budget pool.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileFit {
    pub profile: Profile,
    pub demand_rps: f64,
    pub fits: bool,
}

impl std::fmt::Display for ProfileFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let covers = match self.profile {
            Profile::Availability => "priority 1 only",
            Profile::Standard => "priorities 1-3",
            Profile::Full => "all groups",
        };
        let verdict = if self.fits {
            "fits"
        } else if self.profile == Profile::Full {
            "over; sheds priority 3-4 groups until it fits"
        } else {
            "over"
        };
        write!(
            f,
            "{} ({covers}: {:.3} rps, {verdict})",
            self.profile.name(),
            self.demand_rps
        )
    }
}

/// The startup and live-change gate (§2): with no profile set and mode
/// `adaptive`, a pool whose full plan still exceeds its budget target at the
/// configured budget is refused ([`OverBudget`]).
pub fn gate(cat: &Catalog, shapes: &Shapes, s: &SchedulerSettings) -> Result<(), OverBudget> {
    if s.profile.is_some() || s.mode == SchedulerMode::Fixed {
        return Ok(());
    }
    for b in &cat.budgets {
        let budget = b.budget_rps();
        let solve = |p: Profile| {
            let (inputs, _) = pool_inputs(cat, &b.name, shapes, s, Some(p));
            solver::solve(&inputs, budget, budget, &solve_settings(s, false))
        };
        let full = solve(Profile::Full);
        if !full.over_budget {
            continue;
        }
        let fit = |p: Profile| {
            let plan = solve(p);
            ProfileFit {
                profile: p,
                demand_rps: plan.total_demand_rps,
                fits: !plan.over_budget,
            }
        };
        return Err(OverBudget {
            pool: b.name.clone(),
            demand_rps: full.total_demand_rps,
            target_rps: full.target_rps,
            budget_rps: budget,
            target_utilization: s.target_utilization,
            profiles: [fit(Profile::Availability), fit(Profile::Standard), fit(Profile::Full)],
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::catalog;
    use super::*;

    #[test]
    fn the_gate_applies_only_with_no_profile_in_adaptive_mode() {
        // 300 nodes × 2 requests a minute is 10 rps, above 10 × 0.7, and
        // the per-node group is priority 2: it never stretches.
        let cat = catalog(&[("a", Some(300), true)]);
        let mut s = SchedulerSettings::default();
        let msg = gate(&cat, &Shapes::new(), &s).expect_err("over budget").to_string();
        assert!(msg.contains("budget pool \"p\""), "{msg}");
        s.profile = Some(Profile::Availability);
        assert_eq!(gate(&cat, &Shapes::new(), &s), Ok(()));
        s.profile = None;
        s.mode = SchedulerMode::Fixed;
        assert_eq!(gate(&cat, &Shapes::new(), &s), Ok(()));
    }
}

//! The over-budget gate: the check that refuses a config (at startup, in
//! `check-config`) or a live change whose full plan cannot fit a pool.

use super::{Shapes, pool_inputs, solve_settings};
use crate::core::catalog::Catalog;
use crate::core::solver;
use crate::model::{Profile, SchedulerMode, SchedulerSettings};

/// The startup and live-change gate (§2): with no profile set and mode
/// `adaptive`, a pool whose full plan still exceeds its budget target at the
/// configured budget is refused. The message names the pool, the demand, the
/// target and what each of the three profiles would need.
pub fn gate(cat: &Catalog, shapes: &Shapes, s: &SchedulerSettings) -> Result<(), String> {
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
        let choice = |p: Profile, what: &str| {
            let plan = solve(p);
            let verdict = if !plan.over_budget {
                "fits"
            } else if p == Profile::Full {
                "over; sheds priority 3-4 groups until it fits"
            } else {
                "over"
            };
            format!("{} ({what}: {:.3} rps, {verdict})", p.name(), plan.total_demand_rps)
        };
        return Err(format!(
            "budget pool {:?} is over budget: its plan needs {:.3} rps even with every eligible group stretched to its cap, \
             above the budget target of {:.3} rps ({:.3} rps × target_utilization {}). \
             Set scheduler.profile to one of: {}, {}, {}. \
             Or raise the pool's requests_per_second, or pin longer intervals",
            b.name,
            full.total_demand_rps,
            full.target_rps,
            budget,
            s.target_utilization,
            choice(Profile::Availability, "priority 1 only"),
            choice(Profile::Standard, "priorities 1-3"),
            choice(Profile::Full, "all groups"),
        ));
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
        let msg = gate(&cat, &Shapes::new(), &s).expect_err("over budget");
        assert!(msg.contains("budget pool \"p\""), "{msg}");
        s.profile = Some(Profile::Availability);
        assert_eq!(gate(&cat, &Shapes::new(), &s), Ok(()));
        s.profile = None;
        s.mode = SchedulerMode::Fixed;
        assert_eq!(gate(&cat, &Shapes::new(), &s), Ok(()));
    }
}

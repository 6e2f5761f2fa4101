//! The pool's demand as the solver tracks it while it stretches and sheds: per-group terms and a running total
//! whose every comparison with the target comes out as the fresh sum's would.

/// The fresh sum of per-group demands: left to right in input order, starting from `+0.0`.
fn fresh_sum(terms: &[f64]) -> f64 {
    terms.iter().fold(0.0, |total, &t| total + t)
}

/// The pool's demand: per-group terms plus a running total kept up to date in `O(1)` per change.
///
/// Every comparison with the target is decided exactly as [`fresh_sum`] of the terms would decide it. The running
/// total differs from the fresh sum only by rounding, which is bounded: a fresh sum of `n` terms is within
/// `(n − 1)·u·Σ|t|` of the exact sum and each update (`running − old + new`, two roundings) adds at most about
/// `5·u·Σ|t|` (u = 2⁻⁵³ = ε/2). [`Self::error_bound`] over-estimates that difference; when the running total is
/// further than twice the bound from the target its verdict is the fresh sum's, otherwise the fresh sum is computed
/// (and becomes the new running total). That happens only when the demand is within ~1e-12 (relative) of the target.
pub(super) struct DemandTracker {
    /// Per-group demand in input order; 0 for disabled and shed groups.
    pub(super) terms: Vec<f64>,
    /// Running total: the fresh sum at the last rebase, updated since.
    pub(super) running: f64,
    /// Upper bound on `Σ|terms|` and on `|running|` since the last rebase.
    magnitude: f64,
    /// Updates since the last rebase (0 means `running` *is* the fresh sum).
    updates: usize,
}

impl DemandTracker {
    pub(super) fn new(terms: Vec<f64>) -> Self {
        let mut tracker = DemandTracker {
            terms,
            running: 0.0,
            magnitude: 0.0,
            updates: 0,
        };
        tracker.rebase();
        tracker
    }

    pub(super) fn fresh_total(&self) -> f64 {
        fresh_sum(&self.terms)
    }

    fn rebase(&mut self) {
        self.running = self.fresh_total();
        self.magnitude = self.terms.iter().fold(0.0, |total, t| total + t.abs());
        self.updates = 0;
    }

    /// Sets group `i`'s demand to `value`.
    pub(super) fn set(&mut self, i: usize, value: f64) {
        let old = self.terms[i];
        if value.to_bits() == old.to_bits() {
            return; // no change (e.g. a group that costs nothing): the running total stays exact
        }
        if value.abs() > old.abs() {
            self.magnitude += value.abs(); // terms normally only shrink; stay safe if one grows
        }
        self.running = (self.running - old) + value;
        self.terms[i] = value;
        self.updates += 1;
    }

    /// Generous bound on `|running − fresh_sum(terms)|` (about twice the analytical one).
    pub(super) fn error_bound(&self) -> f64 {
        let roundings = (2 * self.terms.len() + 5 * self.updates + 4) as f64;
        roundings * (f64::EPSILON * self.magnitude + f64::MIN_POSITIVE)
    }

    /// Whether the demand exceeds `target`, decided exactly as `fresh_sum(terms) > target` would be.
    pub(super) fn exceeds(&mut self, target: f64) -> bool {
        if self.updates > 0 {
            let gap = self.running - target; // rounding keeps the sign of the exact difference
            let bound = self.error_bound();
            if bound.is_finite() && gap.abs() > 2.0 * bound {
                return gap > 0.0;
            }
            self.rebase(); // too close to call (or not finite): use the fresh sum
        }
        self.running > target
    }
}

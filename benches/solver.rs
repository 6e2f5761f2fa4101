//! Pool solver on one pool of 10,000 groups: a budget far below demand (long stretch, then shedding) and one that fits.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use pollster::core::solver::*;

const GROUPS: usize = 10_000;

/// A deterministic pool of `n` groups: priorities 1-4, floors 30s..3600s (half on common values, so keys tie often),
/// costs 1..50, about 10% ungated, 5% pinned and 2% disabled; names repeat across three types.
fn pool(n: usize) -> Vec<GroupInput> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    const COMMON_FLOORS: [f64; 8] = [30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0];
    (0..n)
        .map(|i| {
            let r = next();
            let floor_s = if r % 2 == 0 {
                COMMON_FLOORS[(r >> 1) as usize % 8]
            } else {
                30.0 + ((r >> 4) % 3571) as f64
            };
            GroupInput {
                type_name: format!("type{}", i % 3),
                name: format!("group{:05}", i / 3),
                priority: 1 + ((r >> 16) % 4) as u8,
                floor_s,
                cost_per_cycle: 1.0 + ((r >> 24) % 50) as f64,
                gated: (r >> 32) % 10 != 0,
                enabled: (r >> 40) % 50 != 0,
                pin_s: if (r >> 48) % 20 == 0 { Some(floor_s * 2.0) } else { None },
                running_interval_s: None,
            }
        })
        .collect()
}

fn settings() -> SolveSettings {
    SolveSettings {
        mode: Mode::Adaptive,
        target_utilization: 0.8,
        max_stretch_factor: 16.0,
        max_interval_s: 86_400.0,
        shed: true,
    }
}

fn bench_solver(c: &mut Criterion) {
    let groups = pool(GROUPS);
    let s = settings();
    let demand_at_floors = solve(&groups, 1e9, 1e9, &s).total_demand_rps;
    let tight = demand_at_floors / 40.0;
    let roomy = demand_at_floors * 2.0;

    for (label, budget) in [("tight", tight), ("fits", roomy)] {
        let plan = solve(&groups, budget, budget, &s);
        eprintln!(
            "{label}: demand at floors {demand_at_floors:.2} rps, budget {budget:.2} rps, {} stretches, over_budget {}, \
             {} shed, final demand {:.2} rps",
            plan.stretches,
            plan.over_budget,
            plan.groups.iter().filter(|g| g.shed).count(),
            plan.total_demand_rps,
        );
    }

    let mut group = c.benchmark_group("solver");
    group.bench_function("10000_groups_stretched", |b| {
        b.iter(|| solve(black_box(&groups), black_box(tight), black_box(tight), black_box(&s)))
    });
    group.bench_function("10000_groups_fits", |b| {
        b.iter(|| solve(black_box(&groups), black_box(roomy), black_box(roomy), black_box(&s)))
    });
    group.finish();
}

criterion_group!(benches, bench_solver);
criterion_main!(benches);

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pollster::core::retry_schedule::*;

const BUFFERING_MS: u64 = 2_000;
const RETRY_LIMIT_MS: u64 = 600_000;

/// A state after `n` failures at one-minute spacing (a destination that keeps failing).
fn after_failures(n: u64) -> RetrySchedule {
    (0..n).fold(create(BUFFERING_MS, RETRY_LIMIT_MS), |state, i| {
        failed(state, i.saturating_mul(60_000)).state
    })
}

fn bench_failed_and_interval(c: &mut Criterion) {
    let mut group = c.benchmark_group("failed+interval");
    for n in [0u64, 1, 10, 1_000_000] {
        let state = after_failures(n);
        let now = n.saturating_mul(60_000);
        group.bench_with_input(BenchmarkId::from_parameter(n), &state, |b, &state| {
            b.iter(|| {
                let verdict = failed(black_box(state), black_box(now));
                (verdict.drop_batch, verdict.drop_queue, interval(verdict.state))
            })
        });
    }
    group.finish();
}

fn bench_succeeded(c: &mut Criterion) {
    let state = after_failures(1_000);
    c.bench_function("succeeded", |b| b.iter(|| succeeded(black_box(state))));
}

criterion_group!(benches, bench_failed_and_interval, bench_succeeded);
criterion_main!(benches);

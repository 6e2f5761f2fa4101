//! The per-poll rules: the adaptive interval step, the backoff delay and the
//! task transitions on success and failure. Each runs once per completed poll.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use pollster::core::task::{self, TaskMeta};
use pollster::core::{backoff, interval};
use pollster::model::{AdaptiveSettings, ErrorCategory, ErrorKind, FailureSettings, PollError, TaskRecord, Timestamp};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::hint::black_box;
use std::time::Duration;

const NOW: Timestamp = Timestamp(1_700_000_000_000);

fn settings(c: &mut Criterion) -> criterion::BenchmarkGroup<'_, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group("rules");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    g
}

fn rules(c: &mut Criterion) {
    let adaptive = AdaptiveSettings::default();
    let fixed = AdaptiveSettings {
        enabled: false,
        ..AdaptiveSettings::default()
    };
    let failure = FailureSettings::default();
    let meta = TaskMeta::new("bench", 3, Duration::from_secs(5));
    let mut rng = SmallRng::seed_from_u64(5);
    let mut g = settings(c);

    g.bench_function("interval_on_success_unchanged", |b| {
        b.iter(|| {
            interval::on_success(
                black_box(false),
                black_box(4),
                black_box(22_000),
                3,
                meta.planned,
                &adaptive,
                &mut rng,
            )
        });
    });
    g.bench_function("interval_on_success_changed", |b| {
        b.iter(|| {
            interval::on_success(
                black_box(true),
                black_box(0),
                black_box(22_000),
                3,
                meta.planned,
                &adaptive,
                &mut rng,
            )
        });
    });
    g.bench_function("backoff_delay", |b| {
        b.iter(|| backoff::delay(black_box(3), &failure, &mut rng));
    });

    // A task that has been polling for a while: a digest, a success, a
    // smoothing state.
    let steady = TaskRecord {
        last_attempt: Some(NOW),
        last_success: Some(NOW.minus(Duration::from_secs(10))),
        digest: Some(42),
        next_run: NOW,
        interval_ms: 12_000,
        idle_streak: 3,
        ..TaskRecord::default()
    };
    for (name, s) in [
        ("task_on_success_adaptive", &adaptive),
        ("task_on_success_fixed", &fixed),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || steady.clone(),
                |rec| task::on_success(rec, &meta, black_box(42), NOW, NOW, s, &mut rng),
                BatchSize::SmallInput,
            );
        });
    }

    let transient = PollError::new(ErrorCategory::Transient, ErrorKind::Timeout, "no response within 5s");
    g.bench_function("task_on_failure_first", |b| {
        b.iter_batched_ref(
            || steady.clone(),
            |rec| task::on_failure(rec, black_box(&transient), NOW, &failure, &mut rng),
            BatchSize::SmallInput,
        );
    });
    // The failure that opens the breaker.
    let failing = TaskRecord {
        failures: failure.breaker_threshold - 1,
        ..steady.clone()
    };
    g.bench_function("task_on_failure_opens_breaker", |b| {
        b.iter_batched_ref(
            || failing.clone(),
            |rec| task::on_failure(rec, black_box(&transient), NOW, &failure, &mut rng),
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

criterion_group!(benches, rules);
criterion_main!(benches);

//! Pollster's own work around each HTTP request, at 100,000 instances: the
//! pieces the load profile (docs/BENCHMARKS.md) shows above the scheduler
//! rules. A baseline for making them cheaper.

use criterion::{Criterion, criterion_group, criterion_main};
use pollster::core::catalog::Catalog;
use pollster::engine::snapshot::SnapshotSource;
use pollster::metrics::Metrics;
use pollster::model::{InstanceConfig, MonitoringSettings, TaskKey, TypeDef};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const INSTANCES: usize = 100_000;

fn instance(i: usize) -> InstanceConfig {
    let name = pollster::fleet::instance_name(i);
    let url = format!("http://127.0.0.1:8900/i/{name}");
    serde_json::from_value(serde_json::json!({"name": name, "url": url})).expect("a valid instance")
}

fn per_poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("per_poll_100k");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    let mut rng = SmallRng::seed_from_u64(9);
    let keys: Vec<TaskKey> = (0..INSTANCES)
        .map(|i| TaskKey::new(&pollster::fleet::instance_name(i), "probe"))
        .collect();

    // The URL is parsed again on every poll.
    let url = instance(4711).url;
    g.bench_function("join_url", |b| b.iter(|| pollster::poll::join_url(black_box(&url), "")));

    // Looked up by name, with the group cloned, on every poll.
    let mut catalog = Catalog::new(vec![TypeDef::builtin_http()], vec![]);
    for i in 0..INSTANCES {
        catalog.insert(instance(i), true);
    }
    g.bench_function("catalog_target", |b| {
        b.iter(|| catalog.target(black_box(&keys[rng.random_range(0..INSTANCES)])))
    });

    // One task's poll series looked up per poll, among 100k.
    let http: Arc<str> = Arc::from("http");
    let snapshots = SnapshotSource::detached(
        MonitoringSettings::default(),
        Arc::new(pollster::engine::ports::SystemClock),
    );
    let metrics = Metrics::new(snapshots, Default::default()).expect("the metrics registry builds");
    for k in &keys {
        metrics.observe_poll(&http, k, 0.001, None);
    }
    g.bench_function("observe_poll", |b| {
        b.iter(|| {
            let k = &keys[rng.random_range(0..INSTANCES)];
            metrics.observe_poll(&http, black_box(k), 0.001, None)
        })
    });
    g.finish();
}

criterion_group!(benches, per_poll);
criterion_main!(benches);

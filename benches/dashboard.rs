//! Server render time of the dashboard with 10,000 instances (goal ≤ 100 ms):
//! computing the panels from the scheduler and rendering the template, with
//! a full day of per-minute history for the charts.

use askama::Template;
use criterion::{Criterion, criterion_group, criterion_main};
use pollster::config;
use pollster::core::catalog::Catalog;
use pollster::engine::Shared;
use pollster::engine::settings::SettingsLayers;
use pollster::model::{ErrorCategory, ErrorKind, InstanceConfig, PollError, PollSuccess, Timestamp};
use pollster::store::{Rollup, Store};
use pollster::web::pages::Layout;
use pollster::web::pages::dashboard::{DashboardPage, Range, panels};
use pollster::web::{AppState, WebState};
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

const INSTANCES: usize = 10_000;

fn app(dir: &std::path::Path) -> AppState {
    let cfg = config::load(None, &BTreeMap::new()).expect("defaults");
    let store = Store::open(dir).expect("store");
    let mut catalog = Catalog::new(vec![], vec![]);
    for i in 0..INSTANCES {
        catalog.insert(
            InstanceConfig::new(&format!("inst-{i:05}"), "http", &format!("http://127.0.0.1:9/{i}")),
            true,
        );
    }
    let layers = SettingsLayers {
        file: cfg.monitoring_file.clone(),
        saved: serde_json::Value::Null,
        env: cfg.env.clone(),
    };
    let shared = Shared::new(
        store,
        std::sync::Arc::new(pollster::poll::Poller::new().expect("poller")),
        &pollster::engine::ports::Ports::default(),
        catalog,
        layers,
        cfg.monitoring(),
        None,
    )
    .expect("shared");
    let now = Timestamp::now();
    shared.reconcile(now, &mut pollster::engine::Records::default(), true);
    let (store, sink, metrics) = shared.parts();
    let engine = pollster::engine::EngineHandle::new(shared);
    // A realistic mix: most tasks succeeded, some failing, some dead-lettered.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    engine.complete_due_now(now, &mut rng, |n, _| match n % 50 {
        0 => Err(PollError::new(
            ErrorCategory::Permanent,
            ErrorKind::Http,
            "HTTP 401 Unauthorized",
        )),
        1 | 2 => Err(PollError::new(
            ErrorCategory::Transient,
            ErrorKind::Timeout,
            "timed out after 10s",
        )),
        _ => Ok(PollSuccess {
            status: 200,
            digest: n as u64,
            body_bytes: 100,
            ..Default::default()
        }),
    });
    AppState::new(
        pollster::service::Context {
            engine,
            store,
            sink,
            cluster: None,
        },
        metrics,
        WebState::new(Vec::new(), None),
    )
}

fn history(now: Timestamp) -> Vec<(u64, Rollup)> {
    let end = now.0 / 1000 / 60 * 60;
    (0..1440u64)
        .map(|i| {
            (
                end - (1440 - i) * 60,
                Rollup {
                    polls: 60_000 + i * 7 % 900,
                    errors: i % 40,
                    queue_depth: 9_900 + i % 100,
                    dead_letter: 200,
                },
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = app(dir.path());
    let now = Timestamp::now();
    let hist = history(now);
    let mut g = c.benchmark_group("dashboard");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    g.bench_function("render_10000_instances", |b| {
        b.iter(|| {
            let page = DashboardPage {
                layout: Layout {
                    title: "Dashboard".into(),
                    section: "dashboard",
                    user: Some("admin".into()),
                    csrf: "0".repeat(64),
                    flash: None,
                    breadcrumb: vec![],
                    version: "bench",
                    cluster: None,
                },
                csrf: "0".repeat(64),
                p: panels(&app, now, Range::Day, &hist),
            };
            black_box(page.render().expect("renders"))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

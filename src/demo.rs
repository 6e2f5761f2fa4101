//! `pollster demo`: the appliance plus a simulated fleet on loopback, so a
//! newcomer sees every panel move within a minute. Failure settings are
//! shortened (2 s initial backoff, 2 min dead-letter recheck) so breakers open
//! and tasks reach the dead-letter queue quickly; everything else is default.

use crate::cli::{DemoArgs, EXIT_FAILURE, Failure};
use crate::fleet::{Behaviour, Fleet};
use crate::model::{GroupDef, InstanceConfig, Timestamp, TypeDef};
use std::future::Future;
use std::time::Duration;

fn failure(message: impl std::fmt::Display) -> Failure {
    Failure {
        code: EXIT_FAILURE,
        message: message.to_string(),
    }
}

/// The simulated instances: (name, behaviour, type, timeout).
pub fn fleet_plan() -> Vec<(&'static str, Behaviour, &'static str, Duration)> {
    let t = Duration::from_secs(5);
    vec![
        ("web-healthy", Behaviour::Healthy, "http", t),
        ("api-changing", Behaviour::Changing, "http", t),
        ("api-slow", Behaviour::Slow { delay_ms: 2500 }, "http", t),
        ("api-flapping", Behaviour::Flapping { period_ms: 40_000 }, "http", t),
        (
            "saas-ratelimited",
            Behaviour::RateLimited {
                per_second: 0,
                retry_after_secs: 7,
            },
            "http",
            t,
        ),
        ("api-500", Behaviour::ServerError, "http", t),
        ("api-unauthorized", Behaviour::Unauthorized, "http", t),
        ("api-hung", Behaviour::Hung, "http", Duration::from_secs(3)),
        ("cluster-multi", Behaviour::Changing, "demo-cluster", t),
    ]
}

/// A type with several groups at different priorities, to show per-group tasks.
pub fn demo_type() -> TypeDef {
    let g = |name: &str, path: &str, priority: u8, floor: u64| {
        GroupDef::new(name, path, priority, Duration::from_secs(floor))
    };
    TypeDef {
        name: "demo-cluster".into(),
        groups: vec![
            g("status", "/status", 1, 5),
            g("metrics", "/metrics", 3, 15),
            g("inventory", "/inventory", 4, 60),
        ],
    }
}

pub async fn run(args: DemoArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Failure> {
    let plan = fleet_plan();
    let fleet = Fleet::start(
        "127.0.0.1:0".parse().map_err(failure)?,
        plan.iter().map(|(n, b, _, _)| (n.to_string(), b.clone())).collect(),
    )
    .await
    .map_err(|e| failure(format!("cannot start the simulated fleet: {e}")))?;

    let mut config = crate::cli::load_config(None)?;
    config.server.listen = args.listen;
    config.server.metrics_listen = args.metrics_listen;
    config.server.data_dir = args.data_dir.clone();
    config.monitoring_file.failure.backoff_initial = Duration::from_secs(2);
    config.monitoring_file.failure.dead_letter_recheck = Duration::from_secs(120);
    config.types.push(demo_type());
    config.instances = plan
        .iter()
        .map(|(name, _, ty, timeout)| InstanceConfig {
            timeout: *timeout,
            labels: [("env".to_string(), "demo".to_string())].into(),
            ..InstanceConfig::new(name, ty, &fleet.url(name))
        })
        .collect();

    let app = crate::app::Application::build(config).await.map_err(failure)?;
    let store = app.shared().store.clone();
    let (token, _) = tokio::task::spawn_blocking(move || store.create_token("demo", Timestamp::now()))
        .await
        .map_err(failure)?
        .map_err(failure)?;
    let api = app.api_addr();
    let metrics = app.metrics_addr();
    println!();
    println!(
        "  Pollster demo is running with {} simulated instances on {}",
        plan.len(),
        fleet.addr()
    );
    println!();
    println!("  Health API   curl -H 'Authorization: Bearer {token}' http://{api}/api/monitoring/scheduler/health");
    println!("  Web UI       http://{api}/   (first visit: choose the admin password)");
    println!("  Metrics      http://{metrics}/metrics");
    println!("  API token    {token}");
    println!("  Data         {}", args.data_dir.display());
    println!();
    println!("  Stop with Ctrl-C.");
    println!();
    let result = app.run_until_stopped(shutdown).await.map_err(failure);
    fleet.stop().await;
    result
}

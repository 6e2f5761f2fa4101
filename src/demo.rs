//! `pollster demo`: the appliance plus a simulated fleet on loopback, so a
//! newcomer sees every panel move within a minute. Failure settings are
//! shortened (2 s initial backoff, 2 min dead-letter recheck) so breakers open
//! and tasks reach the dead-letter queue quickly; everything else is default.
//! Four instances share a budget pool whose plan is stretched to fit. A
//! simulated Proxmox VE cluster and a simulated Meraki organization run the
//! shipped `pve` and `meraki` presets, so `/values` and the instance pages
//! show real-looking metrics.

use crate::cli::{DemoArgs, EXIT_FAILURE, Failure};
use crate::fleet::sim::SimApi;
use crate::fleet::{Behaviour, BodyFormat, Fleet, Member};
use crate::model::{BudgetConfig, GroupDef, InstanceConfig, TypeDef};
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
        ("org-east", Behaviour::Changing, "demo-saas", t),
        ("org-west", Behaviour::Healthy, "demo-saas", t),
        ("org-north", Behaviour::Changing, "demo-saas", t),
        ("org-south", Behaviour::Healthy, "demo-saas", t),
        ("pve-lab", Behaviour::Healthy, "pve", t),
        ("meraki-org", Behaviour::Healthy, "meraki", t),
    ]
}

/// The API an instance of the demo simulates: the shipped presets' types
/// get their realistic bodies.
fn simulated(type_name: &str) -> Option<SimApi> {
    match type_name {
        "pve" => Some(SimApi::Pve),
        "meraki" => Some(SimApi::Meraki),
        _ => None,
    }
}

/// An instance's URL on the simulated fleet. A `meraki` instance's is its
/// organization's base below the API root, as on the real dashboard
/// (`…/api/v1/organizations/{id}`): the preset's per-device and
/// per-network groups call beside it, below that API root.
fn instance_url(fleet: &Fleet, name: &str, type_name: &str) -> String {
    match type_name {
        "meraki" => format!(
            "{}/api/v1/organizations/{}",
            fleet.url(name),
            crate::fleet::sim::meraki::ORG_ID
        ),
        _ => fleet.url(name),
    }
}

/// The demo's budget pool: the `demo-saas` instances share 2 requests/s,
/// of which Pollster may use 80 %.
pub const DEMO_POOL: &str = "demo-org";

pub fn demo_budget() -> BudgetConfig {
    BudgetConfig {
        name: DEMO_POOL.into(),
        requests_per_second: 2.0,
        shared_fraction: 0.8,
        burst: 3,
    }
}

/// A rate-limited SaaS API: at their floors the four `demo-saas` instances
/// would need 1.27 requests/s, above the pool's target of 1.12 (1.6 × 0.7),
/// so the plan stretches the priority-4 inventory group (visible on
/// `/status`) while status and device data keep their floors.
pub fn demo_saas_type() -> TypeDef {
    let g = |name: &str, path: &str, priority: u8, floor: u64, cost: f64| GroupDef {
        cost,
        ..GroupDef::new(name, path, priority, Duration::from_secs(floor))
    };
    TypeDef {
        name: "demo-saas".into(),
        groups: vec![
            g("status", "/status", 1, 10, 1.0),
            g("devices", "/devices", 2, 30, 2.0),
            g("health", "/health", 3, 20, 2.0),
            g("inventory", "/inventory", 4, 60, 3.0),
        ],
    }
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
    let fleet = Fleet::start_members(
        "127.0.0.1:0".parse().map_err(failure)?,
        plan.iter()
            .map(|(n, b, ty, _)| Member {
                sim: simulated(ty),
                ..Member::new(*n, b.clone())
            })
            .collect(),
        BodyFormat::Json,
    )
    .await
    .map_err(|e| failure(format!("cannot start the simulated fleet: {e}")))?;

    let mut config = crate::cli::load_config(None)?;
    config.server.listen = args.listen;
    config.server.metrics_listen = args.metrics_listen;
    config.server.data_dir = args.data_dir.clone();
    config.monitoring_file.failure.backoff_initial = Duration::from_secs(2);
    config.monitoring_file.failure.dead_letter_recheck = Duration::from_secs(120);
    if let Some(url) = &args.sink {
        let mut sink = crate::config::SinkConfig::new(url.clone());
        sink.buffering = Duration::from_secs(1);
        sink.validate().map_err(|e| Failure {
            code: crate::cli::EXIT_CONFIG,
            message: format!("--sink {url}: {}", e.message),
        })?;
        config.sink = Some(sink);
    }
    config.types.push(demo_type());
    config.types.push(demo_saas_type());
    config.budgets.push(demo_budget());
    config.instances = plan
        .iter()
        .map(|(name, _, ty, timeout)| InstanceConfig {
            timeout: *timeout,
            labels: [("env".to_string(), "demo".to_string())].into(),
            budget: (*ty == "demo-saas").then(|| DEMO_POOL.to_string()),
            ..InstanceConfig::new(name, ty, &instance_url(&fleet, name, ty))
        })
        .collect();

    let app = crate::app::Application::build(config).await.map_err(failure)?;
    let (store, now) = (app.store(), app.engine().now());
    let (token, _) =
        tokio::task::spawn_blocking(move || store.create_token("demo", crate::store::TokenScope::Admin, now))
            .await
            .map_err(failure)?
            .map_err(failure)?;
    let api = app.api_addr();
    let metrics = app.metrics_addr();
    let setup_code = app.setup_code().map(str::to_string);
    println!();
    println!(
        "  Pollster demo is running with {} simulated instances on {}",
        plan.len(),
        fleet.addr()
    );
    println!();
    println!("  Health API   curl -H 'Authorization: Bearer {token}' http://{api}/api/monitoring/scheduler/health");
    println!("  Web UI       http://{api}/   (first visit: the setup code below, then the admin password)");
    println!("  Plan         http://{api}/status   (the {DEMO_POOL} pool's stretched plan)");
    println!("  Metrics      http://{metrics}/metrics");
    println!("  Values       http://{metrics}/values   (pve-lab and meraki-org, from the shipped presets)");
    match &args.sink {
        Some(url) => println!("  Events       shipped to {url} (Settings → Event sink shows the state)"),
        None => println!("  Events       off; run with --sink URL to ship them to a receiver"),
    }
    println!("  API token    {token}");
    if let Some(code) = &setup_code {
        println!("  Setup code   {code}   (the first visit asks for it, with the admin password)");
    }
    println!("  Data         {}", args.data_dir.display());
    println!();
    println!("  Stop with Ctrl-C.");
    println!();
    let result = app.run_until_stopped(shutdown).await.map_err(failure);
    fleet.stop().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::catalog::Catalog;
    use crate::core::plan;
    use crate::model::SchedulerSettings;

    #[test]
    fn the_demo_pool_is_stretched_yet_within_budget_and_passes_the_gate() {
        let mut cat = Catalog::new(vec![demo_type(), demo_saas_type()], vec![demo_budget()]);
        for (name, _, ty, _) in fleet_plan() {
            let mut i = InstanceConfig::new(name, ty, "http://127.0.0.1:1/");
            i.budget = (ty == "demo-saas").then(|| DEMO_POOL.to_string());
            cat.insert(i, true);
        }
        let s = SchedulerSettings::default();
        assert_eq!(plan::gate(&cat, &Default::default(), &s), Ok(()));
        let plans = plan::solve_all(&cat, &Default::default(), &s, &Default::default(), &Default::default());
        let pool = &plans[DEMO_POOL].plan;
        assert!(!pool.over_budget);
        assert!(pool.total_demand_rps <= pool.target_rps);
        let stretched: Vec<&str> = pool
            .groups
            .iter()
            .filter(|g| g.stretch_factor > 1.0)
            .map(|g| g.name.as_str())
            .collect();
        assert_eq!(stretched, ["inventory"]);
        for g in pool.groups.iter().filter(|g| g.priority <= 2) {
            assert_eq!(g.interval_s, g.floor_s, "{} keeps its floor", g.name);
        }
    }
}

//! Prometheus metrics (§6), served on their own listener so they are never
//! exposed with the UI by accident.
//!
//! Counters and histograms are updated by the workers as polls finish. Gauges
//! that describe the state of every task (staleness, last success, breaker
//! state, queue depth, cadence, the pools' plans) are computed at scrape time
//! from the read model ([`crate::read_model::Snapshot`], the one the health
//! API and the dashboard show), so the poll path pays nothing for them.
//!
//! A scrape ([`Metrics::write`]) takes one snapshot, copies the poll counts'
//! entries and the catalog's `Arc` (each under its lock for the copy only),
//! then writes the text in chunks with no lock held: the families of a few
//! series through the prometheus crate's registry and encoder, the families
//! with a series per task or instance straight from the copies
//! (`exposition.rs`), so 100,000 tasks never exist as one string.

mod exposition;
#[cfg(test)]
mod reference;
mod series;
mod text;

pub use series::PollSeries;
pub use text::{CHUNK, ChunkSink};

use crate::core::catalog::Catalog;
use crate::model::{ErrorCategory, TaskKey};
use crate::read_model::{PoolFigures, Snapshot, TakeSnapshot};
use prometheus::core::{Collector, Desc};
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, proto};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// Poll duration buckets, 10 ms … 30 s.
pub const DURATION_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Dispatch lateness buckets, 0.5 ms … 60 s: fine below 10 ms, the goal.
pub const LATENESS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0,
];

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// Per-task poll counts and durations.
    pub poll: Arc<PollSeries>,
    /// How late each dispatch was against its due time (queue wait).
    pub dispatch_lateness: prometheus::Histogram,
    /// HTTP 429 answers by pool.
    pub rate_limited: IntCounterVec,
    /// AIMD decreases of a pool's effective budget, by pool.
    pub aimd_decreases: IntCounterVec,
    /// How long due tasks of a pool waited for its token bucket.
    pub budget_wait: HistogramVec,
    /// Password checks (login, setup code, password change) by result.
    pub logins: IntCounterVec,
    /// Samples value rules could not make, by type, group, metric and reason.
    pub values_errors: IntCounterVec,
    /// Connections a listener refused or closed for a limit, by listener and
    /// reason ([`CONNECTION_LISTENERS`], [`CONNECTION_REASONS`]).
    pub connections_rejected: IntCounterVec,
    /// Config reloads (SIGHUP, `POST /api/admin/reload`), Prometheus's
    /// three series with our prefix.
    pub config_reload: ConfigReloadMetrics,
    /// `pollster_maintenance_active{instance}`: 1 while a maintenance
    /// window covers the instance, 0 for one a window covers later.
    pub maintenance_active: IntGaugeVec,
    /// What a scrape reads besides the registry.
    sources: Arc<Sources>,
}

/// The read model, the catalog and the scrape's options.
struct Sources {
    snapshots: Box<dyn TakeSnapshot>,
    catalog: Arc<RwLock<Arc<Catalog>>>,
    /// The gauges set from each scrape's snapshot (registered).
    gauges: SnapshotGauges,
    /// `[metrics] per_instance_histograms`.
    per_instance_histograms: AtomicBool,
}

/// `pollster_config_last_reload_successful`,
/// `pollster_config_last_reload_success_timestamp_seconds` and
/// `pollster_config_reloads_total{result}`, as Prometheus names its own.
#[derive(Clone)]
pub struct ConfigReloadMetrics {
    /// 1 when the last reload (or the start) put the file in force, 0 when
    /// the last one was refused.
    pub last_successful: prometheus::IntGauge,
    /// When the file was last put in force (the start counts), Unix seconds.
    pub last_success_timestamp: prometheus::Gauge,
    /// Reloads by result: `success` or `failure`.
    pub reloads: IntCounterVec,
}

impl ConfigReloadMetrics {
    fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let last_successful = prometheus::IntGauge::new(
            "pollster_config_last_reload_successful",
            "Whether the last config reload put the file in force (1) or was refused and kept the running config (0).",
        )?;
        last_successful.set(1);
        let last_success_timestamp = prometheus::Gauge::new(
            "pollster_config_last_reload_success_timestamp_seconds",
            "When the config file was last put in force (the start, or a reload), as Unix seconds.",
        )?;
        let reloads = IntCounterVec::new(
            Opts::new(
                "pollster_config_reloads_total",
                "Config reloads (SIGHUP, POST /api/admin/reload, pollster admin reload), by result: success or failure.",
            ),
            &["result"],
        )?;
        for r in ["success", "failure"] {
            reloads.with_label_values(&[r]);
        }
        registry.register(Box::new(last_successful.clone()))?;
        registry.register(Box::new(last_success_timestamp.clone()))?;
        registry.register(Box::new(reloads.clone()))?;
        Ok(ConfigReloadMetrics {
            last_successful,
            last_success_timestamp,
            reloads,
        })
    }

    /// A reload (or the start, `at`) put the file in force.
    pub fn succeeded(&self, at: crate::model::Timestamp, counted: bool) {
        self.last_successful.set(1);
        self.last_success_timestamp.set(at.as_secs_f64());
        if counted {
            self.reloads.with_label_values(&["success"]).inc();
        }
    }

    /// A reload was refused: the running config stays.
    pub fn failed(&self) {
        self.last_successful.set(0);
        self.reloads.with_label_values(&["failure"]).inc();
    }
}

/// The `listener` label of `pollster_http_connections_rejected_total`.
pub const CONNECTION_LISTENERS: &[&str] = &["ui", "metrics"];
/// Its `reason` label: refused at accept (`full`, `per_client`) or closed
/// while it stalled (`idle`, `header_timeout`, `write_timeout`).
pub const CONNECTION_REASONS: &[&str] = &["full", "per_client", "idle", "header_timeout", "write_timeout"];

impl Metrics {
    pub fn new(
        snapshots: impl TakeSnapshot + 'static,
        catalog: Arc<RwLock<Arc<Catalog>>>,
    ) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let rate_limited = IntCounterVec::new(
            Opts::new(
                "pollster_scheduler_rate_limited_total",
                "HTTP 429 answers received, by budget pool.",
            ),
            &["pool"],
        )?;
        registry.register(Box::new(rate_limited.clone()))?;
        let aimd_decreases = IntCounterVec::new(
            Opts::new(
                "pollster_scheduler_aimd_decreases_total",
                "Times AIMD lowered a budget pool's effective budget after HTTP 429 answers, by pool \
                 (a lone 429 with Retry-After only pauses the pool and is not counted here).",
            ),
            &["pool"],
        )?;
        registry.register(Box::new(aimd_decreases.clone()))?;
        let budget_wait = HistogramVec::new(
            HistogramOpts::new(
                "pollster_scheduler_budget_wait_seconds",
                "Time a due task of a budget pool waited for the pool's token bucket (0 when it had capacity).",
            )
            .buckets(LATENESS_BUCKETS.to_vec()),
            &["pool"],
        )?;
        registry.register(Box::new(budget_wait.clone()))?;
        let logins = IntCounterVec::new(
            Opts::new(
                "pollster_login_attempts_total",
                "Password and setup-code checks, by result: success, failure (a wrong password or code), \
                 locked (refused during an address's lockout or while its previous attempt runs) \
                 and busy (refused because the server was checking as many passwords as it allows).",
            ),
            &["result"],
        )?;
        for r in ["success", "failure", "locked", "busy"] {
            logins.with_label_values(&[r]);
        }
        registry.register(Box::new(logins.clone()))?;
        let values_errors = IntCounterVec::new(
            Opts::new(
                "pollster_values_errors_total",
                "Samples value rules skipped, by type, group, metric and reason: missing (no such field), \
                 not_number, unmapped (a text `map` does not name), limit (beyond the group's max_series), \
                 duplicate (labels another rule or element already gave).",
            ),
            &["type", "group", "metric", "reason"],
        )?;
        registry.register(Box::new(values_errors.clone()))?;
        let connections_rejected = IntCounterVec::new(
            Opts::new(
                "pollster_http_connections_rejected_total",
                "Connections a listener (ui or metrics) refused or closed for a limit, by reason: \
                 full (accepted and closed at once: max_connections were open), per_client (the same, \
                 the client's address held its max_connections_per_client), idle (no byte of a request \
                 within the header timeout, on a new or a kept-alive connection), header_timeout (a \
                 request head or TLS handshake begun and not finished in time) and write_timeout (a \
                 response write made no progress in time: the client stopped reading).",
            ),
            &["listener", "reason"],
        )?;
        for l in CONNECTION_LISTENERS {
            for r in CONNECTION_REASONS {
                connections_rejected.with_label_values(&[l, r]);
            }
        }
        registry.register(Box::new(connections_rejected.clone()))?;
        let config_reload = ConfigReloadMetrics::register(&registry)?;
        let maintenance_active = IntGaugeVec::new(
            Opts::new(
                "pollster_maintenance_active",
                "1 while a maintenance window covers the instance (polling goes on; failures do not \
                 dead-letter its tasks), 0 for an instance a window covers later; absent for the others.",
            ),
            &["instance"],
        )?;
        registry.register(Box::new(maintenance_active.clone()))?;
        let poll = Arc::new(PollSeries::new());
        let dispatch_lateness = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "pollster_scheduler_dispatch_lateness_seconds",
                "Time from a task's due time to its dispatch to a worker.",
            )
            .buckets(LATENESS_BUCKETS.to_vec()),
        )?;
        registry.register(Box::new(dispatch_lateness.clone()))?;
        let gauges = SnapshotGauges::new()?;
        registry.register(Box::new(gauges.clone()))?;
        #[cfg(target_os = "linux")]
        registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        Ok(Metrics {
            registry,
            poll,
            dispatch_lateness,
            rate_limited,
            aimd_decreases,
            budget_wait,
            logins,
            values_errors,
            connections_rejected,
            config_reload,
            maintenance_active,
            sources: Arc::new(Sources {
                snapshots: Box::new(snapshots),
                catalog,
                gauges,
                per_instance_histograms: AtomicBool::new(true),
            }),
        })
    }

    /// `[metrics] per_instance_histograms`: whether
    /// `pollster_monitor_poll_duration_seconds` has a series per task (with
    /// `instance`) or one per instance type and group. Takes effect at the
    /// next scrape.
    pub fn set_per_instance_histograms(&self, on: bool) {
        self.sources.per_instance_histograms.store(on, Ordering::Relaxed);
    }

    pub fn per_instance_histograms(&self) -> bool {
        self.sources.per_instance_histograms.load(Ordering::Relaxed)
    }

    pub fn observe_poll(&self, type_name: &Arc<str>, key: &TaskKey, seconds: f64, error: Option<ErrorCategory>) {
        self.poll.observe(type_name, key, seconds, error);
    }

    /// Drop the series of a task that no longer exists.
    pub fn forget_task(&self, key: &TaskKey) {
        self.poll.forget(key);
    }

    /// One scrape's text in one string (tests and tools; `/metrics`
    /// streams [`Metrics::write`] instead).
    pub fn render(&self) -> String {
        let text::Collect(buf) = self.write(text::Collect::default());
        String::from_utf8(buf).unwrap_or_default()
    }

    /// One scrape, handed to `sink` in chunks of about [`CHUNK`] bytes;
    /// stops early when the sink refuses a chunk. Runs on the calling
    /// thread (a blocking one: a scrape of 100,000 tasks is CPU work).
    pub fn write<S: ChunkSink>(&self, sink: S) -> S {
        let src = &self.sources;
        let scrape = exposition::Scrape::take(
            src.snapshots.as_ref(),
            &src.gauges,
            &self.registry,
            &self.poll,
            &src.catalog,
            src.per_instance_histograms.load(Ordering::Relaxed),
        );
        scrape.write(text::Writer::new(sink)).finish()
    }
}

/// The gauges of a few series set from each scrape's snapshot: the queue,
/// the polls in flight, the dead-letter count and every pool's plan. The
/// families with a series per task are written from the same snapshot in
/// `exposition.rs`.
#[derive(Clone)]
struct SnapshotGauges {
    queue_depth: IntGauge,
    inflight: IntGaugeVec,
    dead_letter: IntGauge,
    plan: Arc<PlanGauges>,
}

impl SnapshotGauges {
    fn new() -> Result<Self, prometheus::Error> {
        let queue_depth = IntGauge::new(
            "pollster_monitor_poll_queue_depth",
            "Tasks waiting in the scheduler queue.",
        )?;
        let inflight = IntGaugeVec::new(
            Opts::new("pollster_monitor_poll_inflight", "Polls running now, by instance type."),
            &["instance_type"],
        )?;
        let dead_letter = IntGauge::new("pollster_monitor_dead_letter_tasks", "Tasks in the dead-letter queue.")?;
        Ok(SnapshotGauges {
            queue_depth,
            inflight,
            dead_letter,
            plan: Arc::new(PlanGauges::new()?),
        })
    }

    fn collectors(&self) -> impl Iterator<Item = &dyn Collector> {
        [&self.queue_depth as &dyn Collector, &self.inflight, &self.dead_letter]
            .into_iter()
            .chain(self.plan.collectors())
    }

    fn set(&self, snap: &Snapshot) {
        // Every type with enabled tasks gets a series, 0 when idle, so the
        // family is always present.
        self.inflight.reset();
        for t in snap.per_type.iter().filter(|t| t.tasks > 0) {
            self.inflight.with_label_values(&[&*t.name]).set(t.in_flight as i64);
        }
        self.queue_depth.set(snap.queue.depth as i64);
        self.dead_letter.set(snap.dead_letter_count as i64);
        self.plan.set(&snap.pools);
    }
}

impl Collector for SnapshotGauges {
    fn desc(&self) -> Vec<&Desc> {
        self.collectors().flat_map(|c| c.desc()).collect()
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        self.collectors().flat_map(|c| c.collect()).collect()
    }
}

/// The solved plan of every budget pool (§2, §6), set from a snapshot's
/// pools at scrape time.
struct PlanGauges {
    interval: GaugeVec,
    stretch: GaugeVec,
    demand: GaugeVec,
    budget: GaugeVec,
    effective: GaugeVec,
    utilization: GaugeVec,
    over_budget: IntGaugeVec,
    shed: IntGaugeVec,
}

impl PlanGauges {
    fn new() -> Result<Self, prometheus::Error> {
        let group = &["pool", "group"];
        let pool = &["pool"];
        let g = |name: &str, help: &str, labels: &[&str]| GaugeVec::new(Opts::new(name, help), labels);
        let interval = g(
            "pollster_scheduler_interval_seconds",
            "Planned interval of each endpoint group (type/group) in its budget pool.",
            group,
        )?;
        let stretch = g(
            "pollster_scheduler_stretch_factor",
            "Planned interval divided by the group's floor (1 = at its floor).",
            group,
        )?;
        let demand = g(
            "pollster_scheduler_estimated_demand_rps",
            "Requests per second the pool's plan makes.",
            pool,
        )?;
        let budget = g(
            "pollster_scheduler_budget_rps",
            "Configured budget of the pool: requests_per_second x shared_fraction.",
            pool,
        )?;
        let effective = g(
            "pollster_scheduler_effective_budget_rps",
            "Budget of the pool after AIMD: lowered on HTTP 429, recovering towards the configured budget.",
            pool,
        )?;
        let utilization = g(
            "pollster_scheduler_budget_utilization_ratio",
            "Planned demand divided by the effective budget.",
            pool,
        )?;
        let over_budget = IntGaugeVec::new(
            Opts::new(
                "pollster_scheduler_over_budget",
                "1 when the pool's plan exceeds its budget target even with every eligible group at its cap.",
            ),
            pool,
        )?;
        let shed = IntGaugeVec::new(
            Opts::new(
                "pollster_scheduler_shed_groups",
                "Priority 3-4 groups shed (not polled) to fit the pool's budget.",
            ),
            pool,
        )?;
        Ok(PlanGauges {
            interval,
            stretch,
            demand,
            budget,
            effective,
            utilization,
            over_budget,
            shed,
        })
    }

    fn collectors(&self) -> [&dyn Collector; 8] {
        [
            &self.interval,
            &self.stretch,
            &self.demand,
            &self.budget,
            &self.effective,
            &self.utilization,
            &self.over_budget,
            &self.shed,
        ]
    }

    fn set(&self, pools: &[PoolFigures]) {
        for v in [
            &self.interval,
            &self.stretch,
            &self.demand,
            &self.budget,
            &self.effective,
            &self.utilization,
        ] {
            v.reset();
        }
        self.over_budget.reset();
        self.shed.reset();
        for p in pools {
            let pool = p.name.as_str();
            for g in &p.groups {
                self.interval.with_label_values(&[pool, &g.name]).set(g.interval_s);
                self.stretch.with_label_values(&[pool, &g.name]).set(g.stretch_factor);
            }
            self.demand.with_label_values(&[pool]).set(p.demand_rps);
            self.budget.with_label_values(&[pool]).set(p.budget_rps);
            self.effective.with_label_values(&[pool]).set(p.effective_rps);
            self.utilization.with_label_values(&[pool]).set(p.utilization);
            self.over_budget
                .with_label_values(&[pool])
                .set(i64::from(p.over_budget));
            self.shed.with_label_values(&[pool]).set(p.shed as i64);
        }
    }
}

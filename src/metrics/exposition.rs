//! One scrape of `/metrics`: what it copies, and the families with a series
//! per task or per instance written from those copies.
//!
//! [`Scrape::take`] holds each lock only to copy: the scheduler's for the
//! snapshot, the poll counts' map for its entries' reference counts, the
//! catalog's for its `Arc`. [`Scrape::write`] then runs with no lock held,
//! and writes every family in name order, as the registry's render did:
//! the registry's families through the prometheus crate's encoder, the
//! others (listed in [`Own`]) sample by sample, their series in the order
//! the registry sorts them (label values, in label order).

use super::series::{POLL_DURATION, POLL_DURATION_HELP, POLL_ERRORS, POLL_ERRORS_HELP, POLL_TOTAL, POLL_TOTAL_HELP};
use super::series::{PollRows, PollSeries};
use super::text::{ChunkSink, Family, Kind, Value, Writer};
use super::{DURATION_BUCKETS, SnapshotGauges};
use crate::core::catalog::Catalog;
use crate::read_model::{Detail, Snapshot, TakeSnapshot, TaskRow};
use prometheus::Registry;
use prometheus::proto::MetricFamily;
use std::sync::{Arc, RwLock};

pub(super) const STALENESS: (&str, &str) = (
    "pollster_monitor_poll_staleness_seconds",
    "Seconds since the task's last successful poll (0 right after a success).",
);
pub(super) const LAST_SUCCESS: (&str, &str) = (
    "pollster_monitor_poll_last_success_timestamp_seconds",
    "Unix time of the task's last successful poll.",
);
pub(super) const BREAKER: (&str, &str) = (
    "pollster_monitor_breaker_state",
    "Circuit breaker state of each task: 1 for the current state (closed, open or half_open).",
);
pub(super) const CADENCE: (&str, &str) = (
    "pollster_instance_cadence_seconds",
    "Shortest current polling interval among the instance's tasks.",
);
pub(super) const INFO: (&str, &str) = (
    "pollster_instance_info",
    "Always 1 for each enabled instance: its type, budget pool (empty when unbudgeted) and whether it carries the label critical=\"true\".",
);

/// The families written here, in name order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Own {
    Cadence,
    Info,
    Breaker,
    Duration,
    Errors,
    LastSuccess,
    Staleness,
    Total,
}

impl Own {
    pub const ALL: [Own; 8] = [
        Own::Cadence,
        Own::Info,
        Own::Breaker,
        Own::Duration,
        Own::Errors,
        Own::LastSuccess,
        Own::Staleness,
        Own::Total,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Own::Cadence => CADENCE.0,
            Own::Info => INFO.0,
            Own::Breaker => BREAKER.0,
            Own::Duration => POLL_DURATION,
            Own::Errors => POLL_ERRORS,
            Own::LastSuccess => LAST_SUCCESS.0,
            Own::Staleness => STALENESS.0,
            Own::Total => POLL_TOTAL,
        }
    }
}

/// What one scrape copied.
pub(super) struct Scrape {
    /// The registry's families, in name order.
    families: Vec<MetricFamily>,
    snap: Snapshot,
    /// Indexes into `snap.every_task` in (instance type, instance, group)
    /// order.
    by_type: Vec<u32>,
    poll: PollRows,
    catalog: Arc<Catalog>,
    per_instance_histograms: bool,
}

impl Scrape {
    pub fn take(
        snapshots: &dyn TakeSnapshot,
        gauges: &SnapshotGauges,
        registry: &Registry,
        poll: &PollSeries,
        catalog: &RwLock<Arc<Catalog>>,
        per_instance_histograms: bool,
    ) -> Scrape {
        let snap = snapshots.take_now(Detail::EveryTask);
        gauges.set(&snap);
        let families = registry.gather();
        let rows = &snap.every_task;
        // The rows are in key order (instance, group); a stable sort by
        // type gives the registry's order.
        let mut by_type: Vec<u32> = (0..rows.len() as u32).collect();
        by_type.sort_by(|a, b| rows[*a as usize].type_name.cmp(&rows[*b as usize].type_name));
        let catalog = catalog.read().unwrap_or_else(|e| e.into_inner()).clone();
        Scrape {
            families,
            by_type,
            snap,
            poll: poll.rows(),
            catalog,
            per_instance_histograms,
        }
    }

    pub fn write<S: ChunkSink>(&self, mut w: Writer<S>) -> Writer<S> {
        let mut own = Own::ALL.iter().copied().peekable();
        for f in &self.families {
            while let Some(o) = own.next_if(|o| o.name() <= f.name()) {
                self.write_own(o, &mut w);
            }
            w.encoded(std::slice::from_ref(f));
            if !w.is_open() {
                return w;
            }
        }
        for o in own {
            self.write_own(o, &mut w);
        }
        w
    }

    fn rows_by_type(&self) -> impl Iterator<Item = &TaskRow> {
        self.by_type.iter().map(|i| &self.snap.every_task[*i as usize])
    }

    fn write_own<S: ChunkSink>(&self, which: Own, w: &mut Writer<S>) {
        if !w.is_open() {
            return;
        }
        let gauge = |(name, help): (&'static str, &'static str)| Family::new(name, help, Kind::Gauge);
        match which {
            Own::Cadence => {
                // Rows in key order: an instance's tasks are together.
                let mut f = gauge(CADENCE);
                let rows = &self.snap.every_task;
                let mut i = 0;
                while i < rows.len() && w.is_open() {
                    let instance = &rows[i].key.instance;
                    let mut secs = rows[i].interval.as_secs_f64();
                    i += 1;
                    while i < rows.len() && rows[i].key.instance == *instance {
                        secs = secs.min(rows[i].interval.as_secs_f64());
                        i += 1;
                    }
                    w.sample(&mut f, "", &[("instance", instance)], None, Value::Float(secs));
                }
            }
            Own::Info => {
                // The registry's order: by `critical` ("false" first), then
                // instance (the label names sorted, as a gauge vector's are).
                let mut f = gauge(INFO);
                for critical in [false, true] {
                    for e in self.catalog.instances.values().filter(|e| e.config.enabled) {
                        let c = &e.config;
                        if c.labels.get("critical").is_some_and(|v| v == "true") != critical {
                            continue;
                        }
                        let labels = [
                            ("critical", if critical { "true" } else { "false" }),
                            ("instance", c.name.as_str()),
                            ("instance_type", c.type_name.as_str()),
                            ("pool", c.budget.as_deref().unwrap_or("")),
                        ];
                        w.sample(&mut f, "", &labels, None, Value::Count(1));
                        if !w.is_open() {
                            return;
                        }
                    }
                }
            }
            Own::Breaker => {
                let mut f = gauge(BREAKER);
                for r in self.rows_by_type() {
                    let state = ("state", r.breaker.as_str());
                    w.sample(&mut f, "", &task(r), Some(state), Value::Count(1));
                }
            }
            Own::Staleness => {
                let mut f = gauge(STALENESS);
                for r in self.rows_by_type() {
                    w.sample(&mut f, "", &task(r), None, Value::Float(r.age.as_secs_f64()));
                }
            }
            Own::LastSuccess => {
                let mut f = gauge(LAST_SUCCESS);
                for r in self.rows_by_type() {
                    if let Some(ls) = r.last_success {
                        w.sample(&mut f, "", &task(r), None, Value::Float(ls.as_secs_f64()));
                    }
                }
            }
            Own::Total => {
                let mut f = Family::new(POLL_TOTAL, POLL_TOTAL_HELP, Kind::Counter);
                for r in &self.poll.tasks {
                    let t = r.totals();
                    let labels = [
                        ("instance_type", &**r.type_name()),
                        ("instance", &*r.key.instance),
                        ("group", &*r.key.group),
                    ];
                    for (result, n) in [("error", t.error), ("success", t.success)] {
                        if n > 0 {
                            w.sample(&mut f, "", &labels, Some(("result", result)), Value::Count(n));
                        }
                    }
                }
            }
            Own::Errors => {
                let mut f = Family::new(POLL_ERRORS, POLL_ERRORS_HELP, Kind::Counter);
                for r in &self.poll.tasks {
                    let t = r.totals();
                    let labels = [
                        ("instance_type", &**r.type_name()),
                        ("instance", &*r.key.instance),
                        ("group", &*r.key.group),
                    ];
                    for (category, n) in [("permanent", t.permanent), ("transient", t.transient)] {
                        if n > 0 {
                            w.sample(&mut f, "", &labels, Some(("category", category)), Value::Count(n));
                        }
                    }
                }
            }
            Own::Duration => {
                let mut f = Family::new(POLL_DURATION, POLL_DURATION_HELP, Kind::Histogram);
                let bounds: Vec<String> = DURATION_BUCKETS.iter().map(|b| b.to_string()).collect();
                if self.per_instance_histograms {
                    for r in &self.poll.tasks {
                        let t = r.totals();
                        let labels = [
                            ("instance_type", &**r.type_name()),
                            ("instance", &*r.key.instance),
                            ("group", &*r.key.group),
                        ];
                        w.histogram(&mut f, &labels, &bounds, &t.buckets, t.sum_seconds());
                        if !w.is_open() {
                            return;
                        }
                    }
                } else {
                    for ((ty, group), t) in self.poll.by_type_and_group() {
                        let labels = [("instance_type", ty), ("group", group)];
                        w.histogram(&mut f, &labels, &bounds, &t.buckets, t.sum_seconds());
                    }
                }
            }
        }
    }
}

/// A task's labels, in the order §6 names them.
fn task(r: &TaskRow) -> [(&'static str, &str); 3] {
    [
        ("instance_type", &*r.type_name),
        ("instance", &*r.key.instance),
        ("group", &*r.key.group),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_families_are_listed_in_name_order() {
        assert!(Own::ALL.windows(2).all(|w| w[0].name() < w[1].name()));
    }
}

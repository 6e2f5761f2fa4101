//! Per-task series kept compactly and turned into metric families only at
//! scrape time.
//!
//! A `*Vec` of the prometheus crate keeps, for every label combination, its
//! own label pairs, descriptor references and (for a histogram) a core with
//! two sets of buckets: about 1.6 KiB per task for the three poll families,
//! and every observation hashes the label values to find its series. Here a
//! task's poll counts are one small block of atomics (≈ 170 bytes with its
//! map entry) found by the task key, and the label pairs exist only while a
//! scrape is being rendered.

use crate::model::{ErrorCategory, TaskKey};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::DURATION_BUCKETS;

pub(super) const POLL_TOTAL: &str = "pollster_monitor_poll_total";
const POLL_TOTAL_HELP: &str = "Poll attempts by result (success or error).";
pub(super) const POLL_DURATION: &str = "pollster_monitor_poll_duration_seconds";
const POLL_DURATION_HELP: &str = "Duration of each poll, success or failure.";
pub(super) const POLL_ERRORS: &str = "pollster_monitor_poll_errors_total";
const POLL_ERRORS_HELP: &str = "Failed polls by error category (transient or permanent).";

/// Label pairs in the order given.
pub(super) fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(name, value)| {
            let mut l = LabelPair::default();
            l.set_name((*name).to_string());
            l.set_value((*value).to_string());
            l
        })
        .collect()
}

pub(super) fn family(name: &str, help: &str, ty: MetricType, metrics: Vec<proto::Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(ty);
    f.set_metric(metrics);
    f
}

pub(super) fn gauge(labels: Vec<LabelPair>, value: f64) -> proto::Metric {
    let mut g = proto::Gauge::default();
    g.set_value(value);
    let mut m = proto::Metric::from_label(labels);
    m.set_gauge(g);
    m
}

fn counter(labels: Vec<LabelPair>, value: u64) -> proto::Metric {
    let mut c = proto::Counter::default();
    c.set_value(value as f64);
    let mut m = proto::Metric::from_label(labels);
    m.set_counter(c);
    m
}

/// One task's poll counts.
#[derive(Debug)]
struct Counts {
    type_name: Arc<str>,
    success: AtomicU64,
    error: AtomicU64,
    transient: AtomicU64,
    permanent: AtomicU64,
    /// Non-cumulative: `buckets[i]` counts durations in
    /// (DURATION_BUCKETS[i-1], DURATION_BUCKETS[i]]; the last one counts
    /// those above every bound.
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Counts {
    fn new(type_name: &Arc<str>) -> Counts {
        Counts {
            type_name: type_name.clone(),
            success: AtomicU64::new(0),
            error: AtomicU64::new(0),
            transient: AtomicU64::new(0),
            permanent: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, seconds: f64, error: Option<ErrorCategory>) {
        let i = DURATION_BUCKETS.partition_point(|b| *b < seconds);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = if seconds.is_finite() && seconds > 0.0 {
            (seconds * 1e9) as u64
        } else {
            0
        };
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        match error {
            None => &self.success,
            Some(c) => {
                match c {
                    ErrorCategory::Transient => &self.transient,
                    ErrorCategory::Permanent => &self.permanent,
                }
                .fetch_add(1, Ordering::Relaxed);
                &self.error
            }
        }
        .fetch_add(1, Ordering::Relaxed);
    }
}

/// `pollster_monitor_poll_total`, `_poll_duration_seconds` and
/// `_poll_errors_total`, labelled by instance_type, instance and group. A
/// series appears with the task's first poll (a result or category series
/// with its first count) and goes when the task is forgotten.
#[derive(Debug)]
pub struct PollSeries {
    tasks: RwLock<FxHashMap<TaskKey, Arc<Counts>>>,
    descs: Vec<Desc>,
}

impl PollSeries {
    pub fn new() -> Result<PollSeries, prometheus::Error> {
        let task = ["instance_type", "instance", "group"].map(String::from).to_vec();
        let with = |extra: &str| {
            let mut l = task.clone();
            l.push(extra.to_string());
            l
        };
        let descs = vec![
            Desc::new(
                POLL_TOTAL.into(),
                POLL_TOTAL_HELP.into(),
                with("result"),
                Default::default(),
            )?,
            Desc::new(
                POLL_DURATION.into(),
                POLL_DURATION_HELP.into(),
                task.clone(),
                Default::default(),
            )?,
            Desc::new(
                POLL_ERRORS.into(),
                POLL_ERRORS_HELP.into(),
                with("category"),
                Default::default(),
            )?,
        ];
        Ok(PollSeries {
            tasks: RwLock::new(FxHashMap::default()),
            descs,
        })
    }

    /// Count one finished poll of `key` (of type `type_name`).
    pub fn observe(&self, type_name: &Arc<str>, key: &TaskKey, seconds: f64, error: Option<ErrorCategory>) {
        {
            let tasks = self.tasks.read().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = tasks.get(key)
                && c.type_name == *type_name
            {
                c.observe(seconds, error);
                return;
            }
        }
        let mut tasks = self.tasks.write().unwrap_or_else(|e| e.into_inner());
        let c = tasks
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Counts::new(type_name)));
        if c.type_name != *type_name {
            // The instance changed type: its series are new ones.
            *c = Arc::new(Counts::new(type_name));
        }
        c.observe(seconds, error);
    }

    /// Drop the series of a task that no longer exists.
    pub fn forget(&self, key: &TaskKey) {
        self.tasks.write().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// (successes, errors) over every task.
    pub fn totals(&self) -> (u64, u64) {
        let tasks = self.tasks.read().unwrap_or_else(|e| e.into_inner());
        tasks.values().fold((0, 0), |(s, e), c| {
            (
                s + c.success.load(Ordering::Relaxed),
                e + c.error.load(Ordering::Relaxed),
            )
        })
    }
}

impl Collector for PollSeries {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // Copy the counts out first: the map's lock is held only for that.
        let rows: Vec<(TaskKey, Arc<Counts>)> = {
            let tasks = self.tasks.read().unwrap_or_else(|e| e.into_inner());
            tasks.iter().map(|(k, c)| (k.clone(), c.clone())).collect()
        };
        let (mut total, mut duration, mut errors) = (Vec::new(), Vec::with_capacity(rows.len()), Vec::new());
        for (key, c) in &rows {
            let task = [
                ("instance_type", &*c.type_name),
                ("instance", &*key.instance),
                ("group", &*key.group),
            ];
            let with = |name: &'static str, value: &'static str| {
                let mut l = labels(&task);
                l.extend(labels(&[(name, value)]));
                l
            };
            for (result, n) in [("success", &c.success), ("error", &c.error)] {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    total.push(counter(with("result", result), n));
                }
            }
            for (category, n) in [("transient", &c.transient), ("permanent", &c.permanent)] {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    errors.push(counter(with("category", category), n));
                }
            }
            let mut cumulative = 0;
            let mut buckets = Vec::with_capacity(DURATION_BUCKETS.len());
            for (bound, n) in DURATION_BUCKETS.iter().zip(&c.buckets) {
                cumulative += n.load(Ordering::Relaxed);
                let mut b = proto::Bucket::default();
                b.set_upper_bound(*bound);
                b.set_cumulative_count(cumulative);
                buckets.push(b);
            }
            cumulative += c.buckets[DURATION_BUCKETS.len()].load(Ordering::Relaxed);
            let mut h = proto::Histogram::default();
            h.set_sample_count(cumulative);
            h.set_sample_sum(c.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9);
            h.set_bucket(buckets);
            let mut m = proto::Metric::from_label(labels(&task));
            m.set_histogram(h);
            duration.push(m);
        }
        vec![
            family(POLL_TOTAL, POLL_TOTAL_HELP, MetricType::COUNTER, total),
            family(POLL_DURATION, POLL_DURATION_HELP, MetricType::HISTOGRAM, duration),
            family(POLL_ERRORS, POLL_ERRORS_HELP, MetricType::COUNTER, errors),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: &str) -> TaskKey {
        TaskKey::new(i, "probe")
    }

    fn find<'a>(fams: &'a [MetricFamily], name: &str) -> &'a MetricFamily {
        fams.iter().find(|f| f.name() == name).expect("family")
    }

    fn label<'a>(m: &'a proto::Metric, name: &str) -> &'a str {
        m.get_label()
            .iter()
            .find(|l| l.name() == name)
            .map_or("", |l| l.value())
    }

    #[test]
    fn counts_land_in_the_right_series_and_buckets() {
        let s = PollSeries::new().expect("descs");
        let ty: Arc<str> = Arc::from("http");
        s.observe(&ty, &key("a"), 0.02, None);
        s.observe(&ty, &key("a"), 0.02, None);
        s.observe(&ty, &key("a"), 40.0, Some(ErrorCategory::Transient));
        s.observe(&ty, &key("b"), 0.01, Some(ErrorCategory::Permanent));
        assert_eq!(s.totals(), (2, 2));
        let fams = s.collect();
        let total = find(&fams, POLL_TOTAL);
        assert_eq!(total.get_metric().len(), 3, "a: success + error, b: error");
        for m in total.get_metric() {
            let expect = match (label(m, "instance"), label(m, "result")) {
                ("a", "success") => 2.0,
                ("a", "error") | ("b", "error") => 1.0,
                other => panic!("unexpected series {other:?}"),
            };
            assert_eq!(m.get_counter().get_value(), expect);
            assert_eq!(label(m, "instance_type"), "http");
            assert_eq!(label(m, "group"), "probe");
        }
        let errors = find(&fams, POLL_ERRORS);
        let cats: Vec<(&str, &str)> = errors
            .get_metric()
            .iter()
            .map(|m| (label(m, "instance"), label(m, "category")))
            .collect();
        assert_eq!(cats.len(), 2);
        assert!(cats.contains(&("a", "transient")) && cats.contains(&("b", "permanent")));
        let hist = find(&fams, POLL_DURATION)
            .get_metric()
            .iter()
            .find(|m| label(m, "instance") == "a")
            .expect("a's histogram")
            .get_histogram();
        assert_eq!(hist.get_sample_count(), 3);
        assert!((hist.get_sample_sum() - 40.04).abs() < 1e-6);
        let cum: Vec<(f64, u64)> = hist
            .get_bucket()
            .iter()
            .map(|b| (b.upper_bound(), b.cumulative_count()))
            .collect();
        // 0.02 s twice: in the 0.025 bucket; 40 s: above every bound.
        assert_eq!(cum[0], (0.01, 0));
        assert_eq!(cum[1], (0.025, 2));
        assert_eq!(cum.last().copied(), Some((30.0, 2)));
        // A bound is inclusive, as in Prometheus: 0.01 s counts in le=0.01.
        let b = find(&fams, POLL_DURATION)
            .get_metric()
            .iter()
            .find(|m| label(m, "instance") == "b")
            .expect("b's histogram")
            .get_histogram()
            .get_bucket()[0]
            .cumulative_count();
        assert_eq!(b, 1);
    }

    #[test]
    fn forgotten_and_retyped_tasks_start_again() {
        let s = PollSeries::new().expect("descs");
        let (http, pve): (Arc<str>, Arc<str>) = (Arc::from("http"), Arc::from("pve"));
        s.observe(&http, &key("a"), 0.1, None);
        s.observe(&pve, &key("a"), 0.1, None);
        let fams = s.collect();
        let total = find(&fams, POLL_TOTAL).get_metric();
        assert_eq!(total.len(), 1);
        assert_eq!(label(&total[0], "instance_type"), "pve");
        assert_eq!(total[0].get_counter().get_value(), 1.0);
        s.forget(&key("a"));
        assert!(s.collect().iter().all(|f| f.get_metric().is_empty()));
    }
}

//! Per-task series kept compactly and turned into text only at scrape time.
//!
//! A `*Vec` of the prometheus crate keeps, for every label combination, its
//! own label pairs, descriptor references and (for a histogram) a core with
//! two sets of buckets: about 1.6 KiB per task for the three poll families,
//! and every observation hashes the label values to find its series. Here a
//! task's poll counts are one small block of atomics (≈ 170 bytes with its
//! map entry) found by the task key. A scrape copies the map's entries out
//! under its read lock ([`PollSeries::rows`]) and reads the atomics after
//! the lock is released.
//!
//! The counts of a task that goes (or changes type) are kept, summed by
//! instance type and group, so that the histogram without the `instance`
//! label (`[metrics] per_instance_histograms = false`) never goes down.

use crate::model::{ErrorCategory, TaskKey};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::DURATION_BUCKETS;

pub(super) const POLL_TOTAL: &str = "pollster_monitor_poll_total";
pub(super) const POLL_TOTAL_HELP: &str = "Poll attempts by result (success or error).";
pub(super) const POLL_DURATION: &str = "pollster_monitor_poll_duration_seconds";
pub(super) const POLL_DURATION_HELP: &str = "Duration of each poll, success or failure.";
pub(super) const POLL_ERRORS: &str = "pollster_monitor_poll_errors_total";
pub(super) const POLL_ERRORS_HELP: &str = "Failed polls by error category (transient or permanent).";

/// Buckets of a duration histogram, the last one above every bound.
pub(super) const BUCKETS: usize = DURATION_BUCKETS.len() + 1;

/// A task's (or a sum of tasks') poll counts as plain values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub success: u64,
    pub error: u64,
    pub transient: u64,
    pub permanent: u64,
    /// Non-cumulative, as in [`Counts`].
    pub buckets: [u64; BUCKETS],
    pub sum_nanos: u64,
}

impl Totals {
    pub fn add(&mut self, o: &Totals) {
        self.success += o.success;
        self.error += o.error;
        self.transient += o.transient;
        self.permanent += o.permanent;
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.sum_nanos = self.sum_nanos.wrapping_add(o.sum_nanos);
    }

    /// Observations counted (the histogram's `_count`).
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The histogram's `_sum`, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_nanos as f64 / 1e9
    }
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

    fn load(&self) -> Totals {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            success: l(&self.success),
            error: l(&self.error),
            transient: l(&self.transient),
            permanent: l(&self.permanent),
            buckets: std::array::from_fn(|i| l(&self.buckets[i])),
            sum_nanos: l(&self.sum_nanos),
        }
    }
}

/// An instance type and a group: what the histogram without `instance`
/// is labelled by.
pub(super) type TypeGroup = (Arc<str>, Arc<str>);

/// The counts of tasks that went, by (instance type, group).
type Retired = FxHashMap<TypeGroup, Totals>;

/// `pollster_monitor_poll_total`, `_poll_duration_seconds` and
/// `_poll_errors_total`, labelled by instance_type, instance and group. A
/// series appears with the task's first poll (a result or category series
/// with its first count) and goes when the task is forgotten.
#[derive(Debug, Default)]
pub struct PollSeries {
    tasks: RwLock<FxHashMap<TaskKey, Arc<Counts>>>,
    retired: Mutex<Retired>,
}

/// One task's counts as a scrape sees them: the counts are read after the
/// map's lock is released.
pub(super) struct PollRow {
    pub key: TaskKey,
    counts: Arc<Counts>,
}

impl PollRow {
    pub fn type_name(&self) -> &Arc<str> {
        &self.counts.type_name
    }

    pub fn totals(&self) -> Totals {
        self.counts.load()
    }
}

/// What a scrape renders the poll families from.
pub(super) struct PollRows {
    /// Every task with a count, in (instance type, instance, group) order.
    pub tasks: Vec<PollRow>,
    /// The counts of tasks that went, by (instance type, group).
    pub retired: Vec<(TypeGroup, Totals)>,
}

impl PollRows {
    /// Every task's and every gone task's counts summed by (instance type,
    /// group), in that order: what the histogram without `instance` shows.
    pub fn by_type_and_group(&self) -> Vec<((&str, &str), Totals)> {
        let mut sums: std::collections::BTreeMap<(&str, &str), Totals> = Default::default();
        for ((t, g), totals) in &self.retired {
            sums.entry((t, g)).or_default().add(totals);
        }
        for r in &self.tasks {
            sums.entry((r.type_name(), &r.key.group)).or_default().add(&r.totals());
        }
        sums.into_iter().collect()
    }
}

impl PollSeries {
    pub fn new() -> PollSeries {
        PollSeries::default()
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
            let old = std::mem::replace(c, Arc::new(Counts::new(type_name)));
            self.retire(key, &old);
        }
        c.observe(seconds, error);
    }

    /// Drop the series of a task that no longer exists.
    pub fn forget(&self, key: &TaskKey) {
        let gone = self.tasks.write().unwrap_or_else(|e| e.into_inner()).remove(key);
        if let Some(c) = gone {
            self.retire(key, &c);
        }
    }

    fn retire(&self, key: &TaskKey, c: &Counts) {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        retired
            .entry((c.type_name.clone(), key.group.clone()))
            .or_default()
            .add(&c.load());
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

    /// The scrape's copy: the map's read lock is held only to clone its
    /// entries (two reference counts each); the sort and the reads of the
    /// counts come after.
    pub(super) fn rows(&self) -> PollRows {
        let mut tasks: Vec<PollRow> = {
            let tasks = self.tasks.read().unwrap_or_else(|e| e.into_inner());
            tasks
                .iter()
                .map(|(k, c)| PollRow {
                    key: k.clone(),
                    counts: c.clone(),
                })
                .collect()
        };
        tasks.sort_unstable_by(|a, b| {
            (a.type_name(), &a.key.instance, &a.key.group).cmp(&(b.type_name(), &b.key.instance, &b.key.group))
        });
        let retired = {
            let r = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            r.iter().map(|(k, t)| (k.clone(), *t)).collect()
        };
        PollRows { tasks, retired }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: &str) -> TaskKey {
        TaskKey::new(i, "probe")
    }

    fn totals_of(rows: &PollRows, instance: &str) -> Totals {
        rows.tasks
            .iter()
            .find(|r| &*r.key.instance == instance)
            .map(PollRow::totals)
            .expect("a row")
    }

    #[test]
    fn counts_land_in_the_right_task_and_buckets() {
        let s = PollSeries::new();
        let ty: Arc<str> = Arc::from("http");
        s.observe(&ty, &key("a"), 0.02, None);
        s.observe(&ty, &key("a"), 0.02, None);
        s.observe(&ty, &key("a"), 40.0, Some(ErrorCategory::Transient));
        s.observe(&ty, &key("b"), 0.01, Some(ErrorCategory::Permanent));
        assert_eq!(s.totals(), (2, 2));
        let rows = s.rows();
        assert_eq!(rows.tasks.len(), 2);
        let a = totals_of(&rows, "a");
        assert_eq!((a.success, a.error, a.transient, a.permanent), (2, 1, 1, 0));
        assert_eq!(a.count(), 3);
        assert!((a.sum_seconds() - 40.04).abs() < 1e-6);
        // 0.02 s twice: in the 0.025 bucket; 40 s: above every bound.
        assert_eq!(a.buckets[0], 0);
        assert_eq!(a.buckets[1], 2);
        assert_eq!(a.buckets[BUCKETS - 1], 1);
        // A bound is inclusive, as in Prometheus: 0.01 s counts in le=0.01.
        let b = totals_of(&rows, "b");
        assert_eq!((b.buckets[0], b.error, b.permanent), (1, 1, 1));
    }

    #[test]
    fn rows_come_in_type_instance_group_order() {
        let s = PollSeries::new();
        let (x, y): (Arc<str>, Arc<str>) = (Arc::from("x"), Arc::from("y"));
        for (ty, i, g) in [
            (&y, "a", "1"),
            (&x, "b", "2"),
            (&x, "b", "1"),
            (&x, "c", "0"),
            (&y, "0", "9"),
        ] {
            s.observe(ty, &TaskKey::new(i, g), 0.1, None);
        }
        let order: Vec<(String, String, String)> = s
            .rows()
            .tasks
            .iter()
            .map(|r| {
                (
                    r.type_name().to_string(),
                    r.key.instance.to_string(),
                    r.key.group.to_string(),
                )
            })
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted);
        assert_eq!(order.len(), 5);
    }

    #[test]
    fn forgotten_and_retyped_tasks_start_again_and_their_counts_are_kept_by_type_and_group() {
        let s = PollSeries::new();
        let (http, pve): (Arc<str>, Arc<str>) = (Arc::from("http"), Arc::from("pve"));
        s.observe(&http, &key("a"), 0.1, None);
        s.observe(&http, &key("a"), 0.1, None);
        s.observe(&pve, &key("a"), 0.1, None);
        let rows = s.rows();
        assert_eq!(rows.tasks.len(), 1);
        assert_eq!(&**rows.tasks[0].type_name(), "pve");
        assert_eq!(rows.tasks[0].totals().success, 1);
        s.forget(&key("a"));
        let rows = s.rows();
        assert!(rows.tasks.is_empty());
        let sums: Vec<(String, u64)> = rows
            .by_type_and_group()
            .into_iter()
            .map(|((t, g), totals)| (format!("{t}/{g}"), totals.count()))
            .collect();
        assert_eq!(sums, [("http/probe".to_string(), 2), ("pve/probe".to_string(), 1)]);
    }
}

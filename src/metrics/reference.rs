//! The per-task families as the prometheus crate's metric families, encoded
//! by its own `TextEncoder` after the registry's sort: what `/metrics` gave
//! before it was streamed. The streamed text is compared with this one
//! byte for byte, so a family, a series or a label lost, reordered or
//! mis-escaped shows.

use super::exposition::{BREAKER, CADENCE, INFO, LAST_SUCCESS, STALENESS};
use super::series::{POLL_DURATION, POLL_DURATION_HELP, POLL_ERRORS, POLL_ERRORS_HELP, POLL_TOTAL, POLL_TOTAL_HELP};
use super::series::{PollRows, Totals};
use super::{DURATION_BUCKETS, Metrics};
use crate::core::catalog::Catalog;
use crate::model::{BreakerState, ErrorCategory, InstanceConfig, TaskKey, Timestamp};
use crate::read_model::{Detail, Freshness, QueueCounts, Snapshot, TakeSnapshot, TaskRow, TypeCounts};
use prometheus::core::Collector;
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};
use prometheus::{Encoder, IntGaugeVec, Opts, TextEncoder};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
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

fn family(name: &str, help: &str, ty: MetricType, metrics: Vec<proto::Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(ty);
    f.set_metric(metrics);
    f
}

fn gauge(labels: Vec<LabelPair>, value: f64) -> proto::Metric {
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

fn histogram(labels: Vec<LabelPair>, t: &Totals) -> proto::Metric {
    let mut cumulative = 0;
    let mut buckets = Vec::new();
    for (bound, n) in DURATION_BUCKETS.iter().zip(&t.buckets) {
        cumulative += n;
        let mut b = proto::Bucket::default();
        b.set_upper_bound(*bound);
        b.set_cumulative_count(cumulative);
        buckets.push(b);
    }
    let mut h = proto::Histogram::default();
    h.set_sample_count(t.count());
    h.set_sample_sum(t.sum_seconds());
    h.set_bucket(buckets);
    let mut m = proto::Metric::from_label(labels);
    m.set_histogram(h);
    m
}

/// The per-task and per-instance families, built as the collectors built
/// them.
fn own_families(snap: &Snapshot, poll: &PollRows, catalog: &Catalog, per_instance: bool) -> Vec<MetricFamily> {
    let (mut staleness, mut last_success, mut breaker) = (vec![], vec![], vec![]);
    let mut cadence: BTreeMap<&str, f64> = BTreeMap::new();
    for r in &snap.every_task {
        let task = [
            ("instance_type", &*r.type_name),
            ("instance", &*r.key.instance),
            ("group", &*r.key.group),
        ];
        staleness.push(gauge(labels(&task), r.age.as_secs_f64()));
        if let Some(ls) = r.last_success {
            last_success.push(gauge(labels(&task), ls.as_secs_f64()));
        }
        let mut with_state = labels(&task);
        with_state.extend(labels(&[("state", r.breaker.as_str())]));
        breaker.push(gauge(with_state, 1.0));
        let interval = r.interval.as_secs_f64();
        let c = cadence.entry(&r.key.instance).or_insert(interval);
        *c = c.min(interval);
    }
    let cadence = cadence
        .into_iter()
        .map(|(inst, secs)| gauge(labels(&[("instance", inst)]), secs))
        .collect();
    let (mut total, mut errors, mut duration) = (vec![], vec![], vec![]);
    for r in &poll.tasks {
        let t = r.totals();
        let task = [
            ("instance_type", &**r.type_name()),
            ("instance", &*r.key.instance),
            ("group", &*r.key.group),
        ];
        let with = |name: &str, value: &str| {
            let mut l = labels(&task);
            l.extend(labels(&[(name, value)]));
            l
        };
        for (result, n) in [("success", t.success), ("error", t.error)] {
            if n > 0 {
                total.push(counter(with("result", result), n));
            }
        }
        for (category, n) in [("transient", t.transient), ("permanent", t.permanent)] {
            if n > 0 {
                errors.push(counter(with("category", category), n));
            }
        }
        if per_instance {
            duration.push(histogram(labels(&task), &t));
        }
    }
    if !per_instance {
        let mut sums: BTreeMap<(String, String), Totals> = BTreeMap::new();
        for ((ty, g), t) in &poll.retired {
            sums.entry((ty.to_string(), g.to_string())).or_default().add(t);
        }
        for r in &poll.tasks {
            let key = (r.type_name().to_string(), r.key.group.to_string());
            sums.entry(key).or_default().add(&r.totals());
        }
        for ((ty, g), t) in &sums {
            duration.push(histogram(labels(&[("instance_type", ty), ("group", g)]), t));
        }
    }
    let info = IntGaugeVec::new(
        Opts::new(INFO.0, INFO.1),
        &["instance", "instance_type", "pool", "critical"],
    )
    .expect("info");
    for e in catalog.instances.values().filter(|e| e.config.enabled) {
        let c = &e.config;
        let critical = c.labels.get("critical").is_some_and(|v| v == "true");
        info.with_label_values(&[
            c.name.as_str(),
            c.type_name.as_str(),
            c.budget.as_deref().unwrap_or(""),
            if critical { "true" } else { "false" },
        ])
        .set(1);
    }
    let mut out = vec![
        family(STALENESS.0, STALENESS.1, MetricType::GAUGE, staleness),
        family(LAST_SUCCESS.0, LAST_SUCCESS.1, MetricType::GAUGE, last_success),
        family(BREAKER.0, BREAKER.1, MetricType::GAUGE, breaker),
        family(CADENCE.0, CADENCE.1, MetricType::GAUGE, cadence),
        family(POLL_TOTAL, POLL_TOTAL_HELP, MetricType::COUNTER, total),
        family(POLL_DURATION, POLL_DURATION_HELP, MetricType::HISTOGRAM, duration),
        family(POLL_ERRORS, POLL_ERRORS_HELP, MetricType::COUNTER, errors),
    ];
    out.extend(info.collect());
    out
}

/// What `Registry::gather` does with families: merged by name in name
/// order, empty ones left out, series sorted by their label values.
fn gathered(families: Vec<MetricFamily>) -> Vec<MetricFamily> {
    let mut by_name: BTreeMap<String, MetricFamily> = BTreeMap::new();
    for mut f in families {
        if f.get_metric().is_empty() {
            continue;
        }
        match by_name.get_mut(f.name()) {
            Some(existing) => existing.mut_metric().extend(f.take_metric()),
            None => {
                by_name.insert(f.name().to_string(), f);
            }
        }
    }
    let mut out: Vec<MetricFamily> = by_name.into_values().collect();
    for f in &mut out {
        f.mut_metric().sort_by(|a, b| {
            let values = |m: &proto::Metric| m.get_label().iter().map(|l| l.value().to_string()).collect::<Vec<_>>();
            values(a).cmp(&values(b))
        });
    }
    out
}

/// The reference text of a scrape of `metrics`, whose snapshots are `snap`
/// and catalog `catalog`.
fn reference(metrics: &Metrics, snap: &Snapshot, catalog: &Catalog) -> String {
    let mut families = metrics.registry.gather();
    families.extend(own_families(
        snap,
        &metrics.poll.rows(),
        catalog,
        metrics.per_instance_histograms(),
    ));
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&gathered(families), &mut buf)
        .expect("encode");
    String::from_utf8(buf).expect("utf-8")
}

/// The process's own figures change from one render to the next.
fn without_process(text: &str) -> String {
    text.lines()
        .filter(|l| !l.contains("process_"))
        .map(|l| format!("{l}\n"))
        .collect()
}

struct Fixed(Snapshot);

impl TakeSnapshot for Fixed {
    fn take_now(&self, detail: Detail) -> Snapshot {
        assert_eq!(detail, Detail::EveryTask, "a scrape needs every task");
        self.0.clone()
    }
}

const ODD: &str = "we\"ird\\group\nname ✓";

fn row(ty: &str, instance: &str, group: &str, breaker: BreakerState, interval_s: u64) -> TaskRow {
    TaskRow {
        key: TaskKey::new(instance, group),
        type_name: Arc::from(ty),
        breaker,
        score: 0.5,
        stale: false,
        last_success: (breaker == BreakerState::Closed).then_some(Timestamp(1_700_000_000_123)),
        age: Duration::from_millis(1500),
        interval: Duration::from_secs(interval_s),
    }
}

/// A fleet with two types, odd group names, every breaker state, an
/// instance with two groups, critical and budgeted instances, and polls
/// of every result and category.
fn fleet() -> (Metrics, Snapshot, Catalog) {
    let mut rows = vec![
        row("zeta", "a-1", "probe", BreakerState::Closed, 10),
        row("alpha", "b-2", ODD, BreakerState::Open, 30),
        row("alpha", "b-2", "probe", BreakerState::HalfOpen, 5),
        row("zeta", "c-3", "probe", BreakerState::Closed, 60),
        row("alpha", "d-4", "x", BreakerState::Closed, 1),
    ];
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    let snap = Snapshot {
        taken_at: Timestamp(1_700_000_001_000),
        adaptive_enabled: true,
        queue: QueueCounts {
            depth: 4,
            due_soon: 1,
            in_flight: 1,
        },
        per_type: vec![
            TypeCounts {
                name: Arc::from("alpha"),
                queued: 2,
                in_flight: 1,
                tasks: 3,
            },
            TypeCounts {
                name: Arc::from("zeta"),
                queued: 2,
                in_flight: 0,
                tasks: 2,
            },
        ],
        tasks: rows.len(),
        dead_letter_count: 0,
        dead_letters: vec![],
        breakers: vec![],
        freshness: Freshness::default(),
        stalest: vec![],
        partial: vec![],
        every_task: rows,
        pools: vec![],
    };
    let mut catalog = Catalog::new(vec![], vec![]);
    for (name, ty, critical, budget) in [
        ("a-1", "zeta", true, None),
        ("b-2", "alpha", false, Some("pool \"one\"")),
        ("c-3", "zeta", false, None),
        ("d-4", "alpha", true, Some("p")),
    ] {
        let mut c = InstanceConfig::new(name, ty, "http://127.0.0.1:1/");
        if critical {
            c.labels.insert("critical".into(), "true".into());
        }
        c.budget = budget.map(String::from);
        catalog.insert(c, true);
    }
    let mut off = InstanceConfig::new("e-5", "alpha", "http://127.0.0.1:1/");
    off.enabled = false;
    catalog.insert(off, true);
    let metrics = Metrics::new(Fixed(snap.clone()), Arc::new(RwLock::new(Arc::new(catalog.clone())))).expect("metrics");
    let (alpha, zeta): (Arc<str>, Arc<str>) = (Arc::from("alpha"), Arc::from("zeta"));
    type Poll<'a> = (&'a Arc<str>, &'a str, &'a str, f64, Option<ErrorCategory>);
    let polls: [Poll; 8] = [
        (&zeta, "a-1", "probe", 0.02, None),
        (&zeta, "a-1", "probe", 0.3, Some(ErrorCategory::Transient)),
        (&alpha, "b-2", ODD, 40.0, Some(ErrorCategory::Permanent)),
        (&alpha, "b-2", ODD, 0.01, Some(ErrorCategory::Transient)),
        (&alpha, "b-2", "probe", 2.0, None),
        (&zeta, "c-3", "probe", 0.0, None),
        (&alpha, "d-4", "x", 11.0, None),
        (&alpha, "gone", "x", 0.7, None),
    ];
    for (ty, instance, group, secs, error) in polls {
        metrics.observe_poll(ty, &TaskKey::new(instance, group), secs, error);
    }
    // A task that went: its counts stay in the histogram by type and group.
    metrics.forget_task(&TaskKey::new("gone", "x"));
    (metrics, snap, catalog)
}

#[test]
fn the_streamed_text_is_the_prometheus_encoders_in_both_modes() {
    let (metrics, snap, catalog) = fleet();
    for per_instance in [true, false] {
        metrics.set_per_instance_histograms(per_instance);
        let streamed = metrics.render();
        let expected = reference(&metrics, &snap, &catalog);
        let (got, want) = (without_process(&streamed), without_process(&expected));
        let first_difference = got.lines().zip(want.lines()).find(|(a, b)| a != b);
        assert_eq!(first_difference, None, "per_instance = {per_instance}");
        assert_eq!(got, want, "per_instance = {per_instance}");
        // Not vacuous: every family of the contract is there, with its
        // escaped labels.
        for needle in [
            "pollster_instance_info{critical=\"true\",instance=\"a-1\",instance_type=\"zeta\",pool=\"\"} 1",
            "pollster_instance_info{critical=\"false\",instance=\"b-2\",instance_type=\"alpha\",pool=\"pool \\\"one\\\"\"} 1",
            "pollster_instance_cadence_seconds{instance=\"b-2\"} 5",
            "pollster_monitor_breaker_state{instance_type=\"alpha\",instance=\"b-2\",group=\"we\\\"ird\\\\group\\nname ✓\",state=\"open\"} 1",
            "pollster_monitor_poll_staleness_seconds{instance_type=\"zeta\",instance=\"a-1\",group=\"probe\"} 1.5",
            "pollster_monitor_poll_last_success_timestamp_seconds{instance_type=\"zeta\",instance=\"a-1\",group=\"probe\"} 1700000000.123",
            "pollster_monitor_poll_total{instance_type=\"zeta\",instance=\"a-1\",group=\"probe\",result=\"error\"} 1",
            "pollster_monitor_poll_errors_total{instance_type=\"alpha\",instance=\"b-2\",group=\"we\\\"ird\\\\group\\nname ✓\",category=\"permanent\"} 1",
            "pollster_monitor_poll_queue_depth 4",
            "pollster_monitor_poll_inflight{instance_type=\"alpha\"} 1",
            "# TYPE pollster_monitor_poll_duration_seconds histogram",
        ] {
            assert!(streamed.contains(needle), "{needle} missing from\n{streamed}");
        }
        assert!(
            !streamed.contains("instance=\"e-5\""),
            "a disabled instance has no info"
        );
        assert!(
            !streamed.contains("instance=\"gone\""),
            "a forgotten task has no series"
        );
        let durations: Vec<&str> = streamed
            .lines()
            .filter(|l| l.starts_with("pollster_monitor_poll_duration_seconds_count"))
            .collect();
        if per_instance {
            assert_eq!(durations.len(), 5, "{durations:?}");
            assert!(durations.iter().all(|l| l.contains("instance=")), "{durations:?}");
        } else {
            assert_eq!(
                durations,
                [
                    "pollster_monitor_poll_duration_seconds_count{instance_type=\"alpha\",group=\"probe\"} 1",
                    "pollster_monitor_poll_duration_seconds_count{instance_type=\"alpha\",group=\"we\\\"ird\\\\group\\nname ✓\"} 2",
                    "pollster_monitor_poll_duration_seconds_count{instance_type=\"alpha\",group=\"x\"} 2",
                    "pollster_monitor_poll_duration_seconds_count{instance_type=\"zeta\",group=\"probe\"} 3",
                ]
            );
            // The per-task counters keep `instance` in both modes.
            assert!(streamed.contains("pollster_monitor_poll_total{instance_type=\"alpha\",instance=\"d-4\""));
        }
    }
}

#[test]
fn a_scrape_that_is_refused_stops_early() {
    struct Refuse(usize);
    impl super::ChunkSink for Refuse {
        fn chunk(&mut self, _: Vec<u8>) -> bool {
            self.0 += 1;
            false
        }
    }
    let (metrics, ..) = fleet();
    // The whole text is smaller than a chunk: it comes as one, at the end.
    assert_eq!(metrics.write(Refuse(0)).0, 1);
}

//! One `/metrics` scrape at N tasks, without a fleet: the time a scrape
//! takes, the bytes it gives and the memory it needs while it runs.
//! Results and how to read them: docs/BENCHMARKS.md, section 3c.
//!
//! ```text
//! cargo run --release --example scrape -- --tasks 100000
//! cargo run --release --example scrape -- --tasks 100000 --per-instance-histograms false
//! ```
//!
//! The metrics are the appliance's own ([`Metrics::new`]) over a read model
//! that hands out a fixed snapshot of N enabled tasks (one instance each,
//! one type, every breaker closed), a catalog of the N instances, and a
//! poll count of every task (each task polled 3 times, one of them failing).
//! Each scrape is what `GET /metrics` does: [`Metrics::write`] into a sink
//! that counts the chunks and drops them, as a client that reads as fast as
//! they come. "Transient" memory is the process's peak RSS during the
//! scrape (`VmHWM`, reset before it through `/proc/self/clear_refs`) minus
//! its RSS before it.

use clap::Parser;
use pollster::core::catalog::Catalog;
use pollster::metrics::{ChunkSink, Metrics};
use pollster::model::{BreakerState, ErrorCategory, InstanceConfig, TaskKey, Timestamp};
use pollster::read_model::{Detail, Freshness, QueueCounts, Snapshot, TakeSnapshot, TaskRow, TypeCounts};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
struct Args {
    /// Tasks (= instances: one group each).
    #[arg(long, default_value_t = 100_000)]
    tasks: usize,
    /// Scrapes to time (after one to warm up).
    #[arg(long, default_value_t = 5)]
    scrapes: usize,
    /// `[metrics] per_instance_histograms`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    per_instance_histograms: bool,
}

struct Fixed(Snapshot);

impl TakeSnapshot for Fixed {
    fn take_now(&self, _: Detail) -> Snapshot {
        self.0.clone()
    }
}

/// Counts what a scrape hands on, and keeps none of it.
struct Count {
    bytes: usize,
    chunks: usize,
}

impl ChunkSink for Count {
    fn chunk(&mut self, chunk: Vec<u8>) -> bool {
        self.bytes += chunk.len();
        self.chunks += 1;
        true
    }
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args = Args::parse();
    let n = args.tasks;
    let name = |i: usize| format!("inst-{i:06}");
    let ty: Arc<str> = Arc::from("http");
    let rows: Vec<TaskRow> = (0..n)
        .map(|i| TaskRow {
            key: TaskKey::new(&name(i), "probe"),
            type_name: ty.clone(),
            breaker: BreakerState::Closed,
            score: 0.1,
            stale: false,
            last_success: Some(Timestamp(1_764_000_000_000 + i as u64)),
            age: Duration::from_millis(1234),
            interval: Duration::from_secs(10),
        })
        .collect();
    let snap = Snapshot {
        taken_at: Timestamp(1_764_000_100_000),
        adaptive_enabled: false,
        queue: QueueCounts {
            depth: n,
            due_soon: 0,
            in_flight: 0,
        },
        per_type: vec![TypeCounts {
            name: ty.clone(),
            queued: n,
            in_flight: 0,
            tasks: n,
        }],
        tasks: n,
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
    for i in 0..n {
        catalog.insert(InstanceConfig::new(&name(i), "http", "http://127.0.0.1:1/"), true);
    }
    let metrics = Metrics::new(Fixed(snap), Arc::new(RwLock::new(Arc::new(catalog)))).expect("metrics");
    metrics.set_per_instance_histograms(args.per_instance_histograms);
    for i in 0..n {
        let key = TaskKey::new(&name(i), "probe");
        metrics.observe_poll(&ty, &key, 0.02, None);
        metrics.observe_poll(&ty, &key, 0.3, None);
        metrics.observe_poll(&ty, &key, 1.5, Some(ErrorCategory::Transient));
    }
    let scrape = || {
        let t = Instant::now();
        let c = metrics.write(Count { bytes: 0, chunks: 0 });
        (t.elapsed(), c)
    };
    scrape();
    println!("tasks {n}, per_instance_histograms = {}", args.per_instance_histograms);
    for _ in 0..args.scrapes {
        let before = status_kib("VmRSS:");
        // Resets VmHWM to the current RSS (Linux ≥ 4.0).
        std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
        let (took, c) = scrape();
        let peak = status_kib("VmHWM:");
        println!(
            "scrape: {:.0} ms, {:.1} MiB in {} chunks, transient RSS {:.1} MiB (RSS before {:.1} MiB)",
            took.as_secs_f64() * 1e3,
            c.bytes as f64 / 1048576.0,
            c.chunks,
            peak.saturating_sub(before) as f64 / 1024.0,
            before as f64 / 1024.0
        );
    }
}

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
//! they come. Transient memory is measured two ways: the peak of the bytes
//! allocated and not yet freed during the scrape, above those allocated
//! before it (a counting allocator around the system one), and the
//! process's peak RSS during the scrape (`VmHWM`, reset before it through
//! `/proc/self/clear_refs`) above its RSS before the first scrape (the
//! allocator keeps what a scrape freed, so a later scrape may reuse it).

use clap::Parser;
use pollster::core::catalog::Catalog;
use pollster::metrics::{ChunkSink, Metrics};
use pollster::model::{BreakerState, ErrorCategory, InstanceConfig, TaskKey, Timestamp};
use pollster::read_model::{Detail, Freshness, QueueCounts, Snapshot, TakeSnapshot, TaskRow, TypeCounts};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The system allocator, counting the bytes held and their peak.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let held = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(held, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let held = HELD.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size();
                PEAK.fetch_max(held, Ordering::Relaxed);
            } else {
                HELD.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Debug, Parser)]
struct Args {
    /// Tasks (= instances: one group each).
    #[arg(long, default_value_t = 100_000)]
    tasks: usize,
    /// Scrapes to time.
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
    println!("tasks {n}, per_instance_histograms = {}", args.per_instance_histograms);
    let baseline = status_kib("VmRSS:");
    for _ in 0..args.scrapes {
        let held = HELD.load(Ordering::Relaxed);
        PEAK.store(held, Ordering::Relaxed);
        // Resets VmHWM to the current RSS (Linux ≥ 4.0).
        std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
        let (took, c) = scrape();
        let peak_rss = status_kib("VmHWM:");
        let peak_heap = PEAK.load(Ordering::Relaxed) - held;
        println!(
            "scrape: {:.0} ms, {:.1} MiB in {} chunks; transient heap {:.1} MiB, RSS {:.1} MiB above {:.1} MiB",
            took.as_secs_f64() * 1e3,
            c.bytes as f64 / 1048576.0,
            c.chunks,
            peak_heap as f64 / 1048576.0,
            peak_rss.saturating_sub(baseline) as f64 / 1024.0,
            baseline as f64 / 1024.0
        );
    }
}

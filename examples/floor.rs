//! The floor of the side-by-side benchmark (`bench/compare.sh`): the least a
//! program can do to poll N HTTP targets at a fixed interval. One tokio task
//! per target ticks at the interval (phases spread evenly over it), sends a
//! GET with hyper's pooled client, reads the whole body and counts it.
//! Nothing else: no classification, no state, no metrics, no persistence.
//!
//! ```text
//! floor --base http://127.0.0.1:8900 --instances 10000 --interval 1s --warmup 10s --seconds 30
//! ```
//!
//! Targets are `{base}/i/inst-0000` … (the names `pollster-fleet` serves).
//! After `--warmup` it records, for `--seconds`, every tick's lateness (from
//! the instant the tick was due to the instant the request starts) and the
//! polls completed, then prints one JSON line and exits:
//! `{"polls":…,"errors":…,"seconds":…,"p50_ms":…,"p99_ms":…,"max_ms":…}`,
//! then goes on polling until it is killed (so its RSS can still be read).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Lateness histogram resolution: 0.1 ms buckets up to 10 s.
const BUCKET_US: u64 = 100;
const BUCKETS: usize = 100_000;

#[derive(Debug, Parser)]
struct Args {
    /// Base URL of the fleet (`http://HOST:PORT`).
    #[arg(long)]
    base: String,
    #[arg(long, default_value_t = 1000)]
    instances: usize,
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Per-request timeout.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

struct Stats {
    recording: AtomicBool,
    polls: AtomicU64,
    errors: AtomicU64,
    lateness: Vec<AtomicU64>,
}

impl Stats {
    fn record_lateness(&self, late: Duration) {
        let i = (late.as_micros() as u64 / BUCKET_US).min(BUCKETS as u64 - 1) as usize;
        self.lateness[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The `q` quantile in milliseconds (upper edge of its bucket).
    fn quantile_ms(&self, q: f64) -> f64 {
        let counts: Vec<u64> = self.lateness.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return f64::NAN;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return ((i as u64 + 1) * BUCKET_US) as f64 / 1000.0;
            }
        }
        f64::INFINITY
    }
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime starts");
    runtime.block_on(run(args));
}

async fn run(args: Args) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(connector);
    let stats = Arc::new(Stats {
        recording: AtomicBool::new(false),
        polls: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        lateness: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
    });
    let start = tokio::time::Instant::now();
    let n = args.instances.max(1) as u32;
    for i in 0..args.instances {
        let uri: hyper::Uri = format!("{}/i/{}", args.base, pollster::fleet::instance_name(i))
            .parse()
            .expect("a valid target URL");
        let (client, stats) = (client.clone(), Arc::clone(&stats));
        let (interval, timeout) = (args.interval, args.timeout);
        let first = start + interval * i as u32 / n;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(first, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let due = ticks.tick().await;
                let recording = stats.recording.load(Ordering::Relaxed);
                if recording {
                    stats.record_lateness(tokio::time::Instant::now().saturating_duration_since(due));
                }
                let get = async {
                    let response = client.get(uri.clone()).await?;
                    let ok = response.status().is_success();
                    let body = response.into_body().collect().await?;
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(ok && !body.to_bytes().is_empty())
                };
                let ok = matches!(tokio::time::timeout(timeout, get).await, Ok(Ok(true)));
                if recording {
                    let counter = if ok { &stats.polls } else { &stats.errors };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    tokio::time::sleep(args.warmup).await;
    let window = Instant::now();
    stats.recording.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stats.recording.store(false, Ordering::Relaxed);
    let seconds = window.elapsed().as_secs_f64();
    let max_ms = stats
        .lateness
        .iter()
        .rposition(|c| c.load(Ordering::Relaxed) > 0)
        .map_or(0.0, |i| ((i as u64 + 1) * BUCKET_US) as f64 / 1000.0);
    println!(
        "{}",
        serde_json::json!({
            "polls": stats.polls.load(Ordering::Relaxed),
            "errors": stats.errors.load(Ordering::Relaxed),
            "seconds": seconds,
            "p50_ms": stats.quantile_ms(0.50),
            "p99_ms": stats.quantile_ms(0.99),
            "max_ms": max_ms,
        })
    );
    std::future::pending::<()>().await;
}

//! Crash torture (see tests/common/torture/ and docs/TORTURE.md): the
//! `pollster` binary under load from `pollster-fleet`, killed with SIGKILL
//! at random points many times; every restart must open the database, keep
//! every acknowledged dead-letter entry and operator action, and resume
//! polling without a burst.
//!
//! ```text
//! cargo build --release --bins --example torture
//! target/release/examples/torture --kills 100
//! ```
//!
//! The binaries are looked up next to this one (`target/release/`) unless
//! `--pollster` / `--fleet` say otherwise. Exits 1 if any check failed.

#[path = "../tests/common/torture/mod.rs"]
mod torture;

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Parser)]
struct Args {
    /// SIGKILLs in all.
    #[arg(long, default_value_t = 100)]
    kills: usize,
    /// RNG seed (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Fleet instances (one task each).
    #[arg(long, default_value_t = 2000)]
    instances: usize,
    /// Behaviour mix of the fleet.
    #[arg(long, default_value = "healthy=60,server_error=12,unauthorized=8,hung=5,flapping=15")]
    mix: String,
    /// Poll interval of every task, and the dead-letter recheck interval.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    floor: Duration,
    /// Longest random uptime before a kill (the shortest is 200 ms). Runs
    /// longer than half of `--floor` also check that polling resumed.
    #[arg(long, default_value = "6s", value_parser = humantime::parse_duration)]
    max_uptime: Duration,
    /// Longest random downtime between a kill and the next start.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    max_downtime: Duration,
    /// Window of the post-restart rate.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    window: Duration,
    /// Data directory, config and server log go here (default: a new
    /// temporary directory, kept if a check fails).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    #[arg(long)]
    pollster: Option<PathBuf>,
    #[arg(long)]
    fleet: Option<PathBuf>,
    /// No line per kill.
    #[arg(long)]
    quiet: bool,
}

fn beside_me(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(|d| d.parent()).map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let temp = match args.work_dir {
        Some(_) => None,
        None => match tempfile::Builder::new().prefix("pollster-torture-").tempdir() {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("torture: no temporary directory: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let work_dir = args
        .work_dir
        .clone()
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .unwrap_or_default();
    let mut opts = torture::Options::ci(
        args.pollster.unwrap_or_else(|| beside_me("pollster")),
        args.fleet.unwrap_or_else(|| beside_me("pollster-fleet")),
        seed,
        work_dir.clone(),
    );
    opts.kills = args.kills;
    opts.instances = args.instances;
    opts.mix = args.mix;
    opts.floor = args.floor;
    opts.flap_period = Duration::from_secs(5);
    opts.timeout = Duration::from_secs(1);
    opts.flush = Duration::from_millis(250);
    opts.uptime = (Duration::from_millis(200), args.max_uptime);
    opts.downtime = (Duration::ZERO, args.max_downtime);
    opts.flips = (3, 8);
    opts.window = args.window;
    opts.observe = Duration::from_secs(2);
    opts.progress = !args.quiet;
    for bin in [&opts.pollster, &opts.fleet] {
        if !bin.exists() {
            eprintln!(
                "torture: {} not found: run `cargo build --release --bins --example torture` first",
                bin.display()
            );
            return ExitCode::FAILURE;
        }
    }
    eprintln!(
        "torture: seed {seed}, {} kills, {} instances, work dir {}",
        opts.kills,
        opts.instances,
        work_dir.display()
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("torture: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = match runtime.block_on(torture::run(&opts)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("torture: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{report}");
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        if let Some(t) = temp {
            let kept = t.keep();
            eprintln!("torture: kept {} (config, data, pollster.log)", kept.display());
        }
        ExitCode::FAILURE
    }
}

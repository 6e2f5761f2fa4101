//! `pollster-fleet`: serve a simulated fleet of HTTP APIs for demos, tests and
//! load benchmarks (see `pollster::fleet`).
//!
//! Prints `listening on http://ADDR` to stderr, serves until SIGINT or SIGTERM,
//! then exits 0. Behaviours can be flipped at run time through the control API
//! (`PUT /_control/{name}`).

use std::io::Write;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use pollster::fleet::{Behaviour, BodyFormat, Fleet, MixDefaults, mix, parse_mix};

const DEFAULT_MIX: &str = "healthy=80,changing=10,slow=5,server_error=5";

/// Serve many fake HTTP API instances from one process.
#[derive(Debug, Parser)]
#[command(name = "pollster-fleet", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8900")]
    bind: SocketAddr,

    /// Number of instances (named inst-0000, inst-0001, ...).
    #[arg(long, default_value_t = 1000)]
    count: usize,

    /// Behaviour weights, kind=weight separated by commas. Kinds: healthy,
    /// changing, slow, flapping, rate_limited, server_error, unauthorized,
    /// hung, huge, invalid_utf8, not_found.
    #[arg(long, default_value = DEFAULT_MIX)]
    mix: String,

    /// Delay of `slow` instances.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    slow_delay: Duration,

    /// Length of each up and each down phase of `flapping` instances.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    flap_period: Duration,

    /// Body size of `huge` instances, in bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    huge_bytes: u64,

    /// Print a Pollster config snippet ([[instances]] entries) to stdout, then
    /// keep serving.
    #[arg(long)]
    print_config: bool,

    /// Format of the healthy answers: `json`, or `prometheus` (the text
    /// exposition format, so Prometheus can scrape the instances).
    #[arg(long, default_value = "json", value_parser = parse_format)]
    body: BodyFormat,

    /// Worker threads of the tokio runtime.
    #[arg(long, default_value = "1")]
    threads: NonZeroUsize,
}

fn parse_format(s: &str) -> Result<BodyFormat, String> {
    match s {
        "json" => Ok(BodyFormat::Json),
        "prometheus" => Ok(BodyFormat::Prometheus),
        other => Err(format!("{other:?} is not one of json, prometheus")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let defaults = MixDefaults {
        slow_delay_ms: u64::try_from(args.slow_delay.as_millis()).unwrap_or(u64::MAX),
        flap_period_ms: u64::try_from(args.flap_period.as_millis()).unwrap_or(u64::MAX),
        huge_bytes: args.huge_bytes,
        ..MixDefaults::default()
    };
    let weights = match parse_mix(&args.mix, &defaults) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("pollster-fleet: --mix: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.get())
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pollster-fleet: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args, &weights)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pollster-fleet: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, weights: &[(Behaviour, u32)]) -> std::io::Result<()> {
    let fleet = Fleet::start_with(args.bind, mix(args.count, weights), args.body)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot serve on {}: {e}", args.bind)))?;
    eprintln!("listening on http://{}", fleet.addr());
    if args.print_config {
        let mut out = std::io::stdout().lock();
        if let Err(e) = out
            .write_all(fleet.config_snippet().as_bytes())
            .and_then(|()| out.flush())
        {
            eprintln!("pollster-fleet: cannot print the config: {e}");
        }
    }
    shutdown_signal().await?;
    let hits = fleet.total_hits();
    fleet.stop().await;
    eprintln!("stopped after {hits} requests");
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

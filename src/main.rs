//! `pollster` binary: parse the command line, set up logging and the runtime,
//! run the command, and map failures to exit codes.

use clap::Parser;
use pollster::cli::{self, Cli, Command, EXIT_CONFIG, EXIT_FAILURE, Failure};
use pollster::config::{DEFAULT_LOG_LEVEL, LogConfig, LogFormat};
use pollster::service::reload::SetLogLevel;
use std::io::IsTerminal;
use std::process::ExitCode;

/// The log, as `[log]`, `POLLSTER_LOG_*` (or `RUST_LOG`) and `--log-format`
/// set it: plain lines (colours only on a terminal; the journal adds its own
/// metadata), or one JSON object a line with the event's fields at the top
/// level beside `timestamp`, `level`, `target` and `message`. Returns what
/// changes the filter later (a config reload).
fn init_logging(log: &LogConfig, format: Option<LogFormat>) -> SetLogLevel {
    let filter = tracing_subscriber::EnvFilter::try_new(&log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_LEVEL));
    fn setter<S>(handle: tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, S>) -> SetLogLevel
    where
        S: Send + Sync + 'static,
    {
        std::sync::Arc::new(move |level: &str| {
            let next = tracing_subscriber::EnvFilter::try_new(level).map_err(|e| e.to_string())?;
            handle.reload(next).map_err(|e| e.to_string())
        })
    }
    match format.unwrap_or(log.format) {
        LogFormat::Text => {
            let builder = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .with_filter_reloading();
            let set = setter(builder.reload_handle());
            builder.init();
            set
        }
        LogFormat::Json => {
            let builder = tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .with_filter_reloading();
            let set = setter(builder.reload_handle());
            builder.init();
            set
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure {
            code: EXIT_FAILURE,
            message: format!("cannot start the runtime: {e}"),
        })
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve { config, log_format } => {
            let config = cli::load_config(config.as_deref())?;
            let set_level = init_logging(&config.log, log_format);
            runtime()?.block_on(async {
                let app = pollster::app::Application::build(config).await.map_err(app_failure)?;
                app.reloader().set_log_level(set_level);
                app.run_until_stopped(shutdown_signal()).await.map_err(app_failure)
            })
        }
        Command::Demo(args) => {
            let _ = init_logging(&cli::load_config(None)?.log, args.log_format);
            runtime()?.block_on(pollster::demo::run(args, shutdown_signal()))
        }
        Command::CheckConfig { file } => {
            let report = cli::check_config(&file)?;
            print!("{report}");
            Ok(())
        }
        Command::Plan {
            config,
            format,
            members,
        } => {
            print!("{}", cli::plan(&config, format, members.as_deref())?);
            Ok(())
        }
        Command::Values(args) => {
            let out = cli::values(&args)?;
            print!("{}", out.exposition);
            eprint!("{}", out.notes);
            Ok(())
        }
        Command::Admin { command } => cli::admin(command, pollster::model::Timestamp::now(), &mut std::io::stdout()),
    }
}

fn app_failure(e: pollster::app::AppError) -> Failure {
    let code = match e {
        pollster::app::AppError::OverBudget(_)
        | pollster::app::AppError::Tls(_)
        | pollster::app::AppError::Locked(pollster::control::LockError::Held { .. }) => EXIT_CONFIG,
        pollster::app::AppError::Key(pollster::secrets::KeyError::Store(_)) => EXIT_FAILURE,
        pollster::app::AppError::Key(_) => EXIT_CONFIG,
        pollster::app::AppError::Config(_) => EXIT_CONFIG,
        pollster::app::AppError::Cluster(pollster::cluster::ClusterError::Address(_)) => EXIT_CONFIG,
        _ => EXIT_FAILURE,
    };
    Failure {
        code,
        message: e.to_string(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("pollster: {}", f.message);
            ExitCode::from(if f.code == 0 { EXIT_CONFIG } else { f.code })
        }
    }
}

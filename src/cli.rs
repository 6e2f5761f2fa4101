//! The command line (clap): `serve`, `demo`, `check-config`, `plan`,
//! `values`, `admin …`.
//! Exit codes: 0 fine, 1 runtime failure, 2 bad configuration or usage.

mod secrets;
mod self_signed;
mod values;

pub use self_signed::SelfSignedArgs;
pub use values::{ValuesArgs, ValuesOutput, render, values};

use crate::config::{self, Config, ConfigError, LogFormat};
use crate::control::client::{Connection, connect};
use crate::control::protocol::{Reply, Request};
use crate::control::text::{self, Output};
use crate::core::catalog::Catalog;
use crate::core::ownership;
use crate::core::plan;
use crate::engine::settings::SettingsLayers;
use crate::model::{MonitoringSettings, Profile, SchedulerMode, human_secs};
use crate::model::{TaskKey, Timestamp};
use crate::store::{Store, StoreError, TokenInfo};
use crate::web::pool_view::PoolView;
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_CONFIG: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "pollster",
    version,
    about = "Polls many HTTP(S) APIs on an adaptive cadence, inside each API's rate-limit budget.",
    long_about = "Pollster polls many HTTP(S) APIs on an adaptive cadence, inside each API's rate-limit \
budget, with circuit breakers, backoff and a dead-letter queue that survives restarts.\n\n\
Configuration precedence: environment variable > value saved from the UI > config file > built-in default."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the appliance.
    Serve {
        /// Config file (the package installs /etc/pollster/pollster.toml).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Log lines as text, or one JSON object a line (wins over
        /// `[log] format` and `POLLSTER_LOG_FORMAT`).
        #[arg(long, value_parser = parse_log_format, value_name = "text|json")]
        log_format: Option<LogFormat>,
    },
    /// Run the appliance with a simulated fleet on loopback: healthy, slow,
    /// flapping, rate-limited, failing and hung instances.
    Demo(DemoArgs),
    /// Validate a config file (and the environment) and exit: 0 if valid, 2 if not.
    CheckConfig { file: PathBuf },
    /// Print the solved plan of every budget pool from the config alone,
    /// without polling anything. Shape counts for planning come from each
    /// instance's `shape = { nodes = 12 }`.
    Plan {
        #[arg(long, short)]
        config: PathBuf,
        /// `table` (default) or `json`.
        #[arg(long, value_enum, default_value_t = PlanFormat::Table)]
        format: PlanFormat,
        /// Also print each member's expected share of the fleet if it were
        /// shared by members: a count (members named `member-1` …) or the
        /// members' names, comma-separated. Who owns what depends on the
        /// names (rendezvous hashing of budget pools over the members).
        #[arg(long, value_name = "N|NAMES")]
        members: Option<String>,
    },
    /// Run one group's value rules on a saved body, offline, and print the
    /// samples in the Prometheus text format (skipped samples on stderr).
    Values(ValuesArgs),
    /// Administer a data directory: through the running server's control
    /// socket (`<data_dir>/control.sock`) when it runs, on the database
    /// itself when it does not.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where the demo keeps its database (created if missing).
    #[arg(long, default_value = "pollster-demo-data")]
    pub data_dir: PathBuf,
    /// Web UI and API listener.
    #[arg(long, default_value = "127.0.0.1:7655")]
    pub listen: std::net::SocketAddr,
    /// Metrics listener.
    #[arg(long, default_value = "127.0.0.1:9091")]
    pub metrics_listen: std::net::SocketAddr,
    /// Ship events (NDJSON batches, every second) to this URL, to watch them
    /// flow into a receiver.
    #[arg(long, value_name = "URL")]
    pub sink: Option<String>,
    /// Log lines as text, or one JSON object a line.
    #[arg(long, value_parser = parse_log_format, value_name = "text|json")]
    pub log_format: Option<LogFormat>,
}

fn parse_log_format(raw: &str) -> Result<LogFormat, String> {
    LogFormat::parse(raw)
}

#[derive(Debug, Args)]
pub struct DataDirArgs {
    /// Data directory holding pollster.redb.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Read the data directory from this config file.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

/// `--scope` of `admin create-token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    Read,
    Admin,
}

impl From<ScopeArg> for crate::store::TokenScope {
    fn from(s: ScopeArg) -> Self {
        match s {
            ScopeArg::Read => crate::store::TokenScope::Read,
            ScopeArg::Admin => crate::store::TokenScope::Admin,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create an API token and print it (shown once).
    CreateToken {
        #[command(flatten)]
        dir: DataDirArgs,
        /// A name to recognise the token by.
        #[arg(long)]
        name: String,
        /// What the token may do: `read` (every GET but the backup) or
        /// `admin` (everything).
        #[arg(long, value_enum, default_value_t = ScopeArg::Admin)]
        scope: ScopeArg,
    },
    /// Revoke an API token: it stops working at once.
    RevokeToken {
        #[command(flatten)]
        dir: DataDirArgs,
        /// The token's id (as `list-tokens` shows it).
        id: String,
    },
    /// List the API tokens: id, scope, creation time and name (never the
    /// token itself).
    ListTokens {
        #[command(flatten)]
        dir: DataDirArgs,
    },
    /// Make the running server read its config file and the environment
    /// again (as SIGHUP and `POST /api/admin/reload` do).
    Reload {
        #[command(flatten)]
        dir: DataDirArgs,
    },
    /// Set the admin password, read from standard input.
    SetPassword {
        #[command(flatten)]
        dir: DataDirArgs,
    },
    /// Write a key and a self-signed certificate (tls.key, tls.crt) into
    /// the data directory and print its SHA-256 fingerprint.
    SelfSigned(SelfSignedArgs),
    /// The dead-letter queue.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Re-seal every stored credential under a new data key, in one
    /// transaction; the old key file is kept as `secret.key.old`.
    RotateKey {
        #[command(flatten)]
        dir: DataDirArgs,
    },
    /// Write an encrypted backup (an age file) of the database; a running
    /// server takes it and hands it over its control socket.
    Backup {
        #[command(flatten)]
        dir: DataDirArgs,
        /// A file whose first line is the passphrase (12 characters or more).
        #[arg(long)]
        passphrase_file: PathBuf,
        /// Where to write the backup.
        #[arg(long)]
        out: PathBuf,
    },
    /// Replace the database with an encrypted backup, after checking all of
    /// it; its credentials are sealed under this machine's data key.
    Restore {
        #[command(flatten)]
        dir: DataDirArgs,
        /// The backup file.
        file: PathBuf,
        /// A file whose first line is the backup's passphrase.
        #[arg(long)]
        passphrase_file: PathBuf,
        /// The largest scrypt work factor (log2 N) to open. Backups of this
        /// release use 16 and the default allows 17 (128 MiB); a backup
        /// made with an earlier release was tuned to its machine (often 18
        /// to 20: 256 MiB to 1 GiB of memory). Raise it only for a file you
        /// trust.
        #[arg(long, default_value_t = crate::secrets::backup::MAX_WORK_FACTOR,
              value_parser = clap::value_parser!(u8).range(crate::secrets::backup::MAX_WORK_FACTOR as i64..=crate::secrets::backup::MAX_ALLOWED_WORK_FACTOR as i64))]
        max_work_factor: u8,
    },
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead-lettered tasks.
    List {
        #[command(flatten)]
        dir: DataDirArgs,
    },
    /// Probe a dead-lettered task as soon as the server starts.
    Retry {
        #[command(flatten)]
        dir: DataDirArgs,
        instance: String,
        group: String,
    },
    /// Drop a task from the dead-letter queue and disable it.
    Discard {
        #[command(flatten)]
        dir: DataDirArgs,
        instance: String,
        group: String,
    },
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Failure {
            code: EXIT_CONFIG,
            message: e.to_string(),
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure {
            code: EXIT_FAILURE,
            message: e.to_string(),
        }
    }
}

fn fail(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_FAILURE,
        message: message.into(),
    }
}

pub fn load_config(file: Option<&Path>) -> Result<Config, Failure> {
    Ok(config::load_from_process_env(file)?)
}

fn open_store(dir: &DataDirArgs) -> Result<Store, Failure> {
    let data_dir = match &dir.data_dir {
        Some(d) => d.clone(),
        None => load_config(dir.config.as_deref())?.server.data_dir,
    };
    Ok(Store::open(&data_dir)?)
}

/// The catalog and settings a config file describes on its own (no saved
/// instances or settings), for planning.
fn config_plan(c: &Config) -> Result<(Catalog, MonitoringSettings), Failure> {
    let mut cat = Catalog::new(c.types.clone(), c.budgets.clone());
    for i in &c.instances {
        cat.insert(i.clone(), true);
    }
    let layers = SettingsLayers {
        file: c.monitoring_file.clone(),
        saved: serde_json::Value::Null,
        env: c.env.clone(),
    };
    let settings = layers.effective().map_err(|errs| Failure {
        code: EXIT_CONFIG,
        message: errs.first().map(|e| e.to_string()).unwrap_or_default(),
    })?;
    Ok((cat, settings))
}

fn over_budget(e: plan::OverBudget) -> Failure {
    Failure {
        code: EXIT_CONFIG,
        message: e.to_string(),
    }
}

/// `pollster plan`: the solved plan of every pool, as a table or JSON.
/// A pool over budget is shown, not an error: the plan is what explains it.
pub fn plan(file: &Path, format: PlanFormat, members: Option<&str>) -> Result<String, Failure> {
    let members = members.map(parse_members).transpose()?;
    let c = load_config(Some(file))?;
    let (cat, settings) = config_plan(&c)?;
    let pools = plan::solve_all(
        &cat,
        &Default::default(),
        &settings.scheduler,
        &Default::default(),
        &Default::default(),
    );
    let shares = members.map(|m| {
        let tasks = plan::tasks(&cat, &settings.scheduler, &pools, &Default::default());
        let loads = ownership::loads(cat.budgets.iter().map(|b| b.name.as_str()), &tasks);
        ownership::shares(&loads, &m)
    });
    Ok(match format {
        PlanFormat::Table => {
            let mut s = plan_table(&pools);
            if let Some(shares) = &shares {
                s.push_str(&shares_table(shares));
            }
            s
        }
        PlanFormat::Json => {
            let mut doc = serde_json::json!({
                "pools": pools.values().map(PoolView::from_status).collect::<Vec<_>>(),
            });
            if let Some(shares) = &shares {
                doc["members"] = shares
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "name": s.member,
                            "units": s.units.iter().map(ownership::Unit::name).collect::<Vec<_>>(),
                            "tasks": s.tasks,
                            "rps": s.rps,
                        })
                    })
                    .collect();
            }
            let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
            s.push('\n');
            s
        }
    })
}

/// The most members `plan --members` takes.
const MAX_MEMBERS: usize = 1000;

/// `--members`: a count (`member-1` … `member-N`) or comma-separated names.
fn parse_members(arg: &str) -> Result<Vec<String>, Failure> {
    let bad = |why: &str| Failure {
        code: EXIT_CONFIG,
        message: format!("--members {arg:?}: {why}"),
    };
    let arg_t = arg.trim();
    let names: Vec<String> = if let Ok(n) = arg_t.parse::<usize>() {
        if n == 0 || n > MAX_MEMBERS {
            return Err(bad(&format!("a count of members is 1 to {MAX_MEMBERS}")));
        }
        (1..=n).map(|i| format!("member-{i}")).collect()
    } else {
        arg_t.split(',').map(|m| m.trim().to_string()).collect()
    };
    if names.iter().any(|m| m.is_empty() || m.contains('\0')) {
        return Err(bad("a member name is empty"));
    }
    if names.len() > MAX_MEMBERS {
        return Err(bad(&format!("at most {MAX_MEMBERS} members")));
    }
    let unique: std::collections::BTreeSet<&String> = names.iter().collect();
    if unique.len() != names.len() {
        return Err(bad("a member is named twice"));
    }
    Ok(names)
}

/// Each member's expected share, as `plan --members` prints it.
fn shares_table(shares: &[ownership::Share]) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "\nmembers: {} (each budget pool is polled by one member, an instance with no pool is a unit of its own; \
         rendezvous hashing on the names)\n",
        shares.len()
    );
    for s in shares {
        let units: Vec<String> = s.units.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "  {:<20} {:>3} units {:>7} tasks {:>10.3} rps   {}",
            s.member,
            s.units.len(),
            s.tasks,
            s.rps,
            if units.is_empty() {
                "-".to_string()
            } else {
                units.join(", ")
            }
        );
    }
    out
}

/// The plan as the text table `pollster plan` prints.
fn plan_table(pools: &BTreeMap<String, plan::PoolStatus>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if pools.is_empty() {
        out.push_str("no budget pools: every instance is unbudgeted (floors, pins and adaptive limits only)\n");
    }
    for p in pools.values() {
        let plan = &p.plan;
        let _ = writeln!(
            out,
            "pool {}  mode {}  profile {}  instances {}",
            p.name,
            match p.mode {
                SchedulerMode::Adaptive => "adaptive",
                SchedulerMode::Fixed => "fixed",
            },
            p.profile.map(Profile::name).unwrap_or("none (full)"),
            p.instances
        );
        let verdict = if !plan.over_budget {
            "fits".to_string()
        } else if plan.fits_after_shedding && plan.groups.iter().all(|g| !g.shed) {
            "OVER BUDGET (over the target at the stretch caps; the budget carries it, nothing shed)".to_string()
        } else if plan.fits_after_shedding {
            "OVER BUDGET (fits after shedding)".to_string()
        } else {
            "OVER BUDGET".to_string()
        };
        let _ = writeln!(
            out,
            "  budget {:.3} rps  effective {:.3} rps  target {:.3} rps ({:.0}%)  demand {:.3} rps  utilisation {:.0}%  {verdict}",
            plan.budget_rps,
            plan.effective_budget_rps,
            plan.target_rps,
            plan.target_utilization * 100.0,
            plan.total_demand_rps,
            plan.utilization * 100.0,
        );
        if !p.shape.is_empty() {
            let shape: Vec<String> = p.shape.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(out, "  shape {}", shape.join(" "));
        }
        let _ = writeln!(
            out,
            "  {:<40} {:>4} {:>10} {:>10} {:>7} {:>8} {:>11}  flags",
            "GROUP", "PRIO", "FLOOR", "INTERVAL", "STRETCH", "COST", "DEMAND/s"
        );
        for g in &plan.groups {
            let mut flags = Vec::new();
            if g.pinned {
                flags.push(if g.pin_below_floor {
                    "pinned(below floor)"
                } else {
                    "pinned"
                });
            }
            if g.shed {
                flags.push("shed");
            }
            if !g.enabled {
                flags.push("off");
            }
            if !g.gated {
                flags.push("ungated");
            }
            if g.stretch_factor > 1.0 + 1e-9 && !g.pinned {
                flags.push("stretched");
            }
            let _ = writeln!(
                out,
                "  {:<40} {:>4} {:>10} {:>10} {:>7.2} {:>8.1} {:>11.4}  {}",
                format!("{}/{}", g.type_name, g.name),
                g.priority,
                human_secs(g.floor_s),
                human_secs(g.interval_s),
                g.stretch_factor,
                g.cost_per_cycle,
                g.demand_rps,
                flags.join(",")
            );
        }
        for w in &plan.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
        out.push('\n');
    }
    out
}

/// The config file loaded and checked as `check-config` does, with the
/// catalog it describes (every known type: `http`, the presets, the file's).
fn checked_config(file: &Path) -> Result<(Config, Catalog), Failure> {
    let c = load_config(Some(file))?;
    let (cat, settings) = config_plan(&c)?;
    plan::gate(&cat, &Default::default(), &settings.scheduler).map_err(over_budget)?;
    Ok((c, cat))
}

pub fn check_config(file: &Path) -> Result<String, Failure> {
    let (c, _) = checked_config(file)?;
    let mut out = String::new();
    for w in &c.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push_str(&format!(
        "{}: OK ({} instances, {} types, {} budgets)\n",
        file.display(),
        c.instances.len(),
        c.types.len(),
        c.budgets.len()
    ));
    Ok(out)
}

fn read_password() -> Result<String, Failure> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("New admin password (input is shown): ");
        let _ = std::io::stderr().flush();
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .map_err(|e| fail(format!("reading the password from standard input: {e}")))?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// The data directory `--data-dir` or the config file names.
fn data_dir_of(dir: &DataDirArgs) -> Result<PathBuf, Failure> {
    match &dir.data_dir {
        Some(d) => Ok(d.clone()),
        None => Ok(load_config(dir.config.as_deref())?.server.data_dir),
    }
}

/// The running server's control socket, when a server runs on the data
/// directory.
fn running_server(dir: &DataDirArgs) -> Result<Option<Connection>, Failure> {
    let data_dir = data_dir_of(dir)?;
    connect(&data_dir).map_err(|e| fail(e.to_string()))
}

/// Sends `request` to the running server and prints its notes; its output
/// is returned for the caller to print (a failure is the server's).
fn remote(conn: &mut Connection, request: &Request) -> Result<Reply, Failure> {
    let reply = conn.send(request).map_err(|e| fail(e.to_string()))?;
    eprint!("{}", reply.stderr);
    match reply.error {
        Some(e) => Err(Failure {
            code: e.code,
            message: e.message,
        }),
        None => Ok(reply),
    }
}

fn print(out: &mut dyn Write, output: Output) -> Result<(), Failure> {
    eprint!("{}", output.stderr);
    out.write_all(output.stdout.as_bytes()).map_err(|e| fail(e.to_string()))
}

/// Run an admin command; `now` is the time its records and audit rows
/// carry (read once, by the caller). `create-token`, `revoke-token`,
/// `list-tokens`, `set-password`, `rotate-key`, `backup` and `reload` go
/// through the control socket of a server running on the data directory
/// (the audit trail names the caller `cli:<uid>`); without one, they open
/// the database (the actor is `cli`), and `reload` has nothing to do.
pub fn admin(cmd: AdminCommand, now: Timestamp, out: &mut dyn Write) -> Result<(), Failure> {
    let w = |out: &mut dyn Write, s: String| out.write_all(s.as_bytes()).map_err(|e| fail(e.to_string()));
    match cmd {
        AdminCommand::CreateToken { dir, name, scope } => {
            let name = text::token_name(&name)
                .map_err(|message| Failure {
                    code: EXIT_CONFIG,
                    message,
                })?
                .to_string();
            if let Some(mut conn) = running_server(&dir)? {
                let scope = scope.into();
                let reply = remote(&mut conn, &Request::CreateToken { name, scope })?;
                return w(out, reply.stdout);
            }
            let store = open_store(&dir)?;
            let (token, info) = store.create_token_with_events(&name, scope.into(), now, |info: &TokenInfo| {
                vec![secrets::cli_row(
                    "token.create",
                    &format!("{}({})", info.name, info.id),
                    now,
                )]
            })?;
            print(out, text::token_created(&token, &info))?;
        }
        AdminCommand::RevokeToken { dir, id } => {
            if let Some(mut conn) = running_server(&dir)? {
                let reply = remote(&mut conn, &Request::RevokeToken { id })?;
                return w(out, reply.stdout);
            }
            let store = open_store(&dir)?;
            if !store.revoke_token_with_events(&id, &[secrets::cli_row("token.revoke", &id, now)])? {
                return Err(fail(text::no_such_token(&id)));
            }
            print(out, text::token_revoked(&id))?;
        }
        AdminCommand::ListTokens { dir } => {
            if let Some(mut conn) = running_server(&dir)? {
                let reply = remote(&mut conn, &Request::ListTokens)?;
                return w(out, reply.stdout);
            }
            let store = open_store(&dir)?;
            print(out, text::token_list(&store.list_tokens()?))?;
        }
        AdminCommand::Reload { dir } => {
            let Some(mut conn) = running_server(&dir)? else {
                return Err(fail(text::nothing_to_reload(&data_dir_of(&dir)?)));
            };
            let reply = remote(&mut conn, &Request::Reload)?;
            w(out, reply.stdout)?;
        }
        AdminCommand::SetPassword { dir } => {
            // Read before connecting: the server waits for a request only
            // briefly.
            let pw = read_password()?;
            if let Some(mut conn) = running_server(&dir)? {
                let reply = remote(&mut conn, &Request::SetPassword { password: pw })?;
                return w(out, reply.stdout);
            }
            let store = open_store(&dir)?;
            let row = secrets::cli_row("password.change", crate::accounts::ADMIN, now);
            crate::accounts::set_admin_password_with_events(&store, &pw, now, &[row]).map_err(|e| Failure {
                code: EXIT_CONFIG,
                message: e.to_string(),
            })?;
            // As a change on the Security page: every session ends.
            store.delete_user_sessions(crate::accounts::ADMIN, None)?;
            print(out, text::password_set())?;
        }
        AdminCommand::SelfSigned(args) => self_signed::run(args, out)?,
        AdminCommand::Dlq { command } => dlq(command, now, out)?,
        AdminCommand::RotateKey { dir } => {
            if let Some(mut conn) = running_server(&dir)? {
                let reply = remote(&mut conn, &Request::RotateKey)?;
                return w(out, reply.stdout);
            }
            w(out, secrets::rotate_key(&dir, now)?)?
        }
        AdminCommand::Backup {
            dir,
            passphrase_file,
            out: file,
        } => {
            let passphrase = secrets::read_passphrase(&passphrase_file)?;
            if let Some(mut conn) = running_server(&dir)? {
                let target = file.display().to_string();
                let reply = remote(&mut conn, &Request::Backup { passphrase, target })?;
                let Some(len) = reply.attachment else {
                    return Err(fail("the server sent no backup"));
                };
                secrets::write_out(&file, |w| conn.attachment(len, w).map_err(|e| e.to_string()))?;
                return print(out, text::backup_written(&file));
            }
            w(out, secrets::backup(&dir, &passphrase, &file, now)?)?
        }
        AdminCommand::Restore {
            dir,
            file,
            passphrase_file,
            max_work_factor,
        } => w(
            out,
            secrets::restore(&dir, &file, &passphrase_file, max_work_factor, now)?,
        )?,
    }
    Ok(())
}

fn dlq(cmd: DlqCommand, now: Timestamp, out: &mut dyn Write) -> Result<(), Failure> {
    let w = |out: &mut dyn Write, s: String| out.write_all(s.as_bytes()).map_err(|e| fail(e.to_string()));
    match cmd {
        DlqCommand::List { dir } => {
            let store = open_store(&dir)?;
            let (tasks, _) = store.load_tasks()?;
            let mut dead: Vec<_> = tasks.into_iter().filter(|(_, r)| r.dead_letter.is_some()).collect();
            dead.sort_by_key(|(_, r)| std::cmp::Reverse(r.dead_letter.as_ref().map(|d| d.since)));
            w(
                out,
                format!(
                    "{:<40} {:>8} {:<20} {:<20} LAST ERROR\n",
                    "TASK", "FAILURES", "SINCE", "NEXT RECHECK"
                ),
            )?;
            for (k, r) in &dead {
                let dl = r.dead_letter.as_ref();
                w(
                    out,
                    format!(
                        "{:<40} {:>8} {:<20} {:<20} {}\n",
                        k.to_string(),
                        r.failures,
                        dl.map(|d| d.since.to_rfc3339()).unwrap_or_default(),
                        dl.map(|d| d.next_recheck.to_rfc3339()).unwrap_or_default(),
                        r.last_error.as_ref().map(|e| e.message.as_str()).unwrap_or("")
                    ),
                )?;
            }
            w(out, format!("{} dead-lettered task(s)\n", dead.len()))?;
        }
        DlqCommand::Retry { dir, instance, group } => {
            change_task(&dir, &instance, &group, |r| crate::core::task::retry_now(r, now))?;
            w(
                out,
                format!("{instance}/{group} will be probed when the server starts\n"),
            )?;
        }
        DlqCommand::Discard { dir, instance, group } => {
            change_task(&dir, &instance, &group, crate::core::task::discard)?;
            w(out, format!("{instance}/{group} discarded and disabled\n"))?;
        }
    }
    Ok(())
}

fn change_task(
    dir: &DataDirArgs,
    instance: &str,
    group: &str,
    f: impl FnOnce(&mut crate::model::TaskRecord) -> bool,
) -> Result<(), Failure> {
    let store = open_store(dir)?;
    let key = TaskKey::new(instance, group);
    let (tasks, _) = store.load_tasks()?;
    let Some((_, mut rec)) = tasks.into_iter().find(|(k, _)| *k == key) else {
        return Err(fail(format!("no task {key}")));
    };
    if !f(&mut rec) {
        return Err(fail(format!("task {key} is not in the dead-letter queue")));
    }
    store.write_tasks(&[(key, Some(rec))])?;
    Ok(())
}

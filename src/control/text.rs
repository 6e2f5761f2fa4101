//! What the `admin` commands print, made in one place: the CLI on a stopped
//! server and the running server (through the control socket) both print
//! with these, so the operator sees the same either way.

use std::path::Path;

use crate::service::reload::ReloadReport;
use crate::store::TokenInfo;

/// A command's output: standard output and notes for standard error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn out(stdout: impl Into<String>) -> Output {
        Output {
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }
}

/// A token name `create-token` accepts: 1 to 64 characters (trimmed).
pub fn token_name(name: &str) -> Result<&str, String> {
    let trimmed = name.trim();
    if trimmed.is_empty() || name.len() > 64 {
        return Err("--name must be 1-64 characters".into());
    }
    Ok(trimmed)
}

pub fn token_created(plain: &str, info: &TokenInfo) -> Output {
    Output {
        stdout: format!("{plain}\n"),
        stderr: format!(
            "created {} API token {} ({}); it is shown only once\n",
            info.scope.as_str(),
            info.id,
            info.name
        ),
    }
}

pub fn token_list(tokens: &[TokenInfo]) -> Output {
    use std::fmt::Write;
    let mut out = format!("{:<10} {:<6} {:<26} NAME\n", "ID", "SCOPE", "CREATED");
    for t in tokens {
        let _ = writeln!(
            out,
            "{:<10} {:<6} {:<26} {}",
            t.id,
            t.scope.as_str(),
            t.created.to_rfc3339(),
            t.name
        );
    }
    let _ = writeln!(out, "{} API token(s)", tokens.len());
    Output::out(out)
}

pub fn token_revoked(id: &str) -> Output {
    Output::out(format!("revoked API token {id}\n"))
}

pub fn no_such_token(id: &str) -> String {
    format!("no API token with the id {id} (`pollster admin list-tokens` lists them)")
}

pub fn password_set() -> Output {
    Output::out("admin password set\n")
}

pub fn key_rotated(records: usize, key: &Path, old: &Path) -> String {
    format!(
        "re-sealed {records} record(s) under a new key in {}; the old key is kept in {}\n",
        key.display(),
        old.display()
    )
}

pub fn backup_written(out: &Path) -> Output {
    Output::out(format!("wrote an encrypted backup to {}\n", out.display()))
}

/// `reload` on a stopped server.
pub fn nothing_to_reload(data_dir: &Path) -> String {
    format!(
        "no server is running on {}: there is nothing to reload (the config is read when the server starts)",
        data_dir.display()
    )
}

pub fn reload_report(r: &ReloadReport) -> Output {
    use std::fmt::Write;
    let mut out = format!(
        "reloaded {}\n",
        r.file
            .as_deref()
            .unwrap_or("the environment (the server runs without a config file)")
    );
    let lists = [
        ("instances added", &r.instances_added),
        ("instances changed", &r.instances_changed),
        ("instances removed", &r.instances_removed),
        ("types changed", &r.types_changed),
        ("settings changed", &r.settings_changed),
        ("budget pools changed", &r.pools_changed),
    ];
    let mut changed = false;
    for (what, names) in lists {
        if !names.is_empty() {
            changed = true;
            let _ = writeln!(out, "  {what}: {}", names.join(", "));
        }
    }
    for (what, on) in [
        ("the event sink changed", r.sink_changed),
        ("the log level changed", r.log_level_changed),
        ("TLS certificates read again", r.tls_reloaded),
    ] {
        if on {
            changed = true;
            let _ = writeln!(out, "  {what}");
        }
    }
    if !changed {
        out.push_str("  nothing changed\n");
    }
    if !r.restart_needed.is_empty() {
        let _ = writeln!(out, "  waiting for a restart: {}", r.restart_needed.join(", "));
    }
    Output::out(out)
}

//! One server per data directory (a real process): while a `pollster serve`
//! holds `<data_dir>/pollster.pid`, a second one on the same directory ends
//! at once with exit 2, naming the directory and the PID that holds it.
//!
//! The `admin` commands on a running server go through its control socket
//! `<data_dir>/control.sock`: a token made there works at once, a revoked
//! one stops at once, each command is in the audit trail as `cli:<uid>`,
//! and a uid other than the server's and root's is refused by the server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::port::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_pollster");

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config_text(data: &Path, api: u16, metrics: u16) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\ndata_dir = \"{}\"\n",
        data.display()
    )
}

fn write_config(dir: &Path, data: &Path, name: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, config_text(data, free_port(), free_port())).expect("write config");
    file
}

async fn wait_ready(api: &str, log: &Path) {
    let client = reqwest::Client::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Ok(r) = client.get(format!("{api}/readyz")).send().await
            && r.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("server not ready: {}", std::fs::read_to_string(log).unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_data_directory_exits_2_naming_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (api, metrics) = (free_port(), free_port());
    let first = dir.path().join("first.toml");
    std::fs::write(&first, config_text(&data, api, metrics)).expect("write");
    let log = dir.path().join("serve.log");
    let child = Command::new(BIN)
        .args(["serve", "--config", &first.to_string_lossy()])
        .env("POLLSTER_ADMIN_PASSWORD", "correct horse battery staple")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("serve starts");
    let pid = child.id();
    let running = Running(child);
    wait_ready(&format!("http://127.0.0.1:{api}"), &log).await;
    let pid_file = std::fs::read_to_string(data.join("pollster.pid")).expect("pid file");
    assert_eq!(pid_file.trim(), pid.to_string());

    // Other ports, so only the directory can be what refuses it.
    let second = write_config(dir.path(), &data, "second.toml");
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(["serve", "--config", &second.to_string_lossy()])
        .env_remove("RUST_LOG")
        .output()
        .expect("second serve runs");
    // It does not wait for the lock (a generous bound: a busy machine is slow to start a process).
    assert!(start.elapsed() < Duration::from_secs(60), "refused at once");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&data.display().to_string()),
        "names the directory: {stderr}"
    );
    assert!(stderr.contains(&format!("PID {pid}")), "names the PID: {stderr}");
    drop(running);
}

/// `pollster` with `args` (and `stdin`): exit code, stdout, stderr.
fn cli(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    cli_as(None, BIN, args, stdin)
}

/// [`cli`] with the binary `bin`, run through `setpriv` as `user` when
/// given.
fn cli_as(user: Option<(&str, &str)>, bin: &str, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    let mut cmd = match user {
        Some((user, group)) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={user}"),
                &format!("--regid={group}"),
                "--clear-groups",
                bin,
            ]);
            c
        }
        None => Command::new(bin),
    };
    let mut child = cmd
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("POLLSTER_SECRET_KEY_FILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pollster runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("pollster ends");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn serve(config: &Path, log: &Path) -> Running {
    let child = Command::new(BIN)
        .args(["serve", "--config", &config.to_string_lossy()])
        .env("POLLSTER_ADMIN_PASSWORD", "correct horse battery staple")
        .env_remove("RUST_LOG")
        .env_remove("POLLSTER_SECRET_KEY_FILE")
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("log"),
        )
        .spawn()
        .expect("serve starts");
    Running(child)
}

/// SIGTERM, and the exit awaited.
fn stop(mut running: Running) {
    let pid = running.0.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(status.success());
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if let Ok(Some(status)) = running.0.try_wait() {
            assert!(status.success(), "a clean stop: {status:?}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("did not stop within 15 s of SIGTERM");
}

async fn bearer_status(client: &reqwest::Client, api: &str, token: &str, path: &str) -> u16 {
    client
        .get(format!("{api}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

async fn audit(client: &reqwest::Client, api: &str, token: &str) -> Vec<serde_json::Value> {
    let page: serde_json::Value = client
        .get(format!("{api}/api/admin/audit?limit=1000"))
        .bearer_auth(token)
        .send()
        .await
        .expect("audit")
        .json()
        .await
        .expect("audit JSON");
    page["entries"].as_array().cloned().unwrap_or_default()
}

fn has_entry(entries: &[serde_json::Value], actor: &str, action: &str) -> bool {
    entries.iter().any(|e| e["actor"] == actor && e["action"] == action)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_reach_the_running_server_through_its_control_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let api_port = free_port();
    let config = dir.path().join("pollster.toml");
    std::fs::write(&config, config_text(&data, api_port, free_port())).expect("write");
    let log = dir.path().join("serve.log");
    let api = format!("http://127.0.0.1:{api_port}");
    let client = reqwest::Client::new();
    let data_arg = data.to_string_lossy().into_owned();
    let dir_args = ["--data-dir", data_arg.as_str()];
    let with = |cmd: &[&str]| -> Vec<String> { cmd.iter().chain(dir_args.iter()).map(|s| s.to_string()).collect() };
    let run = |cmd: &[&str], stdin: Option<&str>| {
        let args = with(cmd);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args, stdin)
    };

    // A socket file left behind by a server that was killed is replaced.
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(data.join("control.sock"), "stale").expect("stale socket");
    let running = serve(&config, &log);
    wait_ready(&api, &log).await;
    let socket = data.join("control.sock");
    {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let meta = std::fs::metadata(&socket).expect("the control socket exists");
        assert!(meta.file_type().is_socket(), "a socket, not the stale file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
    // SAFETY: geteuid takes nothing and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let actor = format!("cli:{uid}");

    // A token made through the socket works at once.
    let (code, out, err) = run(&["admin", "create-token", "--name", "ops"], None);
    assert_eq!(code, 0, "{out}{err}");
    let token = out.trim().to_string();
    assert!(token.starts_with("pst_"), "{out}");
    assert!(err.contains("created admin API token"), "{err}");
    assert_eq!(bearer_status(&client, &api, &token, "/api/admin/audit").await, 200);
    let id = err.split_whitespace().nth(4).expect("the id in the note").to_string();

    let (code, out, err) = run(&["admin", "list-tokens"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ID "), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} listed: {out}"));
    assert!(line.contains("admin") && line.ends_with("ops"), "{line}");
    assert!(!out.contains(&token), "never the token itself");

    let entries = audit(&client, &api, &token).await;
    assert!(has_entry(&entries, &actor, "token.create"), "{entries:#?}");

    // The data key, rotated inside the server: the credential sealed
    // before is opened with the new key at once, and one saved after is
    // sealed with it (a restart reads the new key file and opens both).
    let instance = |name: &str| {
        serde_json::json!({"name": name, "type": "http", "url": "http://127.0.0.1:9/", "enabled": false,
            "auth": {"kind": "basic", "username": "u", "password": "pw-SECRET-1"}})
    };
    let post = |body: serde_json::Value| {
        client
            .post(format!("{api}/api/instances"))
            .bearer_auth(&token)
            .json(&body)
            .send()
    };
    let r = post(instance("before")).await.expect("post");
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap_or_default());
    let (code, out, err) = run(&["admin", "rotate-key"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("re-sealed 1 record(s) under a new key"), "{out}");
    assert_eq!(bearer_status(&client, &api, &token, "/api/instances/before").await, 200);
    let r = post(instance("after")).await.expect("post");
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().await.unwrap_or_default());

    // A backup, taken by the server and written by the CLI.
    let pass = dir.path().join("pass");
    std::fs::write(&pass, "a long enough passphrase\n").expect("pass");
    let out_file = dir.path().join("backup.age");
    let (pass_arg, out_arg) = (
        pass.to_string_lossy().into_owned(),
        out_file.to_string_lossy().into_owned(),
    );
    let (code, out, err) = run(
        &["admin", "backup", "--passphrase-file", &pass_arg, "--out", &out_arg],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, format!("wrote an encrypted backup to {out_arg}\n"));
    let head = std::fs::read(&out_file).expect("backup written");
    assert!(head.starts_with(b"age-encryption.org/v1"), "an age file");

    let (code, out, err) = run(&["admin", "set-password"], Some("another horse battery staple\n"));
    assert_eq!((code, out.as_str()), (0, "admin password set\n"), "{err}");
    let (code, out, err) = run(&["admin", "set-password"], Some("short\n"));
    assert_eq!(code, 2, "{out}{err}");

    let (code, out, err) = run(&["admin", "reload"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with(&format!("reloaded {}", config.display())), "{out}");

    let entries = audit(&client, &api, &token).await;
    for action in ["key.rotate", "backup.create", "password.change", "config.reload"] {
        assert!(has_entry(&entries, &actor, action), "{action}: {entries:#?}");
    }

    // Anyone else is refused by the server itself: the socket and the
    // directories are opened to all for this, so only the uid check stands.
    if uid == 0 {
        use std::os::unix::fs::PermissionsExt;
        let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        open(dir.path(), 0o755);
        open(&data, 0o755);
        open(&socket, 0o666);
        // A copy of the binary where `nobody` may run it: the build's own
        // may sit below a directory only root enters (a CI checkout in
        // /root).
        let bin = dir.path().join("pollster-nobody");
        std::fs::copy(BIN, &bin).expect("copy the binary");
        open(&bin, 0o755);
        let (code, out, err) = cli_as(
            Some(("nobody", "nogroup")),
            &bin.to_string_lossy(),
            &["admin", "list-tokens", "--data-dir", &data_arg],
            None,
        );
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains("refused") && err.contains("uid 65534"), "{err}");
        let server_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            server_log.contains("WARN") && server_log.contains("refused a connection"),
            "{server_log}"
        );
        open(&socket, 0o600);
        open(&data, 0o700);
    } else {
        eprintln!("not root: the refusal of another uid is not tried");
    }

    // Revoked through the socket: refused at once.
    let (code, out, err) = run(&["admin", "revoke-token", &id], None);
    assert_eq!((code, out.clone()), (0, format!("revoked API token {id}\n")), "{err}");
    assert_eq!(bearer_status(&client, &api, &token, "/api/admin/audit").await, 401);
    let (code, _, err) = run(&["admin", "revoke-token", &id], None);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("no API token with the id {id}")), "{err}");

    // A clean stop removes the socket; the commands then open the database.
    stop(running);
    assert!(!socket.exists(), "the socket is removed on a clean stop");
    let (code, _, err) = run(&["admin", "reload"], None);
    assert_eq!(code, 1);
    assert!(err.contains("there is nothing to reload"), "{err}");
    let (code, out, err) = run(&["admin", "create-token", "--name", "offline", "--scope", "read"], None);
    assert_eq!(code, 0, "{err}");
    let offline = out.trim().to_string();
    let (code, out, err) = run(&["admin", "list-tokens"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("ID ") && out.contains("offline") && out.ends_with("1 API token(s)\n"),
        "{out}"
    );

    // The new key file opens every credential: those re-sealed and the one
    // sealed after the rotation.
    let running = serve(&config, &log);
    wait_ready(&api, &log).await;
    let admin = run(&["admin", "create-token", "--name", "again"], None)
        .1
        .trim()
        .to_string();
    for name in ["before", "after"] {
        assert_eq!(
            bearer_status(&client, &api, &admin, &format!("/api/instances/{name}")).await,
            200
        );
    }
    assert_eq!(
        bearer_status(&client, &api, &offline, "/api/instances/before").await,
        200
    );
    let entries = audit(&client, &api, &admin).await;
    assert!(
        has_entry(&entries, "cli", "token.create"),
        "the offline token: {entries:#?}"
    );
    stop(running);
}

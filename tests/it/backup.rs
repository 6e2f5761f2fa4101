//! Encrypted backups, against the running appliance and the binary: the
//! file `POST /api/admin/backup` gives opens with Python's `pyrage` and
//! Debian's `age` tool; `pollster admin restore` refuses a wrong passphrase
//! or a damaged file leaving the database byte for byte as it was; and a
//! backup restored into a fresh data directory, under a new key, polls
//! with its credentials.
//!
//! `pyrage` is found at `PYRAGE_PYTHON` (default
//! `/opt/pyrage-venv/bin/python`), `age` on PATH; each is skipped with a
//! note when missing, except under `CI=true` (.ci/run installs both).

use crate::common;

use common::TestApp;
use common::auth_target::AuthTarget;
use reqwest::Method;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "tok-in-the-backup-42";
const PASS: &str = "correct horse battery staple";

fn run(args: &[&str]) -> (i32, String) {
    common::run_pollster(args)
}

fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// The inside of `file` as `pyrage.passphrase.decrypt` gives it, or `None`
/// (with a note) when pyrage is not installed outside CI.
fn pyrage_decrypt(file: &Path) -> Option<Vec<u8>> {
    let python = std::env::var_os("PYRAGE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/pyrage-venv/bin/python"));
    let has = Command::new(&python)
        .args(["-c", "import pyrage"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        assert!(!in_ci(), "CI=true but pyrage is not importable by {}", python.display());
        println!(
            "note: pyrage not found ({}); the backup was not opened with it",
            python.display()
        );
        return None;
    }
    let out = Command::new(&python)
        .args([
            "-c",
            "import sys, pyrage; sys.stdout.buffer.write(pyrage.passphrase.decrypt(open(sys.argv[1], 'rb').read(), sys.argv[2]))",
        ])
        .arg(file)
        .arg(PASS)
        .output()
        .expect("python runs");
    assert!(out.status.success(), "pyrage: {}", String::from_utf8_lossy(&out.stderr));
    Some(out.stdout)
}

/// The inside of `file` as Debian's `age -d` gives it. age 1.1 reads a
/// passphrase only from the terminal, so it runs under `script`, which
/// gives it a pseudo-terminal that our stdin feeds.
fn age_decrypt(file: &Path, out: &Path) -> Option<Vec<u8>> {
    let has_age = Command::new("age").arg("--version").output().is_ok();
    let has_script = Command::new("script").arg("--version").output().is_ok();
    if !(has_age && has_script) {
        assert!(
            !in_ci(),
            "CI=true but `age` (Debian package age) or `script` is missing"
        );
        println!("note: `age` or `script` not found; the backup was not opened with age");
        return None;
    }
    let cmd = format!("age -d -o '{}' '{}'", out.display(), file.display());
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{PASS}\n").as_bytes())
        .expect("passphrase");
    let status = child.wait_with_output().expect("age runs");
    assert!(
        status.status.success(),
        "age -d: {}",
        String::from_utf8_lossy(&status.stdout)
    );
    Some(std::fs::read(out).expect("age wrote the inside"))
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_opens_with_age_and_pyrage_and_restores_on_a_new_machine_under_a_new_key() {
    let target = AuthTarget::start(TOKEN).await;
    let app = TestApp::spawn(vec![]).await;
    let (status, body) = app
        .send(
            Method::POST,
            "/api/instances",
            Some(json!({"name": "tok", "type": "fast", "url": target.url,
                        "auth": {"kind": "bearer", "token": TOKEN}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    target.wait_more_than(0, WAIT).await;
    let r = app
        .client
        .post(app.url("/api/admin/backup"))
        .bearer_auth(&app.token)
        .json(&json!({"passphrase": PASS}))
        .send()
        .await
        .expect("backup");
    assert_eq!(r.status().as_u16(), 200);
    let file = r.bytes().await.expect("body").to_vec();
    let old = app.keep_data_dir().await;
    let work = tempfile::tempdir().expect("tempdir");
    let backup = work.path().join("pollster.redb.age");
    std::fs::write(&backup, &file).expect("write");

    // Inside: the database with the credential in plaintext, which only the
    // passphrase protects; the same bytes whichever tool opens it.
    let inside = pollster::secrets::backup::decrypt(&file, PASS).expect("opens");
    assert!(contains(&inside, TOKEN));
    if let Some(by_pyrage) = pyrage_decrypt(&backup) {
        assert_eq!(by_pyrage, inside, "pyrage");
    }
    if let Some(by_age) = age_decrypt(&backup, &work.path().join("inside.redb")) {
        assert_eq!(by_age, inside, "age");
    }

    // A wrong passphrase, or a damaged file: exit 2, the database untouched.
    let pass_file = work.path().join("pass");
    std::fs::write(&pass_file, format!("{PASS}\n")).expect("pass");
    let wrong_file = work.path().join("wrong");
    std::fs::write(&wrong_file, "not the passphrase at all\n").expect("pass");
    let damaged = work.path().join("damaged.age");
    let mut bad = file.clone();
    let at = bad.len() - 40;
    bad[at] ^= 0x55;
    std::fs::write(&damaged, &bad).expect("write");
    let data = old.path().to_str().expect("utf-8");
    let before = std::fs::read(old.path().join("pollster.redb")).expect("db");
    let backup_arg = backup.to_str().expect("utf-8");
    for (what, file, pass) in [
        ("wrong passphrase", backup_arg, &wrong_file),
        ("damaged file", damaged.to_str().expect("utf-8"), &pass_file),
    ] {
        let (code, text) = run(&[
            "admin",
            "restore",
            file,
            "--passphrase-file",
            pass.to_str().expect("utf-8"),
            "--data-dir",
            data,
        ]);
        assert_eq!(code, 2, "{what}: {text}");
        assert!(text.contains("nothing was changed"), "{what}: {text}");
        let after = std::fs::read(old.path().join("pollster.redb")).expect("db");
        assert!(after == before, "{what}: the database changed");
    }

    // A new machine: a fresh data directory, a key of its own.
    let fresh = tempfile::tempdir().expect("tempdir");
    let new_data = fresh.path().to_str().expect("utf-8");
    let pass_arg = pass_file.to_str().expect("utf-8");
    let (code, text) = run(&[
        "admin",
        "restore",
        backup_arg,
        "--passphrase-file",
        pass_arg,
        "--data-dir",
        new_data,
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("restored 1 instance(s)"), "{text}");
    let new_key = std::fs::read(fresh.path().join("secret.key")).expect("a new key");
    assert_ne!(new_key, std::fs::read(old.path().join("secret.key")).expect("old key"));
    let restored = std::fs::read(fresh.path().join("pollster.redb")).expect("db");
    assert!(
        !contains(&restored, TOKEN),
        "the restored file holds the token in plaintext"
    );

    // The offline backup of the restored machine opens with pyrage too.
    let offline = work.path().join("offline.age");
    let (code, text) = run(&[
        "admin",
        "backup",
        "--passphrase-file",
        pass_arg,
        "--out",
        offline.to_str().expect("utf-8"),
        "--data-dir",
        new_data,
    ]);
    assert_eq!(code, 0, "{text}");
    let inside = pollster::secrets::backup::decrypt(&std::fs::read(&offline).expect("read"), PASS).expect("opens");
    assert!(contains(&inside, TOKEN));
    if let Some(by_pyrage) = pyrage_decrypt(&offline) {
        assert_eq!(by_pyrage, inside, "pyrage");
    }

    let seen = target.ok();
    let app = TestApp::spawn_in(fresh, |_| {}).await;
    target.wait_more_than(seen, WAIT).await;
    app.stop().await;
}

/// What a run of the binary cost: its exit code, what it printed, its
/// peak resident memory (the kernel's `ru_maxrss` from `wait4`, for this
/// child alone) and its wall time.
struct Measured {
    code: i32,
    text: String,
    peak_mib: u64,
    secs: f64,
}

/// Runs the binary with its address space capped at `cap_mib`, so that a
/// regression fails the test (an allocation refused) instead of taking
/// gigabytes of the machine it runs on.
fn run_measured(args: &[&str], cap_mib: u64) -> Measured {
    use std::os::unix::process::CommandExt;
    let out = tempfile::NamedTempFile::new().expect("tempfile");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pollster"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("POLLSTER_SECRET_KEY_FILE")
        .stdin(Stdio::null())
        .stdout(out.reopen().expect("reopen"))
        .stderr(out.reopen().expect("reopen"));
    let cap = cap_mib << 20;
    // SAFETY: setrlimit is async-signal-safe, and nothing else runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: cap,
                rlim_max: cap,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = std::time::Instant::now();
    // Reaped by wait4 below, which also gives its resource usage.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("binary runs");
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is written by wait4 for the child it reaps.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, usage.as_mut_ptr()) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    let secs = started.elapsed().as_secs_f64();
    // SAFETY: wait4 returned the child, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Measured {
        code,
        text: std::fs::read_to_string(out.path()).unwrap_or_default(),
        peak_mib: (usage.ru_maxrss as u64) >> 10,
        secs,
    }
}

/// An age file whose one scrypt stanza asks for `log_n`, written by hand
/// (making it with age would run scrypt at 2^log_n): a random salt, and a
/// wrapped key and header MAC that open with nothing.
fn hostile_backup(log_n: u8) -> Vec<u8> {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD_NO_PAD;
    let bytes = |n: usize| -> Vec<u8> { (0..n).map(|_| rand::random::<u8>()).collect() };
    let mut out = format!(
        "age-encryption.org/v1\n-> scrypt {} {log_n}\n{}\n--- {}\n",
        STANDARD_NO_PAD.encode(bytes(16)),
        STANDARD_NO_PAD.encode(bytes(32)),
        STANDARD_NO_PAD.encode(bytes(32))
    )
    .into_bytes();
    out.extend(bytes(16 + 1024));
    out
}

/// The audit entries of `data_dir`'s database, oldest first, as (action,
/// actor, target, source).
fn audit_of(data_dir: &Path) -> Vec<(String, String, String, Option<String>)> {
    let (_, key) = pollster::store::unlock(data_dir, None).expect("the key opens the database");
    let store = pollster::store::Store::open_with_key(data_dir, key).expect("store");
    let mut rows: Vec<_> = store
        .audit_page(None, 1000)
        .expect("audit")
        .into_iter()
        .map(|e| {
            let line: serde_json::Value = serde_json::from_str(&e.line).expect("json");
            let s = |k: &str| line[k].as_str().unwrap_or_default().to_string();
            (s("action"), s("actor"), s("target"), e.source)
        })
        .collect();
    rows.reverse();
    rows
}

#[test]
fn a_hostile_work_factor_is_refused_before_any_key_is_derived() {
    let work = tempfile::tempdir().expect("tempdir");
    let data = work.path().join("data");
    // A database to keep: made by the binary, as an operator would.
    let (code, text) = run(&[
        "admin",
        "create-token",
        "--name",
        "t",
        "--data-dir",
        data.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{text}");
    let before = std::fs::read(data.join("pollster.redb")).expect("db");
    let hostile = work.path().join("hostile.age");
    std::fs::write(&hostile, hostile_backup(23)).expect("write");
    let pass = work.path().join("pass");
    std::fs::write(&pass, format!("{PASS}\n")).expect("pass");
    let m = run_measured(
        &[
            "admin",
            "restore",
            hostile.to_str().expect("utf-8"),
            "--passphrase-file",
            pass.to_str().expect("utf-8"),
            "--data-dir",
            data.to_str().expect("utf-8"),
        ],
        2048,
    );
    println!(
        "log_n = 23: exit {}, peak {} MiB, {:.2} s: {}",
        m.code,
        m.peak_mib,
        m.secs,
        m.text.trim()
    );
    assert_eq!(m.code, 2, "{}", m.text);
    assert!(
        m.text.contains("work factor 23") && m.text.contains("at most 17"),
        "names the factor and the limit: {}",
        m.text
    );
    assert!(m.text.contains("nothing was changed"), "{}", m.text);
    assert!(m.peak_mib < 256, "peak {} MiB", m.peak_mib);
    assert!(
        std::fs::read(data.join("pollster.redb")).expect("db") == before,
        "the database changed"
    );
    let left: Vec<_> = std::fs::read_dir(&data)
        .expect("ls")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".restore"))
        .collect();
    assert!(left.is_empty(), "work files left: {left:?}");
}

#[test]
fn a_large_backup_restores_in_flat_memory_and_every_cli_action_is_audited() {
    // Ten documents of just under 4 MiB: some 40 MiB in ten commits.
    const DOCS: usize = 10;
    let work = tempfile::tempdir().expect("tempdir");
    let data = work.path().join("data");
    let d = data.to_str().expect("utf-8");
    let (code, text) = run(&["admin", "create-token", "--name", "t", "--data-dir", d]);
    assert_eq!(code, 0, "{text}");
    // Rotated while the database is small (a rotation rewrites all of it).
    let (code, text) = run(&["admin", "rotate-key", "--data-dir", d]);
    assert_eq!(code, 0, "{text}");
    {
        let (_, key) = pollster::store::unlock(&data, None).expect("key");
        let store = pollster::store::Store::open_with_key(&data, key).expect("store");
        let blob = "x".repeat((4 << 20) - (64 << 10));
        for i in 0..DOCS {
            store
                .put_settings(&format!("bulk-{i}"), &json!({ "blob": blob }))
                .expect("settings");
        }
    }
    let pass = work.path().join("pass");
    std::fs::write(&pass, format!("{PASS}\n")).expect("pass");
    let p = pass.to_str().expect("utf-8");

    // Twelve spaces are no passphrase: exit 2, nothing written.
    let blank = work.path().join("blank");
    std::fs::write(&blank, format!("{}\n", " ".repeat(12))).expect("blank");
    let file = work.path().join("b.age");
    let f = file.to_str().expect("utf-8");
    let (code, text) = run(&[
        "admin",
        "backup",
        "--passphrase-file",
        blank.to_str().expect("utf-8"),
        "--out",
        f,
        "--data-dir",
        d,
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("at least 12 characters"), "{text}");
    assert!(!file.exists());

    let (code, text) = run(&["admin", "backup", "--passphrase-file", p, "--out", f, "--data-dir", d]);
    assert_eq!(code, 0, "{text}");
    let size_mib = std::fs::metadata(&file).expect("backup").len() >> 20;
    assert!(size_mib >= 4 * DOCS as u64 - 2, "{size_mib} MiB");
    let audit = audit_of(&data);
    let actions: Vec<(&str, &str)> = audit.iter().map(|(a, who, _, _)| (a.as_str(), who.as_str())).collect();
    assert_eq!(
        actions,
        [("token.create", "cli"), ("key.rotate", "cli"), ("backup.create", "cli")],
        "{audit:?}"
    );
    assert!(
        audit[1].2.ends_with("secret.key"),
        "the target is the key file: {audit:?}"
    );
    assert_eq!(audit[2].2, f, "the target is the backup written");
    assert_eq!(audit[2].3, None, "no source address from the CLI");

    // Restored into a new data directory: under flat memory, and the
    // restored database records the restore after what the backup held.
    let fresh = work.path().join("fresh");
    let restore_args = |pass: &str| {
        vec![
            "admin".to_string(),
            "restore".into(),
            f.into(),
            "--passphrase-file".into(),
            pass.into(),
            "--data-dir".into(),
            fresh.to_str().expect("utf-8").into(),
        ]
    };
    let (code, text) = run(&restore_args(blank.to_str().expect("utf-8"))
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    assert_eq!(code, 2, "{text}");
    assert!(!fresh.exists(), "a refused restore leaves nothing");
    let m = run_measured(&restore_args(p).iter().map(String::as_str).collect::<Vec<_>>(), 2048);
    println!(
        "restore of a {size_mib} MiB backup: exit {}, peak {} MiB, {:.2} s",
        m.code, m.peak_mib, m.secs
    );
    assert_eq!(m.code, 0, "{}", m.text);
    // scrypt's 64 MiB and two 16 MiB page caches, whatever the size: the
    // old restore held the file, its inside and a copy (some five times
    // the backup's size).
    assert!(
        m.peak_mib < 128 && m.peak_mib < size_mib * 3,
        "peak {} MiB: the {size_mib} MiB backup was held in memory",
        m.peak_mib
    );
    let restored = audit_of(&fresh);
    let actions: Vec<(&str, &str)> = restored
        .iter()
        .map(|(a, who, _, _)| (a.as_str(), who.as_str()))
        .collect();
    // The backup holds the token's and the rotation's rows; the restore's
    // comes after them.
    assert_eq!(
        actions,
        [
            ("token.create", "cli"),
            ("key.rotate", "cli"),
            ("backup.restore", "cli")
        ],
        "{restored:?}"
    );
    assert_eq!(restored[2].2, f);
    let left: Vec<_> = std::fs::read_dir(&fresh)
        .expect("ls")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".restore") || n.contains(".backup"))
        .collect();
    assert!(left.is_empty(), "work files left: {left:?}");
}

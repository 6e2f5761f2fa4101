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

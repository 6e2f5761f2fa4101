//! `promtool check metrics`: the Prometheus project's own lint of the text
//! exposition format. Suites that need nothing else of `common` include
//! this file alone (`#[path = "common/promtool.rs"] mod promtool;`).
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

/// Asserts that `promtool check metrics` accepts `text`. Without promtool
/// the check is skipped with a note, except under `CI=true`, where
/// promtool must be installed (Debian package `prometheus`).
pub fn check_metrics(text: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but promtool is not on PATH (Debian package `prometheus`)"
        );
        println!("note: promtool is not on PATH; the exposition was not checked with it");
        return;
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

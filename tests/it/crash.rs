//! Crash torture, CI size: the real binary under load from `pollster-fleet`,
//! killed with SIGKILL at random points a dozen times (the full run is
//! `bench/torture.sh`; see docs/TORTURE.md). Every restart must open the
//! database, keep every acknowledged dead-letter entry, discard and retry,
//! and resume polling without a burst. A second, shorter run kills it with
//! change events queued for a receiver that is down or slow, and checks
//! that every acknowledged operator action arrives afterwards, with an `id`.

use crate::{events, torture};

use std::path::PathBuf;

/// Fixed, so a failure can be replayed; `TORTURE_SEED` overrides it.
const SEED: u64 = 20_261_201;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_loses_nothing_acknowledged() {
    let seed = std::env::var("TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = torture::Options::ci(
        PathBuf::from(env!("CARGO_BIN_EXE_pollster")),
        PathBuf::from(env!("CARGO_BIN_EXE_pollster-fleet")),
        seed,
        dir.path().to_path_buf(),
    );
    let report = torture::run(&opts).await.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    eprintln!("{report}");
    if !report.violations.is_empty() {
        let log = std::fs::read_to_string(dir.path().join("pollster.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "seed {seed} (replay with TORTURE_SEED={seed}): {} violation(s):\n{report}\nserver log tail:\n{}",
            report.violations.len(),
            tail.join("\n")
        );
    }
    assert_eq!(report.kills, opts.kills, "seed {seed}");
    assert_eq!(report.restarts_ok + report.early_kills, report.kills, "seed {seed}");
    assert_eq!((report.missing, report.offline_missing), (0, 0), "seed {seed}");
    assert!(
        report.entries_checked > 0,
        "seed {seed}: no entry was checked: {report}"
    );
    assert!(report.rate_checks > 0, "seed {seed}: no restart was watched: {report}");
    assert!(
        report.discards + report.retries > 0,
        "seed {seed}: no operator action was acknowledged: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_change_events_queued_loses_no_acknowledged_action() {
    let seed = std::env::var("TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = events::Options {
        pollster: PathBuf::from(env!("CARGO_BIN_EXE_pollster")),
        seed,
        kills: 4,
        actions: (2, 5),
        work_dir: dir.path().to_path_buf(),
    };
    let report = events::run(&opts).await.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    eprintln!("{report}");
    assert_eq!(report.kills, opts.kills, "seed {seed}");
    assert!(
        report.acknowledged > 0,
        "seed {seed}: no operator action was acknowledged: {report}"
    );
    assert!(
        report.delivered_before_last < report.acknowledged,
        "seed {seed}: every action was delivered before a kill; nothing was tested across one: {report}"
    );
    assert!(
        report.missing.is_empty(),
        "seed {seed} (replay with TORTURE_SEED={seed}): acknowledged but never delivered: {:?}\n{report}",
        report.missing
    );
    assert_eq!(
        report.without_id, 0,
        "seed {seed}: change events without an id: {report}"
    );
    assert_eq!(report.id_conflicts, 0, "seed {seed}: one id, two events: {report}");
}

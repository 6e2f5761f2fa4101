//! Behaviour of the store against real redb files in temporary directories.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use redb::{ReadableDatabase, ReadableTable};
use sha2::{Digest, Sha256};

use super::tables::{self, INSTANCES, META, SCHEMA_VERSION_KEY, TASKS};
use super::*;
use crate::model::*;

/// The data key the store tests seal with.
pub(super) fn test_key() -> crate::secrets::DataKey {
    crate::secrets::DataKey::from_bytes([42; crate::secrets::KEY_LEN])
}

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_with_key(dir.path(), test_key()).expect("open");
    (dir, store)
}

fn full_task(n: u64) -> TaskRecord {
    TaskRecord {
        last_attempt: Some(Timestamp(n + 1)),
        last_success: Some(Timestamp(n)),
        last_change: Some(Timestamp(n.saturating_sub(5))),
        digest: Some(u64::MAX - n),
        failures: 3,
        breaker: BreakerState::Open,
        retry_at: Some(Timestamp(n + 30_000)),
        backoff_delay_ms: 20_000,
        next_run: Timestamp(n + 10_000),
        interval_ms: 10_000,
        idle_streak: 7,
        dead_letter: Some(DeadLetterRecord {
            reason: DeadLetterReason::PermanentFailure,
            since: Timestamp(n),
            next_recheck: Timestamp(n + 1_800_000),
            rechecks: 2,
        }),
        disabled: true,
        last_error: Some(PollError {
            category: ErrorCategory::Transient,
            kind: ErrorKind::RateLimited,
            message: "429 Too Many Requests".into(),
            status: Some(429),
            retry_after: Some(Duration::from_secs(90)),
        }),
        failed_items: vec![crate::model::FailedItem {
            item: "node-2".into(),
            error: PollError {
                category: ErrorCategory::Transient,
                kind: ErrorKind::Http,
                message: "HTTP 500".into(),
                status: Some(500),
                retry_after: None,
            },
        }],
    }
}

fn task(failures: u32) -> TaskRecord {
    TaskRecord {
        failures,
        next_run: Timestamp(1_000),
        ..TaskRecord::default()
    }
}

fn instance(name: &str) -> InstanceConfig {
    InstanceConfig {
        name: InstanceName::parse(name).expect("a valid name"),
        type_name: "proxmox_ve".into(),
        url: "https://pve.example:8006".into(),
        timeout: Duration::from_millis(2_500),
        budget: Some("lab".into()),
        labels: BTreeMap::from([("site".to_string(), "lab 1".to_string())]),
        enabled: false,
        auth: Auth::PveToken {
            user: "monitor@pve".into(),
            token_id: "pollster".into(),
            secret: "s3cret".into(),
        },
        tls_verify: false,
        tls_fingerprint: Some("ab".repeat(32)),
        max_response_bytes: 1 << 20,
        shape: BTreeMap::from([("nodes".to_string(), 3)]),
    }
}

fn sorted(mut tasks: Vec<(TaskKey, TaskRecord)>) -> Vec<(TaskKey, TaskRecord)> {
    tasks.sort_by(|a, b| a.0.cmp(&b.0));
    tasks
}

/// Writes raw bytes into `table`, bypassing every check of the store.
fn put_raw(store: &Store, table: tables::Table, key: &[u8], value: &[u8]) {
    let txn = store.db.begin_write().expect("begin");
    {
        let mut t = txn.open_table(table.def).expect("table");
        t.insert(key, value).expect("insert");
    }
    txn.commit().expect("commit");
}

fn get_raw(store: &Store, table: tables::Table, key: &[u8]) -> Vec<u8> {
    let txn = store.db.begin_read().expect("read");
    let t = txn.open_table(table.def).expect("table");
    t.get(key).expect("get").expect("present").value().to_vec()
}

fn table_names(db: &impl ReadableDatabase) -> BTreeSet<String> {
    let txn = db.begin_read().expect("read");
    txn.list_tables()
        .expect("list")
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------- open and schema

#[test]
fn open_creates_directory_file_every_table_and_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("nested/data");
    let store = Store::open(&data).expect("open");
    assert_eq!(store.path(), data.join("pollster.redb"));
    assert!(store.path().is_file());

    let expected: BTreeSet<String> = tables::ALL.iter().map(|t| t.name.to_string()).collect();
    for name in [
        "meta",
        "tasks",
        "instances",
        "settings",
        "tokens",
        "users",
        "sessions",
        "history",
    ] {
        assert!(expected.contains(name), "{name} missing from ALL");
    }
    assert_eq!(table_names(&*store.db), expected);

    let txn = store.db.begin_read().expect("read");
    let meta = txn.open_table(META.def).expect("meta");
    let v = meta.get(SCHEMA_VERSION_KEY).expect("get").expect("version written");
    let version: u32 = codec::decode("meta", SCHEMA_VERSION_KEY, v.value()).expect("decode");
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let v99 = codec::encode("v", &99u32).expect("encode");
    put_raw(&store, META, SCHEMA_VERSION_KEY, &v99);
    drop(store);

    let err = Store::open(dir.path()).unwrap_err();
    match &err {
        StoreError::NewerSchema { path, found, supported } => {
            assert_eq!(*found, 99);
            assert_eq!(*supported, SCHEMA_VERSION);
            assert_eq!(path, &dir.path().join(FILE_NAME));
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("schema version 99"), "{msg}");
    assert!(msg.contains(&format!("schema version {SCHEMA_VERSION}")), "{msg}");
    assert!(msg.contains("newer release"), "{msg}");

    // Still version 99 on disk, and refused again.
    let db = redb::Database::open(dir.path().join(FILE_NAME)).expect("raw open");
    let txn = db.begin_read().expect("read");
    let meta = txn.open_table(META.def).expect("meta");
    assert_eq!(
        meta.get(SCHEMA_VERSION_KEY).expect("get").expect("present").value(),
        v99
    );
    drop((meta, txn, db));
    assert!(matches!(Store::open(dir.path()), Err(StoreError::NewerSchema { .. })));
}

#[test]
fn unknown_older_schema_is_corrupt_not_silently_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    put_raw(
        &store,
        META,
        SCHEMA_VERSION_KEY,
        &codec::encode("v", &0u32).expect("encode"),
    );
    put_raw(&store, TASKS, b"x\0y", &codec::encode("t", &task(1)).expect("encode"));
    drop(store);
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { table: "meta", .. }), "{err:?}");
}

#[test]
fn a_file_that_is_not_a_database_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(FILE_NAME), vec![0xA5; 64 * 1024]).expect("write");
    assert!(Store::open(dir.path()).is_err());
}

#[test]
fn second_open_in_process_is_locked_until_the_first_is_dropped() {
    let (dir, store) = temp_store();
    let err = Store::open(dir.path()).unwrap_err();
    match &err {
        StoreError::Locked { path } => assert_eq!(path, store.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("running Pollster server"), "{msg}");
    assert!(msg.contains("web UI"), "{msg}");

    // Clones share the handle; the lock goes with the last one.
    let clone = store.clone();
    drop(store);
    assert!(matches!(Store::open(dir.path()), Err(StoreError::Locked { .. })));
    drop(clone);
    Store::open(dir.path()).expect("open after drop");
}

const CHILD_DIR_ENV: &str = "POLLSTER_STORE_LOCK_PROBE_DIR";

/// Runs only as a child of `another_process_is_locked_out`.
#[test]
#[ignore = "helper run in a child process by another_process_is_locked_out"]
fn lock_probe_child() {
    let dir = std::env::var_os(CHILD_DIR_ENV).expect("run by another_process_is_locked_out");
    let err = Store::open(std::path::Path::new(&dir)).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
}

#[test]
fn another_process_is_locked_out() {
    let (dir, _store) = temp_store();
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "store::tests::lock_probe_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir.path())
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------- tasks

#[test]
fn tasks_round_trip() {
    let (_dir, store) = temp_store();
    let batch = vec![
        (TaskKey::new("pve-1", "nodes"), Some(full_task(1_700_000_000_000))),
        (TaskKey::new("pve-1", "cluster/status"), Some(TaskRecord::default())),
        (TaskKey::new("web", "probe"), Some(task(0))),
    ];
    store.write_tasks(&batch).expect("write");
    let (tasks, bad) = store.load_tasks().expect("load");
    assert!(bad.is_empty(), "{bad:?}");
    let expected: Vec<_> = batch.into_iter().map(|(k, r)| (k, r.expect("some"))).collect();
    assert_eq!(sorted(tasks), sorted(expected));
}

#[test]
fn write_tasks_applies_updates_and_deletes_in_one_batch() {
    let (_dir, store) = temp_store();
    let (a, b, c, d) = (
        TaskKey::new("i", "a"),
        TaskKey::new("i", "b"),
        TaskKey::new("i", "c"),
        TaskKey::new("j", "d"),
    );
    store
        .write_tasks(&[
            (a.clone(), Some(task(1))),
            (b.clone(), Some(task(2))),
            (c.clone(), Some(task(3))),
        ])
        .expect("first batch");
    store
        .write_tasks(&[
            (a.clone(), None),
            (b.clone(), Some(task(20))),
            (d.clone(), Some(task(4))),
            (TaskKey::new("i", "never-stored"), None),
            // The last entry for a key wins.
            (c.clone(), None),
            (c.clone(), Some(task(30))),
        ])
        .expect("second batch");
    let (tasks, bad) = store.load_tasks().expect("load");
    assert!(bad.is_empty());
    assert_eq!(sorted(tasks), vec![(b, task(20)), (c, task(30)), (d, task(4))]);
}

#[test]
fn write_tasks_is_all_or_nothing() {
    let (_dir, store) = temp_store();
    store
        .write_tasks(&[(TaskKey::new("i", "kept"), Some(task(1)))])
        .expect("write");
    let err = store
        .write_tasks(&[
            (TaskKey::new("i", "kept"), None),
            (TaskKey::new("i", "new"), Some(task(2))),
            (TaskKey::new("bad\0name", "g"), Some(task(3))),
        ])
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidKey { .. }), "{err:?}");
    let (tasks, _) = store.load_tasks().expect("load");
    assert_eq!(tasks, vec![(TaskKey::new("i", "kept"), task(1))]);
}

#[test]
fn corrupt_task_rows_are_skipped_and_reported() {
    let (_dir, store) = temp_store();
    store
        .write_tasks(&[(TaskKey::new("good", "probe"), Some(task(5)))])
        .expect("write");
    let good = codec::encode("t", &task(1)).expect("encode");
    let mut future = good.clone();
    future[0] = 9;
    let cases: [(&[u8], &[u8]); 7] = [
        (b"bad\0json", b"\x01{not json"),
        (b"bad\0truncated", &good[..good.len() / 2]),
        (b"bad\0empty", b""),
        (b"bad\0version", &future),
        (b"bad\0wrong-shape", b"\x01{\"failures\":\"three\"}"),
        (b"no-separator", &good),
        (b"\xff\xfe\0g", &good),
    ];
    for (k, v) in cases {
        put_raw(&store, TASKS, k, v);
    }

    let (tasks, bad) = store.load_tasks().expect("load must not fail on bad rows");
    assert_eq!(tasks, vec![(TaskKey::new("good", "probe"), task(5))]);
    assert_eq!(bad.len(), cases.len(), "{bad:?}");
    let mut reported = BTreeSet::new();
    for e in &bad {
        match e {
            StoreError::Corrupt { table, key, reason } => {
                assert_eq!(*table, "tasks");
                assert!(!reason.is_empty());
                reported.insert(key.clone());
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
    let expected: BTreeSet<String> = cases.iter().map(|(k, _)| codec::display_key(k)).collect();
    assert_eq!(reported, expected);
    let version_error = bad
        .iter()
        .find(|e| matches!(e, StoreError::Corrupt { key, .. } if key == "bad\\x00version"))
        .expect("version row reported");
    assert!(version_error.to_string().contains("unknown value format version 9"));
}

// ---------------------------------------------------------------- instances and settings

#[test]
fn instances_round_trip_list_and_replace() {
    let (_dir, store) = temp_store();
    assert_eq!(store.get_instance("pve-1").expect("get"), None);
    assert!(store.list_instances().expect("list").is_empty());

    let mut b = instance("pve-b");
    b.auth = Auth::Basic {
        username: "u".into(),
        password: "p".into(),
    };
    store.put_instance(&b).expect("put");
    store.put_instance(&instance("pve-a")).expect("put");
    assert_eq!(store.get_instance("pve-a").expect("get"), Some(instance("pve-a")));
    assert_eq!(
        store.list_instances().expect("list"),
        vec![instance("pve-a"), b.clone()]
    );

    b.url = "https://other.example".into();
    b.labels.clear();
    store.put_instance(&b).expect("replace");
    assert_eq!(store.get_instance("pve-b").expect("get"), Some(b));
    assert_eq!(store.list_instances().expect("list").len(), 2);
}

#[test]
fn a_batch_of_instances_is_written_in_one_transaction_and_reads_back_as_single_puts_do() {
    let (_dir, store) = temp_store();
    let mut b = instance("pve-b");
    b.auth = Auth::Basic {
        username: "u".into(),
        password: "p".into(),
    };
    store.put_instance(&instance("pve-a")).expect("put");
    let mut a = instance("pve-a");
    a.url = "https://replaced.example".into();
    store
        .put_instances(&[a.clone(), b.clone(), instance("pve-c")])
        .expect("batch");
    assert_eq!(
        store.list_instances().expect("list"),
        vec![a, b, instance("pve-c")],
        "replaced, added, the secret sealed and opened again"
    );
    assert_eq!(store.put_instances(&[]).map_err(|e| e.to_string()), Ok(()));
}

#[test]
fn delete_instance_removes_its_tasks_only() {
    let (_dir, store) = temp_store();
    store.put_instance(&instance("web")).expect("put");
    store.put_instance(&instance("web2")).expect("put");
    store
        .write_tasks(&[
            (TaskKey::new("web", "probe"), Some(task(1))),
            (TaskKey::new("web", "status"), Some(task(2))),
            (TaskKey::new("web2", "probe"), Some(task(3))),
            (TaskKey::new("we", "probe"), Some(task(4))),
        ])
        .expect("write");

    assert!(store.delete_instance("web").expect("delete"));
    assert_eq!(store.get_instance("web").expect("get"), None);
    assert_eq!(store.list_instances().expect("list"), vec![instance("web2")]);
    let (tasks, _) = store.load_tasks().expect("load");
    assert_eq!(
        sorted(tasks),
        vec![
            (TaskKey::new("we", "probe"), task(4)),
            (TaskKey::new("web2", "probe"), task(3))
        ]
    );
    assert!(!store.delete_instance("web").expect("delete again"));
    // Task rows of an instance with no record (from the config file) still go.
    assert!(!store.delete_instance("we").expect("delete"));
    assert_eq!(store.load_tasks().expect("load").0.len(), 1);
}

#[test]
fn corrupt_instance_is_an_error_and_can_still_be_deleted() {
    let (_dir, store) = temp_store();
    store.put_instance(&instance("ok")).expect("put");
    put_raw(&store, tables::INSTANCES, b"broken", b"\x01{");
    // Valid JSON stored under the wrong name is corrupt too.
    let misnamed = codec::encode("i", &instance("other")).expect("encode");
    put_raw(&store, tables::INSTANCES, b"misnamed", &misnamed);

    let err = store.get_instance("broken").unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { table: "instances", key, .. } if key == "broken"),
        "{err:?}"
    );
    assert!(matches!(
        store.get_instance("misnamed"),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(matches!(store.list_instances(), Err(StoreError::Corrupt { .. })));

    assert!(store.delete_instance("broken").expect("delete"));
    assert!(store.delete_instance("misnamed").expect("delete"));
    assert_eq!(store.list_instances().expect("list"), vec![instance("ok")]);
}

#[test]
fn settings_round_trip_and_replace() {
    let (_dir, store) = temp_store();
    assert_eq!(store.get_settings("monitoring").expect("get"), None);
    let doc = serde_json::json!({
        "scheduler": {"workers": 8, "group_interval_overrides": {"pve/nodes": "30s"}},
        "adaptive": {"enabled": false},
        "note": "ünïcode ✓",
    });
    store.put_settings("monitoring", &doc).expect("put");
    store
        .put_settings("sink", &serde_json::json!({"url": null}))
        .expect("put");
    assert_eq!(store.get_settings("monitoring").expect("get"), Some(doc));
    let replaced = serde_json::json!({});
    store.put_settings("monitoring", &replaced).expect("replace");
    assert_eq!(store.get_settings("monitoring").expect("get"), Some(replaced));
    assert_eq!(
        store.get_settings("sink").expect("get"),
        Some(serde_json::json!({"url": null}))
    );
}

// ---------------------------------------------------------------- restart

#[test]
fn data_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (plain, info) = {
        let store = Store::open_with_key(dir.path(), test_key()).expect("open");
        store
            .write_tasks(&[(TaskKey::new("pve-1", "nodes"), Some(full_task(42)))])
            .expect("tasks");
        store.put_instance(&instance("pve-1")).expect("instance");
        store
            .put_settings("monitoring", &serde_json::json!({"a": 1}))
            .expect("settings");
        store
            .create_token("ops", TokenScope::Admin, Timestamp(7))
            .expect("token")
    };
    let store = Store::open_with_key(dir.path(), test_key()).expect("reopen");
    assert_eq!(
        store.load_tasks().expect("load").0,
        vec![(TaskKey::new("pve-1", "nodes"), full_task(42))]
    );
    assert_eq!(store.list_instances().expect("list"), vec![instance("pve-1")]);
    assert_eq!(
        store.get_settings("monitoring").expect("get"),
        Some(serde_json::json!({"a": 1}))
    );
    assert_eq!(store.verify_token(&plain).expect("verify"), Some(info));
}

// ---------------------------------------------------------------- credentials at rest

#[test]
fn credentials_never_reach_the_file_and_a_sealed_value_moved_to_another_instance_does_not_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_with_key(dir.path(), test_key()).expect("open");
    let mut a = instance("a");
    a.url = "https://probe:url-pass-123@pve.example:8006/".into();
    store.put_instance(&a).expect("a");
    store.put_instance(&instance("b")).expect("b");
    let sink = serde_json::json!({"url": "https://u:sink-url-pw@sink.example/", "headers": {"X-Key": "hdr-secret-9"}});
    store.put_settings("sink", &sink).expect("sink");
    assert_eq!(store.get_instance("a").expect("get"), Some(a.clone()));
    assert_eq!(store.get_settings("sink").expect("sink"), Some(sink));
    assert!(store.put_instance(&instance("c")).is_ok());

    // b's sealed secret copied onto a: it does not open there.
    let b_bytes = get_raw(&store, INSTANCES, b"b");
    let a_bytes = get_raw(&store, INSTANCES, b"a");
    let secret_of = |bytes: &[u8]| -> String {
        let v: serde_json::Value = serde_json::from_slice(&bytes[1..]).expect("json");
        v["auth"]["secret"].as_str().expect("sealed").to_string()
    };
    let mut doc: serde_json::Value = serde_json::from_slice(&a_bytes[1..]).expect("json");
    doc["auth"]["secret"] = secret_of(&b_bytes).into();
    let mut forged = vec![a_bytes[0]];
    forged.extend(serde_json::to_vec(&doc).expect("json"));
    put_raw(&store, INSTANCES, b"a", &forged);
    let err = store.get_instance("a").unwrap_err();
    assert!(matches!(err, StoreError::Sealed { table: "instances", .. }), "{err:?}");
    assert!(!format!("{err}").contains("s3cret"));
    put_raw(&store, INSTANCES, b"a", &a_bytes);
    drop(store);

    let bytes = std::fs::read(dir.path().join(FILE_NAME)).expect("read");
    for secret in ["s3cret", "url-pass-123", "sink-url-pw", "hdr-secret-9"] {
        assert!(!contains(&bytes, secret.as_bytes()), "{secret} is in the file");
    }
    // Without the key the records holding credentials do not read.
    let locked = Store::open(dir.path()).expect("open without a key");
    assert!(locked.list_instances().is_err());
    assert!(locked.put_instance(&instance("d")).is_err());
    drop(locked);
    let census = super::key_census(dir.path(), Some(&test_key())).expect("census");
    assert_eq!(census, super::KeyCensus { sealed: 6, unopened: 0 });
    let wrong = crate::secrets::DataKey::from_bytes([1; crate::secrets::KEY_LEN]);
    let census = super::key_census(dir.path(), Some(&wrong)).expect("census");
    assert_eq!(census, super::KeyCensus { sealed: 6, unopened: 6 });
}

#[test]
fn plaintext_credentials_of_an_older_release_are_sealed_at_the_first_open_with_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = Store::open(dir.path()).expect("open");
        let v1 = codec::encode("instance", &instance("old")).expect("v1");
        put_raw(&store, INSTANCES, b"old", &v1);
        let sink = codec::encode(
            "settings",
            &serde_json::json!({"url": "http://s/", "headers": {"A": "old-hdr"}}),
        )
        .expect("v1");
        put_raw(&store, tables::SETTINGS, b"sink", &sink);
        let v1 = codec::encode("v", &1u32).expect("v");
        put_raw(&store, META, SCHEMA_VERSION_KEY, &v1);
    }
    assert_eq!(super::key_census(dir.path(), None).expect("census").sealed, 0);
    let store = Store::open_with_key(dir.path(), test_key()).expect("migrates");
    assert_eq!(store.list_instances().expect("list"), vec![instance("old")]);
    drop(store);
    let bytes = std::fs::read(dir.path().join(FILE_NAME)).expect("read");
    assert!(!contains(&bytes, b"s3cret") && !contains(&bytes, b"old-hdr"));
    assert_eq!(
        super::key_census(dir.path(), Some(&test_key())).expect("census").sealed,
        2
    );
}

/// Run by `a_database_not_shut_down_cleanly_still_has_its_key_checked`:
/// writes a sealed credential, then dies without closing the database.
#[test]
#[ignore = "helper run in a child process"]
fn crash_child() {
    let dir = std::env::var_os(CHILD_DIR_ENV).expect("run by its parent test");
    let store = Store::open_with_key(std::path::Path::new(&dir), test_key()).expect("open");
    store.put_instance(&instance("a")).expect("instance");
    std::process::abort();
}

#[test]
fn a_database_not_shut_down_cleanly_still_has_its_key_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _ = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "store::tests::crash_child", "--ignored", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir.path())
        .output()
        .expect("run child");
    let path = dir.path().join(FILE_NAME);
    assert!(
        matches!(
            redb::Builder::new().open_read_only(&path),
            Err(redb::DatabaseError::RepairAborted)
        ),
        "the child left a file that needs repair"
    );
    let census = super::key_census(dir.path(), Some(&test_key())).expect("census after a crash");
    assert_eq!(census, super::KeyCensus { sealed: 1, unopened: 0 });
    let store = Store::open_with_key(dir.path(), test_key()).expect("open");
    assert_eq!(store.list_instances().expect("list"), vec![instance("a")]);
}

#[test]
fn reseal_moves_every_credential_to_the_new_key_in_one_transaction() {
    let (dir, store) = temp_store();
    store.put_instance(&instance("a")).expect("a");
    store
        .put_settings("sink", &serde_json::json!({"url": "http://s/", "headers": {"A": "x"}}))
        .expect("sink");
    let new = crate::secrets::DataKey::from_bytes([5; crate::secrets::KEY_LEN]);
    assert_eq!(store.reseal(&new).expect("reseal"), 2);
    drop(store);
    assert_eq!(super::key_census(dir.path(), Some(&new)).expect("census").unopened, 0);
    assert_eq!(
        super::key_census(dir.path(), Some(&test_key()))
            .expect("census")
            .unopened,
        2
    );
    let store = Store::open_with_key(dir.path(), new).expect("open");
    assert_eq!(store.list_instances().expect("list"), vec![instance("a")]);
}

#[test]
fn after_a_reseal_the_open_store_and_its_clones_use_the_new_key() {
    let (dir, store) = temp_store();
    let clone = store.clone();
    store.put_instance(&instance("a")).expect("a");
    let new = crate::secrets::DataKey::from_bytes([6; crate::secrets::KEY_LEN]);
    assert_eq!(store.reseal(&new).expect("reseal"), 1);
    // Read and written with the new key, without reopening.
    assert_eq!(clone.list_instances().expect("list"), vec![instance("a")]);
    clone.put_instance(&instance("b")).expect("b");
    assert!(store.backup_bytes().is_ok(), "a backup opens every credential");
    drop((store, clone));
    assert_eq!(
        super::key_census(dir.path(), Some(&new)).expect("census"),
        super::KeyCensus { sealed: 2, unopened: 0 }
    );
}

// ---------------------------------------------------------------- tokens at rest

#[test]
fn token_plaintext_never_reaches_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let tokens: Vec<_> = (0..5)
        .map(|i| {
            store
                .create_token(&format!("token-{i}"), TokenScope::Admin, Timestamp(i))
                .expect("create")
        })
        .collect();
    // Revoke one so freed pages are part of the scan too.
    assert!(store.revoke_token(&tokens[0].1.id).expect("revoke"));
    drop(store);

    let bytes = std::fs::read(dir.path().join(FILE_NAME)).expect("read file");
    for (plain, info) in &tokens {
        let secret = &plain[TOKEN_PREFIX.len()..];
        assert!(!contains(&bytes, plain.as_bytes()), "plaintext {plain} in file");
        assert!(!contains(&bytes, secret.as_bytes()), "secret hex in file");
        let raw = hex::decode(secret).expect("hex");
        assert!(!contains(&bytes, &raw), "secret bytes in file");
        // The scan does see stored data: names are in the file.
        assert!(contains(&bytes, info.name.as_bytes()) || info == &tokens[0].1);
    }
    let live_hash: [u8; 32] = Sha256::digest(tokens[1].0.as_bytes()).into();
    assert!(contains(&bytes, &live_hash), "the hash is what is stored");
}

// ---------------------------------------------------------------- backup

#[test]
fn backup_copies_every_table_with_credentials_in_plaintext_and_no_sessions() {
    let (dir, store) = temp_store();
    store
        .write_tasks(&[(TaskKey::new("a", "g"), Some(full_task(3)))])
        .expect("tasks");
    store.put_instance(&instance("a")).expect("instance");
    store
        .put_settings("monitoring", &serde_json::json!({"x": true}))
        .expect("settings");
    let sink =
        serde_json::json!({"url": "https://u:pw@sink.example/", "headers": {"Authorization": "Bearer sink-tok"}});
    store.put_settings("sink", &sink).expect("sink");
    let (plain, info) = store.create_token("t", TokenScope::Admin, Timestamp(1)).expect("token");
    put_raw(&store, tables::USERS, b"admin", b"\x01{}");
    put_raw(&store, tables::HISTORY, &[0, 0, 1], b"\x01[]");
    put_raw(&store, tables::SESSIONS, b"s", b"\x01{}");

    let bytes = store.backup_bytes().expect("backup");
    let out = dir.path().join("backup");
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::write(out.join(FILE_NAME), &bytes).expect("write");

    let copy = redb::Database::open(out.join(FILE_NAME)).expect("copy opens with redb");
    assert_eq!(table_names(&copy), table_names(&*store.db));
    {
        let (src, dst) = (store.db.begin_read().expect("read"), copy.begin_read().expect("read"));
        for table in tables::ALL {
            let rows = |txn: &redb::ReadTransaction| -> Vec<(Vec<u8>, Vec<u8>)> {
                let t = txn.open_table(table.def).expect("table");
                t.iter()
                    .expect("iter")
                    .map(|e| {
                        let (k, v) = e.expect("row");
                        (k.value().to_vec(), v.value().to_vec())
                    })
                    .collect()
            };
            let (src, dst) = (rows(&src), rows(&dst));
            match table.name {
                "sessions" => assert!(dst.is_empty(), "sessions are never backed up"),
                // Credentials go in plaintext, format 1, for the machine
                // restoring them to seal under its own key.
                "instances" | "settings" => {
                    assert_eq!(src.len(), dst.len());
                    for (k, v) in &dst {
                        if table.name == "instances" || k == b"sink" {
                            assert_eq!(v[0], 1, "{}", String::from_utf8_lossy(k));
                        }
                    }
                }
                _ => assert_eq!(src, dst, "table {}", table.name),
            }
        }
    }
    drop(copy);
    assert!(contains(&bytes, b"s3cret") && contains(&bytes, b"sink-tok"));

    // Restored under another key, everything reads back sealed.
    let other = crate::secrets::DataKey::from_bytes([7; crate::secrets::KEY_LEN]);
    let into = dir.path().join("restored");
    std::fs::create_dir(&into).expect("mkdir");
    let inside = dir.path().join("plain.redb");
    std::fs::write(&inside, &bytes).expect("write");
    let checked = super::check_backup(&inside, &other, &into, &[]).expect("a sound backup");
    assert_eq!(checked.restored, super::Restored { instances: 1, tasks: 1 });
    checked.install(&into).expect("install");
    let file = std::fs::read(into.join(FILE_NAME)).expect("read");
    for secret in [&b"s3cret"[..], b"sink-tok", b":pw@"] {
        assert!(!contains(&file, secret), "{}", String::from_utf8_lossy(secret));
    }
    let restored = Store::open_with_key(&into, other).expect("opens with the new key");
    assert_eq!(
        restored.load_tasks().expect("load").0,
        vec![(TaskKey::new("a", "g"), full_task(3))]
    );
    assert_eq!(restored.verify_token(&plain).expect("verify"), Some(info));
    assert_eq!(restored.list_instances().expect("list"), vec![instance("a")]);
    assert_eq!(restored.get_settings("sink").expect("sink"), Some(sink));
    assert_eq!(restored.session_count().expect("sessions"), 0);
}

#[test]
fn a_damaged_backup_is_refused_before_anything_is_written() {
    let (dir, store) = temp_store();
    store.put_instance(&instance("a")).expect("instance");
    let mut bytes = store.backup_bytes().expect("backup");
    let into = dir.path().join("restored");
    std::fs::create_dir(&into).expect("mkdir");
    let plain = dir.path().join("plain.redb");
    std::fs::write(&plain, b"not redb at all").expect("write");
    assert!(super::check_backup(&plain, &test_key(), &into, &[]).is_err());
    let mid = bytes.len() / 2;
    bytes.truncate(mid);
    std::fs::write(&plain, &bytes).expect("write");
    assert!(super::check_backup(&plain, &test_key(), &into, &[]).is_err());
    assert_eq!(std::fs::read_dir(&into).expect("ls").count(), 0, "nothing written");
}

#[test]
fn backup_while_writing_is_a_consistent_snapshot() {
    const KEYS: u32 = 25;
    let (dir, store) = temp_store();
    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| tables::task_key(&TaskKey::new(&format!("inst-{i}"), "g")).expect("key"))
        .collect();
    // One round rewrites every task AND a settings document with the same
    // number, in ONE transaction: a copy that mixes rounds, or tables from
    // different moments, shows up as more than one number.
    let write_round = move |store: &Store, round: u32| {
        let txn = store.db.begin_write().expect("begin");
        {
            let mut tasks = txn.open_table(TASKS.def).expect("tasks");
            let v = codec::encode("t", &task(round)).expect("encode");
            for k in &keys {
                tasks.insert(k.as_slice(), v.as_slice()).expect("insert");
            }
            let mut settings = txn.open_table(tables::SETTINGS.def).expect("settings");
            let doc = codec::encode("s", &serde_json::json!({ "round": round })).expect("encode");
            settings.insert(&b"round"[..], doc.as_slice()).expect("insert");
        }
        txn.commit().expect("commit");
    };
    write_round(&store, 0);

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU32::new(0));
    let writer = {
        let (store, stop, rounds) = (store.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let mut round = 1;
            while !stop.load(Ordering::Relaxed) {
                write_round(&store, round);
                rounds.store(round, Ordering::Relaxed);
                round += 1;
            }
        })
    };

    let mut seen = Vec::new();
    for n in 0..4 {
        // Let the writer make progress between backups.
        let before = rounds.load(Ordering::Relaxed);
        while rounds.load(Ordering::Relaxed) < before + 3 {
            assert!(!writer.is_finished(), "writer stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
        let out = dir.path().join(format!("backup-{n}"));
        std::fs::create_dir(&out).expect("mkdir");
        let bytes = store.backup_bytes().expect("backup while writing");
        std::fs::write(out.join(FILE_NAME), bytes).expect("write");

        let copy = Store::open(&out).expect("backup opens");
        let (tasks, bad) = copy.load_tasks().expect("load");
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(tasks.len(), KEYS as usize);
        let mut values: BTreeSet<u64> = tasks.iter().map(|(_, r)| u64::from(r.failures)).collect();
        let doc = copy.get_settings("round").expect("get").expect("settings copied");
        values.insert(doc["round"].as_u64().expect("round"));
        assert_eq!(values.len(), 1, "backup mixes rounds: {values:?}");
        seen.extend(values);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "each backup is later: {seen:?}");
    let last = rounds.load(Ordering::Relaxed);
    let (live, _) = store.load_tasks().expect("load");
    assert!(live.iter().all(|(_, r)| r.failures == last));
}

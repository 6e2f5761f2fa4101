//! Credentials at rest, against the running appliance: every configured
//! secret is sealed in `pollster.redb` (a grep of the file finds none), a
//! missing or wrong data key is exit 2 with the file untouched, and after
//! `pollster admin rotate-key` every instance still polls with its secret.

use crate::common;

use common::TestApp;
use common::auth_target::AuthTarget;
use reqwest::Method;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "tok-bearer-SECRET-1";
/// Every secret the test configures; none may be in the file.
const SECRETS: [&str; 7] = [
    TOKEN,
    "url-pass-SECRET-2",
    "basic-pass-SECRET-3",
    "pve-SECRET-4",
    "header-SECRET-5",
    "sink-hdr-SECRET-6",
    "sink-url-SECRET-7",
];

fn run(args: &[&str]) -> (i32, String) {
    common::run_pollster(args)
}

fn assert_no_secret_in(dir: &Path) {
    let bytes = std::fs::read(dir.join("pollster.redb")).expect("read the database");
    for s in SECRETS {
        assert!(
            !bytes.windows(s.len()).any(|w| w == s.as_bytes()),
            "{s} is in pollster.redb"
        );
    }
}

async fn create(app: &TestApp, target: &str) {
    let instances = [
        json!({"name": "tok", "type": "fast", "url": target, "auth": {"kind": "bearer", "token": TOKEN}}),
        json!({"name": "pw", "type": "fast", "url": "http://probe:url-pass-SECRET-2@127.0.0.1:9/", "enabled": false}),
        json!({"name": "basic", "type": "fast", "url": "http://127.0.0.1:9/", "enabled": false,
               "auth": {"kind": "basic", "username": "u", "password": "basic-pass-SECRET-3"}}),
        json!({"name": "pve", "type": "fast", "url": "http://127.0.0.1:9/", "enabled": false,
               "auth": {"kind": "pve_token", "user": "mon@pve", "token_id": "p", "secret": "pve-SECRET-4"}}),
        json!({"name": "hdr", "type": "fast", "url": "http://127.0.0.1:9/", "enabled": false,
               "auth": {"kind": "header", "name": "X-Key", "value": "header-SECRET-5"}}),
    ];
    for body in instances {
        let (status, answer) = app.send(Method::POST, "/api/instances", Some(body)).await;
        assert_eq!(status, 201, "{answer}");
    }
    let (status, answer) = app
        .send(
            Method::PUT,
            "/api/settings/sink",
            Some(json!({"url": "http://ship:sink-url-SECRET-7@127.0.0.1:9/",
                        "headers": {"Authorization": "Bearer sink-hdr-SECRET-6"}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_sealed_at_rest_refused_without_their_key_and_survive_a_key_rotation() {
    let target = AuthTarget::start(TOKEN).await;
    let app = TestApp::spawn(vec![]).await;
    create(&app, &target.url).await;
    target.wait_more_than(0, WAIT).await;
    let dir = app.keep_data_dir().await;
    let data = dir.path().to_path_buf();
    assert_no_secret_in(&data);
    let key_file = data.join("secret.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).expect("key file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "secret.key is private");
    }

    // A restart opens them again (and the file holds no secret after it).
    let seen = target.ok();
    let app = TestApp::spawn_in(dir, |_| {}).await;
    target.wait_more_than(seen, WAIT).await;
    let (_, listed) = app.send(Method::GET, "/api/instances/basic", None).await;
    assert_eq!(listed["auth"], json!({"kind": "basic", "username": "u"}), "{listed}");
    let dir = app.keep_data_dir().await;
    assert_no_secret_in(&data);

    // A missing key: exit 2 naming the file and the count; nothing written,
    // no key made.
    let config = data.join("pollster.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndata_dir = {:?}\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n",
            data.display().to_string()
        ),
    )
    .expect("config");
    let key = std::fs::read(&key_file).expect("key");
    let before = std::fs::read(data.join("pollster.redb")).expect("db");
    std::fs::remove_file(&key_file).expect("remove key");
    let (code, text) = run(&["serve", "--config", config.to_str().expect("utf-8")]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains(&key_file.display().to_string()), "{text}");
    assert!(text.contains("7 sealed"), "names the count: {text}");
    assert!(!key_file.exists(), "a new key was made over existing ciphertext");
    assert_eq!(
        std::fs::read(data.join("pollster.redb")).expect("db"),
        before,
        "the file changed"
    );

    // A wrong key: the same.
    std::fs::write(&key_file, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n").expect("wrong key");
    let (code, text) = run(&["serve", "--config", config.to_str().expect("utf-8")]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("does not open 7 of the 7 sealed"), "{text}");
    assert_eq!(
        std::fs::read(data.join("pollster.redb")).expect("db"),
        before,
        "the file changed"
    );
    std::fs::write(&key_file, &key).expect("key back");

    // Rotation: a new key, the old one kept, every instance still polls.
    let (code, text) = run(&["admin", "rotate-key", "--data-dir", data.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("re-sealed 6 record(s)"), "{text}");
    assert_eq!(std::fs::read(data.join("secret.key.old")).expect("old key"), key);
    assert_ne!(std::fs::read(&key_file).expect("new key"), key);
    assert_no_secret_in(&data);
    let seen = target.ok();
    let app = TestApp::spawn_in(dir, |_| {}).await;
    target.wait_more_than(seen, WAIT).await;
    let (_, sink) = app.send(Method::GET, "/api/settings/sink", None).await;
    assert_eq!(sink["sink"]["headers"]["Authorization"], "(hidden)", "{sink}");
    app.stop().await;
}

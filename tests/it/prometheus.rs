//! Prometheus as a real client: Debian's `prometheus` scrapes the running
//! appliance's `/metrics` (as the shipped README tells operators to, with
//! `honor_labels: true`), and its query API returns the poll metrics with
//! Pollster's own labels. Skipped when `prometheus` is not installed, except
//! under `CI=true`, where that fails.

use crate::common;

use common::{TestApp, free_port, valued_type};
use pollster::fleet::Behaviour;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn query(client: &reqwest::Client, base: &str, q: &str) -> Vec<Value> {
    let encoded: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
    let Ok(r) = client.get(format!("{base}/api/v1/query?query={encoded}")).send().await else {
        return Vec::new();
    };
    let body: Value = r.json().await.unwrap_or(Value::Null);
    body["data"]["result"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_and_stores_the_poll_metrics() {
    if Command::new("prometheus").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").is_err(),
            "prometheus is not installed (Debian package `prometheus`)"
        );
        eprintln!("skipping: prometheus is not installed");
        return;
    }
    let app = TestApp::spawn_with(
        vec![
            ("ok", Behaviour::Healthy),
            ("broken", Behaviour::ServerError),
            ("v", Behaviour::Healthy),
        ],
        &Default::default(),
        |c| {
            c.types.push(valued_type());
            c.instances[2].type_name = "valued".into();
        },
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: pollster\n    honor_labels: true\n    static_configs:\n      - targets: [\"{0}\"]\n\
             # The values of one instance, the way multi-target exporters are scraped.\n\
             \x20 - job_name: values\n    metrics_path: /values\n    honor_labels: true\n    params:\n      instance: [v]\n    static_configs:\n      - targets: [\"{0}\"]\n",
            app.metrics_addr
        ),
    )
    .expect("write config");
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let _prometheus = Prometheus(child);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let start = Instant::now();
    let (ok, errors) = loop {
        let ok = query(
            &client,
            &base,
            "pollster_monitor_poll_total{instance=\"ok\",result=\"success\"}",
        )
        .await;
        let errors = query(
            &client,
            &base,
            "pollster_monitor_poll_errors_total{instance=\"broken\",category=\"transient\"}",
        )
        .await;
        if !ok.is_empty() && !errors.is_empty() {
            break (ok, errors);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus never stored the poll metrics"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The values arrive with Pollster's instance and the rule's labels.
    let values = loop {
        let v = query(&client, &base, "fleet_up{job=\"values\"}").await;
        if !v.is_empty() {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus never stored the values"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(values.len(), 1, "{values:?}");
    assert_eq!(values[0]["metric"]["instance"], "v");
    assert_eq!(values[0]["metric"]["name"], "v");
    assert_eq!(values[0]["value"][1], "1");
    // Pollster's labels arrive as they are (honor_labels), with the job.
    let series = &ok[0]["metric"];
    assert_eq!(series["job"], "pollster", "{series}");
    assert_eq!(series["instance_type"], "fast", "{series}");
    assert_eq!(series["group"], "probe", "{series}");
    let polls: f64 = ok[0]["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(0.0);
    assert!(polls >= 1.0, "{ok:?}");
    assert!(!errors.is_empty());
    // The scrape is healthy.
    let up = query(&client, &base, "up{job=\"pollster\"}").await;
    assert_eq!(
        up.first().map(|u| u["value"][1].clone()),
        Some(Value::from("1")),
        "{up:?}"
    );
    app.stop().await;
}

//! One server per data directory (a real process): while a `pollster serve`
//! holds `<data_dir>/pollster.pid`, a second one on the same directory ends
//! at once with exit 2, naming the directory and the PID that holds it.

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

fn config(data: &Path, api: u16, metrics: u16) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{api}\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\ndata_dir = \"{}\"\n",
        data.display()
    )
}

fn write_config(dir: &Path, data: &Path, name: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, config(data, free_port(), free_port())).expect("write config");
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
    std::fs::write(&first, config(&data, api, metrics)).expect("write");
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
    assert!(start.elapsed() < Duration::from_secs(10), "refused at once");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&data.display().to_string()),
        "names the directory: {stderr}"
    );
    assert!(stderr.contains(&format!("PID {pid}")), "names the PID: {stderr}");
    drop(running);
}

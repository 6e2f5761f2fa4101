//! The log as a pipeline reads it: with `[log] format = "json"` (or
//! `--log-format json`) every line the real binary writes is one JSON
//! object with `timestamp`, `level`, `target` and `message` at the top
//! level and the event's fields beside them; a bad `[log]` or
//! `POLLSTER_LOG_*` is exit 2 naming the key.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::port::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_pollster");

/// A running binary whose stderr lines arrive on a channel; killed when
/// dropped.
struct Logging {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Logging {
    fn start(cmd: &mut Command) -> Logging {
        let mut child = cmd
            .env_remove("RUST_LOG")
            .env_remove("POLLSTER_LOG_FORMAT")
            .env_remove("POLLSTER_LOG_LEVEL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Logging {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Lines until one satisfies `done` or `within` passes; whether one did.
    fn read_until(&mut self, within: Duration, done: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = done(&line);
                    self.seen.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }
}

impl Drop for Logging {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every line is a JSON object with the top-level keys; the objects.
fn parsed(lines: &[String]) -> Vec<serde_json::Map<String, Value>> {
    assert!(!lines.is_empty(), "no log line at all");
    lines
        .iter()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            let o = v.as_object().unwrap_or_else(|| panic!("not an object: {line}")).clone();
            for key in ["timestamp", "level", "target", "message"] {
                assert!(o.contains_key(key), "no top-level `{key}`: {line}");
            }
            assert!(!o.contains_key("fields"), "the event's fields are nested: {line}");
            let ts = o["timestamp"].as_str().unwrap_or_default();
            assert!(
                ts.len() >= 20 && ts.as_bytes()[10] == b'T' && ts.ends_with('Z'),
                "timestamp is not RFC 3339 in UTC: {line}"
            );
            o
        })
        .collect()
}

#[test]
fn json_logs_are_one_object_a_line_with_the_instance_of_a_poll_error_at_the_top() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on: every poll of `down` fails to connect.
    let closed = free_port();
    let config = dir.path().join("pollster.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\nmetrics_listen = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n\n\
             [log]\nformat = \"json\"\nlevel = \"info,pollster::engine=debug\"\n\n\
             [[instances]]\nname = \"down\"\nurl = \"http://127.0.0.1:{closed}/\"\ntimeout = \"1s\"\n",
            free_port(),
            free_port(),
            dir.path().join("data").display()
        ),
    )
    .expect("config");
    let mut run = Logging::start(Command::new(BIN).arg("serve").arg("--config").arg(&config));
    let failed = run.read_until(Duration::from_secs(30), |l| l.contains("poll failed"));
    assert!(failed, "no poll error logged within 30 s:\n{}", run.seen.join("\n"));
    let objects = parsed(&run.seen);
    let poll_error = objects
        .iter()
        .find(|o| o["message"] == "poll failed")
        .expect("the poll error");
    assert_eq!(poll_error["instance"], "down", "{poll_error:?}");
    assert_eq!(poll_error["error_kind"], "connect", "{poll_error:?}");
    assert_eq!(poll_error["level"], "DEBUG");
}

#[test]
fn the_demo_logs_json_with_log_format_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, metrics) = (free_port(), free_port());
    let mut run = Logging::start(
        Command::new(BIN)
            .args(["demo", "--log-format", "json", "--data-dir"])
            .arg(dir.path().join("demo"))
            .args(["--listen", &format!("127.0.0.1:{api}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")]),
    );
    // The demo's fleet has failing and rate-limited members: wait for a
    // line about one of them, then take what came meanwhile.
    let about_an_instance = run.read_until(Duration::from_secs(60), |l| l.contains("\"instance\":"));
    assert!(
        about_an_instance,
        "no line about an instance within 60 s:\n{}",
        run.seen.join("\n")
    );
    // Ten more seconds of the demo's lines: every one is parsed.
    run.read_until(Duration::from_secs(10), |_| false);
    let objects = parsed(&run.seen);
    assert!(objects.iter().any(|o| o["level"] == "INFO"));
    // Only the members made to fail are dead-lettered: the presets'
    // instances (pve-lab, meraki-org with its calls below the API root)
    // answer every group.
    let dead: Vec<&serde_json::Map<String, Value>> = objects
        .iter()
        .filter(|o| o["message"] == "Routing task to dead-letter queue")
        .filter(|o| !["api-unauthorized", "api-500", "api-hung"].contains(&o["instance"].as_str().unwrap_or("")))
        .collect();
    assert!(dead.is_empty(), "dead-lettered: {dead:#?}");
}

fn check_config(dir: &Path, text: &str, env: &[(&str, &str)]) -> (i32, String) {
    let file = dir.join("pollster.toml");
    std::fs::write(&file, text).expect("config");
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&file)
        .env_remove("RUST_LOG")
        .env_remove("POLLSTER_LOG_FORMAT")
        .env_remove("POLLSTER_LOG_LEVEL")
        .envs(env.iter().copied())
        .output()
        .expect("check-config runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_log_format_or_level_exits_2_naming_the_key_and_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, err) = check_config(dir.path(), "[log]\nformat = \"xml\"\n", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("log.format") && err.contains("xml"), "{err}");

    let (code, err) = check_config(dir.path(), "[log]\nlevel = \"pollster=loud\"\n", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("log.level") && err.contains("pollster=loud"), "{err}");

    let (code, err) = check_config(dir.path(), "", &[("POLLSTER_LOG_FORMAT", "yaml")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("POLLSTER_LOG_FORMAT") && err.contains("yaml"), "{err}");

    let (code, err) = check_config(dir.path(), "", &[("POLLSTER_LOG_LEVEL", "info,pollster=loud")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("POLLSTER_LOG_LEVEL"), "{err}");

    let (code, err) = check_config(dir.path(), "[log]\nformat = \"json\"\nlevel = \"warn\"\n", &[]);
    assert_eq!(code, 0, "{err}");
}

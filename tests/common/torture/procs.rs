//! The processes the torture drives (`pollster serve`, `pollster-fleet`) and
//! its HTTP access to them: the appliance's API and the fleet's control API,
//! and a sampler of the fleet's request counts.

use super::Options;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One dead-letter entry as the API lists it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub(super) since: String,
    pub(super) next_run: String,
    pub(super) reason: String,
}

pub(super) type Key = (String, String);

pub(super) fn key_str(k: &Key) -> String {
    format!("{}/{}", k.0, k.1)
}

/// The fleet child process and its control API.
pub(super) struct FleetProc {
    pub(super) child: Child,
    pub(super) base: String,
}

impl FleetProc {
    pub(super) fn spawn(opts: &Options) -> Result<FleetProc, String> {
        let mut child = Command::new(&opts.fleet)
            .args(["--bind", "127.0.0.1:0", "--threads", "1"])
            .args(["--count", &opts.instances.to_string(), "--mix", &opts.mix])
            .args(["--flap-period", &ms(opts.flap_period)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", opts.fleet.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let mut lines = BufReader::new(stderr).lines();
        let base = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(a) = line.strip_prefix("listening on ") {
                        break a.trim().to_string();
                    }
                }
                _ => {
                    let status = child.wait();
                    return Err(format!("pollster-fleet exited before listening: {status:?}"));
                }
            }
        };
        // Keep draining so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        Ok(FleetProc { child, base })
    }
}

impl Drop for FleetProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `pollster serve` process.
pub(super) struct ServerProc {
    pub(super) child: Child,
    pub(super) started: Instant,
}

impl ServerProc {
    pub(super) fn start(opts: &Options, config: &Path, log: &Path, n: usize) -> Result<ServerProc, String> {
        let mut file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let _ = writeln!(file, "==== start {n}");
        let child = spawn_serve_logging(&opts.pollster, config, file)?;
        Ok(ServerProc {
            child,
            started: Instant::now(),
        })
    }

    /// SIGKILL (what `Child::kill` sends on Unix): no chance to flush.
    pub(super) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(super) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// HTTP access to the appliance's API and the fleet's control API.
#[derive(Clone)]
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    pub(super) api: String,
    pub(super) fleet: String,
    pub(super) token: String,
}

pub(super) const PER_PAGE: usize = 500;

impl Client {
    pub(super) async fn get_json(&self, url: &str, auth: bool) -> Result<Value, String> {
        let mut req = self.http.get(url);
        if auth {
            req = req.bearer_auth(&self.token);
        }
        let resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        resp.json().await.map_err(|e| format!("GET {url}: {e}"))
    }

    pub(super) async fn ready(&self) -> bool {
        matches!(self.http.get(format!("{}/readyz", self.api)).send().await, Ok(r) if r.status().is_success())
    }

    /// The whole dead-letter queue. Pages are read one by one, so the list
    /// is read again when its count changed in between.
    pub(super) async fn dead_letters(&self) -> Result<BTreeMap<Key, Entry>, String> {
        let mut last = BTreeMap::new();
        for _ in 0..5 {
            let mut out = BTreeMap::new();
            let mut count = None;
            let mut consistent = true;
            for page in 1.. {
                let url = format!(
                    "{}/api/monitoring/scheduler/dead-letter?page={page}&per_page={PER_PAGE}",
                    self.api
                );
                let v = self.get_json(&url, true).await?;
                let c = v["count"].as_u64().ok_or("dead-letter list without count")? as usize;
                if count.is_some_and(|x| x != c) {
                    consistent = false;
                }
                count = Some(c);
                let tasks = v["tasks"].as_array().ok_or("dead-letter list without tasks")?;
                for t in tasks {
                    let s = |f: &str| t[f].as_str().unwrap_or_default().to_string();
                    out.insert(
                        (s("instance"), s("group")),
                        Entry {
                            since: s("since"),
                            next_run: s("nextRun"),
                            reason: s("reason"),
                        },
                    );
                }
                if tasks.len() < PER_PAGE || page * PER_PAGE >= c {
                    break;
                }
            }
            if consistent && Some(out.len()) == count {
                return Ok(out);
            }
            last = out;
        }
        // Still changing: what was seen is still what was seen.
        Ok(last)
    }

    /// POST/DELETE an operator action; the status and the JSON answer.
    pub(super) async fn action(&self, retry: bool, k: &Key) -> Result<(u16, Value), String> {
        let base = format!("{}/api/monitoring/scheduler/dead-letter/{}/{}", self.api, k.0, k.1);
        let req = if retry {
            self.http.post(format!("{base}/retry"))
        } else {
            self.http.delete(base)
        };
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| format!("operator action on {}: {e}", key_str(k)))?;
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// Every instance's request count, in fleet order.
    pub(super) async fn fleet_hits(&self) -> Result<Vec<u64>, String> {
        #[derive(serde::Deserialize)]
        struct Hits {
            hits: u64,
        }
        #[derive(serde::Deserialize)]
        struct List {
            instances: Vec<Hits>,
        }
        let url = format!("{}/_control", self.fleet);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let list: List = resp.json().await.map_err(|e| format!("GET {url}: {e}"))?;
        Ok(list.instances.into_iter().map(|i| i.hits).collect())
    }

    /// Every fleet instance: behaviour kind and hits.
    pub(super) async fn fleet_instances(&self) -> Result<Vec<(String, String, u64)>, String> {
        let v = self.get_json(&format!("{}/_control", self.fleet), false).await?;
        let list = v["instances"].as_array().ok_or("fleet list without instances")?;
        Ok(list
            .iter()
            .map(|i| {
                (
                    i["name"].as_str().unwrap_or_default().to_string(),
                    i["behaviour"]["kind"].as_str().unwrap_or_default().to_string(),
                    i["hits"].as_u64().unwrap_or(0),
                )
            })
            .collect())
    }

    pub(super) async fn hits(&self, name: &str) -> Result<u64, String> {
        let v = self.get_json(&format!("{}/_control/{name}", self.fleet), false).await?;
        v["hits"].as_u64().ok_or_else(|| "fleet instance without hits".into())
    }

    pub(super) async fn flip(&self, name: &str, kind: &str) -> Result<(), String> {
        let url = format!("{}/_control/{name}", self.fleet);
        let resp = self
            .http
            .put(&url)
            .body(format!(r#"{{"kind":"{kind}"}}"#))
            .send()
            .await
            .map_err(|e| format!("PUT {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("PUT {url}: HTTP {}", resp.status()));
        }
        Ok(())
    }
}

/// What a [`Sampler`] saw: the fleet's request total over time, and when
/// each instance (in fleet order) was first polled after the base counts.
#[derive(Debug, Default)]
pub(super) struct Sampled {
    pub(super) totals: Vec<(Duration, u64)>,
    pub(super) first: Vec<Option<Duration>>,
}

/// Reads every instance's request count (`GET /_control`) every 50 ms
/// until stopped.
pub(super) struct Sampler {
    pub(super) state: Arc<Mutex<Sampled>>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Times are since `from`; first polls count from the hits in `base`.
    pub(super) fn start(client: Client, from: Instant, base: Vec<u64>) -> Sampler {
        let state = Arc::new(Mutex::new(Sampled {
            totals: Vec::new(),
            first: vec![None; base.len()],
        }));
        let out = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let sent = from.elapsed();
                if let Ok(hits) = client.fleet_hits().await {
                    // The counts were read somewhere between sending and
                    // receiving: take the middle.
                    let t = (sent + from.elapsed()) / 2;
                    let mut s = out.lock().unwrap_or_else(|e| e.into_inner());
                    for ((h, b), f) in hits.iter().zip(&base).zip(s.first.iter_mut()) {
                        if f.is_none() && h > b {
                            *f = Some(t);
                        }
                    }
                    s.totals.push((t, hits.iter().sum()));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Sampler { state, task }
    }

    pub(super) fn stop(self) -> Sampled {
        self.task.abort();
        std::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `pollster admin create-token` on a stopped server's config: the token.
pub(crate) fn create_token(pollster: &Path, config: &Path, name: &str) -> Result<String, String> {
    let out = Command::new(pollster)
        .args(["admin", "create-token", "--config", &config.to_string_lossy()])
        .args(["--name", name])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", pollster.display()))?;
    if !out.status.success() {
        return Err(format!("create-token failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `pollster serve --config CONFIG`, its log appended to `log` (the
/// change-event case of tests/it/crash.rs; the example has no use for it).
#[allow(dead_code)]
pub(crate) fn spawn_serve(pollster: &Path, config: &Path, log: &Path) -> Result<Child, String> {
    let file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    spawn_serve_logging(pollster, config, file)
}

fn spawn_serve_logging(pollster: &Path, config: &Path, log: File) -> Result<Child, String> {
    Command::new(pollster)
        .args(["serve", "--config", &config.to_string_lossy()])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", pollster.display()))
}

pub(super) fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

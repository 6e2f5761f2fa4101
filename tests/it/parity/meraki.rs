//! Exporter parity for the `meraki` preset: it gives the series the
//! Meraki dashboard exporter (`meraki-dashboard-exporter` 0.26.0, the
//! source of Pollster's budget scheduler) gives for the same organization.
//!
//! The fleet simulator's organization (`pollster::fleet::sim::meraki`) is
//! served over HTTP at the Dashboard API v1 paths, at a fixed tick, counting
//! every request and naming every path it has no answer for. Then:
//! 1. the exporter (`python -m meraki_dashboard_exporter` from a venv:
//!    `MERAKI_EXPORTER_PYTHON`, else `/opt/meraki-exporter-venv/bin/python`;
//!    absent: skipped with a reason, a failure when `CI=true`) runs in a
//!    clean working directory until its first collection of every tier is
//!    done, and is scraped once; its log has no error;
//! 2. the preset's rules run offline on the same bodies, and their series
//!    are compared with the exporter's;
//! 3. the real appliance runs in-process with a `meraki` instance pointed
//!    at the same organization; once it has polled every group, `GET
//!    /values?instance=…` is compared with the exporter's series.
//!
//! Compared: every `meraki_*` family the exporter gives, except those that
//! describe the exporter itself ([`SELF_FAMILIES`]: Pollster's own
//! `pollster_*` metrics stand for them) and those named in [`NOT_GIVEN`]
//! (each with its reason in docs/PARITY.md). Pollster's families that the
//! exporter does not give (or that are not compared) are the documented
//! superset.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use pollster::fleet::sim::{self, SimApi, meraki};
use pollster::model::{Auth, InstanceConfig, Secret};
use serde_json::Value;

use super::exposition::{self, App, Exposition, SeriesKey};

/// The simulation tick both pollers see: the Lyon appliance alerting.
const TICK: u64 = 95;
/// The exporter's answer for the simulated organization at [`TICK`],
/// recorded (`PARITY_RECORD=1` rewrites it from a live run).
const RECORDED: &str = "tests/fixtures/parity/meraki-dashboard-exporter-0.26.0.prom";
/// A dashboard API key: the exporter wants at least 30 characters.
const API_KEY: &str = "6bec40cf957de430a6f1f2baa056b99a4fac9ea0";
const INSTANCE: &str = "meraki-lab";

/// Families that describe the exporter itself, by prefix: Pollster gives
/// its own `pollster_*` metrics for its polls, budget and series instead.
const SELF_FAMILIES: &[&str] = &[
    "meraki_total_series",
    "meraki_collector_",
    "meraki_circuit_breaker_",
    "meraki_span_",
    "meraki_cardinality_",
    "meraki_exporter_",
    "meraki_api_",
];

/// Families the simulated organization makes the exporter give that the
/// preset does not give yet (or gives under the same name with other
/// labels); each is in docs/PARITY.md with its reason. The goal is an
/// empty list.
const NOT_GIVEN: &[&str] = &["meraki_org_licenses_expiring"];

// ---------------------------------------------------------------- upstream

struct Upstream {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    unauthorized: Arc<AtomicU64>,
    /// Paths (with query) the simulator had no answer for.
    unanswered: Arc<Mutex<BTreeSet<String>>>,
}

fn json(status: StatusCode, v: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8")
        .body(Body::from(v.to_string()))
        .expect("response")
}

/// The simulated organization over HTTP at the Dashboard API v1 paths,
/// answering only the API key (as a bearer token or in Meraki's header).
async fn serve_upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let requests = Arc::new(AtomicU64::new(0));
    let unauthorized = Arc::new(AtomicU64::new(0));
    let unanswered = Arc::new(Mutex::new(BTreeSet::new()));
    let (count, refused, missing) = (requests.clone(), unauthorized.clone(), unanswered.clone());
    // The task ends with the test's runtime.
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (count, refused, missing) = (count.clone(), refused.clone(), missing.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
                    let bearer = format!("Bearer {API_KEY}");
                    let authorized = header("authorization") == Some(bearer.as_str())
                        || header("x-cisco-meraki-api-key") == Some(API_KEY);
                    let (path, query) = (req.uri().path(), req.uri().query().unwrap_or_default());
                    let response = if !authorized {
                        refused.fetch_add(1, Ordering::SeqCst);
                        json(
                            StatusCode::UNAUTHORIZED,
                            &serde_json::json!({"errors": ["Invalid API key"]}),
                        )
                    } else {
                        match sim::answer(SimApi::Meraki, path, query, TICK) {
                            Some(v) => json(StatusCode::OK, &v),
                            None => {
                                missing.lock().expect("lock").insert(format!("{path}?{query}"));
                                json(StatusCode::NOT_FOUND, &serde_json::json!({"errors": ["Not found"]}))
                            }
                        }
                    };
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Upstream {
        addr,
        requests,
        unauthorized,
        unanswered,
    }
}

// ---------------------------------------------------------------- series

fn parse_exposition(text: &str) -> Exposition {
    exposition::parse_exposition(text, "meraki_")
}

/// Whether the exporter's family is compared.
fn compared(family: &str) -> bool {
    !SELF_FAMILIES.iter().any(|p| family.starts_with(p)) && !NOT_GIVEN.contains(&family)
}

/// The exporter's series that are compared.
fn compared_part(x: Exposition) -> Exposition {
    Exposition {
        heads: x.heads.into_iter().filter(|(f, _)| compared(f)).collect(),
        series: x.series.into_iter().filter(|(k, _)| compared(&k.0)).collect(),
    }
}

/// Every difference in the compared families; a series of a family the
/// exporter does not give (compared) is Pollster's own.
fn differences(exporter: &Exposition, ours: &Exposition) -> Vec<String> {
    let families: BTreeSet<&str> = exporter.heads.keys().map(String::as_str).collect();
    exposition::differences(exporter, ours, |key: &SeriesKey| {
        !families.contains(key.0.as_str()) || !compared(&key.0)
    })
}

/// The exporter's text without the families that describe itself (their
/// values change from run to run) and without its process and Python
/// metrics: what is recorded.
fn without_self(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let name = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line)
            .split(['{', ' '])
            .next()
            .unwrap_or_default();
        if name.starts_with("meraki_") && !SELF_FAMILIES.iter().any(|p| name.starts_with(p)) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn report(what: &str, exporter: &Exposition, diffs: &[String]) {
    exposition::report(what, "meraki-dashboard-exporter", exporter, diffs);
}

fn meraki_type() -> pollster::model::TypeDef {
    exposition::shipped_type("meraki")
}

/// The organization's body for a group path (below the organization's
/// base, query included) at [`TICK`].
fn body(path: &str) -> Option<Value> {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    sim::answer(SimApi::Meraki, path, query, TICK)
}

fn offline_exposition() -> String {
    exposition::offline_exposition(&meraki_type(), &body)
}

// ---------------------------------------------------------------- exporter

/// The exporter's Python, or why there is none.
fn exporter_python() -> Result<PathBuf, String> {
    let path = std::env::var_os("MERAKI_EXPORTER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/meraki-exporter-venv/bin/python"));
    if !path.is_file() {
        return Err(format!(
            "meraki-dashboard-exporter's venv not found at {} (set MERAKI_EXPORTER_PYTHON, or run .ci/run, which installs it with python3.13)",
            path.display()
        ));
    }
    let has_it = Command::new(&path)
        .args(["-c", "import meraki_dashboard_exporter"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_it {
        Ok(path)
    } else {
        Err(format!("{} has no meraki_dashboard_exporter module", path.display()))
    }
}

/// The exporter process; killed (by its own handle) when dropped.
struct Exporter {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("exporter.log")).unwrap_or_default()
    }
}

fn start_exporter(python: &PathBuf, upstream: &Upstream) -> Exporter {
    // A clean working directory: the exporter reads `.env` from it.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = std::fs::File::create(dir.path().join("exporter.log")).expect("log file");
    let port = super::common::free_port();
    let mut cmd = Command::new(python);
    cmd.args(["-m", "meraki_dashboard_exporter"])
        .current_dir(dir.path())
        .env(
            "MERAKI_EXPORTER_MERAKI__API_BASE_URL",
            format!("http://{}/api/v1", upstream.addr),
        )
        .env("MERAKI_EXPORTER_MERAKI__API_KEY", API_KEY)
        .env("MERAKI_EXPORTER_SERVER__HOST", "127.0.0.1")
        .env("MERAKI_EXPORTER_SERVER__PORT", port.to_string())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .stdout(log.try_clone().expect("log file"))
        .stderr(log);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", python.display()));
    Exporter { child, port, dir }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The exporter's `/metrics` once its first collection of every tier is
/// done: the upstream has seen no request for a while and the exporter
/// answers.
async fn scrape_exporter(exporter: &mut Exporter, upstream: &Upstream) -> String {
    let url = format!("http://127.0.0.1:{}/metrics", exporter.port);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = (u64::MAX, Instant::now());
    loop {
        if let Ok(Some(status)) = exporter.child.try_wait() {
            panic!("the exporter exited ({status}):\n{}", exporter.log());
        }
        assert!(
            Instant::now() < deadline,
            "the exporter never settled; its log:\n{}",
            exporter.log()
        );
        let n = upstream.requests.load(Ordering::SeqCst);
        if n != last.0 {
            last = (n, Instant::now());
        } else if n > 0 && last.1.elapsed() > Duration::from_secs(4) {
            if let Ok(r) = client().get(&url).send().await {
                if r.status().is_success() {
                    return r.text().await.expect("exporter text");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn the_meraki_preset_rules_give_the_recorded_exporter_answer() {
    let path = exposition::recorded_path(RECORDED);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let theirs = compared_part(parse_exposition(&text));
    assert!(
        theirs.heads.len() >= 25,
        "the recording has {} compared families",
        theirs.heads.len()
    );
    let offline = parse_exposition(&offline_exposition());
    let diffs = differences(&theirs, &offline);
    report("offline meraki rules vs the recorded exporter answer", &theirs, &diffs);
}

#[test]
fn not_given_families_are_exporter_families_the_recording_has() {
    let path = exposition::recorded_path(RECORDED);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let all = parse_exposition(&text);
    for family in NOT_GIVEN {
        assert!(
            all.heads.contains_key(*family),
            "{family} is listed as not given but the exporter does not give it for the simulated organization"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_meraki_preset_gives_what_meraki_dashboard_exporter_gives() {
    let python = match exporter_python() {
        Ok(p) => p,
        Err(why) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and {why}");
            println!("skipped: {why}");
            return;
        }
    };
    let upstream = serve_upstream().await;
    let mut exporter = start_exporter(&python, &upstream);
    let text = scrape_exporter(&mut exporter, &upstream).await;
    let per_run = upstream.requests.load(Ordering::SeqCst);
    let log = exporter.log();
    drop(exporter);
    let unanswered = upstream.unanswered.lock().expect("lock").clone();
    assert!(
        unanswered.is_empty(),
        "the simulated organization has no answer for calls the exporter makes: {unanswered:?}"
    );
    assert_eq!(
        upstream.unauthorized.load(Ordering::SeqCst),
        0,
        "the exporter's key was refused"
    );
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("level=error") || l.contains("level=warning") || l.contains("Traceback"))
        .collect();
    assert!(errors.is_empty(), "the exporter logged errors:\n{}", errors.join("\n"));
    let recorded = without_self(&text);
    exposition::check_recording(&recorded, RECORDED, "meraki_");
    let theirs = compared_part(parse_exposition(&recorded));
    assert!(
        !theirs.series.is_empty(),
        "the exporter gave no meraki_ series:\n{text}"
    );

    // The preset's rules, offline, on the same bodies.
    let offline = parse_exposition(&offline_exposition());
    let diffs = differences(&theirs, &offline);
    report("offline meraki rules", &theirs, &diffs);

    // The appliance, polling the same organization.
    let app = start_pollster(&upstream).await;
    let body = app
        .wait_for_values(INSTANCE, Duration::from_secs(240), |body| {
            differences(&theirs, &parse_exposition(body))
        })
        .await;
    report("/values", &theirs, &differences(&theirs, &parse_exposition(&body)));
    assert_eq!(
        upstream.unauthorized.load(Ordering::SeqCst),
        0,
        "Pollster's key was refused"
    );
    println!("the exporter's first collection made {per_run} API calls");
    app.stop().await;
}

// ---------------------------------------------------------------- appliance

async fn start_pollster(upstream: &Upstream) -> App {
    let url = format!("http://{}/api/v1/organizations/{}", upstream.addr, meraki::ORG_ID);
    let mut instance = InstanceConfig::new(INSTANCE, "meraki", &url);
    instance.auth = Auth::Bearer {
        token: Secret::new(API_KEY),
    };
    App::start(instance).await
}

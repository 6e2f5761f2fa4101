//! Exporter parity: the `pve` preset gives the series prometheus-pve-exporter
//! 3.10.2 gives (with `cluster=1&node=1`), proved against the real exporter.
//!
//! The fleet simulator's Proxmox VE cluster (`pollster::fleet::sim::pve`) is
//! served over HTTPS with API-token auth at the Proxmox paths, at a fixed
//! tick, counting every request. Then:
//! 1. the exporter (from a venv: `PVE_EXPORTER_BIN`, else
//!    `/opt/pve-exporter-venv/bin/pve_exporter`; absent: skipped with a
//!    reason, a failure when `CI=true`) is scraped once;
//! 2. the preset's rules run offline on the same bodies (what every group
//!    would get), and their series are compared with the exporter's;
//! 3. the real appliance runs in-process with a `pve` instance pointed at
//!    the same server; once it has polled every group, `GET
//!    /values?instance=lab` is compared with the exporter's series (its
//!    `instance` label and empty labels ignored on both sides);
//! 4. `/values` is scraped 200 times: the upstream request count moves only
//!    by Pollster's own schedule.
//!
//! Every difference is named (missing, extra, different value, different
//! HELP or TYPE). Pollster's node collectors cover every node, not only the
//! one the exporter talks to, so their series for other nodes are the
//! documented superset (docs/PARITY.md).
//!
//! The Meraki dashboard exporter's comparison is the module `meraki`
//! (tests/it/parity/meraki.rs); both share `exposition`.

use crate::common;
mod exposition;
mod meraki;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use exposition::{App, Exposition, SeriesKey};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use pollster::fleet::sim::{self, SimApi, pve};
use pollster::model::{Auth, InstanceConfig, Secret};
use serde_json::Value;

/// The simulation tick both pollers see.
const TICK: u64 = 42;
/// The exporter's answer for the simulated cluster at [`TICK`], recorded
/// (`PARITY_RECORD=1` rewrites it from a live run), so the rules are checked
/// against it even where the exporter is not installed; a live run checks
/// the recording is still what the exporter says.
const RECORDED: &str = "tests/fixtures/parity/pve-exporter-3.10.2.prom";
const USER: &str = "monitor@pve";
const TOKEN_ID: &str = "pollster";
const SECRET: &str = "3f1c9a52-7d0e-4b8f-9e61-parity";
const INSTANCE: &str = "lab";

/// Families of the exporter's node collectors: Pollster gives them for
/// every node; the exporter for the node it talks to.
const NODE_FAMILIES: &[&str] = &[
    "pve_subscription_info",
    "pve_subscription_status",
    "pve_subscription_next_due_timestamp_seconds",
    "pve_replication_info",
    "pve_replication_duration_seconds",
    "pve_replication_last_sync_timestamp_seconds",
    "pve_replication_last_try_timestamp_seconds",
    "pve_replication_next_sync_timestamp_seconds",
    "pve_replication_failed_syncs",
    "pve_onboot_status",
];

// ---------------------------------------------------------------- upstream

struct Upstream {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    unauthorized: Arc<AtomicU64>,
    /// SHA-256 of the certificate, hex.
    fingerprint: String,
}

fn upstream_answer(path: &str, query: &str) -> Response<Body> {
    let json = |status: StatusCode, v: &Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json;charset=UTF-8")
            .body(Body::from(v.to_string()))
            .expect("response")
    };
    match sim::answer(SimApi::Pve, path, query, TICK) {
        Some(v) => json(StatusCode::OK, &v),
        // A node that is down: Proxmox's proxy answers 595.
        None if path.starts_with("/api2/json/nodes/pve3/") => json(
            StatusCode::from_u16(595).expect("status"),
            &serde_json::json!({"data": null}),
        ),
        None => json(StatusCode::NOT_FOUND, &serde_json::json!({"data": null})),
    }
}

/// The simulated cluster over HTTPS at the Proxmox paths (no prefix: the
/// exporter cannot add one), answering only `PVEAPIToken` auth.
async fn serve_upstream() -> Upstream {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("certificate");
    let cert = key.cert.der().clone();
    let fingerprint = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(cert.as_ref()))
    };
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.signing_key.serialize_der()).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let requests = Arc::new(AtomicU64::new(0));
    let unauthorized = Arc::new(AtomicU64::new(0));
    let (count, refused) = (requests.clone(), unauthorized.clone());
    let expected_auth = format!("PVEAPIToken={USER}!{TOKEN_ID}={SECRET}");
    // The task ends with the test's runtime.
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, count, refused, expected_auth) =
                (acceptor.clone(), count.clone(), refused.clone(), expected_auth.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else { return };
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    let authorized = req
                        .headers()
                        .get(hyper::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        == Some(expected_auth.as_str());
                    let response = if authorized {
                        upstream_answer(req.uri().path(), req.uri().query().unwrap_or_default())
                    } else {
                        refused.fetch_add(1, Ordering::SeqCst);
                        Response::builder()
                            .status(StatusCode::UNAUTHORIZED)
                            .body(Body::from("{\"data\":null}"))
                            .expect("response")
                    };
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Upstream {
        addr,
        requests,
        unauthorized,
        fingerprint,
    }
}

fn other_node_series(key: &SeriesKey) -> bool {
    if !NODE_FAMILIES.contains(&key.0.as_str()) {
        return false;
    }
    let local = format!("node/{}", pve::LOCAL_NODE);
    if let Some(node) = key.1.get("node") {
        // pve_onboot_status: the guest's node.
        return node != pve::LOCAL_NODE;
    }
    match (key.1.get("id"), key.1.get("source")) {
        // Replication jobs belong to their source node.
        (_, Some(source)) => *source != local,
        (Some(id), None) if id.starts_with("node/") => *id != local,
        _ => false,
    }
}

// ---------------------------------------------------------------- exporter

/// The exporter's binary, or why there is none.
fn exporter_bin() -> Result<PathBuf, String> {
    let path = std::env::var_os("PVE_EXPORTER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/pve-exporter-venv/bin/pve_exporter"));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "prometheus-pve-exporter not found at {} (set PVE_EXPORTER_BIN, or run .ci/run to install it)",
            path.display()
        ))
    }
}

/// The exporter process; killed (by its own handle) when dropped.
struct Exporter {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_exporter(bin: &PathBuf) -> Exporter {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("pve.yml");
    std::fs::write(
        &config,
        format!("default:\n  user: {USER}\n  token_name: {TOKEN_ID}\n  token_value: {SECRET}\n  verify_ssl: false\n"),
    )
    .expect("exporter config");
    let port = common::free_port();
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        // The exporter reads a subscription's due date in its local time
        // zone; Pollster reads dates as UTC (docs/PARITY.md).
        .env("TZ", "UTC")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", bin.display()));
    Exporter { child, port, _dir: dir }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// One scrape of the exporter for the upstream, retried until it listens.
async fn scrape_exporter(exporter: &Exporter, upstream: &Upstream) -> String {
    let url = format!(
        "http://127.0.0.1:{}/pve?target=127.0.0.1:{}&cluster=1&node=1",
        exporter.port,
        upstream.addr.port()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client().get(&url).send().await {
            Ok(r) if r.status().is_success() => return r.text().await.expect("exporter text"),
            Ok(r) => {
                let status = r.status();
                panic!("the exporter answered {status}: {}", r.text().await.unwrap_or_default());
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "the exporter never answered on {url}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

// ---------------------------------------------------------------- offline

fn pve_type() -> pollster::model::TypeDef {
    exposition::shipped_type("pve")
}

/// The simulated cluster's body for a group path at [`TICK`].
fn body(path: &str) -> Option<Value> {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    sim::answer(SimApi::Pve, path, query, TICK)
}

fn learned_items(ty: &pollster::model::TypeDef) -> BTreeMap<String, Vec<String>> {
    exposition::learned_items(ty, &body)
}

fn offline_exposition() -> String {
    exposition::offline_exposition(&pve_type(), &body)
}

fn report(what: &str, exporter: &Exposition, diffs: &[String]) {
    exposition::report(what, "prometheus-pve-exporter", exporter, diffs);
}

fn check_recording(live: &str) {
    exposition::check_recording(live, RECORDED, "pve_");
}

fn parse_exposition(text: &str) -> Exposition {
    exposition::parse_exposition(text, "pve_")
}

fn differences(exporter: &Exposition, ours: &Exposition) -> Vec<String> {
    exposition::differences(exporter, ours, other_node_series)
}

fn recorded_path() -> std::path::PathBuf {
    exposition::recorded_path(RECORDED)
}

// ---------------------------------------------------------------- tests

#[test]
fn the_preset_rules_give_the_recorded_exporter_answer() {
    let path = recorded_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let theirs = parse_exposition(&text);
    let offline = parse_exposition(&offline_exposition());
    let diffs = differences(&theirs, &offline);
    report("offline rules vs the recorded exporter answer", &theirs, &diffs);
}

#[test]
fn the_parser_reads_labels_escapes_and_values() {
    let x = parse_exposition(
        "# HELP pve_up Node/VM/CT-Status is online/running\n# TYPE pve_up gauge\n\
         pve_up{id=\"node/pve1\"} 1.0\npve_up{instance=\"lab\",id=\"a\\\"b,c\",tags=\"\"} 0\n\
         pve_x 2.5e+09\nother 1\n",
    );
    assert_eq!(x.series.len(), 3);
    let key = |n: &str, l: &[(&str, &str)]| -> SeriesKey {
        (
            n.to_string(),
            l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        )
    };
    assert_eq!(x.series[&key("pve_up", &[("id", "node/pve1")])], 1.0);
    assert_eq!(x.series[&key("pve_up", &[("id", "a\"b,c")])], 0.0);
    assert_eq!(x.series[&key("pve_x", &[])], 2.5e9);
    assert_eq!(x.heads["pve_up"].1, "gauge");
}

#[test]
fn differences_are_named() {
    let exporter = parse_exposition(
        "# HELP pve_up Up\n# TYPE pve_up gauge\npve_up{id=\"a\"} 1\npve_up{id=\"b\"} 1\n\
         pve_not_backed_up_total{id=\"cluster/lab\"} 1\n",
    );
    let ours = parse_exposition(
        "# HELP pve_up Up!\n# TYPE pve_up gauge\npve_up{instance=\"lab\",id=\"a\"} 0\n\
         pve_up{instance=\"lab\",id=\"c\"} 1\npve_subscription_info{id=\"node/pve2\",level=\"c\"} 1\n",
    );
    let diffs = differences(&exporter, &ours);
    assert!(
        diffs.iter().any(|d| d.starts_with("different value: pve_up{id=\"a\"}")),
        "{diffs:?}"
    );
    assert!(
        diffs.iter().any(|d| d.starts_with("missing: pve_up{id=\"b\"}")),
        "{diffs:?}"
    );
    assert!(
        diffs.iter().any(|d| d.starts_with("extra: pve_up{id=\"c\"}")),
        "{diffs:?}"
    );
    assert!(
        diffs.iter().any(|d| d.starts_with("different HELP for pve_up")),
        "{diffs:?}"
    );
    assert!(
        diffs
            .iter()
            .any(|d| d.starts_with("missing: pve_not_backed_up_total{id=\"cluster/lab\"}")),
        "{diffs:?}"
    );
    assert_eq!(diffs.len(), 5, "another node's subscription is the superset: {diffs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pve_preset_gives_what_prometheus_pve_exporter_gives() {
    let bin = match exporter_bin() {
        Ok(bin) => bin,
        Err(why) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true and {why}");
            println!("skipped: {why}");
            return;
        }
    };
    let upstream = serve_upstream().await;
    let exporter = start_exporter(&bin);
    let before = upstream.requests.load(Ordering::SeqCst);
    let text = scrape_exporter(&exporter, &upstream).await;
    let per_scrape = upstream.requests.load(Ordering::SeqCst) - before;
    assert_eq!(
        upstream.unauthorized.load(Ordering::SeqCst),
        0,
        "the exporter's token was refused"
    );
    let theirs = parse_exposition(&text);
    assert!(!theirs.series.is_empty(), "the exporter gave no pve_ series:\n{text}");
    check_recording(&text);

    // The preset's rules, offline, on the same bodies.
    let offline = parse_exposition(&offline_exposition());
    let diffs = differences(&theirs, &offline);
    report("offline rules", &theirs, &diffs);

    // The appliance, polling the same server.
    let app = start_pollster(&upstream).await;
    let body = app
        .wait_for_values(INSTANCE, Duration::from_secs(240), |body| {
            differences(&theirs, &parse_exposition(body))
        })
        .await;
    let ours = parse_exposition(&body);
    report("/values", &theirs, &differences(&theirs, &ours));
    // The node collectors' superset: the other online node too.
    let pve2 = (
        "pve_subscription_info".to_string(),
        BTreeMap::from([
            ("id".to_string(), "node/pve2".to_string()),
            ("level".to_string(), "unknown".to_string()),
        ]),
    );
    assert_eq!(
        ours.series.get(&pve2),
        Some(&1.0),
        "the subscription fan-out covers pve2:\n{body}"
    );
    assert_eq!(
        upstream.unauthorized.load(Ordering::SeqCst),
        0,
        "Pollster's token was refused"
    );

    // 200 scrapes of /values: no upstream call of their own.
    let unknown = client()
        .get(format!("http://{}/values?instance=nope", app.metrics_addr))
        .send()
        .await
        .expect("GET /values?instance=nope");
    assert_eq!(unknown.status(), 404, "an unknown instance is 404");
    let before = upstream.requests.load(Ordering::SeqCst);
    let started = Instant::now();
    let c = client();
    let values_url = format!("http://{}/values?instance={INSTANCE}", app.metrics_addr);
    for _ in 0..200 {
        let r = c.get(&values_url).send().await.expect("GET /values");
        assert!(r.status().is_success());
        let _ = r.bytes().await;
    }
    let moved = upstream.requests.load(Ordering::SeqCst) - before;
    let took = started.elapsed();
    // Pollster's own schedule: no group is polled faster than its floor (30 s
    // at least), so within the scrapes at most each task runs about once.
    let ty = pve_type();
    let items = learned_items(&ty);
    // One call per group, per item for a fan-out.
    let tasks: u64 = ty
        .groups
        .iter()
        .map(|g| g.fan_out.as_ref().map_or(1, |f| items[f.as_str()].len() as u64))
        .sum();
    let schedule_bound = tasks * (1 + took.as_secs() / 30);
    println!(
        "200 scrapes of /values in {took:?}: {moved} upstream requests (schedule bound {schedule_bound}); \
         one exporter scrape costs {per_scrape}"
    );
    assert!(
        moved <= schedule_bound,
        "200 scrapes of /values moved the upstream count by {moved} (more than Pollster's schedule allows, {schedule_bound})"
    );
    assert!(per_scrape > 0, "the exporter calls the API on every scrape");
    app.stop().await;
}

// ---------------------------------------------------------------- appliance

async fn start_pollster(upstream: &Upstream) -> App {
    let mut instance = InstanceConfig::new(INSTANCE, "pve", &format!("https://{}", upstream.addr));
    instance.auth = Auth::PveToken {
        user: USER.into(),
        token_id: TOKEN_ID.into(),
        secret: Secret::new(SECRET),
    };
    instance.tls_fingerprint = Some(upstream.fingerprint.clone());
    App::start(instance).await
}

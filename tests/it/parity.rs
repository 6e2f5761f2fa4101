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

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use pollster::fleet::sim::{self, SimApi, pve};
use pollster::model::{Auth, InstanceConfig, Secret};
use pollster::poll::shape::{self, ItemNames};
use pollster::values::exposition::{write_head, write_sample};
use pollster::values::{Context, Extractor, Facts, Rule};
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

// ---------------------------------------------------------------- series

/// A series: metric name and its non-empty labels (sorted), `instance`
/// left out.
type SeriesKey = (String, BTreeMap<String, String>);

#[derive(Debug, Default)]
struct Exposition {
    /// Family → (help, type), for families with at least one sample.
    heads: BTreeMap<String, (String, String)>,
    series: BTreeMap<SeriesKey, f64>,
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses the text format, keeping metrics that start with `pve_`.
fn parse_exposition(text: &str) -> Exposition {
    let mut helps = BTreeMap::new();
    let mut types = BTreeMap::new();
    let mut x = Exposition::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            helps.insert(name.to_string(), unescape(help));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, ""));
            types.insert(name.to_string(), ty.to_string());
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, labels, value) = parse_sample(line).unwrap_or_else(|| panic!("malformed sample line: {line}"));
        if !name.starts_with("pve_") {
            continue;
        }
        x.heads.insert(
            name.clone(),
            (
                helps.get(&name).cloned().unwrap_or_default(),
                types.get(&name).cloned().unwrap_or_default(),
            ),
        );
        let labels = labels
            .into_iter()
            .filter(|(k, v)| k != "instance" && !v.is_empty())
            .collect();
        let previous = x.series.insert((name, labels), value);
        assert!(previous.is_none(), "a series appears twice: {line}");
    }
    x
}

fn parse_sample(line: &str) -> Option<(String, BTreeMap<String, String>, f64)> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(mut body) = rest.strip_prefix('{') {
        loop {
            body = body.trim_start_matches(',');
            if let Some(after) = body.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = body.split_once("=\"")?;
            // The value runs to the first quote that no backslash escapes.
            let mut escaped = false;
            let close = after.char_indices().find_map(|(i, c)| match (escaped, c) {
                (false, '\\') => {
                    escaped = true;
                    None
                }
                (false, '"') => Some(i),
                _ => {
                    escaped = false;
                    None
                }
            })?;
            labels.insert(key.trim().to_string(), unescape(&after[..close]));
            body = &after[close + 1..];
        }
    }
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

fn show(key: &SeriesKey) -> String {
    let labels: Vec<String> = key.1.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", key.0, labels.join(","))
}

fn same_value(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Whether a series Pollster gives and the exporter does not is the
/// documented superset: a node collector's series for another node.
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

/// Every difference between the exporter's series and Pollster's, named.
fn differences(exporter: &Exposition, ours: &Exposition) -> Vec<String> {
    let mut diffs = Vec::new();
    for (key, value) in &exporter.series {
        match ours.series.get(key) {
            None => diffs.push(format!("missing: {} {value}", show(key))),
            Some(v) if !same_value(*v, *value) => {
                diffs.push(format!("different value: {} exporter {value}, Pollster {v}", show(key)))
            }
            Some(_) => {}
        }
    }
    for key in ours.series.keys() {
        if !exporter.series.contains_key(key) && !other_node_series(key) {
            diffs.push(format!("extra: {} {}", show(key), ours.series[key]));
        }
    }
    for (family, head) in &exporter.heads {
        if let Some(ours_head) = ours.heads.get(family) {
            if ours_head.0 != head.0 {
                diffs.push(format!(
                    "different HELP for {family}: exporter {:?}, Pollster {:?}",
                    head.0, ours_head.0
                ));
            }
            if ours_head.1 != head.1 {
                diffs.push(format!(
                    "different TYPE for {family}: exporter {}, Pollster {}",
                    head.1, ours_head.1
                ));
            }
        }
    }
    diffs
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
    pollster::presets::all()
        .into_iter()
        .find(|t| t.name == "pve")
        .expect("the shipped pve type")
}

/// The items each `shape_from` group of `ty` learns from the simulated
/// cluster, by group.
fn learned_items(ty: &pollster::model::TypeDef) -> BTreeMap<String, Vec<String>> {
    let mut items = BTreeMap::new();
    for group in &ty.groups {
        let names = if group.item_fields.is_empty() {
            ItemNames::from(group.item_field.as_deref())
        } else {
            ItemNames::Fields(&group.item_fields)
        };
        if let (Some(pointer), Some(doc)) = (&group.shape_from, sim::answer(SimApi::Pve, &group.path, "", TICK)) {
            let shape = shape::shape_in(&doc, pointer, names).expect("the shape");
            items.insert(group.name.clone(), shape.items);
        }
    }
    items
}

/// The exposition the preset's rules give for the simulated cluster's
/// bodies at [`TICK`], as Pollster would serve them (no `instance`): the
/// shapes (fan-out items) and facts are read from the bodies first, as the
/// appliance learns them, then every group's rules run on its body (per
/// item for a fan-out).
fn offline_exposition() -> String {
    let ty = pve_type();
    let body = |path: &str| sim::answer(SimApi::Pve, path, "", TICK);
    let items = learned_items(&ty);
    let mut facts = Facts::new();
    for group in &ty.groups {
        if !group.facts.is_empty() {
            let doc = body(&group.path).expect("a fact group's body");
            for (name, pointer) in &group.facts {
                let v = doc.pointer(pointer).expect("the fact");
                let mut text = String::new();
                pollster::values::push_text(v, &mut text);
                facts.insert(name.clone(), text);
            }
        }
    }
    let mut rules_all: Vec<Rule> = Vec::new();
    let mut samples = Vec::new();
    for (g, group) in ty.groups.iter().enumerate() {
        if group.values.is_empty() {
            continue;
        }
        let rules = group
            .compile_values("pve", &format!("pve.groups[{g}]"))
            .expect("the preset's rules compile");
        let runs: Vec<Option<&str>> = match &group.fan_out {
            Some(source) => items[source.as_str()].iter().map(|i| Some(i.as_str())).collect(),
            None => vec![None],
        };
        let mut one = Extractor::new(group.max_series);
        for item in runs {
            let path = match item {
                Some(i) => shape::item_path(&group.path, i).expect("an item path"),
                None => group.path.clone(),
            };
            let Some(doc) = body(&path) else {
                continue; // the offline node: the fan-out item fails
            };
            let cx = Context {
                item,
                facts: Some(&facts),
                ..Context::default()
            };
            one.feed_in(&rules, &doc, cx);
        }
        let out = one.finish();
        assert!(!out.waiting_for_facts, "group {}: a fact is missing", group.name);
        samples.extend(out.samples);
        rules_all.extend(rules);
    }
    let mut out = String::new();
    let mut written = BTreeSet::new();
    for r in &rules_all {
        if !written.insert(r.metric.to_string()) {
            continue;
        }
        let mine: Vec<_> = samples.iter().filter(|s| s.metric == r.metric).collect();
        if mine.is_empty() {
            continue;
        }
        write_head(&mut out, &r.metric, &r.help, r.kind);
        for s in mine {
            write_sample(&mut out, &s.metric, None, &s.labels, s.value);
        }
    }
    out
}

fn report(what: &str, exporter: &Exposition, diffs: &[String]) {
    let families: BTreeSet<&str> = exporter.series.keys().map(|k| k.0.as_str()).collect();
    println!(
        "{what}: compared {} exporter series in {} families",
        exporter.series.len(),
        families.len()
    );
    assert!(
        diffs.is_empty(),
        "{what}: {} differences from prometheus-pve-exporter:\n  {}",
        diffs.len(),
        diffs.join("\n  ")
    );
}

fn recorded_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(RECORDED)
}

/// The live exporter's answer equals the recording, or it is rewritten
/// with `PARITY_RECORD=1`.
fn check_recording(live: &str) {
    let path = recorded_path();
    if std::env::var("PARITY_RECORD").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("fixture dir");
        std::fs::write(&path, live).expect("write the recording");
        println!("recorded the exporter's answer in {}", path.display());
        return;
    }
    let recorded = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (live, recorded) = (parse_exposition(live), parse_exposition(&recorded));
    let mut diffs = Vec::new();
    for (key, value) in &live.series {
        match recorded.series.get(key) {
            None => diffs.push(format!("not recorded: {} {value}", show(key))),
            Some(v) if !same_value(*v, *value) => diffs.push(format!("recorded {v}, live {value}: {}", show(key))),
            Some(_) => {}
        }
    }
    for key in recorded.series.keys().filter(|k| !live.series.contains_key(*k)) {
        diffs.push(format!("recorded but not given: {}", show(key)));
    }
    if live.heads != recorded.heads {
        diffs.push("HELP or TYPE lines differ".into());
    }
    assert!(
        diffs.is_empty(),
        "the exporter no longer gives {RECORDED} (rerun with PARITY_RECORD=1 if the simulator changed on purpose):\n  {}",
        diffs.join("\n  ")
    );
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
    let values_url = format!("http://{}/values?instance={INSTANCE}", app.metrics_addr);
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let r = client().get(&values_url).send().await.expect("GET /values");
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        if status.is_success() {
            let ours = parse_exposition(&body);
            let diffs = differences(&theirs, &ours);
            if diffs.is_empty() {
                report("/values", &theirs, &diffs);
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
                break;
            }
            if Instant::now() > deadline {
                panic!(
                    "/values never matched the exporter; {} differences:\n  {}\n/values was:\n{body}",
                    diffs.len(),
                    diffs.join("\n  ")
                );
            }
        } else if Instant::now() > deadline {
            panic!("GET /values?instance={INSTANCE}: {status}: {body}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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

struct App {
    metrics_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    _data_dir: tempfile::TempDir,
}

impl App {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            let _ = s.await;
        }
    }
}

async fn start_pollster(upstream: &Upstream) -> App {
    let data_dir = tempfile::tempdir().expect("tempdir");
    let mut c = pollster::config::load(None, &BTreeMap::new()).expect("default config loads");
    c.server.data_dir = data_dir.path().to_path_buf();
    let mut instance = InstanceConfig::new(INSTANCE, "pve", &format!("https://{}", upstream.addr));
    instance.auth = Auth::PveToken {
        user: USER.into(),
        token_id: TOKEN_ID.into(),
        secret: Secret::new(SECRET),
    };
    instance.tls_fingerprint = Some(upstream.fingerprint.clone());
    c.instances = vec![instance];
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let app = pollster::app::Application::build_with_listeners(c, api, metrics)
        .await
        .expect("app builds");
    let metrics_addr = app.metrics_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        app.run_until_stopped(async {
            let _ = rx.await;
        })
        .await
        .expect("server runs");
    });
    App {
        metrics_addr,
        stop: Some(tx),
        server: Some(server),
        _data_dir: data_dir,
    }
}

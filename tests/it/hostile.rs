//! The running appliance against hostile targets on loopback: one that never
//! answers, a 1 GB body (streamed, and declared up front), a body trickled a
//! byte at a time, a body that is not UTF-8 (for a plain group and for a
//! `shape_from` group), a certificate for another name, and a name that does
//! not resolve. Each must end up with the classification of SPEC §3 in the
//! health API, within its instance timeout, and none may hold a worker for
//! longer: with a small worker pool, a healthy instance polled alongside
//! keeps its cadence the whole time.
//!
//! `connections`: hostile clients of the appliance's own two listeners.

use crate::common;
mod connections;

use common::*;
use pollster::fleet::Behaviour;
use pollster::model::{GroupDef, InstanceConfig, TypeDef};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// Every hostile instance's timeout.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Every instance's `max_response_bytes`.
const LIMIT: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const WORKERS: usize = 4;
const WAIT: Duration = Duration::from_secs(20);

/// `{"nodes": [...]}` whose second name is not UTF-8: well-formed JSON in
/// every other respect, so only the bytes make it malformed.
const NOT_UTF8: &[u8] = b"{\"nodes\":[{\"name\":\"a\"},{\"name\":\"\xff\xfe\xc3\x28\"}]}";

/// A raw TCP server whose every connection runs `handle`; counts the body
/// bytes the handlers report writing. Stops (closing every connection) when
/// dropped.
struct Hostile {
    url: String,
    sent: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server on a loopback port whose every connection runs `handle`, with
/// the server's byte counter.
async fn hostile<F, Fut>(handle: F) -> Hostile
where
    F: Fn(tokio::net::TcpStream, Arc<AtomicU64>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    start(listener, url, handle)
}

fn start<F, Fut>(listener: TcpListener, url: String, handle: F) -> Hostile
where
    F: Fn(tokio::net::TcpStream, Arc<AtomicU64>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let sent = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let (s, r) = (sent.clone(), requests.clone());
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            r.fetch_add(1, Ordering::Relaxed);
            connections.spawn(handle(stream, s.clone()));
            // Reap finished connections; aborting this task drops the set,
            // which aborts (closes) the rest.
            while connections.try_join_next().is_some() {}
        }
    });
    Hostile {
        url,
        sent,
        requests,
        task,
    }
}

/// Read up to the end of the request head; `false` if the peer went away.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return false,
        }
    }
    true
}

/// A 200 whose body is 1 GiB of spaces inside `[` `]`, written 64 KiB at a
/// time for as long as the client reads; `declared` sends its length up
/// front, otherwise the body runs to the end of the connection.
async fn gigabyte<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, sent: Arc<AtomicU64>, declared: bool) {
    if !read_head(&mut stream).await {
        return;
    }
    let head = if declared {
        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {GIB}\r\n\r\n")
    } else {
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n".to_string()
    };
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    // `[`, spaces, `]`: a JSON array of exactly 1 GiB.
    let spaces = vec![b' '; 64 * 1024];
    let mut written = 0u64;
    while written < GIB {
        let piece: &[u8] = match GIB - written {
            _ if written == 0 => b"[",
            1 => b"]",
            left => &spaces[..left.saturating_sub(1).min(spaces.len() as u64) as usize],
        };
        if stream.write_all(piece).await.is_err() {
            return;
        }
        written += piece.len() as u64;
        sent.fetch_add(piece.len() as u64, Ordering::Relaxed);
    }
}

/// Headers at once, then a chunked body of one byte every 200 ms, forever.
async fn slowloris<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, sent: Arc<AtomicU64>) {
    if !read_head(&mut stream).await {
        return;
    }
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    loop {
        if stream.write_all(b"1\r\n \r\n").await.is_err() || stream.flush().await.is_err() {
            return;
        }
        sent.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A 200 with [`NOT_UTF8`], on every request of a keep-alive connection.
async fn not_utf8<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, sent: Arc<AtomicU64>) {
    while read_head(&mut stream).await {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            NOT_UTF8.len()
        );
        if stream.write_all(head.as_bytes()).await.is_err() || stream.write_all(NOT_UTF8).await.is_err() {
            return;
        }
        sent.fetch_add(NOT_UTF8.len() as u64, Ordering::Relaxed);
    }
}

/// HTTPS with a self-signed certificate for `other.example`, reached as
/// `127.0.0.1`: wrong issuer and wrong name. A handshake that got through
/// would be answered with a 200.
async fn wrong_certificate() -> Hostile {
    let key = rcgen::generate_simple_self_signed(vec!["other.example".into()]).expect("certificate");
    let cert = key.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.signing_key.serialize_der()).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://{}/", listener.local_addr().expect("addr"));
    start(listener, url, move |stream, sent| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(mut tls) = acceptor.accept(stream).await else {
                return;
            };
            if read_head(&mut tls).await
                && tls
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    .await
                    .is_ok()
            {
                sent.fetch_add(2, Ordering::Relaxed);
            }
        }
    })
}

fn hostile_instance(name: &str, type_name: &str, url: &str) -> InstanceConfig {
    InstanceConfig {
        timeout: TIMEOUT,
        max_response_bytes: LIMIT,
        ..InstanceConfig::new(name, type_name, url)
    }
}

/// The `shaped` type: one group that learns a shape from `/nodes`.
fn shaped_type() -> TypeDef {
    TypeDef {
        name: "shaped".into(),
        groups: vec![GroupDef {
            shape_from: Some("/nodes".into()),
            item_field: Some("name".into()),
            ..GroupDef::new("nodes", "", 1, Duration::from_millis(100))
        }],
    }
}

/// Records when the fleet's `healthy` instance is hit, every 10 ms.
fn watch_hits(app: &TestApp) -> (Arc<Mutex<Vec<Instant>>>, tokio::task::JoinHandle<()>) {
    let times = Arc::new(Mutex::new(Vec::new()));
    let fleet_url = app.fleet.base_url();
    let t = times.clone();
    let task = tokio::spawn(async move {
        let client = reqwest::Client::new();
        let mut last = 0;
        loop {
            let hits = match client.get(format!("{fleet_url}/_control/healthy")).send().await {
                Ok(r) => r.json::<Value>().await.ok().and_then(|v| v["hits"].as_u64()),
                Err(_) => None,
            };
            if let Some(hits) = hits
                && hits > last
            {
                last = hits;
                t.lock().expect("lock").push(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    (times, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_targets_are_classified_and_never_stall_a_worker() {
    let streamed = hostile(|s, sent| gigabyte(s, sent, false)).await;
    let declared = hostile(|s, sent| gigabyte(s, sent, true)).await;
    let trickle = hostile(slowloris).await;
    let binary = hostile(not_utf8).await;
    let tls = wrong_certificate().await;

    let started = Instant::now();
    let app = TestApp::spawn_with(
        vec![("healthy", Behaviour::Healthy), ("hung", Behaviour::Hung)],
        &BTreeMap::new(),
        |c| {
            c.monitoring_file.scheduler.workers = WORKERS;
            // Two failures in a row dead-letter a task, so every
            // classification shows in the dead-letter queue within a few
            // timeouts; rechecks every 1.5 s keep the targets busy.
            c.monitoring_file.failure.dead_letter_after = 2;
            c.types.push(shaped_type());
            for i in &mut c.instances {
                if i.name == "hung" {
                    i.timeout = TIMEOUT;
                }
            }
            c.instances.extend([
                hostile_instance("gigabyte", "fast", &streamed.url),
                hostile_instance("gigabyte-declared", "fast", &declared.url),
                hostile_instance("slowloris", "fast", &trickle.url),
                hostile_instance("binary", "fast", &binary.url),
                hostile_instance("binary-shaped", "shaped", &binary.url),
                hostile_instance("wrong-cert", "fast", &tls.url),
                hostile_instance("no-such-host", "fast", "http://pollster-hostile.invalid/"),
            ]);
        },
    )
    .await;
    let (hits, watcher) = watch_hits(&app);

    let expected: [(&str, &str, &[&str]); 7] = [
        ("hung", "transient", &["timeout"]),
        ("slowloris", "transient", &["timeout"]),
        ("gigabyte", "permanent", &["body"]),
        ("gigabyte-declared", "permanent", &["body"]),
        ("binary-shaped", "transient", &["body"]),
        ("wrong-cert", "permanent", &["tls"]),
        // A resolver that answers at once says the name does not exist;
        // one that cannot be reached fails the connection.
        ("no-such-host", "transient", &["dns", "connect"]),
    ];
    let h = app
        .wait_health(WAIT, "every hostile target in the dead-letter queue", |h| {
            expected.iter().all(|(name, ..)| dead_letter(h, name).is_some())
                && staleness(h, "binary").is_some_and(|s| s["lastSuccess"].is_string())
        })
        .await;
    let classified = started.elapsed();
    for (name, category, kinds) in expected {
        let d = dead_letter(&h, name).expect("entry");
        assert_eq!(d["category"], category, "{name}: {d}");
        assert!(
            d["kind"].as_str().is_some_and(|k| kinds.contains(&k)),
            "{name}: kind should be one of {kinds:?}: {d}"
        );
        let reason = if category == "permanent" {
            "permanent_failure"
        } else {
            "max_retry_attempts"
        };
        assert_eq!(d["reason"], reason, "{name}: {d}");
        assert_eq!(d["status"], Value::Null, "{name}: no HTTP status to report: {d}");
        assert!(
            d["lastError"]
                .as_str()
                .is_some_and(|m| !m.is_empty() && !m.contains('\n')),
            "{d}"
        );
    }
    let message = |name: &str| {
        dead_letter(&h, name)
            .and_then(|d| d["lastError"].as_str())
            .unwrap_or("")
            .to_string()
    };
    assert!(message("hung").contains("timed out after 1s"), "{}", message("hung"));
    assert!(
        message("slowloris").contains("timed out after 1s"),
        "{}",
        message("slowloris")
    );
    for name in ["gigabyte", "gigabyte-declared"] {
        assert!(
            message(name).contains(&format!("larger than {LIMIT} bytes")),
            "{}",
            message(name)
        );
    }
    assert!(
        message("binary-shaped").contains("not JSON"),
        "{}",
        message("binary-shaped")
    );

    // Bytes are bytes: the same body is a success for a plain group.
    assert!(dead_letter(&h, "binary").is_none(), "{h:#}");
    assert!(breaker(&h, "binary").is_none(), "{h:#}");
    assert!(binary.requests.load(Ordering::Relaxed) >= 1);

    // Two 1 s timeouts in a row (plus a backoff) for the slowest; nothing
    // waited on a gigabyte.
    assert!(classified < Duration::from_secs(10), "classified after {classified:?}");

    // Keep the hostile targets in flight (dead-letter rechecks) for ten
    // more polls of the healthy instance (about 2 s).
    let seen = hits.lock().expect("lock").len();
    let deadline = Instant::now() + WAIT;
    while hits.lock().expect("lock").len() < seen + 10 {
        assert!(Instant::now() < deadline, "the healthy instance stopped being polled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let h = app.health().await;
    assert!(
        h["queue"]["inFlight"].as_u64().is_some_and(|n| n <= WORKERS as u64),
        "{h:#}"
    );
    assert!(staleness(&h, "healthy").is_some_and(|s| s["lastSuccess"].is_string()));
    assert!(
        dead_letter(&h, "healthy").is_none() && breaker(&h, "healthy").is_none(),
        "{h:#}"
    );
    watcher.abort();
    let observed = started.elapsed();

    // The 1 GiB bodies were cut at the limit, not read: only what fits in
    // the socket buffers beyond the 1 MiB read, on each of a few requests.
    for (name, server) in [("gigabyte", &streamed), ("gigabyte-declared", &declared)] {
        let sent = server.sent.load(Ordering::Relaxed);
        let requests = server.requests.load(Ordering::Relaxed);
        assert!(requests >= 1, "{name}");
        assert!(
            sent < requests * 64 * LIMIT,
            "{name}: {sent} bytes sent over {requests} requests"
        );
        assert!(sent < GIB / 4, "{name}: {sent} bytes sent");
    }

    // The healthy instance (priority 1: every 200 ms) never waited for a
    // hostile poll to end: four workers, at most three targets that hold
    // one for a whole timeout.
    let times = hits.lock().expect("lock").clone();
    assert!(times.len() >= 2, "healthy polled {} times", times.len());
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let longest = gaps.iter().max().copied().unwrap_or_default();
    eprintln!(
        "classified in {classified:?}; healthy polled {} times in {observed:?}, longest gap {longest:?}; \
         1 GiB servers sent {} and {} bytes",
        times.len(),
        streamed.sent.load(Ordering::Relaxed),
        declared.sent.load(Ordering::Relaxed),
    );
    assert!(
        longest < TIMEOUT,
        "the healthy instance waited {longest:?} between polls (hostile timeout {TIMEOUT:?})"
    );
    let expected_polls = (observed.as_millis() / 400) as usize;
    assert!(
        times.len() >= expected_polls,
        "the healthy instance was polled {} times in {observed:?}",
        times.len()
    );
    app.stop().await;
}

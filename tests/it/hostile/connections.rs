//! Hostile clients of the appliance's own listeners: idle sockets reopened
//! as soon as the server closes them (on the metrics listener, and on the
//! UI/API listener until it is full), and a client that pipelines requests
//! and never reads. Each holds at most its per-client share and is closed
//! by the header or the write timeout; a scrape or an API request from
//! another address is answered within a bound the whole time, and the
//! refusals show in `pollster_http_connections_rejected_total`.
//!
//! The hostile clients come from 127.0.0.2 and up, the well-behaved ones
//! from 127.0.0.1 (every 127.0.0.0/8 address is usable as a source).

use crate::common::{TestApp, promtool};
use pollster::config::{Config, ConnectionTimeouts};
use pollster::fleet::Behaviour;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// What a well-behaved request must be answered within, under attack.
const ANSWERED: Duration = Duration::from_secs(5);
/// The test's write timeout (the product's is 10 s).
const WRITE: Duration = Duration::from_secs(1);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// A small UI/API listener (16 connections, 4 per client; the metrics
/// listener derives 4 per client of its 32) with short timeouts.
async fn limited(header: Duration) -> TestApp {
    TestApp::spawn_with(vec![("x", Behaviour::Healthy)], &BTreeMap::new(), |c: &mut Config| {
        c.server.max_connections = 16;
        c.server.max_connections_per_client = 4;
        c.server.connection_timeouts = ConnectionTimeouts { header, write: WRITE };
    })
    .await
}

/// A socket from `source` to `addr`; `recv_buffer` shrinks its receive
/// window (a reader that never reads then stalls the server sooner).
async fn connect_from(source: &str, addr: SocketAddr, recv_buffer: Option<u32>) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    if let Some(n) = recv_buffer {
        s.set_recv_buffer_size(n)?;
    }
    s.bind(SocketAddr::new(ip(source), 0))?;
    s.connect(addr).await
}

/// A client from `source` with no connection pool (each request opens its
/// own, as a fresh scrape does) and [`ANSWERED`] as its timeout.
fn client_from(source: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip(source))
        .pool_max_idle_per_host(0)
        .timeout(ANSWERED)
        .build()
        .expect("client")
}

/// `sockets` connections from `source` that send nothing and are reopened
/// as soon as the server closes them; stops when dropped.
struct Reopeners {
    opened: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Reopeners {
    fn start(source: &'static str, addr: SocketAddr, sockets: usize) -> Reopeners {
        let opened = Arc::new(AtomicU64::new(0));
        let tasks = (0..sockets)
            .map(|_| {
                let opened = opened.clone();
                tokio::spawn(async move {
                    loop {
                        match connect_from(source, addr, None).await {
                            Ok(mut s) => {
                                opened.fetch_add(1, Ordering::Relaxed);
                                let mut buf = [0u8; 256];
                                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                            }
                            // Out of ports for the moment.
                            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                        }
                    }
                })
            })
            .collect();
        Reopeners { opened, tasks }
    }

    /// Wait until every socket has been opened at least once (bounded).
    async fn connected(&self, sockets: u64) {
        let deadline = Instant::now() + ANSWERED;
        while self.opened.load(Ordering::Relaxed) < sockets {
            assert!(Instant::now() < deadline, "the hostile sockets did not connect");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Reopeners {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// `pollster_http_connections_rejected_total{listener, reason}` in `text`.
fn rejected_in(text: &str, listener: &str, reason: &str) -> u64 {
    let series = format!("pollster_http_connections_rejected_total{{listener=\"{listener}\",reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series}in the scrape"))
}

async fn scrape(app: &TestApp) -> String {
    let r = client_from("127.0.0.1")
        .get(format!("http://{}/metrics", app.metrics_addr))
        .send()
        .await
        .expect("scrape");
    assert_eq!(r.status().as_u16(), 200);
    r.text().await.expect("text")
}

/// Scrape until the counter reaches `at_least`; its value. Bounded by [`ANSWERED`].
async fn wait_rejected(app: &TestApp, listener: &str, reason: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + ANSWERED;
    loop {
        let n = rejected_in(&scrape(app).await, listener, reason);
        if n >= at_least || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `count` requests to `url` from 127.0.0.1, one after another, each on a
/// new connection: the slowest answer's time. Every one must be a 200
/// within [`ANSWERED`].
async fn answered(url: &str, token: Option<&str>, count: usize) -> Duration {
    let client = client_from("127.0.0.1");
    let mut slowest = Duration::ZERO;
    for i in 0..count {
        let started = Instant::now();
        let mut req = client.get(url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {} of {count} to {url} under attack: {e}", i + 1));
        assert_eq!(r.status().as_u16(), 200, "{url}");
        r.bytes().await.expect("body");
        slowest = slowest.max(started.elapsed());
    }
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_sockets_reopened_at_once_keep_no_scrape_out() {
    let app = limited(Duration::from_secs(1)).await;
    // More sockets than the metrics listener's 32 connections, from one
    // address: it holds its 4, the rest are refused and come straight back.
    let storm = Reopeners::start("127.0.0.2", app.metrics_addr, 40);
    storm.connected(40).await;
    let slowest = answered(&format!("http://{}/metrics", app.metrics_addr), None, 4).await;
    let opened = storm.opened.load(Ordering::Relaxed);
    let refused = wait_rejected(&app, "metrics", "per_client", 1).await;
    let idle = wait_rejected(&app, "metrics", "idle", 1).await;
    drop(storm);
    eprintln!(
        "metrics listener: 40 reopening sockets from 127.0.0.2 opened {opened} connections; \
         4 of 4 scrapes from 127.0.0.1 answered, the slowest in {slowest:?}; \
         per_client {refused}, idle {idle}"
    );
    assert!(refused > 0 && idle > 0, "per_client {refused}, idle {idle}");
    assert_eq!(rejected_in(&scrape(&app).await, "metrics", "full"), 0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_sockets_reopened_at_once_keep_no_api_request_out_and_a_full_listener_refuses_at_once() {
    // A header timeout longer than the waits below, so that a connection
    // closed within them was refused, not timed out.
    let app = limited(Duration::from_secs(3)).await;
    let health = app.url("/api/monitoring/scheduler/health");
    let storm = Reopeners::start("127.0.0.2", app.addr, 40);
    storm.connected(40).await;
    let slowest = answered(&health, Some(&app.token), 5).await;
    let per_client = wait_rejected(&app, "ui", "per_client", 1).await;
    assert!(per_client > 0);

    // Five addresses of four: more than the 16 the listener serves. A new
    // connection is closed at once instead of waiting in the backlog.
    let more: Vec<Reopeners> = ["127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"]
        .into_iter()
        .map(|a| Reopeners::start(a, app.addr, 4))
        .collect();
    for m in &more {
        m.connected(4).await;
    }
    let full = wait_rejected(&app, "ui", "full", 1).await;
    assert!(full > 0, "the listener never refused a connection as full");
    // A slot frees only when a held socket times out (every 3 s) and is
    // taken back at once, so nearly every probe is refused: closed long
    // before the header timeout.
    let mut refused_in = None;
    for _ in 0..5 {
        let mut probe = connect_from("127.0.0.1", app.addr, None).await.expect("connect");
        let started = Instant::now();
        let mut buf = [0u8; 16];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_secs(1), probe.read(&mut buf)).await {
            refused_in = Some(started.elapsed());
            break;
        }
    }
    drop(more);
    drop(storm);
    eprintln!(
        "UI listener (16 connections, 4 per client): 40 reopening sockets from 127.0.0.2; \
         5 of 5 API requests from 127.0.0.1 answered, the slowest in {slowest:?}; per_client {per_client}; \
         with 20 held from five addresses, a new connection closed after {refused_in:?} (full {full})"
    );
    let refused_in = refused_in.expect("a connection to the full listener was not closed at once");
    assert!(refused_in < Duration::from_secs(1), "{refused_in:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_pipelines_and_never_reads_is_closed_by_the_write_timeout() {
    let app = limited(Duration::from_secs(1)).await;
    let addr = app.metrics_addr;
    // 33 sockets from one address, each sending `GET /healthz` without end
    // and reading nothing: 4 are served (and stall), 29 are refused.
    const SOCKETS: usize = 33;
    let mut sockets = Vec::new();
    for _ in 0..SOCKETS {
        sockets.push(connect_from("127.0.0.2", addr, Some(4096)).await.expect("connect"));
    }
    let started = Instant::now();
    let requests = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = sockets
        .into_iter()
        .map(|mut s| {
            let requests = requests.clone();
            tokio::spawn(async move {
                let batch = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".repeat(100);
                // Ends when the server closes the connection.
                while s.write_all(&batch).await.is_ok() {
                    requests.fetch_add(100, Ordering::Relaxed);
                }
                started.elapsed()
            })
        })
        .collect();
    // The served four stall once every buffer between them and the server
    // is full: the requests sent stop growing. Then scrape from elsewhere.
    let deadline = Instant::now() + ANSWERED;
    let mut last = u64::MAX;
    loop {
        let now = requests.load(Ordering::Relaxed);
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stalled_at = started.elapsed();
    let slowest = answered(&format!("http://{addr}/metrics"), None, 4).await;
    // Every served one is closed once the server's buffers are full and a
    // write has waited the write timeout; how soon they fill depends on how
    // fast the server answers (a debug build, a shared machine), hence the
    // generous bound.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut closed = Vec::new();
    for w in writers {
        let at = tokio::time::timeout_at(deadline, w)
            .await
            .expect("a pipelining client that never reads held its connection")
            .expect("writer");
        closed.push(at);
    }
    closed.sort();
    let latest = closed.last().copied().unwrap_or_default();
    let write_timeouts = wait_rejected(&app, "metrics", "write_timeout", 4).await;
    let text = scrape(&app).await;
    let per_client = rejected_in(&text, "metrics", "per_client");
    eprintln!(
        "metrics listener: {SOCKETS} sockets from 127.0.0.2 pipelining GET /healthz, never reading: \
         {} requests sent, stalled after {stalled_at:?}, every socket closed by {latest:?} \
         (the last four at {:?}); per_client {per_client}, write_timeout {write_timeouts}; \
         4 of 4 scrapes from 127.0.0.1 answered meanwhile, the slowest in {slowest:?}",
        requests.load(Ordering::Relaxed),
        &closed[closed.len().saturating_sub(4)..],
    );
    assert_eq!(
        write_timeouts, 4,
        "the four served connections end by the write timeout"
    );
    assert_eq!(per_client, (SOCKETS - 4) as u64);
    assert!(
        latest >= WRITE,
        "every connection closed after {latest:?}, before the write timeout"
    );
    assert_eq!(
        rejected_in(&text, "ui", "write_timeout"),
        0,
        "the other listener's series"
    );
    promtool::check_metrics(&text);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_told_apart() {
    let app = limited(Duration::from_millis(500)).await;
    // Nothing sent; a request answered, then nothing; half a request head.
    let mut silent = connect_from("127.0.0.3", app.metrics_addr, None)
        .await
        .expect("connect");
    let mut kept = connect_from("127.0.0.3", app.metrics_addr, None)
        .await
        .expect("connect");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut half = connect_from("127.0.0.3", app.metrics_addr, None)
        .await
        .expect("connect");
    half.write_all(b"GET /metrics HTTP/1.1\r\nHo").await.expect("write");
    for s in [&mut silent, &mut kept, &mut half] {
        let mut buf = [0u8; 4096];
        let closed = tokio::time::timeout(ANSWERED, async {
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        })
        .await;
        assert!(closed.is_ok(), "a stalled connection was not closed");
    }
    assert_eq!(wait_rejected(&app, "metrics", "idle", 2).await, 2);
    assert_eq!(wait_rejected(&app, "metrics", "header_timeout", 1).await, 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_sends_nosniff_and_no_store() {
    let app = TestApp::spawn(vec![("x", Behaviour::Healthy)]).await;
    let client = client_from("127.0.0.1");
    for path in ["/metrics", "/values", "/healthz", "/no/such/path"] {
        let r = client
            .get(format!("http://{}{path}", app.metrics_addr))
            .send()
            .await
            .expect("get");
        let get = |k: &str| {
            r.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(get("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(get("cache-control"), "no-store", "{path}");
        if path != "/no/such/path" {
            assert_eq!(r.status().as_u16(), 200, "{path}");
        }
        if path == "/metrics" {
            assert!(r.text().await.expect("body").contains("pollster_"), "{path}");
        }
    }
    app.stop().await;
}

//! The sink against a real HTTP receiver on 127.0.0.1 (axum), which records
//! every request (gzip decoded) and fails on demand. Schedule timing is
//! covered by the fake-clock tests in `core.rs`; these use short real
//! buffering times and wait for conditions with a deadline.

use super::*;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::{HeaderMap as AxHeaders, StatusCode};
use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::net::SocketAddr;
use std::time::Instant;
use tokio::net::TcpListener;

// ---------------------------------------------------------------- receiver

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ok,
    Fail500,
    Fail400,
    /// Read the request, never answer.
    Hang,
}

#[derive(Debug, Clone)]
struct Received {
    /// The status answered; 0 for a request left hanging.
    status: u16,
    headers: AxHeaders,
    lines: Vec<String>,
    at: Instant,
}

#[derive(Debug)]
struct ReceiverState {
    mode: Mode,
    /// Modes for the next requests, before falling back to `mode`.
    script: VecDeque<Mode>,
    requests: Vec<Received>,
}

#[derive(Clone)]
struct Receiver {
    addr: SocketAddr,
    state: Arc<Mutex<ReceiverState>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let rx = Receiver {
            addr: listener.local_addr().expect("addr"),
            state: Arc::new(Mutex::new(ReceiverState {
                mode: Mode::Ok,
                script: VecDeque::new(),
                requests: Vec::new(),
            })),
        };
        let app = Router::new().fallback(receive).with_state(rx.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        rx
    }

    fn url(&self) -> String {
        format!("http://{}/ingest", self.addr)
    }

    fn set_mode(&self, mode: Mode) {
        lock(&self.state).mode = mode;
    }

    /// Answer the next requests with `modes`, then with the mode.
    fn script(&self, modes: &[Mode]) {
        lock(&self.state).script.extend(modes.iter().copied());
    }

    fn requests(&self) -> Vec<Received> {
        lock(&self.state).requests.clone()
    }

    /// Requests answered 200.
    fn delivered(&self) -> Vec<Received> {
        self.requests().into_iter().filter(|r| r.status == 200).collect()
    }

    /// The `n` of every event delivered, in arrival order.
    fn delivered_numbers(&self) -> Vec<u64> {
        self.delivered().iter().flat_map(|r| numbers(&r.lines)).collect()
    }
}

async fn receive(AxState(rx): AxState<Receiver>, headers: AxHeaders, body: Bytes) -> StatusCode {
    let gzip = headers.get("content-encoding").is_some_and(|v| v.as_bytes() == b"gzip");
    let text = if gzip {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_string(&mut s)
            .expect("a valid gzip body");
        s
    } else {
        String::from_utf8(body.to_vec()).expect("UTF-8 body")
    };
    let lines = text.split_inclusive('\n').map(String::from).collect();
    let mode = {
        let mut st = lock(&rx.state);
        let mode = st.script.pop_front().unwrap_or(st.mode);
        let status = match mode {
            Mode::Ok => 200,
            Mode::Fail500 => 500,
            Mode::Fail400 => 400,
            Mode::Hang => 0,
        };
        st.requests.push(Received {
            status,
            headers,
            lines,
            at: Instant::now(),
        });
        mode
    };
    match mode {
        Mode::Ok => StatusCode::OK,
        Mode::Fail500 => StatusCode::INTERNAL_SERVER_ERROR,
        Mode::Fail400 => StatusCode::BAD_REQUEST,
        Mode::Hang => std::future::pending().await,
    }
}

// ---------------------------------------------------------------- helpers

fn config(rx: &Receiver, batch_size: usize, buffering_ms: u64) -> SinkConfig {
    let mut c = SinkConfig::new(rx.url());
    c.batch_size = batch_size;
    c.buffering = Duration::from_millis(buffering_ms);
    c
}

/// Event number `n`, carried in an operator event's `target`.
fn ev(n: u64) -> Event {
    Event::operator(
        Timestamp(1_742_580_300_000),
        "tester",
        "instance.update",
        &n.to_string(),
    )
}

fn numbers(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            v["target"].as_str().expect("target").parse().expect("a number")
        })
        .collect()
}

fn upto(n: u64) -> Vec<u64> {
    (0..n).collect()
}

/// Wait until `cond` holds, up to 5 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn started(config: SinkConfig) -> (Sink, SinkMetrics) {
    let metrics = SinkMetrics::unregistered();
    let sink = Sink::new(Some(config), metrics.clone(), Arc::new(crate::model::SystemClock));
    sink.start();
    (sink, metrics)
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn batches_by_size_then_by_time() {
    let rx = Receiver::start().await;
    let (sink, metrics) = started(config(&rx, 3, 1000));
    let t0 = Instant::now();
    for n in 0..7 {
        sink.emit(&ev(n));
    }
    eventually("two full batches", || rx.delivered().len() >= 2).await;
    eventually("the last event", || rx.delivered().len() == 3).await;
    eventually("the sink to record it", || sink.status().counters.sent == 7).await;
    let reqs = rx.delivered();
    let sizes: Vec<usize> = reqs.iter().map(|r| r.lines.len()).collect();
    assert_eq!(sizes, [3, 3, 1]);
    assert!(reqs[1].at - t0 < Duration::from_millis(900), "full batches go at once");
    assert!(
        reqs[2].at - t0 >= Duration::from_millis(980),
        "the rest waits for the buffering time"
    );
    assert_eq!(rx.delivered_numbers(), upto(7));
    let st = sink.status();
    assert_eq!(st.counters.sent, 7);
    assert_eq!(st.batches, Batches { ok: 3, failed: 0 });
    assert_eq!(st.queue_depth, 0);
    assert_eq!(metrics.events("sent"), 7);
    assert_eq!(metrics.queue_depth.get(), 0);
    assert_eq!(rx.requests().len(), 3, "nothing else was sent");
}

#[tokio::test]
async fn batches_by_time() {
    let rx = Receiver::start().await;
    let (sink, _) = started(config(&rx, 1000, 50));
    sink.emit(&ev(0));
    sink.emit(&ev(1));
    eventually("a batch", || rx.delivered().len() == 1).await;
    sink.emit(&ev(2));
    eventually("a second batch", || rx.delivered().len() == 2).await;
    let sizes: Vec<usize> = rx.delivered().iter().map(|r| r.lines.len()).collect();
    assert_eq!(sizes, [2, 1]);
    assert_eq!(rx.delivered_numbers(), upto(3));
}

#[tokio::test]
async fn a_failed_batch_is_retried_as_it_was_and_nothing_is_duplicated() {
    let rx = Receiver::start().await;
    rx.script(&[Mode::Fail500]);
    let (sink, metrics) = started(config(&rx, 4, 20));
    for n in 0..10 {
        sink.emit(&ev(n));
    }
    eventually("every event", || rx.delivered_numbers().len() == 10).await;
    eventually("the sink to record it", || sink.status().counters.sent == 10).await;
    let reqs = rx.requests();
    assert_eq!(reqs[0].status, 500);
    assert_eq!(reqs[1].status, 200);
    assert_eq!(reqs[0].lines, reqs[1].lines, "retried as it was");
    assert_eq!(numbers(&reqs[0].lines), [0, 1, 2, 3]);
    assert_eq!(rx.delivered_numbers(), upto(10), "each once, in order");
    let st = sink.status();
    assert_eq!(st.counters.sent, 10);
    assert_eq!(st.batches, Batches { ok: 3, failed: 1 });
    assert_eq!(st.consecutive_failures, 0);
    assert_eq!(st.retry_wait_ms, 0);
    assert!(
        st.last_error.as_deref().is_some_and(|e| e.starts_with("HTTP 500")),
        "{st:?}"
    );
    assert!(st.last_failure_at.is_some() && st.last_success_at.is_some());
    assert_eq!(metrics.retry_wait.get(), 0.0);
    assert_eq!(metrics.events("sent"), 10);
}

#[tokio::test]
async fn a_hung_request_times_out_and_is_retried() {
    let rx = Receiver::start().await;
    rx.script(&[Mode::Hang]);
    let (sink, _) = started(config(&rx, 2, 20));
    sink.set_request_timeout(Duration::from_millis(200));
    sink.emit(&ev(0));
    sink.emit(&ev(1));
    eventually("the retry", || rx.delivered().len() == 1).await;
    eventually("the sink to record it", || sink.status().counters.sent == 2).await;
    assert_eq!(rx.delivered_numbers(), upto(2));
    let st = sink.status();
    assert_eq!(st.batches, Batches { ok: 1, failed: 1 });
    assert_eq!(st.last_error.as_deref(), Some("timed out after 200ms"));
}

#[tokio::test]
async fn a_rejected_batch_is_dropped_and_later_batches_flow() {
    let rx = Receiver::start().await;
    rx.script(&[Mode::Fail400]);
    let (sink, metrics) = started(config(&rx, 2, 20));
    for n in 0..6 {
        sink.emit(&ev(n));
    }
    eventually("the later batches", || rx.delivered_numbers().len() == 4).await;
    eventually("the sink to record it", || sink.status().counters.sent == 4).await;
    assert_eq!(rx.delivered_numbers(), [2, 3, 4, 5]);
    assert_eq!(rx.requests().len(), 3, "a rejected batch is not retried");
    let st = sink.status();
    assert_eq!(st.counters.rejected, 2);
    assert_eq!(st.counters.sent, 4);
    assert_eq!(st.batches, Batches { ok: 2, failed: 1 });
    assert_eq!(st.consecutive_failures, 0);
    assert!(
        st.last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("HTTP 400 Bad Request")),
        "{st:?}"
    );
    assert_eq!(metrics.events("rejected"), 2);
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest() {
    let rx = Receiver::start().await;
    let registry = prometheus::Registry::new();
    let metrics = SinkMetrics::register(&registry).expect("register");
    let mut c = config(&rx, 100, 200);
    c.queue_limit = 5;
    let sink = Sink::new(Some(c), metrics.clone(), Arc::new(crate::model::SystemClock));
    sink.start();
    for n in 0..8 {
        sink.emit(&ev(n));
    }
    assert_eq!(sink.status().counters.overflow, 3);
    eventually("the batch", || rx.delivered().len() == 1).await;
    eventually("the sink to record it", || sink.status().counters.sent == 5).await;
    assert_eq!(rx.delivered_numbers(), [3, 4, 5, 6, 7]);
    let text = exposition(&registry);
    assert!(
        text.contains("pollster_sink_events_total{outcome=\"overflow\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("pollster_sink_events_total{outcome=\"sent\"} 5"),
        "{text}"
    );
    assert!(text.contains("pollster_sink_queue_depth 0"), "{text}");
}

#[tokio::test]
async fn shutdown_flushes_what_is_queued() {
    let rx = Receiver::start().await;
    let (sink, _) = started(config(&rx, 4, 60_000));
    for n in 0..10 {
        sink.emit(&ev(n));
    }
    eventually("the two full batches", || rx.delivered().len() == 2).await;
    let t0 = Instant::now();
    sink.shutdown(Duration::from_secs(5)).await;
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(rx.delivered_numbers(), upto(10));
    let sizes: Vec<usize> = rx.delivered().iter().map(|r| r.lines.len()).collect();
    assert_eq!(sizes, [4, 4, 2]);
    // After shutdown the sink accepts nothing.
    sink.emit(&ev(10));
    let st = sink.status();
    assert!(!st.enabled);
    assert_eq!(st.queue_depth, 0);
    assert_eq!(st.counters.sent, 10);
    sink.shutdown(Duration::from_secs(5)).await; // a second call returns at once
}

#[tokio::test]
async fn shutdown_without_a_driver_still_flushes() {
    let rx = Receiver::start().await;
    let sink = Sink::new(
        Some(config(&rx, 2, 60_000)),
        SinkMetrics::unregistered(),
        Arc::new(crate::model::SystemClock),
    );
    for n in 0..5 {
        sink.emit(&ev(n));
    }
    sink.shutdown(Duration::from_secs(5)).await;
    assert_eq!(rx.delivered_numbers(), upto(5));
}

#[tokio::test]
async fn shutdown_stops_at_the_first_failure() {
    let rx = Receiver::start().await;
    rx.set_mode(Mode::Fail500);
    let (sink, metrics) = started(config(&rx, 2, 60_000));
    for n in 0..6 {
        sink.emit(&ev(n));
    }
    eventually("the first attempt", || rx.requests().len() == 1).await;
    eventually("the failure recorded", || sink.status().consecutive_failures == 1).await;
    assert_eq!(
        metrics.retry_wait.get(),
        60.0,
        "the first retry waits the buffering time"
    );
    let t0 = Instant::now();
    sink.shutdown(Duration::from_secs(5)).await;
    assert!(t0.elapsed() < Duration::from_secs(2));
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 2, "the pending batch once more, then stop");
    assert_eq!(numbers(&reqs[1].lines), [0, 1]);
    let st = sink.status();
    assert_eq!(st.counters.sent, 0);
    assert_eq!(st.queue_depth, 6);
}

#[tokio::test]
async fn shutdown_is_bounded_when_the_receiver_hangs() {
    let rx = Receiver::start().await;
    rx.set_mode(Mode::Hang);
    let (sink, _) = started(config(&rx, 1, 20));
    sink.emit(&ev(0));
    sink.emit(&ev(1));
    eventually("the hanging request", || rx.requests().len() == 1).await;
    let t0 = Instant::now();
    sink.shutdown(Duration::from_millis(300)).await;
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(250), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(sink.status().queue_depth, 2);
}

#[tokio::test]
async fn gzip_bodies_decode_to_the_same_lines() {
    let rx = Receiver::start().await;
    let mut c = config(&rx, 3, 20);
    c.gzip = true;
    let (sink, _) = started(c);
    let events: Vec<Event> = (0..3)
        .map(|n| {
            Event::operator(
                Timestamp(1_796_013_600_000 + n),
                "tester",
                "instance.create",
                &n.to_string(),
            )
        })
        .collect();
    for e in &events {
        sink.emit(e);
    }
    eventually("the batch", || rx.delivered().len() == 1).await;
    let req = &rx.delivered()[0];
    assert_eq!(req.headers["content-encoding"], "gzip");
    assert_eq!(req.headers["content-type"], "application/x-ndjson");
    let expected: Vec<String> = events.iter().map(Event::to_line).collect();
    assert_eq!(req.lines, expected);
    assert!(sink.status().gzip);
}

#[tokio::test]
async fn configured_headers_are_sent_and_never_shown() {
    let rx = Receiver::start().await;
    let mut c = config(&rx, 1, 20);
    c.headers = BTreeMap::from([
        ("Authorization".to_string(), "Bearer s3cret-token".to_string()),
        ("X-Tenant".to_string(), "tenant-9".to_string()),
    ]);
    let (sink, _) = started(c);
    sink.emit(&ev(0));
    eventually("the batch", || rx.delivered().len() == 1).await;
    let h = &rx.delivered()[0].headers;
    assert_eq!(h["authorization"], "Bearer s3cret-token");
    assert_eq!(h["x-tenant"], "tenant-9");
    assert_eq!(h["content-type"], "application/x-ndjson");
    assert!(h.get("content-encoding").is_none());
    assert!(h["user-agent"].to_str().is_ok_and(|ua| ua.starts_with("pollster/")));
    let st = sink.status();
    assert_eq!(st.headers, ["Authorization", "X-Tenant"]);
    let shown = format!("{} {sink:?}", serde_json::to_string(&st).expect("json"));
    assert!(!shown.contains("s3cret") && !shown.contains("tenant-9"), "{shown}");
}

#[tokio::test]
async fn status_reports_the_config() {
    let rx = Receiver::start().await;
    let mut c = config(&rx, 500, 2000);
    c.url = format!("http://user:hunter2@{}/ingest", rx.addr);
    let sink = Sink::new(
        Some(c),
        SinkMetrics::unregistered(),
        Arc::new(crate::model::SystemClock),
    );
    let v = serde_json::to_value(sink.status()).expect("json");
    assert_eq!(v["enabled"], true);
    assert_eq!(v["url"], format!("http://user:***@{}/ingest", rx.addr));
    assert_eq!(v["batch_size"], 500);
    assert_eq!(v["buffering"], "2s");
    assert_eq!(v["retry_limit"], "10m");
    assert_eq!(v["queue_limit"], 100_000);
    assert_eq!(v["gzip"], false);
    assert_eq!(v["next_attempt_at"], serde_json::Value::Null);
    assert_eq!(
        v["counters"],
        serde_json::json!({"sent": 0, "dropped_batch": 0, "dropped_queue": 0, "overflow": 0, "rejected": 0})
    );
    assert_eq!(v["batches"], serde_json::json!({"ok": 0, "failed": 0}));
    let off = serde_json::to_value(Sink::disabled().status()).expect("json");
    assert_eq!(off["enabled"], false);
    assert_eq!(off["url"], serde_json::Value::Null);
}

#[tokio::test]
async fn send_test_posts_one_event_at_once() {
    let rx = Receiver::start().await;
    let (sink, _) = started(config(&rx, 1000, 60_000));
    sink.send_test("admin").await.expect("delivered");
    let reqs = rx.delivered();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].lines.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&reqs[0].lines[0]).expect("json");
    assert_eq!(v["kind"], "test");
    assert_eq!(v["actor"], "admin");
    assert_eq!(sink.status().counters, Counters::default(), "outside the queue");

    rx.set_mode(Mode::Fail500);
    let err = sink.send_test("admin").await.expect_err("a 500").to_string();
    assert!(err.starts_with("HTTP 500"), "{err}");
    rx.set_mode(Mode::Fail400);
    let err = sink.send_test("admin").await.expect_err("a 400").to_string();
    assert!(err.starts_with("HTTP 400"), "{err}");
    assert_eq!(sink.status().batches, Batches::default());

    let err = Sink::disabled().send_test("admin").await.expect_err("disabled");
    assert_eq!(err, SendError::Disabled);
    assert_eq!(err.to_string(), "the event sink is disabled");
    // Nothing listens on a port just freed.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/", closed.local_addr().expect("addr"));
    drop(closed);
    let nowhere = Sink::new(
        Some(SinkConfig::new(url)),
        SinkMetrics::unregistered(),
        Arc::new(crate::model::SystemClock),
    );
    let err = nowhere.send_test("admin").await.expect_err("refused").to_string();
    assert!(err.starts_with("connection failed"), "{err}");
}

#[tokio::test]
async fn reconfigure_moves_to_a_new_url_and_disables() {
    let a = Receiver::start().await;
    let b = Receiver::start().await;
    a.set_mode(Mode::Fail500);
    let (sink, _) = started(config(&a, 2, 20));
    sink.emit(&ev(0));
    sink.emit(&ev(1));
    eventually("a failure at the old URL", || sink.status().consecutive_failures >= 1).await;
    sink.reconfigure(Some(config(&b, 2, 20)));
    sink.emit(&ev(2));
    sink.emit(&ev(3));
    eventually("the events at the new URL", || b.delivered_numbers().len() == 4).await;
    assert_eq!(b.delivered_numbers(), upto(4), "the retried batch first, once");
    assert!(a.requests().iter().all(|r| numbers(&r.lines) == [0, 1]));
    assert_eq!(sink.status().url, Some(b.url()));
    eventually("the sink to record it", || sink.status().counters.sent == 4).await;

    // Disabled: emit is a no-op and the status says so.
    sink.reconfigure(None);
    sink.emit(&ev(99));
    let st = sink.status();
    assert!(!st.enabled);
    assert_eq!((st.url, st.queue_depth), (None, 0));

    // Enabled again, with a smaller batch: events flow.
    sink.reconfigure(Some(config(&b, 1, 20)));
    sink.emit(&ev(4));
    eventually("the event after re-enabling", || b.delivered_numbers().len() == 5).await;
    assert_eq!(b.delivered_numbers(), upto(5));
}

#[tokio::test]
async fn disabling_drops_what_is_held() {
    let rx = Receiver::start().await;
    let metrics = SinkMetrics::unregistered();
    let sink = Sink::new(
        Some(config(&rx, 100, 60_000)),
        metrics.clone(),
        Arc::new(crate::model::SystemClock),
    );
    for n in 0..4 {
        sink.emit(&ev(n));
    }
    assert_eq!(metrics.queue_depth.get(), 4);
    sink.reconfigure(None);
    assert_eq!(sink.status().counters.dropped_queue, 4);
    assert_eq!(metrics.events("dropped_queue"), 4);
    assert_eq!(metrics.queue_depth.get(), 0);
}

fn exposition(registry: &prometheus::Registry) -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .expect("encode");
    String::from_utf8(buf).expect("utf-8")
}

#[test]
fn metrics_exist_from_the_start_with_help() {
    let registry = prometheus::Registry::new();
    let _m = SinkMetrics::register(&registry).expect("register");
    let text = exposition(&registry);
    for outcome in metrics::OUTCOMES {
        assert!(
            text.contains(&format!("pollster_sink_events_total{{outcome=\"{outcome}\"}} 0")),
            "{outcome}: {text}"
        );
    }
    for result in metrics::RESULTS {
        assert!(
            text.contains(&format!("pollster_sink_batches_total{{result=\"{result}\"}} 0")),
            "{result}: {text}"
        );
    }
    for name in [
        "pollster_sink_events_total",
        "pollster_sink_batches_total",
        "pollster_sink_queue_depth",
        "pollster_sink_retry_wait_seconds",
        "pollster_sink_outbox_depth",
    ] {
        assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
    }
    assert!(text.contains("pollster_sink_queue_depth 0"));
    assert!(text.contains("pollster_sink_retry_wait_seconds 0"));
    assert!(text.contains("pollster_sink_outbox_depth 0"));
    assert!(SinkMetrics::register(&registry).is_err(), "registered once");
}

#[test]
fn emit_on_a_disabled_sink_is_a_no_op() {
    let sink = Sink::disabled();
    sink.emit(&ev(0));
    let st = sink.status();
    assert_eq!((st.enabled, st.queue_depth), (false, 0));
}

// ---------------------------------------------------------------- outbox

/// A store in a temporary directory, with `n` change events (numbers
/// `from..from+n`) committed to its outbox; their ids.
fn outbox_store(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path()).expect("open")
}

fn commit_changes(store: &Store, range: std::ops::Range<u64>) -> Vec<String> {
    let rows: Vec<OutboxEvent> = range
        .map(|n| ev(n).to_outbox(&mut crate::model::random::seeded(1)))
        .collect();
    store.append_outbox(&rows).expect("append");
    rows.into_iter().map(|r| r.id).collect()
}

fn ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            v["id"].as_str().expect("an id").to_string()
        })
        .collect()
}

fn started_with_outbox(config: Option<SinkConfig>, store: &Store) -> (Sink, SinkMetrics) {
    let metrics = SinkMetrics::unregistered();
    let sink = Sink::new(config, metrics.clone(), Arc::new(crate::model::SystemClock));
    sink.attach_outbox(store.clone());
    sink.start();
    (sink, metrics)
}

#[tokio::test]
async fn outbox_rows_are_deleted_only_after_a_2xx_and_resent_with_the_same_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = outbox_store(&dir);
    let rx = Receiver::start().await;
    rx.set_mode(Mode::Fail500);
    // Buffering 500 ms: the retry after one failure waits that long, time
    // enough to see the failure and bring the receiver up.
    let (sink, metrics) = started_with_outbox(Some(config(&rx, 10, 500)), &store);
    let committed = commit_changes(&store, 0..3);
    eventually("a failed attempt", || !rx.requests().is_empty()).await;
    assert_eq!(store.outbox_len().expect("len"), 3, "nothing deleted without a 2xx");
    assert_eq!(metrics.outbox_depth.get(), 3);
    rx.set_mode(Mode::Ok);
    eventually("the delivery", || rx.delivered().len() == 1).await;
    eventually("the rows to go", || store.outbox_len().expect("len") == 0).await;
    let reqs = rx.requests();
    for r in &reqs {
        assert_eq!(ids(&r.lines), committed, "every attempt carries the same ids");
    }
    assert_eq!(rx.delivered_numbers(), upto(3));
    eventually("the gauge", || metrics.outbox_depth.get() == 0).await;
    assert_eq!(sink.status().counters.sent, 3);
    sink.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_rejected_batch_drops_its_poll_events_but_keeps_its_change_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = outbox_store(&dir);
    let rx = Receiver::start().await;
    rx.script(&[Mode::Fail400]);
    let (sink, metrics) = started_with_outbox(Some(config(&rx, 10, 50)), &store);
    let poll = Event::poll(
        Timestamp(1_742_580_300_000),
        event::PollEvent::success("a", "t", "g", Duration::ZERO, 200, false),
    );
    sink.emit(&poll);
    let committed = commit_changes(&store, 0..2);
    eventually("the redelivery", || rx.delivered().len() == 1).await;
    let reqs = rx.requests();
    assert_eq!(reqs[0].status, 400);
    assert_eq!(reqs[0].lines.len(), 3, "change events first, then the poll event");
    assert_eq!(ids(&reqs[0].lines[..2]), committed);
    assert_eq!(ids(&reqs[1].lines), committed, "only the change events again, same ids");
    eventually("the rows to go", || store.outbox_len().expect("len") == 0).await;
    let c = sink.status().counters;
    assert_eq!((c.rejected, c.sent), (1, 2));
    assert_eq!(metrics.events("rejected"), 1);
    sink.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn change_events_left_at_shutdown_go_out_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = outbox_store(&dir);
    let rx = Receiver::start().await;
    rx.set_mode(Mode::Fail500);
    let (sink, _) = started_with_outbox(Some(config(&rx, 10, 20)), &store);
    let committed = commit_changes(&store, 0..4);
    eventually("an attempt", || !rx.requests().is_empty()).await;
    sink.shutdown(Duration::from_millis(500)).await;
    assert_eq!(store.outbox_len().expect("len"), 4, "the rows outlive the sink");
    drop(sink);

    rx.set_mode(Mode::Ok);
    let (sink, metrics) = started_with_outbox(Some(config(&rx, 10, 20)), &store);
    eventually("the delivery after the restart", || rx.delivered().len() == 1).await;
    assert_eq!(ids(&rx.delivered()[0].lines), committed);
    eventually("the rows to go", || store.outbox_len().expect("len") == 0).await;
    eventually("the gauge", || metrics.outbox_depth.get() == 0).await;
    sink.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn the_outbox_is_read_in_pages_no_larger_than_the_queue_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = outbox_store(&dir);
    let committed = commit_changes(&store, 0..7);
    let rx = Receiver::start().await;
    let mut c = config(&rx, 10, 20);
    c.queue_limit = 3;
    let (sink, _) = started_with_outbox(Some(c), &store);
    eventually("every change event", || rx.delivered_numbers().len() == 7).await;
    assert_eq!(rx.delivered_numbers(), upto(7), "in commit order");
    assert!(
        rx.delivered().iter().all(|r| r.lines.len() <= 3),
        "at most a page per batch"
    );
    let got: Vec<String> = rx.delivered().iter().flat_map(|r| ids(&r.lines)).collect();
    assert_eq!(got, committed);
    eventually("the rows to go", || store.outbox_len().expect("len") == 0).await;
    sink.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn with_the_sink_off_nothing_is_staged_and_the_outbox_is_cleared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = outbox_store(&dir);
    commit_changes(&store, 0..2);
    let (sink, metrics) = started_with_outbox(None, &store);
    eventually("the outbox cleared", || store.outbox_len().expect("len") == 0).await;
    eventually("the count", || metrics.events("dropped_queue") == 2).await;
    // An operator action is staged for the audit trail alone; nothing else is.
    let audit_only = sink.stage(&ev(9)).expect("an audit row");
    assert!(!audit_only.deliver && audit_only.audit.is_some());
    store.append_outbox(&[audit_only]).expect("append");
    assert_eq!(store.outbox_len().expect("len"), 0, "not for the sink");
    assert_eq!(store.audit_len().expect("len"), 1);
    let breaker = Event::breaker(
        Timestamp(1_742_580_300_000),
        crate::sink::event::BreakerEvent {
            instance: "i".into(),
            type_name: "t".into(),
            group: "g".into(),
            from: crate::model::BreakerState::Closed,
            to: crate::model::BreakerState::Open,
            failures: 3,
            retry_at: None,
        },
    );
    assert!(sink.stage(&breaker).is_none());

    // Turned on, then off again: what it held is cleared and counted.
    let rx = Receiver::start().await;
    rx.set_mode(Mode::Fail500);
    sink.reconfigure(Some(config(&rx, 10, 20)));
    let row = sink.stage(&ev(5)).expect("staged while on");
    store.append_outbox(&[row]).expect("append");
    eventually("an attempt", || !rx.requests().is_empty()).await;
    sink.reconfigure(None);
    eventually("the outbox cleared again", || store.outbox_len().expect("len") == 0).await;
    eventually("the count", || metrics.events("dropped_queue") == 3).await;
    sink.shutdown(Duration::from_secs(1)).await;
}

//! Tests against real servers on 127.0.0.1 (plain TCP and tokio-rustls),
//! started by each test on port 0.

use super::*;
use crate::model::{KeptBodies, ShapeUpdate, TypeDef};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

// ---------------------------------------------------------------- fixtures

/// What a test server does with each request.
#[derive(Clone)]
enum Behaviour {
    /// Write these bytes as the response; close unless `keep_alive`.
    Respond { bytes: Vec<u8>, keep_alive: bool },
    /// Accept, read the request, never answer.
    Silent,
    /// Send headers for a large body, then one byte every 50 ms.
    Trickle,
    /// Answer by request path from a table (404 for unknown paths), after a
    /// delay, and close.
    Routes(Routes),
}

/// A path → response table that tests can change between polls, and the
/// most requests it has seen in flight at once.
#[derive(Clone, Default)]
struct Routes {
    table: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    delay: Duration,
    inflight: Arc<AtomicUsize>,
    max_inflight: Arc<AtomicUsize>,
}

impl Routes {
    fn new(delay: Duration) -> Self {
        Routes {
            delay,
            ..Routes::default()
        }
    }
    /// Answer `path` (as in the request line) with `status_line` and `body`.
    fn set(&self, path: &str, status_line: &str, body: &[u8]) {
        let bytes = response(status_line, &[("Connection", "close")], body);
        lock(&self.table).insert(path.into(), bytes);
    }
    /// Answer `path` with these raw response bytes.
    fn set_raw(&self, path: &str, bytes: Vec<u8>) {
        lock(&self.table).insert(path.into(), bytes);
    }
    fn answer(&self, head: &str) -> Vec<u8> {
        let path = head.split_whitespace().nth(1).unwrap_or_default();
        lock(&self.table)
            .get(path)
            .cloned()
            .unwrap_or_else(|| response("404 Not Found", &[("Connection", "close")], b""))
    }
}

struct Server {
    addr: SocketAddr,
    /// Request heads received, in order.
    requests: Arc<Mutex<Vec<String>>>,
    /// TCP connections accepted.
    connections: Arc<AtomicUsize>,
}

impl Server {
    fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}/", self.addr)
    }
    fn requests(&self) -> Vec<String> {
        lock(&self.requests).clone()
    }
}

fn response(status_line: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status_line}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

fn respond(bytes: Vec<u8>) -> Behaviour {
    Behaviour::Respond {
        bytes,
        keep_alive: false,
    }
}

async fn serve(behaviour: Behaviour) -> Server {
    serve_with(behaviour, None).await
}

async fn serve_tls(behaviour: Behaviour, acceptor: tokio_rustls::TlsAcceptor) -> Server {
    serve_with(behaviour, Some(acceptor)).await
}

async fn serve_with(behaviour: Behaviour, tls: Option<tokio_rustls::TlsAcceptor>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicUsize::new(0));
    let (reqs, conns) = (requests.clone(), connections.clone());
    // The task ends with the test's runtime.
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            conns.fetch_add(1, Ordering::SeqCst);
            let (behaviour, reqs, tls) = (behaviour.clone(), reqs.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    None => handle(stream, behaviour, reqs).await,
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            handle(stream, behaviour, reqs).await;
                        }
                    }
                }
            });
        }
    });
    Server {
        addr,
        requests,
        connections,
    }
}

async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if buf.len() > 64 * 1024 || stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, behaviour: Behaviour, reqs: Arc<Mutex<Vec<String>>>) {
    loop {
        let Some(head) = read_head(&mut stream).await else {
            return;
        };
        lock(&reqs).push(head.clone());
        match &behaviour {
            Behaviour::Respond { bytes, keep_alive } => {
                if stream.write_all(bytes).await.is_err() {
                    return;
                }
                let _ = stream.flush().await;
                if !keep_alive {
                    let _ = stream.shutdown().await;
                    return;
                }
            }
            Behaviour::Silent => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                return;
            }
            Behaviour::Routes(routes) => {
                let now = routes.inflight.fetch_add(1, Ordering::SeqCst) + 1;
                routes.max_inflight.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(routes.delay).await;
                let bytes = routes.answer(&head);
                routes.inflight.fetch_sub(1, Ordering::SeqCst);
                let _ = stream.write_all(&bytes).await;
                let _ = stream.flush().await;
                let _ = stream.shutdown().await;
                return;
            }
            Behaviour::Trickle => {
                let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n";
                if stream.write_all(head).await.is_err() {
                    return;
                }
                for _ in 0..600 {
                    if stream.write_all(b"x").await.is_err() || stream.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                return;
            }
        }
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn instance(url: String) -> InstanceConfig {
    InstanceConfig {
        timeout: Duration::from_secs(5),
        ..InstanceConfig::new("test", "http", &url)
    }
}

fn group(path: &str) -> GroupDef {
    let mut g = TypeDef::builtin_http().groups.remove(0);
    g.path = path.into();
    g
}

async fn poll_url(url: String) -> PollResult {
    Poller::new().unwrap().poll(&instance(url), &group(""), &[]).await
}

fn sha_prefix(body: &[u8]) -> u64 {
    digest_prefix(&Sha256::digest(body))
}

fn assert_err(result: &PollResult, category: ErrorCategory, kind: ErrorKind) -> PollError {
    match result {
        Ok(ok) => panic!("expected {category:?}/{kind:?}, got success {ok:?}"),
        Err(e) => {
            assert_eq!((e.category, e.kind), (category, kind), "error: {e:?}");
            assert!(
                !e.message.is_empty() && !e.message.contains('\n'),
                "message: {:?}",
                e.message
            );
            e.clone()
        }
    }
}

use ErrorCategory::{Permanent, Transient};

// ---------------------------------------------------------------- join_url

#[test]
fn join_url_single_slash() {
    let cases = [
        (
            "https://pve:8006/",
            "/api2/json/nodes",
            "https://pve:8006/api2/json/nodes",
        ),
        (
            "https://pve:8006",
            "api2/json/nodes",
            "https://pve:8006/api2/json/nodes",
        ),
        (
            "https://pve:8006/",
            "api2/json/nodes",
            "https://pve:8006/api2/json/nodes",
        ),
        (
            "https://pve:8006",
            "/api2/json/nodes",
            "https://pve:8006/api2/json/nodes",
        ),
        (
            "https://h/api/v1/",
            "/orgs/1/devices?perPage=5",
            "https://h/api/v1/orgs/1/devices?perPage=5",
        ),
        ("https://h/api/v1", "orgs", "https://h/api/v1/orgs"),
        ("http://h:8080/x//", "//y", "http://h:8080/x/y"),
    ];
    for (base, path, want) in cases {
        assert_eq!(join_url(base, path).unwrap().as_str(), want, "{base} + {path}");
    }
}

#[test]
fn join_url_empty_path_is_base() {
    assert_eq!(join_url("https://pve:8006/", "").unwrap().as_str(), "https://pve:8006/");
    assert_eq!(
        join_url("http://h/status?x=1", "").unwrap().as_str(),
        "http://h/status?x=1"
    );
}

#[test]
fn join_url_invalid() {
    for base in ["", "not a url", "pve:8006", "ftp://h/", "file:///etc/passwd", "http://"] {
        let e = join_url(base, "/x").unwrap_err();
        assert_eq!((e.category, e.kind), (Permanent, ErrorKind::InvalidUrl), "{base:?}");
    }
}

// ---------------------------------------------------------------- success

#[tokio::test]
async fn success_digest_and_size() {
    let body_a = br#"{"data":[1,2,3]}"#;
    let body_b = br#"{"data":[1,2,4]}"#;
    let a = serve(respond(response(
        "200 OK",
        &[("Content-Type", "application/json")],
        body_a,
    )))
    .await;
    let b = serve(respond(response("200 OK", &[], body_b))).await;
    let poller = Poller::new().unwrap();

    let first = poller
        .poll(&instance(a.url("http")), &group("/api"), &[])
        .await
        .unwrap();
    let second = poller
        .poll(&instance(a.url("http")), &group("/api"), &[])
        .await
        .unwrap();
    let other = poller
        .poll(&instance(b.url("http")), &group("/api"), &[])
        .await
        .unwrap();

    assert_eq!(first.status, 200);
    assert_eq!(first.body_bytes, body_a.len() as u64);
    assert_eq!(first.digest, sha_prefix(body_a));
    assert_eq!(first.digest, second.digest);
    assert_ne!(first.digest, other.digest);
    assert_eq!(other.digest, sha_prefix(body_b));

    let reqs = a.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[0].starts_with("GET /api HTTP/1.1\r\n"), "{}", reqs[0]);
    assert_eq!(header(&reqs[0], "accept"), Some("application/json, */*"));
    assert_eq!(header(&reqs[0], "user-agent"), Some(USER_AGENT));
    assert!(USER_AGENT.starts_with("pollster/"));
}

#[tokio::test]
async fn success_without_content_length_and_empty_body() {
    // Close-delimited body: no Content-Length, read until EOF.
    let s = serve(respond(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello world".to_vec(),
    ))
    .await;
    let ok = poll_url(s.url("http")).await.unwrap();
    assert_eq!(ok.body_bytes, 11);
    assert_eq!(ok.digest, sha_prefix(b"hello world"));

    let s = serve(respond(response("204 No Content", &[], b""))).await;
    let ok = poll_url(s.url("http")).await.unwrap();
    assert_eq!((ok.status, ok.body_bytes), (204, 0));
    assert_eq!(ok.digest, sha_prefix(b""));
}

#[tokio::test]
async fn keep_alive_connection_is_reused() {
    let s = serve(Behaviour::Respond {
        bytes: response("200 OK", &[], b"{}"),
        keep_alive: true,
    })
    .await;
    let poller = Poller::new().unwrap();
    for _ in 0..3 {
        poller.poll(&instance(s.url("http")), &group("/a"), &[]).await.unwrap();
    }
    assert_eq!(s.requests().len(), 3);
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- statuses

#[tokio::test]
async fn status_503_is_transient() {
    let s = serve(respond(response("503 Service Unavailable", &[], b"down"))).await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::Http);
    assert_eq!(e.status, Some(503));
    assert_eq!(e.message, "HTTP 503 Service Unavailable");
    assert_eq!(e.retry_after, None);

    let s = serve(respond(response(
        "503 Service Unavailable",
        &[("Retry-After", "12")],
        b"",
    )))
    .await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::Http);
    assert_eq!(e.retry_after, Some(Duration::from_secs(12)));
}

#[tokio::test]
async fn status_500_with_retry_after() {
    // Retry-After is honoured for 429 and 503 only; a 500 stays a plain
    // transient failure paced by backoff.
    let s = serve(respond(response(
        "500 Internal Server Error",
        &[("Retry-After", "5")],
        b"oops",
    )))
    .await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::Http);
    assert_eq!(e.status, Some(500));
    assert_eq!(e.retry_after, None);
    assert!(e.message.starts_with("HTTP 500"));
}

#[tokio::test]
async fn status_408_is_transient() {
    let s = serve(respond(response("408 Request Timeout", &[], b""))).await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::Http);
    assert_eq!(e.status, Some(408));
}

#[tokio::test]
async fn status_429_retry_after_seconds() {
    let s = serve(respond(response("429 Too Many Requests", &[("Retry-After", "7")], b""))).await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::RateLimited);
    assert_eq!(e.status, Some(429));
    assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
    assert!(e.is_rate_limited());
}

#[tokio::test]
async fn status_429_retry_after_http_date() {
    let at = httpdate::fmt_http_date(crate::model::SystemClock.now().to_system_time() + Duration::from_secs(30));
    let s = serve(respond(response("429 Too Many Requests", &[("Retry-After", &at)], b""))).await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::RateLimited);
    let wait = e.retry_after.expect("retry_after parsed from the date");
    assert!(
        wait >= Duration::from_secs(20) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );

    // Far future: capped at 60 s.
    let at = httpdate::fmt_http_date(crate::model::SystemClock.now().to_system_time() + Duration::from_secs(3600));
    let s = serve(respond(response("429 Too Many Requests", &[("Retry-After", &at)], b""))).await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::RateLimited);
    assert_eq!(e.retry_after, Some(Duration::from_secs(60)));

    // Without the header: none.
    let s = serve(respond(response("429 Too Many Requests", &[], b""))).await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::RateLimited);
    assert_eq!(e.retry_after, None);
}

#[tokio::test]
async fn client_errors_are_permanent() {
    for (line, code) in [
        ("401 Unauthorized", 401),
        ("403 Forbidden", 403),
        ("404 Not Found", 404),
        ("410 Gone", 410),
        ("418 I'm a teapot", 418),
    ] {
        let s = serve(respond(response(line, &[], b"{}"))).await;
        let e = assert_err(&poll_url(s.url("http")).await, Permanent, ErrorKind::Http);
        assert_eq!(e.status, Some(code));
        assert!(e.message.starts_with(&format!("HTTP {code}")), "{}", e.message);
        assert_eq!(
            e.message.contains("credentials"),
            matches!(code, 401 | 403),
            "{}",
            e.message
        );
        assert_eq!(e.retry_after, None);
    }
}

#[tokio::test]
async fn redirect_is_not_followed() {
    let target = serve(respond(response("200 OK", &[], b"{}"))).await;
    let location = format!("{}elsewhere", target.url("http"));
    let s = serve(respond(response("302 Found", &[("Location", &location)], b""))).await;
    let e = assert_err(&poll_url(s.url("http")).await, Permanent, ErrorKind::Http);
    assert_eq!(e.status, Some(302));
    assert!(e.message.contains(&location), "{}", e.message);
    assert_eq!(s.requests().len(), 1);
    assert!(target.requests().is_empty(), "redirect was followed");
}

// ---------------------------------------------------------------- transport

#[tokio::test]
async fn connection_refused_is_transient_connect() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let e = assert_err(
        &poll_url(format!("http://{addr}/")).await,
        Transient,
        ErrorKind::Connect,
    );
    assert_eq!(e.status, None);
}

#[tokio::test]
async fn silent_server_times_out() {
    let s = serve(Behaviour::Silent).await;
    let mut inst = instance(s.url("http"));
    inst.timeout = Duration::from_millis(200);
    let started = Instant::now();
    let result = Poller::new().unwrap().poll(&inst, &group(""), &[]).await;
    let elapsed = started.elapsed();
    let e = assert_err(&result, Transient, ErrorKind::Timeout);
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert!(e.message.contains("200ms"), "{}", e.message);
    assert_eq!(s.requests().len(), 1, "the request reached the server");
}

#[tokio::test]
async fn trickling_body_times_out() {
    let s = serve(Behaviour::Trickle).await;
    let mut inst = instance(s.url("http"));
    inst.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = Poller::new().unwrap().poll(&inst, &group(""), &[]).await;
    assert_err(&result, Transient, ErrorKind::Timeout);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn body_larger_than_limit_is_permanent() {
    let body = vec![b'a'; 2000];
    // With a Content-Length, and close-delimited (no length: read in chunks).
    let with_len = serve(respond(response("200 OK", &[], &body))).await;
    let mut raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
    raw.extend_from_slice(&body);
    let without_len = serve(respond(raw)).await;
    let poller = Poller::new().unwrap();
    for s in [&with_len, &without_len] {
        let mut inst = instance(s.url("http"));
        inst.max_response_bytes = 1000;
        let e = assert_err(&poller.poll(&inst, &group(""), &[]).await, Permanent, ErrorKind::Body);
        assert!(e.message.contains("larger than 1000 bytes"), "{}", e.message);
        // Exactly at the limit is fine.
        inst.max_response_bytes = 2000;
        let ok = poller.poll(&inst, &group(""), &[]).await.unwrap();
        assert_eq!(ok.body_bytes, 2000);
    }
}

#[tokio::test]
async fn unresolvable_host_is_transient() {
    let mut inst = instance("http://nonexistent.invalid/".into());
    inst.timeout = Duration::from_secs(5);
    let result = Poller::new().unwrap().poll(&inst, &group("/x"), &[]).await;
    let e = result.unwrap_err();
    assert_eq!(e.category, Transient, "{e:?}");
    assert!(matches!(e.kind, ErrorKind::Dns | ErrorKind::Connect), "{e:?}");
}

#[tokio::test]
async fn invalid_instance_url_is_permanent() {
    let e = assert_err(&poll_url("not a url".into()).await, Permanent, ErrorKind::InvalidUrl);
    assert_eq!(e.status, None);
}

// ---------------------------------------------------------------- auth

#[tokio::test]
async fn auth_headers_are_sent() {
    let s = serve(respond(response("200 OK", &[], b"{}"))).await;
    let poller = Poller::new().unwrap();
    let cases: Vec<(Auth, &str, &str)> = vec![
        (
            Auth::Bearer { token: "tok123".into() },
            "authorization",
            "Bearer tok123",
        ),
        (
            Auth::Header {
                name: "X-Cisco-Meraki-API-Key".into(),
                value: "k3y".into(),
            },
            "x-cisco-meraki-api-key",
            "k3y",
        ),
        (
            Auth::Basic {
                username: "user".into(),
                password: "pass".into(),
            },
            "authorization",
            "Basic dXNlcjpwYXNz",
        ),
        (
            Auth::PveToken {
                user: "root@pam".into(),
                token_id: "monitor".into(),
                secret: "aaaa-bbbb".into(),
            },
            "authorization",
            "PVEAPIToken=root@pam!monitor=aaaa-bbbb",
        ),
    ];
    for (i, (auth, name, value)) in cases.into_iter().enumerate() {
        let mut inst = instance(s.url("http"));
        inst.auth = auth;
        poller.poll(&inst, &group(""), &[]).await.unwrap();
        let reqs = s.requests();
        assert_eq!(header(&reqs[i], name), Some(value), "request: {}", reqs[i]);
    }
    // No auth: no Authorization header.
    poller.poll(&instance(s.url("http")), &group(""), &[]).await.unwrap();
    let reqs = s.requests();
    assert_eq!(header(&reqs[4], "authorization"), None);
}

#[tokio::test]
async fn invalid_header_values_are_invalid_credentials() {
    let s = serve(respond(response("200 OK", &[], b"{}"))).await;
    let poller = Poller::new().unwrap();
    let bad = [
        Auth::Bearer {
            token: "bad\r\nX-Injected: 1".into(),
        },
        Auth::Header {
            name: "X Bad Name".into(),
            value: "v".into(),
        },
        Auth::Header {
            name: "X-Key".into(),
            value: "line\nbreak".into(),
        },
        Auth::PveToken {
            user: "root@pam".into(),
            token_id: "t".into(),
            secret: "s\0".into(),
        },
    ];
    for auth in bad {
        let mut inst = instance(s.url("http"));
        inst.auth = auth.clone();
        let e = assert_err(
            &poller.poll(&inst, &group(""), &[]).await,
            Permanent,
            ErrorKind::InvalidCredentials,
        );
        assert!(
            !e.message.contains("bad") && !e.message.contains("line"),
            "secret leaked: {}",
            e.message
        );
    }
    assert!(s.requests().is_empty(), "no request is sent with bad credentials");
}

// ---------------------------------------------------------------- TLS

struct TlsFixture {
    server: Server,
    fingerprint: [u8; 32],
}

async fn tls_server() -> TlsFixture {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert_der = key.cert.der().clone();
    let fingerprint = tls::fingerprint_of(cert_der.as_ref());
    let key_der = rustls::pki_types::PrivateKeyDer::try_from(key.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der], key_der)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let server = serve_tls(respond(response("200 OK", &[], br#"{"tls":true}"#)), acceptor).await;
    TlsFixture { server, fingerprint }
}

#[tokio::test]
async fn tls_self_signed_fails_default_verification() {
    let f = tls_server().await;
    let e = assert_err(&poll_url(f.server.url("https")).await, Permanent, ErrorKind::Tls);
    assert_eq!(e.status, None);
    assert!(
        f.server.requests().is_empty(),
        "no request over an unverified connection"
    );
}

#[tokio::test]
async fn tls_pinned_fingerprint_succeeds_and_client_is_cached() {
    let f = tls_server().await;
    let poller = Poller::new().unwrap();
    let mut inst = instance(f.server.url("https"));
    // Lowercase without colons is accepted too.
    inst.tls_fingerprint = Some(hex::encode(f.fingerprint));
    let ok = poller.poll(&inst, &group("/api2/json/version"), &[]).await.unwrap();
    assert_eq!(ok.status, 200);
    assert_eq!(ok.digest, sha_prefix(br#"{"tls":true}"#));
    inst.tls_fingerprint = Some(tls::format_fingerprint(&f.fingerprint));
    poller.poll(&inst, &group(""), &[]).await.unwrap();
    assert_eq!(lock(&poller.pinned).len(), 1, "one client per fingerprint");
    assert_eq!(f.server.requests().len(), 2);
}

#[tokio::test]
async fn tls_wrong_fingerprint_names_presented_one() {
    let f = tls_server().await;
    let mut inst = instance(f.server.url("https"));
    inst.tls_fingerprint = Some(tls::format_fingerprint(&[0x11; 32]));
    let e = assert_err(
        &Poller::new().unwrap().poll(&inst, &group(""), &[]).await,
        Permanent,
        ErrorKind::Tls,
    );
    let presented = tls::format_fingerprint(&f.fingerprint);
    assert!(e.message.contains(&presented), "{}", e.message);
    // What the operator copies from the message pins the server.
    assert_eq!(parse_fingerprint(&presented), Some(f.fingerprint));
    assert!(f.server.requests().is_empty());
}

#[tokio::test]
async fn tls_invalid_fingerprint_is_permanent() {
    let f = tls_server().await;
    let mut inst = instance(f.server.url("https"));
    inst.tls_fingerprint = Some("zz".into());
    assert_err(
        &Poller::new().unwrap().poll(&inst, &group(""), &[]).await,
        Permanent,
        ErrorKind::Tls,
    );
}

#[tokio::test]
async fn tls_verify_false_accepts_self_signed() {
    let f = tls_server().await;
    let poller = Poller::new().unwrap();
    let mut inst = instance(f.server.url("https"));
    inst.tls_verify = false;
    let ok = poller.poll(&inst, &group(""), &[]).await.unwrap();
    assert_eq!(ok.status, 200);
    assert!(lock(&poller.insecure).is_some());
    assert_eq!(f.server.requests().len(), 1);
}

#[tokio::test]
async fn truncated_body_and_empty_reply_are_transient() {
    let s = serve(respond(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc".to_vec())).await;
    let e = poll_url(s.url("http")).await.unwrap_err();
    assert_eq!(e.category, Transient, "{e:?}");
    assert!(matches!(e.kind, ErrorKind::Body | ErrorKind::Connect), "{e:?}");

    // The server closes without answering.
    let s = serve(respond(Vec::new())).await;
    let e = assert_err(&poll_url(s.url("http")).await, Transient, ErrorKind::Connect);
    assert_eq!(e.status, None);
}

// ---------------------------------------------------------------- shape_from

fn shape_group(path: &str, pointer: &str, item_field: Option<&str>) -> GroupDef {
    let mut g = GroupDef::new("nodes", path, 1, Duration::from_secs(60));
    g.shape_from = Some(pointer.into());
    g.item_field = item_field.map(Into::into);
    g
}

#[test]
fn an_item_named_twice_is_kept_once_where_first_named() {
    let doc = serde_json::json!([
        {"serial": "A", "networkId": "N1"},
        {"serial": "B", "networkId": "N2"},
        {"serial": "C", "networkId": "N1"}
    ]);
    let shape = shape::shape_in(&doc, "", Some("networkId")).unwrap();
    assert_eq!((shape.count, shape.items), (3, items(&["N1", "N2"])));
    let fields = ["serial".to_string(), "networkId".to_string()];
    let shape = shape::shape_in(&doc, "", shape::ItemNames::Fields(&fields)).unwrap();
    assert_eq!(shape.items.len(), 3);
}

fn fan_out_group(path: &str) -> GroupDef {
    let mut g = GroupDef::new("status", path, 3, Duration::from_secs(60));
    g.fan_out = Some("nodes".into());
    g
}

fn items(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn shape_from_counts_array_and_collects_items() {
    let body = br#"{"data":[{"node":"pve1"},{"node":7},{"node":true},{"other":1},{"node":null},{"node":{"x":1}},{"node":[1]},"bare",{"node":"pve 2"}]}"#;
    let s = serve(Behaviour::Respond {
        bytes: response("200 OK", &[("Content-Type", "application/json")], body),
        keep_alive: true,
    })
    .await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));

    let ok = poller
        .poll(&inst, &shape_group("/api2/json/nodes", "/data", Some("node")), &[])
        .await
        .unwrap();
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.digest,
        sha_prefix(body),
        "the digest is the body's, as for any group"
    );
    assert_eq!(ok.body_bytes, body.len() as u64);
    assert!(ok.failed_items.is_empty());
    let shape = ok.shape.expect("a shape_from group reports a shape");
    // Every element counts; only string, number and boolean values name items.
    assert_eq!(shape.count, 9);
    assert_eq!(shape.items, ["pve1", "7", "true", "pve 2"]);

    // Without item_field: the count only.
    let ok = poller
        .poll(&inst, &shape_group("/api2/json/nodes", "/data", None), &[])
        .await
        .unwrap();
    assert_eq!(
        ok.shape,
        Some(ShapeUpdate {
            count: 9,
            items: vec![]
        })
    );

    // The same body through a group without shape_from: no shape.
    let ok = poller.poll(&inst, &group("/api2/json/nodes"), &[]).await.unwrap();
    assert_eq!(ok.shape, None);
    assert_eq!(ok.digest, sha_prefix(body));
}

#[tokio::test]
async fn item_fields_name_items_by_every_field_and_facts_are_read() {
    let body = br#"{"data":[
        {"type":"qemu","node":"pve1","vmid":100,"name":"web"},
        {"type":"node","node":"pve1"},
        {"type":"lxc","node":"pve,2","vmid":201},
        {"type":"storage","node":"pve1","vmid":null}
    ]}"#;
    let s = serve(Behaviour::Respond {
        bytes: response("200 OK", &[("Content-Type", "application/json")], body),
        keep_alive: true,
    })
    .await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));
    let mut g = shape_group("/r", "/data", None);
    g.item_fields = vec!["node".into(), "type".into(), "vmid".into()];
    g.facts = [
        ("first".to_string(), "/data/0/name".to_string()),
        ("vmid".to_string(), "/data/0/vmid".to_string()),
        ("gone".to_string(), "/data/9/name".to_string()),
        ("list".to_string(), "/data".to_string()),
    ]
    .into();
    let ok = poller.poll(&inst, &g, &[]).await.unwrap();
    let shape = ok.shape.expect("a shape");
    assert_eq!(shape.count, 4, "every element counts");
    assert_eq!(
        shape.items,
        ["node=pve1,type=qemu,vmid=100", "node=pve%2C2,type=lxc,vmid=201"],
        "elements lacking a field name no item"
    );
    assert_eq!(
        ok.facts,
        Some(
            [
                ("first".to_string(), "web".to_string()),
                ("vmid".to_string(), "100".to_string())
            ]
            .into()
        ),
        "a missing pointer or one to an array gives no fact"
    );
    assert_eq!(ok.json, None, "facts alone hand over no JSON");

    // A body that is not JSON fails a group with facts as it fails rules.
    let s = serve(Behaviour::Respond {
        bytes: response("200 OK", &[], b"<html>"),
        keep_alive: true,
    })
    .await;
    let mut f = group("/x");
    f.facts = [("a".to_string(), "/a".to_string())].into();
    let r = poller.poll(&instance(s.url("http")), &f, &[]).await;
    let e = assert_err(&r, Transient, ErrorKind::Body);
    assert!(e.message.starts_with("facts: body is not JSON"), "{}", e.message);
}

#[tokio::test]
async fn shape_from_whole_body_and_escaped_pointer() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/list", "200 OK", br#"[1, 2, 3]"#);
    routes.set("/nested", "200 OK", br#"{"a":{"b/c":[["x","y"]],"t~":[]}}"#);
    routes.set("/empty", "200 OK", br#"{"data":[]}"#);
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));

    let whole = poller
        .poll(&inst, &shape_group("/list", "", Some("name")), &[])
        .await
        .unwrap();
    assert_eq!(
        whole.shape,
        Some(ShapeUpdate {
            count: 3,
            items: vec![]
        })
    );
    // RFC 6901: `~1` is `/`, `~0` is `~`, and array indices work.
    let nested = poller
        .poll(&inst, &shape_group("/nested", "/a/b~1c/0", None), &[])
        .await
        .unwrap();
    assert_eq!(nested.shape.map(|s| s.count), Some(2));
    let tilde = poller
        .poll(&inst, &shape_group("/nested", "/a/t~0", None), &[])
        .await
        .unwrap();
    assert_eq!(tilde.shape.map(|s| s.count), Some(0));
    let empty = poller
        .poll(&inst, &shape_group("/empty", "/data", Some("n")), &[])
        .await
        .unwrap();
    assert_eq!(empty.shape, Some(ShapeUpdate::default()));
}

#[tokio::test]
async fn shape_from_non_array_is_transient_body() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/obj", "200 OK", br#"{"data":{"pve1":{}}}"#);
    routes.set("/num", "200 OK", br#"{"data":3}"#);
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));

    let r = poller
        .poll(&inst, &shape_group("/obj", "/data", Some("node")), &[])
        .await;
    let e = assert_err(&r, Transient, ErrorKind::Body);
    assert_eq!(e.message, r#"shape_from "/data": expected an array, found an object"#);
    assert_eq!(e.status, None);

    let r = poller.poll(&inst, &shape_group("/num", "/data", None), &[]).await;
    let e = assert_err(&r, Transient, ErrorKind::Body);
    assert_eq!(e.message, r#"shape_from "/data": expected an array, found a number"#);

    let r = poller.poll(&inst, &shape_group("/obj", "/nodes", None), &[]).await;
    let e = assert_err(&r, Transient, ErrorKind::Body);
    assert_eq!(e.message, r#"shape_from "/nodes": nothing at this pointer"#);

    let r = poller.poll(&inst, &shape_group("/obj", "", None), &[]).await;
    let e = assert_err(&r, Transient, ErrorKind::Body);
    assert_eq!(e.message, r#"shape_from "": expected an array, found an object"#);
}

#[tokio::test]
async fn shape_from_malformed_body_is_transient_body() {
    let deep = "[".repeat(100_000);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("/text", b"<html>not json</html>".to_vec()),
        ("/empty", Vec::new()),
        ("/truncated", br#"{"data":[1,"#.to_vec()),
        ("/binary", vec![0xff, 0x00, 0xfe, b'[', b']']),
        ("/trailing", br#"{"data":[]} {"#.to_vec()),
        ("/deep", deep.into_bytes()),
    ];
    let routes = Routes::new(Duration::ZERO);
    for (path, body) in &bodies {
        routes.set(path, "200 OK", body);
    }
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = InstanceConfig {
        max_response_bytes: 1 << 20,
        ..instance(s.url("http"))
    };
    for (path, _) in &bodies {
        let r = poller.poll(&inst, &shape_group(path, "/data", Some("node")), &[]).await;
        let e = assert_err(&r, Transient, ErrorKind::Body);
        assert!(
            e.message.starts_with(r#"shape_from "/data": body is not JSON"#),
            "{path}: {}",
            e.message
        );
        // Without shape_from the same bodies are fine.
        poller.poll(&inst, &group(path), &[]).await.unwrap();
    }
}

#[tokio::test]
async fn shape_from_oversize_is_still_permanent() {
    let body = format!(r#"{{"data":[{}]}}"#, vec!["1"; 1000].join(","));
    let with_len = serve(respond(response("200 OK", &[], body.as_bytes()))).await;
    let mut raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
    raw.extend_from_slice(body.as_bytes());
    let without_len = serve(respond(raw)).await;
    let poller = Poller::new().unwrap();
    for s in [&with_len, &without_len] {
        let mut inst = instance(s.url("http"));
        inst.max_response_bytes = 100;
        let r = poller.poll(&inst, &shape_group("", "/data", None), &[]).await;
        let e = assert_err(&r, Permanent, ErrorKind::Body);
        assert!(e.message.contains("larger than 100 bytes"), "{}", e.message);
        inst.max_response_bytes = body.len() as u64;
        let ok = poller.poll(&inst, &shape_group("", "/data", None), &[]).await.unwrap();
        assert_eq!(ok.shape.map(|s| s.count), Some(1000));
    }
}

#[test]
fn shape_of_never_panics_on_odd_input() {
    let cases: [&[u8]; 6] = [b"", b"null", b"\"s\"", b"[[[[", b"{\"a\":[1e999]}", b"[\"\\ud800\"]"];
    for body in cases {
        for pointer in ["", "/", "/a", "/a/0", "a", "/~2"] {
            let _ = shape::shape_of(body, pointer, Some("x"));
        }
    }
    let e = shape::shape_of(b"[]", "data", None).unwrap_err();
    assert_eq!((e.category, e.kind), (Transient, ErrorKind::Body));
    assert!(e.message.contains("not a JSON pointer"), "{}", e.message);
    // A key that is the empty string is reachable with "/".
    let ok = shape::shape_of(br#"{"":[1]}"#, "/", None).unwrap();
    assert_eq!(ok.count, 1);
}

// ---------------------------------------------------------------- fan_out

#[test]
fn path_segment_encoding() {
    assert_eq!(shape::encode_path_segment("a b/c"), "a%20b%2Fc");
    assert_eq!(shape::encode_path_segment("x?y#z%"), "x%3Fy%23z%25");
    assert_eq!(shape::encode_path_segment("ü"), "%C3%BC");
    assert_eq!(shape::encode_path_segment("AZaz09-._~"), "AZaz09-._~");
    assert_eq!(
        shape::encode_path_segment("{item}&=+;:@"),
        "%7Bitem%7D%26%3D%2B%3B%3A%40"
    );
    assert_eq!(
        shape::item_path("/n/{item}/s/{item}", "a/b").unwrap(),
        "/n/a%2Fb/s/a%2Fb"
    );
    for bad in ["", ".", ".."] {
        let e = shape::item_path("/n/{item}", bad).unwrap_err();
        assert_eq!((e.category, e.kind), (Permanent, ErrorKind::InvalidUrl), "{bad:?}");
    }
    assert_eq!(shape::item_path("/n/{item}", "...").unwrap(), "/n/...");
    // Items made of fields: each {item.FIELD} is that field, encoded.
    let item = "node=pve 1,type=qemu,vmid=100";
    assert_eq!(
        shape::item_path("/nodes/{item.node}/{item.type}/{item.vmid}/config", item).unwrap(),
        "/nodes/pve%201/qemu/100/config"
    );
    assert_eq!(
        shape::item_path("/a/{item.vmid}/{item.vmid}/{item", item).unwrap(),
        "/a/100/100/{item",
        "an unclosed placeholder is left as text"
    );
    let e = shape::item_path("/n/{item.name}", item).unwrap_err();
    assert_eq!((e.category, e.kind), (Permanent, ErrorKind::InvalidUrl));
    assert!(e.message.contains("no field \"name\""), "{}", e.message);
    for bad in ["node=..,vmid=1", "node=,vmid=1"] {
        let e = shape::item_path("/n/{item.node}", bad).unwrap_err();
        assert_eq!((e.category, e.kind), (Permanent, ErrorKind::InvalidUrl), "{bad:?}");
    }
    assert_eq!(shape::display_item("a\nb"), "a?b");
    assert_eq!(shape::display_item(&"x".repeat(100)), format!("{}...", "x".repeat(64)));
}

#[test]
fn deadline_scales_with_rounds_of_eight() {
    let inst = InstanceConfig {
        timeout: Duration::from_secs(2),
        ..InstanceConfig::new("t", "http", "http://127.0.0.1/")
    };
    let fan = fan_out_group("/n/{item}");
    assert_eq!(deadline(&inst, &group("/x"), 0), Duration::from_secs(2));
    assert_eq!(deadline(&inst, &group("/x"), 100), Duration::from_secs(2));
    assert_eq!(deadline(&inst, &fan, 0), Duration::from_secs(2));
    assert_eq!(deadline(&inst, &fan, 1), Duration::from_secs(2));
    assert_eq!(deadline(&inst, &fan, 8), Duration::from_secs(2));
    assert_eq!(deadline(&inst, &fan, 9), Duration::from_secs(4));
    assert_eq!(deadline(&inst, &fan, 17), Duration::from_secs(6));
    assert_eq!(
        deadline(&inst, &fan, usize::MAX),
        Duration::from_secs(2).saturating_mul(u32::MAX)
    );
}

#[tokio::test]
async fn fan_out_partial_failure_reports_failed_items() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/nodes/a/status", "200 OK", b"{\"a\":1}");
    routes.set("/nodes/b/status", "500 Internal Server Error", b"boom");
    routes.set("/nodes/c/status", "201 Created", b"{\"c\":22}");
    let s = serve(Behaviour::Routes(routes)).await;
    let inst = instance(s.url("http"));
    let r = Poller::new()
        .unwrap()
        .poll(&inst, &fan_out_group("/nodes/{item}/status"), &items(&["a", "b", "c"]))
        .await;
    let ok = r.unwrap();
    assert_eq!(ok.status, 200, "status of the first success");
    assert_eq!(ok.body_bytes, 7 + 8);
    assert_eq!(ok.shape, None);
    assert_eq!(ok.failed_items.len(), 1);
    let failed = &ok.failed_items[0];
    assert_eq!(failed.item, "b");
    assert_eq!(
        (failed.error.category, failed.error.kind, failed.error.status),
        (Transient, ErrorKind::Http, Some(500))
    );
    assert_eq!(failed.error.message, "HTTP 500 Internal Server Error");
    let mut lines: Vec<String> = s
        .requests()
        .iter()
        .map(|r| r.lines().next().unwrap_or_default().to_owned())
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "GET /nodes/a/status HTTP/1.1",
            "GET /nodes/b/status HTTP/1.1",
            "GET /nodes/c/status HTTP/1.1"
        ]
    );
}

#[tokio::test]
async fn fan_out_all_failing_is_first_items_error() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/n/x", "503 Service Unavailable", b"");
    routes.set("/n/y", "404 Not Found", b"");
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));
    let r = poller
        .poll(&inst, &fan_out_group("/n/{item}"), &items(&["x", "y", "z"]))
        .await;
    let e = assert_err(&r, Transient, ErrorKind::Http);
    assert_eq!(e.status, Some(503));
    assert_eq!(e.message, "all 3 items failed; first (x): HTTP 503 Service Unavailable");

    // The first item decides the category.
    let r = poller
        .poll(&inst, &fan_out_group("/n/{item}"), &items(&["y", "x"]))
        .await;
    let e = assert_err(&r, Permanent, ErrorKind::Http);
    assert!(
        e.message.starts_with("all 2 items failed; first (y): HTTP 404"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn fan_out_items_are_percent_encoded() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/nodes/a%20b%2Fc/status", "200 OK", b"1");
    routes.set("/nodes/%C3%BC%3F%23%25/status", "200 OK", b"2");
    routes.set("/nodes/plain-1.2_~/status", "200 OK", b"3");
    let s = serve(Behaviour::Routes(routes)).await;
    let inst = instance(s.url("http"));
    let list = items(&["a b/c", "ü?#%", "plain-1.2_~", ".."]);
    let ok = Poller::new()
        .unwrap()
        .poll(&inst, &fan_out_group("/nodes/{item}/status"), &list)
        .await
        .unwrap();
    // `..` cannot be a path segment: it fails without a request.
    assert_eq!(ok.failed_items.len(), 1, "{:?}", ok.failed_items);
    assert_eq!(ok.failed_items[0].item, "..");
    assert_eq!(
        (ok.failed_items[0].error.category, ok.failed_items[0].error.kind),
        (Permanent, ErrorKind::InvalidUrl)
    );
    let mut lines: Vec<String> = s
        .requests()
        .iter()
        .map(|r| r.lines().next().unwrap_or_default().to_owned())
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "GET /nodes/%C3%BC%3F%23%25/status HTTP/1.1",
            "GET /nodes/a%20b%2Fc/status HTTP/1.1",
            "GET /nodes/plain-1.2_~/status HTTP/1.1",
        ]
    );
}

#[tokio::test]
async fn api_root_resolves_the_path_below_the_root_the_instance_url_sits_under() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/api/v1/devices/Q2-A/switch/ports/statuses", "200 OK", b"[1]");
    routes.set("/api/v1/networks/N_1", "200 OK", b"{}");
    let s = serve(Behaviour::Routes(routes)).await;
    let inst = instance(format!(
        "{}/api/v1/organizations/549236",
        s.url("http").trim_end_matches('/')
    ));
    let mut fan = fan_out_group("/devices/{item}/switch/ports/statuses");
    fan.api_root = Some("/api/v1".into());
    let poller = Poller::new().unwrap();
    let ok = poller.poll(&inst, &fan, &items(&["Q2-A"])).await.unwrap();
    assert!(ok.failed_items.is_empty(), "{:?}", ok.failed_items);
    let mut one = group("/networks/N_1");
    one.api_root = Some("/api/v1".into());
    poller.poll(&inst, &one, &[]).await.unwrap();
    let lines: Vec<String> = s
        .requests()
        .iter()
        .map(|r| r.lines().next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        lines,
        [
            "GET /api/v1/devices/Q2-A/switch/ports/statuses HTTP/1.1",
            "GET /api/v1/networks/N_1 HTTP/1.1",
        ]
    );
    // An instance URL without the root: a permanent error naming both.
    one.api_root = Some("/api/v2".into());
    let e = assert_err(&poller.poll(&inst, &one, &[]).await, Permanent, ErrorKind::InvalidUrl);
    assert!(
        e.message.contains("\"/api/v2\"") && e.message.contains("/organizations/549236"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn fan_out_without_items_is_transient() {
    let s = serve(respond(response("200 OK", &[], b"{}"))).await;
    let r = Poller::new()
        .unwrap()
        .poll(&instance(s.url("http")), &fan_out_group("/n/{item}"), &[])
        .await;
    let e = assert_err(&r, Transient, ErrorKind::Body);
    assert_eq!(e.message, r#"fan-out over "nodes": no items known yet"#);
    assert!(s.requests().is_empty());
}

#[tokio::test]
async fn items_are_ignored_without_fan_out() {
    let s = serve(respond(response("200 OK", &[], b"{}"))).await;
    let ok = Poller::new()
        .unwrap()
        .poll(&instance(s.url("http")), &group("/plain"), &items(&["a", "b"]))
        .await
        .unwrap();
    assert!(ok.failed_items.is_empty());
    assert_eq!(s.requests().len(), 1);
    assert!(s.requests()[0].starts_with("GET /plain HTTP/1.1"));
}

#[tokio::test]
async fn fan_out_digest_follows_item_bodies() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/n/a", "200 OK", b"alpha");
    routes.set("/n/b", "200 OK", b"beta");
    routes.set("/n/c", "200 OK", b"gamma");
    let s = serve(Behaviour::Routes(routes.clone())).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));
    let g = fan_out_group("/n/{item}");
    let list = items(&["a", "b", "c"]);

    let first = poller.poll(&inst, &g, &list).await.unwrap();
    let again = poller.poll(&inst, &g, &list).await.unwrap();
    assert_eq!(first.digest, again.digest, "unchanged bodies, unchanged digest");
    assert_eq!(first.body_bytes, 5 + 4 + 5);

    routes.set("/n/b", "200 OK", b"BETA");
    let changed = poller.poll(&inst, &g, &list).await.unwrap();
    assert_ne!(changed.digest, first.digest, "one item's body changed");
    assert_eq!(changed.body_bytes, first.body_bytes);

    routes.set("/n/b", "200 OK", b"beta");
    let back = poller.poll(&inst, &g, &list).await.unwrap();
    assert_eq!(back.digest, first.digest);

    // The digest binds bodies to items: swapping two items' bodies changes it.
    routes.set("/n/a", "200 OK", b"gamma");
    routes.set("/n/c", "200 OK", b"alpha");
    let swapped = poller.poll(&inst, &g, &list).await.unwrap();
    assert_ne!(swapped.digest, first.digest);
}

#[tokio::test]
async fn fan_out_runs_at_most_eight_at_once() {
    let routes = Routes::new(Duration::from_millis(150));
    let names: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
    for n in &names {
        routes.set(&format!("/n/{n}"), "200 OK", n.as_bytes());
    }
    let s = serve(Behaviour::Routes(routes.clone())).await;
    let started = Instant::now();
    let ok = Poller::new()
        .unwrap()
        .poll(&instance(s.url("http")), &fan_out_group("/n/{item}"), &names)
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert!(ok.failed_items.is_empty(), "{:?}", ok.failed_items);
    assert_eq!(s.requests().len(), 20);
    let max = routes.max_inflight.load(Ordering::SeqCst);
    assert!((2..=FAN_OUT_CONCURRENCY).contains(&max), "max in flight: {max}");
    // Three rounds of 150 ms, not twenty.
    assert!(elapsed < Duration::from_millis(2000), "{elapsed:?}");
}

#[tokio::test]
async fn fan_out_item_timeouts_stay_within_deadline() {
    let s = serve(Behaviour::Silent).await;
    let mut inst = instance(s.url("http"));
    inst.timeout = Duration::from_millis(200);
    let g = fan_out_group("/n/{item}");
    let names: Vec<String> = (0..9).map(|i| format!("i{i}")).collect();
    let bound = deadline(&inst, &g, names.len());
    assert_eq!(bound, Duration::from_millis(400));
    let started = Instant::now();
    let r = Poller::new().unwrap().poll(&inst, &g, &names).await;
    let elapsed = started.elapsed();
    let e = assert_err(&r, Transient, ErrorKind::Timeout);
    assert_eq!(e.message, "all 9 items failed; first (i0): timed out after 200ms");
    // Two rounds: eight items, then the ninth.
    assert!(elapsed >= Duration::from_millis(390), "{elapsed:?}");
    // Well under nine sequential timeouts (1.8 s), with slack for a busy machine.
    assert!(elapsed < bound + Duration::from_millis(800), "{elapsed:?}");
    assert_eq!(s.requests().len(), 9);
}

#[tokio::test]
async fn forward_groups_return_their_body_and_others_do_not() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/status", "200 OK", b"{\"up\":true}");
    routes.set("/nodes/a/status", "200 OK", b"{\"a\":1}");
    routes.set("/nodes/b/status", "200 OK", b"plain text");
    routes.set("/nodes/c/status", "500 Internal Server Error", b"boom");
    let s = serve(Behaviour::Routes(routes)).await;
    let inst = instance(s.url("http"));
    let poller = Poller::new().unwrap();
    let mut g = GroupDef::new("status", "/status", 1, Duration::from_secs(60));
    let plain = poller.poll(&inst, &g, &[]).await.unwrap();
    assert_eq!(plain.body, None, "bodies are only kept for forward groups");
    g.forward = true;
    let fwd = poller.poll(&inst, &g, &[]).await.unwrap();
    assert_eq!(fwd.body.as_deref(), Some(&b"{\"up\":true}"[..]));
    // A fan-out forwards a JSON object of its successful items' bodies.
    let mut fan = fan_out_group("/nodes/{item}/status");
    fan.forward = true;
    let ok = poller.poll(&inst, &fan, &items(&["a", "b", "c"])).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(ok.body.as_deref().unwrap_or_default()).unwrap();
    assert_eq!(body, serde_json::json!({"a": {"a": 1}, "b": "plain text"}));
}

// ---------------------------------------------------------------- value rules and keep_body

/// A group with one value rule (the poller only asks whether it has any).
fn rules_group(path: &str) -> GroupDef {
    let mut g = GroupDef::new("status", path, 1, Duration::from_secs(60));
    g.values = vec![serde_json::from_value(serde_json::json!({"metric": "up", "value": "/up"})).unwrap()];
    g
}

fn keep_group(path: &str, max_body_bytes: u64) -> GroupDef {
    let mut g = GroupDef::new("status", path, 1, Duration::from_secs(60));
    g.keep_body = true;
    g.max_body_bytes = max_body_bytes;
    g
}

/// A response without `Content-Length`, its end marked by the close.
fn close_delimited(headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = String::from("HTTP/1.1 200 OK\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

fn kept(content_type: &str, bytes: &[u8]) -> KeptBody {
    KeptBody::Kept {
        content_type: content_type.into(),
        bytes: bytes.to_vec(),
    }
}

#[tokio::test]
async fn value_rules_get_the_parsed_body() {
    let body = br#"{"up":1,"data":[{"node":"a"},{"node":"b"}]}"#;
    let routes = Routes::new(Duration::ZERO);
    routes.set("/status", "200 OK", body);
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));
    let doc = serde_json::json!({"up": 1, "data": [{"node": "a"}, {"node": "b"}]});

    let ok = poller.poll(&inst, &rules_group("/status"), &[]).await.unwrap();
    assert_eq!(ok.json, Some(PolledJson::One(doc.clone())));
    assert_eq!(
        ok.digest,
        sha_prefix(body),
        "the digest is the body's, as for any group"
    );
    assert_eq!(ok.body_bytes, body.len() as u64);
    assert_eq!(ok.body, None, "the bytes are dropped once parsed");
    assert_eq!(ok.kept_body, None);
    assert_eq!(ok.shape, None);

    // With shape_from too: one parse gives both.
    let mut both = rules_group("/status");
    both.shape_from = Some("/data".into());
    both.item_field = Some("node".into());
    let ok = poller.poll(&inst, &both, &[]).await.unwrap();
    assert_eq!(
        ok.shape,
        Some(ShapeUpdate {
            count: 2,
            items: vec!["a".into(), "b".into()]
        })
    );
    assert_eq!(ok.json, Some(PolledJson::One(doc.clone())));

    // With forward too: the bytes are returned as well.
    let mut fwd = rules_group("/status");
    fwd.forward = true;
    let ok = poller.poll(&inst, &fwd, &[]).await.unwrap();
    assert_eq!(ok.json, Some(PolledJson::One(doc)));
    assert_eq!(ok.body.as_deref(), Some(&body[..]));

    // A plain group: nothing parsed, nothing kept.
    let ok = poller.poll(&inst, &group("/status"), &[]).await.unwrap();
    assert_eq!((ok.json, ok.kept_body, ok.body, ok.shape), (None, None, None, None));
    assert_eq!(ok.digest, sha_prefix(body));
}

#[tokio::test]
async fn value_rules_non_json_body_is_transient_body() {
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("/text", b"<html>not\njson</html>".to_vec()),
        ("/empty", Vec::new()),
        ("/truncated", br#"{"up":"#.to_vec()),
        ("/binary", vec![0xff, 0x00, 0xfe, b'[', b']']),
        ("/trailing", br#"{"up":1} {"#.to_vec()),
        ("/deep", "[".repeat(100_000).into_bytes()),
    ];
    let routes = Routes::new(Duration::ZERO);
    for (path, body) in &bodies {
        routes.set(path, "200 OK", body);
    }
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = InstanceConfig {
        max_response_bytes: 1 << 20,
        ..instance(s.url("http"))
    };
    for (path, _) in &bodies {
        let r = poller.poll(&inst, &rules_group(path), &[]).await;
        let e = assert_err(&r, Transient, ErrorKind::Body);
        assert!(
            e.message.starts_with("value rules: body is not JSON ("),
            "{path}: {}",
            e.message
        );
        assert_eq!(e.status, None);
        // With shape_from as well, the one parse fails as shape_from's does.
        let mut both = rules_group(path);
        both.shape_from = Some("/data".into());
        let r = poller.poll(&inst, &both, &[]).await;
        let e = assert_err(&r, Transient, ErrorKind::Body);
        assert!(
            e.message.starts_with(r#"shape_from "/data": body is not JSON"#),
            "{path}: {}",
            e.message
        );
        // Without rules the same bodies are fine.
        poller.poll(&inst, &group(path), &[]).await.unwrap();
    }
}

#[tokio::test]
async fn fan_out_value_rules_give_items_json_in_order() {
    let routes = Routes::new(Duration::ZERO);
    routes.set("/n/a", "200 OK", br#"{"up":1}"#);
    routes.set("/n/b", "200 OK", b"not json");
    routes.set("/n/c", "500 Internal Server Error", b"{}");
    routes.set("/n/d", "200 OK", br#"[4]"#);
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));
    let mut g = rules_group("/n/{item}");
    g.fan_out = Some("nodes".into());

    let ok = poller.poll(&inst, &g, &items(&["d", "b", "a", "c"])).await.unwrap();
    assert_eq!(
        ok.json,
        Some(PolledJson::Items(vec![
            ("d".into(), serde_json::json!([4])),
            ("a".into(), serde_json::json!({"up": 1})),
        ])),
        "successful items, in item order"
    );
    let failed: Vec<(&str, ErrorCategory, ErrorKind)> = ok
        .failed_items
        .iter()
        .map(|f| (f.item.as_str(), f.error.category, f.error.kind))
        .collect();
    assert_eq!(
        failed,
        [("b", Transient, ErrorKind::Body), ("c", Transient, ErrorKind::Http)]
    );
    assert!(
        ok.failed_items[0]
            .error
            .message
            .starts_with("value rules: body is not JSON"),
        "{}",
        ok.failed_items[0].error.message
    );
    assert_eq!((ok.body, ok.kept_body), (None, None));

    // Forwarded too: the object is built from the parsed bodies.
    g.forward = true;
    let ok = poller.poll(&inst, &g, &items(&["a", "b", "d"])).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(ok.body.as_deref().unwrap_or_default()).unwrap();
    assert_eq!(body, serde_json::json!({"a": {"up": 1}, "d": [4]}));

    // Every item's body not JSON: the run fails with the first item's error.
    let r = poller.poll(&inst, &g, &items(&["b", "c"])).await;
    let e = assert_err(&r, Transient, ErrorKind::Body);
    assert!(
        e.message
            .starts_with("all 2 items failed; first (b): value rules: body is not JSON"),
        "{}",
        e.message
    );

    // A fan-out without rules hands over no JSON.
    let ok = poller
        .poll(&inst, &fan_out_group("/n/{item}"), &items(&["a", "b"]))
        .await
        .unwrap();
    assert_eq!(ok.json, None);
    assert!(ok.failed_items.is_empty());
}

#[tokio::test]
async fn keep_body_returns_bytes_and_content_type() {
    let body = br#"{"up":1}"#;
    let routes = Routes::new(Duration::ZERO);
    routes.set_raw(
        "/typed",
        response(
            "200 OK",
            &[
                ("Content-Type", "application/json; charset=utf-8"),
                ("Connection", "close"),
            ],
            body,
        ),
    );
    routes.set("/untyped", "200 OK", b"plain bytes");
    routes.set_raw(
        "/unsized",
        close_delimited(&[("Content-Type", "text/plain")], b"no length"),
    );
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));

    let ok = poller.poll(&inst, &keep_group("/typed", 1024), &[]).await.unwrap();
    assert_eq!(
        ok.kept_body,
        Some(KeptBodies::One(kept("application/json; charset=utf-8", body)))
    );
    assert_eq!((ok.json, ok.body), (None, None), "kept only, not parsed or forwarded");
    assert_eq!(ok.digest, sha_prefix(body));

    let ok = poller.poll(&inst, &keep_group("/untyped", 1024), &[]).await.unwrap();
    assert_eq!(ok.kept_body, Some(KeptBodies::One(kept("", b"plain bytes"))));
    let ok = poller.poll(&inst, &keep_group("/unsized", 1024), &[]).await.unwrap();
    assert_eq!(ok.kept_body, Some(KeptBodies::One(kept("text/plain", b"no length"))));

    // With value rules and forward as well: each gets its own.
    let mut all = keep_group("/typed", 1024);
    all.values = rules_group("").values;
    all.forward = true;
    let ok = poller.poll(&inst, &all, &[]).await.unwrap();
    assert_eq!(
        ok.kept_body,
        Some(KeptBodies::One(kept("application/json; charset=utf-8", body)))
    );
    assert_eq!(ok.json, Some(PolledJson::One(serde_json::json!({"up": 1}))));
    assert_eq!(ok.body.as_deref(), Some(&body[..]));

    // Without keep_body nothing is kept.
    let ok = poller.poll(&inst, &group("/typed"), &[]).await.unwrap();
    assert_eq!(ok.kept_body, None);
}

#[tokio::test]
async fn keep_body_over_max_body_bytes_is_not_kept_and_says_so() {
    let body = format!(r#"{{"data":[{}]}}"#, vec!["1"; 40].join(","));
    let len = body.len() as u64;
    let routes = Routes::new(Duration::ZERO);
    routes.set("/sized", "200 OK", body.as_bytes());
    routes.set_raw("/unsized", close_delimited(&[], body.as_bytes()));
    let s = serve(Behaviour::Routes(routes)).await;
    let poller = Poller::new().unwrap();
    let inst = instance(s.url("http"));

    for path in ["/sized", "/unsized"] {
        // One byte over: not kept, and the poll still succeeds.
        let ok = poller.poll(&inst, &keep_group(path, len - 1), &[]).await.unwrap();
        assert_eq!(
            ok.kept_body,
            Some(KeptBodies::One(KeptBody::TooLarge { bytes: len })),
            "{path}"
        );
        assert_eq!(ok.digest, sha_prefix(body.as_bytes()), "{path}");
        assert_eq!(ok.body_bytes, len);
        // Exactly at the limit: kept.
        let ok = poller.poll(&inst, &keep_group(path, len), &[]).await.unwrap();
        assert_eq!(ok.kept_body, Some(KeptBodies::One(kept("", body.as_bytes()))), "{path}");

        // Over the limit with rules and shape_from: those still get the body.
        let mut g = keep_group(path, 10);
        g.values = rules_group("").values;
        g.shape_from = Some("/data".into());
        let ok = poller.poll(&inst, &g, &[]).await.unwrap();
        assert_eq!(ok.kept_body, Some(KeptBodies::One(KeptBody::TooLarge { bytes: len })));
        assert_eq!(ok.shape.map(|s| s.count), Some(40));
        assert!(matches!(ok.json, Some(PolledJson::One(_))));

        // max_response_bytes still fails the poll.
        let small = InstanceConfig {
            max_response_bytes: 10,
            ..inst.clone()
        };
        let r = poller.poll(&small, &keep_group(path, 5), &[]).await;
        let e = assert_err(&r, Permanent, ErrorKind::Body);
        assert!(e.message.contains("larger than 10 bytes"), "{}", e.message);
    }
}

#[tokio::test]
async fn fan_out_keep_body_per_item() {
    let routes = Routes::new(Duration::ZERO);
    routes.set_raw(
        "/n/a",
        response(
            "200 OK",
            &[("Content-Type", "text/plain"), ("Connection", "close")],
            b"short",
        ),
    );
    routes.set("/n/b", "200 OK", b"a body over the limit");
    routes.set("/n/c", "404 Not Found", b"");
    let s = serve(Behaviour::Routes(routes)).await;
    let mut g = keep_group("/n/{item}", 8);
    g.fan_out = Some("nodes".into());
    let ok = Poller::new()
        .unwrap()
        .poll(&instance(s.url("http")), &g, &items(&["c", "b", "a"]))
        .await
        .unwrap();
    assert_eq!(
        ok.kept_body,
        Some(KeptBodies::Items(vec![
            ("b".into(), KeptBody::TooLarge { bytes: 21 }),
            ("a".into(), kept("text/plain", b"short")),
        ]))
    );
    assert_eq!(ok.json, None);
    assert_eq!(ok.failed_items.len(), 1);
    assert_eq!(ok.failed_items[0].item, "c");
}

#[tokio::test]
async fn a_fan_out_learns_its_lookup_tables_over_the_items_that_answered() {
    let routes = Routes::new(Duration::ZERO);
    routes.set(
        "/n/a/ssids",
        "200 OK",
        br#"[{"name":"Corp","enabled":true},{"name":"Guest","enabled":true}]"#,
    );
    routes.set(
        "/n/b/ssids",
        "200 OK",
        br#"[{"name":"Corp","enabled":true},{"name":"Guest","enabled":false}]"#,
    );
    routes.set(
        "/n/c/ssids",
        "500 Internal Server Error",
        br#"[{"name":"Guest","enabled":true}]"#,
    );
    let s = serve(Behaviour::Routes(routes)).await;
    let inst = instance(s.url("http"));
    let mut g = fan_out_group("/n/{item}/ssids");
    g.lookups.insert(
        "ssid".into(),
        toml::from_str(
            r#"
            each = ""
            where = { "/enabled" = "true" }
            key = "/name"
            fields = { network = "@item" }
            many = { network = "multiple_({@count}_networks)" }
            "#,
        )
        .unwrap(),
    );
    let ok = Poller::new()
        .unwrap()
        .poll(&inst, &g, &items(&["a", "b", "c"]))
        .await
        .unwrap();
    assert_eq!(ok.failed_items.len(), 1);
    let facts = ok.facts.expect("the table, learned over the items");
    let got: Vec<(&str, &str)> = facts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        got,
        [
            ("ssid[Corp].network", "multiple_(2_networks)"),
            ("ssid[Guest].network", "a"),
            ("ssid[]", "2")
        ],
        "the failed item counts nothing"
    );
}

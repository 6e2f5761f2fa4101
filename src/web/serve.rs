//! Serving a router on a listener with the limits a port open to a network
//! needs, so that no client can take the listener from the others:
//!
//! - at most [`Limits::max_connections`] connections at once, and at most
//!   [`Limits::max_connections_per_client`] from one client (an IPv4
//!   address, an IPv6 /64, as the login throttle counts them). A connection
//!   over either cap is accepted and closed at once, so it never waits in
//!   the kernel's backlog in front of a scrape or a browser: a client that
//!   reopens every socket the server closes holds its own share and no
//!   more. A trusted reverse proxy ([`Limits::exempt`]) speaks for many
//!   clients and is held to `max_connections` alone.
//! - a request head that must arrive within the header timeout
//!   ([`crate::config::ConnectionTimeouts::header`]), on a new connection
//!   and between requests on a kept-alive one (so an idle connection is
//!   closed after it too);
//! - a response write that must make progress within the write timeout
//!   ([`crate::config::ConnectionTimeouts::write`]): a client that stops
//!   reading, pipelined requests queued behind the answer it does not read,
//!   is closed. The requests it sent ahead are held in a read buffer of at
//!   most [`MAX_BUF`] per connection; hyper reads no more until the answer
//!   in front of them is written.
//! - a whole request, body included, that must be answered within
//!   [`REQUEST_TIMEOUT`] (see [`request_timeout`]).
//!
//! Every refusal and every close for a limit is counted in
//! `pollster_http_connections_rejected_total{listener, reason}`.
//!
//! Each connection is one task holding one slot of the listener's table;
//! stopping closes idle connections at once and lets a request in progress
//! finish.
//!
//! With a TLS configuration the connection's task first completes the
//! handshake (within the header timeout, so a client that stalls there
//! holds its slot no longer than one that stalls on the request head), then
//! hyper serves the decrypted stream exactly as it serves TCP.

use crate::config::ConnectionTimeouts;
use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::IntCounterVec;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower_service::Service;

/// Time to send a whole request head, counted from the moment the server
/// waits for one (also between requests on a kept-alive connection).
pub const HEADER_TIMEOUT: Duration = crate::config::DEFAULT_HEADER_TIMEOUT;
/// Time for a response write to make progress.
pub const WRITE_TIMEOUT: Duration = crate::config::DEFAULT_WRITE_TIMEOUT;
/// Time to answer a request, its body read included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The metrics listener's connection cap: a few scrapers, never hundreds.
pub const METRICS_MAX_CONNECTIONS: usize = 32;
/// A connection's read buffer: a request head must fit, and pipelined
/// requests beyond it stay in the kernel's buffers (then the client's).
pub const MAX_BUF: usize = 64 * 1024;

/// The metrics listener's per-client cap: a quarter of its connections, or
/// the UI/API listener's per-client cap when that is smaller. One client at
/// its cap leaves three quarters to a Prometheus pair and everyone else.
pub fn metrics_per_client(ui_per_client: usize) -> usize {
    ui_per_client.clamp(1, METRICS_MAX_CONNECTIONS / 4)
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    /// Peers held to `max_connections` alone (the trusted reverse proxies:
    /// every client behind one arrives from its address).
    pub exempt: Vec<ipnet::IpNet>,
    pub timeouts: ConnectionTimeouts,
}

/// Why a listener refused or closed a connection: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `max_connections` were open.
    Full,
    /// The client held `max_connections_per_client`.
    PerClient,
    /// No byte of a request within the header timeout.
    Idle,
    /// A request head (or TLS handshake) begun and not finished in time.
    HeaderTimeout,
    /// A response write made no progress within the write timeout.
    WriteTimeout,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Full => "full",
            Reason::PerClient => "per_client",
            Reason::Idle => "idle",
            Reason::HeaderTimeout => "header_timeout",
            Reason::WriteTimeout => "write_timeout",
        }
    }
}

/// Counts one listener's refusals in
/// `pollster_http_connections_rejected_total`.
#[derive(Clone)]
pub struct Rejections {
    listener: &'static str,
    counter: IntCounterVec,
}

impl Rejections {
    /// `listener` is `ui` or `metrics`.
    pub fn new(listener: &'static str, counter: IntCounterVec) -> Rejections {
        Rejections { listener, counter }
    }

    fn count(&self, reason: Reason) {
        self.counter.with_label_values(&[self.listener, reason.as_str()]).inc();
    }
}

/// The connections a listener holds: how many, and how many per client.
#[derive(Debug, Default)]
struct Occupancy {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

type Table = Arc<Mutex<Occupancy>>;

fn lock(t: &Table) -> MutexGuard<'_, Occupancy> {
    // Every mutation is a few additions: the data is whole after a panic.
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's place in the table, given back when it is dropped.
struct Slot {
    table: Table,
    client: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = lock(&self.table);
        t.total = t.total.saturating_sub(1);
        if let Some(c) = self.client
            && let Some(n) = t.by_client.get_mut(&c)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                t.by_client.remove(&c);
            }
        }
    }
}

/// A slot for a connection from `peer`, or why there is none.
fn admit(table: &Table, peer: IpAddr, limits: &Limits) -> Result<Slot, Reason> {
    let peer = peer.to_canonical();
    let client = (!limits.exempt.iter().any(|n| n.contains(&peer))).then(|| super::throttle::client_key(peer));
    let mut t = lock(table);
    if t.total >= limits.max_connections.max(1) {
        return Err(Reason::Full);
    }
    if let Some(c) = client {
        let n = t.by_client.entry(c).or_insert(0);
        if *n >= limits.max_connections_per_client.max(1) {
            return Err(Reason::PerClient);
        }
        *n += 1;
    }
    t.total += 1;
    Ok(Slot {
        table: table.clone(),
        client,
    })
}

/// Serve `router` on `listener` until `stop` turns true, then close idle
/// connections and return when the connections in progress have ended (the
/// caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    rejections: Rejections,
    stop: watch::Receiver<bool>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let table = Table::default();
    let mut connections = tokio::task::JoinSet::new();
    let stopping = stopped(stop.clone());
    tokio::pin!(stopping);
    loop {
        let (stream, peer): (_, SocketAddr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors, say: wait a moment rather than spin.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stopping => break,
        };
        let slot = match admit(&table, peer.ip(), &limits) {
            Ok(slot) => slot,
            Err(reason) => {
                // Closed at once: a refused client learns it now, and the
                // ones behind it in the backlog are not kept waiting.
                rejections.count(reason);
                tracing::debug!(%peer, reason = reason.as_str(), "connection refused");
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let stop = stop.clone();
        let acceptor = acceptor.clone();
        let rejections = rejections.clone();
        let timeouts = limits.timeouts;
        connections.spawn(async move {
            let _slot = slot;
            let (stream, progress) = Timed::new(stream, timeouts.write);
            let ended = match acceptor {
                None => serve_connection(stream, peer, router, timeouts, stop).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(timeouts.header, acceptor.accept(stream));
                    tokio::select! {
                        r = handshake => match r {
                            Ok(Ok(s)) => serve_connection(s, peer, router, timeouts, stop).await,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                Ended::Other
                            }
                            Err(_) => Ended::HeadTimeout,
                        },
                        _ = stopped(stop.clone()) => Ended::Other,
                    }
                }
            };
            if let Some(reason) = progress.reason(ended) {
                tracing::debug!(%peer, reason = reason.as_str(), "connection closed");
                rejections.count(reason);
            }
        });
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

/// How a connection's task ended, as far as the limits care.
enum Ended {
    /// hyper's header timeout (or the TLS handshake's).
    HeadTimeout,
    /// The client closed it, an error, a stop: nothing to count unless the
    /// write timeout fired.
    Other,
}

/// One connection, plain or decrypted: requests until the client closes
/// it, or until `stop` (then the request in progress finishes).
async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    timeouts: ConnectionTimeouts,
    stop: watch::Receiver<bool>,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut router = router.clone();
        async move { router.call(req).await }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .max_buf_size(MAX_BUF)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return match r {
            Err(e) if e.is_timeout() => Ended::HeadTimeout,
            _ => Ended::Other,
        },
        _ = stopped(stop) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
    Ended::Other
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|v| *v).await;
}

/// What a connection's [`Timed`] stream saw, kept by its task after hyper
/// has taken the stream.
#[derive(Debug, Default)]
struct Progress {
    /// The write timeout fired.
    write_timed_out: AtomicBool,
    /// Bytes received since the server last wrote: none when a header
    /// timeout fires means the client sent nothing (idle), some means it
    /// began a request head and stalled.
    read_since_write: AtomicU64,
}

impl Progress {
    fn reason(&self, ended: Ended) -> Option<Reason> {
        if self.write_timed_out.load(Ordering::Relaxed) {
            return Some(Reason::WriteTimeout);
        }
        match ended {
            Ended::HeadTimeout if self.read_since_write.load(Ordering::Relaxed) == 0 => Some(Reason::Idle),
            Ended::HeadTimeout => Some(Reason::HeaderTimeout),
            Ended::Other => None,
        }
    }
}

/// A socket whose writes fail with `TimedOut` once one has waited `timeout`
/// without progress (the peer's receive window stayed full), so hyper ends
/// the connection; it also notes bytes read for [`Progress`].
struct Timed<S> {
    inner: S,
    timeout: Duration,
    /// Started by the first write that could not proceed; dropped by the
    /// next one that did.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    progress: Arc<Progress>,
}

impl<S> Timed<S> {
    fn new(inner: S, timeout: Duration) -> (Timed<S>, Arc<Progress>) {
        let progress = Arc::new(Progress::default());
        (
            Timed {
                inner,
                timeout,
                stall: None,
                progress: progress.clone(),
            },
            progress,
        )
    }

    /// A write is pending: pending still, or the error once it has been for
    /// `timeout`.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let timeout = self.timeout;
        let sleep = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.progress.write_timed_out.store(true, Ordering::Relaxed);
                Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client read nothing within the write timeout",
                )))
            }
        }
    }

    /// A write call came back: progress, or an error of its own.
    fn wrote<T>(&mut self, r: std::io::Result<T>) -> Poll<std::io::Result<T>> {
        if r.is_ok() {
            self.stall = None;
            self.progress.read_since_write.store(0, Ordering::Relaxed);
        }
        Poll::Ready(r)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Timed<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        if read > 0 {
            this.progress.read_since_write.fetch_add(read as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Timed<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => this.wrote(r),
            Poll::Pending => this.stalled(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => this.wrote(r),
            Poll::Pending => this.stalled(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.stalled(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.stalled(cx),
        }
    }
}

/// Every request is answered within [`REQUEST_TIMEOUT`]: a client that
/// trickles its body gets 408 and the connection is closed.
pub async fn request_timeout(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            let mut resp = super::error::ApiError::new(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the request was not completed in time",
            )
            .into_response();
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_client: usize, exempt: &[&str]) -> Limits {
        Limits {
            max_connections: total,
            max_connections_per_client: per_client,
            exempt: exempt.iter().map(|s| s.parse().expect("net")).collect(),
            timeouts: ConnectionTimeouts::default(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn a_client_holds_its_share_and_a_full_table_refuses_everyone() {
        let table = Table::default();
        let l = limits(5, 2, &[]);
        let a: Vec<Slot> = (0..2)
            .map(|_| admit(&table, ip("10.0.0.1"), &l).expect("slot"))
            .collect();
        assert_eq!(admit(&table, ip("10.0.0.1"), &l).err(), Some(Reason::PerClient));
        // The same address mapped into IPv6 is the same client.
        assert_eq!(admit(&table, ip("::ffff:10.0.0.1"), &l).err(), Some(Reason::PerClient));
        let b: Vec<Slot> = (0..2)
            .map(|_| admit(&table, ip("10.0.0.2"), &l).expect("slot"))
            .collect();
        let _c = admit(&table, ip("10.0.0.3"), &l).expect("slot");
        assert_eq!(admit(&table, ip("10.0.0.4"), &l).err(), Some(Reason::Full));
        // Slots come back when connections end.
        drop(a);
        let _a = admit(&table, ip("10.0.0.1"), &l).expect("slot again");
        drop(b);
        assert!(
            !lock(&table).by_client.contains_key(&ip("10.0.0.2")),
            "no entry left behind"
        );
        assert_eq!(lock(&table).total, 2);
    }

    #[test]
    fn ipv6_clients_count_by_slash_64_and_trusted_proxies_by_the_total_alone() {
        let table = Table::default();
        let l = limits(10, 1, &["10.9.0.0/16"]);
        let _one = admit(&table, ip("2001:db8:1:2::1"), &l).expect("slot");
        assert_eq!(
            admit(&table, ip("2001:db8:1:2:ffff::9"), &l).err(),
            Some(Reason::PerClient),
            "the same /64"
        );
        let _other = admit(&table, ip("2001:db8:1:3::1"), &l).expect("another /64");
        let proxied: Vec<Slot> = (0..8)
            .map(|_| admit(&table, ip("10.9.1.1"), &l).expect("proxy"))
            .collect();
        assert_eq!(admit(&table, ip("10.9.1.1"), &l).err(), Some(Reason::Full));
        drop(proxied);
    }

    #[test]
    fn the_metrics_listener_allows_a_quarter_of_its_cap_per_client() {
        assert_eq!(metrics_per_client(crate::config::DEFAULT_MAX_CONNECTIONS_PER_CLIENT), 8);
        assert_eq!(metrics_per_client(3), 3);
        assert_eq!(metrics_per_client(0), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_fails_after_the_timeout() {
        use tokio::io::AsyncWriteExt;
        // A pipe of 64 bytes whose reader never reads.
        let (ours, _theirs) = tokio::io::duplex(64);
        let (mut w, progress) = Timed::new(ours, Duration::from_secs(3));
        w.write_all(&[b'x'; 64]).await.expect("fits");
        let started = tokio::time::Instant::now();
        let e = w.write_all(b"more").await.expect_err("times out");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(progress.reason(Ended::Other), Some(Reason::WriteTimeout));
    }

    #[tokio::test(start_paused = true)]
    async fn a_header_timeout_is_idle_when_nothing_came_since_the_last_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let (mut s, progress) = Timed::new(ours, Duration::from_secs(3));
        assert_eq!(progress.reason(Ended::HeadTimeout), Some(Reason::Idle));
        theirs.write_all(b"GET / HT").await.expect("write");
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.expect("read");
        assert_eq!(n, 8);
        assert_eq!(progress.reason(Ended::HeadTimeout), Some(Reason::HeaderTimeout));
        s.write_all(b"HTTP/1.1 200 OK\r\n").await.expect("answer");
        assert_eq!(progress.reason(Ended::HeadTimeout), Some(Reason::Idle));
        assert_eq!(progress.reason(Ended::Other), None);
    }
}

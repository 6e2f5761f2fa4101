//! Serving a router on a listener with the limits a port open to a network
//! needs: at most [`Limits::max_connections`] connections at once (more wait
//! in the kernel's backlog, so a flood of idle sockets cannot take every file
//! descriptor the pollers need), a request head that must arrive within
//! [`Limits::header_timeout`] (a connection that sends half a request, or
//! nothing, is closed), and a whole request, body included, that must be
//! answered within [`REQUEST_TIMEOUT`] (see [`request_timeout`]).
//!
//! Each connection is one task holding one permit of the listener's
//! semaphore; stopping closes idle connections at once and lets a request in
//! progress finish.
//!
//! With a TLS configuration the connection's task first completes the
//! handshake (within [`Limits::header_timeout`], so a client that stalls
//! there holds its permit no longer than one that stalls on the request
//! head), then hyper serves the decrypted stream exactly as it serves TCP.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower_service::Service;

/// Time to send a whole request head, counted from the moment the server
/// waits for one (also between requests on a kept-alive connection).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to answer a request, its body read included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The metrics listener's connection cap: a few scrapers, never hundreds.
pub const METRICS_MAX_CONNECTIONS: usize = 32;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// Serve `router` on `listener` until `stop` turns true, then close idle
/// connections and return when the connections in progress have ended (the
/// caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: watch::Receiver<bool>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = tokio::task::JoinSet::new();
    let stopping = stopped(stop.clone());
    tokio::pin!(stopping);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut stopping => break,
        };
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
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let stop = stop.clone();
        let acceptor = acceptor.clone();
        connections.spawn(async move {
            let _permit = permit;
            match acceptor {
                None => serve_connection(stream, peer, router, limits, stop).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(stream));
                    let stream = tokio::select! {
                        r = handshake => match r {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        },
                        _ = stopped(stop.clone()) => return,
                    };
                    serve_connection(stream, peer, router, limits, stop).await
                }
            }
        });
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

/// One connection, plain or decrypted: requests until the client closes
/// it, or until `stop` (then the request in progress finishes).
async fn serve_connection<S>(stream: S, peer: SocketAddr, router: Router, limits: Limits, stop: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut router = router.clone();
        async move { router.call(req).await }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stopped(stop) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|v| *v).await;
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

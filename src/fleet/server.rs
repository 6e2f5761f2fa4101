//! The HTTP side of the fleet: routing, the per-behaviour answers, the control
//! API, and a listener whose connections all close when the fleet stops.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{any, get};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::body::HugeBody;
use super::{Behaviour, Instance, InstanceStatus, Shared, admit};

/// Largest request body a `Hung` instance reads before parking.
const HUNG_BODY_LIMIT: usize = 1024 * 1024;

/// The `InvalidUtf8` body: JSON-shaped, but 0xFF / 0xFE are never UTF-8.
static INVALID_UTF8: &[u8] = b"{\"value\":\"\xff\xfe\xc3\x28\"}";

/// Runs the server until `stop` turns true (or its sender is dropped).
pub(super) async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let app = Router::new()
        .route("/i/{name}", any(instance))
        .route("/i/{name}/{*rest}", any(instance))
        .route("/_control", get(control_list))
        .route("/_control/stats", get(control_stats))
        .route("/_control/{name}", get(control_show).put(control_set))
        .fallback(no_route)
        .with_state(shared);
    let mut signal = stop.clone();
    let listener = FleetListener { inner: listener, stop };
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = signal.wait_for(|stopped| *stopped).await;
        })
        .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "fleet server ended with an error");
    }
}

fn json_response(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON error body `{"error": error, "instance": instance}`.
fn error_response(status: StatusCode, error: &str, instance: Option<&str>) -> Response {
    #[derive(Serialize)]
    struct ErrorBody<'a> {
        error: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        instance: Option<&'a str>,
    }
    serialize_response(status, &ErrorBody { error, instance })
}

fn serialize_response(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => json_response(status, bytes),
        Err(e) => {
            tracing::warn!(error = %e, "cannot serialize fleet response");
            json_response(StatusCode::INTERNAL_SERVER_ERROR, r#"{"error":"serialization failed"}"#)
        }
    }
}

/// `/i/{name}` and `/i/{name}/{*rest}`: the instance name is taken straight
/// from the path (names are URL-unreserved characters, so no decoding).
async fn instance(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = request.uri().path();
    let name = path
        .strip_prefix("/i/")
        .map(|rest| rest.split('/').next().unwrap_or(rest))
        .unwrap_or_default();
    let Some(instance) = shared.by_name.get(name).cloned() else {
        return error_response(StatusCode::NOT_FOUND, "unknown instance", Some(name));
    };
    let hit = instance.hits.fetch_add(1, Ordering::Relaxed) + 1;
    answer(&shared, &instance, hit, request).await
}

/// 200 with the instance's healthy body, in the fleet's format; for an
/// instance that simulates an API, that API's answer for the path below
/// `/i/{name}` (404 when it has none).
fn healthy(shared: &Shared, instance: &Instance, uri: Option<&Uri>) -> Response {
    if let (Some(api), Some(uri)) = (instance.sim, uri) {
        let below = uri
            .path()
            .strip_prefix("/i/")
            .and_then(|rest| rest.strip_prefix(instance.name.as_str()))
            .unwrap_or_default();
        let below = if below.is_empty() { "/" } else { below };
        return match super::sim::answer(api, below, uri.query().unwrap_or_default(), shared.sim_tick()) {
            Some(body) => serialize_response(StatusCode::OK, &body),
            None => error_response(StatusCode::NOT_FOUND, "no such path", Some(&instance.name)),
        };
    }
    let mut response = Response::new(Body::from(instance.healthy_body.clone()));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(shared.format.content_type()));
    response
}

async fn answer(shared: &Shared, instance: &Instance, hit: u64, request: Request) -> Response {
    // Only simulated APIs read the path: the generic answers stay free of
    // any per-request copy.
    let uri = instance.sim.is_some().then(|| request.uri().clone());
    match instance.behaviour() {
        Behaviour::Healthy => healthy(shared, instance, uri.as_ref()),
        Behaviour::Changing => json_response(
            StatusCode::OK,
            format!(r#"{{"instance":"{}","status":"ok","seq":{hit}}}"#, instance.name),
        ),
        Behaviour::Slow { delay_ms } => {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            healthy(shared, instance, uri.as_ref())
        }
        Behaviour::Flapping { period_ms } => {
            let elapsed = shared.started.elapsed().as_millis();
            if (elapsed / u128::from(period_ms.max(1))) % 2 == 0 {
                healthy(shared, instance, uri.as_ref())
            } else {
                error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "service unavailable",
                    Some(&instance.name),
                )
            }
        }
        Behaviour::RateLimited {
            per_second,
            retry_after_secs,
        } => {
            let second = shared.started.elapsed().as_secs();
            if admit(&instance.window, second, per_second) {
                healthy(shared, instance, uri.as_ref())
            } else {
                let mut response = error_response(StatusCode::TOO_MANY_REQUESTS, "rate limited", Some(&instance.name));
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
                response
            }
        }
        Behaviour::ServerError => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal server error",
            Some(&instance.name),
        ),
        Behaviour::Unauthorized => {
            let mut response = error_response(StatusCode::UNAUTHORIZED, "unauthorized", Some(&instance.name));
            response.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"pollster-fleet\""),
            );
            response
        }
        Behaviour::Hung => hang(shared, request).await,
        Behaviour::Huge { bytes } => json_response(StatusCode::OK, Body::new(HugeBody::new(bytes))),
        Behaviour::InvalidUtf8 => json_response(StatusCode::OK, Bytes::from_static(INVALID_UTF8)),
        Behaviour::NotFound => error_response(StatusCode::NOT_FOUND, "not found", Some(&instance.name)),
    }
}

/// Reads the request body (so the connection's reader goes on watching for the
/// client closing), then never answers. The future is dropped when the client
/// closes the connection or the fleet stops.
async fn hang(shared: &Shared, request: Request) -> Response {
    struct Open<'a>(&'a Shared);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.0.hung_open.fetch_sub(1, Ordering::Relaxed);
        }
    }
    shared.hung_open.fetch_add(1, Ordering::Relaxed);
    let _open = Open(shared);
    let _ = axum::body::to_bytes(request.into_body(), HUNG_BODY_LIMIT).await;
    std::future::pending::<Response>().await
}

/// Anything else: `/i/...` paths the routes above miss (such as `/i/{name}/`)
/// still go to the instance; the rest is 404.
async fn no_route(state: State<Arc<Shared>>, request: Request) -> Response {
    if request.uri().path().starts_with("/i/") {
        instance(state, request).await
    } else {
        error_response(StatusCode::NOT_FOUND, "no such route", None)
    }
}

#[derive(Serialize)]
struct ControlList {
    instances: Vec<InstanceStatus>,
    total_hits: u64,
}

async fn control_list(State(shared): State<Arc<Shared>>) -> Response {
    let instances: Vec<InstanceStatus> = shared.order.iter().map(|i| i.status()).collect();
    let total_hits = instances.iter().map(|i| i.hits).sum();
    serialize_response(StatusCode::OK, &ControlList { instances, total_hits })
}

async fn control_stats(State(shared): State<Arc<Shared>>) -> Response {
    serialize_response(StatusCode::OK, &shared.stats())
}

async fn control_show(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    match shared.by_name.get(&name) {
        Some(instance) => serialize_response(StatusCode::OK, &instance.status()),
        None => error_response(StatusCode::NOT_FOUND, "unknown instance", Some(&name)),
    }
}

async fn control_set(State(shared): State<Arc<Shared>>, Path(name): Path<String>, body: Bytes) -> Response {
    let Some(instance) = shared.by_name.get(&name) else {
        return error_response(StatusCode::NOT_FOUND, "unknown instance", Some(&name));
    };
    match serde_json::from_slice::<Behaviour>(&body) {
        Ok(behaviour) => {
            instance.set_behaviour(behaviour);
            serialize_response(StatusCode::OK, &instance.status())
        }
        Err(e) => error_response(StatusCode::BAD_REQUEST, &format!("invalid behaviour: {e}"), Some(&name)),
    }
}

/// A TCP listener whose connections fail (and so close) as soon as the fleet
/// stops: hyper drops the request futures of a failed connection, so hung and
/// slow requests cannot keep the server, or the runtime, busy after a stop.
struct FleetListener {
    inner: TcpListener,
    stop: watch::Receiver<bool>,
}

impl axum::serve::Listener for FleetListener {
    type Io = StoppableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (StoppableStream, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                    }
                    return (StoppableStream::new(stream, self.stop.clone()), addr);
                }
                Err(e) => {
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    ) {
                        // E.g. out of file descriptors: back off a little.
                        tracing::warn!(error = %e, "fleet accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A TCP stream that errors with `ConnectionAborted` once the fleet stops.
struct StoppableStream {
    inner: TcpStream,
    stopped: Pin<Box<dyn Future<Output = ()> + Send>>,
    is_stopped: bool,
}

impl StoppableStream {
    fn new(inner: TcpStream, mut stop: watch::Receiver<bool>) -> StoppableStream {
        StoppableStream {
            inner,
            // A closed channel (the Fleet was dropped) counts as stopped too.
            stopped: Box::pin(async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            }),
            is_stopped: false,
        }
    }

    /// Registers the task for the stop signal; an error once it has fired.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.is_stopped && self.stopped.as_mut().poll(cx).is_ready() {
            self.is_stopped = true;
        }
        if self.is_stopped {
            Err(io::Error::new(io::ErrorKind::ConnectionAborted, "fleet stopped"))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for StoppableStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for StoppableStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

//! Delivery over HTTP: one POST of a batch, and what its answer means for
//! the batch.
//!
//! # Requests
//!
//! `POST url` with the body = the batch's lines concatenated (each ends with
//! `\n`), `Content-Type: application/x-ndjson`, the configured headers (their
//! values are secrets: marked sensitive, never logged or shown), and
//! `Content-Encoding: gzip` when `gzip` is on. Each request has a timeout of
//! [`REQUEST_TIMEOUT`] (connect to end of response). No proxy from the
//! environment, no redirects, no retries inside reqwest: only the core's
//! schedule retries.
//!
//! - 2xx: delivered.
//! - 408, 429, 5xx, and transport errors (connect, TLS, timeout…): retried on
//!   the schedule, the batch as it was.
//! - Any other status (3xx, 4xx): rejected; the batch is dropped at once and
//!   counted `rejected`.

use super::Outcome;
use crate::config::SinkConfig;
use crate::model::duration_str;
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// Timeout of one POST, from connecting to the end of the response.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of an error response's body goes into the error message.
const ERROR_BODY_CHARS: usize = 200;

/// Why a POST failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the event sink is disabled")]
    Disabled,
    /// The receiver answered with a non-2xx status.
    #[error("HTTP {status}{detail}")]
    Status { status: u16, detail: String },
    #[error("timed out after {}", duration_str::format(*.0))]
    Timeout(Duration),
    /// Connect, TLS, or a broken connection.
    #[error("{0}")]
    Transport(String),
    #[error("cannot compress the batch: {0}")]
    Encode(String),
}

impl SendError {
    /// Whether the batch should be retried: 408, 429, 5xx and every failure
    /// to get an answer.
    pub fn retryable(&self) -> bool {
        match self {
            SendError::Status { status, .. } => *status == 408 || *status == 429 || (500..600).contains(status),
            SendError::Disabled => false,
            SendError::Timeout(_) | SendError::Transport(_) | SendError::Encode(_) => true,
        }
    }

    /// The core's outcome for a batch that failed this way.
    pub(super) fn outcome(self) -> Outcome {
        if self.retryable() {
            Outcome::Retryable(self.to_string())
        } else {
            Outcome::Rejected(self.to_string())
        }
    }
}

/// Where and how to POST, derived from a config once per change.
pub(super) struct Target {
    pub(super) config: SinkConfig,
    /// Configured headers (values sensitive), content type and encoding.
    pub(super) headers: HeaderMap,
    pub(super) display_url: String,
}

impl Target {
    pub(super) fn new(config: SinkConfig) -> Target {
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let parsed = HeaderName::from_bytes(name.as_bytes())
                .ok()
                .zip(HeaderValue::from_str(value).ok());
            match parsed {
                Some((n, mut v)) => {
                    v.set_sensitive(true);
                    headers.insert(n, v);
                }
                // `SinkConfig::validate` refuses these; never log the value.
                None => tracing::warn!(header = %name, "event sink: invalid header skipped"),
            }
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
        if config.gzip {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        } else {
            headers.remove(CONTENT_ENCODING);
        }
        Target {
            display_url: display_url(&config.url),
            headers,
            config,
        }
    }
}

/// The URL with a password in it (`https://user:pass@host/`) masked.
fn display_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// The client every POST goes through: no proxy, no redirects.
pub(super) fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .user_agent(crate::poll::USER_AGENT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The request body: the lines concatenated, gzipped when asked.
fn encode(lines: &[String], gzip: bool) -> Result<Vec<u8>, SendError> {
    let len = lines.iter().map(String::len).sum();
    if !gzip {
        let mut body = Vec::with_capacity(len);
        for l in lines {
            body.extend_from_slice(l.as_bytes());
        }
        return Ok(body);
    }
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(len / 4 + 64), flate2::Compression::default());
    for l in lines {
        enc.write_all(l.as_bytes())
            .map_err(|e| SendError::Encode(e.to_string()))?;
    }
    enc.finish().map_err(|e| SendError::Encode(e.to_string()))
}

/// POST `lines` to `target` under `timeout` and classify the answer.
pub(super) async fn post(
    client: &Result<reqwest::Client, String>,
    target: &Target,
    lines: Arc<[String]>,
    timeout: Duration,
) -> Result<(), SendError> {
    let client = client.as_ref().map_err(|e| SendError::Transport(e.clone()))?;
    let gzip = target.config.gzip;
    let body = if gzip {
        // Compressing a large batch is CPU work: keep it off the runtime.
        tokio::task::spawn_blocking(move || encode(&lines, true))
            .await
            .map_err(|e| SendError::Encode(e.to_string()))??
    } else {
        encode(&lines, false)?
    };
    let request = client
        .post(&target.config.url)
        .headers(target.headers.clone())
        .timeout(timeout)
        .body(body);
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => return Err(transport_error(&e, timeout)),
    };
    let status = response.status();
    if status.is_success() {
        // Read the (normally tiny) answer so the connection can be reused.
        let _ = read_prefix(response, 0).await;
        return Ok(());
    }
    let mut detail = status.canonical_reason().map(|r| format!(" {r}")).unwrap_or_default();
    let text = read_prefix(response, ERROR_BODY_CHARS).await;
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !text.is_empty() {
        detail.push_str(": ");
        detail.push_str(&text);
    }
    Err(SendError::Status {
        status: status.as_u16(),
        detail,
    })
}

/// Up to `chars` characters of the body (reading at most a few KiB, up to
/// the request's timeout), lossy UTF-8.
async fn read_prefix(mut response: reqwest::Response, chars: usize) -> String {
    let mut buf = Vec::new();
    let cap = (chars * 4).max(1) + 4096;
    while buf.len() < cap {
        match response.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf).chars().take(chars).collect()
}

fn transport_error(e: &reqwest::Error, timeout: Duration) -> SendError {
    if e.is_timeout() {
        return SendError::Timeout(timeout);
    }
    // The innermost cause says the most ("connection refused"); the URL is
    // shown elsewhere and may hold a password.
    let mut message = if e.is_connect() {
        "connection failed".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    let mut last = None;
    while let Some(s) = source {
        last = Some(s.to_string());
        source = s.source();
    }
    if let Some(l) = last {
        message.push_str(": ");
        message.push_str(&l);
    }
    SendError::Transport(message)
}

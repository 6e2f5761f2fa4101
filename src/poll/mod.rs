//! HTTP(S) polling: one execution of an endpoint group against an instance.
//!
//! [`Poller::poll`] sends `GET <instance url>/<group path>` with the
//! instance's credentials, reads the body as a stream up to
//! `max_response_bytes`, and returns either a [`PollSuccess`] (status,
//! change-detection digest, size) or a classified [`PollError`] (§3). It
//! never panics and never takes longer than the instance timeout in total:
//! connect, TLS, headers and body all run under one deadline, and passing it
//! is a transient timeout.
//!
//! Clients: one shared [`reqwest::Client`] (system roots, keep-alive
//! connection reuse) serves every instance that verifies normally; instances
//! with a `tls_fingerprint` get a client pinned to that certificate, built
//! once per fingerprint and cached; instances with `tls_verify = false` share
//! one client that accepts any certificate. Redirects are never followed and
//! no proxy is taken from the environment.

pub mod classify;
pub mod tls;

#[cfg(test)]
mod tests;

use crate::model::{
    Auth, ErrorCategory, ErrorKind, GroupDef, InstanceConfig, PollError, PollResult, PollSuccess, parse_fingerprint,
};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

pub use classify::{classify_status, classify_transport, parse_retry_after};

/// `User-Agent` sent on every request.
pub const USER_AGENT: &str = concat!("pollster/", env!("CARGO_PKG_VERSION"));

/// How long an idle keep-alive connection is kept for reuse.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Failure to set up the HTTP machinery at startup.
#[derive(Debug, thiserror::Error)]
pub enum PollerError {
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// Executes polls. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Poller {
    /// Verifies against the system roots; shared by most instances.
    verified: reqwest::Client,
    /// One client per pinned certificate fingerprint.
    pinned: Mutex<HashMap<[u8; 32], reqwest::Client>>,
    /// Accepts any certificate (`tls_verify = false`); built on first use.
    insecure: Mutex<Option<reqwest::Client>>,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("pinned_clients", &lock(&self.pinned).len())
            .field("insecure_client", &lock(&self.insecure).is_some())
            .finish()
    }
}

impl Poller {
    pub fn new() -> Result<Poller, PollerError> {
        Ok(Poller {
            verified: base_builder().build()?,
            pinned: Mutex::new(HashMap::new()),
            insecure: Mutex::new(None),
        })
    }

    /// One execution of `group` against `instance`. Never panics; never
    /// exceeds `instance.timeout` in total.
    pub async fn poll(&self, instance: &InstanceConfig, group: &GroupDef) -> PollResult {
        let timeout = instance.timeout;
        match tokio::time::timeout(timeout, self.poll_inner(instance, group)).await {
            Ok(result) => result,
            Err(_) => Err(PollError::new(
                ErrorCategory::Transient,
                ErrorKind::Timeout,
                format!("timed out after {}", crate::model::duration_str::format(timeout)),
            )),
        }
    }

    async fn poll_inner(&self, instance: &InstanceConfig, group: &GroupDef) -> PollResult {
        let url = join_url(&instance.url, &group.path)?;
        let headers = request_headers(&instance.auth)?;
        let client = self.client_for(instance)?;

        let mut request = client.get(url).headers(headers);
        if let Auth::Basic { username, password } = &instance.auth {
            request = request.basic_auth(username, Some(password));
        }
        let mut response = request.send().await.map_err(|e| classify_transport(&e))?;

        let status = response.status().as_u16();
        if let Some((category, kind)) = classify_status(status) {
            return Err(status_error(&response, category, kind));
        }

        let limit = instance.max_response_bytes;
        if let Some(len) = response.content_length()
            && len > limit
        {
            return Err(too_large(limit));
        }
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        while let Some(chunk) = response.chunk().await.map_err(|e| classify_transport(&e))? {
            size = size.saturating_add(chunk.len() as u64);
            if size > limit {
                return Err(too_large(limit));
            }
            hasher.update(&chunk);
        }
        Ok(PollSuccess {
            status,
            digest: digest_prefix(&hasher.finalize()),
            body_bytes: size,
            ..PollSuccess::default()
        })
    }

    /// The client for an instance's TLS settings.
    fn client_for(&self, instance: &InstanceConfig) -> Result<reqwest::Client, PollError> {
        if !instance.tls_verify {
            let mut slot = lock(&self.insecure);
            if let Some(client) = slot.as_ref() {
                return Ok(client.clone());
            }
            let client = base_builder()
                .tls_danger_accept_invalid_certs(true)
                .build()
                .map_err(|e| client_error(&e))?;
            tracing::debug!("built HTTP client without certificate verification");
            *slot = Some(client.clone());
            return Ok(client);
        }
        let Some(fp_text) = &instance.tls_fingerprint else {
            return Ok(self.verified.clone());
        };
        let Some(fp) = parse_fingerprint(fp_text) else {
            return Err(PollError::new(
                ErrorCategory::Permanent,
                ErrorKind::Tls,
                "invalid tls_fingerprint: expected 64 hex digits (SHA-256), colons allowed",
            ));
        };
        let mut cache = lock(&self.pinned);
        if let Some(client) = cache.get(&fp) {
            return Ok(client.clone());
        }
        let config = tls::pinned_config(fp).map_err(|e| {
            PollError::new(
                ErrorCategory::Permanent,
                ErrorKind::Tls,
                classify::one_line(&format!("cannot set up TLS: {e}")),
            )
        })?;
        let client = base_builder()
            .tls_backend_preconfigured(config)
            .build()
            .map_err(|e| client_error(&e))?;
        tracing::debug!(fingerprint = %tls::format_fingerprint(&fp), "built pinned HTTP client");
        cache.insert(fp, client.clone());
        Ok(client)
    }
}

/// Join an instance base URL and a group path with exactly one slash.
/// An empty path is the base itself. Only `http` and `https` URLs with a
/// host are accepted; anything else is `Permanent`/`InvalidUrl`.
pub fn join_url(base: &str, path: &str) -> Result<reqwest::Url, PollError> {
    let invalid = |why: String| {
        PollError::new(
            ErrorCategory::Permanent,
            ErrorKind::InvalidUrl,
            classify::one_line(&why),
        )
    };
    let mut url = reqwest::Url::parse(base.trim()).map_err(|e| invalid(format!("invalid url {base:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid(format!(
            "invalid url {base:?}: must be http:// or https:// with a host"
        )));
    }
    if path.is_empty() {
        return Ok(url);
    }
    // The group path may carry its own query string; the base's is dropped.
    url.set_query(None);
    url.set_fragment(None);
    let joined = format!(
        "{}/{}",
        url.as_str().trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    reqwest::Url::parse(&joined).map_err(|e| invalid(format!("invalid url {joined:?}: {e}")))
}

/// Client settings shared by every client the poller builds.
fn base_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
}

/// `Accept` plus the instance's credentials (except basic auth, which
/// reqwest encodes). Values that are not valid header bytes are
/// `Permanent`/`InvalidCredentials`.
fn request_headers(auth: &Auth) -> Result<HeaderMap, PollError> {
    let mut headers = HeaderMap::new();
    headers.insert(ACCEPT, HeaderValue::from_static("application/json, */*"));
    let bad = |what: &str| {
        PollError::new(
            ErrorCategory::Permanent,
            ErrorKind::InvalidCredentials,
            format!("invalid credentials: {what} is not a valid HTTP header value"),
        )
    };
    let secret = |v: String, what: &str| -> Result<HeaderValue, PollError> {
        let mut value = HeaderValue::from_str(&v).map_err(|_| bad(what))?;
        value.set_sensitive(true);
        Ok(value)
    };
    match auth {
        Auth::None | Auth::Basic { .. } => {}
        Auth::Bearer { token } => {
            headers.insert(AUTHORIZATION, secret(format!("Bearer {token}"), "the bearer token")?);
        }
        Auth::Header { name, value } => {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                PollError::new(
                    ErrorCategory::Permanent,
                    ErrorKind::InvalidCredentials,
                    "invalid credentials: the auth header name is not a valid HTTP header name",
                )
            })?;
            headers.insert(name, secret(value.clone(), "the auth header value")?);
        }
        Auth::PveToken {
            user,
            token_id,
            secret: token_secret,
        } => {
            headers.insert(
                AUTHORIZATION,
                secret(format!("PVEAPIToken={user}!{token_id}={token_secret}"), "the API token")?,
            );
        }
    }
    Ok(headers)
}

/// A classified error for a non-2xx response. The body is not read.
fn status_error(response: &reqwest::Response, category: ErrorCategory, kind: ErrorKind) -> PollError {
    let status = response.status().as_u16();
    let mut message = classify::status_message(status);
    if (300..400).contains(&status)
        && let Some(location) = response.headers().get(LOCATION).and_then(|v| v.to_str().ok())
    {
        message = classify::one_line(&format!("{message}, Location: {location}"));
    }
    let retry_after = if matches!(status, 429 | 503) {
        response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()))
    } else {
        None
    };
    PollError {
        category,
        kind,
        message,
        status: Some(status),
        retry_after,
    }
}

fn too_large(limit: u64) -> PollError {
    PollError::new(
        ErrorCategory::Permanent,
        ErrorKind::Body,
        format!("response larger than {limit} bytes (max_response_bytes)"),
    )
}

fn client_error(err: &reqwest::Error) -> PollError {
    PollError::new(
        ErrorCategory::Permanent,
        ErrorKind::Other,
        classify::one_line(&format!("cannot build the HTTP client: {err}")),
    )
}

/// First 8 bytes of a SHA-256, big-endian.
fn digest_prefix(sha: &[u8]) -> u64 {
    let mut first = [0u8; 8];
    for (dst, src) in first.iter_mut().zip(sha) {
        *dst = *src;
    }
    u64::from_be_bytes(first)
}

/// Lock a mutex, recovering from poisoning (the data is a plain cache).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

//! HTTP(S) polling: one execution of an endpoint group against an instance.
//!
//! [`Poller::poll`] sends `GET <instance url>/<group path>` with the
//! instance's credentials, reads the body as a stream up to
//! `max_response_bytes`, and returns either a [`PollSuccess`] (status,
//! change-detection digest, size) or a classified [`PollError`] (§3). It
//! never panics and never takes longer than [`deadline`] in total: for a
//! normal group that is the instance timeout, under which connect, TLS,
//! headers and body all run; passing it is a transient timeout.
//!
//! Bodies are hashed as they stream in and dropped, unless the group needs
//! them; then they are also buffered (still within `max_response_bytes`):
//!
//! - `shape_from`: the body is parsed as JSON, and the array its pointer
//!   names gives [`PollSuccess::shape`] (count and `item_field` values; see
//!   [`shape`]). A body that is not JSON or a pointer that names no array is
//!   a transient `body` error.
//! - value rules: the body is parsed as JSON (once, shared with
//!   `shape_from`) and returned as [`PollSuccess::json`] for the rules to
//!   run on. A body that is not JSON is a transient `body` error.
//! - `forward`: the bytes are returned as [`PollSuccess::body`].
//! - `keep_body`: the bytes and the `Content-Type` are returned as
//!   [`PollSuccess::kept_body`] if the body is at most `max_body_bytes`;
//!   a larger body is not kept ([`KeptBody::TooLarge`]) and the poll still
//!   succeeds. Buffering for `keep_body` alone stops once the body is over
//!   that limit.
//!
//! A group with none of these keeps no bytes at all.
//!
//! A `fan_out` group runs once per item passed to [`Poller::poll`] (the
//! items learned by the group it names): `{item}` in the path becomes the
//! item, percent-encoded as one path segment, and each item is a normal
//! request (credentials, size limit, classification) under its own instance
//! timeout, at most [`FAN_OUT_CONCURRENCY`] at a time, so the run takes at
//! most `timeout × ceil(items / 8)`. If any item succeeds the run succeeds
//! (status of the first success, a digest over the successful items'
//! digests in item order, the summed size) and lists the failed items in
//! [`PollSuccess::failed_items`]; if all fail it is the first item's error,
//! prefixed `all N items failed; first (ITEM): `. No items yet is a
//! transient error. A fan-out group's responses are not parsed for a shape;
//! with value rules each item's body is parsed (an item whose body is not
//! JSON is a failed item), and the parsed and kept bodies come back per
//! successful item, in item order ([`Polled::Items`]).
//!
//! Clients: one shared [`reqwest::Client`] (system roots, keep-alive
//! connection reuse) serves every instance that verifies normally; instances
//! with a `tls_fingerprint` get a client pinned to that certificate, built
//! once per fingerprint and cached; instances with `tls_verify = false` share
//! one client that accepts any certificate. Redirects are never followed and
//! no proxy is taken from the environment.

pub mod classify;
pub mod shape;
pub mod tls;

#[cfg(test)]
mod tests;

use crate::model::{
    Auth, BaseUrl, Clock, ErrorCategory, ErrorKind, FailedItem, GroupDef, InstanceConfig, KeptBody, PollError,
    PollResult, PollSuccess, Polled, PolledJson, SystemClock, parse_fingerprint,
};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use crate::values::lookup::Rows;

/// A request's outcome, with a fan-out item's lookup rows.
type Fetched = Result<(PollSuccess, Option<Rows>), PollError>;

pub use classify::{classify_status, classify_transport, parse_retry_after, response_error};

/// `User-Agent` sent on every request.
pub const USER_AGENT: &str = concat!("pollster/", env!("CARGO_PKG_VERSION"));

/// How long an idle keep-alive connection is kept for reuse.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Most requests a fan-out run has in flight at once.
pub const FAN_OUT_CONCURRENCY: usize = 8;

/// Most bytes reserved up front for a buffered body, whatever its
/// `Content-Length` claims; the buffer grows past it as bytes arrive.
const MAX_BODY_PREALLOC: u64 = 1 << 20;

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
    /// Where a `Retry-After` date is measured from: the engine's clock.
    clock: Arc<dyn Clock>,
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
            clock: Arc::new(SystemClock),
        })
    }

    /// This poller, reading the time (for a `Retry-After` date) from
    /// `clock` instead of the wall clock.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Poller {
        Poller { clock, ..self }
    }

    /// One execution of `group` against `instance`. Never panics; never
    /// takes longer than [`deadline`] in total (`instance.timeout`
    /// for a group without `fan_out`).
    ///
    /// `items` is the fan-out list (the items learned by the group named in
    /// `group.fan_out`); it is ignored for other groups.
    pub async fn poll(&self, instance: &InstanceConfig, group: &GroupDef, items: &[String]) -> PollResult {
        self.poll_with_base(instance, None, group, items).await
    }

    /// [`Poller::poll`] with the instance URL already parsed by
    /// [`parse_base`] (`None`: parse `instance.url` here).
    pub async fn poll_with_base(
        &self,
        instance: &InstanceConfig,
        base: Option<&BaseUrl>,
        group: &GroupDef,
        items: &[String],
    ) -> PollResult {
        let parsed;
        let base = match base {
            Some(b) => b,
            None => {
                parsed = parse_base(&instance.url)?;
                &parsed
            }
        };
        let rooted;
        let base = match &group.api_root {
            None => base,
            Some(root) => {
                rooted = rooted_base(base, root)?;
                &rooted
            }
        };
        if let Some(source) = &group.fan_out {
            return self.poll_fan_out(instance, base, group, source, items).await;
        }
        self.fetch_timed(instance, base, &group.path, BodyUse::of(group), instance.timeout)
            .await
            .map(|(ok, _)| ok)
    }

    /// One request under a timeout of `timeout` (connect, TLS, headers,
    /// body and shape parsing all count).
    async fn fetch_timed(
        &self,
        instance: &InstanceConfig,
        base: &BaseUrl,
        path: &str,
        uses: BodyUse<'_>,
        timeout: Duration,
    ) -> Fetched {
        match tokio::time::timeout(timeout, self.fetch(instance, base, path, uses)).await {
            Ok(result) => result,
            Err(_) => Err(timeout_error(instance.timeout)),
        }
    }

    /// `GET <instance url>/<path>`: status classification, the size limit
    /// and the digest; the body is also buffered, parsed and returned as
    /// `uses` asks. A fan-out item's lookup rows come beside the success,
    /// for the fan-out to learn over all its items.
    async fn fetch(&self, instance: &InstanceConfig, base: &BaseUrl, path: &str, uses: BodyUse<'_>) -> Fetched {
        let url = join_parsed(base, path)?;
        let headers = request_headers(&instance.auth)?;
        let client = self.client_for(instance)?;

        let mut request = client.get(url).headers(headers);
        if let Auth::Basic { username, password } = &instance.auth {
            request = request.basic_auth(username, Some(password.expose()));
        }
        let mut response = request.send().await.map_err(|e| classify_transport(&e))?;

        let status = response.status().as_u16();
        if let Some(error) = classify::response_error(status, response.headers(), self.clock.now().to_system_time()) {
            return Err(error);
        }

        let limit = instance.max_response_bytes;
        if let Some(len) = response.content_length()
            && len > limit
        {
            return Err(too_large(limit));
        }
        let content_type = uses.keep.map(|_| content_type_of(response.headers()));
        // A body wanted whole (parsed or forwarded) is buffered to the end; one
        // wanted only for `keep_body` is buffered while it is within
        // `max_body_bytes`. Any other body is hashed and dropped chunk by chunk.
        let whole = uses.wants_whole();
        let keep_limit = if whole { None } else { uses.keep };
        let declared = response.content_length();
        let buffer = whole || keep_limit.is_some_and(|k| declared.is_none_or(|len| len <= k));
        let mut kept: Option<Vec<u8>> = buffer.then(|| {
            let hint = declared.unwrap_or(0).min(MAX_BODY_PREALLOC);
            Vec::with_capacity(usize::try_from(hint).unwrap_or(0))
        });
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        while let Some(chunk) = response.chunk().await.map_err(|e| classify_transport(&e))? {
            size = size.saturating_add(chunk.len() as u64);
            if size > limit {
                return Err(too_large(limit));
            }
            hasher.update(&chunk);
            if keep_limit.is_some_and(|k| size > k) {
                kept = None;
            } else if let Some(body) = kept.as_mut() {
                body.extend_from_slice(&chunk);
            }
        }

        // One parse serves the shape, the facts and the value rules.
        let learns = !uses.facts.is_empty() || !uses.lookups.is_empty();
        let doc = match (uses.shape, uses.json || learns) {
            (None, false) => None,
            (shape, _) => {
                let context = match shape {
                    Some(spec) => shape::shape_context(spec.pointer),
                    None if uses.json => "value rules".to_owned(),
                    None => "facts".to_owned(),
                };
                Some(shape::parse_json(kept.as_deref().unwrap_or_default(), &context)?)
            }
        };
        let shape = match (uses.shape, &doc) {
            (Some(spec), Some(doc)) => Some(shape::shape_in(doc, spec.pointer, spec.items)?),
            _ => None,
        };
        let (facts, rows) = match (&doc, uses.item) {
            (Some(doc), None) if learns => (Some(crate::values::lookup::learn(doc, uses.facts, uses.lookups)), None),
            (Some(doc), Some(item)) if learns => {
                let mut rows = Rows::default();
                rows.add(doc, Some(item), uses.lookups);
                (None, Some(rows))
            }
            _ => (None, None),
        };
        let json = if uses.json { doc.map(Polled::One) } else { None };
        // A body received whole is its `Content-Length` long (hyper ends it
        // there), so one declared over `max_body_bytes` and not buffered is
        // over it here too.
        let kept_body = match uses.keep {
            None => None,
            Some(max) if size > max => Some(Polled::One(KeptBody::TooLarge { bytes: size })),
            Some(_) => {
                // Both `forward` and `keep_body`: the only case with a copy.
                let bytes = if uses.forward { kept.clone() } else { kept.take() };
                Some(Polled::One(KeptBody::Kept {
                    content_type: content_type.unwrap_or_default(),
                    bytes: bytes.unwrap_or_default(),
                }))
            }
        };
        Ok((
            PollSuccess {
                status,
                digest: digest_prefix(&hasher.finalize()),
                body_bytes: size,
                shape,
                failed_items: Vec::new(),
                body: if uses.forward { kept } else { None },
                json,
                kept_body,
                facts,
            },
            rows,
        ))
    }

    /// A fan-out run: one request per item, at most [`FAN_OUT_CONCURRENCY`]
    /// at a time, each under its own instance timeout.
    async fn poll_fan_out(
        &self,
        instance: &InstanceConfig,
        base: &BaseUrl,
        group: &GroupDef,
        source: &str,
        items: &[String],
    ) -> PollResult {
        if items.is_empty() {
            return Err(PollError::new(
                ErrorCategory::Transient,
                ErrorKind::Body,
                format!("fan-out over {source:?}: no items known yet"),
            ));
        }
        // The sliding window keeps the run within `deadline` by itself (see
        // `run_bounded`); capping each item at the time left makes the bound
        // hold against timer slack too.
        let end = tokio::time::Instant::now().checked_add(deadline(instance, group, items.len()));
        let results = run_bounded(items.len(), FAN_OUT_CONCURRENCY, |i| {
            self.poll_item(instance, base, group, &items[i], end)
        })
        .await;
        combine_fan_out(items, results, &group.lookups)
    }

    /// One item of a fan-out: the group path with `{item}` filled in, as a
    /// normal poll (no shape is parsed; value rules, `forward` and
    /// `keep_body` apply to the item's body), under the instance timeout or
    /// the time left until `end`, whichever is shorter.
    async fn poll_item(
        &self,
        instance: &InstanceConfig,
        base: &BaseUrl,
        group: &GroupDef,
        item: &str,
        end: Option<tokio::time::Instant>,
    ) -> Fetched {
        let path = shape::item_path(&group.path, item)?;
        let timeout = match end {
            Some(end) => instance
                .timeout
                .min(end.saturating_duration_since(tokio::time::Instant::now())),
            None => instance.timeout,
        };
        let uses = BodyUse {
            shape: None,
            item: Some(item),
            ..BodyUse::of(group)
        };
        self.fetch_timed(instance, base, &path, uses, timeout).await
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

/// The longest a [`Poller::poll`] of `group` with `items` fan-out items
/// can take: `instance.timeout` for a normal group (and for a fan-out
/// with no items), `instance.timeout × ceil(items / 8)` for a fan-out.
/// Callers that add their own safety timeout should base it on this.
pub fn deadline(instance: &InstanceConfig, group: &GroupDef, items: usize) -> Duration {
    if group.fan_out.is_none() || items == 0 {
        return instance.timeout;
    }
    let rounds = items.div_ceil(FAN_OUT_CONCURRENCY);
    instance
        .timeout
        .saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX))
}

/// Join an instance base URL and a group path with exactly one slash.
/// An empty path is the base itself. Only `http` and `https` URLs with a
/// host are accepted; anything else is `Permanent`/`InvalidUrl`.
pub fn join_url(base: &str, path: &str) -> Result<reqwest::Url, PollError> {
    join_parsed(&parse_base(base)?, path)
}

/// The instance URL, parsed and checked (http or https, with a host), with
/// a failure classified as `Permanent`/`InvalidUrl`. The catalog parses it
/// once per instance, not once per poll.
pub fn parse_base(base: &str) -> Result<BaseUrl, PollError> {
    BaseUrl::parse(base).map_err(|e| invalid_url(format!("invalid url {base:?}: {}", e.message)))
}

/// The base a group with `api_root = root` joins its path to: the
/// instance URL cut after `root` ([`BaseUrl::under_root`]). An instance
/// URL without it is `Permanent`/`InvalidUrl`, naming both.
pub fn rooted_base(base: &BaseUrl, root: &str) -> Result<BaseUrl, PollError> {
    base.under_root(root).ok_or_else(|| {
        invalid_url(format!(
            "the group's api_root {root:?} is not in the instance url {:?}",
            base.as_url().as_str()
        ))
    })
}

/// A parsed instance URL joined with a group path, as [`join_url`] does.
pub fn join_parsed(base: &BaseUrl, path: &str) -> Result<reqwest::Url, PollError> {
    if path.is_empty() {
        return Ok(base.as_url().clone());
    }
    // The group path may carry its own query string; the base's is dropped.
    let mut url = base.as_url().clone();
    url.set_query(None);
    url.set_fragment(None);
    let joined = format!(
        "{}/{}",
        url.as_str().trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    reqwest::Url::parse(&joined).map_err(|e| invalid_url(format!("invalid url {joined:?}: {e}")))
}

fn invalid_url(why: String) -> PollError {
    PollError::new(
        ErrorCategory::Permanent,
        ErrorKind::InvalidUrl,
        classify::one_line(&why),
    )
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
        Auth::None {} | Auth::Basic { .. } => {}
        Auth::Bearer { token } => {
            headers.insert(
                AUTHORIZATION,
                secret(format!("Bearer {}", token.expose()), "the bearer token")?,
            );
        }
        Auth::Header { name, value } => {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                PollError::new(
                    ErrorCategory::Permanent,
                    ErrorKind::InvalidCredentials,
                    "invalid credentials: the auth header name is not a valid HTTP header name",
                )
            })?;
            headers.insert(name, secret(value.expose().to_owned(), "the auth header value")?);
        }
        Auth::PveToken {
            user,
            token_id,
            secret: token_secret,
        } => {
            headers.insert(
                AUTHORIZATION,
                secret(
                    format!("PVEAPIToken={user}!{token_id}={}", token_secret.expose()),
                    "the API token",
                )?,
            );
        }
    }
    Ok(headers)
}

fn timeout_error(timeout: Duration) -> PollError {
    PollError::new(
        ErrorCategory::Transient,
        ErrorKind::Timeout,
        format!("timed out after {}", crate::model::duration_str::format(timeout)),
    )
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

/// What a `shape_from` group asks of its body.
#[derive(Debug, Clone, Copy)]
struct ShapeSpec<'a> {
    pointer: &'a str,
    items: shape::ItemNames<'a>,
}

/// What a request does with its body beyond the digest and the size.
#[derive(Debug, Clone, Copy)]
struct BodyUse<'a> {
    /// `shape_from`: parse it and read the shape.
    shape: Option<ShapeSpec<'a>>,
    /// Value rules: parse it and return the document.
    json: bool,
    /// `facts`: parse it and read them.
    facts: &'a std::collections::BTreeMap<String, String>,
    /// `lookups`: parse it and read their rows.
    lookups: &'a std::collections::BTreeMap<String, crate::values::Lookup>,
    /// `forward`: return the bytes.
    forward: bool,
    /// The fan-out item the body belongs to: its lookup rows are returned
    /// beside the success, not learned as facts of their own.
    item: Option<&'a str>,
    /// `keep_body`: return the bytes and content type if the body is at
    /// most this many bytes (`max_body_bytes`).
    keep: Option<u64>,
}

impl<'a> BodyUse<'a> {
    fn of(group: &'a GroupDef) -> Self {
        BodyUse {
            shape: group.shape_from.as_deref().map(|pointer| ShapeSpec {
                pointer,
                items: if group.item_fields.is_empty() {
                    group.item_field.as_deref().into()
                } else {
                    shape::ItemNames::Fields(&group.item_fields)
                },
            }),
            json: !group.values.is_empty(),
            facts: &group.facts,
            lookups: &group.lookups,
            forward: group.forward,
            item: None,
            keep: group.keep_body.then_some(group.max_body_bytes),
        }
    }

    /// Whether the whole body is needed, whatever its size.
    fn wants_whole(&self) -> bool {
        self.shape.is_some() || self.json || !self.facts.is_empty() || !self.lookups.is_empty() || self.forward
    }
}

/// A response's `Content-Type` as text (invalid UTF-8 replaced); empty if
/// it has none.
fn content_type_of(headers: &HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default()
}

/// The outcome of a fan-out from its items' results, in item order: a
/// success if any item succeeded (status of the first success, a digest over
/// the successful `(item, digest)` pairs, the summed size, the failed items,
/// the successful items' parsed and kept bodies), else the first item's
/// error with its message prefixed by `all N items failed; first (ITEM): `.
/// The lookup tables are learned over the successful items' rows.
fn combine_fan_out(
    items: &[String],
    results: Vec<Fetched>,
    lookups: &std::collections::BTreeMap<String, crate::values::Lookup>,
) -> PollResult {
    let mut rows: Option<Rows> = None;
    let mut status = None;
    let mut hasher = Sha256::new();
    let mut body_bytes: u64 = 0;
    let mut failed = Vec::new();
    let mut bodies: Option<serde_json::Map<String, serde_json::Value>> = None;
    let mut docs: Option<Vec<(String, serde_json::Value)>> = None;
    let mut kept: Option<Vec<(String, KeptBody)>> = None;
    for (item, result) in items.iter().zip(results) {
        match result {
            Ok((ok, item_rows)) => {
                if let Some(r) = item_rows {
                    rows.get_or_insert_with(Rows::default).extend(r);
                }
                status.get_or_insert(ok.status);
                if let Some(body) = &ok.body {
                    let value = match &ok.json {
                        // Already parsed for the value rules.
                        Some(Polled::One(doc)) => doc.clone(),
                        _ => serde_json::from_slice(body)
                            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into_owned())),
                    };
                    bodies.get_or_insert_with(Default::default).insert(item.clone(), value);
                }
                if let Some(json) = ok.json {
                    gather(&mut docs, item, json);
                }
                if let Some(body) = ok.kept_body {
                    gather(&mut kept, item, body);
                }
                // Length-prefixed, so the byte stream is unambiguous.
                hasher.update((item.len() as u64).to_be_bytes());
                hasher.update(item.as_bytes());
                hasher.update(ok.digest.to_be_bytes());
                body_bytes = body_bytes.saturating_add(ok.body_bytes);
            }
            Err(error) => failed.push(FailedItem {
                item: item.clone(),
                error,
            }),
        }
    }
    if let Some(status) = status {
        return Ok(PollSuccess {
            status,
            digest: digest_prefix(&hasher.finalize()),
            body_bytes,
            shape: None,
            failed_items: failed,
            body: bodies.map(|b| serde_json::Value::Object(b).to_string().into_bytes()),
            json: docs.map(PolledJson::Items),
            kept_body: kept.map(Polled::Items),
            facts: rows.map(|r| r.into_facts(lookups)),
        });
    }
    let n = failed.len();
    let Some(FailedItem { item, mut error }) = failed.into_iter().next() else {
        // Unreachable: `items` is never empty here.
        return Err(PollError::new(
            ErrorCategory::Transient,
            ErrorKind::Other,
            "fan-out ran no items",
        ));
    };
    error.message = format!(
        "all {n} items failed; first ({}): {}",
        shape::display_item(&item),
        error.message
    );
    Err(error)
}

/// Add one item's [`Polled`] to a fan-out's list (an item's request gives
/// [`Polled::One`]).
fn gather<T>(list: &mut Option<Vec<(String, T)>>, item: &str, polled: Polled<T>) {
    let list = list.get_or_insert_with(Vec::new);
    match polled {
        Polled::One(value) => list.push((item.to_owned(), value)),
        Polled::Items(values) => list.extend(values),
    }
}

/// Run `make(0) .. make(n - 1)` with at most `limit` of them in flight, a
/// new one starting as soon as one ends, and return their outputs in index
/// order.
///
/// Why hand-rolled: the futures borrow the poller, the instance and the
/// items, so they cannot be spawned on a `JoinSet` (which needs `'static`),
/// and `futures` is not a dependency. A sliding window rather than chunks of
/// `limit`: with every future bounded by a timeout `T`, each slot finishes
/// one future per `T` at least, so all `n` have started by
/// `(ceil(n / limit) - 1) × T` and the run ends within `ceil(n / limit) × T`
/// (the chunked bound), while a slow item holds up only its own slot. Every
/// in-flight future is polled on each wake-up, which is cheap for `limit`
/// = 8. Dropping the returned future drops (cancels) those in flight.
async fn run_bounded<F, Fut, T>(n: usize, limit: usize, mut make: F) -> Vec<T>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = T>,
{
    let limit = limit.max(1);
    let mut running: Vec<(usize, Pin<Box<Fut>>)> = Vec::with_capacity(limit.min(n));
    let mut done: Vec<(usize, T)> = Vec::with_capacity(n);
    let mut next = 0;
    std::future::poll_fn(|cx| {
        loop {
            while running.len() < limit && next < n {
                running.push((next, Box::pin(make(next))));
                next += 1;
            }
            let before = done.len();
            let mut i = 0;
            while i < running.len() {
                if let Poll::Ready(out) = running[i].1.as_mut().poll(cx) {
                    let (index, _) = running.swap_remove(i);
                    done.push((index, out));
                } else {
                    i += 1;
                }
            }
            if running.is_empty() && next >= n {
                return Poll::Ready(());
            }
            if done.len() == before {
                return Poll::Pending;
            }
        }
    })
    .await;
    done.sort_by_key(|(index, _)| *index);
    done.into_iter().map(|(_, out)| out).collect()
}

/// Lock a mutex, recovering from poisoning (the data is a plain cache).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

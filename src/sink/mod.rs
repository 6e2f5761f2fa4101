//! The event sink (§5): poll results, breaker transitions, dead-letter moves,
//! settings and operator actions shipped as NDJSON batches by HTTP POST.
//!
//! - [`Event`] (in [`event`]) is the stable schema, one JSON line per event.
//! - [`SinkCore`] (in [`core`]) is the pure state machine: queue, batching,
//!   the batch in flight and the retry schedule of §5.
//! - [`Sink`] is the handle the engine and the web layer share: [`Sink::emit`]
//!   serializes an event and queues it under a mutex (never waits for I/O),
//!   and one driver task ([`Sink::start`]) POSTs batches when the core says
//!   so. Only this layer reads the wall clock.
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
//!
//! # Change events: the outbox
//!
//! Change events (breaker, dead-letter, settings, operator) do not go
//! through [`Sink::emit`]: [`Sink::stage`] gives each an `id` and makes it an
//! outbox row, which the caller writes in the same store transaction as the
//! change itself (`Store::*_with_events`). The store tells the sink of the
//! commit ([`Sink::attach_outbox`] sets that up), and the driver reads the
//! outbox in pages into the core's window (see [`core`]), sends those lines
//! first in each batch, and deletes their rows only after a 2xx for the
//! batch. A row whose delivery was not confirmed is sent again, with the
//! same `id`, after a failure, a rejection, or a restart: at least once.
//!
//! While the sink is off nothing is staged, and the outbox is cleared (at
//! start and when the sink is turned off), its rows counted `dropped_queue`,
//! so rows never pile up for a receiver that is not configured.
//!
//! # Life cycle
//!
//! [`Sink::new`] builds a handle (disabled when the config is `None`);
//! [`Sink::attach_outbox`] connects it to the store; [`Sink::start`] spawns
//! the driver; [`Sink::reconfigure`] applies a new
//! config live; [`Sink::shutdown`] stops the driver and flushes what is left,
//! in batches, stopping at the first failure or when its time is up. After
//! shutdown, [`Sink::emit`] does nothing.

pub mod core;
pub mod event;
pub mod metrics;

#[cfg(test)]
mod tests;

pub use self::core::{Batch, Batches, Counters, Limits, Next, OutboxRead, Outcome, Settled, SinkCore};
pub use event::{
    BreakerEvent, DeadLetterAction, DeadLetterEvent, Event, EventKind, PollEvent, SettingsSection, rfc3339_millis,
};
pub use metrics::SinkMetrics;

use crate::config::SinkConfig;
use crate::model::{Timestamp, duration_str};
use crate::store::{OutboxEvent, Store};
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::{AbortHandle, JoinHandle};

/// Timeout of one POST, from connecting to the end of the response.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest the driver sleeps before looking again, so a wall-clock jump
/// cannot stall it.
const MAX_SLEEP: Duration = Duration::from_secs(1);

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

    fn outcome(self) -> Outcome {
        if self.retryable() {
            Outcome::Retryable(self.to_string())
        } else {
            Outcome::Rejected(self.to_string())
        }
    }
}

/// The sink's state for the status page and `GET /api/settings/sink`-like
/// endpoints. Header values are never included, only their names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SinkStatus {
    pub enabled: bool,
    /// The configured URL, with any password in it masked; null when disabled.
    pub url: Option<String>,
    /// Names of the configured headers (never their values).
    pub headers: Vec<String>,
    pub batch_size: Option<usize>,
    /// E.g. `"2s"`.
    pub buffering: Option<String>,
    /// E.g. `"10m"`.
    pub retry_limit: Option<String>,
    pub queue_limit: Option<usize>,
    pub gzip: bool,
    /// Events held in memory and not yet delivered (queued, change events
    /// read from the outbox, and the batch being sent).
    pub queue_depth: usize,
    /// Change events stored in the outbox and not yet delivered.
    pub outbox_depth: u64,
    /// Failed attempts since the last success.
    pub consecutive_failures: u64,
    /// The current wait between attempts after a failure; 0 while healthy.
    pub retry_wait_ms: u64,
    /// When the next attempt after a failure is due (RFC 3339); null while healthy.
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    pub last_success_at: Option<String>,
    pub last_failure_at: Option<String>,
    pub counters: Counters,
    pub batches: Batches,
}

/// The shipping end of the sink: cheap to clone, every method takes `&self`.
#[derive(Clone)]
pub struct Sink {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.inner.state);
        f.debug_struct("Sink")
            .field("url", &st.target.as_ref().map(|t| &t.display_url))
            .field("depth", &st.core.depth())
            .field("stopped", &st.stopped)
            .finish()
    }
}

struct Inner {
    state: Mutex<State>,
    /// A config is set and the sink is not shut down: emit's lock-free check.
    enabled: AtomicBool,
    /// Wakes the driver: something was queued, reconfigured or stopped.
    wake: Notify,
    metrics: SinkMetrics,
    client: Result<reqwest::Client, String>,
    /// True while the driver task exists (cleared when its future is dropped).
    alive: watch::Sender<bool>,
    driver: Mutex<Option<AbortHandle>>,
    /// The store holding the outbox, once attached.
    outbox: OnceLock<Store>,
}

struct State {
    /// `None` while disabled.
    target: Option<Arc<Target>>,
    core: SinkCore,
    /// The counters last added to the metrics.
    published: (Counters, Batches),
    started: bool,
    stopped: bool,
    request_timeout: Duration,
    /// The sink was turned off: the outbox is to be cleared (unless it is
    /// turned on again first).
    purge: bool,
    /// Outbox rows delivered whose deletion failed; tried again.
    undeleted: Vec<u64>,
}

/// Where and how to POST, derived from a config once per change.
struct Target {
    config: SinkConfig,
    /// Configured headers (values sensitive), content type and encoding.
    headers: HeaderMap,
    display_url: String,
}

impl Target {
    fn new(config: SinkConfig) -> Target {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .user_agent(crate::poll::USER_AGENT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .pool_idle_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

impl Sink {
    /// A sink shipping to `config` (not validated here: pass a config that
    /// passed [`SinkConfig::validate`]), or a disabled sink for `None`.
    /// Nothing is sent until [`Sink::start`].
    pub fn new(config: Option<SinkConfig>, metrics: SinkMetrics) -> Sink {
        let limits = config.as_ref().map(Limits::from_config).unwrap_or_default();
        let enabled = config.is_some();
        let state = State {
            target: config.map(|c| Arc::new(Target::new(c))),
            core: SinkCore::new(limits),
            published: Default::default(),
            started: false,
            stopped: false,
            request_timeout: REQUEST_TIMEOUT,
            purge: false,
            undeleted: Vec::new(),
        };
        metrics.queue_depth.set(0);
        metrics.retry_wait.set(0.0);
        Sink {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                enabled: AtomicBool::new(enabled),
                wake: Notify::new(),
                metrics,
                client: http_client(),
                alive: watch::Sender::new(false),
                driver: Mutex::new(None),
                outbox: OnceLock::new(),
            }),
        }
    }

    /// True when a destination is configured (events are worth building).
    pub fn is_enabled(&self) -> bool {
        self.inner.enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A disabled sink with unregistered metrics.
    pub fn disabled() -> Sink {
        Sink::new(None, SinkMetrics::unregistered())
    }

    /// Read change events from `store`'s outbox and hear of its commits.
    /// Call once, before [`Sink::start`]; later calls are ignored.
    pub fn attach_outbox(&self, store: Store) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        // Weak: the store must not keep the sink (and through it, the
        // store itself) alive.
        store.on_outbox_commit(Arc::new(move |added| {
            if let Some(inner) = weak.upgrade() {
                inner.metrics.outbox_depth.add(added as i64);
                let read = lock(&inner.state).core.outbox_committed();
                if read {
                    inner.wake.notify_one();
                }
            }
        }));
        let _ = self.inner.outbox.set(store);
    }

    /// A change event as an outbox row with a new `id`, to be written with
    /// the change it records (`Store::*_with_events`); `None` while the sink
    /// is off (nothing is kept for a receiver that is not configured).
    pub fn stage(&self, event: &Event) -> Option<OutboxEvent> {
        self.is_enabled().then(|| event.to_outbox(&mut rand::rng()))
    }

    /// Spawn the driver task (on the current tokio runtime). Only the first
    /// call spawns it; later calls, and calls after shutdown, return a task
    /// that ends at once. The driver runs until [`Sink::shutdown`], even
    /// while the sink is disabled (it then sleeps).
    pub fn start(&self) -> JoinHandle<()> {
        {
            let mut st = lock(&self.inner.state);
            if st.started || st.stopped {
                return tokio::spawn(async {});
            }
            st.started = true;
        }
        self.inner.alive.send_replace(true);
        let guard = AliveGuard(self.inner.clone());
        let inner = self.inner.clone();
        let handle = tokio::spawn(async move {
            let _guard = guard;
            drive(inner).await;
        });
        *lock(&self.inner.driver) = Some(handle.abort_handle());
        handle
    }

    /// Queue an event. Never waits for I/O: serializes it, pushes the line
    /// under a mutex and wakes the driver if a batch may be ready. A cheap
    /// no-op while disabled or after shutdown.
    pub fn emit(&self, event: &Event) {
        if !self.inner.enabled.load(Ordering::Relaxed) {
            return;
        }
        let line = event.to_line();
        let wake = {
            let mut st = lock(&self.inner.state);
            if st.target.is_none() || st.stopped {
                return;
            }
            let wake = st.core.push(line, Timestamp::now());
            self.inner.publish(&mut st);
            wake
        };
        if wake {
            self.inner.wake.notify_one();
        }
    }

    /// Apply a new config at once: `None` disables the sink (what is held is
    /// dropped, counted `dropped_queue`); `Some` enables it or changes URL,
    /// headers and limits. The queue is kept (cut to a smaller `queue_limit`,
    /// oldest first, counted `overflow`), a batch being retried is kept as it
    /// was and goes to the new URL, and the retry schedule restarts, so the
    /// next attempt may go at once. The same config again changes nothing.
    /// Ignored after shutdown.
    pub fn reconfigure(&self, config: Option<SinkConfig>) {
        {
            let mut st = lock(&self.inner.state);
            if st.stopped {
                return;
            }
            match config {
                None => {
                    if st.target.take().is_some() {
                        let dropped = st.core.discard_all();
                        st.purge = true;
                        tracing::info!(dropped, "event sink disabled");
                    }
                    self.inner.enabled.store(false, Ordering::Relaxed);
                }
                Some(config) => {
                    st.purge = false;
                    if st.target.as_ref().is_none_or(|t| t.config != config) {
                        st.core.reconfigure(Limits::from_config(&config));
                        let target = Target::new(config);
                        tracing::info!(url = %target.display_url, "event sink configured");
                        st.target = Some(Arc::new(target));
                    }
                    self.inner.enabled.store(true, Ordering::Relaxed);
                }
            }
            self.inner.publish(&mut st);
        }
        self.inner.wake.notify_one();
    }

    pub fn status(&self) -> SinkStatus {
        let st = lock(&self.inner.state);
        let cs = st.core.status();
        let config = st.target.as_ref().map(|t| &t.config);
        let time = |t: Option<Timestamp>| t.map(Timestamp::to_rfc3339);
        SinkStatus {
            enabled: config.is_some() && !st.stopped,
            url: st.target.as_ref().map(|t| t.display_url.clone()),
            headers: config.map(|c| c.headers.keys().cloned().collect()).unwrap_or_default(),
            batch_size: config.map(|c| c.batch_size),
            buffering: config.map(|c| duration_str::format(c.buffering)),
            retry_limit: config.map(|c| duration_str::format(c.retry_limit)),
            queue_limit: config.map(|c| c.queue_limit),
            gzip: config.is_some_and(|c| c.gzip),
            queue_depth: st.core.depth(),
            outbox_depth: self.inner.metrics.outbox_depth.get().max(0) as u64,
            consecutive_failures: cs.consecutive_failures,
            retry_wait_ms: cs.retry_wait_ms,
            next_attempt_at: time(cs.next_attempt_at),
            last_error: cs.last_error,
            last_success_at: time(cs.last_success_at),
            last_failure_at: time(cs.last_failure_at),
            counters: st.core.counters(),
            batches: st.core.batches(),
        }
    }

    /// POST one `test` event now, outside the queue and its counters, and
    /// report how it went (for a "send test event" button).
    pub async fn send_test(&self, actor: &str) -> Result<(), SendError> {
        let (target, timeout) = {
            let st = lock(&self.inner.state);
            match &st.target {
                Some(t) => (t.clone(), st.request_timeout),
                None => return Err(SendError::Disabled),
            }
        };
        let line = Event::test(Timestamp::now(), actor, "test event from Pollster").to_line();
        let lines: Arc<[String]> = Arc::from(vec![line]);
        post(&self.inner.client, &target, lines, timeout).await
    }

    /// Stop the driver and flush what is held, in batches, stopping at the
    /// first failure. Returns within about `within`: a request still running
    /// when the time is up is abandoned. What is not delivered stays counted
    /// in the queue depth. Later calls return at once.
    pub async fn shutdown(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        {
            let mut st = lock(&self.inner.state);
            if st.stopped {
                return;
            }
            st.stopped = true;
        }
        self.inner.enabled.store(false, Ordering::Relaxed);
        self.inner.wake.notify_one();
        // Let the driver finish the request it is making, if it can in time.
        let mut alive = self.inner.alive.subscribe();
        let finished = tokio::time::timeout_at(deadline, alive.wait_for(|a| !*a)).await.is_ok();
        if !finished {
            if let Some(h) = lock(&self.inner.driver).take() {
                h.abort();
            }
            // An aborted task is dropped at its next await: almost at once.
            let _ = tokio::time::timeout(Duration::from_millis(250), alive.wait_for(|a| !*a)).await;
        }
        lock(&self.inner.state).core.abandon_in_flight();
        let flushed = tokio::time::timeout_at(deadline, self.flush(deadline)).await;
        let mut st = lock(&self.inner.state);
        st.core.abandon_in_flight();
        let left = st.core.depth();
        if flushed.is_err() || left > 0 {
            tracing::warn!(undelivered = left, "event sink stopped with undelivered events");
        }
        self.inner.publish(&mut st);
    }

    /// Send batches at once until none is left or one fails.
    async fn flush(&self, deadline: tokio::time::Instant) {
        loop {
            let (target, batch, timeout) = {
                let mut st = lock(&self.inner.state);
                let Some(target) = st.target.clone() else { return };
                let Some(batch) = st.core.drain_for_shutdown() else {
                    return;
                };
                (target, batch, st.request_timeout)
            };
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let outcome = match post(&self.inner.client, &target, batch.lines.clone(), timeout.min(remaining)).await {
                Ok(()) => Outcome::Ok,
                Err(e) => e.outcome(),
            };
            let ok = outcome == Outcome::Ok;
            self.inner.settle(&batch, outcome);
            if !ok {
                return;
            }
            self.inner.delivered(&batch).await;
        }
    }

    #[cfg(test)]
    fn set_request_timeout(&self, timeout: Duration) {
        lock(&self.inner.state).request_timeout = timeout;
    }
}

impl Inner {
    /// Bring the metrics up to date with the core (under the state lock).
    fn publish(&self, st: &mut State) {
        let now = (st.core.counters(), st.core.batches());
        if now != st.published {
            self.metrics.add(st.published, now);
            st.published = now;
        }
        self.metrics.queue_depth.set(st.core.depth() as i64);
        self.metrics.retry_wait.set(st.core.retry_wait_ms() as f64 / 1000.0);
    }

    /// Record a batch's outcome, update the metrics and log.
    fn settle(&self, batch: &Batch, outcome: Outcome) {
        let now = Timestamp::now();
        let error = match &outcome {
            Outcome::Ok => None,
            Outcome::Retryable(e) | Outcome::Rejected(e) => Some(e.clone()),
        };
        let settled = {
            let mut st = lock(&self.state);
            let settled = st.core.on_sent(batch.id, outcome, now);
            self.publish(&mut st);
            settled
        };
        let error = error.unwrap_or_default();
        match settled {
            Settled::Ignored => {}
            Settled::Delivered(events) => {
                tracing::debug!(events, attempt = batch.attempt, "event sink: batch delivered")
            }
            Settled::WillRetry { at, failures } => tracing::warn!(
                %error,
                events = batch.lines.len(),
                failures,
                retry_in_ms = at.0.saturating_sub(now.0),
                "event sink: batch failed, will retry"
            ),
            Settled::Dropped { events, queue, kept } => tracing::error!(
                %error,
                events,
                queue,
                kept,
                "event sink: retry limit reached, batch dropped{} (change events kept for the next attempt)",
                if queue > 0 { " with the queue" } else { "" }
            ),
            Settled::Rejected { events, kept } => tracing::error!(
                %error,
                events,
                kept,
                "event sink: batch rejected; poll events dropped, change events kept for the next attempt"
            ),
        }
    }
}

impl Inner {
    /// A 2xx for `batch`: delete its outbox rows (and any whose deletion
    /// failed before). A row that cannot be deleted now is tried again
    /// with the next batch; if the process stops first, it is sent again
    /// after the restart (at least once).
    async fn delivered(&self, batch: &Batch) {
        let Some(store) = self.outbox.get().cloned() else {
            return;
        };
        let seqs: Vec<u64> = {
            let mut st = lock(&self.state);
            if batch.seqs.is_empty() && st.undeleted.is_empty() {
                return;
            }
            let mut seqs = std::mem::take(&mut st.undeleted);
            seqs.extend(batch.seqs.iter().copied());
            seqs
        };
        let s = seqs.clone();
        match tokio::task::spawn_blocking(move || store.delete_outbox(&s)).await {
            Ok(Ok(n)) => self.metrics.outbox_depth.sub(n as i64),
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                    Ok(Ok(_)) => String::new(),
                };
                tracing::warn!(%error, rows = seqs.len(), "event sink: cannot delete delivered events from the outbox; will retry");
                lock(&self.state).undeleted.extend(seqs);
            }
        }
    }

    /// Read one page of the outbox into the core's window. Unreadable rows
    /// are logged and deleted (they can never be sent).
    async fn read_outbox(&self, store: Store, read: OutboxRead) -> bool {
        let result = tokio::task::spawn_blocking(move || {
            let page = store.outbox_page(read.after, read.limit)?;
            let mut rows = Vec::with_capacity(page.len());
            let mut bad = Vec::new();
            let mut seen = read.after;
            for (seq, row) in page {
                seen = seen.max(seq);
                match row {
                    Ok(e) => rows.push((seq, e.line)),
                    Err(e) => bad.push((seq, e)),
                }
            }
            if !bad.is_empty() {
                let seqs: Vec<u64> = bad.iter().map(|(s, _)| *s).collect();
                store.delete_outbox(&seqs)?;
            }
            Ok::<_, crate::store::StoreError>((rows, seen, bad))
        })
        .await;
        let now = Timestamp::now();
        match result {
            Ok(Ok((rows, seen, bad))) => {
                for (seq, e) in &bad {
                    tracing::error!(seq, error = %e, "event sink: unreadable outbox row deleted");
                }
                self.metrics.outbox_depth.sub(bad.len() as i64);
                let mut st = lock(&self.state);
                st.core.outbox_loaded(read, rows, seen, now);
                if !bad.is_empty() {
                    // The page may have been full of rows: look again.
                    st.core.outbox_committed();
                }
                self.publish(&mut st);
                true
            }
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                    Ok(Ok(_)) => String::new(),
                };
                tracing::warn!(%error, "event sink: cannot read the outbox; will retry");
                lock(&self.state).core.outbox_committed();
                false
            }
        }
    }

    /// The outbox as the driver starts: its depth for the gauge, or, with
    /// the sink off, cleared.
    async fn open_outbox(&self) {
        let Some(store) = self.outbox.get().cloned() else {
            return;
        };
        let off = lock(&self.state).target.is_none();
        let result = tokio::task::spawn_blocking(move || {
            if off {
                store.clear_outbox().map(|n| (0, n))
            } else {
                store.outbox_len().map(|n| (n, 0))
            }
        })
        .await;
        match result {
            Ok(Ok((depth, cleared))) => {
                self.metrics.outbox_depth.set(depth as i64);
                if cleared > 0 {
                    tracing::info!(cleared, "event sink is off: cleared the undelivered change events");
                    let mut st = lock(&self.state);
                    st.core.count_discarded_outbox(cleared);
                    self.publish(&mut st);
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "event sink: cannot open the outbox"),
            Err(e) => tracing::warn!(error = %e, "event sink: cannot open the outbox"),
        }
    }

    /// The sink was turned off: clear the outbox, counting what it held.
    async fn purge_outbox(&self, store: Store) {
        match tokio::task::spawn_blocking(move || store.clear_outbox()).await {
            Ok(Ok(n)) => {
                self.metrics.outbox_depth.sub(n as i64);
                let mut st = lock(&self.state);
                st.core.count_discarded_outbox(n);
                self.publish(&mut st);
                if n > 0 {
                    tracing::info!(
                        cleared = n,
                        "event sink disabled: cleared the undelivered change events"
                    );
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "event sink: cannot clear the outbox"),
            Err(e) => tracing::warn!(error = %e, "event sink: cannot clear the outbox"),
        }
    }
}

/// Clears `alive` when the driver's future is dropped (ended or aborted).
struct AliveGuard(Arc<Inner>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.send_replace(false);
    }
}

enum Step {
    Wait(Option<Timestamp>),
    Send(Arc<Target>, Batch, Duration),
    Read(Store, OutboxRead),
    Purge(Store),
}

/// The driver: sleep until the core has a batch ready (or a wake-up), POST
/// it, report the outcome; until shutdown.
async fn drive(inner: Arc<Inner>) {
    inner.open_outbox().await;
    let store = inner.outbox.get().cloned();
    loop {
        let step = {
            let mut st = lock(&inner.state);
            if st.stopped {
                return;
            }
            let purge = std::mem::take(&mut st.purge) && st.target.is_none();
            let read = match (&store, &st.target) {
                (Some(s), Some(_)) => st.core.outbox_wanted().map(|r| (s.clone(), r)),
                _ => None,
            };
            match (st.target.clone(), &store) {
                (None, Some(s)) if purge => Step::Purge(s.clone()),
                (None, _) => Step::Wait(None),
                (Some(_), _) if read.is_some() => {
                    let (s, r) = read.expect("checked");
                    Step::Read(s, r)
                }
                (Some(target), _) => match st.core.next(Timestamp::now()) {
                    Next::Idle => Step::Wait(None),
                    Next::WaitUntil(at) => Step::Wait(Some(at)),
                    Next::Send(batch) => Step::Send(target, batch, st.request_timeout),
                },
            }
        };
        match step {
            Step::Wait(None) => inner.wake.notified().await,
            Step::Wait(Some(at)) => {
                let delay = Duration::from_millis(at.0.saturating_sub(Timestamp::now().0)).min(MAX_SLEEP);
                tokio::select! {
                    _ = inner.wake.notified() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            Step::Send(target, batch, timeout) => {
                let outcome = match post(&inner.client, &target, batch.lines.clone(), timeout).await {
                    Ok(()) => Outcome::Ok,
                    Err(e) => e.outcome(),
                };
                let ok = outcome == Outcome::Ok;
                inner.settle(&batch, outcome);
                if ok {
                    inner.delivered(&batch).await;
                }
            }
            Step::Read(store, read) => {
                if !inner.read_outbox(store, read).await {
                    tokio::select! {
                        _ = inner.wake.notified() => {}
                        _ = tokio::time::sleep(MAX_SLEEP) => {}
                    }
                }
            }
            Step::Purge(store) => inner.purge_outbox(store).await,
        }
    }
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
async fn post(
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

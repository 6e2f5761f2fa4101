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
//! - `delivery.rs` makes the POST and sorts its answer into delivered,
//!   retried or rejected (the request's rules are there); `driver.rs` is
//!   the task that decides, step by step, what to do next; `outbox.rs`
//!   moves change events between the store and the core.
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
mod delivery;
mod driver;
pub mod event;
pub mod metrics;
mod outbox;

#[cfg(test)]
mod tests;

pub use self::core::{Batch, Batches, Counters, Limits, Next, OutboxRead, Outcome, Settled, SinkCore};
pub use delivery::{REQUEST_TIMEOUT, SendError};
pub use event::{
    BreakerEvent, DeadLetterAction, DeadLetterEvent, Event, EventKind, PollEvent, SettingsSection, rfc3339_millis,
};
pub use metrics::SinkMetrics;

use crate::config::SinkConfig;
use crate::model::{Clock, SystemClock, Timestamp, duration_str};
use crate::store::{OutboxEvent, Store};
use delivery::{Target, http_client, post};
use driver::{AliveGuard, drive};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::{AbortHandle, JoinHandle};

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
    /// Where event ids draw their random bits: seeded by the engine's RNG
    /// ([`Sink::seed_ids`]), from the OS until then.
    ids: Mutex<crate::model::random::StdRng>,
    /// Where the sink reads the time: the engine's clock.
    clock: Arc<dyn Clock>,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sink {
    /// A sink shipping to `config` (not validated here: pass a config that
    /// passed [`SinkConfig::validate`]), or a disabled sink for `None`.
    /// Nothing is sent until [`Sink::start`]. Every `now` it uses (batch
    /// timing, retries, the test event's time) is read from `clock`.
    pub fn new(config: Option<SinkConfig>, metrics: SinkMetrics, clock: Arc<dyn Clock>) -> Sink {
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
                ids: Mutex::new(rand::make_rng()),
                clock,
            }),
        }
    }

    /// True when a destination is configured (events are worth building).
    pub fn is_enabled(&self) -> bool {
        self.inner.enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A disabled sink with unregistered metrics.
    pub fn disabled() -> Sink {
        Sink::new(None, SinkMetrics::unregistered(), Arc::new(SystemClock))
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

    /// Draw event ids from `rng` from now on (the engine's seeded RNG, so
    /// a run with a fixed seed makes the same ids).
    pub fn seed_ids(&self, rng: crate::model::random::StdRng) {
        *lock(&self.inner.ids) = rng;
    }

    /// A new event id (a ULID) for an event at `time`.
    pub fn new_event_id(&self, time: Timestamp) -> String {
        event::new_event_id(time, &mut *lock(&self.inner.ids))
    }

    /// A change event as an outbox row with a new `id`, to be written with
    /// the change it records (`Store::*_with_events`). Nothing is kept for
    /// a receiver that is not configured: while the sink is off, only an
    /// operator action or a settings change gives a row, for the audit
    /// trail alone; otherwise `None`.
    pub fn stage(&self, event: &Event) -> Option<OutboxEvent> {
        let deliver = self.is_enabled();
        let audit = event.is_audit().then(|| crate::store::AuditStamp {
            time: event.time,
            source: crate::audit::current_source(),
        });
        if !deliver && audit.is_none() {
            return None;
        }
        let mut row = event.to_outbox(&mut *lock(&self.inner.ids));
        row.deliver = deliver;
        row.audit = audit;
        Some(row)
    }

    /// A change event as an outbox row for the audit trail, and for the
    /// sink when `deliver` (a change of the sink's own settings is told to
    /// the receiver of the new settings, not of the old).
    pub fn stage_audited(&self, event: &Event, deliver: bool) -> OutboxEvent {
        let mut row = event.to_outbox(&mut *lock(&self.inner.ids));
        row.deliver = deliver;
        row.audit = Some(crate::store::AuditStamp {
            time: event.time,
            source: crate::audit::current_source(),
        });
        row
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
            let wake = st.core.push(line, self.inner.clock.now());
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
        let line = Event::test(self.inner.clock.now(), actor, "test event from Pollster").to_line();
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
        let now = self.clock.now();
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

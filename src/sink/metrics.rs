//! The sink's Prometheus metrics (§6): what happened to events, the queue
//! depth, the outbox depth, POST attempts and the current retry wait.

use super::core::{Batches, Counters};
use prometheus::{Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Values of the `outcome` label of `pollster_sink_events_total`.
pub const OUTCOMES: [&str; 5] = ["sent", "dropped_batch", "dropped_queue", "overflow", "rejected"];
/// Values of the `result` label of `pollster_sink_batches_total`.
pub const RESULTS: [&str; 2] = ["ok", "failed"];

/// Handles to the sink's metrics. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SinkMetrics {
    events: IntCounterVec,
    sent: IntCounter,
    dropped_batch: IntCounter,
    dropped_queue: IntCounter,
    overflow: IntCounter,
    rejected: IntCounter,
    batches: IntCounterVec,
    batches_ok: IntCounter,
    batches_failed: IntCounter,
    /// `pollster_sink_queue_depth`.
    pub queue_depth: IntGauge,
    /// `pollster_sink_retry_wait_seconds`.
    pub retry_wait: Gauge,
    /// `pollster_sink_outbox_depth`.
    pub outbox_depth: IntGauge,
}

impl SinkMetrics {
    /// Create the metrics and register them with `registry`. Every label
    /// value exists from the start, at 0.
    pub fn register(registry: &Registry) -> Result<SinkMetrics, prometheus::Error> {
        let m = SinkMetrics::build()?;
        registry.register(Box::new(m.events.clone()))?;
        registry.register(Box::new(m.queue_depth.clone()))?;
        registry.register(Box::new(m.batches.clone()))?;
        registry.register(Box::new(m.retry_wait.clone()))?;
        registry.register(Box::new(m.outbox_depth.clone()))?;
        Ok(m)
    }

    /// Metrics that are not exported: for tests and a sink that stays off.
    pub fn unregistered() -> SinkMetrics {
        SinkMetrics::build().expect("the sink's metric definitions are valid")
    }

    fn build() -> Result<SinkMetrics, prometheus::Error> {
        let events = IntCounterVec::new(
            Opts::new(
                "pollster_sink_events_total",
                "Events handled by the event sink, by outcome: sent (delivered), dropped_batch (retry limit reached), \
                 dropped_queue (dropped with the queue after ten dropped batches in a row, or when the sink was \
                 disabled), overflow (oldest pushed out of a full queue), rejected (refused by the receiver with a \
                 non-retryable status).",
            ),
            &["outcome"],
        )?;
        let batches = IntCounterVec::new(
            Opts::new(
                "pollster_sink_batches_total",
                "Event sink POST attempts by result (ok: 2xx; failed: any other status or a transport error).",
            ),
            &["result"],
        )?;
        let queue_depth = IntGauge::with_opts(Opts::new(
            "pollster_sink_queue_depth",
            "Events held in memory by the event sink and not yet delivered (queued, change events read from the \
             outbox, and the batch being sent).",
        ))?;
        let retry_wait = Gauge::with_opts(Opts::new(
            "pollster_sink_retry_wait_seconds",
            "The event sink's current wait between attempts after a failure; 0 while healthy.",
        ))?;
        let outbox_depth = IntGauge::with_opts(Opts::new(
            "pollster_sink_outbox_depth",
            "Change events (breaker, dead-letter, settings, operator) stored in the outbox and not yet delivered; \
             they survive a restart and are sent until a receiver accepts them.",
        ))?;
        let outcome = |o: &str| events.with_label_values(&[o]);
        Ok(SinkMetrics {
            sent: outcome("sent"),
            dropped_batch: outcome("dropped_batch"),
            dropped_queue: outcome("dropped_queue"),
            overflow: outcome("overflow"),
            rejected: outcome("rejected"),
            batches_ok: batches.with_label_values(&["ok"]),
            batches_failed: batches.with_label_values(&["failed"]),
            events,
            batches,
            queue_depth,
            retry_wait,
            outbox_depth,
        })
    }

    /// Add what changed between two snapshots of the core's counters.
    pub(super) fn add(&self, before: (Counters, Batches), after: (Counters, Batches)) {
        let (b, a) = before;
        let (c, d) = after;
        let inc = |counter: &IntCounter, from: u64, to: u64| {
            if to > from {
                counter.inc_by(to - from);
            }
        };
        inc(&self.sent, b.sent, c.sent);
        inc(&self.dropped_batch, b.dropped_batch, c.dropped_batch);
        inc(&self.dropped_queue, b.dropped_queue, c.dropped_queue);
        inc(&self.overflow, b.overflow, c.overflow);
        inc(&self.rejected, b.rejected, c.rejected);
        inc(&self.batches_ok, a.ok, d.ok);
        inc(&self.batches_failed, a.failed, d.failed);
    }

    /// The current value of `pollster_sink_events_total{outcome}`.
    pub fn events(&self, outcome: &str) -> u64 {
        self.events.with_label_values(&[outcome]).get()
    }
}

//! The sink's pure state machine: queue, batch in flight, retry schedule and
//! batching rules (§5). No clock reads and no I/O: every time is passed in as
//! a [`Timestamp`] (ms), so every rule is testable with a fake clock.
//!
//! # Rules
//!
//! - **Queue.** Serialized lines wait in a FIFO of at most `queue_limit`
//!   lines. Pushing into a full queue drops the oldest line (`overflow`). The
//!   batch taken out of the queue does not count against the limit, so at
//!   most `queue_limit + batch_size` lines are held.
//! - **Batching.** While healthy, a batch of up to `batch_size` lines is
//!   ready as soon as `batch_size` lines are queued, or when the oldest
//!   queued line has waited `buffering`.
//! - **One batch at a time.** [`SinkCore::next`] hands out a [`Batch`] and
//!   marks it in flight; nothing else is sent until [`SinkCore::on_sent`]
//!   reports its outcome (outcomes for any other batch id, or for a batch not
//!   in flight, are ignored).
//! - **Outcomes.**
//!   - [`Outcome::Ok`]: the lines count as `sent`, and the retry schedule is
//!     reset. A delivered batch is never sent again.
//!   - [`Outcome::Retryable`] (408, 429, 5xx, transport errors): the
//!     schedule ([`crate::core::retry_schedule`]) records the failure. The
//!     batch is kept *as it was* (same id, same lines, same order) and is
//!     retried once the schedule's interval has passed since the failure,
//!     unless the schedule drops it (`dropped_batch`), and after ten drops
//!     in a row the whole queue too (`dropped_queue`). Until the next
//!     success, every batch (retried or new) waits for that interval after
//!     the latest failure, on top of the batching rule.
//!   - [`Outcome::Rejected`] (any other non-2xx status, e.g. 400, 401, 413):
//!     the receiver answered and refused this batch; retrying it would not
//!     help, so it is dropped at once (`rejected`). The schedule is neither
//!     advanced nor reset: a rejection says nothing about the receiver's
//!     availability, so it neither slows nor speeds up later batches.
//! - **Counters** count events (lines), except `batches`, which counts
//!   attempts: `ok` per delivered batch, `failed` per failed attempt
//!   (retryable or rejected). Every pushed line ends up exactly once in
//!   `sent`, `dropped_batch`, `dropped_queue`, `overflow` or `rejected`, or
//!   is still held ([`SinkCore::depth`]).
//! - **Reconfigure** applies new limits: the queue is cut to the new
//!   `queue_limit` by dropping its oldest lines (`overflow`), the schedule is
//!   reset (the next attempt may go at once), and a pending batch is kept as
//!   it was, even if larger than the new `batch_size`.
//! - **Shutdown.** [`SinkCore::drain_for_shutdown`] hands out the pending
//!   batch, then queued lines in batches, at once, ignoring buffering and the
//!   retry schedule; the caller stops at the first failure.
//!
//! # Change events (the outbox)
//!
//! Change events are stored in the database's outbox before the sink sees
//! them; the core holds a *window* of them in memory, read in pages
//! ([`SinkCore::outbox_wanted`], [`SinkCore::outbox_loaded`]) up to
//! `queue_limit` lines, in outbox order, and never drops one:
//!
//! - A batch takes the window's lines first, then queued poll lines; each
//!   [`Batch`] lists the outbox sequences of its change lines
//!   ([`Batch::seqs`]), to be deleted from the outbox once it is delivered.
//! - When the schedule drops a batch, or the receiver rejects it, its poll
//!   lines are dropped (and counted) as above, but its change lines go back
//!   to the front of the window and are sent again, as they were. A
//!   rejection that returns change lines counts as a failure for pacing, so
//!   a receiver that keeps refusing them gets them at most once per retry
//!   interval (1 min at most). Ten drops in a row drop the poll queue, not
//!   the window.
//! - Change lines count in `sent` when delivered, and are otherwise still
//!   held (in the window, the pending batch or the outbox). Disabling the
//!   sink empties the window (the caller clears the outbox and counts what
//!   it removed with [`SinkCore::count_discarded_outbox`]).
//! - Every sequence up to [`SinkCore::outbox_read`] is in the window, in
//!   the pending batch or delivered; anything above is read from the
//!   outbox, after a commit said there is more ([`SinkCore::outbox_committed`]).

use crate::config::SinkConfig;
use crate::core::retry_schedule::{self, RetrySchedule};
use crate::model::Timestamp;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// The sink settings the state machine uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most lines per batch (at least 1).
    pub batch_size: usize,
    /// How long the oldest queued line may wait for a batch to fill.
    pub buffering: Duration,
    /// How long a failing batch is retried; zero drops it at its first failure.
    pub retry_limit: Duration,
    /// Most queued lines (at least 1).
    pub queue_limit: usize,
}

impl Limits {
    pub fn from_config(c: &SinkConfig) -> Limits {
        Limits {
            batch_size: c.batch_size,
            buffering: c.buffering,
            retry_limit: c.retry_limit,
            queue_limit: c.queue_limit,
        }
    }

    fn normalized(self) -> Limits {
        Limits {
            batch_size: self.batch_size.max(1),
            queue_limit: self.queue_limit.max(1),
            ..self
        }
    }

    fn schedule(&self) -> RetrySchedule {
        retry_schedule::create(ms(self.buffering), ms(self.retry_limit))
    }
}

impl Default for Limits {
    /// The `[sink]` defaults: 1000 lines, 2 s, 10 min, 100 000 lines.
    fn default() -> Self {
        Limits::from_config(&SinkConfig::new("http://localhost/"))
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A batch to POST: its lines concatenated are the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Unique per batch; a retry keeps the id.
    pub id: u64,
    /// NDJSON lines, each ending `\n`: change lines first (outbox order),
    /// then poll lines in push order.
    pub lines: Arc<[String]>,
    /// Outbox sequences of the first `seqs.len()` lines (the change lines).
    pub seqs: Arc<[u64]>,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: u32,
}

/// What the driver should do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nothing to send until something is pushed (or, while a batch is in
    /// flight, until its outcome arrives).
    Idle,
    /// Ask again at this time (or earlier, when something is pushed).
    WaitUntil(Timestamp),
    /// POST this batch, then report with [`SinkCore::on_sent`].
    Send(Batch),
}

/// How a POST went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Ok,
    /// 408, 429, 5xx or a transport error (connect, TLS, timeout…): retried
    /// on the schedule.
    Retryable(String),
    /// Any other status: dropped at once.
    Rejected(String),
}

/// What [`SinkCore::on_sent`] did with an outcome, for logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Not the batch in flight: nothing changed.
    Ignored,
    /// Delivered this many events.
    Delivered(usize),
    /// Kept for a retry at `at`, after `failures` consecutive failures.
    WillRetry { at: Timestamp, failures: u64 },
    /// The schedule dropped the batch's poll lines (`events`) and, after ten
    /// drops in a row, the queue (`queue` events, else 0); its `kept` change
    /// lines went back to the window.
    Dropped { events: usize, queue: usize, kept: usize },
    /// Rejected by the receiver: `events` poll lines dropped, `kept` change
    /// lines back in the window (to be sent again after the retry wait).
    Rejected { events: usize, kept: usize },
}

/// A page to read from the outbox: rows after `after`, at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxRead {
    pub after: u64,
    pub limit: usize,
}

/// Events by fate (counts of lines, not batches).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Delivered (2xx).
    pub sent: u64,
    /// In a batch the retry schedule gave up on.
    pub dropped_batch: u64,
    /// Queued when ten dropped batches in a row dropped the queue (or when the
    /// sink was disabled).
    pub dropped_queue: u64,
    /// The oldest, pushed out of a full queue (or cut by a smaller limit).
    pub overflow: u64,
    /// In a batch the receiver refused with a non-retryable status.
    pub rejected: u64,
}

/// POST attempts by result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Batches {
    pub ok: u64,
    pub failed: u64,
}

/// The health of delivery, for the status page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CoreStatus {
    /// Failed attempts since the last success (rejections excluded).
    pub consecutive_failures: u64,
    /// When the next attempt after a failure is due; `None` while healthy.
    pub next_attempt_at: Option<Timestamp>,
    /// The schedule's current wait after a failure; 0 while healthy.
    pub retry_wait_ms: u64,
    pub last_error: Option<String>,
    pub last_success_at: Option<Timestamp>,
    pub last_failure_at: Option<Timestamp>,
}

#[derive(Debug)]
struct Queued {
    line: String,
    at: Timestamp,
}

/// A change line held in memory, with its outbox sequence.
#[derive(Debug)]
struct Durable {
    seq: u64,
    line: String,
    at: Timestamp,
}

#[derive(Debug)]
struct Pending {
    batch: Batch,
    in_flight: bool,
}

/// The sink's state: see the module documentation for the rules.
#[derive(Debug)]
pub struct SinkCore {
    limits: Limits,
    queue: VecDeque<Queued>,
    /// The window of change lines read from the outbox, by sequence.
    durable: VecDeque<Durable>,
    /// The highest outbox sequence read into memory.
    outbox_read: u64,
    /// The outbox may hold rows above `outbox_read`.
    outbox_more: bool,
    pending: Option<Pending>,
    schedule: RetrySchedule,
    /// Set by a retryable failure: no attempt before it. Cleared by a
    /// success or a reconfigure.
    retry_at: Option<Timestamp>,
    next_id: u64,
    counters: Counters,
    batches: Batches,
    last_error: Option<String>,
    last_success: Option<Timestamp>,
    last_failure: Option<Timestamp>,
}

impl SinkCore {
    pub fn new(limits: Limits) -> SinkCore {
        let limits = limits.normalized();
        SinkCore {
            limits,
            queue: VecDeque::new(),
            durable: VecDeque::new(),
            outbox_read: 0,
            // Whatever was left by an earlier run.
            outbox_more: true,
            pending: None,
            schedule: limits.schedule(),
            retry_at: None,
            next_id: 1,
            counters: Counters::default(),
            batches: Batches::default(),
            last_error: None,
            last_success: None,
            last_failure: None,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Queue one line (it should end with `\n`). Returns true when the
    /// driver should be woken: the queue was empty (a buffering deadline
    /// starts) or just reached `batch_size` (a batch is ready).
    pub fn push(&mut self, line: String, now: Timestamp) -> bool {
        let was_empty = self.queue.is_empty();
        if self.queue.len() >= self.limits.queue_limit {
            self.queue.pop_front();
            self.counters.overflow += 1;
        }
        self.queue.push_back(Queued { line, at: now });
        was_empty || self.queue.len() == self.limits.batch_size
    }

    /// What to do at `now`. A returned [`Next::Send`] marks its batch in
    /// flight until [`SinkCore::on_sent`].
    pub fn next(&mut self, now: Timestamp) -> Next {
        if let Some(p) = &mut self.pending {
            if p.in_flight {
                return Next::Idle;
            }
            let at = self.retry_at.unwrap_or(now);
            if now < at {
                return Next::WaitUntil(at);
            }
            p.in_flight = true;
            p.batch.attempt += 1;
            return Next::Send(p.batch.clone());
        }
        let oldest = match (self.queue.front(), self.durable.front()) {
            (None, None) => return Next::Idle,
            (Some(q), None) => q.at,
            (None, Some(d)) => d.at,
            (Some(q), Some(d)) => q.at.min(d.at),
        };
        let filled = if self.queue.len() + self.durable.len() >= self.limits.batch_size {
            Timestamp(0)
        } else {
            oldest.plus(self.limits.buffering)
        };
        let ready = filled.max(self.retry_at.unwrap_or(Timestamp(0)));
        if now < ready {
            return Next::WaitUntil(ready);
        }
        Next::Send(self.take_batch())
    }

    /// Move up to `batch_size` lines, change lines first, into a new batch
    /// in flight.
    fn take_batch(&mut self) -> Batch {
        let d = self.durable.len().min(self.limits.batch_size);
        let n = self.queue.len().min(self.limits.batch_size - d);
        let mut lines = Vec::with_capacity(d + n);
        let mut seqs = Vec::with_capacity(d);
        for x in self.durable.drain(..d) {
            seqs.push(x.seq);
            lines.push(x.line);
        }
        lines.extend(self.queue.drain(..n).map(|q| q.line));
        let batch = Batch {
            id: self.next_id,
            lines: lines.into(),
            seqs: seqs.into(),
            attempt: 1,
        };
        self.next_id += 1;
        self.pending = Some(Pending {
            batch: batch.clone(),
            in_flight: true,
        });
        batch
    }

    /// Record the outcome of the batch `batch_id` at `now`.
    pub fn on_sent(&mut self, batch_id: u64, outcome: Outcome, now: Timestamp) -> Settled {
        let Some(p) = &mut self.pending else {
            return Settled::Ignored;
        };
        if p.batch.id != batch_id || !p.in_flight {
            return Settled::Ignored;
        }
        let n = p.batch.lines.len();
        match outcome {
            Outcome::Ok => {
                self.pending = None;
                self.counters.sent += n as u64;
                self.batches.ok += 1;
                self.schedule = retry_schedule::succeeded(self.schedule);
                self.retry_at = None;
                self.last_success = Some(now);
                Settled::Delivered(n)
            }
            Outcome::Rejected(message) => {
                let batch = self.pending.take().map(|p| p.batch);
                let kept = batch.as_ref().map_or(0, |b| self.give_back(b, now));
                self.counters.rejected += (n - kept) as u64;
                self.batches.failed += 1;
                self.last_error = Some(message);
                self.last_failure = Some(now);
                if kept > 0 {
                    // Paced like a failure, so refused change lines are not
                    // offered again in a tight loop.
                    self.schedule = retry_schedule::failed(self.schedule, now.0).state;
                    self.retry_at = Some(Timestamp(now.0.saturating_add(retry_schedule::interval(self.schedule))));
                }
                Settled::Rejected { events: n - kept, kept }
            }
            Outcome::Retryable(message) => {
                self.batches.failed += 1;
                self.last_error = Some(message);
                self.last_failure = Some(now);
                let verdict = retry_schedule::failed(self.schedule, now.0);
                self.schedule = verdict.state;
                let at = Timestamp(now.0.saturating_add(retry_schedule::interval(self.schedule)));
                self.retry_at = Some(at);
                if !verdict.drop_batch {
                    p.in_flight = false;
                    return Settled::WillRetry {
                        at,
                        failures: self.schedule.failures(),
                    };
                }
                let batch = self.pending.take().map(|p| p.batch);
                let kept = batch.as_ref().map_or(0, |b| self.give_back(b, now));
                self.counters.dropped_batch += (n - kept) as u64;
                let mut queue = 0;
                if verdict.drop_queue {
                    queue = self.queue.len();
                    self.queue.clear();
                    self.counters.dropped_queue += queue as u64;
                }
                Settled::Dropped {
                    events: n - kept,
                    queue,
                    kept,
                }
            }
        }
    }

    /// Put the change lines of `batch` back at the front of the window, in
    /// order; returns how many.
    fn give_back(&mut self, batch: &Batch, now: Timestamp) -> usize {
        for (seq, line) in batch.seqs.iter().zip(batch.lines.iter()).rev() {
            self.durable.push_front(Durable {
                seq: *seq,
                line: line.clone(),
                at: now,
            });
        }
        batch.seqs.len()
    }

    /// A commit added rows to the outbox. Returns true when the driver
    /// should read them now (the window has room).
    pub fn outbox_committed(&mut self) -> bool {
        self.outbox_more = true;
        self.durable.len() < self.limits.queue_limit
    }

    /// The page to read from the outbox now, if any: rows may be waiting and
    /// the window has room. Call [`SinkCore::outbox_loaded`] with what the
    /// read found (or [`SinkCore::outbox_committed`] if it failed).
    pub fn outbox_wanted(&mut self) -> Option<OutboxRead> {
        let room = self.limits.queue_limit.saturating_sub(self.durable.len());
        if !self.outbox_more || room == 0 {
            return None;
        }
        // A commit from now on sets it again, so nothing is missed between
        // this and the read.
        self.outbox_more = false;
        Some(OutboxRead {
            after: self.outbox_read,
            limit: room,
        })
    }

    /// The rows a read of `read` found (lines by sequence, ascending), and
    /// the highest sequence it saw (unreadable rows included, which the
    /// caller deletes). A page as long as asked may have more behind it. A
    /// page for an outdated read is ignored and the read is asked again.
    pub fn outbox_loaded(&mut self, read: OutboxRead, rows: Vec<(u64, String)>, seen: u64, now: Timestamp) {
        if read.after != self.outbox_read {
            self.outbox_more = true;
            return;
        }
        let mut n = 0;
        for (seq, line) in rows {
            if seq > self.outbox_read {
                self.durable.push_back(Durable { seq, line, at: now });
                self.outbox_read = seq;
                n += 1;
            }
        }
        self.outbox_read = self.outbox_read.max(seen);
        if n >= read.limit {
            self.outbox_more = true;
        }
    }

    /// Count change events removed from the outbox without delivery (the
    /// sink was disabled) as `dropped_queue`.
    pub fn count_discarded_outbox(&mut self, n: u64) {
        self.counters.dropped_queue += n;
    }

    /// The highest outbox sequence read into memory.
    pub fn outbox_read(&self) -> u64 {
        self.outbox_read
    }

    /// Change lines held in memory (window and pending batch).
    pub fn outbox_held(&self) -> usize {
        self.durable.len() + self.pending.as_ref().map_or(0, |p| p.batch.seqs.len())
    }

    /// Apply new limits: cut the queue to `queue_limit` (oldest first,
    /// counted `overflow`) and the window to `queue_limit` (newest first:
    /// they stay in the outbox and are read again), and reset the retry
    /// schedule. A pending batch is kept as it was.
    pub fn reconfigure(&mut self, limits: Limits) {
        self.limits = limits.normalized();
        while self.queue.len() > self.limits.queue_limit {
            self.queue.pop_front();
            self.counters.overflow += 1;
        }
        if self.durable.len() > self.limits.queue_limit {
            self.durable.truncate(self.limits.queue_limit);
            if let Some(last) = self.durable.back() {
                self.outbox_read = last.seq;
            }
            self.outbox_more = true;
        }
        self.schedule = self.limits.schedule();
        self.retry_at = None;
    }

    /// Drop everything held, queued and pending (even in flight: its outcome
    /// will be ignored); poll lines are counted `dropped_queue`, and returned.
    /// Change lines leave memory only: the outbox is read again from the
    /// start (the caller clears it, counting them). For disabling the sink.
    pub fn discard_all(&mut self) -> usize {
        let n = self.depth() - self.outbox_held();
        self.queue.clear();
        self.durable.clear();
        self.outbox_read = 0;
        self.outbox_more = true;
        self.pending = None;
        self.counters.dropped_queue += n as u64;
        self.schedule = self.limits.schedule();
        self.retry_at = None;
        n
    }

    /// Forget that the pending batch is in flight (its request was
    /// abandoned): it will be sent again as it was, and a late outcome for
    /// it is ignored.
    pub fn abandon_in_flight(&mut self) {
        if let Some(p) = &mut self.pending {
            p.in_flight = false;
        }
    }

    /// At shutdown: the next batch to send at once, whatever the buffering
    /// time and the retry schedule say: the pending batch, else up to
    /// `batch_size` queued lines. `None` when nothing is left or a batch is
    /// in flight. Report outcomes with [`SinkCore::on_sent`] as usual and
    /// stop at the first one that is not [`Outcome::Ok`].
    pub fn drain_for_shutdown(&mut self) -> Option<Batch> {
        if let Some(p) = &mut self.pending {
            if p.in_flight {
                return None;
            }
            p.in_flight = true;
            p.batch.attempt += 1;
            return Some(p.batch.clone());
        }
        if self.queue.is_empty() && self.durable.is_empty() {
            return None;
        }
        Some(self.take_batch())
    }

    /// Events held in memory: queued, the window, and the pending batch.
    pub fn depth(&self) -> usize {
        self.queue.len() + self.durable.len() + self.pending.as_ref().map_or(0, |p| p.batch.lines.len())
    }

    /// Events queued, not counting the pending batch.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether a batch is in flight.
    pub fn in_flight(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| p.in_flight)
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn batches(&self) -> Batches {
        self.batches
    }

    /// The schedule's current wait after a failure, 0 while healthy.
    pub fn retry_wait_ms(&self) -> u64 {
        if self.schedule.failures() == 0 {
            0
        } else {
            retry_schedule::interval(self.schedule)
        }
    }

    pub fn status(&self) -> CoreStatus {
        CoreStatus {
            consecutive_failures: self.schedule.failures(),
            next_attempt_at: self.retry_at,
            retry_wait_ms: self.retry_wait_ms(),
            last_error: self.last_error.clone(),
            last_success_at: self.last_success,
            last_failure_at: self.last_failure,
        }
    }
}

#[cfg(test)]
mod tests;

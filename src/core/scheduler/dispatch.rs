//! Dispatch: popping the next due task and marking it in flight, past its
//! budget pool's token bucket; and the buckets themselves (rate, burst,
//! `Retry-After` pauses).
//!
//! This is the hot path (one call per poll): it changes a task's state in
//! place and allocates nothing beyond the [`Dispatch`] it returns.

use super::{Deferral, Scheduler, Spread, TaskState};
use crate::core::bucket::TokenBucket;
use crate::core::queue::QueueEntry;
use crate::core::staleness;
use crate::core::task::{self, TaskMeta};
use crate::model::{BreakerState, TaskKey, Timestamp};
use std::sync::Arc;

/// A task handed to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    pub key: TaskKey,
    /// The time it was due: its cadence continues from here.
    pub due: Timestamp,
    /// When it first fell due, before any wait for its pool's token bucket
    /// (equal to `due` when it did not wait).
    pub first_due: Timestamp,
    pub meta: TaskMeta,
    pub breaker: Option<(BreakerState, BreakerState)>,
}

impl Scheduler {
    /// Pop the next due task and mark it in flight. A due task whose pool's
    /// token bucket has no capacity now gets the next free slot reserved and
    /// goes back in the queue for that time; the next due task is tried.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<Dispatch> {
        let max_interval = self.settings.adaptive.max_interval;
        let (e, t, first_due) = loop {
            let e = self.queue.pop_due(now)?;
            let Some(t) = self.tasks.get_mut(&e.key) else {
                continue;
            };
            let TaskState::Queued { deferred } = &mut t.state else {
                // Only queued tasks are on the queue: never dispatch another.
                continue;
            };
            let reserved = deferred.is_some_and(|d| d.reserved);
            if !reserved
                && let Some(pool) = &t.meta.pool
                && let Some(bucket) = self.buckets.get_mut(pool)
            {
                let slot = bucket.reserve(now, t.meta.cost);
                if slot > now {
                    let from = deferred.map_or(t.rec.next_run, |d| d.from);
                    *deferred = Some(Deferral { from, reserved: true });
                    t.rec.next_run = slot;
                    // The bucket lines the tasks that fell due together up
                    // at its rate, a train that would meet it together
                    // again every cycle: spread this one over its next
                    // interval once it has been polled.
                    // Priority 1 and 2 keep their cadence: only the groups
                    // the plan may stretch are moved.
                    let adjustable = t.meta.priority >= crate::core::solver::MIN_ADJUSTABLE_PRIORITY;
                    t.spread = if adjustable { Spread::Wide } else { Spread::None };
                    let score = staleness::score(t.rec.last_success, now, max_interval);
                    self.queue.upsert(QueueEntry {
                        next_run: slot,
                        staleness: (score * 1000.0) as u16,
                        ..e
                    });
                    continue;
                }
            }
            let first_due = deferred.map_or(t.rec.next_run, |d| d.from);
            if let Some(pool) = &t.meta.pool
                && let Some(bucket) = self.buckets.get_mut(pool)
            {
                bucket.count_sent(t.meta.cost);
            }
            break (e, t, first_due);
        };
        let due = t.rec.next_run;
        let breaker = task::on_dispatch(&mut t.rec, now);
        t.state = TaskState::InFlight { due, removed: false };
        self.in_flight += 1;
        self.dirty.insert(e.key.clone());
        Some(Dispatch {
            key: e.key,
            due,
            first_due,
            meta: t.meta.clone(),
            breaker,
        })
    }

    /// Create or update a pool's token bucket. A lower rate cancels the
    /// slots already reserved in the pool, so they are reserved again at
    /// the new rate.
    pub fn set_pool(&mut self, pool: &str, rate_rps: f64, burst: u32, now: Timestamp) {
        match self.buckets.get_mut(pool) {
            Some(b) if b.burst() == burst => {
                let slower = rate_rps < b.rate();
                b.set_rate(rate_rps, now);
                if slower {
                    self.cancel_reservations(pool);
                }
            }
            _ => {
                self.buckets
                    .insert(Arc::from(pool), TokenBucket::new(rate_rps, burst, now));
                self.cancel_reservations(pool);
            }
        }
    }

    /// Each pool's requests dispatched since the last call (what it really
    /// sent: the AIMD controller learns from it which rate held).
    pub fn take_sent(&mut self) -> Vec<(Arc<str>, f64)> {
        self.buckets
            .iter_mut()
            .map(|(k, b)| (k.clone(), b.take_sent()))
            .collect()
    }

    /// Forget pools that no longer exist (their tasks are unbudgeted now).
    pub fn retain_pools(&mut self, keep: &dyn Fn(&str) -> bool) {
        self.buckets.retain(|k, _| keep(k));
    }

    /// A pool's effective rate and pause, for the health data.
    pub fn pool_bucket(&self, pool: &str) -> Option<&TokenBucket> {
        self.buckets.get(pool)
    }

    /// Nothing in `pool` is dispatched before `until` (a `Retry-After`).
    pub fn pause_pool(&mut self, pool: &str, until: Timestamp, now: Timestamp) {
        let Some(b) = self.buckets.get_mut(pool) else {
            return;
        };
        if b.paused_until(now).is_some_and(|t| t >= until) {
            return;
        }
        b.pause_until(until);
        self.cancel_reservations(pool);
    }

    /// The slots reserved in `pool` are void: each deferred task meets the
    /// bucket again when its slot comes (still counting its wait from when
    /// it first fell due).
    fn cancel_reservations(&mut self, pool: &str) {
        for t in self.tasks.values_mut() {
            if let TaskState::Queued { deferred: Some(d) } = &mut t.state
                && t.meta.pool.as_deref() == Some(pool)
            {
                d.reserved = false;
            }
        }
    }
}

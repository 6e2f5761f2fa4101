//! Completion: what a finished poll does to its task. Prepared on a copy
//! first, so a dead-letter move can be committed before anything shows it;
//! then applied (or, if the commit failed, the poll ends without the move).

use super::{Scheduler, Spread, TaskState};
use crate::core::phase;
use crate::core::task::{self, TaskMeta, Transition};
use crate::model::{FAILED_ITEMS_KEPT, PollResult, TaskKey, TaskRecord, Timestamp};
use rand::Rng;
use std::time::Duration;

/// A completion computed but not yet applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub key: TaskKey,
    pub record: TaskRecord,
    pub transition: Transition,
    pub meta: TaskMeta,
}

impl Scheduler {
    /// Compute what a finished poll does, without changing anything.
    pub fn prepare_completion<R: Rng + ?Sized>(
        &self,
        key: &TaskKey,
        result: &PollResult,
        now: Timestamp,
        rng: &mut R,
    ) -> Option<Prepared> {
        let t = self.tasks.get(key)?;
        let TaskState::InFlight { due, .. } = t.state else {
            return None;
        };
        let mut rec = t.rec.clone();
        let in_maintenance = self.in_maintenance(&key.instance, &t.meta, now);
        let mut transition = match result {
            Ok(ok) => {
                rec.failed_items = ok.failed_items.iter().take(FAILED_ITEMS_KEPT).cloned().collect();
                let tr = task::on_success(&mut rec, &t.meta, ok.digest, due, now, &self.settings.adaptive, rng);
                let iv = || task::current_interval(&rec, &t.meta, &self.settings.adaptive);
                let moved = match t.spread {
                    Spread::None => Duration::ZERO,
                    Spread::Settle { first } => phase::settle(key, iv(), first),
                    Spread::Wide => phase::spread(key, iv()),
                };
                rec.next_run = rec.next_run.plus(moved);
                tr
            }
            Err(err) => {
                rec.failed_items.clear();
                task::on_failure_in(&mut rec, err, now, &self.settings.failure, rng, in_maintenance)
            }
        };
        transition.maintenance = in_maintenance;
        Some(Prepared {
            key: key.clone(),
            record: rec,
            transition,
            meta: t.meta.clone(),
        })
    }

    /// Make a prepared completion visible and queue the task again.
    pub fn apply(&mut self, planned: Prepared, now: Timestamp) {
        let record = planned.record;
        self.finish(planned.key, now, |rec| *rec = record);
    }

    /// The commit of a prepared dead-letter move failed: the task leaves
    /// flight with the record it had, so nothing shows a move that is not on
    /// disk, and the move is planned afresh when the task next completes.
    /// It is due again when the plan would have run it, not at once: a store
    /// that keeps failing is then retried, and the target polled, no faster
    /// than the task's own cadence.
    pub fn keep_unmoved(&mut self, planned: Prepared, now: Timestamp) {
        let next_run = planned.record.next_run;
        self.finish(planned.key, now, |rec| {
            rec.next_run = next_run;
            // Still dead-lettered (a recovery that was not committed): its
            // next probe is that run.
            if let Some(dl) = rec.dead_letter.as_mut() {
                dl.next_recheck = next_run;
                rec.retry_at = Some(next_run);
            }
        });
    }

    /// End a poll: the task leaves flight with its record updated by
    /// `update`, and is queued again (or parked, if a hold came meanwhile,
    /// or dropped, if its instance went away while it ran).
    fn finish(&mut self, key: TaskKey, now: Timestamp, update: impl FnOnce(&mut TaskRecord)) {
        let Some(t) = self.tasks.get_mut(&key) else {
            return;
        };
        let mut removed = false;
        if let TaskState::InFlight { removed: r, .. } = t.state {
            self.in_flight -= 1;
            removed = r;
            t.state = TaskState::QUEUED;
        }
        update(&mut t.rec);
        t.spread = Spread::None;
        if removed {
            self.delete(key);
            return;
        }
        t.settle();
        self.dirty.insert(key.clone());
        self.enqueue(&key, now);
    }

    /// prepare + apply, for completions that need no commit in between.
    pub fn complete<R: Rng + ?Sized>(
        &mut self,
        key: &TaskKey,
        result: &PollResult,
        now: Timestamp,
        rng: &mut R,
    ) -> Option<Transition> {
        let p = self.prepare_completion(key, result, now, rng)?;
        let tr = p.transition.clone();
        self.apply(p, now);
        Some(tr)
    }
}

//! Persistence: the group commit of task state, the per-minute history, and
//! operator actions committed before they are applied. Every write of task
//! rows goes through `write_lock`, so a group commit can never write an older
//! record over a dead-letter move.

use super::*;

impl Shared {
    /// Write task rows and the change events that go with them, in one
    /// transaction; the only path by which task state reaches the store.
    pub(super) async fn write_tasks(
        &self,
        batch: Vec<(TaskKey, Option<TaskRecord>)>,
        events: Vec<OutboxEvent>,
    ) -> Result<(), EngineError> {
        if batch.is_empty() && events.is_empty() {
            return Ok(());
        }
        let tasks = self.tasks.clone();
        tokio::task::spawn_blocking(move || tasks.write_tasks_with_events(&batch, &events))
            .await
            .map_err(|e| EngineError::Join(e.to_string()))??;
        Ok(())
    }

    /// Group commit of everything that changed since the last flush:
    /// values and kept bodies first, then task records and their events,
    /// so stored samples are never older than their record's last success.
    pub async fn flush(&self) -> Result<usize, EngineError> {
        let _w = self.write_lock.lock().await;
        let latest = self.latest.take_dirty();
        if !latest.is_empty() {
            let store = self.store.clone();
            let (result, latest) = tokio::task::spawn_blocking(move || (store.write_latest(&latest), latest))
                .await
                .map_err(|e| EngineError::Join(e.to_string()))?;
            if let Err(e) = result {
                self.latest.restore(latest);
                return Err(e.into());
            }
        }
        let ((recs, deleted), events) = {
            let mut c = self.core();
            (c.scheduler.take_dirty(), std::mem::take(&mut c.staged))
        };
        let n = recs.len() + deleted.len();
        let mut batch: Vec<(TaskKey, Option<TaskRecord>)> = recs.into_iter().map(|(k, r)| (k, Some(r))).collect();
        batch.extend(deleted.into_iter().map(|k| (k, None)));
        if let Err(e) = self.write_tasks(batch.clone(), events.clone()).await {
            // Put them back so the next flush tries again.
            let mut c = self.core();
            c.scheduler.mark_dirty(batch.into_iter().map(|(k, _)| k));
            let later = std::mem::replace(&mut c.staged, events);
            c.staged.extend(later);
            return Err(e);
        }
        Ok(n)
    }

    /// Save the pools' AIMD state when it moved since the last save (see
    /// [`BudgetState::aimd_to_save`]), so a restart resumes it. A failed
    /// save is tried again at the next flush.
    pub(super) async fn save_aimd(&self) -> Result<(), EngineError> {
        let Some(states) = self.budgets(|b, _| b.aimd_to_save()) else {
            return Ok(());
        };
        let store = self.store.clone();
        let (result, states) = tokio::task::spawn_blocking(move || (store.save_aimd(&states), states))
            .await
            .map_err(|e| EngineError::Join(e.to_string()))?;
        result?;
        self.budgets(|b, _| b.aimd_saved(states));
        Ok(())
    }

    /// Close the minute that started at `minute` (Unix seconds): store its
    /// rollup and prune rows past the retention period.
    pub async fn record_minute(&self, minute: u64) -> Result<(), EngineError> {
        let rollup = {
            let c = self.core();
            let s = &c.scheduler;
            crate::store::Rollup {
                polls: self.minute_polls.swap(0, Ordering::Relaxed),
                errors: self.minute_errors.swap(0, Ordering::Relaxed),
                queue_depth: s.queue_len() as u64,
                dead_letter: s.dead_letters().len() as u64,
            }
        };
        let keep_since = minute.saturating_sub(HISTORY_RETENTION.as_secs());
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.put_rollup(minute, &rollup, keep_since))
            .await
            .map_err(|e| EngineError::Join(e.to_string()))??;
        Ok(())
    }

    /// An operator action on one task, committed before it is applied: until
    /// the commit returns, the task keeps its old record (so the API, the
    /// dashboard and the metrics show only committed state) and is held off
    /// the schedule; if the commit fails, nothing changes and the error is
    /// returned. Shipped to the event sink, with `actor`, once committed.
    ///
    /// The commit runs in its own task, so a caller that goes away (an HTTP
    /// client hanging up) cannot leave the task held or half applied.
    pub async fn operator_action(
        self: &Arc<Self>,
        key: &TaskKey,
        actor: &str,
        op: OperatorOp,
    ) -> Result<TaskRecord, EngineError> {
        let shared = Arc::clone(self);
        let (key, actor) = (key.clone(), actor.to_string());
        let source = crate::audit::current_source();
        tokio::spawn(crate::audit::with_source_opt(source, async move {
            shared.commit_operator_action(&key, &actor, op).await
        }))
        .await
        .map_err(|e| EngineError::Join(e.to_string()))?
    }

    async fn commit_operator_action(
        &self,
        key: &TaskKey,
        actor: &str,
        op: OperatorOp,
    ) -> Result<TaskRecord, EngineError> {
        let _w = self.write_lock.lock().await;
        let now = self.now();
        let (rec, type_name) = {
            let mut c = self.core();
            let s = &mut c.scheduler;
            let rec = s.prepare_op(key, op, now)?;
            s.freeze(key);
            (rec, s.get(key).map(|t| t.meta.type_name.clone()))
        };
        let what = match op {
            OperatorOp::Retry => DeadLetterAction::Retried,
            OperatorOp::Discard => DeadLetterAction::Discarded,
            OperatorOp::Enable => DeadLetterAction::Enabled,
        };
        let event = self.sink.stage(&Event::dead_letter(
            now,
            DeadLetterEvent::new(&key.instance, type_name.as_deref().unwrap_or(""), &key.group, what).with_actor(actor),
        ));
        let row = vec![(key.clone(), Some(rec.clone()))];
        if let Err(e) = self.write_tasks(row, event.into_iter().collect()).await {
            self.core().scheduler.release(key, now);
            return Err(e);
        }
        self.core().scheduler.apply_op(key, op, rec.clone(), now);
        if op == OperatorOp::Discard {
            self.latest.park(key);
        }
        self.poke();
        Ok(rec)
    }
}

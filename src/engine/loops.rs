//! The engine's loops: the dispatcher (due tasks to workers, within the
//! worker cap and the pools' token buckets), the flusher, the resolver (AIMD
//! recovery and re-planning) and the per-minute history.

use super::*;

pub(super) async fn dispatch_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = shared.now();
        let mut batch = Vec::new();
        let wake_at = {
            let mut c = shared.core();
            let Core {
                scheduler: s, staged, ..
            } = &mut *c;
            let workers = s.settings().scheduler.workers;
            while s.in_flight() < workers {
                let Some(d) = s.pop_due(now) else { break };
                if let Some((from, to)) = d.breaker {
                    // Staged with the dispatch's record change (same lock):
                    // the next group commit writes both.
                    let event = BreakerEvent {
                        instance: d.key.instance.to_string(),
                        type_name: d.meta.type_name.to_string(),
                        group: d.key.group.to_string(),
                        from,
                        to,
                        failures: 0,
                        retry_at: None,
                    };
                    let event =
                        Event::breaker(now, event).in_maintenance(s.in_maintenance(&d.key.instance, &d.meta, now));
                    if let Some(row) = shared.sink.stage(&event) {
                        staged.push(row);
                    }
                }
                batch.push(d);
            }
            let wake_at = if s.in_flight() >= workers {
                None
            } else {
                s.next_wakeup()
            };
            let wake_ms = match wake_at {
                _ if s.in_flight() >= workers => 0,
                Some(t) => t.0,
                None => u64::MAX,
            };
            shared.dispatcher_wake.store(wake_ms, Ordering::Relaxed);
            wake_at
        };
        if !batch.is_empty() {
            shared.last_dispatch_ms.store(now.0, Ordering::Relaxed);
        }
        // Spawned after the lock is released: completions of earlier polls
        // are not held up by the spawns.
        for d in batch {
            shared.metrics.dispatch_lateness.observe(now.since(d.due).as_secs_f64());
            if let Some(pool) = d.meta.pool.as_deref() {
                let waited = d.due.since(d.first_due);
                shared
                    .metrics
                    .budget_wait
                    .with_label_values(&[pool])
                    .observe(waited.as_secs_f64());
            }
            shared.running.fetch_add(1, Ordering::AcqRel);
            let running = shared.running.clone();
            let task = shared.clone();
            tokio::spawn(async move {
                super::worker::run_poll(task, d).await;
                // After run_poll has dropped its reference to the state.
                running.fetch_sub(1, Ordering::AcqRel);
            });
        }
        let sleep = match wake_at {
            Some(t) => Duration::from_millis(t.0.saturating_sub(shared.now().0)),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = shared.wake.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

pub(super) async fn flush_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let every = shared.core().scheduler.settings().scheduler.state_flush_interval;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = shared.flush().await {
            tracing::error!(error = %e, "state flush failed; will retry");
        }
        if let Err(e) = shared.save_aimd().await {
            tracing::error!(error = %e, "saving the pools' AIMD state failed; will retry");
        }
    }
}

/// How often AIMD recovery is applied to the pools' token buckets.
const AIMD_TICK: Duration = Duration::from_secs(1);

/// How often the intervals priority 1/2 groups run at are compared with
/// those the plan was solved with.
const RUNNING_CHECK: Duration = Duration::from_secs(10);

/// Keeps the plans current: AIMD recovery every second, a re-solve when the
/// effective budget moved past the hysteresis (now, on a 429, or by
/// recovery), when shed groups would fit again, when a priority 1/2
/// group's running demand moved past the hysteresis, and every
/// `resolve_interval`.
pub(super) async fn resolve_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut running_checked = shared.now();
    loop {
        let mut due = false;
        tokio::select! {
            _ = tokio::time::sleep(AIMD_TICK) => {}
            _ = shared.resolve.notified() => due = true,
            _ = stop.changed() => return,
        }
        let now = shared.now();
        let (settings, sent) = {
            let mut c = shared.core();
            (c.scheduler.settings().scheduler.clone(), c.scheduler.take_sent())
        };
        let (changed, resolve, solved_at, events) = shared.budgets(|b, _| {
            b.note_sent(now, &sent);
            let (changed, resolve) = b.tick(now, &settings);
            (changed, resolve, b.solved_at, std::mem::take(&mut b.events))
        });
        shared.stage_pool_events(now, events);
        if !changed.is_empty() {
            let cat = shared.catalog();
            let mut c = shared.core();
            for (pool, rate) in changed {
                if let Some(b) = cat.budgets.iter().find(|b| b.name == pool) {
                    c.scheduler.set_pool(&pool, rate, b.share_burst(), now);
                }
            }
        }
        if !(due || resolve) && now.since(running_checked) >= RUNNING_CHECK {
            running_checked = now;
            let running = super::budget::running_of(&shared.core().scheduler);
            due = shared.budgets(|b, _| {
                let seen = b.observe_running(running, now);
                let shedding = b.plans.values().any(|p| p.plan.groups.iter().any(|g| g.shed));
                let threshold = if shedding {
                    crate::core::plan::SHEDDING_HYSTERESIS
                } else {
                    crate::core::aimd::RESOLVE_HYSTERESIS
                };
                crate::core::plan::running_moved_by(&b.running, &seen, threshold)
            });
        }
        if due || resolve || now.since(solved_at) >= settings.resolve_interval {
            let mut none = super::Records::default();
            shared.reconcile(now, &mut none, false);
        }
    }
}

pub(super) async fn history_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = shared.now().0 / 1000;
        let minute = now - now % 60;
        let wait = Duration::from_secs(minute + 60 - now);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = shared.record_minute(minute).await {
            tracing::warn!(error = %e, "could not record the minute's history");
        }
    }
}

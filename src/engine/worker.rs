//! One poll from dispatch to its recorded outcome: the fetch under a hard
//! deadline, rate signals to the pool, the completion prepared and applied
//! (a dead-letter move committed first), its events and metrics.

use super::*;

fn deadline_error(timeout: Duration) -> PollError {
    PollError::new(
        ErrorCategory::Transient,
        ErrorKind::Timeout,
        format!("no response within {}", crate::model::duration_str::format(timeout)),
    )
}

/// One poll: run it under a hard deadline, then record the outcome.
pub(super) async fn run_poll(shared: Arc<Shared>, d: crate::core::scheduler::Dispatch) {
    let key = d.key.clone();
    if let Some((from, to)) = d.breaker {
        tracing::info!(task = %key, from = from.as_str(), to = to.as_str(), "circuit breaker half-open: probing");
    }
    let started = Instant::now();
    let catalog = shared.catalog();
    let target = catalog.target(&key);
    let forward = target.as_ref().is_some_and(|t| t.group().forward);
    let result: PollResult = match &target {
        Some(t) => {
            let (instance, group) = (&t.instance, t.group());
            let items = shared.fan_out_items(instance, group);
            // The poller enforces the instance timeout itself; this outer
            // bound guarantees a worker can never hang whatever it does.
            let hard = crate::poll::deadline(instance, group, items.len()) + Duration::from_millis(500);
            let poll = shared.fetch.fetch(instance, t.base_url.as_deref(), group, &items);
            match tokio::time::timeout(hard, poll).await {
                Ok(r) => r,
                Err(_) => Err(deadline_error(instance.timeout)),
            }
        }
        None => Err(PollError::new(
            ErrorCategory::Permanent,
            ErrorKind::Other,
            "instance or group no longer configured",
        )),
    };
    let elapsed = started.elapsed();
    let now = shared.now();
    // The value rules run here, outside every lock.
    let extracted = match (&result, &target) {
        (Ok(ok), Some(t)) => extract_values(&shared, &catalog, t, ok),
        _ => None,
    };
    // Rate signals go to the pool before the task is re-queued, so the
    // task's own retry lands after the pool's pause.
    if let Some(pool) = &d.meta.pool {
        let limited = match &result {
            Err(e) if e.is_rate_limited() => Some(e.retry_after),
            Ok(ok) => ok
                .failed_items
                .iter()
                .find(|f| f.error.is_rate_limited())
                .map(|f| f.error.retry_after),
            Err(_) => None,
        };
        if let Some(retry_after) = limited {
            shared.metrics.rate_limited.with_label_values(&[pool]).inc();
            shared.rate_limited(pool, retry_after, now);
        }
    }
    if let Ok(ok) = &result {
        for f in &ok.failed_items {
            tracing::warn!(task = %key, item = %f.item, error = %f.error.message, "fan-out item failed");
        }
    }
    // One lock for the common case: plan and apply together. A dead-letter
    // move is planned here and applied only after it is committed.
    let keeps_latest = result
        .as_ref()
        .is_ok_and(|ok| extracted.is_some() || ok.kept_body.is_some());
    let waiting_for_facts = extracted.as_ref().is_some_and(|x| x.2);
    let stale_after = |s: &crate::core::Scheduler| {
        s.get(&key)
            .map(|t| crate::core::staleness::stale_after(s.interval_of(t)))
    };
    let (planned, wake, mut fresh_for) = {
        let mut s = shared.sched();
        let planned = match s.prepare_completion(&key, &result, now, &mut *lock(&shared.rng)) {
            Some(p) if !p.transition.must_commit() => {
                let info = (p.transition.clone(), p.meta.clone());
                let events = change_events(&shared.sink, &p, &result, now);
                s.apply(p, now);
                if !events.is_empty() {
                    lock(&shared.staged).extend(events);
                }
                Some(Ok(info))
            }
            Some(p) => Some(Err(p)),
            None => None,
        };
        // What the latest values need of the task, read under this lock.
        let fresh_for = match &planned {
            Some(Ok(_)) if keeps_latest => stale_after(&s),
            _ => None,
        };
        (planned, shared.must_wake_dispatcher(&s, &key), fresh_for)
    };
    if wake {
        shared.poke();
    }
    let info = match planned {
        Some(Ok(info)) => Some(info),
        Some(Err(p)) => {
            let meta = p.meta.clone();
            let events = change_events(&shared.sink, &p, &result, now);
            let transition = commit_then_apply(&shared, p, events, now).await;
            shared.poke();
            Some((transition, meta))
        }
        None => None,
    };
    if let Some((transition, meta)) = &info {
        emit_poll_events(&shared, &key, meta, transition, &result, elapsed, forward, now);
        if matches!(transition.dead_letter, Some(DeadLetterMove::Entered(_))) {
            shared.latest.park(&key);
        }
        if let Ok(ok) = &result
            && keeps_latest
        {
            if fresh_for.is_none() {
                // The completion was committed first (a dead letter left).
                fresh_for = stale_after(&shared.sched());
            }
            if let Some(stale_after) = fresh_for {
                if waiting_for_facts && let Some(json) = &ok.json {
                    shared.latest.wait_for_facts(
                        &key,
                        latest::Waiting {
                            json: json.clone(),
                            polled_at: now,
                            stale_after,
                        },
                    );
                } else if extracted.is_some() {
                    shared.latest.stop_waiting(&key);
                }
                shared.latest.record(
                    &key,
                    latest::Fresh {
                        samples: extracted.map(|(samples, fingerprint, _)| (samples, fingerprint)),
                        bodies: ok.kept_body.as_ref(),
                        failed_items: &ok.failed_items,
                        polled_at: now,
                        stale_after,
                    },
                );
            }
        }
    }
    if let Some((transition, meta)) = info {
        shared.minute_polls.fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            shared.minute_errors.fetch_add(1, Ordering::Relaxed);
        }
        shared.metrics.observe_poll(
            &meta.type_name,
            &key,
            elapsed.as_secs_f64(),
            result.as_ref().err().map(|e| e.category),
        );
        log_transition(&key, &transition, &result);
    }
    if let Ok(ok) = result {
        if let Some(facts) = ok.facts {
            learn_facts(&shared, &catalog, &key, facts);
        }
        if let Some(shape) = ok.shape {
            shared.learn_shape(&key, shape);
        }
    }
}

/// A group gave facts about its instance: keep them, and run the rules of
/// the polls that waited for them again (their samples are recorded with
/// the time of their own poll).
fn learn_facts(shared: &Shared, catalog: &Catalog, key: &TaskKey, facts: crate::values::Facts) {
    let waiting = shared.latest.learn_facts(&key.instance, facts);
    if waiting.is_empty() {
        return;
    }
    let known = shared.latest.facts_of(&key.instance);
    for (k, w) in waiting {
        let (Some(rules), Some(t)) = (catalog.rules_of(&k), catalog.target(&k)) else {
            continue;
        };
        let out = rules.run(&w.json, known.as_deref());
        count_skips(shared, t.type_name(), &k.group, &out);
        if out.waiting_for_facts {
            shared.latest.wait_for_facts(&k, w);
            continue;
        }
        tracing::debug!(task = %k, "facts learned; values extracted again");
        shared.latest.record(
            &k,
            latest::Fresh {
                samples: Some((out.samples, rules.fingerprint)),
                bodies: None,
                failed_items: &[],
                polled_at: w.polled_at,
                stale_after: w.stale_after,
            },
        );
    }
}

/// Skipped samples to `pollster_values_errors_total`.
fn count_skips(shared: &Shared, type_name: &str, group: &str, out: &crate::values::Extraction) {
    for ((metric, reason), n) in &out.skipped {
        shared
            .metrics
            .values_errors
            .with_label_values(&[type_name, group, metric, reason.as_str()])
            .inc_by(*n);
    }
}

/// The samples a group's rules make of a successful poll, with the rules'
/// fingerprint and whether some wait for a fact the instance has not
/// learned; skipped samples are counted in `pollster_values_errors_total`.
/// `None` for a group without rules.
fn extract_values(
    shared: &Shared,
    catalog: &Catalog,
    target: &crate::core::catalog::Target,
    ok: &crate::model::PollSuccess,
) -> Option<(Vec<crate::values::Sample>, u64, bool)> {
    let group = target.group();
    let rules = catalog.values.group(target.type_name(), &group.name)?;
    let facts = if rules.uses_facts {
        shared.latest.facts_of(&target.instance.name)
    } else {
        None
    };
    let out = rules.run(ok.json.as_ref()?, facts.as_deref());
    count_skips(shared, target.type_name(), &group.name, &out);
    Some((out.samples, rules.fingerprint, out.waiting_for_facts))
}

/// The poll event of one finished poll, to the sink's memory queue (best
/// effort). Its change events went to the outbox with its state.
#[allow(clippy::too_many_arguments)]
fn emit_poll_events(
    shared: &Shared,
    key: &TaskKey,
    meta: &crate::core::task::TaskMeta,
    t: &Transition,
    result: &PollResult,
    elapsed: Duration,
    forward: bool,
    now: Timestamp,
) {
    if !shared.sink.is_enabled() {
        return;
    }
    let mut poll = PollEvent::from_result(&key.instance, &meta.type_name, &key.group, elapsed, result, t.changed);
    if forward
        && let Ok(ok) = result
        && let Some(body) = &ok.body
    {
        poll = poll.with_body(body);
    }
    shared.sink.emit(&Event::poll(now, poll));
}

/// The change events of a planned completion, as outbox rows: a breaker
/// transition and a dead-letter move (none while the sink is off). Cheap
/// when there is no transition, which is almost always.
pub(super) fn change_events(sink: &Sink, p: &Prepared, result: &PollResult, now: Timestamp) -> Vec<OutboxEvent> {
    let t = &p.transition;
    if (t.breaker.is_none() && t.dead_letter.is_none()) || !sink.is_enabled() {
        return Vec::new();
    }
    let (key, type_name) = (&p.key, &p.meta.type_name);
    let mut events = Vec::new();
    if let Some((from, to)) = t.breaker {
        events.push(Event::breaker(
            now,
            BreakerEvent {
                instance: key.instance.to_string(),
                type_name: type_name.to_string(),
                group: key.group.to_string(),
                from,
                to,
                failures: p.record.failures,
                retry_at: p.record.retry_at,
            },
        ));
    }
    let action = match t.dead_letter {
        Some(DeadLetterMove::Entered(_)) => Some(DeadLetterAction::Entered),
        Some(DeadLetterMove::Left) => Some(DeadLetterAction::Left),
        Some(DeadLetterMove::Rechecked) => Some(DeadLetterAction::Rechecked),
        None => None,
    };
    if let Some(action) = action {
        let mut e = DeadLetterEvent::new(&key.instance, type_name, &key.group, action);
        if let Some(err) = result.as_ref().err() {
            e = e.with_error(err.message.clone());
        }
        if let Some(DeadLetterMove::Entered(reason)) = t.dead_letter {
            e = e.with_reason(reason);
        }
        events.push(Event::dead_letter(now, e));
    }
    events.iter().filter_map(|e| sink.stage(e)).collect()
}

/// A dead-letter move is durable before it is visible anywhere, and its
/// change events with it. If the commit fails, the task is not moved and
/// the events are dropped with the move: showing it would promise an entry
/// (or an exit) that a crash could lose. The task keeps its record and is
/// due again when the plan said, and the move is planned afresh then.
/// Returns what the completion did.
pub(super) async fn commit_then_apply(
    shared: &Shared,
    p: Prepared,
    events: Vec<OutboxEvent>,
    now: Timestamp,
) -> Transition {
    let _w = shared.write_lock.lock().await;
    let row = vec![(p.key.clone(), Some(p.record.clone()))];
    let result = shared.write_tasks(row, events).await;
    let mut s = shared.sched();
    match result {
        Ok(()) => {
            let transition = p.transition.clone();
            s.apply(p, now);
            transition
        }
        Err(e) => {
            tracing::error!(task = %p.key, error = %e, "could not commit a dead-letter move; the task stays where it was until its next poll");
            let changed = p.transition.changed;
            s.keep_unmoved(p, now);
            Transition {
                changed,
                ..Transition::default()
            }
        }
    }
}

fn log_transition(key: &TaskKey, t: &Transition, result: &PollResult) {
    let err = result.as_ref().err();
    match t.dead_letter {
        Some(DeadLetterMove::Entered(reason)) => tracing::warn!(
            task = %key,
            reason = reason.as_str(),
            error = err.map(|e| e.message.as_str()).unwrap_or(""),
            "Routing task to dead-letter queue"
        ),
        Some(DeadLetterMove::Left) => {
            tracing::info!(task = %key, "task recovered; leaving dead-letter queue")
        }
        Some(DeadLetterMove::Rechecked) => {
            tracing::info!(task = %key, error = err.map(|e| e.message.as_str()).unwrap_or(""), "dead-letter recheck failed")
        }
        None => {}
    }
    if let Some((from, to)) = t.breaker {
        if to == BreakerState::Open {
            tracing::warn!(task = %key, from = from.as_str(), "circuit breaker open");
        } else {
            tracing::info!(task = %key, from = from.as_str(), to = to.as_str(), "circuit breaker state changed");
        }
    }
    if let Some(e) = err {
        tracing::debug!(task = %key, category = e.category.as_str(), status = e.status, error = %e.message, "poll failed");
    }
}

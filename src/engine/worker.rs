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

/// One poll: run it under a hard deadline, then record the outcome. Each
/// step hands the next what it needs; none calls back into the steps before.
pub(super) async fn run_poll(shared: Arc<Shared>, d: crate::core::scheduler::Dispatch) {
    let key = d.key.clone();
    if let Some((from, to)) = d.breaker {
        let now = shared.now();
        let maintenance = shared
            .core()
            .scheduler
            .in_maintenance(&key.instance, &d.meta, now)
            .then_some(true);
        tracing::info!(instance = %key.instance, group = %key.group, maintenance, from = from.as_str(), to = to.as_str(), "circuit breaker half-open: probing");
    }
    let catalog = shared.catalog();
    let mut outcome = poll(&shared, &catalog, &key).await;
    // Rate signals go to the pool before the task is re-queued, so the
    // task's own retry lands after the pool's pause.
    if let Some(pool) = &d.meta.pool {
        signal_pool(&shared, pool, &outcome);
    }
    if let Some(done) = complete(&shared, &key, &outcome).await {
        let o = &outcome;
        emit_poll_events(
            &shared,
            &key,
            &done.meta,
            &done.transition,
            &o.result,
            o.elapsed,
            o.forward,
            o.now,
        );
        if matches!(done.transition.dead_letter, Some(DeadLetterMove::Entered(_))) {
            shared.latest.park(&key);
        }
        if let Some(stale_after) = done.fresh_for {
            record_latest(
                &shared,
                &key,
                &outcome.result,
                outcome.extracted.take(),
                outcome.now,
                stale_after,
            );
        }
        observe(&shared, &key, &done, &outcome);
    }
    if let Ok(ok) = outcome.result {
        if let Some(facts) = ok.facts {
            learn_facts(&shared, &catalog, &key, facts);
        }
        if let Some(shape) = ok.shape {
            shared.learn_shape(&key, shape);
        }
    }
}

/// One poll's outcome, as the worker carries it from the fetch to the
/// record.
struct Outcome {
    result: PollResult,
    elapsed: Duration,
    /// The engine's time when the answer was in.
    now: Timestamp,
    /// The group forwards its bodies to the sink.
    forward: bool,
    /// What the group's value rules made of a successful answer.
    extracted: Option<Extracted>,
}

impl Outcome {
    /// The answer has something for the latest-values cache.
    fn keeps_latest(&self) -> bool {
        self.result
            .as_ref()
            .is_ok_and(|ok| self.extracted.is_some() || ok.kept_body.is_some())
    }
}

/// A completion applied to the scheduler.
struct Completed {
    transition: Transition,
    meta: crate::core::task::TaskMeta,
    /// How long the task's latest values stay fresh, when the answer has
    /// any to keep.
    fresh_for: Option<Duration>,
}

/// The fetch under its hard deadline, and the value rules run on the
/// answer, outside every lock.
async fn poll(shared: &Shared, catalog: &Catalog, key: &TaskKey) -> Outcome {
    let started = Instant::now();
    let target = catalog.target(key);
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
    let extracted = match (&result, &target) {
        (Ok(ok), Some(t)) => extract_values(shared, catalog, t, ok),
        _ => None,
    };
    if let Ok(ok) = &result {
        for f in &ok.failed_items {
            tracing::warn!(instance = %key.instance, group = %key.group, item = %f.item, error = %f.error.message, "fan-out item failed");
        }
    }
    Outcome {
        result,
        elapsed,
        now,
        forward: target.as_ref().is_some_and(|t| t.group().forward),
        extracted,
    }
}

/// A 429 (of the poll, or of one of its items) is the pool's signal.
fn signal_pool(shared: &Shared, pool: &str, o: &Outcome) {
    let limited = match &o.result {
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
        shared.rate_limited(pool, retry_after, o.now);
    }
}

/// The completion prepared and applied: under one lock in the common case;
/// a dead-letter move is committed first and applied after. `None` when the
/// task is gone.
async fn complete(shared: &Shared, key: &TaskKey, o: &Outcome) -> Option<Completed> {
    let (result, now) = (&o.result, o.now);
    let keeps_latest = o.keeps_latest();
    let stale_after = |s: &crate::core::Scheduler| {
        s.get(key)
            .map(|t| crate::core::staleness::stale_after(s.interval_of(t)))
    };
    let (planned, wake) = {
        let mut c = shared.core();
        let Core {
            scheduler: s,
            rng,
            staged,
        } = &mut *c;
        let planned = match s.prepare_completion(key, result, now, rng) {
            Some(p) if !p.transition.must_commit() => {
                let (transition, meta) = (p.transition.clone(), p.meta.clone());
                let events = change_events(&shared.sink, &p, result, now);
                s.apply(p, now);
                staged.extend(events);
                // What the latest values need of the task, read under this lock.
                let fresh_for = if keeps_latest { stale_after(s) } else { None };
                Some(Ok(Completed {
                    transition,
                    meta,
                    fresh_for,
                }))
            }
            Some(p) => Some(Err(p)),
            None => None,
        };
        (planned, shared.must_wake_dispatcher(s, key))
    };
    if wake {
        shared.poke();
    }
    match planned? {
        Ok(done) => Some(done),
        Err(p) => {
            let meta = p.meta.clone();
            let events = change_events(&shared.sink, &p, result, now);
            let transition = commit_then_apply(shared, p, events, now).await;
            shared.poke();
            let fresh_for = if keeps_latest {
                stale_after(&shared.core().scheduler)
            } else {
                None
            };
            Some(Completed {
                transition,
                meta,
                fresh_for,
            })
        }
    }
}

/// A successful answer's samples and kept bodies to the latest-values
/// cache, or held back while they wait for a fact.
fn record_latest(
    shared: &Shared,
    key: &TaskKey,
    result: &PollResult,
    extracted: Option<Extracted>,
    now: Timestamp,
    stale_after: Duration,
) {
    let Ok(ok) = result else { return };
    let mut extracted = extracted;
    if let Some(x) = extracted.as_mut().filter(|x| x.waiting_for_facts)
        && let Some(json) = &ok.json
    {
        let waiting = latest::Waiting {
            json: json.clone(),
            polled_at: now,
            stale_after,
        };
        if let Some(out) = wait_or_run_again(shared, key, waiting, x.facts.take()) {
            x.samples = out.samples;
            x.waiting_for_facts = false;
        }
    } else if extracted.is_some() {
        shared.latest.stop_waiting(key);
    }
    shared.latest.record(
        key,
        latest::Fresh {
            samples: extracted.map(|x| (x.samples, x.fingerprint)),
            bodies: ok.kept_body.as_ref(),
            failed_items: &ok.failed_items,
            polled_at: now,
            stale_after,
        },
    );
}

/// The poll in the minute's history, the metrics and the log.
fn observe(shared: &Shared, key: &TaskKey, done: &Completed, o: &Outcome) {
    shared.minute_polls.fetch_add(1, Ordering::Relaxed);
    if o.result.is_err() {
        shared.minute_errors.fetch_add(1, Ordering::Relaxed);
    }
    shared.metrics.observe_poll(
        &done.meta.type_name,
        key,
        o.elapsed.as_secs_f64(),
        o.result.as_ref().err().map(|e| e.category),
    );
    log_transition(key, &done.transition, &o.result);
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
        let (polled_at, stale_after) = (w.polled_at, w.stale_after);
        let mut out = rules.run(&w.json, known.as_deref());
        count_skips(shared, t.type_name(), &k.group, &out);
        if out.waiting_for_facts {
            match wait_or_run_again(shared, &k, w, known.clone()) {
                None => continue,
                Some(again) => out = again,
            }
        }
        tracing::debug!(instance = %k.instance, group = %k.group, "facts learned; values extracted again");
        shared.latest.record(
            &k,
            latest::Fresh {
                samples: Some((out.samples, rules.fingerprint)),
                bodies: None,
                failed_items: &[],
                polled_at,
                stale_after,
            },
        );
    }
}

/// A poll whose rules wait for a fact is kept until the fact comes, unless
/// the instance learned facts after its rules ran (`seen`): then they run
/// again with those, until the poll either has every fact it names or is
/// kept against the facts known at that moment. `Some` is the extraction
/// that no longer waits.
fn wait_or_run_again(
    shared: &Shared,
    key: &TaskKey,
    mut waiting: latest::Waiting,
    mut seen: Option<Arc<crate::values::Facts>>,
) -> Option<crate::values::Extraction> {
    let catalog = shared.catalog();
    let (rules, target) = (catalog.rules_of(key)?, catalog.target(key)?);
    loop {
        let (back, known) = shared.latest.wait_for_facts(key, waiting, seen.as_ref()).err()?;
        let out = rules.run(&back.json, known.as_deref());
        count_skips(shared, target.type_name(), &key.group, &out);
        if !out.waiting_for_facts {
            return Some(out);
        }
        (waiting, seen) = (back, known);
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
) -> Option<Extracted> {
    let group = target.group();
    let rules = catalog.values.group(target.type_name(), &group.name)?;
    let facts = if rules.uses_facts {
        shared.latest.facts_of(&target.instance.name)
    } else {
        None
    };
    let out = rules.run(ok.json.as_ref()?, facts.as_deref());
    count_skips(shared, target.type_name(), &group.name, &out);
    Some(Extracted {
        samples: out.samples,
        fingerprint: rules.fingerprint,
        waiting_for_facts: out.waiting_for_facts,
        facts,
    })
}

/// What a group's value rules made of one answer.
struct Extracted {
    samples: Vec<crate::values::Sample>,
    /// The rules' fingerprint: samples of other rules are not mixed in.
    fingerprint: u64,
    /// Some rule names a fact the instance has not learned yet: the answer
    /// waits for it (see [`latest::Waiting`]).
    waiting_for_facts: bool,
    /// The facts the rules ran with.
    facts: Option<Arc<crate::values::Facts>>,
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
    shared.sink.emit(&Event::poll(now, poll).in_maintenance(t.maintenance));
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
        events.push(
            Event::breaker(
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
            )
            .in_maintenance(t.maintenance),
        );
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
        events.push(Event::dead_letter(now, e).in_maintenance(t.maintenance));
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
    let mut c = shared.core();
    let s = &mut c.scheduler;
    match result {
        Ok(()) => {
            let transition = p.transition.clone();
            s.apply(p, now);
            transition
        }
        Err(e) => {
            tracing::error!(instance = %p.key.instance, group = %p.key.group, error = %e, "could not commit a dead-letter move; the task stays where it was until its next poll");
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
    // `maintenance = true` on the lines of an instance in a window; no field otherwise.
    let maintenance = t.maintenance.then_some(true);
    match t.dead_letter {
        Some(DeadLetterMove::Entered(reason)) => tracing::warn!(
            instance = %key.instance, group = %key.group, maintenance,
            reason = reason.as_str(),
            error_kind = err.map(|e| e.kind.as_str()).unwrap_or(""),
            error = err.map(|e| e.message.as_str()).unwrap_or(""),
            "Routing task to dead-letter queue"
        ),
        Some(DeadLetterMove::Left) => {
            tracing::info!(instance = %key.instance, group = %key.group, maintenance, "task recovered; leaving dead-letter queue")
        }
        Some(DeadLetterMove::Rechecked) => {
            tracing::info!(instance = %key.instance, group = %key.group, maintenance, error = err.map(|e| e.message.as_str()).unwrap_or(""), "dead-letter recheck failed")
        }
        None => {}
    }
    if let Some((from, to)) = t.breaker {
        if to == BreakerState::Open {
            tracing::warn!(instance = %key.instance, group = %key.group, maintenance, from = from.as_str(), "circuit breaker open");
        } else {
            tracing::info!(instance = %key.instance, group = %key.group, maintenance, from = from.as_str(), to = to.as_str(), "circuit breaker state changed");
        }
    }
    if let Some(e) = err {
        tracing::debug!(instance = %key.instance, group = %key.group, maintenance, category = e.category.as_str(), error_kind = e.kind.as_str(), status = e.status, error = %e.message, "poll failed");
    }
}

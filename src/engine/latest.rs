//! The latest values and kept bodies of every task: what the value rules
//! made of its last good answer (served on `/values` and the data API while
//! fresh) and, for `keep_body` groups, that answer itself.
//!
//! A worker extracts the samples outside every lock and hands them here
//! after the completion is applied. Changed values and bodies are marked
//! dirty and written by the next group commit, before the task records
//! (see [`Shared::flush`]): at a restart the stored samples are then never
//! older than the record's last success, and their poll time is the later
//! of the two (a poll that gave the same samples writes nothing).
//!
//! Samples are served only while fresh: the task is neither dead-lettered
//! nor discarded (`live`) and its last good poll is younger than
//! max(3 × interval, 2 min). Removing a task (its instance deleted, its
//! group gone) removes its samples and bodies, from memory and the store;
//! samples extracted by rules that have since changed are never loaded.
//!
//! The cache also holds each instance's facts (`facts` groups; in memory,
//! learned again after a restart). A poll whose rules name a fact the
//! instance has not learned yet keeps what it parsed here until the fact
//! comes, and its rules then run again: no extra request, and a group's
//! floor is never broken for it.

use super::*;
use crate::core::catalog::ValueCatalog;
use crate::model::{BodyRecord, KeptBodies, KeptBody, Polled, PolledJson, TaskValues};
use crate::store::LatestBatch;
use crate::values::{Facts, Sample, exposition};
use std::collections::{BTreeMap, HashSet};

/// A task's values as the cache holds them.
#[derive(Debug, Clone)]
pub struct LatestValues {
    pub values: TaskValues,
    /// False while the task is dead-lettered or discarded.
    pub live: bool,
}

impl LatestValues {
    pub fn is_fresh(&self, now: Timestamp) -> bool {
        self.live && self.values.is_fresh(now)
    }
}

/// What the cache knows of a kept body without its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyInfo {
    pub polled_at: Timestamp,
    pub content_type: String,
    pub size: u64,
    pub etag: String,
    /// False: it was larger than `max_body_bytes` and was not kept.
    pub kept: bool,
}

impl BodyInfo {
    fn of(b: &BodyRecord) -> BodyInfo {
        BodyInfo {
            polled_at: b.polled_at,
            content_type: b.content_type.clone(),
            size: b.size,
            etag: b.etag.clone(),
            kept: b.bytes.is_some(),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    values: HashMap<TaskKey, LatestValues>,
    /// Per task, per fan-out item ("" for a group without fan-out).
    bodies: HashMap<TaskKey, BTreeMap<String, BodyInfo>>,
    dirty_values: HashSet<TaskKey>,
    /// Bodies to write (with their bytes, until written) or delete.
    dirty_bodies: HashMap<(TaskKey, String), Option<BodyRecord>>,
    /// Per instance, the facts its `facts` groups gave.
    facts: HashMap<Arc<str>, Arc<Facts>>,
    /// Polls whose rules name a fact the instance has not learned yet:
    /// what they parsed, to run the rules again when it has.
    waiting: HashMap<TaskKey, Waiting>,
}

/// A poll whose samples wait for a fact (see [`Latest::wait_for_facts`]).
#[derive(Debug, Clone)]
pub(super) struct Waiting {
    pub json: PolledJson,
    pub polled_at: Timestamp,
    pub stale_after: Duration,
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct Latest {
    inner: RwLock<Inner>,
}

/// What one successful poll gave the cache.
pub(super) struct Fresh<'a> {
    pub samples: Option<(Vec<Sample>, u64)>,
    pub bodies: Option<&'a KeptBodies>,
    /// A fan-out's items that failed this time (their last bodies stay);
    /// the bodies of items no longer fanned out over are dropped.
    pub failed_items: &'a [crate::model::FailedItem],
    pub polled_at: Timestamp,
    pub stale_after: Duration,
}

impl Latest {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what a successful poll of `key` gave.
    pub(super) fn record(&self, key: &TaskKey, fresh: Fresh<'_>) {
        let mut g = self.write();
        let inner = &mut *g;
        if let Some((samples, fingerprint)) = fresh.samples {
            match inner.values.get_mut(key) {
                Some(v) if v.values.fingerprint == fingerprint && *v.values.samples == *samples => {
                    v.values.polled_at = fresh.polled_at;
                    v.values.stale_after = fresh.stale_after;
                    v.live = true;
                }
                _ => {
                    inner.values.insert(
                        key.clone(),
                        LatestValues {
                            values: TaskValues {
                                polled_at: fresh.polled_at,
                                stale_after: fresh.stale_after,
                                fingerprint,
                                samples: samples.into(),
                            },
                            live: true,
                        },
                    );
                    inner.dirty_values.insert(key.clone());
                }
            }
        }
        if let Some(bodies) = fresh.bodies {
            let now = fresh.polled_at;
            let got: Vec<(&str, &KeptBody)> = match bodies {
                Polled::One(b) => vec![("", b)],
                Polled::Items(items) => items.iter().map(|(i, b)| (i.as_str(), b)).collect(),
            };
            let per_task = inner.bodies.entry(key.clone()).or_default();
            if let Polled::Items(items) = bodies {
                let gone: Vec<String> = per_task
                    .keys()
                    .filter(|k| {
                        !items.iter().any(|(i, _)| i == *k) && !fresh.failed_items.iter().any(|f| &f.item == *k)
                    })
                    .cloned()
                    .collect();
                for item in gone {
                    per_task.remove(&item);
                    inner.dirty_bodies.insert((key.clone(), item), None);
                }
            }
            for (item, body) in got {
                let rec = match body {
                    KeptBody::Kept { content_type, bytes } => BodyRecord::kept(now, content_type, bytes),
                    KeptBody::TooLarge { bytes } => BodyRecord::too_large(now, *bytes),
                };
                let info = BodyInfo::of(&rec);
                let same = per_task
                    .get(item)
                    .is_some_and(|old| old.etag == info.etag && old.size == info.size && old.kept == info.kept);
                per_task.insert(item.to_string(), info);
                if !same {
                    inner.dirty_bodies.insert((key.clone(), item.to_string()), Some(rec));
                }
            }
        }
    }

    /// The facts instance `instance` has learned.
    pub fn facts_of(&self, instance: &str) -> Option<Arc<Facts>> {
        self.read().facts.get(instance).cloned()
    }

    /// A poll of `key` gave samples that name a fact not learned yet: keep
    /// what it parsed until the fact comes ([`Latest::learn_facts`]). A
    /// later poll that needs no fact drops it ([`Latest::stop_waiting`]).
    ///
    /// `seen` is the facts its rules ran with. If the instance has learned
    /// others since (a fact group answered between that run and this call,
    /// and found nothing waiting), the poll is not kept: it is handed back
    /// with the facts known now, to run its rules again. Otherwise the next
    /// [`Latest::learn_facts`] of the instance finds it, since both sides
    /// decide under the write lock.
    pub(super) fn wait_for_facts(
        &self,
        key: &TaskKey,
        waiting: Waiting,
        seen: Option<&Arc<Facts>>,
    ) -> Result<(), (Waiting, Option<Arc<Facts>>)> {
        let mut g = self.write();
        let now = g.facts.get(&key.instance);
        let same = match (now, seen) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if !same {
            return Err((waiting, now.cloned()));
        }
        g.waiting.insert(key.clone(), waiting);
        Ok(())
    }

    pub(super) fn stop_waiting(&self, key: &TaskKey) {
        // Almost always nothing waits: a read lock tells, without a write.
        if !self.read().waiting.contains_key(key) {
            return;
        }
        self.write().waiting.remove(key);
    }

    /// A group of `instance` gave `facts`: they are kept (added to, or
    /// replacing, what was known), and the polls of the instance that
    /// waited for facts are handed back, to run their rules again. (Every
    /// time, not only when the facts changed: a poll that began waiting
    /// while these facts were being learned is picked up by the next.)
    pub(super) fn learn_facts(&self, instance: &str, facts: Facts) -> Vec<(TaskKey, Waiting)> {
        let known = {
            let g = self.read();
            let same = g.facts.get(instance).is_some_and(|known| {
                facts.iter().all(|(k, v)| known.get(k) == Some(v))
                    && !facts.keys().any(|k| {
                        // A table learned again replaces its rows: the same
                        // only if it has no row the body no longer gives.
                        crate::values::lookup::marker_table(k).is_some_and(|t| {
                            known
                                .keys()
                                .any(|r| crate::values::lookup::is_row_of(r, t) && !facts.contains_key(r))
                        })
                    })
            });
            if same && !g.waiting.keys().any(|k| &*k.instance == instance) {
                return Vec::new();
            }
            same
        };
        let mut g = self.write();
        let inner = &mut *g;
        if !known {
            let merged = match inner.facts.get(instance) {
                Some(f) => crate::values::lookup::merge(f, facts),
                None => facts,
            };
            inner.facts.insert(Arc::from(instance), Arc::new(merged));
        }
        let keys: Vec<TaskKey> = inner
            .waiting
            .keys()
            .filter(|k| &*k.instance == instance)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| inner.waiting.remove(&k).map(|w| (k, w)))
            .collect()
    }

    /// Forgets the facts of instances `keep` refuses.
    pub(super) fn retain_facts(&self, keep: impl Fn(&str) -> bool) {
        let mut g = self.write();
        g.facts.retain(|i, _| keep(i));
        g.waiting.retain(|k, _| keep(&k.instance));
    }

    /// The task was dead-lettered or discarded: its samples are no longer
    /// served (the data API still shows them, not fresh).
    pub(super) fn park(&self, key: &TaskKey) {
        if let Some(v) = self.write().values.get_mut(key) {
            v.live = false;
        }
    }

    /// Forgets every task `keep` refuses, and samples whose rules changed
    /// (`fingerprint` gives a task's current rules, `None` for none).
    pub(super) fn retain(&self, keep: impl Fn(&TaskKey) -> bool, fingerprint: impl Fn(&TaskKey) -> Option<u64>) {
        let mut g = self.write();
        let inner = &mut *g;
        let gone: Vec<TaskKey> = inner
            .values
            .iter()
            .filter(|(k, v)| !keep(k) || fingerprint(k) != Some(v.values.fingerprint))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            inner.values.remove(&k);
            inner.dirty_values.insert(k);
        }
        let gone: Vec<TaskKey> = inner.bodies.keys().filter(|k| !keep(k)).cloned().collect();
        for k in gone {
            if let Some(items) = inner.bodies.remove(&k) {
                for item in items.into_keys() {
                    inner.dirty_bodies.insert((k.clone(), item), None);
                }
            }
        }
    }

    /// Loads what the store kept: samples of tasks that still exist, under
    /// the same rules, and are not dead-lettered or discarded; their poll
    /// time is the later of theirs and the record's last success. Rows of
    /// anything else are deleted at the next group commit.
    pub(super) fn load(
        &self,
        values: Vec<(TaskKey, TaskValues)>,
        bodies: Vec<(TaskKey, String, BodyRecord)>,
        record: impl Fn(&TaskKey) -> Option<TaskRecord>,
        fingerprint: impl Fn(&TaskKey) -> Option<u64>,
    ) {
        let mut g = self.write();
        let inner = &mut *g;
        for (key, mut v) in values {
            let Some(rec) = record(&key) else {
                inner.dirty_values.insert(key);
                continue;
            };
            if fingerprint(&key) != Some(v.fingerprint) {
                inner.dirty_values.insert(key);
                continue;
            }
            if let Some(last) = rec.last_success {
                v.polled_at = v.polled_at.max(last);
            }
            let live = rec.dead_letter.is_none() && !rec.disabled;
            inner.values.insert(key, LatestValues { values: v, live });
        }
        for (key, item, mut b) in bodies {
            let Some(rec) = record(&key) else {
                inner.dirty_bodies.insert((key, item), None);
                continue;
            };
            if let Some(last) = rec.last_success {
                b.polled_at = b.polled_at.max(last);
            }
            inner.bodies.entry(key).or_default().insert(item, BodyInfo::of(&b));
        }
    }

    /// Everything changed since the last group commit (bytes included),
    /// taken out of the cache.
    pub(super) fn take_dirty(&self) -> LatestBatch {
        let mut g = self.write();
        let inner = &mut *g;
        let values = std::mem::take(&mut inner.dirty_values)
            .into_iter()
            .map(|k| {
                let v = inner.values.get(&k).map(|v| v.values.clone());
                (k, v)
            })
            .collect();
        let bodies = std::mem::take(&mut inner.dirty_bodies)
            .into_iter()
            .map(|((k, item), b)| (k, item, b))
            .collect();
        LatestBatch { values, bodies }
    }

    /// A group commit failed: what it took is dirty again (unless a later
    /// poll already changed it).
    pub(super) fn restore(&self, batch: LatestBatch) {
        let mut g = self.write();
        let inner = &mut *g;
        for (k, _) in batch.values {
            inner.dirty_values.insert(k);
        }
        for (k, item, b) in batch.bodies {
            inner.dirty_bodies.entry((k, item)).or_insert(b);
        }
    }

    /// The values of one task (fresh or not).
    pub fn values_of(&self, key: &TaskKey) -> Option<LatestValues> {
        self.read().values.get(key).cloned()
    }

    /// The kept bodies of one task, by item ("" for one body).
    pub fn bodies_of(&self, key: &TaskKey) -> BTreeMap<String, BodyInfo> {
        self.read().bodies.get(key).cloned().unwrap_or_default()
    }

    /// A body not yet written to the store, with its bytes.
    pub fn unwritten_body(&self, key: &TaskKey, item: &str) -> Option<BodyRecord> {
        self.read()
            .dirty_bodies
            .get(&(key.clone(), item.to_string()))
            .cloned()
            .flatten()
    }

    /// Every fresh task's samples (of `instance` only, if given), in task
    /// order: a copy of a few pointers per task, so the lock is held
    /// briefly and the exposition is built without it.
    pub fn fresh(&self, now: Timestamp, instance: Option<&str>) -> Vec<(TaskKey, Arc<[Sample]>)> {
        let g = self.read();
        let mut out: Vec<(TaskKey, Arc<[Sample]>)> = g
            .values
            .iter()
            .filter(|(k, v)| instance.is_none_or(|i| *k.instance == *i) && v.is_fresh(now))
            .map(|(k, v)| (k.clone(), v.values.samples.clone()))
            .collect();
        drop(g);
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Samples held, fresh or not (a gauge's worth).
    pub fn sample_count(&self) -> usize {
        self.read().values.values().map(|v| v.values.samples.len()).sum()
    }
}

/// A sample's label: name and value.
type Label = (Arc<str>, String);

/// The exposition of `tasks`' samples: `# HELP` and `# TYPE` once per
/// metric (from the rules in `catalog`), every sample with its task's
/// instance as the `instance` label. A series that two groups of one
/// instance both give is written once, from the first group.
pub fn render(catalog: &ValueCatalog, tasks: &[(TaskKey, Arc<[Sample]>)]) -> String {
    let mut by_metric: BTreeMap<&str, Vec<(&str, &Sample)>> = BTreeMap::new();
    let mut total = 0;
    for (key, samples) in tasks {
        for s in samples.iter() {
            by_metric.entry(&s.metric).or_default().push((&key.instance, s));
            total += 1;
        }
    }
    let mut out = String::with_capacity(total * 64 + by_metric.len() * 128);
    for (metric, samples) in by_metric {
        let Some(family) = catalog.family(metric) else { continue };
        exposition::write_head(&mut out, metric, &family.help, family.kind);
        if family.groups > 1 {
            let mut seen: HashSet<(&str, &[Label])> = HashSet::with_capacity(samples.len());
            for (instance, s) in samples {
                if seen.insert((instance, &s.labels)) {
                    exposition::write_sample(&mut out, metric, Some(instance), &s.labels, s.value);
                }
            }
        } else {
            for (instance, s) in samples {
                exposition::write_sample(&mut out, metric, Some(instance), &s.labels, s.value);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeadLetterReason, DeadLetterRecord, TypeDef};

    const T0: Timestamp = Timestamp(1_800_000_000_000);
    const STALE: Duration = Duration::from_secs(120);

    fn sample(metric: &str, id: &str, value: f64) -> Sample {
        Sample {
            metric: metric.into(),
            labels: vec![("id".into(), id.to_string())],
            value,
        }
    }

    fn fresh(samples: Vec<Sample>, at: Timestamp) -> Fresh<'static> {
        Fresh {
            samples: Some((samples, 7)),
            bodies: None,
            failed_items: &[],
            polled_at: at,
            stale_after: STALE,
        }
    }

    fn key(i: &str) -> TaskKey {
        TaskKey::new(i, "g")
    }

    #[test]
    fn the_same_samples_again_move_the_poll_time_and_write_nothing() {
        let l = Latest::default();
        l.record(&key("a"), fresh(vec![sample("m", "1", 1.0)], T0));
        let batch = l.take_dirty();
        assert_eq!(batch.values.len(), 1);
        let later = T0.plus(Duration::from_secs(30));
        l.record(&key("a"), fresh(vec![sample("m", "1", 1.0)], later));
        assert!(l.take_dirty().is_empty());
        assert_eq!(l.values_of(&key("a")).expect("values").values.polled_at, later);
        l.record(&key("a"), fresh(vec![sample("m", "1", 2.0)], later));
        let batch = l.take_dirty();
        let written = batch.values[0].1.as_ref().expect("a write");
        assert_eq!(written.samples[0].value, 2.0);
        // A failed commit puts it back.
        l.restore(batch);
        assert_eq!(l.take_dirty().values.len(), 1);
    }

    /// The race a fact group can win: a poll's rules run without the fact,
    /// the fact group answers (nothing waits yet), and only then is the poll
    /// kept. It must not wait for the fact group's next answer (an hour for
    /// meraki's organization): it is handed back to run again.
    #[test]
    fn a_poll_that_began_waiting_while_the_fact_was_learned_is_handed_back() {
        let l = Latest::default();
        let waiting = || Waiting {
            json: Polled::One(serde_json::json!({"n": 1})),
            polled_at: T0,
            stale_after: STALE,
        };
        let seen = l.facts_of("a");
        assert!(seen.is_none());
        let facts: Facts = [("org".to_string(), "x".to_string())].into();
        assert!(l.learn_facts("a", facts.clone()).is_empty(), "nothing waits yet");
        let (back, known) = l
            .wait_for_facts(&key("a"), waiting(), seen.as_ref())
            .expect_err("the facts changed since the rules ran");
        assert_eq!(back.polled_at, T0);
        assert_eq!(known.as_deref(), Some(&facts));
        // Kept against the facts known now, the next answer picks it up.
        l.wait_for_facts(&key("a"), waiting(), known.as_ref())
            .expect("kept: the facts are the ones it ran with");
        let handed = l.learn_facts("a", facts);
        assert_eq!(handed.len(), 1, "the same facts again still hand back a waiting poll");
        assert!(l.learn_facts("a", Facts::new()).is_empty());
    }

    #[test]
    fn samples_are_fresh_until_stale_and_never_while_parked() {
        let l = Latest::default();
        l.record(&key("a"), fresh(vec![sample("m", "1", 1.0)], T0));
        assert_eq!(l.fresh(T0.plus(STALE), None).len(), 1);
        assert!(l.fresh(T0.plus(STALE + Duration::from_millis(1)), None).is_empty());
        l.park(&key("a"));
        assert!(l.fresh(T0, None).is_empty());
        assert!(l.values_of(&key("a")).is_some(), "kept for the data API");
        // A new good poll brings it back.
        l.record(&key("a"), fresh(vec![sample("m", "1", 1.0)], T0));
        assert_eq!(l.fresh(T0, Some("a")).len(), 1);
        assert!(l.fresh(T0, Some("b")).is_empty());
    }

    #[test]
    fn bodies_are_written_when_they_change_and_readable_until_written() {
        let l = Latest::default();
        let body = |text: &str| {
            Polled::One(KeptBody::Kept {
                content_type: "application/json".into(),
                bytes: text.as_bytes().to_vec(),
            })
        };
        let b1 = body("{\"a\":1}");
        let with = |b: &'static KeptBodies, at| Fresh {
            samples: None,
            bodies: Some(b),
            failed_items: &[],
            polled_at: at,
            stale_after: STALE,
        };
        let b1: &'static KeptBodies = Box::leak(Box::new(b1));
        l.record(&key("a"), with(b1, T0));
        let unwritten = l.unwritten_body(&key("a"), "").expect("in memory");
        assert_eq!(unwritten.bytes.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(l.take_dirty().bodies.len(), 1);
        assert!(
            l.unwritten_body(&key("a"), "").is_none(),
            "bytes leave memory once taken"
        );
        l.record(&key("a"), with(b1, T0.plus(Duration::from_secs(10))));
        assert!(l.take_dirty().is_empty(), "same body, nothing to write");
        assert_eq!(l.bodies_of(&key("a"))[""].polled_at, T0.plus(Duration::from_secs(10)));
        let b2: &'static KeptBodies = Box::leak(Box::new(Polled::One(KeptBody::TooLarge { bytes: 5_000_000 })));
        l.record(&key("a"), with(b2, T0));
        let batch = l.take_dirty();
        assert_eq!(batch.bodies[0].2.as_ref().expect("a write").bytes, None);
        assert!(!l.bodies_of(&key("a"))[""].kept);
    }

    #[test]
    fn a_fan_out_keeps_a_failed_item_s_body_and_drops_an_item_no_longer_listed() {
        let l = Latest::default();
        let kept = |t: &str| KeptBody::Kept {
            content_type: String::new(),
            bytes: t.as_bytes().to_vec(),
        };
        let all: &'static KeptBodies = Box::leak(Box::new(Polled::Items(vec![
            ("n1".into(), kept("1")),
            ("n2".into(), kept("2")),
            ("n3".into(), kept("3")),
        ])));
        let only_n1: &'static KeptBodies = Box::leak(Box::new(Polled::Items(vec![("n1".into(), kept("1"))])));
        let failed: &'static [crate::model::FailedItem] = Box::leak(Box::new([crate::model::FailedItem {
            item: "n2".into(),
            error: crate::model::PollError::new(
                crate::model::ErrorCategory::Transient,
                crate::model::ErrorKind::Timeout,
                "t",
            ),
        }]));
        for (bodies, failed_items) in [(all, &[][..]), (only_n1, failed)] {
            l.record(
                &key("a"),
                Fresh {
                    samples: None,
                    bodies: Some(bodies),
                    failed_items,
                    polled_at: T0,
                    stale_after: STALE,
                },
            );
        }
        let items: Vec<String> = l.bodies_of(&key("a")).into_keys().collect();
        assert_eq!(items, vec!["n1", "n2"]);
        let deleted: Vec<(String, bool)> = l
            .take_dirty()
            .bodies
            .into_iter()
            .filter(|(_, _, b)| b.is_none())
            .map(|(_, i, b)| (i, b.is_some()))
            .collect();
        assert_eq!(deleted, vec![("n3".to_string(), false)]);
    }

    #[test]
    fn removed_tasks_and_changed_rules_are_forgotten_and_deleted() {
        let l = Latest::default();
        l.record(&key("a"), fresh(vec![sample("m", "1", 1.0)], T0));
        l.record(&key("b"), fresh(vec![sample("m", "1", 1.0)], T0));
        l.record(&key("c"), fresh(vec![sample("m", "1", 1.0)], T0));
        l.take_dirty();
        // a is gone; c's rules changed (fingerprint 8, not 7).
        l.retain(
            |k| *k.instance != *"a",
            |k| Some(if *k.instance == *"c" { 8 } else { 7 }),
        );
        let mut batch = l.take_dirty().values;
        batch.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(batch, vec![(key("a"), None), (key("c"), None)]);
        assert!(l.values_of(&key("b")).is_some());
    }

    #[test]
    fn loading_keeps_what_is_still_valid_and_dates_it_by_the_last_success() {
        let l = Latest::default();
        let stored = |i: &str| {
            (
                key(i),
                TaskValues {
                    polled_at: T0,
                    stale_after: STALE,
                    fingerprint: 7,
                    samples: vec![sample("m", i, 1.0)].into(),
                },
            )
        };
        let later = T0.plus(Duration::from_secs(60));
        let record = |k: &TaskKey| -> Option<TaskRecord> {
            let mut r = TaskRecord {
                last_success: Some(later),
                ..TaskRecord::default()
            };
            match &*k.instance {
                "gone" => return None,
                "dead" => {
                    r.dead_letter = Some(DeadLetterRecord {
                        reason: DeadLetterReason::PermanentFailure,
                        since: T0,
                        next_recheck: later,
                        rechecks: 0,
                    })
                }
                _ => {}
            }
            Some(r)
        };
        l.load(
            vec![stored("ok"), stored("dead"), stored("gone"), stored("changed")],
            vec![],
            record,
            |k| Some(if *k.instance == *"changed" { 9 } else { 7 }),
        );
        assert_eq!(l.values_of(&key("ok")).expect("ok").values.polled_at, later);
        let served: Vec<String> = l
            .fresh(later, None)
            .iter()
            .map(|(k, _)| k.instance.to_string())
            .collect();
        assert_eq!(served, vec!["ok"]);
        let mut deleted: Vec<String> = l
            .take_dirty()
            .values
            .into_iter()
            .map(|(k, _)| k.instance.to_string())
            .collect();
        deleted.sort();
        assert_eq!(deleted, vec!["changed", "gone"]);
    }

    #[test]
    fn render_writes_each_family_once_with_the_instance_and_drops_cross_group_duplicates() {
        let rule = |m: &str| -> crate::values::ValueRule {
            toml::from_str(&format!(
                "metric = \"{m}\"\nhelp = \"h {m}\"\nvalue = \"/v\"\nlabels = {{ id = \"/id\" }}"
            ))
            .expect("rule")
        };
        let mut g1 = crate::model::GroupDef::new("g1", "/a", 1, Duration::from_secs(10));
        g1.values = vec![rule("up"), rule("cpu")];
        let mut g2 = crate::model::GroupDef::new("g2", "/b", 1, Duration::from_secs(10));
        g2.values = vec![rule("up")];
        let ty = TypeDef {
            name: "t".into(),
            groups: vec![g1, g2],
        };
        let cat = ValueCatalog::build([&ty]);
        assert_eq!(cat.family("up").expect("up").groups, 2);
        let tasks: Vec<(TaskKey, Arc<[Sample]>)> = vec![
            (
                TaskKey::new("x", "g1"),
                vec![sample("up", "n1", 1.0), sample("cpu", "n1", 0.5)].into(),
            ),
            (
                TaskKey::new("x", "g2"),
                vec![sample("up", "n1", 0.0), sample("up", "q1", 1.0)].into(),
            ),
            (TaskKey::new("y", "g2"), vec![sample("up", "n1", 1.0)].into()),
        ];
        assert_eq!(
            render(&cat, &tasks),
            "# HELP cpu h cpu\n# TYPE cpu gauge\ncpu{instance=\"x\",id=\"n1\"} 0.5\n\
             # HELP up h up\n# TYPE up gauge\nup{instance=\"x\",id=\"n1\"} 1\nup{instance=\"x\",id=\"q1\"} 1\n\
             up{instance=\"y\",id=\"n1\"} 1\n"
        );
    }
}

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

use super::*;
use crate::core::catalog::ValueCatalog;
use crate::model::{BodyRecord, KeptBodies, KeptBody, Polled, TaskValues};
use crate::store::LatestBatch;
use crate::values::{Sample, exposition};
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

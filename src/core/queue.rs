//! The task queue: an indexed binary min-heap keyed by `next_run`, ties broken
//! by priority (1 first), then staleness (staler first), then task key.
//!
//! A key map gives each task's heap slot, so a task is updated in place
//! (O(log n)) instead of being pushed twice; a task is in the queue at most
//! once, and a running task is not in it at all (the scheduler removes it on
//! dispatch and puts it back on completion).

use crate::model::{TaskKey, Timestamp};
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Ordering;

/// What orders a queued task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    pub next_run: Timestamp,
    pub priority: u8,
    /// Staleness in thousandths (0 fresh … 1000 maximally stale).
    pub staleness: u16,
    pub key: TaskKey,
}

impl QueueEntry {
    fn sort_key(&self) -> (Timestamp, u8, std::cmp::Reverse<u16>, &TaskKey) {
        (
            self.next_run,
            self.priority,
            std::cmp::Reverse(self.staleness),
            &self.key,
        )
    }
}

impl Ord for QueueEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.sort_key().cmp(&other.sort_key())
    }
}
impl PartialOrd for QueueEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Default, Clone)]
pub struct TaskQueue {
    heap: Vec<QueueEntry>,
    slots: HashMap<TaskKey, usize>,
}

impl TaskQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        TaskQueue {
            heap: Vec::with_capacity(n),
            slots: HashMap::with_capacity_and_hasher(n, Default::default()),
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn contains(&self, key: &TaskKey) -> bool {
        self.slots.contains_key(key)
    }

    pub fn get(&self, key: &TaskKey) -> Option<&QueueEntry> {
        self.slots.get(key).map(|&i| &self.heap[i])
    }

    /// Room for `additional` more entries, so placing a whole fleet does
    /// not grow (and rehash) the queue step by step.
    pub fn reserve(&mut self, additional: usize) {
        self.heap.reserve(additional);
        self.slots.reserve(additional);
    }

    /// Insert, or move an already queued task to its new place.
    pub fn upsert(&mut self, entry: QueueEntry) {
        if let Some(&i) = self.slots.get(&entry.key) {
            let older = self.heap[i] < entry;
            self.heap[i] = entry;
            if older {
                self.sift_down(i);
            } else {
                self.sift_up(i);
            }
        } else {
            let i = self.heap.len();
            self.slots.insert(entry.key.clone(), i);
            self.heap.push(entry);
            self.sift_up(i);
        }
    }

    pub fn remove(&mut self, key: &TaskKey) -> Option<QueueEntry> {
        let i = self.slots.remove(key)?;
        let last = self.heap.len() - 1;
        self.heap.swap(i, last);
        let removed = self.heap.pop()?;
        if i < self.heap.len() {
            self.slots.insert(self.heap[i].key.clone(), i);
            self.sift_down(i);
            self.sift_up(i);
        }
        Some(removed)
    }

    pub fn peek(&self) -> Option<&QueueEntry> {
        self.heap.first()
    }

    /// Remove and return the first task if it is due at `now`.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<QueueEntry> {
        if self.heap.first()?.next_run > now {
            return None;
        }
        let key = self.heap[0].key.clone();
        self.remove(&key)
    }

    /// Every queued entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &QueueEntry> {
        self.heap.iter()
    }

    fn set(&mut self, i: usize) {
        if let Some(slot) = self.slots.get_mut(&self.heap[i].key) {
            *slot = i;
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[i] < self.heap[parent] {
                self.heap.swap(i, parent);
                self.set(i);
                i = parent;
            } else {
                break;
            }
        }
        self.set(i);
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let l = 2 * i + 1;
            let r = l + 1;
            let mut m = i;
            if l < n && self.heap[l] < self.heap[m] {
                m = l;
            }
            if r < n && self.heap[r] < self.heap[m] {
                m = r;
            }
            if m == i {
                break;
            }
            self.heap.swap(i, m);
            self.set(i);
            i = m;
        }
        self.set(i);
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        for i in 1..self.heap.len() {
            assert!(self.heap[(i - 1) / 2] <= self.heap[i], "heap order at {i}");
        }
        assert_eq!(self.slots.len(), self.heap.len());
        for (k, &i) in &self.slots {
            assert_eq!(&self.heap[i].key, k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(next: u64, prio: u8, stale: u16, inst: &str) -> QueueEntry {
        QueueEntry {
            next_run: Timestamp(next),
            priority: prio,
            staleness: stale,
            key: TaskKey::new(inst, "g"),
        }
    }

    #[test]
    fn orders_by_time_then_priority_then_staleness_then_key() {
        let mut q = TaskQueue::new();
        q.upsert(e(10, 2, 0, "d"));
        q.upsert(e(10, 1, 0, "c"));
        q.upsert(e(10, 1, 900, "b"));
        q.upsert(e(10, 1, 900, "a"));
        q.upsert(e(5, 4, 0, "z"));
        let order: Vec<_> = std::iter::from_fn(|| q.pop_due(Timestamp(100)))
            .map(|e| e.key.instance.to_string())
            .collect();
        assert_eq!(order, ["z", "a", "b", "c", "d"]);
    }

    #[test]
    fn only_due_tasks_pop() {
        let mut q = TaskQueue::new();
        q.upsert(e(50, 1, 0, "a"));
        assert!(q.pop_due(Timestamp(49)).is_none());
        assert_eq!(q.pop_due(Timestamp(50)).map(|e| e.next_run), Some(Timestamp(50)));
        assert!(q.is_empty());
    }

    #[test]
    fn update_in_place_never_duplicates() {
        let mut q = TaskQueue::new();
        q.upsert(e(50, 1, 0, "a"));
        q.upsert(e(10, 1, 0, "a"));
        q.upsert(e(30, 1, 0, "b"));
        assert_eq!(q.len(), 2);
        assert_eq!(q.peek().map(|e| e.next_run), Some(Timestamp(10)));
        q.upsert(e(99, 1, 0, "a"));
        assert_eq!(q.peek().map(|e| e.key.instance.to_string()), Some("b".into()));
        assert_eq!(
            q.remove(&TaskKey::new("a", "g")).map(|e| e.next_run),
            Some(Timestamp(99))
        );
        assert!(q.remove(&TaskKey::new("a", "g")).is_none());
        q.check_invariants();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(u8, u64, u8),
        Remove(u8),
        Pop(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..40, 0u64..1000, 1u8..=4).prop_map(|(k, t, p)| Op::Upsert(k, t, p)),
            (0u8..40).prop_map(Op::Remove),
            (0u64..1000).prop_map(Op::Pop),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_sorted_map(ops in proptest::collection::vec(op(), 1..300)) {
            let mut q = TaskQueue::new();
            let mut model: std::collections::BTreeMap<String, QueueEntry> = Default::default();
            for op in ops {
                match op {
                    Op::Upsert(k, t, p) => {
                        let ent = e(t, p, 0, &format!("k{k}"));
                        model.insert(format!("k{k}"), ent.clone());
                        q.upsert(ent);
                    }
                    Op::Remove(k) => {
                        let a = q.remove(&TaskKey::new(&format!("k{k}"), "g"));
                        let b = model.remove(&format!("k{k}"));
                        prop_assert_eq!(a, b);
                    }
                    Op::Pop(now) => {
                        let expect = model.values().min().filter(|m| m.next_run.0 <= now).cloned();
                        let got = q.pop_due(Timestamp(now));
                        if let Some(x) = &expect {
                            model.remove(&x.key.instance.to_string());
                        }
                        prop_assert_eq!(got, expect);
                    }
                }
                q.check_invariants();
                prop_assert_eq!(q.len(), model.len());
            }
        }
    }
}

//! The task queue and the scheduler at 100,000 tasks: what one dispatch and
//! one completion cost the dispatcher while it holds the scheduler lock.
//!
//! Every benchmark keeps the queue at (about) 100k entries: work that would
//! grow or shrink it is undone between timed chunks, outside the timing.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use pollster::core::Scheduler;
use pollster::core::queue::{QueueEntry, TaskQueue};
use pollster::core::task::TaskMeta;
use pollster::model::{MonitoringSettings, PollResult, PollSuccess, TaskKey, Timestamp};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::time::{Duration, Instant};

const TASKS: usize = 100_000;
/// Operations timed between two untimed fix-ups of the queue.
const CHUNK: u64 = 1_000;
/// Due times spread over ten minutes, in ms.
const SPREAD_MS: u64 = 600_000;

fn key(prefix: &str, i: usize) -> TaskKey {
    TaskKey::new(&format!("{prefix}-{i:06}"), "probe")
}

fn entry(key: TaskKey, next_run: u64) -> QueueEntry {
    QueueEntry {
        next_run: Timestamp(next_run),
        priority: 1,
        staleness: 0,
        key,
    }
}

/// A queue of `TASKS` entries with random due times, and its keys.
fn full_queue(rng: &mut SmallRng) -> (TaskQueue, Vec<TaskKey>) {
    let keys: Vec<TaskKey> = (0..TASKS).map(|i| key("inst", i)).collect();
    let mut q = TaskQueue::with_capacity(TASKS + CHUNK as usize);
    for k in &keys {
        q.upsert(entry(k.clone(), rng.random_range(0..SPREAD_MS)));
    }
    (q, keys)
}

/// Run `timed` over chunks of up to `CHUNK` operations, `fixup` after each
/// chunk outside the timing; returns the time spent in `timed` only.
fn chunked<S>(
    iters: u64,
    state: &mut S,
    mut timed: impl FnMut(&mut S, u64),
    mut fixup: impl FnMut(&mut S, u64),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(CHUNK);
        let start = Instant::now();
        timed(state, n);
        total += start.elapsed();
        fixup(state, n);
        left -= n;
    }
    total
}

fn queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue_100k");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    let mut rng = SmallRng::seed_from_u64(7);
    let (base, keys) = full_queue(&mut rng);

    // A key the queue does not hold yet, at a random time; removed again
    // after each chunk.
    let fresh: Vec<QueueEntry> = (0..CHUNK as usize)
        .map(|i| entry(key("new", i), rng.random_range(0..SPREAD_MS)))
        .collect();
    g.bench_function("upsert_new", |b| {
        let mut q = base.clone();
        b.iter_custom(|iters| {
            chunked(
                iters,
                &mut q,
                |q, n| {
                    for e in &fresh[..n as usize] {
                        q.upsert(black_box(e.clone()));
                    }
                },
                |q, n| {
                    for e in &fresh[..n as usize] {
                        q.remove(&e.key);
                    }
                },
            )
        });
    });

    // Move a random queued task to a new random time (a re-time).
    g.bench_function("update_in_place", |b| {
        let mut q = base.clone();
        let mut rng = SmallRng::seed_from_u64(11);
        b.iter(|| {
            let k = &keys[rng.random_range(0..TASKS)];
            q.upsert(black_box(entry(k.clone(), rng.random_range(0..SPREAD_MS))));
        });
    });

    // Pop the first task (everything is due); popped tasks are queued again
    // one interval later, outside the timing, as a completion would.
    g.bench_function("pop_due", |b| {
        let mut q = base.clone();
        let mut popped: Vec<QueueEntry> = Vec::with_capacity(CHUNK as usize);
        b.iter_custom(|iters| {
            chunked(
                iters,
                &mut (&mut q, &mut popped),
                |(q, popped), n| {
                    for _ in 0..n {
                        let e = q.pop_due(black_box(Timestamp(u64::MAX - 1))).expect("a task is due");
                        popped.push(e);
                    }
                },
                |(q, popped), _| {
                    for mut e in popped.drain(..) {
                        e.next_run = e.next_run.plus(Duration::from_millis(SPREAD_MS));
                        q.upsert(e);
                    }
                },
            )
        });
    });

    // Remove a random queued task; put back outside the timing.
    g.bench_function("remove", |b| {
        let mut q = base.clone();
        let mut rng = SmallRng::seed_from_u64(13);
        let mut removed: Vec<QueueEntry> = Vec::with_capacity(CHUNK as usize);
        b.iter_custom(|iters| {
            chunked(
                iters,
                &mut (&mut q, &mut removed),
                |(q, removed), n| {
                    for _ in 0..n {
                        let k = &keys[rng.random_range(0..TASKS)];
                        if let Some(e) = q.remove(black_box(k)) {
                            removed.push(e);
                        }
                    }
                },
                |(q, removed), _| {
                    for e in removed.drain(..) {
                        q.upsert(e);
                    }
                },
            )
        });
    });

    // Reference point: building the whole 100k queue from nothing.
    g.sample_size(10);
    g.bench_function("build_100k", |b| {
        b.iter_batched(
            || SmallRng::seed_from_u64(7),
            |mut rng| full_queue(&mut rng),
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

fn ok() -> PollResult {
    Ok(PollSuccess {
        status: 200,
        digest: 42,
        body_bytes: 64,
        ..Default::default()
    })
}

/// One dispatch and one successful completion, as the engine does them for
/// every poll, with 100k tasks on a 5 s cadence (adaptive on, the default).
fn scheduler(c: &mut Criterion) {
    let mut g = c.benchmark_group("scheduler_100k");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    let meta = TaskMeta::new("bench", 1, Duration::from_secs(5));
    let start = Timestamp(1_700_000_000_000);
    let mut s = Scheduler::new(MonitoringSettings::default());
    for i in 0..TASKS {
        s.place(key("inst", i), meta.clone(), None, start, false);
    }
    let result = ok();
    let mut rng = SmallRng::seed_from_u64(3);
    let mut now = start;
    g.bench_function("pop_due_complete", |b| {
        b.iter(|| {
            let d = match s.pop_due(now) {
                Some(d) => d,
                None => {
                    now = s.next_wakeup().expect("tasks are queued");
                    s.pop_due(now).expect("a task is due at its wake-up time")
                }
            };
            black_box(s.complete(&d.key, &result, now, &mut rng));
        });
    });
    // The flusher's share: what `take_dirty` costs for 1,000 dirty records
    // (every completion marks one; the completions are not timed).
    s.take_dirty();
    g.bench_function("take_dirty_1k", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                for _ in 0..1_000 {
                    let d = match s.pop_due(now) {
                        Some(d) => d,
                        None => {
                            now = s.next_wakeup().expect("tasks are queued");
                            s.pop_due(now).expect("a task is due at its wake-up time")
                        }
                    };
                    s.complete(&d.key, &result, now, &mut rng);
                }
                let t = Instant::now();
                black_box(s.take_dirty());
                total += t.elapsed();
            }
            total
        });
    });
    g.finish();
}

criterion_group!(benches, queue, scheduler);
criterion_main!(benches);

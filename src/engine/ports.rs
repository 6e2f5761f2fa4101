//! The engine's ports to the world: every `now` it uses comes from its
//! [`Clock`], every random draw (backoff jitter, restart spreading) from its
//! seeded RNG, every poll goes through [`Fetch`], and task state is loaded
//! and committed through [`TaskStore`]. In production that is the system
//! clock, a seed from the OS, the HTTP [`Poller`] and the redb [`Store`]; a
//! test passes [`TokioClock`], a fixed seed and a scripted `Fetch`, and runs
//! the whole engine (dead letters, breakers, AIMD, restarts) on tokio's
//! paused time, in milliseconds and the same way every run, on a real redb
//! file or on a fake `TaskStore` (one whose commits fail, say).

use crate::model::random::StdRng;
use crate::model::{BaseUrl, GroupDef, InstanceConfig, PollResult, TaskKey, TaskRecord, Timestamp};
use crate::poll::Poller;
use crate::store::{LoadedTasks, OutboxEvent, Store, StoreError};
use rand::SeedableRng;
use std::sync::Arc;

pub use crate::model::{Clock, SystemClock};

/// A clock that starts at a given time and moves with tokio's clock: on
/// paused time (`#[tokio::test(start_paused = true)]`), it moves only when
/// the test sleeps or calls `tokio::time::advance`, or when the runtime has
/// nothing to do and tokio jumps to the next timer; every engine sleep moves
/// with it.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: Timestamp,
    origin: tokio::time::Instant,
}

impl TokioClock {
    pub fn starting_at(start: Timestamp) -> TokioClock {
        TokioClock {
            start,
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        self.start.plus(self.origin.elapsed())
    }
}

/// How the engine polls: the HTTP [`Poller`], or a fake in tests. An
/// implementation never panics and classifies every failure (SPEC §3); the
/// engine bounds how long it may take.
#[async_trait::async_trait]
pub trait Fetch: Send + Sync + 'static {
    /// One execution of `group` against `instance`; `base` is the instance
    /// URL parsed once, `items` the fan-out list.
    async fn fetch(
        &self,
        instance: &InstanceConfig,
        base: Option<&BaseUrl>,
        group: &GroupDef,
        items: &[String],
    ) -> PollResult;
}

#[async_trait::async_trait]
impl Fetch for Poller {
    async fn fetch(
        &self,
        instance: &InstanceConfig,
        base: Option<&BaseUrl>,
        group: &GroupDef,
        items: &[String],
    ) -> PollResult {
        self.poll_with_base(instance, base, group, items).await
    }
}

/// Where the engine keeps task state: every task record it loads at start
/// and every one it commits (the group commit, dead-letter moves, operator
/// actions), with the change events that go with them. The engine calls it
/// on a blocking thread, once per batch. Everything else durable (accounts,
/// tokens, settings, history) stays on [`Store`].
pub trait TaskStore: Send + Sync + 'static {
    /// Every stored task, and the records that could not be read (each as
    /// [`StoreError::Corrupt`]: that task starts fresh). `Err` only when
    /// the store itself fails.
    fn load_tasks(&self) -> Result<LoadedTasks, StoreError>;

    /// Writes the batch (`Some` a record, `None` a deletion) and appends
    /// `events` to the outbox, durably and all or nothing: on `Err`,
    /// nothing was written.
    fn write_tasks_with_events(
        &self,
        batch: &[(TaskKey, Option<TaskRecord>)],
        events: &[OutboxEvent],
    ) -> Result<(), StoreError>;
}

impl TaskStore for Store {
    fn load_tasks(&self) -> Result<LoadedTasks, StoreError> {
        Store::load_tasks(self)
    }

    fn write_tasks_with_events(
        &self,
        batch: &[(TaskKey, Option<TaskRecord>)],
        events: &[OutboxEvent],
    ) -> Result<(), StoreError> {
        Store::write_tasks_with_events(self, batch, events)
    }
}

/// What the engine is given: its clock, the seed of its RNG, how it polls
/// and where it keeps task state.
#[derive(Clone)]
pub struct Ports {
    pub clock: Arc<dyn Clock>,
    /// `None`: a seed from the operating system.
    pub seed: Option<u64>,
    /// `None`: the HTTP poller.
    pub fetch: Option<Arc<dyn Fetch>>,
    /// `None`: the database the appliance opened.
    pub tasks: Option<Arc<dyn TaskStore>>,
}

impl std::fmt::Debug for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ports")
            .field("clock", &self.clock)
            .field("seed", &self.seed)
            .field("fetch", &self.fetch.as_ref().map(|_| "custom"))
            .field("tasks", &self.tasks.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            clock: Arc::new(SystemClock),
            seed: None,
            fetch: None,
            tasks: None,
        }
    }
}

impl Ports {
    /// Paused-time tests: [`TokioClock`] from `start`, a fixed seed, and
    /// `fetch` for every poll.
    pub fn paused(start: Timestamp, seed: u64, fetch: Arc<dyn Fetch>) -> Ports {
        Ports {
            clock: Arc::new(TokioClock::starting_at(start)),
            seed: Some(seed),
            fetch: Some(fetch),
            tasks: None,
        }
    }

    pub(super) fn rng(&self) -> StdRng {
        match self.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => rand::make_rng(),
        }
    }

    /// The RNG event ids draw from: seeded apart from [`Ports::rng`], so
    /// ids never shift the scheduler's draws.
    pub(super) fn event_id_rng(&self) -> StdRng {
        match self.seed {
            Some(seed) => StdRng::seed_from_u64(seed ^ 0x6576_656e_7420_6964),
            None => rand::make_rng(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_moves_only_with_tokio_time() {
        let clock = TokioClock::starting_at(Timestamp(1_000_000));
        assert_eq!(clock.now(), Timestamp(1_000_000));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(clock.now(), Timestamp(1_001_500));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(clock.now(), Timestamp(1_061_500));
    }

    #[test]
    fn a_fixed_seed_draws_the_same_numbers() {
        use rand::RngExt;
        let p = Ports {
            seed: Some(7),
            ..Ports::default()
        };
        let (mut a, mut b) = (p.rng(), p.rng());
        let xs: Vec<u32> = (0..4).map(|_| a.random()).collect();
        let ys: Vec<u32> = (0..4).map(|_| b.random()).collect();
        assert_eq!(xs, ys);
    }
}

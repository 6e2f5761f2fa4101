//! The whole appliance in process on paused time: the engine's clock
//! follows tokio's virtual clock (so minutes of schedule run in
//! milliseconds), its RNG has a fixed seed, and its polls go to a
//! [`Fetch`] the suite scripts. The `engine` and `scheduling` suites start
//! it with the config and ports they need; dropping the handle and calling
//! [`Engine::stop`] shuts it down.

use pollster::app::Application;
use pollster::config::{self, Config};
use pollster::engine::EngineHandle;
use pollster::engine::ports::{Fetch, Ports};
use pollster::model::Timestamp;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The engine's time at the run's origin.
pub const START: Timestamp = Timestamp(1_790_000_000_000);

/// The defaults, with the database in `dir`.
pub fn config(dir: &std::path::Path) -> Config {
    let mut c = config::load(None, &BTreeMap::new()).expect("defaults");
    c.server.data_dir = dir.to_path_buf();
    c
}

/// A config for the failure tests: every task on a fixed `interval`, a
/// backoff of 1, 2, 4 … s up to 60 s without jitter, the breaker open
/// after 3 failures, a dead letter after 5, rechecked every `recheck`.
pub fn failure_config(dir: &std::path::Path, interval: Duration, recheck: Duration) -> Config {
    let mut c = config(dir);
    let m = &mut c.monitoring_file;
    m.adaptive.enabled = false;
    m.adaptive.min_interval = interval;
    m.adaptive.base_interval = interval;
    m.adaptive.max_interval = interval;
    m.failure.backoff_initial = Duration::from_secs(1);
    m.failure.backoff_multiplier = 2.0;
    m.failure.backoff_jitter = 0.0;
    m.failure.backoff_max = Duration::from_secs(60);
    m.failure.breaker_threshold = 3;
    m.failure.dead_letter_after = 5;
    m.failure.dead_letter_recheck = recheck;
    c
}

/// Paused ports whose clock reads [`START`] at tokio instant `origin`, so
/// an engine started later (a restart) goes on from where the first one
/// left.
pub fn ports(origin: Instant, fetch: Arc<dyn Fetch>) -> Ports {
    Ports::paused(START.plus(Instant::now() - origin), 7, fetch)
}

/// The appliance on paused time; stopped with [`Engine::stop`].
pub struct Engine {
    pub shared: EngineHandle,
    /// The appliance's database and metrics (let go of at [`Engine::stop`]).
    pub store: Option<pollster::store::Store>,
    pub metrics: Option<pollster::metrics::Metrics>,
    /// The instant the engine's clock reads [`START`] (tokio's clock).
    pub origin: Instant,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Engine {
    /// The appliance with `c` and `ports`, serving on loopback port 0.
    pub async fn serve(c: Config, ports: Ports, origin: Instant) -> Engine {
        let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let app = Application::build_with_ports(c, api, metrics, ports)
            .await
            .expect("app builds");
        let shared = app.engine();
        let (store, metrics) = (Some(app.store()), Some(app.metrics()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            app.run_until_stopped(async {
                let _ = rx.await;
            })
            .await
            .expect("runs");
        });
        Engine {
            shared,
            store,
            metrics,
            origin,
            stop: Some(tx),
            server: Some(server),
        }
    }

    /// Stop gracefully and wait for the server to end.
    pub async fn stop(self) {
        let Engine {
            shared,
            store,
            metrics,
            stop,
            server,
            ..
        } = self;
        // Let go of the database first: the server waits for every handle.
        drop((shared, store, metrics));
        let _ = stop.map(|tx| tx.send(()));
        if let Some(s) = server {
            let _ = s.await;
        }
    }

    /// The engine's time at tokio instant `t`.
    pub fn at(&self, t: Instant) -> Timestamp {
        START.plus(t - self.origin)
    }

    /// The engine's time now.
    pub fn now(&self) -> Timestamp {
        self.at(Instant::now())
    }
}

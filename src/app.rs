//! `Application::build(config)` then `run_until_stopped(shutdown)`: opens the
//! store, layers the settings, builds the catalog, starts the engine and the
//! two listeners. Tests bind `127.0.0.1:0` through
//! [`Application::build_with_listeners`] and run the real server in-process.

use crate::config::Config;
use crate::core::catalog::Catalog;
use crate::engine::ports::Ports;
use crate::engine::settings::SettingsLayers;
use crate::engine::{Engine, EngineHandle, SHUTDOWN_GRACE, Shared};
use crate::poll::Poller;
use crate::store::Store;
use crate::web::{self, AppState};
use serde_json::Value;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

pub const SETTINGS_KEY: &str = crate::service::settings::SETTINGS_KEY;
pub use crate::accounts::SETUP_CODE_FILE;

/// Write `text` to a new file readable by its owner only (0600).
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let _ = std::fs::remove_file(path);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The data key is missing or wrong for the sealed credentials (exit 2).
    #[error(transparent)]
    Key(#[from] crate::secrets::KeyError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Account(#[from] crate::accounts::AccountError),
    #[error("HTTP client: {0}")]
    Poller(#[from] crate::poll::PollerError),
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The over-budget gate refused to start (exit code 2).
    #[error(transparent)]
    OverBudget(crate::core::plan::OverBudget),
    /// A certificate or key file cannot be used (exit code 2).
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// Another server holds the data directory (exit code 2).
    #[error(transparent)]
    Locked(#[from] crate::control::LockError),
    /// `[cluster]` cannot start: no address to advertise (exit code 2),
    /// or the gossip port is taken.
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// The cluster's key file changed since the config was checked (exit
    /// code 2).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Other(String),
}

pub struct Application {
    engine: Engine,
    api: TcpListener,
    metrics: TcpListener,
    api_addr: SocketAddr,
    metrics_addr: SocketAddr,
    proxies: Vec<ipnet::IpNet>,
    max_connections: usize,
    max_connections_per_client: usize,
    connection_timeouts: crate::config::ConnectionTimeouts,
    setup_code: Option<web::SetupCode>,
    /// What the Security page lists as protections.
    posture: web::posture::Posture,
    tls: crate::tls::TlsHandle,
    metrics_auth: crate::config::MetricsAuth,
    /// Reads the config file again: SIGHUP, `POST /api/admin/reload`.
    reloader: Arc<crate::service::reload::Reloader>,
    /// `<data_dir>/control.sock`, the `admin` commands' way in (none when
    /// it could not be made: the server runs without it).
    control: Option<crate::control::server::ControlSocket>,
    /// The data key's file, for `rotate-key` through the control socket.
    key_path: std::path::PathBuf,
    /// This member of a cluster (`None` alone).
    cluster: Option<crate::cluster::Cluster>,
    /// `<data_dir>/pollster.pid`, held until the process stops (declared
    /// last: released after everything else is gone).
    _lock: crate::control::DataDirLock,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, AppError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AppError::Other(e.to_string()))
}

/// SIGHUP reads the config file, the environment and the certificates
/// again (`systemctl reload`); a bad file is logged and changes nothing, and
/// the process never ends on it.
async fn reload_on_hangup(reloader: Arc<crate::service::reload::Reloader>, cx: crate::service::Context) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            let _ = reloader.reload(&cx, "signal").await;
        }
    }
    #[cfg(not(unix))]
    let _ = (reloader, cx);
}

impl Application {
    /// Binds the configured listeners, but only once everything that can
    /// refuse the configuration (the over-budget gate needs the store) has
    /// passed: a refused configuration exits 2 even where a port is taken.
    pub async fn build(config: Config) -> Result<Application, AppError> {
        Self::build_inner(config, None, Ports::default()).await
    }

    /// With listeners the caller bound (tests bind `127.0.0.1:0`).
    pub async fn build_with_listeners(
        config: Config,
        api: TcpListener,
        metrics: TcpListener,
    ) -> Result<Application, AppError> {
        Self::build_inner(config, Some((api, metrics)), Ports::default()).await
    }

    /// [`Application::build_with_listeners`] with the engine's ports given:
    /// tests run the whole appliance on paused time with a scripted
    /// [`crate::engine::ports::Fetch`].
    pub async fn build_with_ports(
        config: Config,
        api: TcpListener,
        metrics: TcpListener,
        ports: Ports,
    ) -> Result<Application, AppError> {
        Self::build_inner(config, Some((api, metrics)), ports).await
    }

    async fn build_inner(
        config: Config,
        listeners: Option<(TcpListener, TcpListener)>,
        ports: Ports,
    ) -> Result<Application, AppError> {
        for w in &config.warnings {
            tracing::warn!("{w}");
        }
        // One server per data directory, refused before anything is opened
        // or bound.
        let lock = crate::control::DataDirLock::acquire(&config.server.data_dir)?;
        // With the lock held, a socket file left behind is stale.
        let control = match crate::control::server::ControlSocket::bind(&config.server.data_dir) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(
                    path = %config.server.data_dir.join(crate::control::protocol::SOCKET_FILE).display(),
                    error = %e,
                    "cannot make the control socket: `pollster admin` commands cannot reach this server"
                );
                None
            }
        };
        // The data key first: a missing or wrong one is refused before the
        // database is written to.
        let data_dir = config.server.data_dir.clone();
        let key_env = config.secret_key_file.clone();
        let (key_file, key) = blocking(move || crate::store::unlock(&data_dir, key_env.as_deref())).await??;
        tracing::info!(key_file = %key_file.path.display(), "data key loaded");
        let key_path = key_file.path.clone();
        let data_dir = config.server.data_dir.clone();
        let store = blocking(move || Store::open_with_key(&data_dir, key)).await??;
        tracing::info!(path = %store.path().display(), "database opened");

        let s = store.clone();
        let admin_exists = blocking(move || s.user_count().map(|n| n > 0)).await??;
        match config.admin_password.clone() {
            // A password changed in the UI is never undone by a restart.
            Some(_) if admin_exists => {
                tracing::info!("POLLSTER_ADMIN_PASSWORD is ignored: the admin account exists already");
            }
            Some(pw) => {
                let (s, now) = (store.clone(), ports.clock.now());
                blocking(move || crate::accounts::set_admin_password(&s, &pw, now)).await??;
                tracing::info!("admin account created from POLLSTER_ADMIN_PASSWORD");
            }
            None => {}
        }
        let setup_code = if admin_exists || config.admin_password.is_some() {
            let stale = config.server.data_dir.join(SETUP_CODE_FILE);
            let _ = std::fs::remove_file(stale);
            None
        } else {
            let code = web::SetupCode {
                code: crate::web::session::random_hex(12),
                file: config.server.data_dir.join(SETUP_CODE_FILE),
            };
            write_private(&code.file, &format!("{}\n", code.code))
                .map_err(|e| AppError::Other(format!("cannot write {}: {e}", code.file.display())))?;
            tracing::warn!(
                file = %code.file.display(),
                "no admin account yet: open /setup and enter the setup code from this file"
            );
            Some(code)
        };

        let s = store.clone();
        let saved = blocking(move || s.get_settings(SETTINGS_KEY))
            .await??
            .unwrap_or(Value::Null);
        let mut layers = SettingsLayers {
            file: config.monitoring_file.clone(),
            saved,
            env: config.env.clone(),
        };
        let settings = match layers.effective() {
            Ok(s) => s,
            Err(errs) => {
                // Saved settings were valid when saved; a later edit of the
                // config file can make the combination invalid. The file and
                // environment were validated at load, so fall back to them.
                let first = errs.first().map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(error = %first, "ignoring settings saved from the UI: they no longer fit the config file");
                layers.saved = Value::Null;
                layers.effective().map_err(|e| {
                    AppError::Other(
                        e.first()
                            .map(|e| e.to_string())
                            .unwrap_or_else(|| "invalid settings".into()),
                    )
                })?
            }
        };

        let mut catalog = Catalog::new(config.types.clone(), config.budgets.clone());
        for i in &config.instances {
            catalog.insert(i.clone(), true);
        }
        // Budget pools changed from the UI or API override the file's.
        let s = store.clone();
        let saved_budgets = blocking(move || s.get_settings(crate::service::budgets::BUDGETS_KEY)).await??;
        crate::service::budgets::overlay_saved(&mut catalog, saved_budgets);
        let s = store.clone();
        let stored = blocking(move || s.list_instances()).await??;
        for i in stored {
            if catalog.instances.contains_key(i.name.as_str()) {
                tracing::warn!(instance = %i.name, "an instance saved from the UI has the name of one in the config file; the config file wins");
                continue;
            }
            match i
                .validate_fields_parsed()
                .and_then(|url| catalog.check_references(&i).map(|_| url))
            {
                Ok(url) => catalog.insert_parsed(i, url, false),
                Err(e) => {
                    tracing::warn!(instance = %i.name, error = %e, "not polling a saved instance that no longer fits the configuration");
                }
            }
        }

        if let Err(message) = crate::core::plan::gate(&catalog, &Default::default(), &settings.scheduler) {
            return Err(AppError::OverBudget(message));
        }
        // The sink: saved from the UI (a document, or null for "off") in
        // place of the file's, then the environment over it.
        let s = store.clone();
        let saved_sink = blocking(move || s.get_settings(crate::store::SINK_SETTINGS)).await??;
        let sink = crate::service::sink::layered(&config, saved_sink);
        // Checked at load already; read again here for the copy that serves.
        let tls = crate::tls::TlsHandle::open(config.server.api_tls(), config.server.metrics_tls())?;
        // A cluster's member: the address it advertises and its key, before
        // any port is taken.
        let cluster = match &config.cluster {
            Some(c) => {
                let file = config
                    .file
                    .as_ref()
                    .map_or_else(|| "(defaults)".to_string(), |f| f.display().to_string());
                let key = c.read_key(&file)?;
                let setup = crate::cluster::Setup::from_config(c, ports.clock.now()).await?;
                Some((setup, key))
            }
            None => None,
        };
        // Nothing below refuses the configuration: only now take the ports.
        let (api, metrics) = match listeners {
            Some(given) => given,
            None => (
                bind(config.server.listen).await?,
                bind(config.server.metrics_listen).await?,
            ),
        };
        let api_addr = api.local_addr().map_err(|source| AppError::Bind {
            addr: config.server.listen,
            source,
        })?;
        let metrics_addr = metrics.local_addr().map_err(|source| AppError::Bind {
            addr: config.server.metrics_listen,
            source,
        })?;
        let fetch: Arc<dyn crate::engine::ports::Fetch> = match &ports.fetch {
            Some(f) => f.clone(),
            None => Arc::new(Poller::new()?.with_clock(ports.clock.clone())),
        };
        let shared = Shared::new(store, fetch, &ports, catalog, layers, settings, sink)?;
        if cluster.is_some() {
            // A member owns nothing until it has heard the others.
            shared.start_scoped(Default::default());
        }
        let engine = Engine::start(shared).await?;
        let metrics_handle = engine.parts().2;
        let cluster = match cluster {
            Some((setup, key)) => {
                let m = crate::cluster::ClusterMetrics::new()?;
                m.register(&metrics_handle.registry)?;
                let transport =
                    crate::cluster::seal::SealedUdp::new(key, &setup.config.name, m.packets_rejected.clone())
                        .with_traffic(
                            m.gossip_bytes.with_label_values(&["sent"]),
                            m.gossip_bytes.with_label_values(&["received"]),
                        );
                let fleet = Arc::new(crate::cluster::EngineFleet::new(engine.handle()));
                Some(crate::cluster::Cluster::start(setup, fleet, m, &transport).await?)
            }
            None => None,
        };
        metrics_handle.set_per_instance_histograms(config.metrics.per_instance_histograms);
        let reloader = Arc::new(crate::service::reload::Reloader::new(
            config.clone(),
            crate::service::reload::EnvSource::Process,
            tls.clone(),
            metrics_handle,
            ports.clock.now(),
        ));
        Ok(Application {
            engine,
            api,
            metrics,
            api_addr,
            metrics_addr,
            proxies: config.server.proxy_nets(),
            max_connections: config.server.max_connections,
            max_connections_per_client: config.server.max_connections_per_client,
            connection_timeouts: config.server.connection_timeouts,
            setup_code,
            posture: web::posture::Posture {
                ui_tls: tls.api.is_some(),
                metrics_tls: tls.metrics.is_some(),
                metrics_auth: config.server.metrics_auth == crate::config::MetricsAuth::Token,
                key_file: Some(key_path.clone()),
                trusted_proxies: config.server.trusted_proxies.clone(),
            },
            tls,
            metrics_auth: config.server.metrics_auth,
            reloader,
            control,
            key_path,
            cluster,
            _lock: lock,
        })
    }

    /// The first-run setup code, while no admin account exists.
    pub fn setup_code(&self) -> Option<&str> {
        self.setup_code.as_ref().map(|c| c.code.as_str())
    }

    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// The listeners' certificates: [`crate::tls::TlsHandle::reload`] is
    /// what SIGHUP does.
    pub fn tls(&self) -> crate::tls::TlsHandle {
        self.tls.clone()
    }

    /// What reads the config file again (SIGHUP, the API); `main` gives it
    /// the log filter with [`crate::service::reload::Reloader::set_log_level`].
    pub fn reloader(&self) -> Arc<crate::service::reload::Reloader> {
        self.reloader.clone()
    }

    /// The running engine, as the web layer and tests reach it.
    pub fn engine(&self) -> EngineHandle {
        self.engine.handle()
    }

    /// The database the appliance runs on.
    pub fn store(&self) -> crate::store::Store {
        self.engine.parts().0
    }

    /// The appliance's metrics.
    pub fn metrics(&self) -> crate::metrics::Metrics {
        self.engine.parts().2
    }

    /// Serve until `shutdown` completes, then stop dispatching, let polls in
    /// flight finish (or abandon them after a bound) and flush state.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), AppError> {
        let web_state = web::WebState::new(self.proxies.clone(), self.setup_code.clone())
            .with_posture(self.posture.clone())
            .with_reloader(self.reloader.clone())
            .with_cluster(self.cluster.clone());
        let (store, sink, metrics) = self.engine.parts();
        let cx = crate::service::Context {
            engine: self.engine.handle(),
            store,
            sink,
            cluster: self.cluster.clone(),
        };
        let state = AppState::new(cx.clone(), metrics, web_state);
        let tls_config = |certs: &Option<Arc<crate::tls::CertStore>>| {
            certs
                .clone()
                .map(crate::tls::server_config)
                .transpose()
                .map_err(|e| AppError::Other(format!("TLS configuration: {e}")))
        };
        let api_tls = tls_config(&self.tls.api)?;
        let metrics_tls = tls_config(&self.tls.metrics)?;
        let watcher = tokio::spawn(crate::tls::watch(self.tls.clone(), crate::tls::WATCH_INTERVAL));
        // The context moves into the task, so no handle on the store outlives
        // the stop below.
        let control = self.control.map(|socket| {
            let handlers = crate::control::server::Handlers {
                reloader: self.reloader.clone(),
                key_file: self.key_path.clone(),
            };
            let path = socket.path().to_path_buf();
            (tokio::spawn(socket.serve(cx.clone(), handlers)), path)
        });
        let hangup = tokio::spawn(reload_on_hangup(self.reloader.clone(), cx));
        let state_store = state.store.clone();
        let pruner = tokio::spawn(web::session_store::prune_loop(
            state.store.clone(),
            std::time::Duration::from_secs(600),
        ));
        let failures = tokio::spawn(web::failed_auth::flush_loop(state.clone()));
        // The hash a login for an unknown user is checked against, made
        // before the first such login (which would otherwise take longer).
        tokio::task::spawn_blocking(crate::accounts::prepare);
        let flush_state = state.clone();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let scheme = |on: bool| if on { "https" } else { "http" };
        tracing::info!(
            api = %format!("{}://{}", scheme(api_tls.is_some()), self.api_addr),
            metrics = %format!("{}://{}", scheme(metrics_tls.is_some()), self.metrics_addr),
            metrics_auth = self.metrics_auth.as_str(),
            https = %match (api_tls.is_some(), metrics_tls.is_some()) {
                (true, true) => "UI/API and metrics listeners",
                (true, false) => "UI/API listener only",
                (false, true) => "metrics listener only",
                (false, false) => "neither listener",
            },
            "listening"
        );
        // The per-client cap is on the socket's peer: a trusted proxy is one
        // peer for everyone behind it, so it is held to the total alone.
        let rejected = state.metrics.connections_rejected.clone();
        let api = tokio::spawn(web::serve::serve(
            self.api,
            web::router(state.clone()),
            web::serve::Limits {
                max_connections: self.max_connections,
                max_connections_per_client: self.max_connections_per_client,
                exempt: self.proxies.clone(),
                timeouts: self.connection_timeouts,
            },
            api_tls,
            web::serve::Rejections::new("ui", rejected.clone()),
            stop_rx.clone(),
        ));
        let metrics = tokio::spawn(web::serve::serve(
            self.metrics,
            web::metrics_router(state, self.metrics_auth),
            web::serve::Limits {
                max_connections: web::serve::METRICS_MAX_CONNECTIONS,
                max_connections_per_client: web::serve::metrics_per_client(self.max_connections_per_client),
                exempt: self.proxies.clone(),
                timeouts: self.connection_timeouts,
            },
            metrics_tls,
            web::serve::Rejections::new("metrics", rejected),
            stop_rx,
        ));
        shutdown.await;
        tracing::info!("shutting down");
        // No admin command starts from here on; one in progress is cut off.
        if let Some((task, path)) = control {
            task.abort();
            let _ = task.await;
            crate::control::server::remove(&path);
        }
        failures.abort();
        let _ = failures.await;
        // The failure counts still open: written, and given to the sink
        // before it flushes.
        web::failed_auth::flush(&flush_state, true).await;
        drop(flush_state);
        // A member gives its units up first, so the others take them now
        // rather than after the failure detector's time.
        if let Some(c) = &self.cluster {
            c.shutdown().await;
        }
        self.engine.shutdown(SHUTDOWN_GRACE).await;
        let _ = stop_tx.send(true);
        pruner.abort();
        let _ = pruner.await;

        watcher.abort();
        hangup.abort();
        let _ = hangup.await;
        // Open keep-alive connections must not hold the process (or the
        // database) up: give them a moment, then drop the servers.
        let (mut api, mut metrics) = (api, metrics);
        let drained = tokio::time::timeout(std::time::Duration::from_secs(2), async {
            let _ = (&mut api).await;
            let _ = (&mut metrics).await;
        })
        .await;
        if drained.is_err() {
            api.abort();
            metrics.abort();
            // Wait for the cancellation, so the routers (and the database
            // they hold) are gone when this returns.
            let _ = api.await;
            let _ = metrics.await;
        }
        // A request aborted above may have left a blocking database call
        // (a session save, say) running; it holds the file until it ends.
        // Wait for it briefly, so the database is free when this returns.
        let store = state_store;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while store.handles() > 1 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tracing::info!("stopped");
        Ok(())
    }
}

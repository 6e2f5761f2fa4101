//! `[server]`: the listeners (their certificates and who may scrape), the
//! data directory and the reverse proxies that are trusted.

use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// `[server]`: listeners and the data directory. Not editable at run time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Web UI and JSON API.
    pub listen: SocketAddr,
    /// Prometheus `/metrics`, on its own listener so it is never exposed by accident.
    pub metrics_listen: SocketAddr,
    /// Where the database lives. Relative paths are relative to the working
    /// directory; the packaged file sets `/var/lib/pollster`.
    pub data_dir: PathBuf,
    /// Trust `X-Forwarded-For` / `X-Forwarded-Proto` from a reverse proxy in
    /// front of Pollster (client address for login throttling, HTTPS for the
    /// cookie's `Secure` flag). Off by default: a direct client could forge
    /// them. On its own it trusts a proxy on loopback only; name the proxies
    /// in `trusted_proxies`.
    pub trust_proxy: bool,
    /// The reverse proxies whose `X-Forwarded-*` headers are believed, as
    /// addresses or CIDR ranges (`10.0.0.5`, `10.1.0.0/16`, `::1`). A request
    /// whose peer is not in the list is taken at its socket address.
    pub trusted_proxies: Vec<String>,
    /// Connections the web UI and API listener serves at once; one more is
    /// accepted and closed at once (the metrics listener has its own,
    /// smaller cap).
    pub max_connections: usize,
    /// Connections one client (an IPv4 address, an IPv6 /64) may hold at
    /// once on the UI/API listener; one more is accepted and closed at once.
    /// The metrics listener allows a quarter of its own cap per client, or
    /// this when smaller. A trusted proxy (`trusted_proxies`) speaks for
    /// many clients and is held to `max_connections` alone.
    pub max_connections_per_client: usize,
    /// Certificate (PEM, the chain after the server's own) for HTTPS on the
    /// UI/API listener; with `tls_key`, or neither.
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Certificate for HTTPS on the metrics listener; defaults to `tls_cert`.
    pub metrics_tls_cert: Option<PathBuf>,
    /// Private key of `metrics_tls_cert`; defaults to `tls_key`.
    pub metrics_tls_key: Option<PathBuf>,
    /// Who may read `/metrics` and `/values`.
    pub metrics_auth: MetricsAuth,
    /// How long a connection may stall. Not a key of the file (the values
    /// are the product's); tests shorten them.
    #[serde(skip)]
    pub connection_timeouts: ConnectionTimeouts,
}

/// The times after which either listener closes a connection that stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionTimeouts {
    /// To send a whole request head, counted from the moment the server
    /// waits for one: on a new connection, and between requests on a
    /// kept-alive one (so this is the idle timeout too). Also the TLS
    /// handshake's.
    pub header: Duration,
    /// For a response write to make progress: a client that stops reading
    /// (and lets its receive window fill) is closed after this.
    pub write: Duration,
}

/// [`ConnectionTimeouts::header`] as shipped.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// [`ConnectionTimeouts::write`] as shipped.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for ConnectionTimeouts {
    fn default() -> Self {
        ConnectionTimeouts {
            header: DEFAULT_HEADER_TIMEOUT,
            write: DEFAULT_WRITE_TIMEOUT,
        }
    }
}

/// `server.metrics_auth`: `none` (anyone who reaches the listener, as
/// exporters do by default) or `token` (an API token of scope `read` or
/// `admin`, sent as `Authorization: Bearer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAuth {
    #[default]
    None,
    Token,
}

impl MetricsAuth {
    /// As written in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsAuth::None => "none",
            MetricsAuth::Token => "token",
        }
    }

    pub fn parse(raw: &str) -> Result<MetricsAuth, String> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(MetricsAuth::None),
            "token" => Ok(MetricsAuth::Token),
            _ => Err("must be none or token".into()),
        }
    }
}

impl ServerConfig {
    /// The proxies whose forwarded headers are believed: `trusted_proxies`,
    /// or loopback alone when only `trust_proxy` is on; none otherwise.
    /// Entries that do not parse were refused at load.
    pub fn proxy_nets(&self) -> Vec<ipnet::IpNet> {
        let mut nets: Vec<ipnet::IpNet> = self.trusted_proxies.iter().filter_map(|s| parse_net(s).ok()).collect();
        if nets.is_empty() && self.trust_proxy {
            nets = ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect();
        }
        nets
    }

    /// The UI/API listener's certificate files, when it serves HTTPS.
    pub fn api_tls(&self) -> Option<crate::tls::CertFiles> {
        pair(&self.tls_cert, &self.tls_key)
    }

    /// The metrics listener's: its own pair, else the UI's.
    pub fn metrics_tls(&self) -> Option<crate::tls::CertFiles> {
        pair(&self.metrics_tls_cert, &self.metrics_tls_key).or_else(|| self.api_tls())
    }
}

fn pair(cert: &Option<PathBuf>, key: &Option<PathBuf>) -> Option<crate::tls::CertFiles> {
    match (cert, key) {
        (Some(cert), Some(key)) => Some(crate::tls::CertFiles {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => None,
    }
}

/// `10.0.0.5` (one address) or `10.1.0.0/16`.
pub fn parse_net(raw: &str) -> Result<ipnet::IpNet, String> {
    let raw = raw.trim();
    if let Ok(ip) = raw.parse::<std::net::IpAddr>() {
        return Ok(ipnet::IpNet::from(ip));
    }
    raw.parse::<ipnet::IpNet>()
        .map(|n| n.trunc())
        .map_err(|_| "must be an IP address or a CIDR range, e.g. 10.0.0.5 or 10.1.0.0/16".into())
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 7655)),
            metrics_listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9091)),
            data_dir: PathBuf::from("./data"),
            trust_proxy: false,
            trusted_proxies: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            tls_cert: None,
            tls_key: None,
            metrics_tls_cert: None,
            metrics_tls_key: None,
            metrics_auth: MetricsAuth::None,
            connection_timeouts: ConnectionTimeouts::default(),
        }
    }
}

/// Default `server.max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default `server.max_connections_per_client`: room for a few browsers
/// (six connections each) behind one address, and for scripts; eight such
/// clients fill the UI/API listener's default cap.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 64;

//! `[cluster]`: members that share one fleet (docs/CLUSTER.md). Without the
//! section, and without any `POLLSTER_CLUSTER_*` variable, Pollster runs
//! alone exactly as before.
//!
//! Everything here is checked at load, before anything binds: the names,
//! the addresses, the seeds' form, and the key file (present, readable by
//! its owner only, 32 bytes).

use super::ConfigError;
use crate::model::duration_str;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The UDP port gossip listens on by default (memberlist's, which operators
/// know from Alloy and Consul).
pub const DEFAULT_GOSSIP_PORT: u16 = 7946;
/// The gossip interval by default: phi-accrual then declares a silent member
/// down in about 8–20 s, inside the 30 s takeover bound.
pub const DEFAULT_GOSSIP_INTERVAL: Duration = Duration::from_secs(1);
const MIN_GOSSIP_INTERVAL: Duration = Duration::from_millis(100);
const MAX_GOSSIP_INTERVAL: Duration = Duration::from_secs(10);
/// At most this many members (and `min_members`).
pub const MAX_MEMBERS: usize = 64;

/// `[cluster]` as written (file, then environment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Members with another name ignore each other's gossip.
    #[serde(default = "default_name")]
    pub name: String,
    /// This member's name, unique in the cluster; the host name when unset
    /// (so a StatefulSet's pod name works).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Where gossip listens (UDP).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Where the others reach this member; see [`ClusterConfig::advertise`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise: Option<SocketAddr>,
    /// `host:port` of members to join through; DNS names are resolved
    /// again while the member runs.
    #[serde(default)]
    pub seeds: Vec<String>,
    /// The 32-byte key every datagram is sealed with, the same on every
    /// member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Below this many live members (this one included) a member polls
    /// nothing.
    #[serde(default = "one")]
    pub min_members: usize,
    #[serde(default = "default_gossip_interval", with = "duration_str")]
    pub gossip_interval: Duration,
}

fn default_name() -> String {
    "pollster".into()
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], DEFAULT_GOSSIP_PORT))
}

fn one() -> usize {
    1
}

fn default_gossip_interval() -> Duration {
    DEFAULT_GOSSIP_INTERVAL
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            name: default_name(),
            member: None,
            listen: default_listen(),
            advertise: None,
            seeds: Vec::new(),
            key_file: None,
            min_members: 1,
            gossip_interval: DEFAULT_GOSSIP_INTERVAL,
        }
    }
}

/// A name for the cluster or a member: what a host name or a pod name
/// holds.
fn check_name(v: &str) -> Result<(), String> {
    if v.is_empty() || v.len() > 64 {
        return Err("must be 1 to 64 characters".into());
    }
    if !v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        return Err("may hold only letters, digits, '.', '-' and '_'".into());
    }
    Ok(())
}

/// `host:port`, the host a name or an address (IPv6 in brackets).
pub fn check_seed(seed: &str) -> Result<(), String> {
    if seed.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let bad = || "must be host:port, e.g. pollster-0.pollster:7946 or 10.0.0.5:7946".to_string();
    let (host, port) = seed.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || host.contains(':') || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        return Err(bad());
    }
    Ok(())
}

impl ClusterConfig {
    /// This member's name: `member`, else the host name.
    pub fn member_name(&self) -> String {
        self.member.clone().unwrap_or_else(host_name)
    }

    /// The checks that need no I/O; `file` and `prefix` name the key.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let err = |key: &str, value: String, message: String| {
            ConfigError::new(file, format!("cluster.{key}"), value, message)
        };
        check_name(&self.name).map_err(|m| err("name", format!("{:?}", self.name), m))?;
        let member = self.member_name();
        check_name(&member).map_err(|m| {
            let m = if self.member.is_none() {
                format!("the host name {m}; set cluster.member")
            } else {
                m
            };
            err("member", format!("{member:?}"), m)
        })?;
        if let Some(a) = self.advertise
            && (a.ip().is_unspecified() || a.port() == 0)
        {
            return Err(err(
                "advertise",
                format!("{a:?}"),
                "must be an address the other members can reach, with a port (not 0.0.0.0, [::] or port 0)".into(),
            ));
        }
        for (i, s) in self.seeds.iter().enumerate() {
            check_seed(s).map_err(|m| err(&format!("seeds[{i}]"), format!("{s:?}"), m))?;
        }
        if self.key_file.is_none() {
            return Err(err(
                "key_file",
                String::new(),
                "is required: the 32-byte key every member seals its gossip with (e.g. `openssl rand -base64 32`, mode 0600)"
                    .into(),
            ));
        }
        if self.min_members == 0 || self.min_members > MAX_MEMBERS {
            return Err(err(
                "min_members",
                self.min_members.to_string(),
                format!("must be between 1 and {MAX_MEMBERS}"),
            ));
        }
        if self.gossip_interval < MIN_GOSSIP_INTERVAL || self.gossip_interval > MAX_GOSSIP_INTERVAL {
            return Err(err(
                "gossip_interval",
                format!("{:?}", duration_str::format(self.gossip_interval)),
                "must be between 100ms and 10s".into(),
            ));
        }
        Ok(())
    }

    /// Reads the key file: present, not readable by group or others, and a
    /// 32-byte key (base64, hex or raw).
    pub fn read_key(&self, file: &str) -> Result<crate::secrets::DataKey, ConfigError> {
        let path = self.key_file.as_deref().unwrap_or(Path::new(""));
        let err =
            |m: String| ConfigError::new(file, "cluster.key_file", format!("{:?}", path.display().to_string()), m);
        let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read the key file: {e}")))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(err(format!(
                    "the key file is readable by others (mode {mode:04o}); make it 0600 (chmod 600)"
                )));
            }
        }
        #[cfg(not(unix))]
        let _ = meta;
        let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read the key file: {e}")))?;
        crate::secrets::DataKey::parse(&bytes).map_err(|m| err(format!("not a 32-byte key: {m}")))
    }
}

/// The host name, as `gethostname(2)` gives it (empty when it cannot).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most
    // that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

//! An `instances` value: an instance added from the UI or API
//! ([`InstanceConfig`]). Unknown fields are refused, as the config file
//! refuses them, so a record a newer release extended is reported rather
//! than half read. Written rarely: the write side copies.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use crate::model::{Auth, DEFAULT_MAX_RESPONSE_BYTES, InstanceConfig, InstanceName, Secret, duration_str};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoredInstance {
    #[serde(rename = "name")]
    name: InstanceName,
    #[serde(rename = "type", default = "default_type")]
    type_name: String,
    #[serde(rename = "url")]
    url: String,
    #[serde(rename = "timeout", with = "duration_str", default = "default_timeout")]
    timeout: Duration,
    #[serde(rename = "budget", default, skip_serializing_if = "Option::is_none")]
    budget: Option<String>,
    #[serde(rename = "labels", default)]
    labels: BTreeMap<String, String>,
    #[serde(rename = "enabled", default = "default_true")]
    enabled: bool,
    #[serde(rename = "auth", default)]
    auth: StoredAuth,
    #[serde(rename = "tls_verify", default = "default_true")]
    tls_verify: bool,
    #[serde(rename = "tls_fingerprint", default, skip_serializing_if = "Option::is_none")]
    tls_fingerprint: Option<String>,
    #[serde(rename = "max_response_bytes", default = "default_max_response_bytes")]
    max_response_bytes: u64,
    #[serde(rename = "shape", default, skip_serializing_if = "BTreeMap::is_empty")]
    shape: BTreeMap<String, u64>,
}

impl Versioned for StoredInstance {
    const WHAT: &'static str = "instance";
    const VERSION: u8 = FORMAT_JSON_V1;
}

impl Encodes for StoredInstance {
    type Value = StoredInstance;
}

fn default_type() -> String {
    "http".into()
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_true() -> bool {
    true
}
fn default_max_response_bytes() -> u64 {
    DEFAULT_MAX_RESPONSE_BYTES
}

/// How Pollster authenticates to the instance, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", deny_unknown_fields)]
enum StoredAuth {
    /// A struct variant: serde would ignore unknown fields beside the tag of
    /// a unit one.
    #[serde(rename = "none")]
    None {},
    #[serde(rename = "bearer")]
    Bearer {
        #[serde(rename = "token")]
        token: Secret,
    },
    #[serde(rename = "header")]
    Header {
        #[serde(rename = "name")]
        name: String,
        #[serde(rename = "value")]
        value: Secret,
    },
    #[serde(rename = "basic")]
    Basic {
        #[serde(rename = "username")]
        username: String,
        #[serde(rename = "password")]
        password: Secret,
    },
    #[serde(rename = "pve_token")]
    PveToken {
        #[serde(rename = "user")]
        user: String,
        #[serde(rename = "token_id")]
        token_id: String,
        #[serde(rename = "secret")]
        secret: Secret,
    },
}

impl Default for StoredAuth {
    fn default() -> Self {
        StoredAuth::None {}
    }
}

impl From<&Auth> for StoredAuth {
    fn from(a: &Auth) -> Self {
        match a.clone() {
            Auth::None {} => StoredAuth::None {},
            Auth::Bearer { token } => StoredAuth::Bearer { token },
            Auth::Header { name, value } => StoredAuth::Header { name, value },
            Auth::Basic { username, password } => StoredAuth::Basic { username, password },
            Auth::PveToken { user, token_id, secret } => StoredAuth::PveToken { user, token_id, secret },
        }
    }
}

impl From<StoredAuth> for Auth {
    fn from(a: StoredAuth) -> Self {
        match a {
            StoredAuth::None {} => Auth::None {},
            StoredAuth::Bearer { token } => Auth::Bearer { token },
            StoredAuth::Header { name, value } => Auth::Header { name, value },
            StoredAuth::Basic { username, password } => Auth::Basic { username, password },
            StoredAuth::PveToken { user, token_id, secret } => Auth::PveToken { user, token_id, secret },
        }
    }
}

impl From<&InstanceConfig> for StoredInstance {
    fn from(i: &InstanceConfig) -> Self {
        StoredInstance {
            name: i.name.clone(),
            type_name: i.type_name.clone(),
            url: i.url.clone(),
            timeout: i.timeout,
            budget: i.budget.clone(),
            labels: i.labels.clone(),
            enabled: i.enabled,
            auth: StoredAuth::from(&i.auth),
            tls_verify: i.tls_verify,
            tls_fingerprint: i.tls_fingerprint.clone(),
            max_response_bytes: i.max_response_bytes,
            shape: i.shape.clone(),
        }
    }
}

impl From<StoredInstance> for InstanceConfig {
    fn from(s: StoredInstance) -> Self {
        InstanceConfig {
            name: s.name,
            type_name: s.type_name,
            url: s.url,
            timeout: s.timeout,
            budget: s.budget,
            labels: s.labels,
            enabled: s.enabled,
            auth: s.auth.into(),
            tls_verify: s.tls_verify,
            tls_fingerprint: s.tls_fingerprint,
            max_response_bytes: s.max_response_bytes,
            shape: s.shape,
        }
    }
}

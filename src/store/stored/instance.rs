//! An `instances` value: an instance added from the UI or API
//! ([`InstanceConfig`]). Unknown fields are refused, as the config file
//! refuses them, so a record a newer release extended is reported rather
//! than half read. Written rarely: the write side copies.
//!
//! Format 2 holds every credential sealed ([`StoredSecret::Sealed`], see
//! `crate::secrets`): the auth secret, and a URL with a password in its
//! userinfo, which is kept whole in `url_sealed` while `url` shows it
//! without the password. Format 1 (older releases, and the inside of an
//! encrypted backup) held them in plaintext; it still reads, as
//! [`StoredSecret::Plain`] values the store seals when it next opens with
//! its key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use super::secret::{StoredSecret, without_password};
use crate::model::{Auth, DEFAULT_MAX_RESPONSE_BYTES, InstanceConfig, InstanceName, Secret, duration_str};
use crate::secrets::{DataKey, instance_aad};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoredInstance {
    #[serde(rename = "name")]
    name: InstanceName,
    #[serde(rename = "type", default = "default_type")]
    type_name: String,
    #[serde(rename = "url")]
    url: String,
    /// The whole URL, sealed, when it holds a password (format 2).
    #[serde(rename = "url_sealed", default, skip_serializing_if = "Option::is_none")]
    url_sealed: Option<StoredSecret>,
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

/// Format 2: credentials sealed.
pub(crate) const INSTANCE_SEALED_V2: u8 = 2;

impl Versioned for StoredInstance {
    const WHAT: &'static str = "instance";
    const VERSION: u8 = INSTANCE_SEALED_V2;

    fn upgrade(version: u8, payload: &[u8]) -> Result<Self, String> {
        match version {
            // The same fields, with the secrets (and the URL) in plaintext.
            FORMAT_JSON_V1 => {
                let mut s: StoredInstance = serde_json::from_slice(payload).map_err(|e| format!("bad JSON: {e}"))?;
                if s.url_sealed.is_some() {
                    return Err("a format-1 instance has no url_sealed".into());
                }
                if let Some((_, secret)) = s.auth.secret_mut() {
                    secret.mark_plain();
                }
                Ok(s)
            }
            other => Err(super::super::codec::unknown_version(other, Self::VERSION)),
        }
    }
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
        token: StoredSecret,
    },
    #[serde(rename = "header")]
    Header {
        #[serde(rename = "name")]
        name: String,
        #[serde(rename = "value")]
        value: StoredSecret,
    },
    #[serde(rename = "basic")]
    Basic {
        #[serde(rename = "username")]
        username: String,
        #[serde(rename = "password")]
        password: StoredSecret,
    },
    #[serde(rename = "pve_token")]
    PveToken {
        #[serde(rename = "user")]
        user: String,
        #[serde(rename = "token_id")]
        token_id: String,
        #[serde(rename = "secret")]
        secret: StoredSecret,
    },
}

impl Default for StoredAuth {
    fn default() -> Self {
        StoredAuth::None {}
    }
}

impl StoredAuth {
    /// `auth` with its secret turned into a stored one by `f(field, secret)`.
    fn from_auth(a: &Auth, mut f: impl FnMut(&'static str, &Secret) -> StoredSecret) -> Self {
        match a {
            Auth::None {} => StoredAuth::None {},
            Auth::Bearer { token } => StoredAuth::Bearer {
                token: f("auth.token", token),
            },
            Auth::Header { name, value } => StoredAuth::Header {
                name: name.clone(),
                value: f("auth.value", value),
            },
            Auth::Basic { username, password } => StoredAuth::Basic {
                username: username.clone(),
                password: f("auth.password", password),
            },
            Auth::PveToken { user, token_id, secret } => StoredAuth::PveToken {
                user: user.clone(),
                token_id: token_id.clone(),
                secret: f("auth.secret", secret),
            },
        }
    }

    /// The secret field, by the name its associated data uses.
    fn secret_mut(&mut self) -> Option<(&'static str, &mut StoredSecret)> {
        match self {
            StoredAuth::None {} => None,
            StoredAuth::Bearer { token } => Some(("auth.token", token)),
            StoredAuth::Header { value, .. } => Some(("auth.value", value)),
            StoredAuth::Basic { password, .. } => Some(("auth.password", password)),
            StoredAuth::PveToken { secret, .. } => Some(("auth.secret", secret)),
        }
    }

    fn into_auth(
        self,
        mut open: impl FnMut(&'static str, StoredSecret) -> Result<Secret, String>,
    ) -> Result<Auth, String> {
        Ok(match self {
            StoredAuth::None {} => Auth::None {},
            StoredAuth::Bearer { token } => Auth::Bearer {
                token: open("auth.token", token)?,
            },
            StoredAuth::Header { name, value } => Auth::Header {
                name,
                value: open("auth.value", value)?,
            },
            StoredAuth::Basic { username, password } => Auth::Basic {
                username,
                password: open("auth.password", password)?,
            },
            StoredAuth::PveToken { user, token_id, secret } => Auth::PveToken {
                user,
                token_id,
                secret: open("auth.secret", secret)?,
            },
        })
    }
}

impl StoredInstance {
    /// The record to write: every credential sealed under `key` for this
    /// instance and field, with nonces from `rng`.
    /// Without a key, only an instance with no credential can be written.
    pub(crate) fn seal(i: &InstanceConfig, key: Option<&DataKey>, rng: &mut impl rand::Rng) -> Result<Self, String> {
        let name = i.name.as_str();
        let mut missing = None;
        let mut seal = |field: &'static str, secret: &str| match key {
            Some(key) => StoredSecret::Sealed(key.seal_with(rng, &instance_aad(name, field), secret)),
            None => {
                missing = Some(field);
                StoredSecret::Sealed(String::new())
            }
        };
        let (url, url_sealed) = match without_password(&i.url) {
            Some(shown) => (shown, Some(seal("url", &i.url))),
            None => (i.url.clone(), None),
        };
        let auth = StoredAuth::from_auth(&i.auth, |field, s| seal(field, s.expose()));
        if let Some(field) = missing {
            return Err(format!(
                "{field} of instance {name:?} cannot be sealed: no data key is loaded"
            ));
        }
        Ok(StoredInstance::with(i, url, url_sealed, auth))
    }

    /// The record with its credentials in plaintext: only ever written in
    /// format 1, inside an encrypted backup.
    pub(crate) fn plain(i: &InstanceConfig) -> Self {
        let auth = StoredAuth::from_auth(&i.auth, |_, s| StoredSecret::Plain(s.clone()));
        StoredInstance::with(i, i.url.clone(), None, auth)
    }

    fn with(i: &InstanceConfig, url: String, url_sealed: Option<StoredSecret>, auth: StoredAuth) -> Self {
        StoredInstance {
            name: i.name.clone(),
            type_name: i.type_name.clone(),
            url,
            url_sealed,
            timeout: i.timeout,
            budget: i.budget.clone(),
            labels: i.labels.clone(),
            enabled: i.enabled,
            auth,
            tls_verify: i.tls_verify,
            tls_fingerprint: i.tls_fingerprint.clone(),
            max_response_bytes: i.max_response_bytes,
            shape: i.shape.clone(),
        }
    }

    /// Every sealed value with its associated data.
    pub(crate) fn sealed(&self) -> Vec<(String, &str)> {
        let name = self.name.as_str();
        let mut out = Vec::new();
        if let Some(StoredSecret::Sealed(s)) = &self.url_sealed {
            out.push((instance_aad(name, "url"), s.as_str()));
        }
        let auth = match &self.auth {
            StoredAuth::None {} => None,
            StoredAuth::Bearer { token: s } => Some(("auth.token", s)),
            StoredAuth::Header { value: s, .. } => Some(("auth.value", s)),
            StoredAuth::Basic { password: s, .. } => Some(("auth.password", s)),
            StoredAuth::PveToken { secret: s, .. } => Some(("auth.secret", s)),
        };
        if let Some((field, StoredSecret::Sealed(s))) = auth {
            out.push((instance_aad(name, field), s.as_str()));
        }
        out
    }

    /// The instance, its sealed credentials opened with `key` (needed only
    /// when there are sealed ones).
    pub(crate) fn open(self, key: Option<&DataKey>) -> Result<InstanceConfig, String> {
        let name = self.name.clone();
        let open = |field: &str, s: StoredSecret| -> Result<Secret, String> {
            match s {
                StoredSecret::Plain(p) => Ok(p),
                StoredSecret::Sealed(sealed) => {
                    let key = key.ok_or_else(|| format!("{field} is sealed and no data key is loaded"))?;
                    key.open(&instance_aad(name.as_str(), field), &sealed)
                        .map_err(|e| format!("{field}: {e}"))
                }
            }
        };
        let url = match self.url_sealed {
            Some(s) => open("url", s)?.expose().to_string(),
            None => self.url,
        };
        Ok(InstanceConfig {
            name: self.name,
            type_name: self.type_name,
            url,
            timeout: self.timeout,
            budget: self.budget,
            labels: self.labels,
            enabled: self.enabled,
            auth: self.auth.into_auth(open)?,
            tls_verify: self.tls_verify,
            tls_fingerprint: self.tls_fingerprint,
            max_response_bytes: self.max_response_bytes,
            shape: self.shape,
        })
    }
}

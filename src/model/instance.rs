//! One API endpoint to poll (`[[instances]]`), how Pollster authenticates
//! to it, budget pools, and their validation.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

/// How Pollster authenticates to an instance. Secrets are write-only in the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Auth {
    /// A struct variant, not a unit one: serde ignores unknown fields next to
    /// the tag of a unit variant, so `{"kind": "none", "token": "…"}` would
    /// be taken silently.
    None {},
    Bearer {
        token: Secret,
    },
    Header {
        name: String,
        value: Secret,
    },
    Basic {
        username: String,
        password: Secret,
    },
    /// Proxmox API token: `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET`.
    PveToken {
        user: String,
        token_id: String,
        secret: Secret,
    },
}

impl Default for Auth {
    fn default() -> Self {
        Auth::None {}
    }
}

impl Auth {
    pub fn kind(&self) -> &'static str {
        match self {
            Auth::None {} => "none",
            Auth::Bearer { .. } => "bearer",
            Auth::Header { .. } => "header",
            Auth::Basic { .. } => "basic",
            Auth::PveToken { .. } => "pve_token",
        }
    }
}

pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

/// One API endpoint to poll, as in `[[instances]]` (§7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    pub name: InstanceName,
    #[serde(rename = "type", default = "default_type")]
    pub type_name: String,
    pub url: String,
    #[serde(with = "duration_str", default = "default_timeout")]
    pub timeout: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default)]
    pub auth: Auth,
    /// Verify the server certificate against the system roots (default on).
    #[serde(default = "default_true")]
    pub tls_verify: bool,
    /// Trust exactly this certificate, by the SHA-256 of its DER bytes (hex,
    /// colons optional) — for self-signed Proxmox certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_fingerprint: Option<String>,
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// Shape counts for planning before they are learned (and for
    /// `pollster plan`), e.g. `shape = { nodes = 12 }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shape: BTreeMap<String, u64>,
}

fn default_type() -> String {
    "http".into()
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_max_response_bytes() -> u64 {
    DEFAULT_MAX_RESPONSE_BYTES
}

impl InstanceConfig {
    /// An instance with every optional field at its default.
    ///
    /// Panics if `name` breaks the naming rule: it is for names the code
    /// itself chose (the demo, tests). Names from outside are read through
    /// serde or [`InstanceName::parse`], which give an error instead.
    pub fn new(name: &str, type_name: &str, url: &str) -> Self {
        InstanceConfig {
            name: InstanceName::parse(name).unwrap_or_else(|e| panic!("InstanceConfig::new: {e}")),
            type_name: type_name.into(),
            url: url.into(),
            timeout: default_timeout(),
            budget: None,
            labels: BTreeMap::new(),
            enabled: true,
            auth: Auth::None {},
            tls_verify: true,
            tls_fingerprint: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            shape: BTreeMap::new(),
        }
    }

    /// Field-level checks that need no knowledge of types or budgets.
    pub fn validate_fields(&self) -> Result<(), FieldError> {
        self.validate_fields_parsed().map(|_| ())
    }

    /// [`InstanceConfig::validate_fields`], giving the URL it parsed in the
    /// form the catalog keeps ([`crate::core::catalog::Catalog::insert_parsed`]),
    /// so a start with 100,000 instances parses each URL once.
    pub fn validate_fields_parsed(&self) -> Result<BaseUrl, FieldError> {
        let url = parse_http_url("url", &self.url)?;
        if self.timeout < Duration::from_millis(10) || self.timeout > Duration::from_secs(300) {
            return Err(FieldError::new(
                "timeout",
                duration_str::format(self.timeout),
                "must be between 10ms and 5m",
            ));
        }
        if self.max_response_bytes == 0 || self.max_response_bytes > 1 << 30 {
            return Err(FieldError::new(
                "max_response_bytes",
                self.max_response_bytes,
                "must be between 1 and 1073741824",
            ));
        }
        if let Some(fp) = &self.tls_fingerprint
            && parse_fingerprint(fp).is_none()
        {
            return Err(FieldError::new(
                "tls_fingerprint",
                fp,
                "must be 64 hex digits (SHA-256), colons allowed",
            ));
        }
        if let Some((field, secret)) = self.auth.secret()
            && secret.expose() == HIDDEN
        {
            return Err(FieldError::new(field, HIDDEN, HIDDEN_WITHOUT_VALUE));
        }
        match &self.auth {
            Auth::None {} => {}
            Auth::Bearer { token } if token.is_empty() || !header_safe(token.expose()) => {
                return Err(FieldError::new(
                    "auth.token",
                    HIDDEN,
                    "must be non-empty printable text",
                ));
            }
            Auth::Header { name, value } => {
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_".contains(c)) {
                    return Err(FieldError::new("auth.name", name, "must be a valid HTTP header name"));
                }
                if !header_safe(value.expose()) {
                    return Err(FieldError::new("auth.value", HIDDEN, "must be printable text"));
                }
            }
            Auth::Basic { username, password } => {
                if username.is_empty() || username.contains(':') || !header_safe(username) {
                    return Err(FieldError::new(
                        "auth.username",
                        username,
                        "must be non-empty and contain no ':'",
                    ));
                }
                if !header_safe(password.expose()) {
                    return Err(FieldError::new("auth.password", HIDDEN, "must be printable text"));
                }
            }
            Auth::PveToken { user, token_id, secret } => {
                if !user.contains('@') || user.contains('!') || !header_safe(user) {
                    return Err(FieldError::new("auth.user", user, "must be USER@REALM"));
                }
                if token_id.is_empty() || token_id.contains('=') || !header_safe(token_id) {
                    return Err(FieldError::new(
                        "auth.token_id",
                        token_id,
                        "must be a non-empty token id",
                    ));
                }
                if secret.is_empty() || !header_safe(secret.expose()) {
                    return Err(FieldError::new(
                        "auth.secret",
                        HIDDEN,
                        "must be non-empty printable text",
                    ));
                }
            }
            Auth::Bearer { .. } => {}
        }
        for (k, v) in &self.shape {
            if !valid_name(k) {
                return Err(FieldError::new(format!("shape.{k}"), k, NAME_RULE));
            }
            if *v > 1_000_000 {
                return Err(FieldError::new(format!("shape.{k}"), v, "must be at most 1000000"));
            }
        }
        for (k, v) in &self.labels {
            if !valid_name(k) {
                return Err(FieldError::new(format!("labels.{k}"), k, NAME_RULE));
            }
            if v.len() > 256 {
                return Err(FieldError::new(
                    format!("labels.{k}"),
                    v,
                    "must be at most 256 characters",
                ));
            }
        }
        Ok(BaseUrl::checked(url))
    }
}

/// Why `(hidden)` is refused where no stored value stands behind it: it
/// is what the API shows for a secret, never a secret itself.
pub const HIDDEN_WITHOUT_VALUE: &str =
    "(hidden) stands for a stored secret, and there is none to keep here; give the value itself";

impl Auth {
    /// The secret of this kind of authentication and the field naming it.
    pub fn secret(&self) -> Option<(&'static str, &Secret)> {
        match self {
            Auth::None {} => None,
            Auth::Bearer { token } => Some(("auth.token", token)),
            Auth::Header { value, .. } => Some(("auth.value", value)),
            Auth::Basic { password, .. } => Some(("auth.password", password)),
            Auth::PveToken { secret, .. } => Some(("auth.secret", secret)),
        }
    }

    /// The secret, mutably (see [`Auth::secret`]).
    pub fn secret_mut(&mut self) -> Option<&mut Secret> {
        match self {
            Auth::None {} => None,
            Auth::Bearer { token } => Some(token),
            Auth::Header { value, .. } => Some(value),
            Auth::Basic { password, .. } => Some(password),
            Auth::PveToken { secret, .. } => Some(secret),
        }
    }
}

/// An `http://` or `https://` URL with a host, and no `(hidden)` password
/// (one an edit did not replace by the stored password).
pub fn check_http_url(field: &str, url: &str) -> Result<(), FieldError> {
    parse_http_url(field, url).map(|_| ())
}

/// [`check_http_url`], giving the parsed URL.
fn parse_http_url(field: &str, url: &str) -> Result<url::Url, FieldError> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.password(), Some(p) if p == HIDDEN || p.eq_ignore_ascii_case("%28hidden%29")) => {
            Err(FieldError::new(field, url, HIDDEN_WITHOUT_VALUE))
        }
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(u),
        Ok(_) => Err(FieldError::new(
            field,
            url,
            "must be an http:// or https:// URL with a host",
        )),
        Err(e) => Err(FieldError::new(field, url, format!("not a valid URL: {e}"))),
    }
}

pub fn header_safe(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Parse a SHA-256 fingerprint written as hex, with or without colons.
pub fn parse_fingerprint(s: &str) -> Option<[u8; 32]> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(hex).ok()?;
    bytes.try_into().ok()
}

/// `[[budgets]]`: a request budget shared by a set of instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub name: String,
    pub requests_per_second: f64,
    #[serde(default = "default_shared_fraction")]
    pub shared_fraction: f64,
    #[serde(default = "default_burst")]
    pub burst: u32,
}

impl BudgetConfig {
    pub fn validate(&self, field: &str) -> Result<(), FieldError> {
        if !valid_name(&self.name) {
            return Err(FieldError::new(format!("{field}.name"), &self.name, NAME_RULE));
        }
        if !(self.requests_per_second.is_finite() && self.requests_per_second > 0.0 && self.requests_per_second <= 1e6)
        {
            return Err(FieldError::new(
                format!("{field}.requests_per_second"),
                self.requests_per_second,
                "must be a number above 0 and at most 1000000",
            ));
        }
        if !(self.shared_fraction.is_finite() && self.shared_fraction > 0.0 && self.shared_fraction <= 1.0) {
            return Err(FieldError::new(
                format!("{field}.shared_fraction"),
                self.shared_fraction,
                "must be above 0 and at most 1",
            ));
        }
        if !(1..=100).contains(&self.burst) {
            return Err(FieldError::new(
                format!("{field}.burst"),
                self.burst,
                "must be between 1 and 100",
            ));
        }
        Ok(())
    }

    /// The pool's configured budget: `requests_per_second × shared_fraction`.
    pub fn budget_rps(&self) -> f64 {
        self.requests_per_second * self.shared_fraction
    }

    /// Pollster's share of the API's burst: `burst × shared_fraction`,
    /// rounded down, at least 1. The pool's token bucket holds this much
    /// (and starts with it), so a cold start never spends the burst the
    /// other consumers of the API are owed.
    pub fn share_burst(&self) -> u32 {
        // The small margin keeps 10 × 0.8 (8.000…) at 8, not 7.
        let share = (f64::from(self.burst) * self.shared_fraction + 1e-9).floor();
        if share >= 1.0 {
            share.min(f64::from(self.burst)) as u32
        } else {
            1
        }
    }
}

fn default_shared_fraction() -> f64 {
    1.0
}
fn default_burst() -> u32 {
    10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_url_is_the_one_the_catalog_would_parse() {
        for url in [
            "https://pve.example:8006/api2/json",
            "http://127.0.0.1:1/i/inst-0001?x=1",
            "http://user:pw@host/",
            "https://[::1]:8443/",
        ] {
            let inst = InstanceConfig::new("a", "http", url);
            let checked = inst.validate_fields_parsed().expect(url);
            assert_eq!(Some(checked), BaseUrl::parse(url).ok(), "{url}");
        }
        for url in ["ftp://host/", "http://user:(hidden)@host/", "not a url", "file:///etc"] {
            let inst = InstanceConfig::new("a", "http", url);
            assert!(inst.validate_fields_parsed().is_err(), "{url}");
            assert!(inst.validate_fields().is_err(), "{url}");
        }
    }

    fn pool(burst: u32, shared_fraction: f64) -> BudgetConfig {
        BudgetConfig {
            name: "org".into(),
            requests_per_second: 10.0,
            shared_fraction,
            burst,
        }
    }

    #[test]
    fn the_share_of_the_burst_is_burst_times_shared_fraction_rounded_down_at_least_one() {
        assert_eq!(pool(10, 0.8).share_burst(), 8);
        assert_eq!(pool(10, 1.0).share_burst(), 10);
        assert_eq!(pool(10, 0.7).share_burst(), 7);
        assert_eq!(pool(3, 0.5).share_burst(), 1);
        assert_eq!(pool(1, 0.01).share_burst(), 1);
        assert_eq!(pool(100, 0.29).share_burst(), 29);
    }
}

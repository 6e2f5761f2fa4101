//! The checks a loaded configuration must pass beyond each value's own:
//! the server section, names unique, and every pin, instance type and
//! budget naming something that exists.

use super::error::{ConfigError, ENVIRONMENT};
use super::server::{ServerConfig, parse_net};
use crate::model::{BudgetConfig, FieldError, InstanceConfig, TypeDef, duration_str};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// `[server]`, or the environment's values for it: a data directory, proxies
/// that parse, connection caps in range.
pub(super) fn validate_server(file: &str, s: &ServerConfig) -> Result<(), ConfigError> {
    if s.data_dir.as_os_str().is_empty() {
        let key = if file == ENVIRONMENT {
            "POLLSTER_DATA_DIR"
        } else {
            "server.data_dir"
        };
        return Err(ConfigError::new(file, key, "\"\"", "must not be empty"));
    }
    for (i, p) in s.trusted_proxies.iter().enumerate() {
        if let Err(m) = parse_net(p) {
            let key = if file == ENVIRONMENT {
                "POLLSTER_TRUSTED_PROXIES".to_string()
            } else {
                format!("server.trusted_proxies[{i}]")
            };
            return Err(ConfigError::new(file, key, format!("{p:?}"), m));
        }
    }
    if !(1..=65_536).contains(&s.max_connections) {
        let key = if file == ENVIRONMENT {
            "POLLSTER_MAX_CONNECTIONS"
        } else {
            "server.max_connections"
        };
        return Err(ConfigError::new(
            file,
            key,
            s.max_connections.to_string(),
            "must be between 1 and 65536",
        ));
    }
    if !(1..=65_536).contains(&s.max_connections_per_client) {
        return Err(ConfigError::new(
            file,
            server_key(file, "max_connections_per_client"),
            s.max_connections_per_client.to_string(),
            "must be between 1 and 65536",
        ));
    }
    let pairs = [
        (&s.tls_cert, &s.tls_key, "tls_cert", "tls_key"),
        (
            &s.metrics_tls_cert,
            &s.metrics_tls_key,
            "metrics_tls_cert",
            "metrics_tls_key",
        ),
    ];
    for (cert, key, cert_key, key_key) in pairs {
        let (set, missing) = match (cert, key) {
            (Some(c), None) => ((cert_key, c), key_key),
            (None, Some(k)) => ((key_key, k), cert_key),
            _ => continue,
        };
        return Err(ConfigError::new(
            file,
            server_key(file, set.0),
            format!("{:?}", set.1.display().to_string()),
            format!(
                "needs {} too (a certificate and its key, or neither)",
                server_key(file, missing)
            ),
        ));
    }
    Ok(())
}

/// `server.tls_cert` in a file, `POLLSTER_TLS_CERT` in the environment.
fn server_key(file: &str, key: &str) -> String {
    if file == ENVIRONMENT {
        format!("POLLSTER_{}", key.to_ascii_uppercase())
    } else {
        format!("server.{key}")
    }
}

/// Each listener's certificate and key can be read and belong together.
/// An error names the key (or the variable, when the environment set it)
/// and the file, with the reason.
pub(super) fn validate_tls_files(
    file: &str,
    env: &BTreeMap<String, String>,
    s: &ServerConfig,
) -> Result<(), ConfigError> {
    let own_metrics_pair = s.metrics_tls_cert.is_some();
    let listeners = [
        (s.api_tls(), "tls_cert", "tls_key"),
        (
            if own_metrics_pair { s.metrics_tls() } else { None },
            "metrics_tls_cert",
            "metrics_tls_key",
        ),
    ];
    for (files, cert_key, key_key) in listeners {
        let Some(files) = files else { continue };
        if let Err(e) = files.load() {
            let key = match e.role {
                crate::tls::Role::Cert => cert_key,
                crate::tls::Role::Key => key_key,
            };
            let var = server_key(ENVIRONMENT, key);
            let source = if super::env::value(env, &var).is_some() {
                ENVIRONMENT
            } else {
                file
            };
            return Err(ConfigError::new(
                source,
                server_key(source, key),
                format!("{:?}", e.file.display().to_string()),
                e.reason,
            ));
        }
    }
    Ok(())
}

/// Each pool by the rules an API edit of it must pass too
/// ([`BudgetConfig::validate`]), so a pool the file sets can be edited later;
/// names unique.
pub(super) fn validate_budgets(file: &str, budgets: &[BudgetConfig]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, b) in budgets.iter().enumerate() {
        b.validate(&format!("budgets[{i}]"))
            .map_err(|e| ConfigError::from_field(file, "", e))?;
        if !seen.insert(b.name.as_str()) {
            return Err(ConfigError::new(
                file,
                format!("budgets[{i}].name"),
                format!("{:?}", b.name),
                "duplicate budget name",
            ));
        }
    }
    Ok(())
}

pub(super) fn validate_types(file: &str, types: &[TypeDef]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, t) in types.iter().enumerate() {
        let field = format!("types[{i}]");
        t.validate(&field).map_err(|e| ConfigError::from_field(file, "", e))?;
        let name = format!("{:?}", t.name);
        if t.name == "http" {
            return Err(ConfigError::new(
                file,
                format!("{field}.name"),
                name,
                "\"http\" is the built-in type and cannot be redefined",
            ));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(ConfigError::new(
                file,
                format!("{field}.name"),
                name,
                "duplicate type name",
            ));
        }
    }
    crate::model::check_value_families(types).map_err(|e| ConfigError::from_field(file, "", e))?;
    Ok(())
}

/// `http`, then the presets, then the file's types (which replace presets of
/// the same name).
pub(super) fn known_types(file_types: &[TypeDef], presets: &[TypeDef]) -> Vec<TypeDef> {
    let builtin = TypeDef::builtin_http();
    let by_name: BTreeMap<&str, &TypeDef> = std::iter::once(&builtin)
        .chain(presets)
        .chain(file_types)
        .map(|t| (t.name.as_str(), t))
        .collect();
    by_name.into_values().cloned().collect()
}

fn type_names(types: &[TypeDef]) -> String {
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    names.join(", ")
}

/// Every pin names an existing `type/group` among `types` (include the
/// built-in `http`; of two types with one name the last counts). The error's field is
/// `scheduler.group_interval_overrides.<key>`, as in
/// [`MonitoringSettings::validate`]; the settings API can use this too.
pub fn validate_pins(overrides: &BTreeMap<String, Duration>, types: &[TypeDef]) -> Result<(), FieldError> {
    for (key, interval) in overrides {
        let field = format!("scheduler.group_interval_overrides.{key}");
        let value = duration_str::format(*interval);
        let Some((type_name, group)) = key.split_once('/') else {
            return Err(FieldError::new(field, value, "key must be \"type/group\""));
        };
        let Some(t) = types.iter().rev().find(|t| t.name == type_name) else {
            return Err(FieldError::new(
                field,
                value,
                format!("no type {type_name:?} (known: {})", type_names(types)),
            ));
        };
        if !t.groups.iter().any(|g| g.name == group) {
            let known: Vec<&str> = t.groups.iter().map(|g| g.name.as_str()).collect();
            return Err(FieldError::new(
                field,
                value,
                format!(
                    "type {type_name:?} has no group {group:?} (its groups: {})",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn validate_instances(
    file: &str,
    instances: &[InstanceConfig],
    types: &[TypeDef],
    budgets: &[BudgetConfig],
) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, inst) in instances.iter().enumerate() {
        let prefix = format!("instances[{i}].");
        inst.validate_fields()
            .map_err(|e| ConfigError::from_field(file, &prefix, e))?;
        if !seen.insert(inst.name.as_str()) {
            return Err(ConfigError::new(
                file,
                format!("{prefix}name"),
                format!("{:?}", inst.name),
                "duplicate instance name",
            ));
        }
        if !types.iter().any(|t| t.name == inst.type_name) {
            return Err(ConfigError::new(
                file,
                format!("{prefix}type"),
                format!("{:?}", inst.type_name),
                format!("unknown type (known: {})", type_names(types)),
            ));
        }
        if let Some(b) = &inst.budget
            && !budgets.iter().any(|x| &x.name == b)
        {
            let known: Vec<&str> = budgets.iter().map(|x| x.name.as_str()).collect();
            let hint = if known.is_empty() {
                "no [[budgets]] are defined".to_string()
            } else {
                format!("known: {}", known.join(", "))
            };
            return Err(ConfigError::new(
                file,
                format!("{prefix}budget"),
                format!("{b:?}"),
                format!("unknown budget ({hint})"),
            ));
        }
    }
    Ok(())
}

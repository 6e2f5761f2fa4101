//! Layered monitoring settings: built-in default < config file < saved from
//! the UI/API < environment. The saved layer is a partial document (only what
//! an operator changed), so a later edit of the config file still shows
//! through for every field nobody overrode in the UI.

use crate::config::EnvOverrides;
use crate::model::{FieldError, MonitoringSettings};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct SettingsLayers {
    pub file: MonitoringSettings,
    pub saved: Value,
    pub env: EnvOverrides,
}

/// Why a settings change was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingsError {
    /// A field an environment variable sets: (field, variable).
    Locked(String, String),
    Invalid(Vec<FieldError>),
}

/// RFC 7386 merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Dotted paths of every leaf in a JSON document (`adaptive.enabled`, …).
/// Maps such as `group_interval_overrides` count as one leaf.
fn leaves(v: &Value, prefix: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if prefix.matches('.').count() < 1 => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &p, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

impl SettingsLayers {
    pub fn locked(&self) -> BTreeMap<String, String> {
        self.env.locked()
    }

    fn resolve_with(&self, saved: &Value) -> Result<MonitoringSettings, Vec<FieldError>> {
        let mut doc =
            serde_json::to_value(&self.file).map_err(|e| vec![FieldError::new("settings", "", e.to_string())])?;
        if saved.is_object() {
            merge(&mut doc, saved);
        }
        let mut s = from_json(doc).map_err(|e| vec![e])?;
        self.env.apply(&mut s);
        s.validate()?;
        Ok(s)
    }

    /// The settings in force.
    pub fn effective(&self) -> Result<MonitoringSettings, Vec<FieldError>> {
        self.resolve_with(&self.saved)
    }

    /// Validate a partial document against everything else; on success return
    /// the new saved layer and the settings it gives. Nothing is changed here.
    pub fn propose(&self, patch: &Value) -> Result<(Value, MonitoringSettings), SettingsError> {
        if !patch.is_object() {
            return Err(SettingsError::Invalid(vec![FieldError::new(
                "",
                patch,
                "expected a JSON object",
            )]));
        }
        let locked = self.locked();
        let mut touched = Vec::new();
        leaves(patch, "", &mut touched);
        for field in &touched {
            if let Some(var) = locked.get(field) {
                return Err(SettingsError::Locked(field.clone(), var.clone()));
            }
        }
        // Check the shape of the patch on its own first, so an error names
        // the field the operator sent.
        let mut probe = serde_json::to_value(MonitoringSettings::default()).unwrap_or(Value::Null);
        merge(&mut probe, patch);
        if let Err(e) = from_json(probe) {
            return Err(SettingsError::Invalid(vec![e]));
        }
        let mut saved = self.saved.clone();
        if saved.is_null() {
            saved = Value::Object(Default::default());
        }
        merge(&mut saved, patch);
        let s = self.resolve_with(&saved).map_err(SettingsError::Invalid)?;
        Ok((saved, s))
    }
}

/// Deserialize settings, naming the field of the first error.
fn from_json(doc: Value) -> Result<MonitoringSettings, FieldError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let field = e.path().to_string();
        FieldError::new(
            if field == "." { "settings".to_string() } else { field },
            "",
            e.inner().to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn layers() -> SettingsLayers {
        SettingsLayers {
            file: MonitoringSettings::default(),
            saved: Value::Null,
            env: EnvOverrides::default(),
        }
    }

    #[test]
    fn a_partial_patch_changes_only_what_it_names() {
        let l = layers();
        let (saved, s) = l.propose(&json!({"adaptive": {"enabled": false}})).expect("valid");
        assert!(!s.adaptive.enabled);
        assert_eq!(s.scheduler, MonitoringSettings::default().scheduler);
        assert_eq!(saved, json!({"adaptive": {"enabled": false}}));
    }

    #[test]
    fn invalid_combinations_are_refused_naming_the_field() {
        let l = layers();
        match l.propose(&json!({"adaptive": {"min_interval": "1m"}})) {
            Err(SettingsError::Invalid(e)) => assert_eq!(e[0].field, "adaptive.min_interval"),
            other => panic!("{other:?}"),
        }
        match l.propose(&json!({"scheduler": {"wokers": 3}})) {
            Err(SettingsError::Invalid(e)) => assert!(
                e[0].field.starts_with("scheduler") && e[0].message.contains("wokers"),
                "{e:?}"
            ),
            other => panic!("{other:?}"),
        }
        match l.propose(&json!({"failure": {"backoff_initial": "soon"}})) {
            Err(SettingsError::Invalid(e)) => assert!(
                e[0].field == "failure.backoff_initial" && e[0].message.contains("soon"),
                "{e:?}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn merge_patch_removes_nulls() {
        let mut t = json!({"a": {"b": 1, "c": 2}});
        merge(&mut t, &json!({"a": {"b": null, "d": 3}}));
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}}));
    }
}

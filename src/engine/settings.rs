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

/// RFC 7386 merge patch. An object patched onto a non-object starts from an
/// empty object, so nulls in it never reach the result.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
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
        if let Err(e) = known_keys(patch) {
            return Err(SettingsError::Invalid(vec![e]));
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

/// Every section and field a patch names must exist, null ones too: the
/// merge drops nulls before the document is read, so a misspelt field set to
/// null would otherwise be accepted and do nothing. A section is an object
/// (or null): serde would read an array as the section's fields in order.
fn known_keys(patch: &Value) -> Result<(), FieldError> {
    let known = serde_json::to_value(MonitoringSettings::default()).unwrap_or(Value::Null);
    let Some(sections) = patch.as_object() else {
        return Ok(());
    };
    for (section, fields) in sections {
        let Some(known_fields) = known.get(section).and_then(Value::as_object) else {
            return Err(FieldError::new(
                section,
                "",
                "unknown section: expected adaptive, scheduler or failure",
            ));
        };
        if !(fields.is_object() || fields.is_null()) {
            return Err(FieldError::new(
                section,
                fields,
                "must be an object (or null to drop the saved section)",
            ));
        }
        for field in fields.as_object().into_iter().flat_map(|f| f.keys()) {
            if !known_fields.contains_key(field) {
                let expected: Vec<&str> = known_fields.keys().map(String::as_str).collect();
                return Err(FieldError::new(
                    format!("{section}.{field}"),
                    "",
                    format!("unknown field {field:?}; expected one of {}", expected.join(", ")),
                ));
            }
        }
    }
    Ok(())
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
    fn unknown_sections_and_fields_are_refused_even_when_null() {
        let l = layers();
        for (patch, field) in [
            (json!({"": null}), ""),
            (json!({"adaptiv": {"enabled": true}}), "adaptiv"),
            (json!({"scheduler": {"wokers": null}}), "scheduler.wokers"),
            (json!({"failure": []}), "failure"),
            (json!({"adaptive": [false, "1s"]}), "adaptive"),
            (json!({"scheduler": 3}), "scheduler"),
        ] {
            match l.propose(&patch) {
                Err(SettingsError::Invalid(e)) => assert_eq!(e[0].field, field, "{patch}: {e:?}"),
                other => panic!("{patch}: {other:?}"),
            }
        }
        // Null known fields and sections drop the saved value: accepted.
        let (saved, _) = l
            .propose(&json!({"scheduler": {"workers": null}, "failure": null}))
            .expect("valid");
        assert_eq!(saved, json!({"scheduler": {}}));
    }

    #[test]
    fn a_null_field_brings_back_the_config_file_value() {
        let mut l = layers();
        l.file.scheduler.workers = 8;
        // Nothing saved yet: the null must not hide the file's value.
        let (saved, s) = l.propose(&json!({"scheduler": {"workers": null}})).expect("valid");
        assert_eq!(s.scheduler.workers, 8, "{saved}");
        l.saved = json!({"scheduler": {"workers": 4}});
        assert_eq!(l.effective().expect("valid").scheduler.workers, 4);
        let (saved, s) = l.propose(&json!({"scheduler": {"workers": null}})).expect("valid");
        assert_eq!(s.scheduler.workers, 8);
        assert_eq!(saved, json!({"scheduler": {}}));
    }

    #[test]
    fn merge_patch_removes_nulls() {
        let mut t = json!({"a": {"b": 1, "c": 2}});
        merge(&mut t, &json!({"a": {"b": null, "d": 3}}));
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}}));
        // RFC 7386: an object patched onto a scalar or a missing member.
        let mut t = json!({"a": 1});
        merge(&mut t, &json!({"a": {"x": null, "y": 2}, "b": {"z": null}}));
        assert_eq!(t, json!({"a": {"y": 2}, "b": {}}));
    }
}

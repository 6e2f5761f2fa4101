//! The monitoring settings changed through the API or the pages: validated
//! against everything else, checked against the over-budget gate, stored
//! with their change event, and put in force at once.

use super::Context;
use super::error::{Conflict, ServiceError};
use super::with_store;
use crate::engine::settings::SettingsError;
use crate::model::FieldError;
use crate::sink::event::{Event, SettingsSection};
use crate::store::OutboxEvent;
use serde_json::Value;

/// The stored key of the monitoring settings saved from the UI or API.
pub const SETTINGS_KEY: &str = "monitoring";

/// Validate a partial settings document against everything else, save it,
/// and apply it at once. Invalid: [`ServiceError::Invalid`] with every
/// violation.
pub async fn save(cx: &Context, mut patch: Value, actor: &str) -> Result<(), ServiceError> {
    super::refuse_in_cluster(cx, "monitoring settings")?;
    if let Some(o) = patch.as_object_mut() {
        // Echoing back a GET document is allowed: `locked` is informational.
        match o.remove("locked") {
            None | Some(Value::Object(_)) => {}
            Some(other) => {
                return Err(ServiceError::invalid(FieldError::new(
                    "locked",
                    &other,
                    "must be an object like the one GET returns (it is ignored)",
                )));
            }
        }
    }
    let _edit = cx.engine.edit_settings().await;
    let (saved, effective) = match cx.engine.propose_settings(&patch) {
        Ok(p) => p,
        Err(SettingsError::Locked(field, var)) => {
            return Err(ServiceError::conflict(
                Conflict::Locked,
                format!("{field} is set by the environment variable {var} and cannot be changed here"),
                Some(field),
            ));
        }
        Err(SettingsError::Invalid(errs)) => return Err(ServiceError::Invalid(errs)),
    };
    cx.engine.check_gate(&cx.engine.catalog(), &effective)?;
    let doc = saved.clone();
    let event = Event::settings(cx.engine.now(), actor, SettingsSection::Monitoring, patch.clone());
    let events: Vec<OutboxEvent> = cx.sink.stage(&event).into_iter().collect();
    with_store(cx, move |s| s.put_settings_with_events(SETTINGS_KEY, &doc, &events)).await?;
    cx.engine.apply_saved_settings(saved, effective);
    tracing::info!(actor, change = %patch, "monitoring settings changed");
    Ok(())
}

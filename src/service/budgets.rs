//! Budget pools changed through the API or the pages.

use super::Context;
use super::error::{ServiceError, decode};
use super::with_store;
use crate::core::catalog::Catalog;
use crate::model::{BudgetConfig, FieldError};
use crate::sink::event::{Event, SettingsSection};
use crate::store::OutboxEvent;
use serde_json::Value;

/// The stored key of the budget pools changed through the UI or API, by
/// name.
pub const BUDGETS_KEY: &str = "budgets";

/// Lay the pools saved from the UI or API (`saved`, the stored document)
/// over the file's in `catalog`: a saved pool replaces the file's of the
/// same name, or joins them. One that is no longer valid is skipped, with a
/// warning.
pub fn overlay_saved(catalog: &mut Catalog, saved: Option<Value>) {
    let Some(Value::Object(saved)) = saved else {
        return;
    };
    for (name, v) in saved {
        let b = match serde_json::from_value::<BudgetConfig>(v) {
            Ok(b) if b.name == name && b.validate("").is_ok() => b,
            _ => {
                tracing::warn!(pool = %name, "ignoring a saved budget pool that is no longer valid");
                continue;
            }
        };
        match catalog.budgets.iter_mut().find(|x| x.name == name) {
            Some(x) => *x = b,
            None => catalog.budgets.push(b),
        }
    }
}

/// Change (or create) the budget pool `name` from a partial document
/// (`requests_per_second`, `shared_fraction`, `burst`): validated, checked
/// against the over-budget gate, stored, then applied at once (AIMD and the
/// plan follow the new budget).
pub async fn save(cx: &Context, name: &str, patch: Value, actor: &str) -> Result<BudgetConfig, ServiceError> {
    super::refuse_in_cluster(cx, "budget pools")?;
    let Some(obj) = patch.as_object() else {
        return Err(ServiceError::invalid(FieldError::new(
            "",
            &patch,
            "must be a JSON object",
        )));
    };
    let _edit = cx.engine.edit_catalog().await;
    let cat = cx.engine.catalog();
    let mut doc = match cat.budgets.iter().find(|b| b.name == name) {
        Some(b) => serde_json::to_value(b).map_err(ServiceError::internal)?,
        None => serde_json::json!({ "name": name }),
    };
    for (k, v) in obj {
        if k == "name" && v.as_str() != Some(name) {
            return Err(ServiceError::invalid(FieldError::new(
                "name",
                v,
                "must equal the pool name in the path (pools cannot be renamed)",
            )));
        }
        doc[k.as_str()] = v.clone();
    }
    let budget: BudgetConfig = decode(&serde_json::to_vec(&doc).unwrap_or_default())?;
    budget.validate("").map_err(|mut e| {
        e.field = e.field.trim_start_matches('.').to_string();
        ServiceError::invalid(e)
    })?;
    let mut next = (*cat).clone();
    match next.budgets.iter_mut().find(|b| b.name == name) {
        Some(b) => *b = budget.clone(),
        None => next.budgets.push(budget.clone()),
    }
    drop(cat);
    cx.engine.check_gate(&next, &cx.engine.monitoring())?;
    let saved = budget.clone();
    let change = serde_json::to_value(&budget).unwrap_or(Value::Null);
    let event = Event::settings(cx.engine.now(), actor, SettingsSection::Budget, change);
    let events: Vec<OutboxEvent> = cx.sink.stage(&event).into_iter().collect();
    with_store(cx, move |store| {
        let mut all = store
            .get_settings(BUDGETS_KEY)?
            .unwrap_or_else(|| serde_json::json!({}));
        if !all.is_object() {
            all = serde_json::json!({});
        }
        all[saved.name.as_str()] = serde_json::to_value(&saved).unwrap_or(Value::Null);
        store.put_settings_with_events(BUDGETS_KEY, &all, &events)
    })
    .await?;
    cx.engine.set_catalog(next);
    tracing::info!(pool = %name, actor, budget_rps = budget.budget_rps(), burst = budget.burst, "budget pool changed");
    Ok(budget)
}

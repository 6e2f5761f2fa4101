//! The event sink's settings changed through the API or the pages, and
//! its test event.

use super::Context;
use super::error::{Conflict, ServiceError, decode};
use super::{redact, with_store};
use crate::config::SinkConfig;
use crate::model::FieldError;
use crate::sink::event::{Event, SettingsSection};
use crate::store::SINK_SETTINGS;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// A sink's settings as they are shown (to the API, the pages and the
/// settings event): the `[sink]` fields, with header values and any
/// password in the URL hidden.
#[derive(Debug, Clone, Serialize)]
pub struct SinkShown {
    pub url: String,
    /// Header names; every value shows as `(hidden)`.
    pub headers: BTreeMap<String, &'static str>,
    pub batch_size: usize,
    pub buffering: String,
    pub retry_limit: String,
    pub queue_limit: usize,
    pub gzip: bool,
}

impl SinkShown {
    pub fn of(c: &SinkConfig) -> Self {
        SinkShown {
            url: redact::mask_url(&c.url),
            headers: c.headers.keys().map(|k| (k.clone(), crate::model::HIDDEN)).collect(),
            batch_size: c.batch_size,
            buffering: crate::model::duration_str::format(c.buffering),
            retry_limit: crate::model::duration_str::format(c.retry_limit),
            queue_limit: c.queue_limit,
            gzip: c.gzip,
        }
    }
}

/// [`SinkShown`] as JSON, for the settings event.
pub fn shown(c: &SinkConfig) -> Value {
    serde_json::to_value(SinkShown::of(c)).unwrap_or(Value::Null)
}

/// The sink in force: the settings saved from the UI (`saved`, a document,
/// or null for "off") in place of the file's, then the environment over
/// them. Saved settings that no longer read or validate are ignored, with a
/// warning, for the file's.
pub fn layered(config: &crate::config::Config, saved: Option<Value>) -> Option<SinkConfig> {
    match saved {
        None => config.sink.clone(),
        Some(doc) => match serde_json::from_value::<Option<SinkConfig>>(doc) {
            Ok(saved) => {
                let layered = config.env.apply_sink(saved);
                match layered.as_ref().map(|c| c.validate()) {
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "ignoring the sink settings saved from the UI");
                        config.sink.clone()
                    }
                    _ => layered,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "ignoring unreadable sink settings saved from the UI");
                config.sink.clone()
            }
        },
    }
}

fn locked(field: impl Into<String>, message: String) -> ServiceError {
    ServiceError::conflict(Conflict::Locked, message, Some(field.into()))
}

/// Change the event sink: `null` (or `{"enabled": false}`) turns it off;
/// otherwise a partial `[sink]` document over the settings in force. A
/// header sent as `(hidden)` keeps its stored value while the URL keeps its
/// scheme, host and port (a new origin needs it given again). Validated as
/// a whole (naming the field), refused for a field an environment variable
/// sets ([`Conflict::Locked`]), stored, and applied at once. Returns the
/// sink in force (`None`: off).
pub async fn save(cx: &Context, patch: Value, actor: &str) -> Result<Option<SinkConfig>, ServiceError> {
    let _edit = cx.engine.edit_settings().await;
    let locked_fields = cx.engine.locked_sink();
    let current = cx.engine.sink_config();
    let enabled = match patch.get("enabled") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            return Err(ServiceError::invalid(FieldError::new(
                "enabled",
                other,
                "must be true or false",
            )));
        }
    };
    if enabled == Some(false)
        && let Some(other) = patch.as_object().and_then(|o| o.keys().find(|k| *k != "enabled"))
    {
        return Err(ServiceError::invalid(FieldError::new(
            other,
            "",
            "cannot be set while turning the sink off with enabled: false",
        )));
    }
    let off = patch.is_null() || enabled == Some(false);
    let next: Option<SinkConfig> = if off {
        if let Some(var) = locked_fields.get("sink.url") {
            return Err(locked(
                "url",
                format!("the sink is turned on by the environment variable {var} and cannot be turned off here"),
            ));
        }
        None
    } else {
        let Some(obj) = patch.as_object() else {
            return Err(ServiceError::invalid(FieldError::new(
                "",
                &patch,
                "must be a JSON object or null",
            )));
        };
        let mut doc = match &current {
            Some(c) => serde_json::to_value(c).map_err(ServiceError::internal)?,
            None => serde_json::json!({}),
        };
        for (k, v) in obj {
            if k == "enabled" {
                continue;
            }
            let field = format!("sink.{k}");
            if let Some(var) = locked_fields.get(&field)
                && doc.get(k) != Some(v)
            {
                return Err(locked(
                    k.clone(),
                    format!("{field} is set by the environment variable {var} and cannot be changed here"),
                ));
            }
            if k == "headers"
                && let Some(new) = v.as_object()
            {
                let old = current.as_ref().map(|c| c.headers.clone()).unwrap_or_default();
                let mut merged = serde_json::Map::new();
                for (name, value) in new {
                    let keep = value.as_str() == Some(crate::model::HIDDEN);
                    match (keep, old.get(name)) {
                        (true, Some(stored)) => merged.insert(name.clone(), Value::String(stored.clone())),
                        // Never saved as the literal text.
                        (true, None) => {
                            return Err(ServiceError::invalid(FieldError::new(
                                format!("headers.{name}"),
                                crate::model::HIDDEN,
                                crate::model::HIDDEN_WITHOUT_VALUE,
                            )));
                        }
                        _ => merged.insert(name.clone(), value.clone()),
                    };
                }
                doc["headers"] = Value::Object(merged);
                continue;
            }
            doc[k.as_str()] = v.clone();
        }
        // Stored secrets go only where they were given for: a new origin
        // drops the stored header values and URL password unless they are
        // given again.
        if let Some(old) = &current {
            let new_url = doc.get("url").and_then(Value::as_str).unwrap_or_default().to_string();
            let restored = redact::restore_url_password(&new_url, &old.url, "url")?;
            doc["url"] = Value::String(restored.clone());
            if !redact::same_origin(&restored, &old.url)
                && let Some(headers) = doc.get("headers").and_then(Value::as_object)
            {
                let given = patch
                    .get("headers")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                for (name, value) in headers {
                    let stored = old
                        .headers
                        .get(name)
                        .is_some_and(|s| value.as_str() == Some(s.as_str()));
                    let sent_anew = given
                        .get(name)
                        .and_then(Value::as_str)
                        .is_some_and(|g| g != crate::model::HIDDEN);
                    if stored && !sent_anew {
                        return Err(ServiceError::invalid(FieldError::new(
                            format!("headers.{name}"),
                            crate::model::HIDDEN,
                            "the sink URL now points to another host, so the stored header value is not sent there; \
                             give it again (or remove the header)",
                        )));
                    }
                }
            }
        }
        let c: SinkConfig = decode(&serde_json::to_vec(&doc).unwrap_or_default())?;
        c.validate()?;
        Some(c)
    };
    let saved = serde_json::to_value(&next).map_err(ServiceError::internal)?;
    let event = Event::settings(
        cx.engine.now(),
        actor,
        SettingsSection::Sink,
        next.as_ref().map(shown).unwrap_or(Value::Null),
    );
    // Always to the audit trail. To the sink by the new settings, not the
    // old: a sink turned on records it; one turned off has no receiver to
    // tell.
    let events = vec![cx.sink.stage_audited(&event, next.is_some())];
    with_store(cx, move |s| s.put_settings_with_events(SINK_SETTINGS, &saved, &events)).await?;
    cx.engine.apply_sink_config(next.clone());
    tracing::info!(actor, enabled = next.is_some(), "event sink settings changed");
    Ok(next)
}

/// Ship one test event now, outside the queue. `Ok(Err(why))`: the test
/// ran and the destination did not take the event.
pub async fn send_test(cx: &Context, actor: &str) -> Result<Result<(), String>, ServiceError> {
    match cx.sink.send_test(actor).await {
        Ok(()) => Ok(Ok(())),
        Err(e @ crate::sink::SendError::Disabled) => {
            Err(ServiceError::conflict(Conflict::SinkDisabled, e.to_string(), None))
        }
        Err(e) => Ok(Err(e.to_string())),
    }
}

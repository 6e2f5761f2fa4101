//! The latest data of an instance: what its groups' value rules extracted
//! from the last good poll, and the last good body of `keep_body` groups.
//! Served from the engine's cache, never by calling the target: many
//! readers, one upstream call per schedule.

use crate::model::{GroupDef, TaskKey, Timestamp};
use crate::values::Sample;
use crate::web::AppState;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, QueryParams};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

/// One sample: its metric, its rule labels and its number.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ValueView {
    pub metric: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl ValueView {
    pub fn of(s: &Sample) -> ValueView {
        ValueView {
            metric: s.metric.to_string(),
            labels: s.labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            value: s.value,
        }
    }
}

/// A kept body of a fan-out group, per item.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BodyItem {
    pub item: String,
    /// Where to read it, or `null` when it was too large to keep.
    #[schema(required = true)]
    pub url: Option<String>,
    /// Its size in bytes.
    pub bytes: u64,
    #[serde(rename = "polledAt")]
    pub polled_at: String,
}

/// One group's latest data.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GroupData {
    pub group: String,
    /// The last good poll that gave these values (RFC 3339), `null` before one.
    #[serde(rename = "polledAt")]
    #[schema(required = true)]
    pub polled_at: Option<String>,
    #[serde(rename = "ageSeconds")]
    #[schema(required = true)]
    pub age_seconds: Option<f64>,
    /// Whether `/values` serves them now: the task is neither
    /// dead-lettered nor discarded and they are younger than
    /// max(3 × interval, 2 min).
    pub fresh: bool,
    pub values: Vec<ValueView>,
    /// The URL of the last good body (`keep_body = true`), else `null`.
    #[schema(required = true)]
    pub body: Option<String>,
    /// Why there is no body although the group keeps one: `too_large`
    /// (over `max_body_bytes`) or `none_yet`.
    #[serde(rename = "bodyNote", skip_serializing_if = "Option::is_none")]
    pub body_note: Option<String>,
    /// A fan-out group's kept bodies, one per item.
    #[serde(rename = "bodyItems", skip_serializing_if = "Vec::is_empty")]
    pub body_items: Vec<BodyItem>,
}

/// `GET /api/instances/{name}/data`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InstanceData {
    pub instance: String,
    pub groups: Vec<GroupData>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct NamePath {
    /// The instance's name.
    pub name: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct GroupPath {
    /// The instance's name.
    pub name: String,
    /// One of its type's groups.
    pub group: String,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BodyQuery {
    /// The fan-out item (required for a group with `fan_out`).
    pub item: Option<String>,
}

fn body_url(instance: &str, group: &str, item: Option<&str>) -> String {
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let mut url = format!("/api/instances/{}/data/{}/body", enc(instance), enc(group));
    if let Some(i) = item {
        url.push_str("?item=");
        url.push_str(&enc(i));
    }
    url
}

/// The data of every group of `name` that has value rules or keeps its
/// body; `None` for an unknown instance.
pub fn instance_data(app: &AppState, name: &str, now: Timestamp) -> Option<InstanceData> {
    let cat = app.engine.catalog();
    let entry = cat.instances.get(name)?;
    let groups: Vec<GroupDef> = cat
        .types
        .get(&entry.config.type_name)
        .map(|t| t.groups.clone())
        .unwrap_or_default();
    let latest = &app.engine;
    let mut out = Vec::new();
    for g in groups.iter().filter(|g| !g.values.is_empty() || g.keep_body) {
        let key = TaskKey::new(name, &g.name);
        let values = latest.values_of(&key);
        let polled_at = values.as_ref().map(|v| v.values.polled_at);
        let (mut body, mut body_note, mut body_items) = (None, None, Vec::new());
        if g.keep_body {
            let bodies = latest.bodies_of(&key);
            if g.fan_out.is_some() {
                body_items = bodies
                    .iter()
                    .map(|(item, b)| BodyItem {
                        item: item.clone(),
                        url: b.kept.then(|| body_url(name, &g.name, Some(item))),
                        bytes: b.size,
                        polled_at: b.polled_at.to_rfc3339(),
                    })
                    .collect();
                if body_items.is_empty() {
                    body_note = Some("none_yet".into());
                }
            } else {
                match bodies.get("") {
                    Some(b) if b.kept => body = Some(body_url(name, &g.name, None)),
                    Some(_) => body_note = Some("too_large".into()),
                    None => body_note = Some("none_yet".into()),
                }
            }
        }
        out.push(GroupData {
            group: g.name.to_string(),
            polled_at: polled_at.map(|t| t.to_rfc3339()),
            age_seconds: polled_at.map(|t| now.since(t).as_secs_f64()),
            fresh: values.as_ref().is_some_and(|v| v.is_fresh(now)),
            values: values
                .map(|v| v.values.samples.iter().map(ValueView::of).collect())
                .unwrap_or_default(),
            body,
            body_note,
            body_items,
        });
    }
    Some(InstanceData {
        instance: name.to_string(),
        groups: out,
    })
}

/// The latest values of every group of the instance, with their age.
#[utoipa::path(
    get,
    path = "/api/instances/{name}/data",
    operation_id = "getInstanceData",
    summary = "The instance's latest extracted values and kept bodies, from Pollster's cache (no upstream call)",
    params(NamePath),
    responses(
        (status = 200, description = "the latest data of each group with value rules or keep_body", body = InstanceData),
        (status = 401, description = "no valid token or session", body = ErrorBody),
        (status = 404, description = "no such instance", body = ErrorBody),
    ),
)]
pub async fn get(
    State(app): State<AppState>,
    Path(NamePath { name }): Path<NamePath>,
) -> Result<Json<InstanceData>, ApiError> {
    let now = app.engine.now();
    instance_data(&app, &name, now)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))
}

/// The last good body of a `keep_body` group.
#[utoipa::path(
    get,
    path = "/api/instances/{name}/data/{group}/body",
    operation_id = "getInstanceBody",
    summary = "The last good response body of a keep_body group, as the target sent it; If-None-Match gives 304",
    params(GroupPath, BodyQuery),
    responses(
        (status = 200, description = "the body, with its content type, Last-Modified (the poll time), Age and ETag",
            content((String = "application/json"), (String = "application/octet-stream"))),
        (status = 304, description = "the body's ETag matches If-None-Match"),
        (status = 400, description = "a query parameter given twice, or `item` missing for a fan-out group", body = ErrorBody),
        (status = 401, description = "no valid token or session", body = ErrorBody),
        (status = 404, description = "no such instance, group or item, no body kept yet, or the last one was over max_body_bytes (code `too_large`)", body = ErrorBody),
        (status = 422, description = "an unknown query parameter", body = FieldErrorBody),
    ),
)]
pub async fn body(
    State(app): State<AppState>,
    Path(GroupPath { name, group }): Path<GroupPath>,
    QueryParams(q): QueryParams<BodyQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let cat = app.engine.catalog();
    let entry = cat
        .instances
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    let g = cat
        .types
        .get(&entry.config.type_name)
        .and_then(|t| t.groups.iter().find(|g| *g.name == *group))
        .ok_or_else(|| ApiError::not_found(format!("instance {name:?} has no group {group:?}")))?;
    if !g.keep_body {
        return Err(ApiError::not_found(format!(
            "group {group:?} does not keep its body (keep_body = false)"
        )));
    }
    let item = match (g.fan_out.is_some(), q.item) {
        (true, Some(i)) => i,
        (true, None) => {
            return Err(ApiError {
                field: Some("item".into()),
                ..ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "item_required",
                    "a fan-out group has one body per item: give ?item=",
                )
            });
        }
        (false, None) => String::new(),
        (false, Some(_)) => {
            return Err(ApiError {
                field: Some("item".into()),
                ..ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "no_items",
                    "this group does not fan out: leave out ?item=",
                )
            });
        }
    };
    let key = TaskKey::new(&name, &g.name);
    let engine = app.engine.clone();
    let (k, i) = (key.clone(), item.clone());
    let rec = tokio::task::spawn_blocking(move || engine.read_body(&k, &i))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found("no body kept yet: the group has not answered since it keeps its body"))?;
    let Some(bytes) = rec.bytes.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "too_large",
            format!(
                "the last body was {} bytes, over the group's max_body_bytes ({}), and was not kept",
                rec.size, g.max_body_bytes
            ),
        ));
    };
    // The cache knows the latest poll time of an unchanged body.
    let polled_at = app
        .engine
        .bodies_of(&key)
        .get(&item)
        .filter(|b| b.etag == rec.etag)
        .map_or(rec.polled_at, |b| b.polled_at.max(rec.polled_at));
    let etag = format!("\"{}\"", rec.etag);
    let age = app.engine.now().since(polled_at).as_secs();
    let modified = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(polled_at.0));
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == etag
        });
    let mut resp = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = axum::body::Body::from(bytes.to_vec()).into_response();
        let ct = if rec.content_type.is_empty() {
            "application/octet-stream"
        } else {
            rec.content_type.as_str()
        };
        if let Ok(v) = HeaderValue::from_str(ct) {
            r.headers_mut().insert(header::CONTENT_TYPE, v);
        }
        r
    };
    let h = resp.headers_mut();
    for (name, value) in [
        (header::ETAG, etag),
        (header::LAST_MODIFIED, modified),
        (header::AGE, age.to_string()),
        (header::CACHE_CONTROL, "no-cache".to_string()),
        // The body is the target's, not ours: never run it as a page.
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; sandbox".to_string(),
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    Ok(resp)
}

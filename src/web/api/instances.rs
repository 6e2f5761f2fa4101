//! Instances managed through the API (§6). Credentials are write-only: the
//! API shows the auth kind and non-secret parts, never a secret. Instances
//! from the config file are provisioned and read-only here.

use super::schema;
use crate::model::{Auth, FieldError, InstanceConfig};
use crate::service::{self, ServiceError};
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, JsonBody, QueryParams, from_json_object};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

/// The API view of an instance: the `[[instances]]` fields with the
/// credentials' secrets left out and any password in the URL hidden.
#[derive(Debug, Serialize, ToSchema)]
pub struct Instance {
    #[schema(schema_with = schema::name)]
    pub name: String,
    /// A built-in, preset or configured type.
    #[serde(rename = "type")]
    pub type_name: String,
    #[schema(schema_with = schema::instance_url)]
    pub url: String,
    #[schema(required = false, schema_with = schema::positive_duration)]
    pub timeout: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schema::plain_string)]
    pub budget: Option<String>,
    #[schema(required = false)]
    pub labels: BTreeMap<String, String>,
    #[schema(required = false)]
    pub enabled: bool,
    #[schema(required = false)]
    pub auth: AuthView,
    #[schema(required = false)]
    pub tls_verify: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schema::plain_string)]
    pub tls_fingerprint: Option<String>,
    #[schema(required = false, minimum = 1, maximum = 1073741824)]
    pub max_response_bytes: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(required = false)]
    pub shape: BTreeMap<String, u64>,
    /// Defined in the config file, so read-only here.
    pub provisioned: bool,
}

/// Credentials as the API shows them: the kind and the parts that are not
/// secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuthView {
    None,
    Bearer,
    Header { name: String },
    Basic { username: String },
    PveToken { user: String, token_id: String },
}

impl Instance {
    pub fn of(i: &InstanceConfig, provisioned: bool) -> Self {
        let auth = match &i.auth {
            Auth::None {} => AuthView::None,
            Auth::Bearer { .. } => AuthView::Bearer,
            Auth::Header { name, .. } => AuthView::Header { name: name.clone() },
            Auth::Basic { username, .. } => AuthView::Basic {
                username: username.clone(),
            },
            Auth::PveToken { user, token_id, .. } => AuthView::PveToken {
                user: user.clone(),
                token_id: token_id.clone(),
            },
        };
        Instance {
            name: i.name.to_string(),
            type_name: i.type_name.clone(),
            url: crate::service::redact::mask_url(&i.url),
            timeout: crate::model::duration_str::format(i.timeout),
            budget: i.budget.clone(),
            labels: i.labels.clone(),
            enabled: i.enabled,
            auth,
            tls_verify: i.tls_verify,
            tls_fingerprint: i.tls_fingerprint.clone(),
            max_response_bytes: i.max_response_bytes,
            shape: i.shape.clone(),
            provisioned,
        }
    }
}

/// `GET /api/instances`.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    pub count: usize,
    pub instances: Vec<Instance>,
}

/// The classified result of one test poll.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TestResult {
    pub group: String,
    pub ok: bool,
    /// The HTTP status, if a response came.
    #[schema(required = true)]
    pub status: Option<u16>,
    #[serde(rename = "durationMs")]
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = schema::count)]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub error: Option<TestError>,
    /// What the group's value rules extract from this answer (present for
    /// a group with rules whose poll succeeded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<super::data::ValueView>>,
    /// Samples the rules skipped, by metric and reason.
    #[serde(rename = "valueErrors", skip_serializing_if = "Vec::is_empty")]
    #[schema(inline)]
    pub value_errors: Vec<ValueError>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ValueError {
    pub metric: String,
    /// missing, not_number, unmapped, limit or duplicate.
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TestError {
    #[schema(schema_with = schema::error_category)]
    pub category: crate::model::ErrorCategory,
    #[schema(schema_with = schema::error_kind)]
    pub kind: crate::model::ErrorKind,
    pub message: String,
}

impl TestResult {
    pub fn of(t: &service::instances::GroupTest) -> Self {
        TestResult {
            group: t.group.clone(),
            ok: t.ok,
            status: t.status,
            duration_ms: t.duration_ms,
            bytes: t.bytes,
            error: t.error.as_ref().map(|e| TestError {
                category: e.category,
                kind: e.kind,
                message: e.message.clone(),
            }),
            values: t
                .values
                .as_ref()
                .map(|v| v.iter().map(super::data::ValueView::of).collect()),
            value_errors: t
                .value_errors
                .iter()
                .map(|e| ValueError {
                    metric: e.metric.clone(),
                    reason: e.reason.clone(),
                    count: e.count,
                })
                .collect(),
        }
    }
}

/// Run every group of the instance once, now, outside the schedule: the
/// results as the API and the instance page show them.
pub async fn test_results(app: &AppState, name: &str) -> Result<Vec<TestResult>, ServiceError> {
    let results = service::instances::test(&app.ctx(), name).await?;
    Ok(results.iter().map(TestResult::of).collect())
}

/// The results of `POST /api/instances/{name}/test`.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceTest {
    pub instance: String,
    pub results: Vec<TestResult>,
}

/// The path of an instance.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct NamePath {
    pub name: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Substring of the name or URL.
    pub q: Option<String>,
    /// Only instances of this type.
    #[serde(rename = "type")]
    pub type_name: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/instances",
    operation_id = "listInstances",
    summary = "List instances",
    params(ListQuery),
    responses(
        (status = 200, description = "instances", body = InstanceList, links(
            ("GetInstance" = (operation_id = "getInstance", parameters(("name" = "$response.body#/instances/0/name")))),
            ("UpdateInstance" = (operation_id = "updateInstance", parameters(("name" = "$response.body#/instances/0/name")))),
            ("TestInstance" = (operation_id = "testInstance", parameters(("name" = "$response.body#/instances/0/name")))),
            ("DeleteInstance" = (operation_id = "deleteInstance", parameters(("name" = "$response.body#/instances/0/name")))),
        )),
        (status = 400, description = "a query parameter given twice (named in `field`)", body = ErrorBody),
    ),
)]
pub async fn list(State(app): State<AppState>, QueryParams(q): QueryParams<ListQuery>) -> Json<InstanceList> {
    let cat = app.engine.catalog();
    let instances: Vec<Instance> = cat
        .instances
        .values()
        .filter(|e| q.type_name.as_ref().is_none_or(|t| &e.config.type_name == t))
        .filter(|e| {
            q.q.as_ref().is_none_or(|s| {
                e.config.name.contains(s.as_str())
                    || crate::service::redact::mask_url(&e.config.url).contains(s.as_str())
            })
        })
        .map(|e| Instance::of(&e.config, e.provisioned))
        .collect();
    Json(InstanceList {
        count: instances.len(),
        instances,
    })
}

#[utoipa::path(
    get,
    path = "/api/instances/{name}",
    operation_id = "getInstance",
    summary = "One instance",
    params(NamePath),
    responses(
        (status = 200, description = "instance", body = Instance),
        (status = 404, description = "no such instance", body = ErrorBody),
    ),
)]
pub async fn get(
    State(app): State<AppState>,
    Path(NamePath { name }): Path<NamePath>,
) -> Result<Json<Instance>, ApiError> {
    let cat = app.engine.catalog();
    let e = cat
        .instances
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("no instance named {name:?}")))?;
    Ok(Json(Instance::of(&e.config, e.provisioned)))
}

#[utoipa::path(
    post,
    path = "/api/instances",
    operation_id = "createInstance",
    summary = "Add an instance",
    request_body(content = ref("#/components/schemas/InstanceInput"), content_type = "application/json"),
    responses(
        (status = 201, description = "created", body = Instance, links(
            ("GetInstance" = (operation_id = "getInstance", parameters(("name" = "$response.body#/name")))),
            ("UpdateInstance" = (operation_id = "updateInstance", parameters(("name" = "$response.body#/name")))),
            ("TestInstance" = (operation_id = "testInstance", parameters(("name" = "$response.body#/name")))),
            ("DeleteInstance" = (operation_id = "deleteInstance", parameters(("name" = "$response.body#/name")))),
        )),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 409, description = "duplicate name, or the change would push a budget pool with no profile over its target (code over_budget)", body = ErrorBody),
        (status = 422, description = "invalid field, named", body = FieldErrorBody),
    ),
)]
pub async fn create(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    JsonBody(doc): JsonBody<Value>,
) -> Result<(StatusCode, Json<Instance>), ApiError> {
    let i: InstanceConfig = from_json_object(&doc)?;
    service::instances::create(&app.ctx(), i.clone(), &who.actor()).await?;
    Ok((StatusCode::CREATED, Json(Instance::of(&i, false))))
}

#[utoipa::path(
    put,
    path = "/api/instances/{name}",
    operation_id = "updateInstance",
    summary = "Replace an instance (omit `auth` to keep the stored credentials)",
    params(NamePath),
    request_body(content = ref("#/components/schemas/InstanceUpdate"), content_type = "application/json"),
    responses(
        (status = 200, description = "updated", body = Instance),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 404, description = "no such instance", body = ErrorBody),
        (status = 409, description = "provisioned by the config file, or over budget (code over_budget)", body = ErrorBody),
        (status = 422, description = "invalid field, named", body = FieldErrorBody),
    ),
)]
pub async fn update(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(NamePath { name }): Path<NamePath>,
    JsonBody(mut doc): JsonBody<Value>,
) -> Result<Json<Instance>, ApiError> {
    if !app.engine.catalog().instances.contains_key(&name) {
        return Err(ServiceError::NotFound(service::Missing::Instance(name)).into());
    }
    let Some(obj) = doc.as_object_mut() else {
        return Err(ApiError::invalid(FieldError::new("", "", "expected a JSON object")));
    };
    if !obj.contains_key("name") {
        obj.insert("name".into(), json!(name));
    }
    // Credentials are write-only: a PUT without `auth` keeps the stored ones.
    let keep_auth = !obj.contains_key("auth");
    let i: InstanceConfig = from_json_object(&doc)?;
    let i = service::instances::update(&app.ctx(), &name, i, keep_auth, &who.actor()).await?;
    Ok(Json(Instance::of(&i, false)))
}

#[utoipa::path(
    delete,
    path = "/api/instances/{name}",
    operation_id = "deleteInstance",
    summary = "Delete an instance",
    params(NamePath),
    responses(
        (status = 204, description = "deleted"),
        (status = 404, description = "no such instance", body = ErrorBody),
        (status = 409, description = "provisioned by the config file", body = ErrorBody),
    ),
)]
pub async fn delete(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(NamePath { name }): Path<NamePath>,
) -> Result<StatusCode, ApiError> {
    service::instances::delete(&app.ctx(), &name, &who.actor()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Run every group of the instance once, now, outside the schedule, and show
/// the classified result of each.
#[utoipa::path(
    post,
    path = "/api/instances/{name}/test",
    operation_id = "testInstance",
    summary = "Poll every group of the instance once, now, and show the classified results",
    params(NamePath),
    responses(
        (status = 200, description = "results", body = InstanceTest),
        (status = 404, description = "no such instance", body = ErrorBody),
    ),
)]
pub async fn test(
    State(app): State<AppState>,
    Path(NamePath { name }): Path<NamePath>,
) -> Result<Json<InstanceTest>, ApiError> {
    let results = test_results(&app, &name).await?;
    Ok(Json(InstanceTest {
        instance: name,
        results,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view is the stored instance with the secrets left out, the URL
    /// masked and `provisioned` added: the same fields, field for field.
    #[test]
    fn the_view_is_the_config_without_its_secrets() {
        let mut i = InstanceConfig::new("pve1", "pve", "https://root:pw@pve.example:8006");
        let bare = serde_json::to_value(&i).expect("config");
        i.budget = Some("shared".into());
        i.tls_fingerprint = Some("ab".repeat(32));
        i.labels.insert("site".into(), "a".into());
        i.shape.insert("nodes".into(), 3);
        for (auth, shown) in [
            (Auth::None {}, json!({"kind": "none"})),
            (Auth::Bearer { token: "t".into() }, json!({"kind": "bearer"})),
            (
                Auth::Header {
                    name: "X-Key".into(),
                    value: "v".into(),
                },
                json!({"kind": "header", "name": "X-Key"}),
            ),
            (
                Auth::Basic {
                    username: "u".into(),
                    password: "p".into(),
                },
                json!({"kind": "basic", "username": "u"}),
            ),
            (
                Auth::PveToken {
                    user: "root@pam".into(),
                    token_id: "mon".into(),
                    secret: "s".into(),
                },
                json!({"kind": "pve_token", "user": "root@pam", "token_id": "mon"}),
            ),
        ] {
            i.auth = auth;
            let mut expected = serde_json::to_value(&i).expect("config");
            expected["auth"] = shown;
            expected["url"] = json!(crate::service::redact::mask_url(&i.url));
            expected["provisioned"] = json!(true);
            assert_eq!(serde_json::to_value(Instance::of(&i, true)).ok(), Some(expected));
        }
        // Optional fields the config leaves out are left out of the view.
        let view = serde_json::to_value(Instance::of(
            &InstanceConfig::new("pve1", "pve", "https://root:pw@pve.example:8006"),
            false,
        ))
        .expect("view");
        let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>());
        let mut expected_keys = keys(&bare).unwrap_or_default();
        expected_keys.push("provisioned".into());
        expected_keys.sort();
        assert_eq!(keys(&view), Some(expected_keys));
        assert!(!view["url"].as_str().unwrap_or_default().contains("pw"), "{view}");
    }
}

//! `GET /api/openapi.json`: an OpenAPI 3.0 description of the JSON API,
//! generated with utoipa from the handlers' `#[utoipa::path]` attributes and
//! the body types' `ToSchema` derives, so the document follows the code. The
//! router test walks this document, so a route missing here fails a test.
//!
//! utoipa writes OpenAPI 3.1; [`to_openapi_3_0`] turns the few 3.1 forms it
//! uses (type arrays with `null`, numeric exclusive bounds) into their 3.0
//! spelling, which the clients and test tools of the API read. The request
//! bodies whose types live in the model and configuration (`InstanceConfig`,
//! the monitoring settings, the sink and budget patches) carry rules JSON
//! Schema states only by hand (patterns, bounds, one schema per credential
//! kind): [`hand_schemas`] keeps them.

use super::schema::{DURATION_PATTERN, NAME_PATTERN, POSITIVE_DURATION_PATTERN, SCHEDULER_MODES, URL_PATTERN};
use super::{
    admin, audit, budgets, cluster, data, dead_letter, groups, health, instances, maintenance, reload, settings, sink,
};
use crate::web::AppState;
use crate::web::error::{ErrorBody, FieldErrorBody};
use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Object, RefOr, Schema};
use utoipa::{IntoParams, Modify, OpenApi};

/// The API: every operation, and the schemas they name.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Pollster API",
        description = "Scheduler health, dead-letter queue, instances, maintenance windows and monitoring settings. Every route needs `Authorization: Bearer <token>`."
    ),
    paths(
        health::scheduler_health,
        dead_letter::list,
        dead_letter::retry,
        dead_letter::discard,
        dead_letter::enable,
        groups::list,
        sink::get,
        sink::put,
        sink::test,
        budgets::list,
        budgets::put,
        status_page,
        settings::get,
        settings::put,
        instances::list,
        instances::create,
        instances::get,
        instances::update,
        instances::delete,
        instances::test,
        data::get,
        data::body,
        admin::backup,
        reload::reload,
        audit::list,
        maintenance::list,
        maintenance::create,
        maintenance::delete,
        cluster::get,
        openapi,
    ),
    components(schemas(ErrorBody, FieldErrorBody)),
    security(("bearer" = [])),
    modifiers(&Contract)
)]
pub struct ApiDoc;

/// What the derive cannot say: the security scheme, the `Name` schema, and
/// no contact or licence taken from the package.
struct Contract;

impl Modify for Contract {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        doc.info.license = None;
        doc.info.contact = None;
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.schemas.insert(
            "Name".into(),
            RefOr::T(Schema::Object(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(NAME_PATTERN))
                    .description(Some(
                        "1-64 letters, digits, '-', '_' or '.', starting with a letter or digit",
                    ))
                    .build(),
            )),
        );
    }
}

/// `GET /status?format=json`: the plan page, documented with the API because
/// it answers JSON too. Served by the pages; this only describes it.
#[utoipa::path(
    get,
    path = "/status",
    operation_id = "status",
    summary = "The plan page; with format=json the same document as listGroups",
    params(StatusQuery),
    responses(
        (status = 200, description = "the plan: an HTML page, or with format=json the same document as listGroups",
            content((groups::PlanDoc = "application/json"), (String = "text/html"))),
        (status = 303, description = "no token and no session, and not format=json: a browser is sent to /login (or /setup before an admin exists)",
            headers(("Location" = String))),
        (status = 400, description = "a query parameter given twice (named in `field`)", body = ErrorBody),
        (status = 422, description = "unknown format (field `format`)", body = FieldErrorBody),
    ),
)]
#[allow(dead_code)]
fn status_page() {}

/// The query of `/status`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct StatusQuery {
    #[param(schema_with = status_format)]
    format: Option<String>,
}

fn status_format() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["html", "json"]))
        .default(Some(json!("html")))
        .build()
}

/// Rewrite utoipa's OpenAPI 3.1 output as OpenAPI 3.0.3: `"type": [T,
/// "null"]` becomes `"type": T, "nullable": true`; a `oneOf` with a null
/// branch becomes its other branch, nullable; numeric `exclusiveMinimum` /
/// `exclusiveMaximum` become `minimum` / `maximum` with the boolean flag;
/// `examples` becomes `example`; `propertyNames` (always strings here) goes.
pub fn to_openapi_3_0(doc: &mut Value) {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(types)) = m.get("type") {
                    let nullable = types.iter().any(|t| t == "null");
                    let rest: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                    match rest.as_slice() {
                        [one] => {
                            m.insert("type".into(), one.clone());
                        }
                        _ => {
                            m.remove("type");
                        }
                    }
                    if nullable {
                        m.insert("nullable".into(), json!(true));
                    }
                }
                let null_branch = json!({"type": "null"});
                if let Some(Value::Array(branches)) = m.get("oneOf")
                    && branches.contains(&null_branch)
                {
                    let rest: Vec<Value> = branches.iter().filter(|b| **b != null_branch).cloned().collect();
                    m.remove("oneOf");
                    match rest.as_slice() {
                        [Value::Object(one)] if !one.contains_key("$ref") => {
                            for (k, v) in one {
                                m.insert(k.clone(), v.clone());
                            }
                        }
                        [one] => {
                            m.insert("allOf".into(), json!([one]));
                        }
                        _ => {
                            m.insert("oneOf".into(), Value::Array(rest));
                        }
                    }
                    m.insert("nullable".into(), json!(true));
                }
                for (exclusive, bound) in [("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")] {
                    if let Some(n) = m.get(exclusive).filter(|n| n.is_number()).cloned() {
                        m.insert(bound.into(), n);
                        m.insert(exclusive.into(), json!(true));
                    }
                }
                if let Some(Value::Array(examples)) = m.get("examples")
                    && let Some(first) = examples.first().cloned()
                    && !m.contains_key("in")
                {
                    m.remove("examples");
                    m.insert("example".into(), first);
                }
                m.remove("propertyNames");
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    doc["openapi"] = json!("3.0.3");
    walk(doc);
}

/// The response every operation has: the auth layer answers it for a
/// missing or invalid token before any handler runs.
fn unauthorized() -> Value {
    json!({"description": "missing or invalid API token",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// utoipa writes a link's fields in snake case (`operation_id`); OpenAPI
/// spells them in camel case.
fn camel_case_link(link: &mut Value) {
    let Some(m) = link.as_object_mut() else { return };
    for (from, to) in [
        ("operation_id", "operationId"),
        ("operation_ref", "operationRef"),
        ("request_body", "requestBody"),
    ] {
        if let Some(v) = m.remove(from) {
            m.insert(to.into(), v);
        }
    }
}

/// The document for an appliance whose instances may have these types.
pub fn document(types: &[&str]) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    to_openapi_3_0(&mut doc);
    if let Some(paths) = doc["paths"].as_object_mut() {
        for item in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in item.values_mut().filter_map(Value::as_object_mut) {
                op.remove("tags");
                // A path parameter is always required (OpenAPI says so).
                for param in op
                    .get_mut("parameters")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "path")
                {
                    param["required"] = json!(true);
                }
                // Every body the API takes is required (an empty one is 400).
                if let Some(body) = op.get_mut("requestBody").and_then(Value::as_object_mut) {
                    body.insert("required".into(), json!(true));
                }
                let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                    continue;
                };
                responses.insert("401".into(), unauthorized());
                for response in responses.values_mut() {
                    // The headers documented are always sent.
                    if let Some(headers) = response.get_mut("headers").and_then(Value::as_object_mut) {
                        for header in headers.values_mut() {
                            header["required"] = json!(true);
                        }
                    }
                    if let Some(links) = response.get_mut("links").and_then(Value::as_object_mut) {
                        links.values_mut().for_each(camel_case_link);
                    }
                }
            }
        }
    }
    let schemas = &mut doc["components"]["schemas"];
    if let Some(hand) = hand_schemas(types).as_object() {
        for (name, schema) in hand {
            schemas[name] = schema.clone();
        }
    }
    schemas["Instance"]["properties"]["type"]["enum"] = json!(types);
    doc
}

#[utoipa::path(
    get,
    path = "/api/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    responses((status = 200, description = "OpenAPI 3 document", body = Object)),
)]
pub async fn openapi(State(app): State<AppState>) -> Json<Value> {
    let cat = app.engine.catalog();
    let types: Vec<&str> = cat.types.keys().map(String::as_str).collect();
    Json(document(&types))
}

/// The request bodies and settings documents whose types live outside the
/// web layer, in OpenAPI 3.0 form.
fn hand_schemas(types: &[&str]) -> Value {
    let duration = json!({"type": "string", "pattern": POSITIVE_DURATION_PATTERN, "example": "10s"});
    let duration_or_zero = json!({"type": "string", "pattern": DURATION_PATTERN, "example": "0s"});
    let name = json!({"$ref": "#/components/schemas/Name"});

    // Credentials in: one object per kind, every part required (write-only).
    let printable = json!({"type": "string", "pattern": "^[ -~]*$"});
    let secret = json!({"type": "string", "minLength": 1, "pattern": "^[ -~]+$"});
    let auth_kind = |kind: &str, parts: Value| {
        let mut props = json!({"kind": {"type": "string", "enum": [kind]}});
        let mut required = vec![json!("kind")];
        for (k, v) in parts.as_object().into_iter().flatten() {
            props[k] = v.clone();
            required.push(json!(k));
        }
        json!({"type": "object", "additionalProperties": false, "required": required, "properties": props})
    };
    let auth_in = json!({"oneOf": [
        auth_kind("none", json!({})),
        auth_kind("bearer", json!({"token": secret})),
        auth_kind("header", json!({"name": {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"}, "value": printable})),
        auth_kind("basic", json!({"username": {"type": "string", "pattern": "^[ -9;-~]+$"}, "password": printable})),
        auth_kind("pve_token", json!({
            "user": {"type": "string", "pattern": "^[ \\x22-~]*@[ \\x22-~]*$"},
            "token_id": {"type": "string", "pattern": "^[ -<>-~]+$"},
            "secret": secret}))
    ]});
    let labels = json!({"type": "object", "additionalProperties": {"type": "string", "maxLength": 256}});
    let shape = json!({"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
        "description": "shape counts for planning before they are learned, e.g. {\"nodes\": 12}"});
    let fingerprint = json!({"type": "string", "pattern": "^([0-9A-Fa-f]:?){63}[0-9A-Fa-f]$",
        "description": "SHA-256 of the certificate's DER bytes, hex, colons allowed"});
    let instance_props = json!({
        "name": name,
        "type": {"type": "string", "enum": types, "description": "a built-in, preset or configured type (default http)"},
        "url": {"type": "string", "pattern": URL_PATTERN, "description": "an http:// or https:// URL with a host"},
        "timeout": duration,
        "budget": {"type": "string", "nullable": true, "description": "a configured budget pool"},
        "labels": labels,
        "enabled": {"type": "boolean"},
        "auth": auth_in,
        "tls_verify": {"type": "boolean"},
        "tls_fingerprint": {"type": "string", "nullable": true, "pattern": fingerprint["pattern"], "description": fingerprint["description"]},
        "max_response_bytes": {"type": "integer", "minimum": 1, "maximum": 1073741824},
        "shape": shape
    });
    let mut update_props = instance_props.clone();
    update_props["name"] = json!({"type": "string", "description": "if given, must equal the name in the path"});

    let adaptive = json!({"type": "object", "additionalProperties": false, "properties": {
        "enabled": {"type": "boolean"}, "base_interval": duration, "min_interval": duration, "max_interval": duration}});
    let scheduler = json!({"type": "object", "additionalProperties": false, "properties": {
        "mode": {"type": "string", "enum": SCHEDULER_MODES},
        "workers": {"type": "integer", "minimum": 1, "maximum": 4096},
        "target_utilization": {"type": "number", "minimum": 0.1, "maximum": 1.0},
        "max_stretch_factor": {"type": "number", "minimum": 1, "maximum": 16},
        "max_interval": duration, "resolve_interval": duration,
        "aimd_enabled": {"type": "boolean"},
        "aimd_backoff_multiplier": {"type": "number", "minimum": 0.1, "maximum": 0.9},
        "aimd_recovery_rps_per_minute": {"type": "number", "minimum": 0.01, "maximum": 5},
        "profile": {"type": "string", "nullable": true, "enum": ["availability", "standard", "full", null]},
        "state_flush_interval": duration,
        "group_interval_overrides": {"type": "object", "additionalProperties": duration}}});
    let failure = json!({"type": "object", "additionalProperties": false, "properties": {
        "backoff_initial": duration, "backoff_multiplier": {"type": "number", "minimum": 1, "maximum": 10},
        "backoff_jitter": {"type": "number", "minimum": 0, "maximum": 0.5}, "backoff_max": duration,
        "breaker_threshold": {"type": "integer", "minimum": 1, "maximum": 100},
        "dead_letter_after": {"type": "integer", "minimum": 1, "maximum": 100},
        "dead_letter_recheck": duration}});
    json!({
        "BudgetPatch": {"type": "object", "additionalProperties": false,
            "description": "the fields to change; a new pool needs requests_per_second",
            "properties": {"name": {"type": "string", "description": "if given, must equal the name in the path"},
                "requests_per_second": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1_000_000},
                "shared_fraction": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1},
                "burst": {"type": "integer", "minimum": 1, "maximum": 100}}},
        "SinkPatch": {"nullable": true, "description": "null turns the sink off", "oneOf": [
            {"type": "object", "additionalProperties": false, "required": ["enabled"],
                "description": "turn the sink off",
                "properties": {"enabled": {"type": "boolean", "enum": [false]}}},
            {"type": "object", "additionalProperties": false,
                "description": "the fields to change over the sink in force (url is needed when none is)",
                "properties": {
                    "enabled": {"type": "boolean", "enum": [true]},
                    "url": {"type": "string", "pattern": URL_PATTERN},
                    "headers": {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[ -~]*$"},
                        "description": "replaces the headers; a value of (hidden) keeps the stored one"},
                    "batch_size": {"type": "integer", "minimum": 1, "maximum": 100_000},
                    "buffering": duration.clone(), "retry_limit": duration_or_zero.clone(),
                    "queue_limit": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
                    "gzip": {"type": "boolean"}}}]},
        "InstanceInput": {"type": "object", "required": ["name", "url"], "additionalProperties": false, "properties": instance_props},
        "InstanceUpdate": {"type": "object", "required": ["url"], "additionalProperties": false, "properties": update_props},
        "MonitoringSettings": {"type": "object", "required": ["adaptive", "scheduler", "failure", "locked"], "properties": {
            "adaptive": adaptive, "scheduler": scheduler, "failure": failure,
            "locked": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "MonitoringSettingsPatch": {"type": "object", "additionalProperties": false, "properties": {
            "adaptive": nullable_leaves(&adaptive), "scheduler": nullable_leaves(&scheduler), "failure": nullable_leaves(&failure),
            "locked": {"type": "object", "description": "ignored, so a GET document can be sent back"}}}
    })
}

/// A section of a merge patch: the section and each of its fields may be
/// null (drop the saved value).
fn nullable_leaves(section: &Value) -> Value {
    let mut v = section.clone();
    v["nullable"] = json!(true);
    if let Some(props) = v.get_mut("properties").and_then(Value::as_object_mut) {
        for p in props.values_mut() {
            p["nullable"] = json!(true);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::schema::{DEAD_LETTER_REASONS, ERROR_CATEGORIES, ERROR_KINDS, PROFILES};
    use super::*;
    use std::collections::BTreeSet;

    fn doc() -> Value {
        document(&["http", "pve"])
    }

    /// (method, path) of every operation of the document.
    fn operations(doc: &Value) -> BTreeSet<(String, String)> {
        let mut ops = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                ops.insert((method.clone(), path.clone()));
            }
        }
        ops
    }

    /// The routes `api_router` registers, read from its source: every
    /// `.route("path", get(..).put(..))` before its fallback.
    fn router_routes() -> BTreeSet<(String, String)> {
        let src = include_str!("../mod.rs");
        let start = src.find("pub fn api_router").expect("api_router");
        let body = &src[start..];
        let body = &body[..body.find(".fallback(").expect("fallback")];
        let mut routes = BTreeSet::new();
        for chunk in body.split(".route(").skip(1) {
            let path = chunk.split('"').nth(1).expect("route path");
            for method in ["get", "post", "put", "delete", "patch"] {
                let called = chunk.match_indices(&format!("{method}(")).any(|(i, _)| {
                    i == 0 || !chunk.as_bytes()[i - 1].is_ascii_alphanumeric() && chunk.as_bytes()[i - 1] != b'_'
                });
                if called {
                    routes.insert((method.to_string(), format!("/api{path}")));
                }
            }
        }
        routes
    }

    #[test]
    fn the_document_covers_every_route_of_the_api_router() {
        let routes = router_routes();
        assert!(routes.len() >= 20, "{routes:?}");
        let documented: BTreeSet<_> = operations(&doc())
            .into_iter()
            .filter(|(_, path)| path.starts_with("/api/"))
            .collect();
        assert_eq!(documented, routes, "documented operations against the router's routes");
        // And the one page that answers JSON too.
        assert!(operations(&doc()).contains(&("get".into(), "/status".into())));
    }

    #[test]
    fn every_operation_has_an_id_a_401_and_only_resolvable_references() {
        let doc = doc();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let mut ids = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("item") {
                let id = op["operationId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method} {path}: no operationId"));
                assert!(ids.insert(id.to_string()), "operationId {id} twice");
                assert_eq!(
                    op["responses"]["401"]["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/Error",
                    "{id}"
                );
                if let Some(body) = op.get("requestBody") {
                    assert_eq!(body["required"], true, "{id}");
                }
                for p in op["parameters"].as_array().into_iter().flatten() {
                    if p["in"] == "path" {
                        assert_eq!(p["required"], true, "{id}: {p}");
                        assert!(path.contains(&format!("{{{}}}", p["name"].as_str().unwrap_or_default())));
                    }
                }
            }
        }
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r.clone());
                    }
                    m.values().for_each(|v| refs(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(&doc, &mut all);
        for r in all {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{r}"));
            assert!(schemas.contains_key(name), "{r} resolves");
        }
        for name in [
            "Error",
            "FieldError",
            "Name",
            "Health",
            "DeadLetterPage",
            "TaskState",
            "Plan",
            "Instance",
        ] {
            assert!(schemas.contains_key(name), "schema {name}");
        }
        assert_eq!(
            schemas["FieldError"]["properties"]["error"]["required"],
            json!(["code", "message", "field"])
        );
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"],
            json!({"type": "http", "scheme": "bearer"})
        );
        assert_eq!(doc["security"], json!([{"bearer": []}]));
    }

    #[test]
    fn the_links_name_existing_operations_in_camel_case() {
        let doc = doc();
        let ids: BTreeSet<String> = doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|p| p.values())
            .flat_map(|item| item.as_object().into_iter().flat_map(|m| m.values()))
            .filter_map(|op| op["operationId"].as_str().map(String::from))
            .collect();
        let mut links = 0;
        for item in doc["paths"].as_object().expect("paths").values() {
            for op in item.as_object().expect("item").values() {
                for response in op["responses"].as_object().expect("responses").values() {
                    for link in response["links"].as_object().into_iter().flat_map(|l| l.values()) {
                        assert!(link.get("operation_id").is_none(), "{link}");
                        let target = link["operationId"].as_str().expect("operationId");
                        assert!(ids.contains(target), "{target}");
                        links += 1;
                    }
                }
            }
        }
        // Instances (list and create: 4 each), dead-letter list (2), discard (1).
        assert_eq!(links, 11);
    }

    #[test]
    fn the_document_is_openapi_3_0() {
        fn walk(v: &Value, at: &str) {
            match v {
                Value::Object(m) => {
                    assert!(!m.get("type").is_some_and(Value::is_array), "{at}: type array");
                    assert!(m.get("type") != Some(&json!("null")), "{at}: null type");
                    for k in ["exclusiveMinimum", "exclusiveMaximum"] {
                        assert!(m.get(k).is_none_or(Value::is_boolean), "{at}/{k}");
                    }
                    assert!(!m.contains_key("propertyNames"), "{at}");
                    for (k, v) in m {
                        walk(v, &format!("{at}/{k}"));
                    }
                }
                Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| walk(v, &format!("{at}/{i}"))),
                _ => {}
            }
        }
        let doc = doc();
        assert_eq!(doc["openapi"], "3.0.3");
        walk(&doc, "");
        assert_eq!(doc["info"]["title"], "Pollster API");
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn the_patterns_and_the_types_are_in_the_schemas() {
        let doc = doc();
        let s = &doc["components"]["schemas"];
        assert_eq!(s["Name"]["pattern"], NAME_PATTERN);
        assert_eq!(
            s["Instance"]["properties"]["timeout"]["pattern"],
            POSITIVE_DURATION_PATTERN
        );
        assert_eq!(
            s["InstanceInput"]["properties"]["timeout"]["pattern"],
            POSITIVE_DURATION_PATTERN
        );
        assert_eq!(
            s["SinkPatch"]["oneOf"][1]["properties"]["retry_limit"]["pattern"],
            DURATION_PATTERN
        );
        for schema in ["Instance", "InstanceInput", "InstanceUpdate"] {
            assert_eq!(
                s[schema]["properties"]["type"]["enum"],
                json!(["http", "pve"]),
                "{schema}"
            );
        }
        let put_budget = &doc["paths"]["/api/budgets/{name}"]["put"]["parameters"][0];
        assert_eq!(put_budget["schema"]["$ref"], "#/components/schemas/Name");
        let backup = &doc["paths"]["/api/admin/backup"]["post"]["responses"]["200"]["content"];
        let file = &backup["application/octet-stream"]["schema"];
        assert_eq!((&file["type"], &file["format"]), (&json!("string"), &json!("binary")));
        assert!(doc["paths"]["/api/admin/backup"].get("get").is_none(), "GET is gone");
        let body = &doc["components"]["schemas"]["BackupRequest"];
        assert_eq!(body["required"], json!(["passphrase"]), "{body}");
        assert_eq!(body["properties"]["passphrase"]["minLength"], 12, "{body}");
        assert_eq!(body["additionalProperties"], false, "{body}");
    }

    #[test]
    fn the_enumerations_are_the_model_types_serialised() {
        use crate::model::{DeadLetterReason, ErrorCategory, ErrorKind, Profile, SchedulerMode};
        fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(values: &[&str]) {
            for v in values {
                let t: T = serde_json::from_value(json!(v)).unwrap_or_else(|e| panic!("{v}: {e}"));
                assert_eq!(serde_json::to_value(&t).ok(), Some(json!(v)));
            }
        }
        round_trip::<ErrorCategory>(ERROR_CATEGORIES);
        round_trip::<ErrorKind>(ERROR_KINDS);
        round_trip::<DeadLetterReason>(DEAD_LETTER_REASONS);
        round_trip::<SchedulerMode>(SCHEDULER_MODES);
        round_trip::<Profile>(PROFILES);
    }

    /// The keys of `sent` that `schema` (an object schema) does not name.
    fn undocumented(schema: &Value, sent: &Value) -> Vec<String> {
        let props = schema["properties"].as_object().cloned().unwrap_or_default();
        sent.as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|k| !props.contains_key(*k))
            .cloned()
            .collect()
    }

    /// The schemas kept by hand close their objects (`additionalProperties:
    /// false`): every field the types send or take must be in them.
    #[test]
    fn the_hand_kept_schemas_name_every_field_of_their_types() {
        use crate::model::{InstanceConfig, MonitoringSettings, Profile};
        let doc = doc();
        let s = &doc["components"]["schemas"];

        let mut settings = MonitoringSettings::default();
        settings.scheduler.profile = Some(Profile::Standard);
        let sent = serde_json::to_value(&settings).expect("settings");
        for section in ["adaptive", "scheduler", "failure"] {
            for schema in ["MonitoringSettings", "MonitoringSettingsPatch"] {
                let missing = undocumented(&s[schema]["properties"][section], &sent[section]);
                assert!(missing.is_empty(), "{schema}.{section}: {missing:?}");
            }
        }

        let mut i = InstanceConfig::new("a", "http", "http://x");
        i.budget = Some("p".into());
        i.tls_fingerprint = Some("ab".repeat(32));
        i.shape.insert("nodes".into(), 1);
        let sent = serde_json::to_value(&i).expect("instance");
        for schema in ["InstanceInput", "InstanceUpdate", "Instance"] {
            assert_eq!(undocumented(&s[schema], &sent), Vec::<String>::new(), "{schema}");
        }

        let mut sink = crate::config::SinkConfig::new("http://x");
        sink.headers.insert("Authorization".into(), "secret".into());
        let sent = crate::service::sink::shown(&sink);
        assert_eq!(
            undocumented(&s["SinkDocument"]["properties"]["sink"], &sent),
            Vec::<String>::new()
        );
        assert_eq!(undocumented(&s["SinkPatch"]["oneOf"][1], &sent), Vec::<String>::new());
    }

    #[test]
    fn a_3_1_schema_becomes_3_0() {
        let mut v = json!({"openapi": "3.1.0", "components": {"schemas": {
            "A": {"type": ["string", "null"], "enum": ["x", null]},
            "B": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/A"}]},
            "C": {"type": "number", "exclusiveMinimum": 0, "examples": ["1"]},
            "D": {"type": "object", "propertyNames": {"type": "string"}, "properties": {"type": {"type": "string"}}}
        }}});
        to_openapi_3_0(&mut v);
        let s = &v["components"]["schemas"];
        assert_eq!(v["openapi"], "3.0.3");
        assert_eq!(s["A"], json!({"type": "string", "nullable": true, "enum": ["x", null]}));
        assert_eq!(
            s["B"],
            json!({"allOf": [{"$ref": "#/components/schemas/A"}], "nullable": true})
        );
        assert_eq!(
            s["C"],
            json!({"type": "number", "minimum": 0, "exclusiveMinimum": true, "example": "1"})
        );
        assert_eq!(
            s["D"],
            json!({"type": "object", "properties": {"type": {"type": "string"}}})
        );
    }
}

//! `GET /api/openapi.json`: an OpenAPI 3 description of the JSON API. The
//! router test walks this document, so a route missing here fails a test.

use crate::web::AppState;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

/// A duration as the settings write and show it: `250ms`, `10s`, `1h30m`,
/// `2days` (the parser also takes spaces and longer unit names).
pub const DURATION_PATTERN: &str = "^([0-9]{1,9}(ns|us|ms|s|m|h|d|days?|w|weeks?|months?|y|years?))+$";
/// A duration above zero: the first number is not 0.
pub const POSITIVE_DURATION_PATTERN: &str = "^[1-9][0-9]{0,8}(ns|us|ms|s|m|h|d|days?|w|weeks?|months?|y|years?)([0-9]{1,9}(ns|us|ms|s|m|h|d|days?|w|weeks?|months?|y|years?))*$";
/// Names of instances and pools ([`crate::model::valid_name`]).
pub const NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";

fn err(desc: &str) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// 422: the error names the field (`""` for the whole body).
fn invalid(desc: &str) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FieldError"}}}})
}

fn ok(desc: &str, schema: Value) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": schema}}})
}

fn task_params() -> Value {
    json!([
        {"name": "instance", "in": "path", "required": true, "schema": {"type": "string"}},
        {"name": "group", "in": "path", "required": true, "schema": {"type": "string"}}
    ])
}

fn name_param() -> Value {
    json!([{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}])
}

/// Links from a response carrying an instance name to the operations on it.
fn instance_links(pointer: &str) -> Value {
    let name = json!({"name": format!("$response.body#{pointer}")});
    json!({
        "GetInstance": {"operationId": "getInstance", "parameters": name},
        "UpdateInstance": {"operationId": "updateInstance", "parameters": name},
        "TestInstance": {"operationId": "testInstance", "parameters": name},
        "DeleteInstance": {"operationId": "deleteInstance", "parameters": name}
    })
}

/// Links from a response carrying a task (`instance`, `group`) to the
/// operations on it.
fn task_links(pointer: &str, ops: &[(&str, &str)]) -> Value {
    let params = json!({
        "instance": format!("$response.body#{pointer}/instance"),
        "group": format!("$response.body#{pointer}/group")
    });
    let mut links = serde_json::Map::new();
    for (name, op) in ops {
        links.insert(name.to_string(), json!({"operationId": op, "parameters": params}));
    }
    Value::Object(links)
}

fn with_links(mut response: Value, links: Value) -> Value {
    response["links"] = links;
    response
}

/// The document for an appliance whose instances may have these types.
pub fn document(types: &[&str]) -> Value {
    let r = |s: &str| json!({"$ref": format!("#/components/schemas/{s}")});
    let unauthorized = err("missing or invalid API token");
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Pollster API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Scheduler health, dead-letter queue, instances and monitoring settings. Every route needs `Authorization: Bearer <token>`."
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/monitoring/scheduler/health": {"get": {
                "summary": "Scheduler health", "operationId": "schedulerHealth",
                "responses": {"200": ok("health", r("Health")), "401": unauthorized}}},
            "/api/monitoring/scheduler/dead-letter": {"get": {
                "summary": "Dead-letter queue, most recent first", "operationId": "listDeadLetter",
                "parameters": [
                    {"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1_000_000}},
                    {"name": "per_page", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}}
                ],
                "responses": {
                    "200": with_links(ok("entries", r("DeadLetterPage")), task_links("/tasks/0",
                        &[("RetryDeadLetter", "retryDeadLetter"), ("DiscardDeadLetter", "discardDeadLetter")])),
                    "400": err("a query parameter given twice (named in `field`)"), "401": unauthorized,
                    "422": invalid("invalid query parameter (named in `field`)")}}},
            "/api/monitoring/scheduler/dead-letter/{instance}/{group}/retry": {"post": {
                "summary": "Probe a dead-lettered task now", "operationId": "retryDeadLetter",
                "parameters": task_params(),
                "responses": {"202": ok("probe scheduled", r("TaskState")), "401": unauthorized,
                    "404": err("no such task"), "409": err("not in the dead-letter queue, or running now")}}},
            "/api/monitoring/scheduler/dead-letter/{instance}/{group}": {"delete": {
                "summary": "Discard a dead-lettered task (the task is disabled until enabled again)", "operationId": "discardDeadLetter",
                "parameters": task_params(),
                "responses": {"200": with_links(ok("discarded", r("TaskState")), task_links("", &[("EnableTask", "enableTask")])), "401": unauthorized,
                    "404": err("no such task"), "409": err("not in the dead-letter queue, or running now")}}},
            "/api/monitoring/scheduler/tasks/{instance}/{group}/enable": {"post": {
                "summary": "Enable a discarded task again", "operationId": "enableTask",
                "parameters": task_params(),
                "responses": {"200": ok("enabled", r("TaskState")), "401": unauthorized, "404": err("no such task"), "409": err("running now")}}},
            "/api/monitoring/scheduler/groups": {"get": {
                "summary": "Planned interval of every endpoint group, by pool", "operationId": "listGroups",
                "responses": {"200": ok("plan", r("Plan")), "401": unauthorized}}},
            "/api/settings/sink": {
                "get": {"summary": "Event sink settings (header values hidden), locked fields and live state", "operationId": "getSink",
                    "responses": {"200": ok("sink", r("SinkDocument")), "401": unauthorized}},
                "put": {"summary": "Change the event sink (partial [sink] document over the sink in force; null or {\"enabled\": false} turns it off; a header sent as (hidden) keeps its value)", "operationId": "putSink",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": r("SinkPatch")}}},
                    "responses": {"200": ok("sink in force", r("SinkDocument")), "400": err("not JSON"), "401": unauthorized,
                        "409": err("a field is locked by an environment variable"), "422": invalid("invalid value, naming the field")}}
            },
            "/api/settings/sink/test": {"post": {
                "summary": "Send one test event now, outside the queue, and say whether the destination took it", "operationId": "testSink",
                "responses": {"200": ok("the test ran: `ok` says whether the event was delivered, `error` why not",
                        json!({"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}, "error": {"type": "string"}}})),
                    "401": unauthorized, "409": err("no event sink is configured (code sink_disabled)")}}},
            "/api/budgets": {"get": {
                "summary": "Budget pools with their configured and effective budgets", "operationId": "listBudgets",
                "responses": {"200": ok("pools", json!({"type": "object", "required": ["budgets"], "properties": {"budgets": {"type": "array", "items": r("Budget")}}})), "401": unauthorized}}},
            "/api/budgets/{name}": {"put": {
                "summary": "Change or create a budget pool (partial document; applies at once, survives restarts)", "operationId": "putBudget",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": r("Name")}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": r("BudgetPatch")}}},
                "responses": {"200": ok("the pool in force", r("Budget")), "400": err("not JSON"), "401": unauthorized,
                    "409": err("the change would push the pool over its target with no profile set (code over_budget)"),
                    "422": invalid("invalid value (a new pool needs requests_per_second), naming the field")}}},
            "/status": {"get": {
                "summary": "The plan page; with format=json the same document as listGroups", "operationId": "status",
                "parameters": [{"name": "format", "in": "query", "required": false, "schema": {"type": "string", "enum": ["html", "json"], "default": "html"}}],
                "responses": {
                    "200": {"description": "the plan: an HTML page, or with format=json the same document as listGroups", "content": {
                        "application/json": {"schema": r("Plan")},
                        "text/html": {"schema": {"type": "string"}}}},
                    "303": {"description": "no token and no session, and not format=json: a browser is sent to /login (or /setup before an admin exists)",
                        "headers": {"Location": {"required": true, "schema": {"type": "string"}}}},
                    "400": err("a query parameter given twice (named in `field`)"), "401": unauthorized,
                    "422": invalid("unknown format (field `format`)")}}},
            "/api/settings/monitoring": {
                "get": {"summary": "Monitoring settings", "operationId": "getMonitoringSettings",
                    "responses": {"200": ok("settings", r("MonitoringSettings")), "401": unauthorized}},
                "put": {"summary": "Change monitoring settings (a JSON merge patch of the saved settings: omitted fields keep their value, null drops the saved value so the config file's or the default applies; validated as a whole, saved, applied at once)", "operationId": "putMonitoringSettings",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": r("MonitoringSettingsPatch")}}},
                    "responses": {"200": ok("settings in force", r("MonitoringSettings")), "400": err("not JSON"), "401": unauthorized,
                        "409": err("a field is locked by an environment variable, or the settings would push a budget pool with no profile over its target (code over_budget)"), "422": invalid("invalid value, naming the field")}}
            },
            "/api/instances": {
                "get": {"summary": "List instances", "operationId": "listInstances",
                    "parameters": [
                        {"name": "q", "in": "query", "schema": {"type": "string"}},
                        {"name": "type", "in": "query", "schema": {"type": "string"}}
                    ],
                    "responses": {
                        "200": with_links(ok("instances", json!({"type": "object", "required": ["count", "instances"], "properties": {"count": {"type": "integer"}, "instances": {"type": "array", "items": r("Instance")}}})),
                            instance_links("/instances/0/name")),
                        "400": err("a query parameter given twice (named in `field`)"), "401": unauthorized}},
                "post": {"summary": "Add an instance", "operationId": "createInstance",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": r("InstanceInput")}}},
                    "responses": {"201": with_links(ok("created", r("Instance")), instance_links("/name")), "400": err("not JSON"), "401": unauthorized,
                        "409": err("duplicate name, or the change would push a budget pool with no profile over its target (code over_budget)"), "422": invalid("invalid field, named")}}
            },
            "/api/instances/{name}": {
                "parameters": name_param(),
                "get": {"summary": "One instance", "operationId": "getInstance",
                    "responses": {"200": ok("instance", r("Instance")), "401": unauthorized, "404": err("no such instance")}},
                "put": {"summary": "Replace an instance (omit `auth` to keep the stored credentials)", "operationId": "updateInstance",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": r("InstanceUpdate")}}},
                    "responses": {"200": ok("updated", r("Instance")), "400": err("not JSON"), "401": unauthorized, "404": err("no such instance"),
                        "409": err("provisioned by the config file, or over budget (code over_budget)"), "422": invalid("invalid field, named")}},
                "delete": {"summary": "Delete an instance", "operationId": "deleteInstance",
                    "responses": {"204": {"description": "deleted"}, "401": unauthorized, "404": err("no such instance"), "409": err("provisioned by the config file")}}
            },
            "/api/instances/{name}/test": {"post": {
                "summary": "Poll every group of the instance once, now, and show the classified results", "operationId": "testInstance",
                "parameters": name_param(),
                "responses": {"200": ok("results", r("InstanceTest")), "401": unauthorized, "404": err("no such instance")}}},
            "/api/admin/backup": {"get": {
                "summary": "Consistent copy of the database", "operationId": "backup",
                "responses": {"200": {"description": "redb file", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "401": unauthorized}}},
            "/api/openapi.json": {"get": {
                "summary": "This document", "operationId": "openapi",
                "responses": {"200": ok("OpenAPI 3 document", json!({"type": "object"})), "401": unauthorized}}}
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas(types)
        }
    })
}

fn schemas(types: &[&str]) -> Value {
    let ts = json!({"type": "string", "format": "date-time", "nullable": true});
    let duration = json!({"type": "string", "pattern": POSITIVE_DURATION_PATTERN, "example": "10s"});
    let duration_or_zero = json!({"type": "string", "pattern": DURATION_PATTERN, "example": "0s"});
    let name = json!({"$ref": "#/components/schemas/Name"});
    let task_ref = json!({
        "instance": {"type": "string"}, "type": {"type": "string"}, "group": {"type": "string"}
    });
    let mut dl_props = task_ref.clone();
    for (k, v) in [
        ("nextRun", ts.clone()),
        ("lastError", json!({"type": "string", "nullable": true})),
        ("failures", json!({"type": "integer"})),
        (
            "reason",
            json!({"type": "string", "nullable": true, "enum": ["max_retry_attempts", "permanent_failure", null]}),
        ),
        ("since", ts.clone()),
        ("status", json!({"type": "integer", "nullable": true})),
        (
            "category",
            json!({"type": "string", "nullable": true, "enum": ["transient", "permanent", null]}),
        ),
        (
            "kind",
            json!({"type": "string", "nullable": true, "enum": [
                "timeout", "connect", "dns", "http", "rate_limited", "tls", "body",
                "invalid_url", "invalid_credentials", "other", null
            ]}),
        ),
    ] {
        dl_props[k] = v;
    }
    let mut breaker_props = task_ref.clone();
    breaker_props["state"] = json!({"type": "string", "enum": ["open", "half_open"]});
    breaker_props["failures"] = json!({"type": "integer"});
    breaker_props["retryAt"] = ts.clone();
    let mut stale_props = task_ref.clone();
    stale_props["score"] = json!({"type": "number", "minimum": 0, "maximum": 1});
    stale_props["lastSuccess"] = ts.clone();

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
    // Credentials out: the kind and the parts that are not secret.
    let auth_out = json!({"type": "object", "required": ["kind"], "properties": {
        "kind": {"type": "string", "enum": ["none", "bearer", "header", "basic", "pve_token"]},
        "name": {"type": "string"}, "username": {"type": "string"},
        "user": {"type": "string"}, "token_id": {"type": "string"}
    }});
    let labels = json!({"type": "object", "additionalProperties": {"type": "string", "maxLength": 256}});
    let shape = json!({"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
        "description": "shape counts for planning before they are learned, e.g. {\"nodes\": 12}"});
    let fingerprint = json!({"type": "string", "pattern": "^([0-9A-Fa-f]:?){63}[0-9A-Fa-f]$",
        "description": "SHA-256 of the certificate's DER bytes, hex, colons allowed"});
    let instance_props = json!({
        "name": name,
        "type": {"type": "string", "enum": types, "description": "a built-in, preset or configured type (default http)"},
        "url": {"type": "string", "pattern": "^https?://[^/?#]+", "description": "an http:// or https:// URL with a host"},
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
    let mut instance_out = instance_props.clone();
    instance_out["provisioned"] = json!({"type": "boolean"});
    instance_out["auth"] = auth_out;
    instance_out["budget"] = json!({"type": "string"});
    instance_out["tls_fingerprint"] = json!({"type": "string"});
    let mut update_props = instance_props.clone();
    update_props["name"] = json!({"type": "string", "description": "if given, must equal the name in the path"});

    let adaptive = json!({"type": "object", "additionalProperties": false, "properties": {
        "enabled": {"type": "boolean"}, "base_interval": duration, "min_interval": duration, "max_interval": duration}});
    let scheduler = json!({"type": "object", "additionalProperties": false, "properties": {
        "mode": {"type": "string", "enum": ["adaptive", "fixed"]},
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

    let num = json!({"type": "number"});
    let num_or_null = json!({"type": "number", "nullable": true});
    let group_view = json!({"type": "object",
        "required": ["type", "name", "priority", "floor_seconds", "interval_seconds", "stretch_factor",
            "cost_per_cycle", "demand_rps", "pinned", "shed"],
        "properties": {
            "type": {"type": "string"}, "name": {"type": "string"}, "priority": {"type": "integer", "minimum": 1, "maximum": 4},
            "floor_seconds": num, "interval_seconds": num, "stretch_factor": num, "cost_per_cycle": num, "demand_rps": num,
            "pinned": {"type": "boolean"}, "pin_below_floor": {"type": "boolean"}, "shed": {"type": "boolean"},
            "enabled": {"type": "boolean"}, "gated": {"type": "boolean"}, "last_ran": ts}});
    let pool_view = json!({"type": "object",
        "required": ["name", "budget_rps", "effective_budget_rps", "target_utilization", "total_demand_rps", "over_budget", "groups"],
        "properties": {
            "name": {"type": "string", "description": "pool name; \"unbudgeted\" for instances with no pool"},
            "mode": {"type": "string", "enum": ["adaptive", "fixed"]},
            "profile": {"type": "string", "enum": ["availability", "standard", "full"], "nullable": true},
            "budget_rps": num_or_null, "effective_budget_rps": num_or_null, "target_utilization": num,
            "target_rps": num_or_null, "total_demand_rps": num, "utilization": num_or_null,
            "over_budget": {"type": "boolean"}, "fits_after_shedding": {"type": "boolean"},
            "shape": {"type": "object", "additionalProperties": {"type": "integer"}},
            "instances": {"type": "integer"}, "warnings": {"type": "array", "items": {"type": "string"}},
            "paused_until": {"type": "string", "format": "date-time"},
            "groups": {"type": "array", "items": group_view}}});
    json!({
        "SinkDocument": {"type": "object", "required": ["sink", "locked", "status"], "properties": {
            "sink": {"type": "object", "nullable": true, "properties": {
                "url": {"type": "string"}, "headers": {"type": "object", "additionalProperties": {"type": "string", "enum": [crate::model::HIDDEN]}},
                "batch_size": {"type": "integer"}, "buffering": duration.clone(), "retry_limit": duration_or_zero.clone(),
                "queue_limit": {"type": "integer"}, "gzip": {"type": "boolean"}}},
            "locked": {"type": "object", "additionalProperties": {"type": "string"}},
            "status": {"type": "object", "properties": {
                "enabled": {"type": "boolean"}, "queue_depth": {"type": "integer"}, "consecutive_failures": {"type": "integer"},
                "retry_wait_ms": {"type": "integer"}, "next_attempt_at": {"type": "string", "nullable": true},
                "last_error": {"type": "string", "nullable": true}, "counters": {"type": "object"}, "batches": {"type": "object"}}}}},
        "Budget": {"type": "object", "required": ["name", "requests_per_second", "shared_fraction", "burst", "budget_rps", "effective_budget_rps"],
            "properties": {"name": {"type": "string"}, "requests_per_second": num, "shared_fraction": num,
                "burst": {"type": "integer"}, "budget_rps": num, "effective_budget_rps": num, "instances": {"type": "integer"}}},
        "BudgetPatch": {"type": "object", "additionalProperties": false,
            "description": "the fields to change; a new pool needs requests_per_second",
            "properties": {"name": {"type": "string", "description": "if given, must equal the name in the path"},
                "requests_per_second": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1_000_000},
                "shared_fraction": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1},
                "burst": {"type": "integer", "minimum": 1, "maximum": 100}}},
        "Name": {"type": "string", "pattern": NAME_PATTERN,
            "description": "1-64 letters, digits, '-', '_' or '.', starting with a letter or digit"},
        "SinkPatch": {"nullable": true, "description": "null turns the sink off", "oneOf": [
            {"type": "object", "additionalProperties": false, "required": ["enabled"],
                "description": "turn the sink off",
                "properties": {"enabled": {"type": "boolean", "enum": [false]}}},
            {"type": "object", "additionalProperties": false,
                "description": "the fields to change over the sink in force (url is needed when none is)",
                "properties": {
                    "enabled": {"type": "boolean", "enum": [true]},
                    "url": {"type": "string", "pattern": "^https?://[^/?#]+"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[ -~]*$"},
                        "description": "replaces the headers; a value of (hidden) keeps the stored one"},
                    "batch_size": {"type": "integer", "minimum": 1, "maximum": 100_000},
                    "buffering": duration.clone(), "retry_limit": duration_or_zero.clone(),
                    "queue_limit": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
                    "gzip": {"type": "boolean"}}}]},
        "InstanceTest": {"type": "object", "required": ["instance", "results"], "properties": {
            "instance": {"type": "string"},
            "results": {"type": "array", "items": {"type": "object", "required": ["group", "ok", "status", "durationMs"], "properties": {
                "group": {"type": "string"}, "ok": {"type": "boolean"},
                "status": {"type": "integer", "nullable": true}, "durationMs": {"type": "integer", "minimum": 0},
                "bytes": {"type": "integer", "minimum": 0},
                "error": {"type": "object", "required": ["category", "kind", "message"], "properties": {
                    "category": {"type": "string", "enum": ["transient", "permanent"]},
                    "kind": {"type": "string", "enum": ["timeout", "connect", "dns", "http", "rate_limited", "tls", "body", "invalid_url", "invalid_credentials", "other"]},
                    "message": {"type": "string"}}}}}}}},
        "Plan": {"type": "object", "required": ["updatedAt", "solved_at", "pools"], "properties": {
            "updatedAt": {"type": "string", "format": "date-time"},
            "solved_at": {"type": "string", "format": "date-time"},
            "pools": {"type": "array", "items": pool_view}}},
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"}}}}},
        "FieldError": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message", "field"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                "field": {"type": "string", "description": "the invalid field, dotted (`scheduler.workers`); empty for the whole body"}}}}},
        "Health": {"type": "object", "required": ["updatedAt", "enabled", "queue", "deadLetter", "breakers", "staleness"], "properties": {
            "updatedAt": {"type": "string", "format": "date-time"},
            "enabled": {"type": "boolean"},
            "queue": {"type": "object", "required": ["depth", "dueWithinSeconds", "perType"], "properties": {
                "depth": {"type": "integer"}, "dueWithinSeconds": {"type": "integer"}, "inFlight": {"type": "integer"},
                "perType": {"type": "object", "additionalProperties": {"type": "integer"}}}},
            "deadLetter": {"type": "object", "required": ["count", "tasks"], "properties": {
                "count": {"type": "integer"}, "tasks": {"type": "array", "maxItems": 25, "items": {"$ref": "#/components/schemas/DeadLetterTask"}}}},
            "breakers": {"type": "array", "items": {"type": "object", "required": ["instance", "type", "state", "failures", "retryAt"], "properties": breaker_props}},
            "staleness": {"type": "array", "items": {"type": "object", "required": ["instance", "type", "score", "lastSuccess"], "properties": stale_props}}}},
        "DeadLetterTask": {"type": "object", "required": ["instance", "type", "nextRun", "lastError", "failures"], "properties": dl_props},
        "DeadLetterPage": {"type": "object", "required": ["count", "page", "perPage", "tasks"], "properties": {
            "count": {"type": "integer"}, "page": {"type": "integer"}, "perPage": {"type": "integer"},
            "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/DeadLetterTask"}}}},
        "TaskState": {"type": "object", "required": ["instance", "group", "nextRun", "deadLettered", "disabled", "failures"], "properties": {
            "instance": {"type": "string"}, "group": {"type": "string"}, "nextRun": ts,
            "deadLettered": {"type": "boolean"}, "disabled": {"type": "boolean"}, "failures": {"type": "integer"}}},
        "Instance": {"type": "object", "required": ["name", "type", "url", "provisioned"], "properties": instance_out},
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

pub async fn openapi(State(app): State<AppState>) -> Json<Value> {
    let cat = app.shared.catalog();
    let types: Vec<&str> = cat.types.keys().map(String::as_str).collect();
    Json(document(&types))
}

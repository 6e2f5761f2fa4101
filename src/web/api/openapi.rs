//! `GET /api/openapi.json`: an OpenAPI 3 description of the JSON API. The
//! router test walks this document, so a route missing here fails a test.

use axum::Json;
use serde_json::{Value, json};

fn err(desc: &str) -> Value {
    json!({"description": desc, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
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

pub fn document() -> Value {
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
                    {"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                    {"name": "per_page", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}}
                ],
                "responses": {"200": ok("entries", r("DeadLetterPage")), "400": err("bad query"), "401": unauthorized, "422": err("invalid parameter")}}},
            "/api/monitoring/scheduler/dead-letter/{instance}/{group}/retry": {"post": {
                "summary": "Probe a dead-lettered task now", "operationId": "retryDeadLetter",
                "parameters": task_params(),
                "responses": {"202": ok("probe scheduled", r("TaskState")), "401": unauthorized,
                    "404": err("no such task"), "409": err("not in the dead-letter queue, or running now")}}},
            "/api/monitoring/scheduler/dead-letter/{instance}/{group}": {"delete": {
                "summary": "Discard a dead-lettered task (the task is disabled until enabled again)", "operationId": "discardDeadLetter",
                "parameters": task_params(),
                "responses": {"200": ok("discarded", r("TaskState")), "401": unauthorized,
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
                "put": {"summary": "Change the event sink (partial [sink] document; null turns it off; a header sent as (hidden) keeps its value)", "operationId": "putSink",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "nullable": true}}}},
                    "responses": {"200": ok("sink in force", r("SinkDocument")), "400": err("not JSON"), "401": unauthorized,
                        "409": err("a field is locked by an environment variable"), "422": err("invalid value, naming the field")}}
            },
            "/api/settings/sink/test": {"post": {
                "summary": "Send one test event now, outside the queue", "operationId": "testSink",
                "responses": {"200": ok("delivered", json!({"type": "object", "properties": {"ok": {"type": "boolean"}}})), "401": unauthorized,
                    "502": err("not delivered (sink off, destination failed or unreachable)")}}},
            "/api/budgets": {"get": {
                "summary": "Budget pools with their configured and effective budgets", "operationId": "listBudgets",
                "responses": {"200": ok("pools", json!({"type": "object", "required": ["budgets"], "properties": {"budgets": {"type": "array", "items": r("Budget")}}})), "401": unauthorized}}},
            "/api/budgets/{name}": {"put": {
                "summary": "Change or create a budget pool (partial document; applies at once, survives restarts)", "operationId": "putBudget",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "requestBody": {"required": true, "content": {"application/json": {"schema": r("BudgetPatch")}}},
                "responses": {"200": ok("the pool in force", r("Budget")), "400": err("not JSON"), "401": unauthorized,
                    "409": err("the change would push the pool over its target with no profile set (code over_budget)"),
                    "422": err("invalid value, naming the field")}}},
            "/status": {"get": {
                "summary": "The plan page; with format=json the same document as listGroups", "operationId": "status",
                "parameters": [{"name": "format", "in": "query", "required": false, "schema": {"type": "string", "enum": ["json"]}}],
                "responses": {"200": ok("plan (HTML, or JSON with format=json)", r("Plan")), "401": unauthorized}}},
            "/api/settings/monitoring": {
                "get": {"summary": "Monitoring settings", "operationId": "getMonitoringSettings",
                    "responses": {"200": ok("settings", r("MonitoringSettings")), "401": unauthorized}},
                "put": {"summary": "Change monitoring settings (partial document; applies at once)", "operationId": "putMonitoringSettings",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": r("MonitoringSettingsPatch")}}},
                    "responses": {"200": ok("settings in force", r("MonitoringSettings")), "400": err("not JSON"), "401": unauthorized,
                        "409": err("a field is locked by an environment variable, or the settings would push a budget pool with no profile over its target (code over_budget)"), "422": err("invalid value, naming the field")}}
            },
            "/api/instances": {
                "get": {"summary": "List instances", "operationId": "listInstances",
                    "parameters": [
                        {"name": "q", "in": "query", "schema": {"type": "string"}},
                        {"name": "type", "in": "query", "schema": {"type": "string"}}
                    ],
                    "responses": {"200": ok("instances", json!({"type": "object", "required": ["count", "instances"], "properties": {"count": {"type": "integer"}, "instances": {"type": "array", "items": r("Instance")}}})), "400": err("bad query"), "401": unauthorized}},
                "post": {"summary": "Add an instance", "operationId": "createInstance",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": r("InstanceInput")}}},
                    "responses": {"201": ok("created", r("Instance")), "400": err("not JSON"), "401": unauthorized,
                        "409": err("duplicate name, or the change would push a budget pool with no profile over its target (code over_budget)"), "422": err("invalid field, named")}}
            },
            "/api/instances/{name}": {
                "parameters": name_param(),
                "get": {"summary": "One instance", "operationId": "getInstance",
                    "responses": {"200": ok("instance", r("Instance")), "401": unauthorized, "404": err("no such instance")}},
                "put": {"summary": "Replace an instance (omit `auth` to keep the stored credentials)", "operationId": "updateInstance",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": r("InstanceUpdate")}}},
                    "responses": {"200": ok("updated", r("Instance")), "400": err("not JSON"), "401": unauthorized, "404": err("no such instance"),
                        "409": err("provisioned by the config file, or over budget (code over_budget)"), "422": err("invalid field, named")}},
                "delete": {"summary": "Delete an instance", "operationId": "deleteInstance",
                    "responses": {"204": {"description": "deleted"}, "401": unauthorized, "404": err("no such instance"), "409": err("provisioned by the config file")}}
            },
            "/api/instances/{name}/test": {"post": {
                "summary": "Poll every group of the instance once, now, and show the classified results", "operationId": "testInstance",
                "parameters": name_param(),
                "responses": {"200": ok("results", json!({"type": "object"})), "401": unauthorized, "404": err("no such instance")}}},
            "/api/admin/backup": {"get": {
                "summary": "Consistent copy of the database", "operationId": "backup",
                "responses": {"200": {"description": "redb file", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "401": unauthorized}}},
            "/api/openapi.json": {"get": {
                "summary": "This document", "operationId": "openapi",
                "responses": {"200": ok("OpenAPI 3 document", json!({"type": "object"})), "401": unauthorized}}}
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas()
        }
    })
}

fn schemas() -> Value {
    let ts = json!({"type": "string", "format": "date-time", "nullable": true});
    let duration = json!({"type": "string", "pattern": "^[0-9].*$", "example": "10s"});
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

    let auth = json!({"type": "object", "required": ["kind"], "properties": {
        "kind": {"type": "string", "enum": ["none", "bearer", "header", "basic", "pve_token"]},
        "token": {"type": "string"}, "name": {"type": "string"}, "value": {"type": "string"},
        "username": {"type": "string"}, "password": {"type": "string"},
        "user": {"type": "string"}, "token_id": {"type": "string"}, "secret": {"type": "string"}
    }});
    let instance_props = json!({
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
        "type": {"type": "string"},
        "url": {"type": "string"},
        "timeout": duration,
        "budget": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "enabled": {"type": "boolean"},
        "auth": auth,
        "tls_verify": {"type": "boolean"},
        "tls_fingerprint": {"type": "string"},
        "max_response_bytes": {"type": "integer", "minimum": 1, "maximum": 1073741824}
    });
    let mut instance_out = instance_props.clone();
    instance_out["provisioned"] = json!({"type": "boolean"});
    let mut update_props = instance_props.clone();
    update_props.as_object_mut().map(|o| o.remove("name"));
    update_props["name"] = json!({"type": "string"});

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
                "url": {"type": "string"}, "headers": {"type": "object", "additionalProperties": {"type": "string", "enum": ["(hidden)"]}},
                "batch_size": {"type": "integer"}, "buffering": duration.clone(), "retry_limit": duration.clone(),
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
            "properties": {"name": {"type": "string"}, "requests_per_second": {"type": "number", "exclusiveMinimum": 0},
                "shared_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "burst": {"type": "integer", "minimum": 1, "maximum": 100}}},
        "Plan": {"type": "object", "required": ["updatedAt", "solved_at", "pools"], "properties": {
            "updatedAt": {"type": "string", "format": "date-time"},
            "solved_at": {"type": "string", "format": "date-time"},
            "pools": {"type": "array", "items": pool_view}}},
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"}}}}},
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
        "MonitoringSettingsPatch": {"type": "object", "properties": {
            "adaptive": adaptive, "scheduler": scheduler, "failure": failure,
            "locked": {"type": "object"}}}
    })
}

pub async fn openapi() -> Json<Value> {
    Json(document())
}

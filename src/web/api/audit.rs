//! `GET /api/admin/audit`: the audit trail, newest first. Who did what
//! (logins, tokens, settings, instances with the fields changed but never
//! their values, operator actions), from where and when.

use crate::store::AuditEntry;
use crate::web::AppState;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody, QueryParams};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// Entries per page unless `limit` says.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Entries to return (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Only entries older than this one (the `next` of the previous page).
    #[param(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)]
    pub before: Option<u64>,
}

/// One entry of the audit trail.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditView {
    /// Its place in the trail (later entries have higher numbers).
    pub seq: u64,
    /// RFC 3339, UTC.
    pub time: String,
    /// Who: `user:NAME`, `token:NAME(ID)`, `cli` (on a stopped server) or
    /// `cli:UID` (through the running server's control socket).
    pub actor: String,
    /// What: `login`, `login.failed`, `token.create`, `token.revoke`,
    /// `password.change`, `account.create` (the first admin, through
    /// `/setup`), `token.failed`, `instance.create|update|delete`,
    /// `settings.monitoring|budget|sink`, `dead_letter.retried|discarded|enabled`,
    /// `config.reload`.
    pub action: String,
    /// What it was done to: a user, token, instance, pool or task.
    pub target: String,
    /// The client's address (the peer, or what a trusted proxy forwarded);
    /// none for a change made on the command line.
    pub source: Option<String>,
    /// The fields an instance or settings change set (never the values).
    pub fields: Vec<String>,
    /// `login.failed` and `token.failed`: the failures from this source in
    /// one window that the entry stands for (it is updated in place as more
    /// come); absent on other entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

impl AuditView {
    /// The view of a stored entry (its line is the change event).
    pub fn of(e: &AuditEntry) -> AuditView {
        let v: Value = serde_json::from_str(&e.line).unwrap_or(Value::Null);
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let names = |x: Option<&Value>| -> Vec<String> {
            match x {
                Some(Value::Array(a)) => a.iter().filter_map(|f| f.as_str().map(String::from)).collect(),
                Some(Value::Object(m)) => m.keys().cloned().collect(),
                _ => Vec::new(),
            }
        };
        let (action, target, fields) = match v.get("kind").and_then(Value::as_str) {
            Some("settings") => (
                format!("settings.{}", text("section")),
                text("section"),
                names(v.get("change")),
            ),
            Some("dead_letter") => (
                format!("dead_letter.{}", text("action")),
                format!("{}/{}", text("instance"), text("group")),
                Vec::new(),
            ),
            _ => (text("action"), text("target"), names(v.get("fields"))),
        };
        AuditView {
            seq: e.seq,
            time: e.time.to_rfc3339(),
            actor: text("actor"),
            action,
            target,
            source: e.source.clone(),
            fields,
            count: v.get("count").and_then(Value::as_u64),
        }
    }
}

/// A page of the audit trail.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    pub entries: Vec<AuditView>,
    /// `before` for the next (older) page; none at the end.
    pub next: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/api/admin/audit",
    operation_id = "audit",
    summary = "The audit trail, newest first (admin tokens only)",
    params(AuditQuery),
    responses(
        (status = 200, description = "entries", body = AuditPage),
        (status = 400, description = "a query parameter given twice (named in `field`)", body = ErrorBody),
        (status = 403, description = "a read token", body = ErrorBody),
        (status = 422, description = "invalid query parameter (named in `field`)", body = FieldErrorBody),
    ),
)]
pub async fn list(
    State(app): State<AppState>,
    QueryParams(q): QueryParams<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::invalid(crate::model::FieldError::new(
            "limit",
            limit,
            format!("must be between 1 and {MAX_LIMIT}"),
        )));
    }
    if let Some(b) = q.before
        && (b == 0 || b > i64::MAX as u64)
    {
        return Err(ApiError::invalid(crate::model::FieldError::new(
            "before",
            b,
            format!("must be between 1 and {}", i64::MAX),
        )));
    }
    let before = q.before;
    let entries = app.with_store(move |s| s.audit_page(before, limit + 1)).await?;
    let more = entries.len() > limit;
    let entries: Vec<AuditView> = entries.iter().take(limit).map(AuditView::of).collect();
    let next = if more { entries.last().map(|e| e.seq) } else { None };
    Ok(Json(AuditPage { entries, next }))
}

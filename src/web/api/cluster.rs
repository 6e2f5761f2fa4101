//! `GET /api/cluster`: the members of the cluster this member is in and
//! what each owns (404 on a server without `[cluster]`).

use super::schema;
use crate::cluster::Status;
use crate::web::AppState;
use crate::web::error::{ApiError, ErrorBody};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

/// The cluster as this member sees it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    /// This member's name.
    #[schema(schema_with = schema::plain_string)]
    pub member: String,
    /// `cluster.min_members`.
    pub min_members: usize,
    /// Fewer live members than `minMembers`: this member polls nothing.
    pub polling_paused: bool,
    /// This member's config differs from the majority's: it owns nothing.
    pub config_mismatch: bool,
    pub members: Vec<MemberView>,
    /// Ownership changes of the last hour, oldest first.
    pub changes: Vec<ChangeView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    #[schema(schema_with = schema::plain_string)]
    pub name: String,
    /// `live`, `suspect` or `down`.
    #[schema(schema_with = schema::plain_string)]
    pub state: String,
    /// It has settled and may own units.
    pub ready: bool,
    /// Its gossip address (UDP).
    #[schema(schema_with = schema::plain_string)]
    pub address: String,
    #[schema(schema_with = schema::plain_string)]
    pub config_hash: Option<String>,
    /// When its heartbeat last moved, as this member heard it (RFC 3339).
    #[schema(schema_with = schema::plain_string)]
    pub last_heard: Option<String>,
    /// The pools it polls, and the instances it polls that have no pool.
    pub units: Vec<String>,
    /// Tasks on its schedule.
    pub tasks: usize,
    /// Their planned demand, requests per second.
    pub rps: f64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeView {
    #[schema(schema_with = schema::plain_string)]
    pub at: String,
    /// `pool:<name>` or `instance:<name>`.
    #[schema(schema_with = schema::plain_string)]
    pub unit: String,
    #[schema(schema_with = schema::plain_string)]
    pub from: Option<String>,
    #[schema(schema_with = schema::plain_string)]
    pub to: Option<String>,
}

impl ClusterView {
    pub fn of(s: &Status) -> ClusterView {
        ClusterView {
            member: s.member.clone(),
            min_members: s.min_members,
            polling_paused: s.paused,
            config_mismatch: s.mismatch,
            members: s
                .members
                .iter()
                .map(|m| MemberView {
                    name: m.name.clone(),
                    state: m.state.as_str().to_string(),
                    ready: m.ready,
                    address: m.address.to_string(),
                    config_hash: m.config_hash.clone(),
                    last_heard: m.last_heard.map(|t| t.to_rfc3339()),
                    units: m.units.clone(),
                    tasks: m.tasks,
                    rps: (m.rps * 1000.0).round() / 1000.0,
                })
                .collect(),
            changes: s
                .changes
                .iter()
                .map(|c| ChangeView {
                    at: c.at.to_rfc3339(),
                    unit: c.unit.clone(),
                    from: c.from.clone(),
                    to: c.to.clone(),
                })
                .collect(),
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/cluster",
    operation_id = "getCluster",
    summary = "The cluster's members, their state and what each owns; the ownership changes of the last hour",
    responses(
        (status = 200, description = "the cluster", body = ClusterView),
        (status = 404, description = "this server runs alone (no [cluster] section)", body = ErrorBody),
    ),
)]
pub async fn get(State(app): State<AppState>) -> Result<Json<ClusterView>, ApiError> {
    match &app.web.cluster {
        Some(c) => Ok(Json(ClusterView::of(&c.status()))),
        None => Err(ApiError::not_found(
            "this server runs alone: it has no [cluster] section",
        )),
    }
}

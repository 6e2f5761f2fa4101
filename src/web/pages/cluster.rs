//! `/cluster`: the members this member hears, their state, config hash and
//! what each polls, and the ownership changes of the last hour: the same
//! data as `GET /api/cluster`. A server without `[cluster]` says it runs
//! alone.

use super::{Layout, layout};
use crate::web::AppState;
use crate::web::api::cluster::ClusterView;
use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use tower_sessions::Session;

#[derive(Template, WebTemplate)]
#[template(path = "cluster.html")]
pub struct ClusterPage {
    pub layout: Layout,
    pub view: Option<ClusterView>,
}

pub async fn page(State(app): State<AppState>, session: Session) -> ClusterPage {
    let view = app.web.cluster.as_ref().map(|c| ClusterView::of(&c.status()));
    ClusterPage {
        layout: layout(&app, &session, "Cluster", "cluster", vec![]).await,
        view,
    }
}

//! `POST /api/admin/reload`: read the config file and the environment again
//! and put them in force, as SIGHUP does (see `crate::service::reload`). The
//! answer says what changed; a file that does not pass `check-config`'s
//! checks changes nothing and answers 422 naming the key.

use crate::service::reload::ReloadReport;
use crate::web::AppState;
use crate::web::auth::Principal;
use crate::web::error::{ApiError, ErrorBody, FieldErrorBody};
use axum::Extension;
use axum::Json;
use axum::extract::State;

#[utoipa::path(
    post,
    path = "/api/admin/reload",
    operation_id = "reloadConfig",
    summary = "Read the config file and the environment again and put them in force (as SIGHUP does)",
    description = "Instances, types, groups and presets from the file, budget pools, the settings the file sets, \
        the sink, TLS certificates and the log level are applied live, as a diff: an unchanged instance keeps \
        its schedule, breaker, dead-letter entry and values. `[server]` keys and `[log] format` wait for the \
        next start (named in `restartNeeded`). A bad file changes nothing.",
    responses(
        (status = 200, description = "the config in force, and what changed", body = ReloadReport),
        (status = 409, description = "the server was started without a reloadable config", body = ErrorBody),
        (status = 422, description = "the file (or the environment) is not valid: the running config stays; `field` names the key", body = FieldErrorBody),
    ),
)]
pub async fn reload(
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
) -> Result<Json<ReloadReport>, ApiError> {
    let Some(reloader) = app.web.reloader.clone() else {
        return Err(ApiError::conflict(
            "not_reloadable",
            "this server was started without a config to reload",
        ));
    };
    let actor = who.actor();
    Ok(Json(reloader.reload(&app.ctx(), &actor).await?))
}

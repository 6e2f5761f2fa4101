//! What the JSON API and the pages do, once: instances, settings, budget
//! pools, the event sink, dead letters and tokens. Each operation validates,
//! checks the over-budget gate, commits the change with its change event and
//! puts it in force, and refuses in the domain's words ([`ServiceError`]);
//! the web layer maps those to HTTP in one place and renders them.

pub mod backup;
pub mod budgets;
pub mod dead_letters;
pub mod error;
pub mod instances;
pub mod maintenance;
pub mod redact;
pub mod reload;
pub mod settings;
pub mod sink;
pub mod tokens;

pub use error::{Conflict, Missing, ServiceError};

use crate::engine::EngineHandle;
use crate::sink::Sink;
use crate::store::{Store, StoreError};

/// What the operations work on: the engine, through its commands and
/// queries, and the database and event sink it shares with them.
#[derive(Clone)]
pub struct Context {
    pub engine: EngineHandle,
    pub store: Store,
    pub sink: Sink,
    /// This member of a cluster: dead-letter actions on a task another
    /// member polls are carried out there.
    pub cluster: Option<crate::cluster::Cluster>,
}

/// A cluster's members read their instances, types, pools and settings
/// from the same config file: a change through the UI or the API would
/// make this member differ from the others, so it is refused (409).
pub fn refuse_in_cluster(cx: &Context, what: &str) -> Result<(), ServiceError> {
    if cx.engine.scope().is_some() {
        return Err(ServiceError::conflict(
            Conflict::Cluster,
            format!(
                "this server is a cluster member: {what} come from the config file every member reads; change the file on every member and reload (SIGHUP)"
            ),
            None,
        ));
    }
    Ok(())
}

/// Run a store call on a blocking thread: a redb transaction blocks, and
/// must neither run on an async worker nor be held across an `.await`.
async fn with_store<T: Send + 'static>(
    cx: &Context,
    f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ServiceError> {
    let store = cx.store.clone();
    match tokio::task::spawn_blocking(move || f(&store)).await {
        Ok(r) => Ok(r?),
        Err(e) => Err(ServiceError::internal(e)),
    }
}

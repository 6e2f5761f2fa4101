//! Operator actions on one task: retry a dead-lettered task now, discard
//! it (the task is disabled until enabled again), enable it again. The API
//! and the dashboard both act through these; each is committed before it
//! returns. On a cluster's member, an action on a task another member
//! polls is carried out by that member ([`crate::cluster::forward`]).

use super::Context;
use super::error::ServiceError;
use crate::cluster::forward::Refusal;
use crate::core::scheduler::OperatorOp;
use crate::model::{TaskKey, TaskRecord};

/// Probe a dead-lettered task now.
pub async fn retry(cx: &Context, key: &TaskKey, actor: &str) -> Result<TaskRecord, ServiceError> {
    let rec = act(cx, key, actor, OperatorOp::Retry).await?;
    tracing::info!(task = %key, actor, "operator retried dead-letter task");
    Ok(rec)
}

/// Drop a task from the dead-letter queue; it stays disabled until enabled
/// again.
pub async fn discard(cx: &Context, key: &TaskKey, actor: &str) -> Result<TaskRecord, ServiceError> {
    let rec = act(cx, key, actor, OperatorOp::Discard).await?;
    tracing::info!(task = %key, actor, "operator discarded dead-letter task; task disabled");
    Ok(rec)
}

/// Put a discarded task back on its schedule.
pub async fn enable(cx: &Context, key: &TaskKey, actor: &str) -> Result<TaskRecord, ServiceError> {
    let rec = act(cx, key, actor, OperatorOp::Enable).await?;
    tracing::info!(task = %key, actor, "operator enabled task");
    Ok(rec)
}

/// Here, or on the member that polls the task.
async fn act(cx: &Context, key: &TaskKey, actor: &str, op: OperatorOp) -> Result<TaskRecord, ServiceError> {
    if let (Some(cluster), Some(scope)) = (&cx.cluster, cx.engine.scope()) {
        let elsewhere = cx
            .engine
            .full_catalog()
            .instances
            .get(&*key.instance)
            .map(|e| crate::core::ownership::unit_of(&e.config))
            .is_some_and(|u| !scope.contains(&u));
        if elsewhere {
            return cluster.forward(key, actor, op).await.map_err(|e| match e {
                Refusal::Op(e) => crate::engine::EngineError::Op(e).into(),
                e @ (Refusal::Failed(_) | Refusal::NoAnswer(_)) => ServiceError::Unavailable(e.to_string()),
            });
        }
    }
    Ok(cx.engine.operator_action(key, actor, op).await?)
}

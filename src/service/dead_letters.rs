//! Operator actions on one task: retry a dead-lettered task now, discard
//! it (the task is disabled until enabled again), enable it again. The API
//! and the dashboard both act through these; each is committed before it
//! returns.

use super::Context;
use super::error::ServiceError;
use crate::core::scheduler::OperatorOp;
use crate::model::{TaskKey, TaskRecord};

/// Probe a dead-lettered task now.
pub async fn retry(cx: &Context, key: &TaskKey, actor: &str) -> Result<TaskRecord, ServiceError> {
    let rec = cx.engine.operator_action(key, actor, OperatorOp::Retry).await?;
    tracing::info!(task = %key, actor, "operator retried dead-letter task");
    Ok(rec)
}

/// Drop a task from the dead-letter queue; it stays disabled until enabled
/// again.
pub async fn discard(cx: &Context, key: &TaskKey, actor: &str) -> Result<TaskRecord, ServiceError> {
    let rec = cx.engine.operator_action(key, actor, OperatorOp::Discard).await?;
    tracing::info!(task = %key, actor, "operator discarded dead-letter task; task disabled");
    Ok(rec)
}

/// Put a discarded task back on its schedule.
pub async fn enable(cx: &Context, key: &TaskKey, actor: &str) -> Result<TaskRecord, ServiceError> {
    let rec = cx.engine.operator_action(key, actor, OperatorOp::Enable).await?;
    tracing::info!(task = %key, actor, "operator enabled task");
    Ok(rec)
}

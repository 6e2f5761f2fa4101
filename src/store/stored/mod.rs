//! The on-disk shape of every table value, defined here rather than by the
//! domain types: each stored type names its JSON fields explicitly (the names
//! today's files hold) and converts to and from its domain type. Renaming a
//! domain field changes a conversion, never the file; changing a stored
//! type's shape is a new format version with an upgrade from the old one
//! (see `codec`), and the byte fixtures in this module's tests fail if a
//! shape changes by accident.
//!
//! A type read back is owned (`StoredTask`); a type written on the hot path
//! has a borrowing twin (`StoredTaskRef<'a>`), so the group commit writes a
//! record without copying it. Durations are text (`10s`, `250ms`) as
//! `model::duration_str` writes and reads them, the fixtures included,
//! except in the binary task record (format 2), which holds them as serde's
//! seconds and nanoseconds.

mod aimd;
mod audit;
mod instance;
mod latest;
mod maintenance;
mod secret;
mod sink;
mod task;
mod values;

#[cfg(test)]
mod tests;

pub(crate) use aimd::StoredAimd;
pub(crate) use audit::{StoredAudit, StoredAuditRef};
pub(crate) use instance::StoredInstance;
pub(crate) use latest::{StoredBody, StoredBodyRef, StoredValues, StoredValuesRef};
pub(crate) use maintenance::StoredMaintenance;
pub(crate) use sink::StoredSink;
pub(crate) use task::{StoredTask, StoredTaskRef, encode_v1 as encode_task_v1};
pub(crate) use values::{
    StoredOutboxEvent, StoredOutboxEventRef, StoredRollup, StoredSession, StoredSettings, StoredSettingsRef,
    StoredToken, StoredUser,
};

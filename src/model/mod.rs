//! Shared vocabulary: settings, instances, types and endpoint groups, timestamps
//! and poll outcomes. Plain data with serde and validation; no I/O. One file
//! an idea; everything is re-exported here, so `crate::model::X` names it.
//!
//! The same serde representation serves the config file (§7), the settings API
//! (§6) and the stored settings, so a value written in one place reads the same
//! in the others.

mod base_url;
mod instance;
mod name;
mod outcome;
mod record;
mod secret;
mod settings;
mod time;
mod types;
mod values;

pub use base_url::*;
pub use instance::*;
pub use name::*;
pub use outcome::*;
pub use record::*;
pub use secret::*;
pub use settings::*;
pub use time::*;
pub use types::*;
pub use values::*;

use serde::Serialize;
use std::fmt;
use std::sync::Arc;

/// (instance, endpoint group): the unit of scheduling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    pub instance: Arc<str>,
    pub group: Arc<str>,
}

impl TaskKey {
    pub fn new(instance: &str, group: &str) -> Self {
        TaskKey {
            instance: Arc::from(instance),
            group: Arc::from(group),
        }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.instance, self.group)
    }
}

/// A validation failure that names the offending field (dotted path, e.g.
/// `adaptive.min_interval` or `instances[2].url`) and value.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[error("{field} = {value}: {message}")]
pub struct FieldError {
    pub field: String,
    pub value: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, value: impl fmt::Display, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }
}

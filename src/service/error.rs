//! What a service refuses, in the domain's words. The web layer maps each
//! variant to a status and a code in one place (`web::error`); the CLI or a
//! test reads them as they are.

use crate::core::plan::OverBudget;
use crate::model::{FieldError, TaskKey};

/// Why a service did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The thing the request names does not exist.
    #[error("{0}")]
    NotFound(Missing),
    /// Fields that are not valid, each named (at least one).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// A document whose field does not read as its type: `message` says
    /// why, naming `field` (empty for the whole document).
    #[error("{message}")]
    Unreadable { field: String, message: String },
    /// Not JSON at all.
    #[error("invalid JSON: {0}")]
    BadJson(String),
    /// The change contradicts the state it would apply to.
    #[error("{message}")]
    Conflict {
        kind: Conflict,
        message: String,
        /// The field the conflict is about, when there is one.
        field: Option<String>,
    },
    /// The change would push a budget pool with no profile over its target.
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Anything else that is ours, not the caller's (a task that panicked,
    /// a document that does not serialise).
    #[error("{0}")]
    Internal(String),
    /// Another member should have answered and did not (503).
    #[error("{0}")]
    Unavailable(String),
}

/// What a request named that does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    Instance(String),
    Task(String),
    MaintenanceWindow(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Instance(name) => write!(f, "no instance named {name:?}"),
            Missing::Task(key) => write!(f, "no task {key}"),
            Missing::MaintenanceWindow(id) => write!(f, "no maintenance window {id:?}"),
        }
    }
}

/// The kinds of [`ServiceError::Conflict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// An instance of that name exists already.
    Duplicate,
    /// The instance is defined in the config file.
    Provisioned,
    /// An environment variable sets the field.
    Locked,
    /// The task is not in the dead-letter queue.
    NotDeadLettered,
    /// The task is being polled right now.
    InFlight,
    /// No event sink is configured.
    SinkDisabled,
    /// As many as may be exist already.
    Limit,
    /// A cluster's members share the config file: it is the source of
    /// instances, types, pools and settings.
    Cluster,
}

impl Conflict {
    /// The stable, machine-readable name of the conflict.
    pub fn code(self) -> &'static str {
        match self {
            Conflict::Duplicate => "duplicate",
            Conflict::Provisioned => "provisioned",
            Conflict::Locked => "locked",
            Conflict::NotDeadLettered => "not_dead_lettered",
            Conflict::InFlight => "in_flight",
            Conflict::SinkDisabled => "sink_disabled",
            Conflict::Limit => "limit",
            Conflict::Cluster => "cluster",
        }
    }
}

impl ServiceError {
    /// One invalid field.
    pub fn invalid(e: FieldError) -> Self {
        ServiceError::Invalid(vec![e])
    }

    /// A conflict about `field`, or about the whole change.
    pub fn conflict(kind: Conflict, message: impl Into<String>, field: Option<String>) -> Self {
        ServiceError::Conflict {
            kind,
            message: message.into(),
            field,
        }
    }

    pub fn internal(e: impl std::fmt::Display) -> Self {
        ServiceError::Internal(e.to_string())
    }

    /// No task `key`.
    pub fn no_task(key: &TaskKey) -> Self {
        ServiceError::NotFound(Missing::Task(key.to_string()))
    }
}

impl From<FieldError> for ServiceError {
    fn from(e: FieldError) -> Self {
        ServiceError::invalid(e)
    }
}

impl From<crate::engine::EngineError> for ServiceError {
    fn from(e: crate::engine::EngineError) -> Self {
        use crate::core::scheduler::OpError;
        use crate::engine::EngineError;
        match e {
            EngineError::Op(OpError::NotFound(k)) => ServiceError::NotFound(Missing::Task(k)),
            EngineError::Op(e @ OpError::NotDeadLettered(_)) => {
                ServiceError::conflict(Conflict::NotDeadLettered, e.to_string(), None)
            }
            EngineError::Op(e @ OpError::InFlight(_)) => {
                ServiceError::conflict(Conflict::InFlight, e.to_string(), None)
            }
            EngineError::Store(e) => ServiceError::Store(e),
            other => ServiceError::internal(other),
        }
    }
}

/// Read a `T` from JSON bytes, naming the field a value does not fit (never
/// echoing a secret's value, nor a URL's userinfo).
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ServiceError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ServiceError::BadJson(inner.to_string());
        }
        let mut field = if path == "." { String::new() } else { path };
        // serde quotes the value it refused: never a secret's, never a
        // URL's userinfo (the same masking as `FieldError::new`).
        let msg = if crate::model::is_secret_field(&field) {
            "invalid value (not shown: the field is a secret)".to_string()
        } else {
            crate::model::mask_userinfo(&strip_position(&inner.to_string()))
        };
        // serde reports a missing field at the object that lacks it; name
        // the field itself.
        if let Some(missing) = msg.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
            field = if field.is_empty() {
                missing.to_string()
            } else {
                format!("{field}.{missing}")
            };
            return ServiceError::Unreadable {
                message: format!("{field}: is required"),
                field,
            };
        }
        ServiceError::Unreadable {
            message: if field.is_empty() {
                msg
            } else {
                format!("{field}: {msg}")
            },
            field,
        }
    })
}

/// [`decode`] of a document that must be one JSON object: serde would also
/// read an array as the struct's fields in order, which no client means.
pub fn decode_object<T: serde::de::DeserializeOwned>(doc: &serde_json::Value) -> Result<T, ServiceError> {
    if !doc.is_object() {
        return Err(ServiceError::invalid(FieldError::new(
            "",
            doc,
            "expected a JSON object",
        )));
    }
    decode(&serde_json::to_vec(doc).unwrap_or_default())
}

fn strip_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

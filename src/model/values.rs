//! What the engine keeps of a task's last good answer: the samples its
//! group's value rules extracted, and (for `keep_body` groups) the body.

use std::sync::Arc;
use std::time::Duration;

use super::Timestamp;
use crate::values::Sample;

/// The samples one task's last successful poll gave.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskValues {
    /// The last successful poll that gave exactly these samples.
    pub polled_at: Timestamp,
    /// The age beyond which they are stale: max(3 × the task's interval,
    /// 2 min), from the interval when they were polled.
    pub stale_after: Duration,
    /// The digest of the rules that extracted them
    /// ([`crate::core::catalog::GroupRules::fingerprint`]).
    pub fingerprint: u64,
    pub samples: Arc<[Sample]>,
}

impl TaskValues {
    /// Whether they may be served as current at `now`.
    pub fn is_fresh(&self, now: Timestamp) -> bool {
        now.since(self.polled_at) <= self.stale_after
    }
}

/// One kept response body (`keep_body = true`), or the note that it was too
/// large to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyRecord {
    /// The last successful poll that answered exactly this body.
    pub polled_at: Timestamp,
    /// The response's `Content-Type` ("" if it had none).
    pub content_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// A strong validator for `ETag`: a digest of the bytes.
    pub etag: String,
    /// The body; `None` when it was larger than `max_body_bytes`.
    pub bytes: Option<Arc<[u8]>>,
}

impl BodyRecord {
    /// A kept body, its ETag computed from the bytes.
    pub fn kept(polled_at: Timestamp, content_type: &str, bytes: &[u8]) -> BodyRecord {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(bytes);
        BodyRecord {
            polled_at,
            content_type: content_type.to_string(),
            size: bytes.len() as u64,
            etag: hex::encode(&digest[..12]),
            bytes: Some(Arc::from(bytes)),
        }
    }

    /// A body that was not kept because it was `size` bytes long.
    pub fn too_large(polled_at: Timestamp, size: u64) -> BodyRecord {
        BodyRecord {
            polled_at,
            content_type: String::new(),
            size,
            etag: String::new(),
            bytes: None,
        }
    }

    /// Same body (or the same note) as `other`, whenever it was polled.
    pub fn same_content(&self, other: &BodyRecord) -> bool {
        self.etag == other.etag && self.size == other.size && self.content_type == other.content_type
    }
}

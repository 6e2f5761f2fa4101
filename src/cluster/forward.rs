//! Dead-letter actions taken on a member that does not poll the task: the
//! member that does carries them out.
//!
//! The asking member publishes `fwd/<id>` in its own gossip state: the task,
//! the action and who asked. Whichever member polls the task's unit at the
//! time carries it out once and publishes `ack/<id>`: the task's record
//! after it, or why not. The asking member answers its caller with that and
//! deletes its `fwd/<id>`; the owner deletes its `ack/<id>` once the
//! request is gone. Pure: keys and values only.

use crate::core::scheduler::{OpError, OperatorOp};
use crate::model::{TaskKey, TaskRecord};
use crate::store::wire;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

pub const REQUEST_PREFIX: &str = "fwd/";
pub const REPLY_PREFIX: &str = "ack/";

pub fn request_key(id: &str) -> String {
    format!("{REQUEST_PREFIX}{id}")
}

pub fn reply_key(id: &str) -> String {
    format!("{REPLY_PREFIX}{id}")
}

/// An action asked of whichever member polls the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub instance: String,
    pub group: String,
    pub op: OperatorOp,
    /// Who asked, on which member: `admin on m0`.
    pub actor: String,
}

impl Request {
    pub fn key(&self) -> TaskKey {
        TaskKey::new(&self.instance, &self.group)
    }
}

/// Why the owner did not carry an action out, or why nobody did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum Refusal {
    /// The owner refused it as it refuses a local action.
    #[error("{0}")]
    Op(OpError),
    /// The owner could not commit it (its store failed).
    #[error("the member that polls the task could not carry the action out: {0}")]
    Failed(String),
    /// No member answered in time: none polls the task's unit now (they
    /// are paused, or its owner is down and not yet replaced).
    #[error("no member that polls this task answered within {0} s; see GET /api/cluster for who polls what")]
    NoAnswer(u64),
}

/// What the owner publishes under `ack/<id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Reply {
    /// The task's row after the action, as the `tasks` table holds it
    /// (base64 key and value).
    Ok([String; 2]),
    Err(Refusal),
}

pub fn encode_request(r: &Request) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

pub fn decode_request(text: &str) -> Option<Request> {
    serde_json::from_str(text).ok()
}

pub fn encode_reply(result: &Result<(TaskKey, TaskRecord), Refusal>) -> String {
    let reply = match result {
        Ok((k, r)) => match wire::task_to_bytes(k, r) {
            Some((k, v)) => Reply::Ok([STANDARD.encode(k), STANDARD.encode(v)]),
            None => Reply::Err(Refusal::Failed(format!("the record of {k} does not encode"))),
        },
        Err(e) => Reply::Err(e.clone()),
    };
    serde_json::to_string(&reply).unwrap_or_default()
}

/// The owner's answer; an answer that does not read is a failure.
pub fn decode_reply(text: &str) -> Result<TaskRecord, Refusal> {
    let unreadable = || Refusal::Failed("its answer does not read".into());
    match serde_json::from_str::<Reply>(text).map_err(|_| unreadable())? {
        Reply::Ok([k, v]) => {
            let (Ok(k), Ok(v)) = (STANDARD.decode(k), STANDARD.decode(v)) else {
                return Err(unreadable());
            };
            wire::task_from_bytes(&k, &v).map(|(_, r)| r).ok_or_else(unreadable)
        }
        Reply::Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeadLetterReason, DeadLetterRecord, Timestamp};

    #[test]
    fn a_request_and_its_answers_read_back_as_written() {
        let req = Request {
            instance: "org-1".into(),
            group: "devices".into(),
            op: OperatorOp::Discard,
            actor: "admin on m0".into(),
        };
        assert_eq!(decode_request(&encode_request(&req)), Some(req.clone()));

        let rec = TaskRecord {
            failures: 3,
            disabled: true,
            dead_letter: Some(DeadLetterRecord {
                reason: DeadLetterReason::PermanentFailure,
                since: Timestamp(7),
                next_recheck: Timestamp(9),
                rechecks: 1,
            }),
            ..TaskRecord::default()
        };
        assert_eq!(decode_reply(&encode_reply(&Ok((req.key(), rec.clone())))), Ok(rec));
        for refusal in [
            Refusal::Op(OpError::NotDeadLettered("org-1/devices".into())),
            Refusal::Failed("disk full".into()),
        ] {
            assert_eq!(decode_reply(&encode_reply(&Err(refusal.clone()))), Err(refusal));
        }
        assert!(matches!(decode_reply("{\"ok\": 1}"), Err(Refusal::Failed(_))));
    }
}

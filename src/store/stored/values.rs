//! The smaller table values: a saved settings document, an operator
//! account, an API token, a browser session, a history rollup and an outbox
//! event. Each is a plain record; the outbox event, written with every batch
//! of change events, has a borrowing write side.

use serde::{Deserialize, Serialize};

use super::super::change::OutboxEvent;
use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use super::super::history::Rollup;
use super::super::sessions::SessionRow;
use super::super::tokens::{TokenInfo, TokenScope};
use super::super::users::UserRecord;
use crate::model::Timestamp;

/// A `settings` value: the JSON document an operator saved (a partial patch
/// over the file's settings, the budget pools, or the sink), kept verbatim.
/// Its shape is the settings API's; the store does not interpret it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(transparent)]
pub(crate) struct StoredSettings(pub serde_json::Value);

impl Versioned for StoredSettings {
    const WHAT: &'static str = "settings";
    const VERSION: u8 = FORMAT_JSON_V1;
}

#[derive(Debug, Serialize)]
#[serde(transparent)]
pub(crate) struct StoredSettingsRef<'a>(pub &'a serde_json::Value);

impl Encodes for StoredSettingsRef<'_> {
    type Value = StoredSettings;
}

/// A `users` value: an operator account with its argon2 hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredUser {
    #[serde(rename = "name")]
    name: String,
    #[serde(rename = "password_hash")]
    password_hash: String,
    #[serde(rename = "created")]
    created: u64,
    #[serde(rename = "updated")]
    updated: u64,
}

impl Versioned for StoredUser {
    const WHAT: &'static str = "user";
    const VERSION: u8 = FORMAT_JSON_V1;
}

impl Encodes for StoredUser {
    type Value = StoredUser;
}

impl From<&UserRecord> for StoredUser {
    fn from(u: &UserRecord) -> Self {
        StoredUser {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            created: u.created.0,
            updated: u.updated.0,
        }
    }
}

impl From<StoredUser> for UserRecord {
    fn from(u: StoredUser) -> Self {
        UserRecord {
            name: u.name,
            password_hash: u.password_hash,
            created: Timestamp(u.created),
            updated: Timestamp(u.updated),
        }
    }
}

/// A `tokens` value: what is known of a token without its plaintext. A
/// token stored before scopes existed has none and is an admin token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredToken {
    #[serde(rename = "id")]
    id: String,
    #[serde(rename = "name")]
    name: String,
    #[serde(rename = "created")]
    created: u64,
    #[serde(rename = "scope", default)]
    scope: StoredTokenScope,
}

impl Versioned for StoredToken {
    const WHAT: &'static str = "token";
    const VERSION: u8 = FORMAT_JSON_V1;
}

impl Encodes for StoredToken {
    type Value = StoredToken;
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
enum StoredTokenScope {
    #[serde(rename = "read")]
    Read,
    #[default]
    #[serde(rename = "admin")]
    Admin,
}

impl From<&TokenInfo> for StoredToken {
    fn from(t: &TokenInfo) -> Self {
        StoredToken {
            id: t.id.clone(),
            name: t.name.clone(),
            created: t.created.0,
            scope: match t.scope {
                TokenScope::Read => StoredTokenScope::Read,
                TokenScope::Admin => StoredTokenScope::Admin,
            },
        }
    }
}

impl From<StoredToken> for TokenInfo {
    fn from(t: StoredToken) -> Self {
        TokenInfo {
            id: t.id,
            name: t.name,
            created: Timestamp(t.created),
            scope: match t.scope {
                StoredTokenScope::Read => TokenScope::Read,
                StoredTokenScope::Admin => TokenScope::Admin,
            },
        }
    }
}

/// A `sessions` value: expiry (Unix seconds), the session layer's record as
/// JSON text, and the user logged in with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredSession {
    #[serde(rename = "expires")]
    expires: i64,
    #[serde(rename = "record")]
    record: String,
    #[serde(rename = "user", default)]
    user: Option<String>,
}

impl Versioned for StoredSession {
    const WHAT: &'static str = "session";
    const VERSION: u8 = FORMAT_JSON_V1;
}

impl Encodes for StoredSession {
    type Value = StoredSession;
}

impl From<&SessionRow> for StoredSession {
    fn from(s: &SessionRow) -> Self {
        StoredSession {
            expires: s.expires,
            record: s.record.clone(),
            user: s.user.clone(),
        }
    }
}

impl From<StoredSession> for SessionRow {
    fn from(s: StoredSession) -> Self {
        SessionRow {
            expires: s.expires,
            record: s.record,
            user: s.user,
        }
    }
}

/// A `history` value: what happened in one minute. Missing counts are 0.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StoredRollup {
    #[serde(rename = "polls")]
    polls: u64,
    #[serde(rename = "errors")]
    errors: u64,
    #[serde(rename = "queue_depth")]
    queue_depth: u64,
    #[serde(rename = "dead_letter")]
    dead_letter: u64,
}

impl Versioned for StoredRollup {
    const WHAT: &'static str = "rollup";
    const VERSION: u8 = FORMAT_JSON_V1;
}

impl Encodes for StoredRollup {
    type Value = StoredRollup;
}

impl From<&Rollup> for StoredRollup {
    fn from(r: &Rollup) -> Self {
        StoredRollup {
            polls: r.polls,
            errors: r.errors,
            queue_depth: r.queue_depth,
            dead_letter: r.dead_letter,
        }
    }
}

impl From<StoredRollup> for Rollup {
    fn from(r: StoredRollup) -> Self {
        Rollup {
            polls: r.polls,
            errors: r.errors,
            queue_depth: r.queue_depth,
            dead_letter: r.dead_letter,
        }
    }
}

/// An `outbox` value: a change event's id and its NDJSON line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct StoredOutboxEvent {
    #[serde(rename = "id")]
    id: String,
    #[serde(rename = "line")]
    line: String,
}

impl Versioned for StoredOutboxEvent {
    const WHAT: &'static str = "outbox event";
    const VERSION: u8 = FORMAT_JSON_V1;
}

#[derive(Debug, Serialize)]
pub(crate) struct StoredOutboxEventRef<'a> {
    #[serde(rename = "id")]
    id: &'a str,
    #[serde(rename = "line")]
    line: &'a str,
}

impl Encodes for StoredOutboxEventRef<'_> {
    type Value = StoredOutboxEvent;
}

impl<'a> From<&'a OutboxEvent> for StoredOutboxEventRef<'a> {
    fn from(e: &'a OutboxEvent) -> Self {
        StoredOutboxEventRef {
            id: &e.id,
            line: &e.line,
        }
    }
}

impl From<StoredOutboxEvent> for OutboxEvent {
    fn from(e: StoredOutboxEvent) -> Self {
        OutboxEvent::new(e.id, e.line)
    }
}

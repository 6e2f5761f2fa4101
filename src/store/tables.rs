//! The tables of `pollster.redb` and how their keys are built.
//!
//! Every table maps raw bytes to raw bytes. redb's own `&str` type unwraps
//! UTF-8 when it reads a key, so a damaged key would panic; with `&[u8]`
//! nothing inside redb interprets our bytes, and this module (for keys) and
//! `codec` (for values) turn bad bytes into [`StoreError::Corrupt`].
//!
//! Layout (values are always `codec` bytes; the value column names the
//! domain type, whose on-disk shape is its stored type in `stored`):
//!
//! | table       | key                                    | value |
//! |-------------|----------------------------------------|-------|
//! | `meta`      | `schema_version`                       | `u32` |
//! |             | `outbox_next_seq`                      | `u64`, the next `outbox` key |
//! |             | `audit_next_seq`                       | `u64`, the next `audit` / `audit_failed` key |
//! |             | `audit_caps`                           | `[u64; 2]`, when set: the entries `audit` and `audit_failed` keep, instead of 100,000 and 10,000 |
//! | `tasks`     | instance `\0` group                    | `TaskRecord` (`StoredTask`, format 2 binary): a task's schedule, failures, breaker, dead-letter state |
//! | `instances` | instance name                          | `InstanceConfig` (`StoredInstance`) added from the UI or API (the config file's are not stored); its credentials sealed (`sealing`) |
//! | `settings`  | `monitoring`                           | JSON patch over the file's monitoring settings |
//! |             | `budgets`                              | JSON object: budget pools changed from the UI or API, by name |
//! |             | `sink`                                 | JSON: the event sink's settings, or `null` for off (`StoredSink`: header values and a URL password sealed) |
//! | `tokens`    | SHA-256 of the token plaintext (32 bytes) | `TokenInfo` (`StoredToken`): id, name, scope, created |
//! | `users`     | user name (`admin`)                    | `UserRecord` (`StoredUser`): argon2 password hash (PHC string) |
//! | `sessions`  | SHA-256 of the session id (hex)        | `SessionRow` (`StoredSession`): expiry, user, the record with its id blanked; never copied into a backup |
//! | `history`   | minute start, Unix seconds, `u64` big-endian | `Rollup` (`StoredRollup`): polls, errors, queue depth and dead-letter count of that minute |
//! | `outbox`    | sequence, `u64` big-endian             | `OutboxEvent` (`StoredOutboxEvent`): a change event to deliver, deleted once a receiver took it |
//! | `values`    | instance `\0` group                    | `TaskValues` (`StoredValues`): the samples a task's value rules gave at its last good poll, written when they change |
//! | `bodies`    | instance `\0` group `\0` fan-out item ("" for none) | `BodyRecord` (`StoredBody`): a `keep_body` group's last good body, written when it changes |
//! | `audit`     | sequence, `u64` big-endian             | `AuditEntry` (`StoredAudit`): who changed what, from where, when: an operator action's or settings change's event line; the last 90 days or 100,000 entries |
//! | `audit_failed` | sequence, `u64` big-endian (the `audit` sequence) | `AuditEntry` (`StoredAudit`): failed logins and token requests, one entry per address and window, updated in place; a share of the trail of their own (10,000 entries, 90 days), so no flood of them pushes an operator action out |
//! | `aimd`      | budget pool name                       | `AimdState` (`StoredAimd`): the pool's effective budget, last decrease and 429 (and its level), recovery in progress |
//! | `maintenance` | window id                            | `MaintenanceWindow` (`StoredMaintenance`): what a maintenance window covers, when it is open, why and who made it; deleted when an operator ends it |
//!
//! The `meta` table's name, types and `schema_version` entry are a contract
//! with every past and future release: that is how a release recognises a
//! file written by a newer one.

use redb::TableDefinition;

use super::StoreError;
use super::codec::display_key;
use crate::model::TaskKey;

pub(crate) type BytesTable = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// A table: its name (for messages) and its definition.
#[derive(Clone, Copy)]
pub(crate) struct Table {
    pub name: &'static str,
    pub def: BytesTable,
}

const fn table(name: &'static str) -> Table {
    Table {
        name,
        def: TableDefinition::new(name),
    }
}

pub(crate) const META: Table = table("meta");
pub(crate) const TASKS: Table = table("tasks");
pub(crate) const INSTANCES: Table = table("instances");
pub(crate) const SETTINGS: Table = table("settings");
pub(crate) const TOKENS: Table = table("tokens");
pub(crate) const USERS: Table = table("users");
pub(crate) const SESSIONS: Table = table("sessions");
pub(crate) const HISTORY: Table = table("history");
pub(crate) const OUTBOX: Table = table("outbox");
pub(crate) const VALUES: Table = table("values");
pub(crate) const BODIES: Table = table("bodies");
pub(crate) const AIMD: Table = table("aimd");
pub(crate) const AUDIT: Table = table("audit");
pub(crate) const AUDIT_FAILED: Table = table("audit_failed");
pub(crate) const MAINTENANCE: Table = table("maintenance");

/// Every table: created at open, copied by backup. A new table goes here.
pub(crate) const ALL: [Table; 15] = [
    META,
    TASKS,
    INSTANCES,
    SETTINGS,
    TOKENS,
    USERS,
    SESSIONS,
    HISTORY,
    OUTBOX,
    VALUES,
    BODIES,
    AIMD,
    AUDIT,
    AUDIT_FAILED,
    MAINTENANCE,
];

/// `meta` key holding the schema version.
pub(crate) const SCHEMA_VERSION_KEY: &[u8] = b"schema_version";

const SEP: u8 = 0;

/// Instance names end at the first `\0` of a task key, so they must not hold one.
pub(crate) fn check_instance_name(name: &str) -> Result<(), StoreError> {
    if name.as_bytes().contains(&SEP) {
        return Err(StoreError::InvalidKey {
            key: display_key(name.as_bytes()),
            reason: "an instance name must not contain a NUL character",
        });
    }
    Ok(())
}

/// `instance \0 group`.
pub fn task_key(key: &TaskKey) -> Result<Vec<u8>, StoreError> {
    check_instance_name(&key.instance)?;
    let mut out = Vec::with_capacity(key.instance.len() + 1 + key.group.len());
    out.extend_from_slice(key.instance.as_bytes());
    out.push(SEP);
    out.extend_from_slice(key.group.as_bytes());
    Ok(out)
}

/// The inverse of [`task_key`]; bad bytes are `Corrupt`, never a panic.
pub fn parse_task_key(bytes: &[u8]) -> Result<TaskKey, StoreError> {
    let corrupt = |reason: &str| StoreError::Corrupt {
        table: TASKS.name,
        key: display_key(bytes),
        reason: reason.to_string(),
    };
    let at = bytes
        .iter()
        .position(|b| *b == SEP)
        .ok_or_else(|| corrupt("key has no NUL between instance and group"))?;
    let instance = std::str::from_utf8(&bytes[..at]).map_err(|_| corrupt("instance is not UTF-8"))?;
    let group = std::str::from_utf8(&bytes[at + 1..]).map_err(|_| corrupt("group is not UTF-8"))?;
    Ok(TaskKey::new(instance, group))
}

/// `instance \0 group \0 item` (item "" for a group without fan-out).
pub fn body_key(key: &TaskKey, item: &str) -> Result<Vec<u8>, StoreError> {
    let mut out = task_key(key)?;
    out.push(SEP);
    out.extend_from_slice(item.as_bytes());
    Ok(out)
}

/// The inverse of [`body_key`]: the task and the item.
pub fn parse_body_key(bytes: &[u8]) -> Result<(TaskKey, String), StoreError> {
    let corrupt = |reason: &str| StoreError::Corrupt {
        table: BODIES.name,
        key: display_key(bytes),
        reason: reason.to_string(),
    };
    let at = bytes
        .iter()
        .rposition(|b| *b == SEP)
        .ok_or_else(|| corrupt("key has no NUL before the item"))?;
    let key = parse_task_key(&bytes[..at]).map_err(|_| corrupt("bad task part"))?;
    let item = std::str::from_utf8(&bytes[at + 1..]).map_err(|_| corrupt("item is not UTF-8"))?;
    Ok((key, item.to_string()))
}

/// Bounds `[instance\0, instance\x01)`: exactly the task keys of `instance`.
pub(crate) fn instance_task_range(instance: &str) -> Result<(Vec<u8>, Vec<u8>), StoreError> {
    check_instance_name(instance)?;
    let mut lo = instance.as_bytes().to_vec();
    let mut hi = lo.clone();
    lo.push(SEP);
    hi.push(SEP + 1);
    Ok((lo, hi))
}

/// A text key read back from a table; bad UTF-8 is `Corrupt`.
pub(crate) fn str_key<'a>(table: &'static str, bytes: &'a [u8]) -> Result<&'a str, StoreError> {
    std::str::from_utf8(bytes).map_err(|_| StoreError::Corrupt {
        table,
        key: display_key(bytes),
        reason: "key is not UTF-8".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_keys_round_trip() {
        let k = TaskKey::new("pve-1", "nodes/status");
        let bytes = task_key(&k).expect("encode");
        assert_eq!(bytes, b"pve-1\0nodes/status");
        assert_eq!(parse_task_key(&bytes).expect("parse"), k);
        // A NUL inside the group is still unambiguous: the instance ends at the first one.
        let odd = TaskKey::new("a", "b\0c");
        assert_eq!(parse_task_key(&task_key(&odd).expect("encode")).expect("parse"), odd);
    }

    #[test]
    fn instance_with_nul_is_rejected() {
        let err = task_key(&TaskKey::new("a\0b", "g")).unwrap_err();
        assert!(matches!(err, StoreError::InvalidKey { .. }), "{err:?}");
        assert!(instance_task_range("x\0").is_err());
    }

    #[test]
    fn bad_task_keys_are_corrupt() {
        for bad in [&b"no-separator"[..], b"\xff\0g", b"i\0\xff"] {
            let err = parse_task_key(bad).unwrap_err();
            assert!(matches!(err, StoreError::Corrupt { table: "tasks", .. }), "{err:?}");
        }
    }

    #[test]
    fn instance_range_excludes_longer_names() {
        let (lo, hi) = instance_task_range("web").expect("range");
        let inside = task_key(&TaskKey::new("web", "g")).expect("key");
        let other = task_key(&TaskKey::new("web2", "g")).expect("key");
        let shorter = task_key(&TaskKey::new("we", "g")).expect("key");
        assert!(lo <= inside && inside < hi);
        assert!(!(lo <= other && other < hi));
        assert!(!(lo <= shorter && shorter < hi));
    }
}

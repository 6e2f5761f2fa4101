//! Browser sessions: opaque records keyed by the SHA-256 of the session id
//! (never the id itself, so a copy of the file, or a backup, holds nothing
//! that logs anyone in), with their expiry (Unix seconds) and user kept
//! beside the record so expired ones can be pruned, and a user's sessions
//! ended, without decoding them.

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::stored::StoredSession;
use super::tables::SESSIONS;
use super::{Ctx, Store, StoreError, codec};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRow {
    /// Unix seconds after which the session is void.
    pub expires: i64,
    /// The session record as the session layer serialised it (JSON text:
    /// its id is a 128-bit integer, which a JSON value tree cannot hold),
    /// with the id blanked.
    pub record: String,
    /// Who is logged in with it, if anyone.
    #[serde(default)]
    pub user: Option<String>,
}

/// How [`Store::put_session`] treats an existing row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionWrite {
    /// A new session: an existing key is an id collision and is left alone.
    Create,
    /// An update: a session that is gone (logged out, ended by a password
    /// change) stays gone.
    Update,
}

/// The stored key of a session id: SHA-256, hex.
pub fn session_key(id: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(id.as_bytes()))
}

fn is_hashed_key(k: &[u8]) -> bool {
    k.len() == 64 && k.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

impl Store {
    pub fn get_session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
        match table.get(id.as_bytes()).ctx("reading table sessions")? {
            Some(v) => Ok(Some(decode_session(id.as_bytes(), v.value())?)),
            None => Ok(None),
        }
    }

    /// Write a session under `key` ([`session_key`]). Returns `false`, and
    /// writes nothing, for a [`SessionWrite::Create`] whose key exists or an
    /// [`SessionWrite::Update`] whose key does not.
    pub fn put_session(&self, key: &str, row: &SessionRow, mode: SessionWrite) -> Result<bool, StoreError> {
        let v = codec::encode_stored(&StoredSession::from(row))?;
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
            let exists = table.get(key.as_bytes()).ctx("reading table sessions")?.is_some();
            if exists != (mode == SessionWrite::Update) {
                return Ok(false);
            }
            table.insert(key.as_bytes(), v.as_slice()).ctx("writing a session")?;
        }
        txn.commit().ctx("committing a session")?;
        Ok(true)
    }

    /// How many sessions are stored, expired ones included.
    pub fn session_count(&self) -> Result<u64, StoreError> {
        use redb::ReadableTableMetadata;
        let txn = self.read_txn()?;
        let table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
        table.len().ctx("counting sessions")
    }

    /// End every session of `user` but the one stored under `keep`.
    /// Returns how many were ended.
    pub fn delete_user_sessions(&self, user: &str, keep: Option<&str>) -> Result<usize, StoreError> {
        let txn = self.write_txn()?;
        let mut n = 0;
        {
            let mut table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
            table
                .retain(|k, v| {
                    let theirs = decode_session(k, v).is_ok_and(|row| row.user.as_deref() == Some(user));
                    let end = theirs && keep.is_none_or(|keep| keep.as_bytes() != k);
                    if end {
                        n += 1;
                    }
                    !end
                })
                .ctx("ending sessions")?;
        }
        txn.commit().ctx("committing sessions")?;
        Ok(n)
    }

    pub fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
            table.remove(id.as_bytes()).ctx("deleting a session")?;
        }
        txn.commit().ctx("committing a session")
    }

    /// Delete every session that expired before `now` (Unix seconds), every
    /// row that cannot be read, and rows an older release keyed by the bare
    /// session id. Returns how many were removed.
    pub fn prune_sessions(&self, now: i64) -> Result<usize, StoreError> {
        let txn = self.write_txn()?;
        let removed;
        {
            let mut table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
            let mut n = 0;
            table
                .retain(|k, v| {
                    let keep = is_hashed_key(k) && decode_session(k, v).is_ok_and(|row| row.expires >= now);
                    if !keep {
                        n += 1;
                    }
                    keep
                })
                .ctx("pruning sessions")?;
            removed = n;
        }
        txn.commit().ctx("committing sessions")?;
        Ok(removed)
    }
}

fn decode_session(key: &[u8], value: &[u8]) -> Result<SessionRow, StoreError> {
    codec::decode_stored::<StoredSession>(SESSIONS.name, key, value).map(SessionRow::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sessions_round_trip_collide_and_prune() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        let row = |e| SessionRow {
            expires: e,
            record: json!({"user": "admin"}).to_string(),
            user: Some("admin".into()),
        };
        let (a, b) = (session_key("a"), session_key("b"));
        assert_eq!(a.len(), 64);
        assert!(
            !s.put_session(&a, &row(100), SessionWrite::Update)
                .expect("update of nothing")
        );
        assert_eq!(s.get_session(&a).expect("get"), None, "an update does not create");
        assert!(s.put_session(&a, &row(100), SessionWrite::Create).expect("put"));
        assert!(!s.put_session(&a, &row(999), SessionWrite::Create).expect("collision"));
        assert_eq!(s.get_session(&a).expect("get").map(|r| r.expires), Some(100));
        assert!(s.put_session(&b, &row(300), SessionWrite::Create).expect("put"));
        assert!(s.put_session(&b, &row(300), SessionWrite::Update).expect("update"));
        // A row keyed by a bare id (an older release) is pruned whatever its expiry.
        assert!(s.put_session("legacy", &row(900), SessionWrite::Create).expect("put"));
        assert_eq!(s.prune_sessions(200).expect("prune"), 2);
        assert_eq!(s.get_session(&a).expect("get"), None);
        assert_eq!(s.get_session("legacy").expect("get"), None);
        assert!(s.get_session(&b).expect("get").is_some());
        s.delete_session(&b).expect("delete");
        assert_eq!(s.get_session(&b).expect("get"), None);
    }

    #[test]
    fn a_users_other_sessions_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        let row = |user: Option<&str>| SessionRow {
            expires: i64::MAX,
            record: "{}".into(),
            user: user.map(str::to_string),
        };
        let keys: Vec<String> = ["1", "2", "3", "4"].iter().map(|i| session_key(i)).collect();
        s.put_session(&keys[0], &row(Some("admin")), SessionWrite::Create)
            .expect("put");
        s.put_session(&keys[1], &row(Some("admin")), SessionWrite::Create)
            .expect("put");
        s.put_session(&keys[2], &row(Some("other")), SessionWrite::Create)
            .expect("put");
        s.put_session(&keys[3], &row(None), SessionWrite::Create).expect("put");
        assert_eq!(s.delete_user_sessions("admin", Some(&keys[0])).expect("end"), 1);
        assert!(s.get_session(&keys[0]).expect("get").is_some(), "the kept one stays");
        assert!(s.get_session(&keys[1]).expect("get").is_none());
        assert!(s.get_session(&keys[2]).expect("get").is_some());
        assert!(s.get_session(&keys[3]).expect("get").is_some());
    }
}

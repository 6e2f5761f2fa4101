//! Browser sessions: opaque records keyed by session id, with their expiry
//! (Unix seconds) kept beside the record so expired ones can be pruned
//! without decoding them.

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::tables::SESSIONS;
use super::{Ctx, Store, StoreError, codec};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRow {
    /// Unix seconds after which the session is void.
    pub expires: i64,
    /// The session record as the session layer serialised it (JSON text:
    /// its id is a 128-bit integer, which a JSON value tree cannot hold).
    pub record: String,
}

impl Store {
    pub fn get_session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
        match table.get(id.as_bytes()).ctx("reading table sessions")? {
            Some(v) => Ok(Some(codec::decode(SESSIONS.name, id.as_bytes(), v.value())?)),
            None => Ok(None),
        }
    }

    /// Insert or replace. With `only_if_new`, an existing id is left alone
    /// and `false` is returned (id collision).
    pub fn put_session(&self, id: &str, row: &SessionRow, only_if_new: bool) -> Result<bool, StoreError> {
        let v = codec::encode("session", row)?;
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
            if only_if_new && table.get(id.as_bytes()).ctx("reading table sessions")?.is_some() {
                return Ok(false);
            }
            table.insert(id.as_bytes(), v.as_slice()).ctx("writing a session")?;
        }
        txn.commit().ctx("committing a session")?;
        Ok(true)
    }

    pub fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
            table.remove(id.as_bytes()).ctx("deleting a session")?;
        }
        txn.commit().ctx("committing a session")
    }

    /// Delete every session that expired before `now` (Unix seconds), and
    /// every row that cannot be read. Returns how many were removed.
    pub fn prune_sessions(&self, now: i64) -> Result<usize, StoreError> {
        let txn = self.write_txn()?;
        let removed;
        {
            let mut table = txn.open_table(SESSIONS.def).ctx("opening table sessions")?;
            let mut n = 0;
            table
                .retain(|k, v| {
                    let keep = codec::decode::<SessionRow>(SESSIONS.name, k, v).is_ok_and(|row| row.expires >= now);
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
        };
        assert!(s.put_session("a", &row(100), true).expect("put"));
        assert!(!s.put_session("a", &row(999), true).expect("collision"));
        assert_eq!(s.get_session("a").expect("get").map(|r| r.expires), Some(100));
        assert!(s.put_session("b", &row(300), false).expect("put"));
        assert_eq!(s.prune_sessions(200).expect("prune"), 1);
        assert_eq!(s.get_session("a").expect("get"), None);
        assert!(s.get_session("b").expect("get").is_some());
        s.delete_session("b").expect("delete");
        assert_eq!(s.get_session("b").expect("get"), None);
    }
}

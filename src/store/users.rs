//! Operator accounts. Only the password hash (argon2, PHC string) is stored;
//! hashing happens in `crate::accounts`, off the async threads.

use redb::ReadableTableMetadata;
use serde::{Deserialize, Serialize};

use super::change::{OutboxEvent, delivered};
use super::events;
use super::stored::StoredUser;
use super::tables::USERS;
use super::{Ctx, Store, StoreError, codec};
use crate::model::Timestamp;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserRecord {
    pub name: String,
    /// PHC string, e.g. `$argon2id$v=19$…`.
    pub password_hash: String,
    pub created: Timestamp,
    pub updated: Timestamp,
}

impl Store {
    pub fn get_user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(USERS.def).ctx("opening table users")?;
        match table.get(name.as_bytes()).ctx("reading table users")? {
            Some(v) => {
                let stored: StoredUser = codec::decode_stored(USERS.name, name.as_bytes(), v.value())?;
                Ok(Some(stored.into()))
            }
            None => Ok(None),
        }
    }

    pub fn put_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        self.put_user_with_events(user, &[])
    }

    /// [`Store::put_user`] and `events` appended to the outbox, in one
    /// transaction.
    pub fn put_user_with_events(&self, user: &UserRecord, events: &[OutboxEvent]) -> Result<(), StoreError> {
        let v = codec::encode_stored(&StoredUser::from(user))?;
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(USERS.def).ctx("opening table users")?;
            table.insert(user.name.as_bytes(), v.as_slice()).ctx("writing a user")?;
        }
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing a user")
    }

    pub fn user_count(&self) -> Result<u64, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(USERS.def).ctx("opening table users")?;
        table.len().ctx("counting users")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_round_trip_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let s = Store::open(dir.path()).expect("open");
            assert_eq!(s.user_count().expect("count"), 0);
            assert_eq!(s.get_user("admin").expect("get"), None);
            let u = UserRecord {
                name: "admin".into(),
                password_hash: "$argon2id$x".into(),
                created: Timestamp(1),
                updated: Timestamp(2),
            };
            s.put_user(&u).expect("put");
        }
        let s = Store::open(dir.path()).expect("reopen");
        assert_eq!(s.user_count().expect("count"), 1);
        assert_eq!(s.get_user("admin").expect("get").map(|u| u.updated), Some(Timestamp(2)));
    }
}

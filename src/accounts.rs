//! Operator accounts: the single `admin` user, passwords hashed with argon2id.
//! Hashing is deliberately slow; callers on async threads use
//! `spawn_blocking`.

use crate::model::Timestamp;
use crate::store::{OutboxEvent, Store, StoreError, UserRecord};
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString, rand_core::OsRng};

pub const ADMIN: &str = "admin";
pub const MIN_PASSWORD_LEN: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("password must be at least {MIN_PASSWORD_LEN} characters")]
    TooShort,
    #[error("password must not be longer than 1024 bytes")]
    TooLong,
    #[error("could not hash the password: {0}")]
    Hash(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub fn check_password_rules(pw: &str) -> Result<(), AccountError> {
    if pw.chars().count() < MIN_PASSWORD_LEN {
        return Err(AccountError::TooShort);
    }
    if pw.len() > 1024 {
        return Err(AccountError::TooLong);
    }
    Ok(())
}

pub fn hash_password(pw: &str) -> Result<String, AccountError> {
    check_password_rules(pw)?;
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(pw.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AccountError::Hash(e.to_string()))
}

pub fn verify_password(pw: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| Argon2::default().verify_password(pw.as_bytes(), &h).is_ok())
}

/// Set (or reset) the admin password.
pub fn set_admin_password(store: &Store, pw: &str, now: Timestamp) -> Result<(), AccountError> {
    set_admin_password_with_events(store, pw, now, &[])
}

/// [`set_admin_password`], with `events` committed to the outbox in the same
/// transaction as the new password.
pub fn set_admin_password_with_events(
    store: &Store,
    pw: &str,
    now: Timestamp,
    events: &[OutboxEvent],
) -> Result<(), AccountError> {
    let hash = hash_password(pw)?;
    let created = store.get_user(ADMIN)?.map(|u| u.created).unwrap_or(now);
    let user = UserRecord {
        name: ADMIN.into(),
        password_hash: hash,
        created,
        updated: now,
    };
    store.put_user_with_events(&user, events)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_reject() {
        let h = hash_password("correct horse").expect("hash");
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong horse", &h));
        assert!(!verify_password("correct horse", "not a hash"));
        assert!(matches!(hash_password("short"), Err(AccountError::TooShort)));
    }

    #[test]
    fn admin_password_is_stored_hashed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        set_admin_password(&store, "s3cret-pass", Timestamp(5)).expect("set");
        let u = store.get_user(ADMIN).expect("get").expect("user");
        assert!(verify_password("s3cret-pass", &u.password_hash));
        assert!(!u.password_hash.contains("s3cret"));
        set_admin_password(&store, "another-pass", Timestamp(9)).expect("reset");
        let u = store.get_user(ADMIN).expect("get").expect("user");
        assert_eq!((u.created, u.updated), (Timestamp(5), Timestamp(9)));
    }
}

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

/// A hash made once with the parameters (and a random salt) of
/// [`hash_password`]: a login for a user that does not exist is checked
/// against it, so it costs the same argon2 work as one for a user that
/// does, and its time does not tell whether the name exists. What it hashes
/// does not matter: [`check_login`] refuses an unknown user whatever the
/// result.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("no such user").unwrap_or_default())
}

/// Make [`dummy_hash`] now (it takes one argon2 hash), so the first login
/// for an unknown user takes no longer than any other.
pub fn prepare() {
    let _ = dummy_hash();
}

/// Check a login: `pw` against `user`'s stored hash, or against
/// [`dummy_hash`] when there is no such user (or it cannot be read), so
/// both take one argon2 verification. Blocking: call it on a blocking
/// thread.
pub fn check_login(store: &Store, user: &str, pw: &str) -> bool {
    match store.get_user(user) {
        Ok(Some(u)) => verify_password(pw, &u.password_hash),
        _ => {
            let _ = verify_password(pw, dummy_hash());
            false
        }
    }
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

/// The first-run setup code's file in the data directory: void (and
/// removed) once the admin has a password.
pub const SETUP_CODE_FILE: &str = "setup-code";

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
    fn an_unknown_user_costs_one_argon2_check_and_never_logs_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        set_admin_password(&store, "s3cret-pass", Timestamp(5)).expect("set");
        assert!(check_login(&store, ADMIN, "s3cret-pass"));
        assert!(!check_login(&store, ADMIN, "wrong-pass"));
        assert!(!check_login(&store, "nobody", "s3cret-pass"));
        // The dummy has the parameters of a real hash (same work).
        let real = PasswordHash::new(&store.get_user(ADMIN).expect("get").expect("user").password_hash)
            .expect("phc")
            .params
            .to_string();
        let dummy = PasswordHash::new(dummy_hash()).expect("phc").params.to_string();
        assert_eq!(real, dummy);
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

//! The encrypted backup file: an age file (scrypt recipient, that is a
//! passphrase) around the database copy `crate::store` makes. Debian's
//! `age` tool and Python's `pyrage` open it as well as
//! `pollster admin restore` does. Pure: bytes in, bytes out.

use std::io::{Read, Write};

use age::secrecy::SecretString;

/// The shortest passphrase a backup is made with.
pub const MIN_PASSPHRASE_CHARS: usize = 12;

/// The most the inside of a backup may grow to on decryption; a backup
/// larger than this is refused rather than read into memory.
const MAX_PLAIN_BYTES: u64 = 4 << 30;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("the passphrase must be at least {MIN_PASSPHRASE_CHARS} characters long")]
    ShortPassphrase,
    #[error("not a Pollster backup (not an age file): {0}")]
    NotAge(String),
    #[error("the backup is not encrypted with a passphrase")]
    NotPassphrase,
    #[error("wrong passphrase, or the backup is damaged")]
    WrongPassphrase,
    #[error("the backup is damaged: {0}")]
    Damaged(String),
}

/// Refuses a passphrase shorter than [`MIN_PASSPHRASE_CHARS`] characters.
pub fn check_passphrase(passphrase: &str) -> Result<(), BackupError> {
    if passphrase.chars().count() < MIN_PASSPHRASE_CHARS {
        return Err(BackupError::ShortPassphrase);
    }
    Ok(())
}

/// `plain` encrypted under `passphrase` (scrypt, work factor tuned by age
/// to about a second on this machine).
pub fn encrypt(plain: &[u8], passphrase: &str) -> Result<Vec<u8>, BackupError> {
    check_passphrase(passphrase)?;
    let encryptor = age::Encryptor::with_user_passphrase(SecretString::from(passphrase.to_string()));
    let mut out = Vec::with_capacity(plain.len() + 512);
    let mut w = encryptor
        .wrap_output(&mut out)
        .map_err(|e| BackupError::Damaged(e.to_string()))?;
    w.write_all(plain).map_err(|e| BackupError::Damaged(e.to_string()))?;
    w.finish().map_err(|e| BackupError::Damaged(e.to_string()))?;
    Ok(out)
}

/// The inside of a backup; every byte authenticated (a damaged or
/// truncated file is an error, never a partial result).
pub fn decrypt(file: &[u8], passphrase: &str) -> Result<Vec<u8>, BackupError> {
    let decryptor = age::Decryptor::new_buffered(file).map_err(|e| BackupError::NotAge(e.to_string()))?;
    if !decryptor.is_scrypt() {
        return Err(BackupError::NotPassphrase);
    }
    let identity = age::scrypt::Identity::new(SecretString::from(passphrase.to_string()));
    let mut reader = decryptor
        .decrypt(std::iter::once(&identity as &dyn age::Identity))
        .map_err(|e| match e {
            age::DecryptError::DecryptionFailed | age::DecryptError::NoMatchingKeys => BackupError::WrongPassphrase,
            other => BackupError::Damaged(other.to_string()),
        })?;
    let mut plain = Vec::new();
    (&mut reader)
        .take(MAX_PLAIN_BYTES)
        .read_to_end(&mut plain)
        .map_err(|e| BackupError::Damaged(e.to_string()))?;
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_opens_with_its_passphrase_only() {
        let file = encrypt(b"inside", "correct horse battery").expect("encrypt");
        assert!(file.starts_with(b"age-encryption.org/v1\n-> scrypt "));
        assert_eq!(decrypt(&file, "correct horse battery").expect("decrypt"), b"inside");
        assert!(matches!(
            decrypt(&file, "wrong horse battery"),
            Err(BackupError::WrongPassphrase)
        ));
        let mut damaged = file.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(decrypt(&damaged, "correct horse battery").is_err());
        assert!(decrypt(&file[..file.len() - 5], "correct horse battery").is_err());
        assert!(matches!(decrypt(b"SQLite format 3", "x"), Err(BackupError::NotAge(_))));
        assert!(matches!(
            encrypt(b"x", "eleven char"),
            Err(BackupError::ShortPassphrase)
        ));
    }
}

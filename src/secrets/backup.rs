//! The encrypted backup file: an age file (scrypt recipient, that is a
//! passphrase) around the database copy `crate::store` makes. Debian's
//! `age` tool and Python's `pyrage` open it as well as
//! `pollster admin restore` does. Pure: bytes (or readers) in, bytes out.
//!
//! The scrypt work factor is fixed ([`WORK_FACTOR`]) rather than tuned to
//! the machine, so that a restore can refuse a file asking for more than
//! Pollster ever writes ([`MAX_WORK_FACTOR`]) before it derives anything: a
//! hostile header asking for `log_n = 23` would otherwise cost 8 GiB of
//! memory and most of a minute before "wrong passphrase".

use std::io::{BufRead, Read, Write};

use age::secrecy::SecretString;

/// The shortest passphrase a backup is made with.
pub const MIN_PASSPHRASE_CHARS: usize = 12;

/// scrypt's `log_n` in every backup Pollster writes: N = 2^16, with r = 8
/// that is 64 MiB of memory and a fraction of a second to open.
pub const WORK_FACTOR: u8 = 16;

/// The largest `log_n` a restore accepts: what Pollster writes plus one
/// (128 MiB), so a whole restore stays under 256 MiB of memory.
pub const MAX_WORK_FACTOR: u8 = WORK_FACTOR + 1;

/// The most an operator may allow with `restore --max-work-factor`, for a
/// backup written before the work factor was fixed (age tuned it to the
/// machine: 18–20 is usual). 22 is 4 GiB.
pub const MAX_ALLOWED_WORK_FACTOR: u8 = 22;

/// The most the inside of a backup may grow to when read into memory
/// ([`decrypt`]); restores stream to a file instead ([`decrypt_to`]).
const MAX_PLAIN_BYTES: u64 = 4 << 30;

/// Memory scrypt needs for `log_n` (r = 8): 128 · r · 2^log_n bytes, in MiB.
fn scrypt_mib(log_n: u8) -> u64 {
    (128u64 * 8).checked_shl(u32::from(log_n)).unwrap_or(u64::MAX) >> 20
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "the passphrase must be at least {MIN_PASSPHRASE_CHARS} characters long, not counting spaces at either end"
    )]
    ShortPassphrase,
    #[error("not a Pollster backup (not an age file): {0}")]
    NotAge(String),
    #[error("the backup is not encrypted with a passphrase")]
    NotPassphrase,
    #[error(
        "the backup asks for scrypt work factor {log_n} ({} MiB of memory to open); \
         Pollster writes {WORK_FACTOR} and opens at most {max}: refused before deriving any key \
         (a backup you made with an earlier release was tuned to its machine: if you trust the file, \
         allow it with --max-work-factor {log_n})",
        scrypt_mib(*log_n)
    )]
    ExcessiveWork { log_n: u8, max: u8 },
    #[error("wrong passphrase, or the backup is damaged")]
    WrongPassphrase,
    #[error("the backup is damaged: {0}")]
    Damaged(String),
    #[error("the inside of the backup is larger than the {limit} bytes there is room for")]
    TooLarge { limit: u64 },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Refuses a passphrase shorter than [`MIN_PASSPHRASE_CHARS`] characters
/// once spaces at either end are left out (twelve spaces are no
/// passphrase).
pub fn check_passphrase(passphrase: &str) -> Result<(), BackupError> {
    if passphrase.trim().chars().count() < MIN_PASSPHRASE_CHARS {
        return Err(BackupError::ShortPassphrase);
    }
    Ok(())
}

/// `plain` encrypted under `passphrase` (scrypt at [`WORK_FACTOR`]).
pub fn encrypt(plain: &[u8], passphrase: &str) -> Result<Vec<u8>, BackupError> {
    let mut out = Vec::with_capacity(plain.len() + 512);
    encrypt_to(plain, &mut out, passphrase)?;
    Ok(out)
}

/// Everything `plain` reads, encrypted under `passphrase` into `out`, a
/// chunk at a time.
pub fn encrypt_to(mut plain: impl Read, out: impl Write, passphrase: &str) -> Result<(), BackupError> {
    check_passphrase(passphrase)?;
    let mut recipient = age::scrypt::Recipient::new(SecretString::from(passphrase.to_string()));
    recipient.set_work_factor(WORK_FACTOR);
    let encryptor = age::Encryptor::with_recipients(std::iter::once(&recipient as &dyn age::Recipient))
        .map_err(|e| BackupError::Damaged(e.to_string()))?;
    let mut w = encryptor.wrap_output(out)?;
    std::io::copy(&mut plain, &mut w)?;
    w.finish()?;
    Ok(())
}

/// The inside of a backup; every byte authenticated (a damaged or
/// truncated file is an error, never a partial result).
pub fn decrypt(file: &[u8], passphrase: &str) -> Result<Vec<u8>, BackupError> {
    let mut plain = Vec::new();
    decrypt_to(file, &mut plain, passphrase, MAX_PLAIN_BYTES, MAX_WORK_FACTOR)?;
    Ok(plain)
}

/// The inside of the backup `file` reads, written to `out` a chunk at a
/// time; at most `limit` bytes ([`BackupError::TooLarge`] beyond). The
/// work factor is checked against `max_work_factor` (normally
/// [`MAX_WORK_FACTOR`]) before any key is derived. What `out` got is only
/// the backup once this returns `Ok` (with the byte count).
pub fn decrypt_to(
    file: impl BufRead,
    out: &mut impl Write,
    passphrase: &str,
    limit: u64,
    max_work_factor: u8,
) -> Result<u64, BackupError> {
    let decryptor = age::Decryptor::new_buffered(file).map_err(|e| BackupError::NotAge(e.to_string()))?;
    if !decryptor.is_scrypt() {
        return Err(BackupError::NotPassphrase);
    }
    let mut identity = age::scrypt::Identity::new(SecretString::from(passphrase.to_string()));
    identity.set_max_work_factor(max_work_factor);
    let reader = decryptor
        .decrypt(std::iter::once(&identity as &dyn age::Identity))
        .map_err(|e| match e {
            age::DecryptError::DecryptionFailed | age::DecryptError::NoMatchingKeys => BackupError::WrongPassphrase,
            age::DecryptError::ExcessiveWork { required, .. } => BackupError::ExcessiveWork {
                log_n: required,
                max: max_work_factor,
            },
            other => BackupError::Damaged(other.to_string()),
        })?;
    // One byte past the limit tells a file that is too large from one that
    // fills it exactly.
    let mut bounded = reader.take(limit.saturating_add(1));
    let n = std::io::copy(&mut bounded, out).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof => BackupError::Damaged(e.to_string()),
        _ => BackupError::Io(e),
    })?;
    if n > limit {
        return Err(BackupError::TooLarge { limit });
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header of an age file with one scrypt stanza asking for `log_n`,
    /// with a random salt and a wrapped key and MAC that open with nothing:
    /// what a hostile backup looks like, without paying for scrypt to make it.
    fn forged_header(log_n: u8) -> Vec<u8> {
        use base64::Engine;
        use base64::engine::general_purpose::STANDARD_NO_PAD;
        let mut salt = [0u8; 16];
        let mut body = [0u8; 32];
        let mut mac = [0u8; 32];
        let mut nonce = [0u8; 16];
        for b in [&mut salt[..], &mut body[..], &mut mac[..], &mut nonce[..]] {
            rand::fill(b);
        }
        let mut out = format!(
            "age-encryption.org/v1\n-> scrypt {} {log_n}\n{}\n--- {}\n",
            STANDARD_NO_PAD.encode(salt),
            STANDARD_NO_PAD.encode(body),
            STANDARD_NO_PAD.encode(mac)
        )
        .into_bytes();
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&[0u8; 64]);
        out
    }

    #[test]
    fn a_backup_opens_with_its_passphrase_only() {
        let file = encrypt(b"inside", "correct horse battery").expect("encrypt");
        assert!(file.starts_with(b"age-encryption.org/v1\n-> scrypt "));
        let header = String::from_utf8_lossy(&file[..80]).to_string();
        assert!(
            header.lines().nth(1).is_some_and(|l| l.ends_with(" 16")),
            "the fixed work factor: {header}"
        );
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
        let mut out = Vec::new();
        assert!(matches!(
            decrypt_to(&file[..], &mut out, "correct horse battery", 5, MAX_WORK_FACTOR),
            Err(BackupError::TooLarge { limit: 5 })
        ));
    }

    #[test]
    fn blank_passphrases_are_refused() {
        assert!(check_passphrase(&" ".repeat(12)).is_err());
        assert!(check_passphrase(&format!("  {}  ", "x".repeat(11))).is_err());
        assert!(check_passphrase("twelve chars").is_ok());
    }

    #[test]
    fn a_work_factor_above_the_limit_is_refused_before_deriving() {
        let err = decrypt(&forged_header(23), "correct horse battery").unwrap_err();
        assert!(
            matches!(err, BackupError::ExcessiveWork { log_n: 23, max: 17 }),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("work factor 23") && text.contains("at most 17"), "{text}");
        assert!(text.contains("8192 MiB"), "{text}");
        assert!(text.contains("--max-work-factor 23"), "the way out is named: {text}");
        // At the limit the key is derived (and does not open).
        assert!(matches!(
            decrypt(&forged_header(MAX_WORK_FACTOR), "correct horse battery"),
            Err(BackupError::WrongPassphrase)
        ));
    }

    #[test]
    fn an_operator_may_allow_the_work_factor_of_an_older_backup() {
        let file = forged_header(MAX_WORK_FACTOR + 1);
        let mut out = Vec::new();
        assert!(matches!(
            decrypt_to(&file[..], &mut out, "correct horse battery", 1 << 20, MAX_WORK_FACTOR),
            Err(BackupError::ExcessiveWork { log_n: 18, max: 17 })
        ));
        // Allowed, the key is derived (and this forged file does not open).
        assert!(matches!(
            decrypt_to(
                &file[..],
                &mut out,
                "correct horse battery",
                1 << 20,
                MAX_WORK_FACTOR + 1
            ),
            Err(BackupError::WrongPassphrase)
        ));
    }
}

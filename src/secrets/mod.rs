//! Credentials at rest: the data key and the sealed form of every secret
//! the database holds (instance credentials, a password in a URL, sink
//! header values).
//!
//! A secret is sealed with XChaCha20-Poly1305 under a 32-byte data key that
//! never enters the database: it lives in `<data_dir>/secret.key` (mode
//! 0600, made at the first start) or in the file `POLLSTER_SECRET_KEY_FILE`
//! names (a systemd credential). The associated data names the owner and
//! field of each value (`instance:pve-1:auth.secret`), so a sealed value
//! copied onto another instance or field does not open.
//!
//! [`unlock`] is the startup rule: a key that opens every sealed value, or
//! a new key when there is no sealed value yet. A missing or wrong key with
//! sealed values present is refused before the database is written, and a
//! new key is never made over existing ciphertext.
//!
//! Pure apart from the key file; no shared state.

pub mod backup;
mod key_file;

pub use key_file::{Census, KEY_FILE, KEY_FILE_ENV, KeyError, KeyFile, unlock, with_suffix};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use std::fmt;

use crate::model::Secret;

/// First byte of a sealed value: XChaCha20-Poly1305, 24-byte nonce.
const SEALED_V1: u8 = 1;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// What [`DataKey::seal_bytes`] adds to a datagram: the nonce in front,
/// the Poly1305 tag behind.
pub const DATAGRAM_OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// Bytes of a data key.
pub const KEY_LEN: usize = 32;

/// The data key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct DataKey([u8; KEY_LEN]);

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DataKey(***)")
    }
}

/// Why a sealed value did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("not a sealed value: {0}")]
    Malformed(&'static str),
    #[error("does not open under this key (a wrong key, or a value sealed for another field)")]
    WrongKey,
}

impl DataKey {
    /// A new random key from the operating system's generator.
    pub fn generate() -> Result<DataKey, String> {
        use rand::TryRng;
        let mut k = [0u8; KEY_LEN];
        crate::model::random::SysRng
            .try_fill_bytes(&mut k)
            .map_err(|e| format!("the operating system's random number generator failed: {e}"))?;
        Ok(DataKey(k))
    }

    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> DataKey {
        DataKey(bytes)
    }

    /// A key file's text: base64 of the 32 bytes (what Pollster writes;
    /// `openssl rand -base64 32`), 64 hex digits, or the 32 raw bytes.
    pub fn parse(file: &[u8]) -> Result<DataKey, &'static str> {
        if file.len() == KEY_LEN {
            let mut k = [0u8; KEY_LEN];
            k.copy_from_slice(file);
            return Ok(DataKey(k));
        }
        let text = std::str::from_utf8(file)
            .map_err(|_| "neither 32 raw bytes nor text")?
            .trim();
        let bytes = if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            hex::decode(text).map_err(|_| "bad hex")?
        } else {
            STANDARD.decode(text).map_err(|_| "neither base64 nor hex")?
        };
        let k: [u8; KEY_LEN] = bytes.try_into().map_err(|_| "the key is not 32 bytes long")?;
        Ok(DataKey(k))
    }

    /// The key file's text, as [`DataKey::parse`] reads it.
    pub fn to_file_text(&self) -> String {
        format!("{}\n", STANDARD.encode(self.0))
    }

    /// Seals `plaintext` for `aad` with a fresh random nonce from the
    /// operating system's generator (panics if it fails: a nonce must not
    /// be guessable or repeat).
    pub fn seal(&self, aad: &str, plaintext: &str) -> String {
        let mut rng = crate::model::random::os();
        self.seal_with(&mut rng, aad, plaintext)
    }

    /// [`DataKey::seal`] with the nonce drawn from `rng` (tests pass a seeded
    /// one to get fixed bytes).
    pub fn seal_with(&self, rng: &mut impl rand::Rng, aad: &str, plaintext: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        let sealed = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            // Only fails for a message longer than 256 GiB.
            .expect("a credential fits the AEAD's message limit");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(SEALED_V1);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        STANDARD.encode(out)
    }

    /// Seals a datagram: `nonce (24 bytes) || ciphertext || tag (16)`, under
    /// a fresh nonce from `rng`, for `aad` (the gossip of `crate::cluster`).
    pub fn seal_bytes(&self, rng: &mut impl rand::Rng, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        let sealed = cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plaintext, aad })
            // Only fails for a message longer than 256 GiB.
            .expect("a datagram fits the AEAD's message limit");
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`DataKey::seal_bytes`] sealed for the same `aad`; `None`
    /// for anything else (another key, another `aad`, a changed byte).
    pub fn open_bytes(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < DATAGRAM_OVERHEAD {
            return None;
        }
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        cipher
            .decrypt(
                XNonce::from_slice(&sealed[..NONCE_LEN]),
                Payload {
                    msg: &sealed[NONCE_LEN..],
                    aad,
                },
            )
            .ok()
    }

    /// Opens a value [`DataKey::seal`] made for the same `aad`.
    pub fn open(&self, aad: &str, sealed: &str) -> Result<Secret, SealError> {
        let raw = parse_sealed(sealed)?;
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        let plain = cipher
            .decrypt(
                XNonce::from_slice(&raw[1..1 + NONCE_LEN]),
                Payload {
                    msg: &raw[1 + NONCE_LEN..],
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| SealError::WrongKey)?;
        String::from_utf8(plain)
            .map(Secret::new)
            .map_err(|_| SealError::Malformed("not UTF-8 inside"))
    }
}

/// The bytes of a sealed value, checked for shape (not opened).
fn parse_sealed(sealed: &str) -> Result<Vec<u8>, SealError> {
    let raw = STANDARD
        .decode(sealed)
        .map_err(|_| SealError::Malformed("not base64"))?;
    match raw.first() {
        Some(&SEALED_V1) if raw.len() >= 1 + NONCE_LEN + TAG_LEN => Ok(raw),
        Some(&SEALED_V1) => Err(SealError::Malformed("too short")),
        _ => Err(SealError::Malformed("unknown version")),
    }
}

/// Whether `text` has the shape of a sealed value.
pub fn looks_sealed(text: &str) -> bool {
    parse_sealed(text).is_ok()
}

/// Associated data of an instance's secret field (`auth.token`, `url`, …).
pub fn instance_aad(instance: &str, field: &str) -> String {
    format!("instance:{instance}:{field}")
}

/// Associated data of a sink header's value.
pub fn sink_header_aad(header: &str) -> String {
    format!("sink:header:{header}")
}

/// Associated data of the password in the sink's URL.
pub const SINK_URL_AAD: &str = "sink:url";

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn key(b: u8) -> DataKey {
        DataKey::from_bytes([b; KEY_LEN])
    }

    #[test]
    fn a_sealed_value_opens_under_its_key_and_associated_data_only() {
        let k = key(7);
        let sealed = k.seal("instance:pve-1:auth.secret", "s3cret-token");
        assert!(!sealed.contains("s3cret"));
        assert!(looks_sealed(&sealed));
        assert_eq!(
            k.open("instance:pve-1:auth.secret", &sealed).unwrap().expose(),
            "s3cret-token"
        );
        assert_eq!(
            key(8).open("instance:pve-1:auth.secret", &sealed),
            Err(SealError::WrongKey)
        );
        assert_eq!(k.open("instance:pve-2:auth.secret", &sealed), Err(SealError::WrongKey));
        assert_eq!(k.open("instance:pve-1:url", &sealed), Err(SealError::WrongKey));
    }

    #[test]
    fn every_seal_has_its_own_nonce_and_a_seeded_rng_gives_fixed_bytes() {
        let k = key(1);
        assert_ne!(k.seal("a", "x"), k.seal("a", "x"));
        let mut r1 = crate::model::random::StdRng::seed_from_u64(3);
        let mut r2 = crate::model::random::StdRng::seed_from_u64(3);
        assert_eq!(k.seal_with(&mut r1, "a", "x"), k.seal_with(&mut r2, "a", "x"));
    }

    #[test]
    fn damaged_values_are_refused_not_panicked_on() {
        let k = key(1);
        let sealed = k.seal("a", "value");
        let mut raw = STANDARD.decode(&sealed).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        assert_eq!(k.open("a", &STANDARD.encode(&raw)), Err(SealError::WrongKey));
        for bad in ["", "plain text", "AQ==", &STANDARD.encode([2u8; 60])] {
            assert!(matches!(k.open("a", bad), Err(SealError::Malformed(_))), "{bad}");
            assert!(!looks_sealed(bad));
        }
    }

    #[test]
    fn key_files_read_base64_hex_or_raw_bytes() {
        let k = key(0xab);
        assert_eq!(DataKey::parse(k.to_file_text().as_bytes()).unwrap(), k);
        assert_eq!(DataKey::parse(hex::encode([0xab; 32]).as_bytes()).unwrap(), k);
        assert_eq!(DataKey::parse(&[0xab; 32]).unwrap(), k);
        assert!(DataKey::parse(b"short").is_err());
        assert!(DataKey::parse(STANDARD.encode([1u8; 16]).as_bytes()).is_err());
        assert_eq!(format!("{k:?}"), "DataKey(***)");
    }
}

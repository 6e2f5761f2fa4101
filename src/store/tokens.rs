//! API tokens. The plaintext (`pst_` + 40 hex digits, 160 random bits from
//! the OS) is returned once by [`Store::create_token`] and never stored: the
//! `tokens` table is keyed by its SHA-256, so verifying a token is one
//! B-tree lookup. The public id is the first 8 hex digits of that hash; ids
//! are kept unique at creation, so revoking by id finds its row with a
//! prefix range scan.

use crate::model::random::SysRng;
use rand::TryRng;
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::change::{OutboxEvent, delivered};
use super::events;
use super::stored::StoredToken;
use super::tables::TOKENS;
use super::{Ctx, Store, StoreError, codec};
use crate::model::Timestamp;

/// Every token starts with this, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "pst_";

const SECRET_BYTES: usize = 20;
/// Bytes of the hash that form the public id (8 hex digits).
const ID_BYTES: usize = 4;
/// New secrets tried when an id is taken; a clash is already a 1-in-4-billion event.
const CREATE_ATTEMPTS: usize = 8;

/// What a token may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// Read everything but the backup; change nothing (Grafana, scripts).
    Read,
    /// Everything an operator may do. Tokens made before scopes existed are
    /// admin tokens.
    #[default]
    Admin,
}

impl TokenScope {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Admin => "admin",
        }
    }

    /// `read` or `admin`.
    pub fn parse(s: &str) -> Option<TokenScope> {
        match s.trim() {
            "read" => Some(TokenScope::Read),
            "admin" => Some(TokenScope::Admin),
            _ => None,
        }
    }
}

/// What is known about a token without its plaintext.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Short public id: the first 8 hex digits of the token's SHA-256.
    pub id: String,
    pub name: String,
    pub created: Timestamp,
    #[serde(default)]
    pub scope: TokenScope,
}

fn hash(plaintext: &str) -> [u8; 32] {
    Sha256::digest(plaintext.as_bytes()).into()
}

/// `pst_` followed by exactly 40 lowercase hex digits.
fn well_formed(plaintext: &str) -> bool {
    plaintext.strip_prefix(TOKEN_PREFIX).is_some_and(|secret| {
        secret.len() == SECRET_BYTES * 2 && secret.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn os_secret() -> Result<[u8; SECRET_BYTES], StoreError> {
    let mut secret = [0u8; SECRET_BYTES];
    SysRng
        .try_fill_bytes(&mut secret)
        .map_err(|e| StoreError::Randomness { reason: e.to_string() })?;
    Ok(secret)
}

/// Keys (hashes) in `table` whose first bytes are `prefix`.
fn keys_with_prefix(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut out = Vec::new();
    for entry in table.range(prefix..).ctx("reading table tokens")? {
        let (k, _) = entry.ctx("reading table tokens")?;
        if !k.value().starts_with(prefix) {
            break;
        }
        out.push(k.value().to_vec());
    }
    Ok(out)
}

impl Store {
    /// Creates a token named `name`. Returns the plaintext — shown to the
    /// operator once, unrecoverable afterwards — and its public info.
    pub fn create_token(
        &self,
        name: &str,
        scope: TokenScope,
        now: Timestamp,
    ) -> Result<(String, TokenInfo), StoreError> {
        self.create_token_from(name, scope, now, os_secret)
    }

    /// [`Store::create_token`], and the events `events` makes from the new
    /// token's info appended to the outbox in the same transaction.
    pub fn create_token_with_events(
        &self,
        name: &str,
        scope: TokenScope,
        now: Timestamp,
        events: impl FnOnce(&TokenInfo) -> Vec<OutboxEvent>,
    ) -> Result<(String, TokenInfo), StoreError> {
        self.create_token_from_with_events(name, scope, now, os_secret, events)
    }

    /// [`Store::create_token`] with the secret source passed in (tests
    /// force id clashes with it).
    fn create_token_from(
        &self,
        name: &str,
        scope: TokenScope,
        now: Timestamp,
        next_secret: impl FnMut() -> Result<[u8; SECRET_BYTES], StoreError>,
    ) -> Result<(String, TokenInfo), StoreError> {
        self.create_token_from_with_events(name, scope, now, next_secret, |_| Vec::new())
    }

    fn create_token_from_with_events(
        &self,
        name: &str,
        scope: TokenScope,
        now: Timestamp,
        mut next_secret: impl FnMut() -> Result<[u8; SECRET_BYTES], StoreError>,
        events: impl FnOnce(&TokenInfo) -> Vec<OutboxEvent>,
    ) -> Result<(String, TokenInfo), StoreError> {
        let txn = self.write_txn()?;
        let created = {
            let mut table = txn.open_table(TOKENS.def).ctx("opening table tokens")?;
            let mut created = None;
            for _ in 0..CREATE_ATTEMPTS {
                let plaintext = format!("{TOKEN_PREFIX}{}", hex::encode(next_secret()?));
                let digest = hash(&plaintext);
                if !keys_with_prefix(&table, &digest[..ID_BYTES])?.is_empty() {
                    continue;
                }
                let info = TokenInfo {
                    id: hex::encode(&digest[..ID_BYTES]),
                    name: name.to_string(),
                    created: now,
                    scope,
                };
                let v = codec::encode_stored(&StoredToken::from(&info))?;
                table.insert(digest.as_slice(), v.as_slice()).ctx("writing a token")?;
                created = Some((plaintext, info));
                break;
            }
            created
        };
        let Some(created) = created else {
            return Err(StoreError::Randomness {
                reason: format!("no unused token id after {CREATE_ATTEMPTS} attempts"),
            });
        };
        let events = events(&created.1);
        events::append(&txn, &events)?;
        self.commit_with_outbox(txn, delivered(&events), "committing a token")?;
        Ok(created)
    }

    /// The token's info if `plaintext` is a live token, `None` otherwise
    /// (including anything not shaped like a token).
    pub fn verify_token(&self, plaintext: &str) -> Result<Option<TokenInfo>, StoreError> {
        if !well_formed(plaintext) {
            return Ok(None);
        }
        let digest = hash(plaintext);
        let txn = self.read_txn()?;
        let table = txn.open_table(TOKENS.def).ctx("opening table tokens")?;
        let guard = table.get(digest.as_slice()).ctx("reading a token")?;
        guard.map(|v| decode_token(&digest, v.value())).transpose()
    }

    /// Every token, oldest first. A record that cannot be decoded fails the
    /// call with [`StoreError::Corrupt`].
    pub fn list_tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(TOKENS.def).ctx("opening table tokens")?;
        let mut out = Vec::new();
        for entry in table.iter().ctx("reading table tokens")? {
            let (k, v) = entry.ctx("reading table tokens")?;
            out.push(decode_token(k.value(), v.value())?);
        }
        out.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        Ok(out)
    }

    /// Revokes the token with public id `id`; `false` if there is none.
    pub fn revoke_token(&self, id: &str) -> Result<bool, StoreError> {
        self.revoke_token_with_events(id, &[])
    }

    /// [`Store::revoke_token`], and `events` appended to the outbox in the
    /// same transaction when a token was revoked (not otherwise).
    pub fn revoke_token_with_events(&self, id: &str, events: &[OutboxEvent]) -> Result<bool, StoreError> {
        let prefix = match hex::decode(id) {
            Ok(p) if p.len() == ID_BYTES && id.bytes().all(|b| !b.is_ascii_uppercase()) => p,
            _ => return Ok(false),
        };
        let txn = self.write_txn()?;
        let removed = {
            let mut table = txn.open_table(TOKENS.def).ctx("opening table tokens")?;
            let keys = keys_with_prefix(&table, &prefix)?;
            for k in &keys {
                table.remove(k.as_slice()).ctx("deleting a token")?;
            }
            !keys.is_empty()
        };
        let events = if removed { events } else { &[] };
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing a token revocation")?;
        Ok(removed)
    }
}

fn decode_token(key: &[u8], value: &[u8]) -> Result<TokenInfo, StoreError> {
    codec::decode_stored::<StoredToken>(TOKENS.name, key, value).map(TokenInfo::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_stored_before_scopes_is_an_admin_token() {
        let old = br#"{"id":"0a0b0c0d","name":"old","created":5}"#;
        let mut bytes = vec![super::super::codec::FORMAT_JSON_V1];
        bytes.extend_from_slice(old);
        let info = decode_token(b"k", &bytes).expect("decodes");
        assert_eq!(info.scope, TokenScope::Admin);
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        (dir, store)
    }

    #[test]
    fn create_verify_revoke() {
        let (_dir, store) = store();
        let (plain, info) = store
            .create_token("ci", TokenScope::Admin, Timestamp(1_000))
            .expect("create");
        assert!(well_formed(&plain), "{plain}");
        assert_eq!(plain.len(), 44);
        assert_eq!(info.name, "ci");
        assert_eq!(info.created, Timestamp(1_000));
        assert_eq!(info.id, hex::encode(&hash(&plain)[..4]));

        assert_eq!(store.verify_token(&plain).expect("verify"), Some(info.clone()));

        // Same shape, one digit different: not a token.
        let last = plain.chars().last().expect("non-empty");
        let wrong = format!("{}{}", &plain[..plain.len() - 1], if last == '0' { '1' } else { '0' });
        assert_eq!(store.verify_token(&wrong).expect("verify"), None);
        for junk in [
            "",
            "pst_",
            "pst_xyz",
            &plain.to_uppercase(),
            &plain[4..],
            &format!("{plain}0"),
        ] {
            assert_eq!(store.verify_token(junk).expect("verify"), None, "{junk:?}");
        }

        assert_eq!(store.list_tokens().expect("list"), vec![info.clone()]);
        assert!(!store.revoke_token("00000000").expect("revoke") || info.id == "00000000");
        assert!(!store.revoke_token("not-hex").expect("revoke"));
        assert!(store.revoke_token(&info.id).expect("revoke"));
        assert_eq!(store.verify_token(&plain).expect("verify"), None);
        assert!(!store.revoke_token(&info.id).expect("revoke again"));
        assert!(store.list_tokens().expect("list").is_empty());
    }

    #[test]
    fn tokens_are_distinct_and_listed_oldest_first() {
        let (_dir, store) = store();
        let (p2, t2) = store
            .create_token("second", TokenScope::Read, Timestamp(20))
            .expect("create");
        let (p1, t1) = store
            .create_token("first", TokenScope::Admin, Timestamp(10))
            .expect("create");
        assert_ne!(p1, p2);
        assert_eq!(store.list_tokens().expect("list"), vec![t1.clone(), t2.clone()]);
        assert_eq!((t1.scope, t2.scope), (TokenScope::Admin, TokenScope::Read));
        assert!(store.revoke_token(&t1.id).expect("revoke"));
        assert_eq!(store.verify_token(&p2).expect("verify"), Some(t2));
    }

    #[test]
    fn a_taken_id_draws_a_new_secret() {
        let (_dir, store) = store();
        let mut secrets = vec![[2u8; SECRET_BYTES], [1u8; SECRET_BYTES], [1u8; SECRET_BYTES]];
        let mut next = || secrets.pop().ok_or(StoreError::Randomness { reason: "out".into() });
        let (p1, t1) = store
            .create_token_from("a", TokenScope::Admin, Timestamp(1), &mut next)
            .expect("first");
        // The second draw repeats the first secret, so its id is taken; the third is used.
        let (p2, t2) = store
            .create_token_from("b", TokenScope::Admin, Timestamp(2), &mut next)
            .expect("second");
        assert_eq!(p1, format!("pst_{}", "01".repeat(20)));
        assert_eq!(p2, format!("pst_{}", "02".repeat(20)));
        assert_ne!(t1.id, t2.id);
        assert_eq!(store.list_tokens().expect("list").len(), 2);

        // A source that only ever repeats gives up with an error and writes nothing.
        let err = store
            .create_token_from("c", TokenScope::Admin, Timestamp(3), || Ok([1u8; SECRET_BYTES]))
            .unwrap_err();
        assert!(matches!(err, StoreError::Randomness { .. }), "{err:?}");
        assert_eq!(store.list_tokens().expect("list").len(), 2);
    }
}

//! Event ids: ULIDs, so a receiver can de-duplicate change events that are
//! delivered more than once.

use crate::model::Timestamp;
use rand::{Rng, RngExt};

/// Crockford's base 32, as ULIDs use it.
pub(super) const ULID_ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A new event id: a ULID (26 characters of Crockford base 32: 48 bits of
/// `time` in milliseconds, then 80 random bits), e.g.
/// `01JDQ9Y3V2K8S6R0ZP4M5TQW7A`. Unique without coordination (a clash needs
/// two events in the same millisecond drawing the same 80 bits), and ids of
/// events far enough apart sort by time.
pub fn new_event_id(time: Timestamp, rng: &mut impl Rng) -> String {
    let random: u128 = rng.random::<u128>() & ((1u128 << 80) - 1);
    let value = (u128::from(time.0 & ((1u64 << 48) - 1)) << 80) | random;
    (0..26)
        .map(|i| {
            let shift = 125 - 5 * i;
            char::from(ULID_ALPHABET[((value >> shift) & 31) as usize])
        })
        .collect()
}

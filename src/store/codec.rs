//! The one place that turns stored values into bytes and back.
//!
//! Every value in every table is `[format version][payload]`. Format 1 is
//! JSON (serde_json). Decoding never panics: empty bytes, an unknown version,
//! truncated or malformed JSON all come back as [`StoreError::Corrupt`] naming
//! the table and key. A later format adds an arm to [`decode`] that reads the
//! old payload and upgrades it (garage's `Migrate` pattern), so files written
//! by older releases keep decoding. Pure functions, no shared state.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;

/// The format every value is written in today.
pub(crate) const FORMAT_JSON_V1: u8 = 1;

/// Encodes `value` as format-1 bytes. `what` names the value in the error.
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![FORMAT_JSON_V1];
    serde_json::to_writer(&mut out, value).map_err(|e| StoreError::Encode {
        what,
        reason: e.to_string(),
    })?;
    Ok(out)
}

/// Decodes bytes written by [`encode`] (or by an older format, once there is one).
pub fn decode<T: DeserializeOwned>(table: &'static str, key: &[u8], bytes: &[u8]) -> Result<T, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        table,
        key: display_key(key),
        reason,
    };
    match bytes.split_first() {
        None => Err(corrupt("empty value".into())),
        Some((&FORMAT_JSON_V1, payload)) => {
            serde_json::from_slice(payload).map_err(|e| corrupt(format!("bad JSON: {e}")))
        }
        Some((other, _)) => Err(corrupt(format!(
            "unknown value format version {other} (this release reads format {FORMAT_JSON_V1})"
        ))),
    }
}

/// A key as an operator can read it in a message: text stays text, anything
/// else is escaped (`\0` between instance and group shows as `\x00`).
pub(crate) fn display_key(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    fn reason(err: StoreError) -> String {
        match err {
            StoreError::Corrupt { table, key, reason } => {
                assert_eq!(table, "t");
                assert_eq!(key, "k");
                reason
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_starts_with_the_format_byte() {
        let bytes = encode("ts", &Timestamp(42)).expect("encode");
        assert_eq!(bytes, b"\x0142");
        let back: Timestamp = decode("t", b"k", &bytes).expect("decode");
        assert_eq!(back, Timestamp(42));
    }

    #[test]
    fn empty_bytes_are_corrupt() {
        let r = reason(decode::<u32>("t", b"k", b"").unwrap_err());
        assert!(r.contains("empty"), "{r}");
    }

    #[test]
    fn unknown_format_version_is_corrupt() {
        let r = reason(decode::<u32>("t", b"k", b"\x0742").unwrap_err());
        assert!(r.contains("unknown value format version 7"), "{r}");
        let r = reason(decode::<u32>("t", b"k", b"\x0042").unwrap_err());
        assert!(r.contains("version 0"), "{r}");
    }

    #[test]
    fn truncated_and_malformed_json_are_corrupt() {
        let full = encode("v", &serde_json::json!({"a": [1, 2, 3]})).expect("encode");
        for cut in 1..full.len() {
            let r = decode::<serde_json::Value>("t", b"k", &full[..cut]);
            assert!(r.is_err(), "prefix of length {cut} decoded");
        }
        let r = reason(decode::<u32>("t", b"k", b"\x01\"text\"").unwrap_err());
        assert!(r.starts_with("bad JSON"), "{r}");
        let r = reason(decode::<u32>("t", b"k", b"\x01\xff\xfe").unwrap_err());
        assert!(r.starts_with("bad JSON"), "{r}");
    }

    #[test]
    fn numbers_read_back_exactly() {
        // serde_json's default float parser may land one step off the
        // nearest double; with `float_roundtrip` a stored number decodes to
        // the value that was written (found by the store_codec fuzz target).
        for x in [
            -1.1111111277777779_f64,
            0.7,
            0.1 + 0.2,
            f64::MIN_POSITIVE,
            1e300,
            5e-324,
        ] {
            let doc = serde_json::json!({ "scheduler": { "target_utilization": x } });
            let back: serde_json::Value =
                decode("t", b"k", &encode("settings", &doc).expect("encode")).expect("decode");
            assert_eq!(back, doc, "{x:e}");
        }
        let back: serde_json::Value = decode("t", b"k", b"\x01-1.1111111277777779").expect("decode");
        assert_eq!(back.as_f64(), Some(-1.1111111277777779));
    }

    #[test]
    fn keys_are_shown_escaped() {
        assert_eq!(display_key(b"web\0probe"), "web\\x00probe");
        assert_eq!(display_key(b"\xff"), "\\xff");
    }
}

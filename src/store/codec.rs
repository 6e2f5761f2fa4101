//! The one place that turns stored values into bytes and back.
//!
//! Every value in every table is `[format version][payload]`, the payload
//! JSON (serde_json), except where a type's current version is binary
//! (postcard, [`to_binary`]): task records, format 2. Decoding never panics: empty bytes, an unknown version,
//! truncated or malformed JSON all come back as [`StoreError::Corrupt`] naming
//! the table and key. Pure functions, no shared state.
//!
//! A table's value is one of the stored types in `stored`, which fix its
//! JSON shape and know their current format version ([`Versioned`]).
//! [`encode_stored`] writes the current version; [`decode_stored`] reads it,
//! and hands a payload an older release wrote in an older version to
//! [`Versioned::upgrade`] (garage's `Migrate` pattern), so files written by
//! older releases keep decoding. A value this release does not know (a newer
//! version) is `Corrupt`. The `meta` table's numbers go through the plain
//! [`encode`] and [`decode`]: they stay in format 1 for ever.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;

/// Format 1: JSON. Every value was written in it up to now.
pub(crate) const FORMAT_JSON_V1: u8 = 1;

/// A stored value type as it is read back: its serde shape is the on-disk
/// format of version [`Versioned::VERSION`].
pub(crate) trait Versioned: DeserializeOwned {
    /// What the value is called in an error.
    const WHAT: &'static str;
    /// The format version this release writes, as the value's first byte.
    /// Bumped together with a new arm in [`Versioned::upgrade`].
    const VERSION: u8;

    /// Reads a payload written in `version` (at least 1, below
    /// [`Versioned::VERSION`]) by an older release, as the current version.
    /// Nothing to upgrade from while a type is at its first version.
    fn upgrade(version: u8, payload: &[u8]) -> Result<Self, String> {
        let _ = payload;
        Err(unknown_version(version, Self::VERSION))
    }

    /// Reads a payload of the current version: JSON, unless the type's
    /// current version is binary ([`from_binary`]).
    fn decode_current(payload: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(payload).map_err(|e| format!("bad JSON: {e}"))
    }
}

/// The write side of a stored value type (often a borrowing view of the
/// domain value, so writing needs no copies): it writes the JSON of
/// `Self::Value`'s current version.
pub(crate) trait Encodes: Serialize {
    type Value: Versioned;

    /// Appends the payload of `Self::Value`'s current version to `out`
    /// (which holds the version byte): JSON, unless that version is binary
    /// ([`to_binary`]).
    fn encode_payload(&self, mut out: Vec<u8>) -> Result<Vec<u8>, String> {
        serde_json::to_writer(&mut out, self).map_err(|e| e.to_string())?;
        Ok(out)
    }
}

/// Encodes `value` as `[current version][payload]`.
pub(crate) fn encode_stored<W: Encodes>(value: &W) -> Result<Vec<u8>, StoreError> {
    value
        .encode_payload(vec![W::Value::VERSION])
        .map_err(|reason| StoreError::Encode {
            what: W::Value::WHAT,
            reason,
        })
}

/// The binary payload of a type whose current version is binary: postcard
/// (varint integers, length-prefixed strings and lists, no field names),
/// appended to `out`.
pub(crate) fn to_binary<T: Serialize + ?Sized>(value: &T, mut out: Vec<u8>) -> Result<Vec<u8>, String> {
    // Into a buffer on the stack first: postcard writes byte by byte, and
    // into a slice that is a store, not a `Vec` push. A value that does not
    // fit (a task with long failed-item messages) goes to the heap.
    let mut buf = [0u8; 512];
    match postcard::to_slice(value, &mut buf) {
        Ok(bytes) => out.extend_from_slice(bytes),
        Err(postcard::Error::SerializeBufferFull) => {
            out.extend_from_slice(&postcard::to_allocvec(value).map_err(|e| e.to_string())?)
        }
        Err(e) => return Err(e.to_string()),
    }
    Ok(out)
}

/// Reads a payload [`to_binary`] wrote. Bytes left over after the value are
/// an error, as trailing text after JSON is.
pub(crate) fn from_binary<T: DeserializeOwned>(payload: &[u8]) -> Result<T, String> {
    let (value, rest) = postcard::take_from_bytes(payload).map_err(|e| format!("bad binary record: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("bad binary record: {} bytes after its end", rest.len()));
    }
    Ok(value)
}

/// Encodes `value` in format `version` of `W::Value`, an older one than
/// it writes by default: only the inside of an encrypted backup uses it,
/// to hold credentials in plaintext (format 1) for the machine it is
/// restored on to seal under its own key.
pub(crate) fn encode_stored_version<W: Encodes>(version: u8, value: &W) -> Result<Vec<u8>, StoreError> {
    encode_as(version, W::Value::WHAT, value)
}

/// Decodes a stored value of type `T`, upgrading one an older release wrote.
pub(crate) fn decode_stored<T: Versioned>(table: &'static str, key: &[u8], bytes: &[u8]) -> Result<T, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        table,
        key: display_key(key),
        reason,
    };
    match bytes.split_first() {
        None => Err(corrupt("empty value".into())),
        Some((&version, payload)) if version == T::VERSION => T::decode_current(payload).map_err(corrupt),
        Some((&version, payload)) if (FORMAT_JSON_V1..T::VERSION).contains(&version) => {
            T::upgrade(version, payload).map_err(corrupt)
        }
        Some((&other, _)) => Err(corrupt(unknown_version(other, T::VERSION))),
    }
}

pub(crate) fn unknown_version(found: u8, current: u8) -> String {
    format!("unknown value format version {found} (this release reads format {current})")
}

fn encode_as<T: Serialize + ?Sized>(version: u8, what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![version];
    serde_json::to_writer(&mut out, value).map_err(|e| StoreError::Encode {
        what,
        reason: e.to_string(),
    })?;
    Ok(out)
}

/// Encodes `value` as format-1 bytes. `what` names the value in the error.
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    encode_as(FORMAT_JSON_V1, what, value)
}

/// Decodes format-1 bytes written by [`encode`].
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
        Some((&other, _)) => Err(corrupt(unknown_version(other, FORMAT_JSON_V1))),
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

    /// A value at its second format: version 1 called the name `title`
    /// and had no scope, which version 2 reads as `admin`.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Named {
        name: String,
        scope: String,
    }

    impl Versioned for Named {
        const WHAT: &'static str = "named";
        const VERSION: u8 = 2;

        fn upgrade(version: u8, payload: &[u8]) -> Result<Self, String> {
            #[derive(serde::Deserialize)]
            struct V1 {
                title: String,
            }
            match version {
                1 => {
                    let old: V1 = serde_json::from_slice(payload).map_err(|e| format!("bad JSON: {e}"))?;
                    Ok(Named {
                        name: old.title,
                        scope: "admin".into(),
                    })
                }
                other => Err(unknown_version(other, Self::VERSION)),
            }
        }
    }

    impl Encodes for Named {
        type Value = Named;
    }

    #[test]
    fn an_older_version_is_upgraded_on_decode_and_the_current_one_is_written() {
        let current = Named {
            name: "ci".into(),
            scope: "read".into(),
        };
        let bytes = encode_stored(&current).expect("encode");
        assert_eq!(bytes, b"\x02{\"name\":\"ci\",\"scope\":\"read\"}");
        assert_eq!(decode_stored::<Named>("t", b"k", &bytes).expect("current"), current);
        let old: Named = decode_stored("t", b"k", b"\x01{\"title\":\"ci\"}").expect("upgraded");
        assert_eq!(
            old,
            Named {
                name: "ci".into(),
                scope: "admin".into()
            }
        );
        let r = reason(decode_stored::<Named>("t", b"k", b"\x01{\"name\":\"ci\"}").unwrap_err());
        assert!(r.starts_with("bad JSON"), "{r}");
        for bad in [&b"\x03{}"[..], b"\x00{}", b""] {
            let r = reason(decode_stored::<Named>("t", b"k", bad).unwrap_err());
            assert!(r.contains("unknown value format version") || r.contains("empty"), "{r}");
        }
    }

    #[test]
    fn a_value_at_its_first_version_refuses_every_other() {
        #[derive(Debug, serde::Deserialize)]
        struct First;
        impl Versioned for First {
            const WHAT: &'static str = "first";
            const VERSION: u8 = FORMAT_JSON_V1;
        }
        for bad in [&b"\x00null"[..], b"\x02null", b"\xffnull"] {
            let r = reason(decode_stored::<First>("t", b"k", bad).unwrap_err());
            assert!(r.contains("unknown value format version"), "{r}");
            assert!(r.contains("reads format 1"), "{r}");
        }
        assert!(decode_stored::<First>("t", b"k", b"\x01null").is_ok());
    }

    #[test]
    fn keys_are_shown_escaped() {
        assert_eq!(display_key(b"web\0probe"), "web\\x00probe");
        assert_eq!(display_key(b"\xff"), "\\xff");
    }
}

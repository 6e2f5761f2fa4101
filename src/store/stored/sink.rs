//! The `settings` value under `sink`: the `[sink]` document saved from the
//! UI or API (or `null`, the sink turned off), as JSON.
//!
//! Format 2 holds its secrets sealed (see `crate::secrets`): each value of
//! `headers` is a sealed string, and a URL with a password in its userinfo
//! is kept whole in `url_sealed` while `url` shows it without the
//! password. Format 1 (older releases, and the inside of an encrypted
//! backup) is the plain document; it still reads, to be sealed when the
//! store next opens with its key.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned, unknown_version};
use super::secret::without_password;
use crate::secrets::{DataKey, SINK_URL_AAD, sink_header_aad};

pub(crate) const SINK_SEALED_V2: u8 = 2;
const URL_SEALED: &str = "url_sealed";

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StoredSink {
    /// Format 2.
    Sealed(Value),
    /// Format 1: the document as the API saved it.
    Plain(Value),
}

impl Versioned for StoredSink {
    const WHAT: &'static str = "sink settings";
    const VERSION: u8 = SINK_SEALED_V2;

    fn upgrade(version: u8, payload: &[u8]) -> Result<Self, String> {
        match version {
            FORMAT_JSON_V1 => serde_json::from_slice(payload)
                .map(StoredSink::Plain)
                .map_err(|e| format!("bad JSON: {e}")),
            other => Err(unknown_version(other, Self::VERSION)),
        }
    }
}

impl Encodes for StoredSink {
    type Value = StoredSink;
}

impl Serialize for StoredSink {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StoredSink::Sealed(v) | StoredSink::Plain(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for StoredSink {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(StoredSink::Sealed)
    }
}

impl StoredSink {
    /// The document to write, its secrets sealed under `key`.
    /// Without a key, only a document with no secret can be written.
    pub(crate) fn seal(doc: &Value, key: Option<&DataKey>, rng: &mut impl rand::Rng) -> Result<Self, String> {
        let Some(key) = key else {
            let headers = doc
                .get("headers")
                .and_then(Value::as_object)
                .is_some_and(|h| !h.is_empty());
            let url = doc.get("url").and_then(Value::as_str).and_then(without_password);
            if headers || url.is_some() {
                return Err("the sink's secrets cannot be sealed: no data key is loaded".into());
            }
            return Ok(StoredSink::Sealed(doc.clone()));
        };
        let mut doc = doc.clone();
        if let Some(obj) = doc.as_object_mut() {
            if let Some(Value::Object(headers)) = obj.get_mut("headers") {
                for (name, value) in headers.iter_mut() {
                    if let Value::String(text) = value {
                        *value = Value::String(key.seal_with(rng, &sink_header_aad(name), text));
                    }
                }
            }
            let url = obj.get("url").and_then(Value::as_str).map(str::to_string);
            if let Some(url) = url
                && let Some(shown) = without_password(&url)
            {
                obj.insert(URL_SEALED.into(), Value::String(key.seal_with(rng, SINK_URL_AAD, &url)));
                obj.insert("url".into(), Value::String(shown));
            }
        }
        Ok(StoredSink::Sealed(doc))
    }

    /// Every sealed value with its associated data.
    pub(crate) fn sealed(&self) -> Vec<(String, String)> {
        let StoredSink::Sealed(Value::Object(obj)) = self else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(Value::Object(headers)) = obj.get("headers") {
            for (name, value) in headers {
                if let Value::String(s) = value {
                    out.push((sink_header_aad(name), s.clone()));
                }
            }
        }
        if let Some(Value::String(s)) = obj.get(URL_SEALED) {
            out.push((SINK_URL_AAD.to_string(), s.clone()));
        }
        out
    }

    /// The document as the API saved it, its secrets opened with `key`
    /// (needed only when there are sealed ones).
    pub(crate) fn open(self, key: Option<&DataKey>) -> Result<Value, String> {
        let mut doc = match self {
            StoredSink::Plain(doc) => return Ok(doc),
            StoredSink::Sealed(doc) => doc,
        };
        let Some(obj) = doc.as_object_mut() else {
            return Ok(doc);
        };
        let open = |aad: &str, sealed: &str| -> Result<String, String> {
            let key = key.ok_or_else(|| format!("{aad} is sealed and no data key is loaded"))?;
            key.open(aad, sealed)
                .map(|s| s.expose().to_string())
                .map_err(|e| format!("{aad}: {e}"))
        };
        if let Some(Value::Object(headers)) = obj.get_mut("headers") {
            for (name, value) in headers.iter_mut() {
                if let Value::String(sealed) = value {
                    *value = Value::String(open(&sink_header_aad(name), sealed)?);
                }
            }
        }
        match obj.remove(URL_SEALED) {
            None => {}
            Some(Value::String(sealed)) => {
                let url = open(SINK_URL_AAD, &sealed)?;
                obj.insert("url".into(), Value::String(url));
            }
            Some(_) => return Err("url_sealed is not a string".into()),
        }
        Ok(doc)
    }
}

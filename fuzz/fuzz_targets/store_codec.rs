//! The decoders of stored values: bytes read out of a table of
//! `pollster.redb` (a task record with its breaker and dead-letter state, an
//! instance, a settings document, a token, a user, a session, a history
//! rollup, the schema version), decoded the way the store reads that table.
//! Bad bytes are an error, never a panic; every value that decodes encodes to
//! bytes that decode to the same value; a decoded task key is written back
//! as the same bytes; and a saved monitoring settings document, whatever it
//! holds, resolves to settings that validate or to field errors.
//!
//! Input: byte 0 picks the table, byte 1 is the key's length, then the key,
//! then the value (`\x01` and JSON, for a value the store wrote; a task
//! record is `\x02` and postcard).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pollster::engine::settings::SettingsLayers;
use pollster::model::{InstanceConfig, MonitoringSettings, TaskKey, TaskRecord};
use pollster::store::fuzzing::{decode, decode_instance, decode_task, encode, encode_task, task_key};
use pollster::store::{Rollup, SessionRow, TokenInfo, UserRecord};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

fuzz_target!(|data: &[u8]| {
    let Some((&table, rest)) = data.split_first() else {
        return;
    };
    let Some((&len, rest)) = rest.split_first() else { return };
    let (key, value) = rest.split_at(usize::from(len).min(rest.len()));
    match table % 8 {
        0 => {
            if let Ok((k, record)) = decode_task(key, value) {
                let written = task_key(&k).expect("a decoded key encodes");
                assert_eq!(written, key, "task key {k:?}");
                let bytes = encode_task(&record).expect("encodes");
                let (k2, back): (TaskKey, TaskRecord) = decode_task(key, &bytes).expect("decodes");
                assert_eq!((&k2, &back), (&k, &record), "task record written as {bytes:?}");
            }
        }
        1 => {
            if let Ok(inst) = decode_instance(key, value) {
                let bytes = encode("instance", &inst).expect("encodes");
                let back: InstanceConfig = decode_instance(key, &bytes).expect("decodes");
                assert_eq!(back, inst, "written as {:?}", String::from_utf8_lossy(&bytes));
            }
        }
        2 => {
            if let Some(doc) = round_trip::<serde_json::Value>("settings", key, value) {
                // What the engine does with the saved `monitoring` document.
                let layers = SettingsLayers {
                    file: MonitoringSettings::default(),
                    saved: doc,
                    env: Default::default(),
                };
                if let Ok(s) = layers.effective() {
                    assert!(s.validate().is_ok(), "{s:?}");
                }
            }
        }
        3 => {
            round_trip::<TokenInfo>("tokens", key, value);
        }
        4 => {
            round_trip::<UserRecord>("users", key, value);
        }
        5 => {
            round_trip::<SessionRow>("sessions", key, value);
        }
        6 => {
            round_trip::<Rollup>("history", key, value);
        }
        _ => {
            round_trip::<u32>("meta", key, value);
        }
    }
});

/// Decode as the store does; if that works, encode and decode again.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(
    table: &'static str,
    key: &[u8],
    value: &[u8],
) -> Option<T> {
    let v: T = decode(table, key, value).ok()?;
    let bytes = encode(table, &v).expect("a decoded value encodes");
    let back: T = decode(table, key, &bytes).expect("an encoded value decodes");
    assert_eq!(back, v, "{table}: written as {:?}", String::from_utf8_lossy(&bytes));
    Some(v)
}

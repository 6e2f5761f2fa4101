//! The keys a member publishes in its chitchat state, and their values.
//!
//! - `ready`, `paused`: `1` or `0`; `hash`: the config hash;
//! - `units`: the units it polls now (JSON list of `pool:<name>` and
//!   `instance:<name>`); `load`: `{"tasks": n, "rps": x}`;
//! - `u/<unit>`: the state of a unit it polls, or polled last:
//!   `{"at": ms, "aimd": "<the aimd table's JSON>", "chunks": n}`, and
//!   `u/<unit>/<i>` for `i < n`: its dead-lettered and discarded tasks, at
//!   most [`CHUNK`] each, as the `tasks` table's rows (base64 key and value);
//!   when it lets the unit go, every task's row, so that the next owner
//!   polls each one when it is due.
//!
//! Pure: encoding and decoding only.

use crate::core::ownership::Unit;
use crate::engine::UnitState;
use crate::store::wire;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

pub const READY: &str = "ready";
pub const PAUSED: &str = "paused";
pub const HASH: &str = "hash";
pub const UNITS: &str = "units";
pub const LOAD: &str = "load";
/// The prefix of every unit's keys.
pub const UNIT_PREFIX: &str = "u/";
/// Task records in one chunk: a few hundred bytes each, so a chunk stays
/// well inside a datagram.
pub const CHUNK: usize = 50;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Head {
    /// When the owner published this (ms since the epoch, its clock).
    at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    aimd: Option<String>,
    #[serde(default)]
    chunks: usize,
}

/// A member's load as published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    pub tasks: usize,
    pub rps: f64,
}

pub fn head_key(unit: &Unit) -> String {
    format!("{UNIT_PREFIX}{unit}")
}

fn chunk_key(unit: &Unit, i: usize) -> String {
    format!("{UNIT_PREFIX}{unit}/{i}")
}

pub fn encode_units(units: &BTreeSet<Unit>) -> String {
    let names: Vec<String> = units.iter().map(ToString::to_string).collect();
    serde_json::to_string(&names).unwrap_or_default()
}

pub fn decode_units(text: &str) -> BTreeSet<Unit> {
    serde_json::from_str::<Vec<String>>(text)
        .unwrap_or_default()
        .iter()
        .filter_map(|s| Unit::parse(s))
        .collect()
}

/// A unit's AIMD state (JSON) and its chunks of task rows.
pub type Content = (Option<String>, Vec<String>);

/// The content of a unit's keys, without the time: what is compared to
/// decide whether to publish again.
pub fn encode_content(state: &UnitState) -> Content {
    let aimd = state.aimd.as_ref().map(wire::aimd_to_json);
    let rows: Vec<[String; 2]> = state
        .records
        .iter()
        .filter_map(|(k, r)| wire::task_to_bytes(k, r))
        .map(|(k, v)| [STANDARD.encode(k), STANDARD.encode(v)])
        .collect();
    let chunks = rows
        .chunks(CHUNK)
        .map(|c| serde_json::to_string(c).unwrap_or_default())
        .collect();
    (aimd, chunks)
}

/// The keys and values of a unit's state published at `at`.
pub fn encode_unit(unit: &Unit, at: u64, content: &Content) -> Vec<(String, String)> {
    let head = Head {
        at,
        aimd: content.0.clone(),
        chunks: content.1.len(),
    };
    let mut out = vec![(head_key(unit), serde_json::to_string(&head).unwrap_or_default())];
    for (i, c) in content.1.iter().enumerate() {
        out.push((chunk_key(unit, i), c.clone()));
    }
    out
}

/// The chunk keys of `unit` beyond the first `chunks`, among `keys`: left
/// over from a longer queue, to delete.
pub fn stale_chunks<'a>(unit: &Unit, chunks: usize, keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    let prefix = format!("{UNIT_PREFIX}{unit}/");
    keys.filter_map(|k| k.strip_prefix(&prefix).map(|i| (k, i)))
        .filter(|(_, i)| i.parse::<usize>().map_or(true, |i| i >= chunks))
        .map(|(k, _)| k.to_string())
        .collect()
}

/// A unit's state as one member published it: when, and what. `get` reads
/// that member's keys. `None` when it published none (or it is unreadable).
pub fn decode_unit<'a>(unit: &Unit, get: impl Fn(&str) -> Option<&'a str>) -> Option<(u64, UnitState)> {
    let head: Head = serde_json::from_str(get(&head_key(unit))?).ok()?;
    let mut state = UnitState {
        aimd: head.aimd.as_deref().and_then(wire::aimd_from_json),
        records: Vec::new(),
    };
    for i in 0..head.chunks {
        let rows: Vec<[String; 2]> = serde_json::from_str(get(&chunk_key(unit, i))?).ok()?;
        for [k, v] in rows {
            let (Ok(k), Ok(v)) = (STANDARD.decode(k), STANDARD.decode(v)) else {
                continue;
            };
            if let Some(row) = wire::task_from_bytes(&k, &v) {
                state.records.push(row);
            }
        }
    }
    Some((head.at, state))
}

/// The time in a unit's head, to compare members' states cheaply.
pub fn head_at(text: &str) -> Option<u64> {
    serde_json::from_str::<Head>(text).ok().map(|h| h.at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::aimd::{AimdState, Announced, Recovery};
    use crate::model::{DeadLetterReason, DeadLetterRecord, TaskKey, TaskRecord, Timestamp};
    use std::collections::BTreeMap;

    fn state(n: usize) -> UnitState {
        let aimd = AimdState {
            configured_rps: 10.0,
            effective_rps: 6.5,
            last_decrease: Some(Timestamp(1_000)),
            last_429: Some(Timestamp(1_000)),
            last_429_rps: Some(7.2),
            held_rps: None,
            probe_after: None,
            recovery: Recovery::Additive,
            at: Timestamp(2_000),
            announced: Announced::default(),
        };
        let records = (0..n)
            .map(|i| {
                let rec = TaskRecord {
                    failures: 5,
                    dead_letter: Some(DeadLetterRecord {
                        reason: DeadLetterReason::PermanentFailure,
                        since: Timestamp(3_000 + i as u64),
                        next_recheck: Timestamp(9_000),
                        rechecks: 1,
                    }),
                    ..TaskRecord::default()
                };
                (TaskKey::new(&format!("org-{i}"), "devices"), rec)
            })
            .collect();
        UnitState {
            aimd: Some(aimd),
            records,
        }
    }

    #[test]
    fn a_unit_state_goes_through_gossip_unchanged_in_chunks() {
        let unit = Unit::Pool("meraki".into());
        let st = state(CHUNK * 2 + 3);
        let kv: BTreeMap<String, String> = encode_unit(&unit, 42, &encode_content(&st)).into_iter().collect();
        assert_eq!(kv.len(), 1 + 3, "a head and three chunks");
        assert!(kv.values().all(|v| v.len() < 40_000), "each value fits a datagram");
        let (at, back) = decode_unit(&unit, |k| kv.get(k).map(String::as_str)).unwrap();
        assert_eq!(at, 42);
        assert_eq!(back, st);
    }

    #[test]
    fn a_missing_chunk_reads_as_no_state_rather_than_part_of_one() {
        let unit = Unit::Instance("pve".into());
        let mut kv: BTreeMap<String, String> = encode_unit(&unit, 1, &encode_content(&state(CHUNK + 1)))
            .into_iter()
            .collect();
        kv.remove(&chunk_key(&unit, 1));
        assert_eq!(decode_unit(&unit, |k| kv.get(k).map(String::as_str)), None);
        let keys = [
            "u/instance:pve/0",
            "u/instance:pve/1",
            "u/instance:pve/7",
            "u/instance:pvex/3",
        ];
        assert_eq!(
            stale_chunks(&unit, 1, keys.into_iter()),
            ["u/instance:pve/1", "u/instance:pve/7"]
        );
    }

    #[test]
    fn units_read_back_as_written_and_junk_reads_as_none() {
        let units = BTreeSet::from([Unit::Pool("a".into()), Unit::Instance("b".into())]);
        assert_eq!(decode_units(&encode_units(&units)), units);
        assert!(decode_units("not json").is_empty());
    }
}

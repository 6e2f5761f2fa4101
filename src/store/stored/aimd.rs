//! An `aimd` value: what of a budget pool's AIMD state outlives a restart
//! (the effective budget, the last decrease and 429 and the level of that
//! 429, the recovery in progress). Times are milliseconds since the epoch.
//! `last_429_rps`, `held_rps`, `probe_after` and `announced` came later: bytes without them decode (no level, no rate
//! that held, nothing announced).

use serde::{Deserialize, Serialize};

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use crate::core::aimd::{AimdState, Announced, Recovery};
use crate::model::Timestamp;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredAimd {
    #[serde(rename = "configured_rps")]
    configured_rps: f64,
    #[serde(rename = "effective_rps")]
    effective_rps: f64,
    #[serde(rename = "last_decrease", default, skip_serializing_if = "Option::is_none")]
    last_decrease: Option<u64>,
    #[serde(rename = "last_429", default, skip_serializing_if = "Option::is_none")]
    last_429: Option<u64>,
    #[serde(rename = "last_429_rps", default, skip_serializing_if = "Option::is_none")]
    last_429_rps: Option<f64>,
    #[serde(rename = "held_rps", default, skip_serializing_if = "Option::is_none")]
    held_rps: Option<f64>,
    #[serde(rename = "probe_after", default, skip_serializing_if = "Option::is_none")]
    probe_after: Option<u64>,
    #[serde(rename = "recovery")]
    recovery: StoredRecovery,
    #[serde(rename = "at")]
    at: u64,
    #[serde(rename = "announced", default, skip_serializing_if = "StoredAnnounced::is_quiet")]
    announced: StoredAnnounced,
}

/// The pool's plan as last announced: over budget, and the groups shed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct StoredAnnounced {
    #[serde(rename = "over_budget", default)]
    over_budget: bool,
    #[serde(rename = "shed", default, skip_serializing_if = "Vec::is_empty")]
    shed: Vec<String>,
}

impl StoredAnnounced {
    fn is_quiet(&self) -> bool {
        !self.over_budget && self.shed.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
enum StoredRecovery {
    #[serde(rename = "additive")]
    Additive,
    #[serde(rename = "fast")]
    Fast {
        #[serde(rename = "rps_per_minute")]
        rps_per_minute: f64,
        #[serde(rename = "until_rps")]
        until_rps: f64,
    },
}

impl Versioned for StoredAimd {
    const WHAT: &'static str = "AIMD state";
    const VERSION: u8 = FORMAT_JSON_V1;
}

impl Encodes for StoredAimd {
    type Value = StoredAimd;
}

impl From<&AimdState> for StoredAimd {
    fn from(s: &AimdState) -> Self {
        StoredAimd {
            configured_rps: s.configured_rps,
            effective_rps: s.effective_rps,
            last_decrease: s.last_decrease.map(|t| t.0),
            last_429: s.last_429.map(|t| t.0),
            last_429_rps: s.last_429_rps,
            held_rps: s.held_rps,
            probe_after: s.probe_after.map(|t| t.0),
            recovery: match s.recovery {
                Recovery::Additive => StoredRecovery::Additive,
                Recovery::Fast {
                    rps_per_minute,
                    until_rps,
                } => StoredRecovery::Fast {
                    rps_per_minute,
                    until_rps,
                },
            },
            at: s.at.0,
            announced: StoredAnnounced {
                over_budget: s.announced.over_budget,
                shed: s.announced.shed.clone(),
            },
        }
    }
}

impl From<StoredAimd> for AimdState {
    fn from(s: StoredAimd) -> Self {
        AimdState {
            configured_rps: s.configured_rps,
            effective_rps: s.effective_rps,
            last_decrease: s.last_decrease.map(Timestamp),
            last_429: s.last_429.map(Timestamp),
            last_429_rps: s.last_429_rps,
            held_rps: s.held_rps,
            probe_after: s.probe_after.map(Timestamp),
            recovery: match s.recovery {
                StoredRecovery::Additive => Recovery::Additive,
                StoredRecovery::Fast {
                    rps_per_minute,
                    until_rps,
                } => Recovery::Fast {
                    rps_per_minute,
                    until_rps,
                },
            },
            at: Timestamp(s.at),
            announced: Announced {
                over_budget: s.announced.over_budget,
                shed: s.announced.shed,
            },
        }
    }
}

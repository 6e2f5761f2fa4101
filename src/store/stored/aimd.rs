//! An `aimd` value: what of a budget pool's AIMD state outlives a restart
//! (the effective budget, the last decrease and 429 and the level of that
//! 429, the recovery in progress). Times are milliseconds since the epoch.
//! `last_429_rps` came later: bytes without it decode (no level known).

use serde::{Deserialize, Serialize};

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use crate::core::aimd::{AimdState, Recovery};
use crate::model::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
    #[serde(rename = "recovery")]
    recovery: StoredRecovery,
    #[serde(rename = "at")]
    at: u64,
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
        }
    }
}

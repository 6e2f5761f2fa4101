//! Budget pools' AIMD state, one row per pool, so a restart resumes the
//! effective budget and its recovery instead of probing an overloaded API
//! at the full budget again. The engine writes every pool's row in one
//! transaction when the state moved (a decrease, a pause, a recovery step
//! worth keeping) and at shutdown.

use redb::ReadableTable;

use super::stored::StoredAimd;
use super::tables::AIMD;
use super::{Ctx, Store, StoreError, codec};
use crate::core::aimd::AimdState;

/// Saved AIMD states by pool, and the rows that could not be read (each as
/// [`StoreError::Corrupt`]: that pool starts at its full budget).
pub type LoadedAimd = (Vec<(String, AimdState)>, Vec<StoreError>);

impl Store {
    /// Replace the saved AIMD states with `states` (pools not in it are
    /// forgotten).
    pub fn save_aimd(&self, states: &[(String, AimdState)]) -> Result<(), StoreError> {
        let rows: Vec<(&str, Vec<u8>)> = states
            .iter()
            .map(|(pool, s)| Ok((pool.as_str(), codec::encode_stored(&StoredAimd::from(s))?)))
            .collect::<Result<_, StoreError>>()?;
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(AIMD.def).ctx("opening table aimd")?;
            table.retain(|_, _| false).ctx("clearing table aimd")?;
            for (pool, v) in &rows {
                table
                    .insert(pool.as_bytes(), v.as_slice())
                    .ctx("writing an AIMD state")?;
            }
        }
        txn.commit().ctx("committing AIMD state")
    }

    /// Every saved AIMD state.
    pub fn load_aimd(&self) -> Result<LoadedAimd, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(AIMD.def).ctx("opening table aimd")?;
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for entry in table.iter().ctx("reading table aimd")? {
            let (k, v) = entry.ctx("reading table aimd")?;
            let pool = match std::str::from_utf8(k.value()) {
                Ok(p) => p.to_string(),
                Err(_) => {
                    bad.push(StoreError::Corrupt {
                        table: AIMD.name,
                        key: codec::display_key(k.value()),
                        reason: "pool name is not UTF-8".into(),
                    });
                    continue;
                }
            };
            match codec::decode_stored::<StoredAimd>(AIMD.name, k.value(), v.value()) {
                Ok(s) => out.push((pool, s.into())),
                Err(e) => bad.push(e),
            }
        }
        Ok((out, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::aimd::Recovery;
    use crate::model::Timestamp;

    #[test]
    fn saved_states_come_back_and_a_save_replaces_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let org = AimdState {
            configured_rps: 8.0,
            effective_rps: 4.25,
            last_decrease: Some(Timestamp(1_000)),
            last_429: Some(Timestamp(1_000)),
            last_429_rps: Some(5.6),
            held_rps: Some(4.0),
            probe_after: Some(Timestamp(400_000)),
            recovery: Recovery::Fast {
                rps_per_minute: 1.6,
                until_rps: 7.2,
            },
            at: Timestamp(5_000),
            announced: Default::default(),
        };
        let other = AimdState {
            last_decrease: None,
            recovery: Recovery::Additive,
            announced: crate::core::aimd::Announced {
                over_budget: true,
                shed: vec!["net/health".into(), "net/inventory".into()],
            },
            ..org.clone()
        };
        store
            .save_aimd(&[("org".into(), org.clone()), ("other".into(), other.clone())])
            .expect("save");
        let (loaded, bad) = store.load_aimd().expect("load");
        assert!(bad.is_empty());
        assert_eq!(
            loaded,
            vec![("org".to_string(), org), ("other".to_string(), other.clone())]
        );
        store.save_aimd(&[("org".into(), other.clone())]).expect("save");
        assert_eq!(store.load_aimd().expect("load").0, vec![("org".to_string(), other)]);
    }
}

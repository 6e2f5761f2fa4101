//! Per-minute rollups for the dashboard charts: one row per minute, keyed by
//! the minute's start (Unix seconds, big-endian so keys sort by time), pruned
//! after the retention period.

use serde::{Deserialize, Serialize};

use super::stored::StoredRollup;
use super::tables::HISTORY;
use super::{Ctx, Store, StoreError, codec};

/// What happened in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Rollup {
    pub polls: u64,
    pub errors: u64,
    /// Queue depth sampled at the end of the minute.
    pub queue_depth: u64,
    pub dead_letter: u64,
}

fn key(minute: u64) -> [u8; 8] {
    minute.to_be_bytes()
}

impl Store {
    /// Write (or replace) the rollup of the minute starting at `minute`
    /// (Unix seconds), and drop every row older than `keep_since`.
    pub fn put_rollup(&self, minute: u64, rollup: &Rollup, keep_since: u64) -> Result<(), StoreError> {
        let v = codec::encode_stored(&StoredRollup::from(rollup))?;
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(HISTORY.def).ctx("opening table history")?;
            table
                .insert(key(minute).as_slice(), v.as_slice())
                .ctx("writing a rollup")?;
            let old = key(keep_since);
            table.retain_in(..old.as_slice(), |_, _| false).ctx("pruning history")?;
        }
        txn.commit().ctx("committing history")
    }

    /// Rollups from `since` (Unix seconds) on, oldest first. Unreadable rows
    /// are skipped: a chart with a gap beats no chart.
    pub fn history_since(&self, since: u64) -> Result<Vec<(u64, Rollup)>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(HISTORY.def).ctx("opening table history")?;
        let from = key(since);
        let mut out = Vec::new();
        for entry in table.range(from.as_slice()..).ctx("reading table history")? {
            let (k, v) = entry.ctx("reading table history")?;
            let Ok(bytes) = <[u8; 8]>::try_from(k.value()) else {
                continue;
            };
            if let Ok(r) = codec::decode_stored::<StoredRollup>(HISTORY.name, k.value(), v.value()) {
                out.push((u64::from_be_bytes(bytes), r.into()));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollups_are_ordered_and_pruned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        for m in [300u64, 60, 240, 120, 180] {
            let r = Rollup {
                polls: m,
                ..Rollup::default()
            };
            s.put_rollup(m, &r, 0).expect("put");
        }
        let all = s.history_since(0).expect("read");
        assert_eq!(
            all.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
            vec![60, 120, 180, 240, 300]
        );
        assert_eq!(all[2].1.polls, 180);
        assert_eq!(s.history_since(200).expect("read").len(), 2);
        // Writing minute 360 with a retention that starts at 180 drops 60 and 120.
        s.put_rollup(360, &Rollup::default(), 180).expect("put");
        let kept: Vec<u64> = s.history_since(0).expect("read").iter().map(|(m, _)| *m).collect();
        assert_eq!(kept, vec![180, 240, 300, 360]);
    }
}

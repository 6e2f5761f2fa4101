//! What must survive a kill, and the operator's side of the torture: the
//! acknowledged dead-letter entries, discards and retries, the checks after
//! every kill and restart, and the flips and actions that keep entries
//! coming.

use super::procs::{Client, Entry, Key, key_str};
use super::report::Report;
use super::{FLIP_TO, Options, always_fails};
use rand::RngExt;
use rand::rngs::StdRng;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

/// What the driver knows and must check.
pub(super) struct State {
    /// Fleet behaviour of every instance, as the driver set it.
    pub(super) kind: HashMap<String, String>,
    /// Acknowledged entries that must stay, with the `since` they had.
    pub(super) must_stay: BTreeMap<Key, String>,
    /// Flapping entries seen (not required to stay).
    pub(super) flapping_seen: BTreeMap<Key, String>,
    /// Acknowledged discards: the target's hits when the discard was answered.
    pub(super) discarded: BTreeMap<Key, u64>,
    /// Acknowledged retries: the `nextRun` the answer promised.
    pub(super) retried: BTreeMap<Key, String>,
    pub(super) acknowledged: std::collections::BTreeSet<Key>,
}

impl State {
    /// Take in a listing the operator has now seen: entries of always
    /// failing targets join the set that must stay; a must-stay entry
    /// missing or with another `since` is a violation.
    pub(super) fn acknowledge(&mut self, list: &BTreeMap<Key, Entry>, when: &str, report: &mut Report) {
        for (k, e) in list {
            let kind = self.kind.get(&k.0).map(String::as_str).unwrap_or("");
            if self.retried.contains_key(k) || self.discarded.contains_key(k) {
                continue;
            }
            if always_fails(kind) {
                if let Some(since) = self.must_stay.get(k)
                    && *since != e.since
                {
                    report.missing += 1;
                    report.violations.push(format!(
                        "{when}: {} left the dead-letter queue and came back (since {since} → {})",
                        key_str(k),
                        e.since
                    ));
                }
                self.must_stay.insert(k.clone(), e.since.clone());
                self.acknowledged.insert(k.clone());
            } else if kind == "flapping" {
                self.flapping_seen.insert(k.clone(), e.since.clone());
            }
        }
        report.entries_acknowledged = self.acknowledged.len();
        report.flapping_acknowledged = self.flapping_seen.len();
        report.max_dead_letter = report.max_dead_letter.max(list.len());
    }

    /// Every must-stay entry is in `list` with its `since`. Returns the keys
    /// that are not.
    pub(super) fn absent(&self, list: &BTreeMap<Key, Entry>) -> Vec<Key> {
        self.must_stay
            .iter()
            .filter(|(k, since)| list.get(*k).is_none_or(|e| &e.since != *since))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The must-stay entries missing from the queue. The queue is read page
    /// by page while entries come and go, so an entry can slip from one page
    /// to another between two reads: one that seems missing from `list` is
    /// looked for in up to three fresh listings, and is missing only if none
    /// has it with its `since` (a lost entry that came back would have a new
    /// one).
    pub(super) async fn confirm_absent(
        &self,
        client: &Client,
        list: &BTreeMap<Key, Entry>,
    ) -> Result<Vec<Key>, String> {
        let mut absent = self.absent(list);
        for _ in 0..3 {
            if absent.is_empty() {
                break;
            }
            let again = client.dead_letters().await?;
            absent.retain(|k| again.get(k).is_none_or(|e| Some(&e.since) != self.must_stay.get(k)));
        }
        Ok(absent)
    }
}

/// Flip `n` healthy instances to a failing behaviour.
pub(super) async fn flip_some(
    client: &Client,
    st: &mut State,
    rng: &mut StdRng,
    n: usize,
    report: &mut Report,
) -> Result<(), String> {
    let mut healthy: Vec<String> = st
        .kind
        .iter()
        .filter(|(name, k)| k.as_str() == "healthy" && !st.retried.keys().any(|r| &r.0 == *name))
        .map(|(n, _)| n.clone())
        .collect();
    healthy.sort();
    for _ in 0..n.min(healthy.len()) {
        let name = healthy.swap_remove(rng.random_range(0..healthy.len()));
        let to = FLIP_TO[rng.random_range(0..FLIP_TO.len())];
        client.flip(&name, to).await?;
        st.kind.insert(name, to.to_string());
        report.flips += 1;
    }
    Ok(())
}

/// Discard an entry, or make its target healthy and retry it; record what
/// the answer promised.
pub(super) async fn operator_action(
    client: &Client,
    st: &mut State,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<(), String> {
    let list = client.dead_letters().await?;
    st.acknowledge(&list, "operator", report);
    let candidates: Vec<Key> = st.must_stay.keys().filter(|k| list.contains_key(*k)).cloned().collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let k = candidates[rng.random_range(0..candidates.len())].clone();
    if rng.random_bool(0.5) {
        let (status, _) = client.action(false, &k).await?;
        if status == 200 {
            let hits = client.hits(&k.0).await?;
            st.must_stay.remove(&k);
            st.discarded.insert(k, hits);
            report.discards += 1;
        } else {
            report.refused_actions += 1;
        }
    } else {
        // Healthy first, so the probe the retry starts succeeds.
        client.flip(&k.0, "healthy").await?;
        st.kind.insert(k.0.clone(), "healthy".into());
        st.must_stay.remove(&k);
        let (status, body) = client.action(true, &k).await?;
        if status == 202 {
            let next = body["nextRun"].as_str().unwrap_or_default().to_string();
            st.retried.insert(k, next);
            report.retries += 1;
        } else {
            report.refused_actions += 1;
        }
    }
    Ok(())
}

/// The checks right after a restart.
pub(super) async fn after_restart(
    client: &Client,
    st: &mut State,
    kill: usize,
    report: &mut Report,
) -> Result<(), String> {
    let list = client.dead_letters().await?;
    let absent = st.confirm_absent(client, &list).await?;
    report.entries_checked += (st.must_stay.len() - absent.len()) as u64;
    for k in &absent {
        report.missing += 1;
        let now = list
            .get(k)
            .map_or("absent".to_string(), |e| format!("since {}", e.since));
        report.violations.push(format!(
            "restart after kill {kill}: acknowledged entry {} (since {}) lost: {now}",
            key_str(k),
            st.must_stay[k]
        ));
    }
    // Counted once: if it is listed again it is a new entry.
    for k in &absent {
        st.must_stay.remove(k);
    }
    for (k, hits) in &st.discarded {
        report.discard_checks += 1;
        let now = client.hits(&k.0).await?;
        if list.contains_key(k) || now != *hits {
            report.discards_lost += 1;
            report.violations.push(format!(
                "restart after kill {kill}: discarded {} is back (listed: {}, polls since the discard: {})",
                key_str(k),
                list.contains_key(k),
                now.saturating_sub(*hits)
            ));
        }
    }
    let mut done = Vec::new();
    for (k, next) in &st.retried {
        report.retry_checks += 1;
        match list.get(k) {
            // The probe succeeded: the task left the queue.
            None => done.push(k.clone()),
            // Not probed yet: the recheck time is the one the retry set.
            Some(e) if e.next_run == *next => {}
            Some(e) => {
                report.retries_lost += 1;
                report.violations.push(format!(
                    "restart after kill {kill}: retried {} has nextRun {} (reason {}), the retry promised {next}",
                    key_str(k),
                    e.next_run,
                    e.reason
                ));
            }
        }
    }
    for k in done {
        st.retried.remove(&k);
    }
    st.acknowledge(&list, &format!("restart after kill {kill}"), report);
    Ok(())
}

/// The file itself, read by `pollster admin dlq list` while no server runs.
pub(super) fn offline_check(opts: &Options, config: &Path, st: &State, kill: usize, report: &mut Report) {
    let out = Command::new(&opts.pollster)
        .args(["admin", "dlq", "list", "--config", &config.to_string_lossy()])
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            report.violations.push(format!(
                "after kill {kill}: `pollster admin dlq list` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            return;
        }
        Err(e) => {
            report
                .violations
                .push(format!("after kill {kill}: cannot run pollster: {e}"));
            return;
        }
    };
    // TASK FAILURES SINCE NEXT-RECHECK LAST-ERROR
    let listed: HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let task = f.next()?.to_string();
            let _failures = f.next()?;
            Some((task, f.next()?.to_string()))
        })
        .collect();
    for (k, since) in &st.must_stay {
        report.offline_checked += 1;
        if listed.get(&key_str(k)) != Some(since) {
            report.offline_missing += 1;
            report.violations.push(format!(
                "after kill {kill}: acknowledged entry {} (since {since}) not in the file",
                key_str(k)
            ));
        }
    }
    for k in st.discarded.keys() {
        if listed.contains_key(&key_str(k)) {
            report.discards_lost += 1;
            report
                .violations
                .push(format!("after kill {kill}: discarded {} back in the file", key_str(k)));
        }
    }
}

/// New panics in the server log since the last scan.
pub(super) fn scan_log(log: &Path, scanned: &mut u64, kill: usize, report: &mut Report) {
    let Ok(text) = std::fs::read(log) else { return };
    let from = (*scanned as usize).min(text.len());
    let new = String::from_utf8_lossy(&text[from..]);
    for line in new.lines().filter(|l| l.contains("panicked")) {
        report.violations.push(format!("by kill {kill}: server log: {line}"));
    }
    *scanned = text.len() as u64;
}

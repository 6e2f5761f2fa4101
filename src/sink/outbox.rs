//! The outbox pump: change events move from the store's outbox into the
//! core's window in pages, and their rows are deleted once a batch holding
//! them is delivered. Store calls run on blocking threads; the state lock is
//! never held across them.

use super::{Batch, Inner, OutboxRead, lock};
use crate::store::Store;

impl Inner {
    /// A 2xx for `batch`: delete its outbox rows (and any whose deletion
    /// failed before). A row that cannot be deleted now is tried again
    /// with the next batch; if the process stops first, it is sent again
    /// after the restart (at least once).
    pub(super) async fn delivered(&self, batch: &Batch) {
        let Some(store) = self.outbox.get().cloned() else {
            return;
        };
        let seqs: Vec<u64> = {
            let mut st = lock(&self.state);
            if batch.seqs.is_empty() && st.undeleted.is_empty() {
                return;
            }
            let mut seqs = std::mem::take(&mut st.undeleted);
            seqs.extend(batch.seqs.iter().copied());
            seqs
        };
        let s = seqs.clone();
        match tokio::task::spawn_blocking(move || store.delete_outbox(&s)).await {
            Ok(Ok(n)) => self.metrics.outbox_depth.sub(n as i64),
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                    Ok(Ok(_)) => String::new(),
                };
                tracing::warn!(%error, rows = seqs.len(), "event sink: cannot delete delivered events from the outbox; will retry");
                lock(&self.state).undeleted.extend(seqs);
            }
        }
    }

    /// Read one page of the outbox into the core's window. Unreadable rows
    /// are logged and deleted (they can never be sent).
    pub(super) async fn read_outbox(&self, store: Store, read: OutboxRead) -> bool {
        let result = tokio::task::spawn_blocking(move || {
            let page = store.outbox_page(read.after, read.limit)?;
            let mut rows = Vec::with_capacity(page.len());
            let mut bad = Vec::new();
            let mut seen = read.after;
            for (seq, row) in page {
                seen = seen.max(seq);
                match row {
                    Ok(e) => rows.push((seq, e.line)),
                    Err(e) => bad.push((seq, e)),
                }
            }
            if !bad.is_empty() {
                let seqs: Vec<u64> = bad.iter().map(|(s, _)| *s).collect();
                store.delete_outbox(&seqs)?;
            }
            Ok::<_, crate::store::StoreError>((rows, seen, bad))
        })
        .await;
        let now = self.clock.now();
        match result {
            Ok(Ok((rows, seen, bad))) => {
                for (seq, e) in &bad {
                    tracing::error!(seq, error = %e, "event sink: unreadable outbox row deleted");
                }
                self.metrics.outbox_depth.sub(bad.len() as i64);
                let mut st = lock(&self.state);
                st.core.outbox_loaded(read, rows, seen, now);
                if !bad.is_empty() {
                    // The page may have been full of rows: look again.
                    st.core.outbox_committed();
                }
                self.publish(&mut st);
                true
            }
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                    Ok(Ok(_)) => String::new(),
                };
                tracing::warn!(%error, "event sink: cannot read the outbox; will retry");
                lock(&self.state).core.outbox_committed();
                false
            }
        }
    }

    /// The outbox as the driver starts: its depth for the gauge, or, with
    /// the sink off, cleared.
    pub(super) async fn open_outbox(&self) {
        let Some(store) = self.outbox.get().cloned() else {
            return;
        };
        let off = lock(&self.state).target.is_none();
        let result = tokio::task::spawn_blocking(move || {
            if off {
                store.clear_outbox().map(|n| (0, n))
            } else {
                store.outbox_len().map(|n| (n, 0))
            }
        })
        .await;
        match result {
            Ok(Ok((depth, cleared))) => {
                self.metrics.outbox_depth.set(depth as i64);
                if cleared > 0 {
                    tracing::info!(cleared, "event sink is off: cleared the undelivered change events");
                    let mut st = lock(&self.state);
                    st.core.count_discarded_outbox(cleared);
                    self.publish(&mut st);
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "event sink: cannot open the outbox"),
            Err(e) => tracing::warn!(error = %e, "event sink: cannot open the outbox"),
        }
    }

    /// The sink was turned off: clear the outbox, counting what it held.
    pub(super) async fn purge_outbox(&self, store: Store) {
        match tokio::task::spawn_blocking(move || store.clear_outbox()).await {
            Ok(Ok(n)) => {
                self.metrics.outbox_depth.sub(n as i64);
                let mut st = lock(&self.state);
                st.core.count_discarded_outbox(n);
                self.publish(&mut st);
                if n > 0 {
                    tracing::info!(
                        cleared = n,
                        "event sink disabled: cleared the undelivered change events"
                    );
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "event sink: cannot clear the outbox"),
            Err(e) => tracing::warn!(error = %e, "event sink: cannot clear the outbox"),
        }
    }
}

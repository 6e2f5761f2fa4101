//! The driver task: one loop that asks the core what to do next (wait, read
//! the outbox, send a batch, clear the outbox) and does it, until shutdown.

use super::delivery::{Target, post};
use super::{Batch, Inner, Next, OutboxRead, Outcome, lock};
use crate::model::Timestamp;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// The longest the driver sleeps before looking again, so a wall-clock jump
/// cannot stall it.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// Clears `alive` when the driver's future is dropped (ended or aborted).
pub(super) struct AliveGuard(pub(super) Arc<Inner>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.send_replace(false);
    }
}

enum Step {
    Wait(Option<Timestamp>),
    Send(Arc<Target>, Batch, Duration),
    Read(Store, OutboxRead),
    Purge(Store),
}

/// The driver: sleep until the core has a batch ready (or a wake-up), POST
/// it, report the outcome; until shutdown.
pub(super) async fn drive(inner: Arc<Inner>) {
    inner.open_outbox().await;
    let store = inner.outbox.get().cloned();
    loop {
        let step = {
            let mut st = lock(&inner.state);
            if st.stopped {
                return;
            }
            let purge = std::mem::take(&mut st.purge) && st.target.is_none();
            let read = match (&store, &st.target) {
                (Some(s), Some(_)) => st.core.outbox_wanted().map(|r| (s.clone(), r)),
                _ => None,
            };
            match (st.target.clone(), &store) {
                (None, Some(s)) if purge => Step::Purge(s.clone()),
                (None, _) => Step::Wait(None),
                (Some(_), _) if read.is_some() => {
                    let (s, r) = read.expect("checked");
                    Step::Read(s, r)
                }
                (Some(target), _) => match st.core.next(inner.clock.now()) {
                    Next::Idle => Step::Wait(None),
                    Next::WaitUntil(at) => Step::Wait(Some(at)),
                    Next::Send(batch) => Step::Send(target, batch, st.request_timeout),
                },
            }
        };
        match step {
            Step::Wait(None) => inner.wake.notified().await,
            Step::Wait(Some(at)) => {
                let delay = Duration::from_millis(at.0.saturating_sub(inner.clock.now().0)).min(MAX_SLEEP);
                tokio::select! {
                    _ = inner.wake.notified() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            Step::Send(target, batch, timeout) => {
                let outcome = match post(&inner.client, &target, batch.lines.clone(), timeout).await {
                    Ok(()) => Outcome::Ok,
                    Err(e) => e.outcome(),
                };
                let ok = outcome == Outcome::Ok;
                inner.settle(&batch, outcome);
                if ok {
                    inner.delivered(&batch).await;
                }
            }
            Step::Read(store, read) => {
                if !inner.read_outbox(store, read).await {
                    tokio::select! {
                        _ = inner.wake.notified() => {}
                        _ = tokio::time::sleep(MAX_SLEEP) => {}
                    }
                }
            }
            Step::Purge(store) => inner.purge_outbox(store).await,
        }
    }
}

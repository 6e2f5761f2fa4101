//! Maintenance windows in the running engine: the windows live in the
//! scheduler (which reads them as each poll completes, so no failure in a
//! window dead-letters), and one loop wakes at every window edge to record
//! it — `maintenance.start` and `maintenance.end` change events (and audit
//! entries), a log line, and `pollster_maintenance_active{instance}`.
//!
//! Whether a window's opening was recorded is kept with the window
//! (`open_since`), committed with the event: the loop records an opening
//! once, even across restarts, and after a restart records the closing of
//! a window that closed while the server was down. An operator ending an
//! open window records its closing in the same transaction as the delete
//! (`service::maintenance::end`).

use super::*;
use crate::core::catalog::Catalog;
use crate::core::maintenance::{self, MaintenanceWindow};
use std::collections::{BTreeMap, BTreeSet};

/// How often the loop looks again when no edge is near: the instances a
/// pool or type window covers change with the catalog.
const REFRESH: Duration = Duration::from_secs(15);

/// The instances of the catalog that `w` covers, by name.
pub fn instances_of(w: &MaintenanceWindow, cat: &Catalog) -> Vec<String> {
    cat.instances
        .values()
        .filter(|e| {
            let c = &e.config;
            w.target.covers(&c.name, &c.type_name, c.budget.as_deref())
        })
        .map(|e| e.config.name.to_string())
        .collect()
}

impl Shared {
    /// The maintenance windows in force.
    pub(super) fn maintenance_windows(&self) -> Vec<MaintenanceWindow> {
        self.core().scheduler.maintenance().to_vec()
    }

    /// Put a window in force (a new one replaces one of the same id), and
    /// record its edge at once if it is open.
    pub(super) fn put_maintenance(&self, window: MaintenanceWindow) {
        {
            let mut c = self.core();
            let mut windows = c.scheduler.maintenance().to_vec();
            windows.retain(|w| w.id != window.id);
            windows.push(window);
            c.scheduler.set_maintenance(windows);
        }
        self.maintenance_wake.notify_one();
    }

    /// Take the window `id` out of force; `false` when there is none.
    pub(super) fn remove_maintenance(&self, id: &str) -> bool {
        let removed = {
            let mut c = self.core();
            let mut windows = c.scheduler.maintenance().to_vec();
            let before = windows.len();
            windows.retain(|w| w.id != id);
            let removed = windows.len() != before;
            c.scheduler.set_maintenance(windows);
            removed
        };
        self.maintenance_wake.notify_one();
        removed
    }

    /// The window `id` as recorded open since `open_since` (or closed), in
    /// the scheduler's copy, if it is still there.
    fn mark_maintenance(&self, id: &str, open_since: Option<Timestamp>) {
        let mut c = self.core();
        let mut windows = c.scheduler.maintenance().to_vec();
        if let Some(w) = windows.iter_mut().find(|w| w.id == id) {
            w.open_since = open_since;
            c.scheduler.set_maintenance(windows);
        }
    }
}

/// One window whose opening or closing is to be recorded: what to store
/// and the events that say so.
struct Edge {
    id: String,
    open_since: Option<Timestamp>,
    events: Vec<Event>,
}

pub(super) async fn maintenance_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut labelled = BTreeSet::new();
    loop {
        let now = shared.now();
        let windows = shared.core().scheduler.maintenance();
        let cat = shared.catalog();
        for edge in edges(&cat, &windows, now) {
            record(&shared, edge).await;
        }
        set_gauge(&shared, &cat, &windows, now, &mut labelled);
        let sleep = match maintenance::next_change(&windows, now) {
            Some(at) => at.since(now).clamp(Duration::from_millis(1), REFRESH),
            None => REFRESH,
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = shared.maintenance_wake.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

/// The openings and closings not yet recorded, with their log lines.
fn edges(cat: &Catalog, windows: &[MaintenanceWindow], now: Timestamp) -> Vec<Edge> {
    let mut out = Vec::new();
    for w in windows {
        let open = maintenance::next_edges(&w.schedule, now).filter(|e| e.start <= now);
        let event = |action: &str| {
            Event::operator(now, "scheduler", action, &w.id)
                .with_window(instances_of(w, cat), &w.reason)
                .in_maintenance(true)
        };
        match (w.open_since, open) {
            (None, Some(e)) => {
                tracing::info!(
                    window = %w.id,
                    target = %w.target.describe(),
                    instances = ?instances_of(w, cat),
                    until = %e.end.to_rfc3339(),
                    reason = %w.reason,
                    maintenance = true,
                    "maintenance window open: failures will not dead-letter these instances"
                );
                out.push(Edge {
                    id: w.id.clone(),
                    open_since: Some(e.start),
                    events: vec![event("maintenance.start")],
                });
            }
            (Some(_), None) => {
                tracing::info!(
                    window = %w.id,
                    target = %w.target.describe(),
                    instances = ?instances_of(w, cat),
                    maintenance = true,
                    "maintenance window closed"
                );
                out.push(Edge {
                    id: w.id.clone(),
                    open_since: None,
                    events: vec![event("maintenance.end")],
                });
            }
            // Still open (a weekly stretch's computed start may move as its
            // earlier occurrences age; it is the same stretch), or still
            // closed.
            _ => {}
        }
    }
    out
}

/// Commit one edge with its events, then show it in the scheduler's copy.
/// A failed commit is logged and tried again at the next look.
async fn record(shared: &Shared, edge: Edge) {
    let rows: Vec<OutboxEvent> = edge.events.iter().filter_map(|e| shared.sink.stage(e)).collect();
    let store = shared.store.clone();
    let (id, open_since) = (edge.id.clone(), edge.open_since);
    let done = tokio::task::spawn_blocking(move || store.mark_maintenance_with_events(&id, open_since, &rows)).await;
    match done {
        Ok(Ok(true)) => shared.mark_maintenance(&edge.id, edge.open_since),
        // Ended meanwhile: its delete recorded the end.
        Ok(Ok(false)) => {}
        Ok(Err(e)) => {
            tracing::warn!(window = %edge.id, error = %e, "cannot record a maintenance window's edge; will retry")
        }
        Err(e) => {
            tracing::warn!(window = %edge.id, error = %e, "cannot record a maintenance window's edge; will retry")
        }
    }
}

/// 1 for an instance in an open window, 0 for one a window will cover
/// later; no series for the others (`labelled`: those that have one).
fn set_gauge(
    shared: &Shared,
    cat: &Catalog,
    windows: &[MaintenanceWindow],
    now: Timestamp,
    labelled: &mut BTreeSet<String>,
) {
    let mut gauge: BTreeMap<String, i64> = BTreeMap::new();
    for w in windows.iter().filter(|w| !maintenance::is_over(&w.schedule, now)) {
        let active = maintenance::is_active(&w.schedule, now);
        for name in instances_of(w, cat) {
            let v = gauge.entry(name).or_insert(0);
            *v = (*v).max(i64::from(active));
        }
    }
    let family = &shared.metrics.maintenance_active;
    for name in labelled.iter() {
        if !gauge.contains_key(name) {
            let _ = family.remove_label_values(&[name]);
        }
    }
    for (name, v) in &gauge {
        family.with_label_values(&[name]).set(*v);
    }
    *labelled = gauge.into_keys().collect();
}

//! Maintenance windows in the running engine: the windows live in the
//! scheduler (which reads them as each poll completes, so no failure in a
//! window dead-letters), and one loop wakes at every window edge to record
//! it — `maintenance.start` and `maintenance.end` change events (and audit
//! entries), a log line, and `pollster_maintenance_active{instance}`.
//!
//! The loop compares the windows open now with those open at its last
//! look, so a window made already open, or ended by an operator while
//! open, is recorded the same way as one whose time came. After a restart
//! the windows open at start are recorded as starting again.

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
}

/// What the loop saw at its last look.
#[derive(Default)]
struct Seen {
    /// The windows open then, by id (kept whole: an ended window is gone
    /// from the scheduler when its end is recorded).
    open: BTreeMap<String, MaintenanceWindow>,
    /// The instances with a `pollster_maintenance_active` series.
    labelled: BTreeSet<String>,
}

pub(super) async fn maintenance_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut seen = Seen::default();
    loop {
        let now = shared.now();
        let windows = shared.core().scheduler.maintenance();
        let cat = shared.catalog();
        let events = look(&shared, &cat, &windows, now, &mut seen);
        if !events.is_empty() {
            let rows: Vec<OutboxEvent> = events.iter().filter_map(|e| shared.sink.stage(e)).collect();
            if !rows.is_empty() {
                let store = shared.store.clone();
                match tokio::task::spawn_blocking(move || store.append_outbox(&rows)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot record a maintenance window's edge"),
                    Err(e) => tracing::warn!(error = %e, "cannot record a maintenance window's edge"),
                }
            }
        }
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

/// One look at the windows: the edges passed since the last one as
/// events (and log lines), and the gauge set.
fn look(shared: &Shared, cat: &Catalog, windows: &[MaintenanceWindow], now: Timestamp, seen: &mut Seen) -> Vec<Event> {
    let open: BTreeMap<String, MaintenanceWindow> = windows
        .iter()
        .filter(|w| maintenance::is_active(&w.schedule, now))
        .map(|w| (w.id.clone(), w.clone()))
        .collect();
    let mut events = Vec::new();
    for (id, w) in &open {
        if !seen.open.contains_key(id) {
            let instances = instances_of(w, cat);
            tracing::info!(
                window = %id,
                target = %w.target.describe(),
                instances = ?instances,
                reason = %w.reason,
                maintenance = true,
                "maintenance window open: failures will not dead-letter these instances"
            );
            events.push(
                Event::operator(now, "scheduler", "maintenance.start", id)
                    .with_window(instances, &w.reason)
                    .in_maintenance(true),
            );
        }
    }
    for (id, w) in &seen.open {
        if !open.contains_key(id) {
            let instances = instances_of(w, cat);
            tracing::info!(
                window = %id,
                target = %w.target.describe(),
                instances = ?instances,
                maintenance = true,
                "maintenance window closed"
            );
            events.push(
                Event::operator(now, "scheduler", "maintenance.end", id)
                    .with_window(instances, &w.reason)
                    .in_maintenance(true),
            );
        }
    }
    seen.open = open;

    // 1 for an instance in an open window, 0 for one a window will cover
    // later; no series for the others.
    let mut gauge: BTreeMap<String, i64> = BTreeMap::new();
    for w in windows.iter().filter(|w| !maintenance::is_over(&w.schedule, now)) {
        let active = seen.open.contains_key(&w.id);
        for name in instances_of(w, cat) {
            let v = gauge.entry(name).or_insert(0);
            *v = (*v).max(i64::from(active));
        }
    }
    let family = &shared.metrics.maintenance_active;
    for name in &seen.labelled {
        if !gauge.contains_key(name) {
            let _ = family.remove_label_values(&[name]);
        }
    }
    for (name, v) in &gauge {
        family.with_label_values(&[name]).set(*v);
    }
    seen.labelled = gauge.into_keys().collect();
    events
}

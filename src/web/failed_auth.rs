//! Failed logins and failed token requests in the audit trail, aggregated:
//! one entry per kind, address (an IPv6 client's /64) and [`WINDOW`], with
//! a `count`, instead of one per failure.
//!
//! The first failure of a window writes its entry at once (so the trail
//! shows an attack as it starts); further failures are counted in memory
//! and written over that entry, in place, by [`flush_loop`] at most every
//! [`FLUSH_EVERY`]. When the window is over, its entry is final and its
//! event (`login.failed` or `token.failed`, with the final `count`) goes to
//! the sink, once. At most [`MAX_OPEN`] windows are open at once; failures
//! from further addresses are counted together in one window with source
//! `*` until some close. So a flood costs at most [`MAX_OPEN`] + 1 new
//! entries per window, however many addresses it rotates through, and the
//! entries live in a share of the trail of their own
//! (`crate::store::MAX_FAILED_ENTRIES`): no flood of failures pushes an
//! operator action out of the trail.
//!
//! [`FailureLog`] is the pure part (the time is passed in); the functions
//! below it write to the store.

use crate::model::Timestamp;
use crate::sink::event::{Event, FailureCount};
use crate::store::OutboxEvent;
use crate::web::AppState;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// How long one entry counts the failures of one address.
pub const WINDOW: Duration = Duration::from_secs(5 * 60);
/// Windows open at once at most (beyond them: one shared window).
pub const MAX_OPEN: usize = 1_000;
/// How often counts are written to open entries, and windows closed.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A password check: a login, the setup code, a password change's
    /// current password.
    Login,
    /// A request with an `Authorization: Bearer` token that is not valid.
    Token,
}

impl Kind {
    pub fn action(self) -> &'static str {
        match self {
            Kind::Login => "login.failed",
            Kind::Token => "token.failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum From {
    Client(IpAddr),
    Many,
}

impl From {
    fn source(self) -> String {
        match self {
            From::Client(ip) => ip.to_string(),
            From::Many => "*".into(),
        }
    }
}

/// Where a window's entry is in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Being written (by the request that opened the window).
    Pending,
    At(u64),
    /// Could not be written: the count still goes to the sink.
    Failed,
}

/// One window: the failures of one kind from one address.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub id: String,
    pub kind: Kind,
    from: From,
    pub stored: Stored,
    pub first: Timestamp,
    pub last: Timestamp,
    pub count: u64,
    /// Who the first failure claimed to be, and what it was for.
    pub actor: String,
    pub target: String,
    /// Counted since the entry was last written.
    dirty: bool,
}

impl Window {
    /// The event this window stands for, with its id.
    pub fn event(&self) -> Event {
        let mut e =
            Event::operator(self.first, &self.actor, self.kind.action(), &self.target).with_failures(FailureCount {
                count: self.count,
                first: self.first.to_rfc3339_millis(),
                last: self.last.to_rfc3339_millis(),
                source: self.from.source(),
            });
        e.id = Some(self.id.clone());
        e
    }

    /// The address the failures came from, as the trail's `source`.
    pub fn source(&self) -> String {
        self.from.source()
    }
}

/// The open windows (see the module comment).
#[derive(Debug, Default)]
pub struct FailureLog {
    open: HashMap<(Kind, From), Window>,
}

/// What [`FailureLog::record`] asks the caller to write.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// A new window: write its entry now and tell [`FailureLog::stored`].
    New(Window),
    /// Counted; [`FailureLog::due`] gives the entry to write later.
    Counted,
}

impl FailureLog {
    /// Count one failure of `kind` from `ip` (`actor` and `target` as the
    /// event names them) at `now`.
    /// `new_id` makes the id of a new window's event.
    pub fn record(
        &mut self,
        kind: Kind,
        ip: IpAddr,
        actor: &str,
        target: &str,
        now: Timestamp,
        new_id: impl FnOnce() -> String,
    ) -> Step {
        let own = (kind, From::Client(crate::web::throttle::client_key(ip)));
        let key = if self.open.contains_key(&own) || self.open.len() < MAX_OPEN {
            own
        } else {
            (kind, From::Many)
        };
        // A window that is over is closed by `due` within a second; until
        // then it goes on counting.
        if let Some(w) = self.open.get_mut(&key) {
            w.count += 1;
            w.last = now;
            w.dirty = true;
            return Step::Counted;
        }
        let w = Window {
            id: new_id(),
            kind,
            from: key.1,
            stored: Stored::Pending,
            first: now,
            last: now,
            count: 1,
            actor: actor.into(),
            target: target.into(),
            dirty: false,
        };
        self.open.insert(key, w.clone());
        Step::New(w)
    }

    /// The entry of window `id` was written (or not).
    pub fn stored(&mut self, id: &str, stored: Stored) {
        if let Some(w) = self.open.values_mut().find(|w| w.id == id) {
            w.stored = stored;
        }
    }

    /// Windows whose entry is to be written now: those counted since the
    /// last write, and those over at `now` (or all, with `all`, at
    /// shutdown), which are closed: `(window, closed)`. A window whose
    /// entry is still being written waits.
    pub fn due(&mut self, now: Timestamp, all: bool) -> Vec<(Window, bool)> {
        let mut out = Vec::new();
        self.open.retain(|_, w| {
            // (A write that never reported back is given up after a while.)
            if w.stored == Stored::Pending && !all && now.since(w.first) < 2 * WINDOW {
                return true;
            }
            let closed = all || now.since(w.first) >= WINDOW;
            if closed || w.dirty {
                w.dirty = false;
                out.push((w.clone(), closed));
            }
            !closed
        });
        out.sort_by_key(|(w, _)| w.first);
        out
    }
}

/// Record one failure: a new window's entry is written now (on a blocking
/// thread); a count in an open one is written by [`flush_loop`]. Best
/// effort: a store error is logged.
pub async fn record(app: &AppState, kind: Kind, ip: IpAddr, actor: &str, target: &str) {
    let now = app.engine.now();
    let step = app
        .web
        .failures()
        .record(kind, ip, actor, target, now, || app.sink.new_event_id(now));
    let Step::New(w) = step else { return };
    let (line, source) = (w.event().to_line(), w.source());
    let first = w.first;
    let written = app
        .with_store(move |s| s.audit_failure_insert(first, Some(&source), &line))
        .await;
    let stored = match written {
        Ok(seq) => Stored::At(seq),
        Err(e) => {
            tracing::warn!(error = %e.message, "a failed login or token was not recorded in the audit trail");
            Stored::Failed
        }
    };
    app.web.failures().stored(&w.id, stored);
}

/// Write what [`FailureLog::due`] gives: counts over their entries, and
/// each closed window's event to the sink (when one is configured).
pub async fn flush(app: &AppState, all: bool) {
    let due = app.web.failures().due(app.engine.now(), all);
    if due.is_empty() {
        return;
    }
    let sink = app.sink.clone();
    let res = app
        .with_store(move |s| {
            for (w, closed) in &due {
                let line = w.event().to_line();
                let events: Vec<OutboxEvent> = (*closed && sink.is_enabled())
                    .then(|| OutboxEvent::new(w.id.clone(), line.clone()))
                    .into_iter()
                    .collect();
                match w.stored {
                    Stored::At(seq) => s.audit_failure_update(seq, &line, &events)?,
                    _ if !events.is_empty() => s.append_outbox(&events)?,
                    _ => {}
                }
            }
            Ok::<_, crate::store::StoreError>(())
        })
        .await;
    if let Err(e) = res {
        tracing::warn!(error = %e.message, "failed logins or tokens were not recorded in the audit trail");
    }
}

/// [`flush`] every [`FLUSH_EVERY`], until the task is aborted (then the
/// server flushes everything once more, with `all`).
pub async fn flush_loop(app: AppState) {
    loop {
        tokio::time::sleep(FLUSH_EVERY).await;
        flush(&app, false).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new event id, unique in the test run.
    fn fresh() -> String {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        format!("id-{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn failures_from_one_address_in_a_window_are_one_entry_with_a_count() {
        let mut log = FailureLog::default();
        let t0 = Timestamp(1_000_000);
        let Step::New(w) = log.record(Kind::Login, ip("10.0.0.1"), "user:admin", "admin", t0, fresh) else {
            panic!("the first failure opens a window");
        };
        assert_eq!(w.count, 1);
        log.stored(&w.id, Stored::At(7));
        for n in 1..100 {
            let at = t0.plus(Duration::from_millis(n));
            assert_eq!(
                log.record(Kind::Login, ip("10.0.0.1"), "user:x", "x", at, fresh),
                Step::Counted
            );
        }
        // Another kind, and another address, are windows of their own; an
        // IPv6 client is its /64.
        assert!(matches!(
            log.record(Kind::Token, ip("10.0.0.1"), "anonymous", "pst_", t0, fresh),
            Step::New(_)
        ));
        assert!(matches!(
            log.record(Kind::Login, ip("2001:db8::1"), "user:admin", "admin", t0, fresh),
            Step::New(_)
        ));
        assert_eq!(
            log.record(Kind::Login, ip("2001:db8::ffff:2"), "user:admin", "admin", t0, fresh),
            Step::Counted
        );
        // Written as counted, in place; closed when the window is over.
        let due = log.due(t0.plus(Duration::from_secs(1)), false);
        let login = due.iter().find(|(w, _)| w.stored == Stored::At(7)).expect("due");
        assert_eq!((login.0.count, login.1), (100, false));
        let line = login.0.event().to_line();
        assert!(
            line.contains("\"count\":100") && line.contains("\"source\":\"10.0.0.1\""),
            "{line}"
        );
        assert!(line.contains("\"action\":\"login.failed\""), "{line}");
        assert!(
            log.due(t0.plus(Duration::from_secs(2)), false).is_empty(),
            "nothing new"
        );
        let closed = log.due(t0.plus(WINDOW), false);
        assert!(closed.iter().any(|(w, c)| *c && w.id == login.0.id && w.count == 100));
        // The next failure opens a new window.
        assert!(matches!(
            log.record(
                Kind::Login,
                ip("10.0.0.1"),
                "user:admin",
                "admin",
                t0.plus(WINDOW),
                fresh
            ),
            Step::New(_)
        ));
    }

    #[test]
    fn a_rotating_flood_opens_at_most_max_open_windows_then_one_shared() {
        let mut log = FailureLog::default();
        let t0 = Timestamp(0);
        let mut new = 0;
        for n in 0..(MAX_OPEN as u32 + 5000) {
            let from = IpAddr::V4(std::net::Ipv4Addr::from(0x7f00_0000 + n));
            if let Step::New(w) = log.record(Kind::Login, from, "user:admin", "admin", t0, fresh) {
                new += 1;
                log.stored(&w.id, Stored::At(u64::from(n)));
            }
        }
        assert_eq!(new, MAX_OPEN + 1);
        let shared = log
            .due(t0.plus(Duration::from_secs(1)), false)
            .into_iter()
            .find(|(w, _)| w.source() == "*")
            .expect("the shared window");
        assert_eq!(shared.0.count, 5000);
    }
}

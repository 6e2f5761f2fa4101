//! Login throttling: after [`MAX_FAILURES`] failed logins from one address
//! within [`WINDOW`], that address is locked out for [`LOCKOUT`]. Pure: the
//! time is passed in.

use crate::model::Timestamp;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

pub const MAX_FAILURES: u32 = 5;
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
pub const LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// Addresses remembered at most; the oldest are forgotten first.
const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    first: Timestamp,
    locked_until: Option<Timestamp>,
}

#[derive(Debug, Default)]
pub struct LoginThrottle {
    entries: HashMap<IpAddr, Entry>,
}

impl LoginThrottle {
    /// `Err(remaining)` while the address is locked out.
    pub fn check(&self, ip: IpAddr, now: Timestamp) -> Result<(), Duration> {
        match self.entries.get(&ip).and_then(|e| e.locked_until) {
            Some(until) if until > now => Err(until.since(now)),
            _ => Ok(()),
        }
    }

    /// Record a failed login; returns the lockout if this one triggered it.
    pub fn failure(&mut self, ip: IpAddr, now: Timestamp) -> Option<Duration> {
        if self.entries.len() >= MAX_TRACKED && !self.entries.contains_key(&ip) {
            if let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.first).map(|(k, _)| *k) {
                self.entries.remove(&oldest);
            }
        }
        let e = self.entries.entry(ip).or_insert(Entry {
            failures: 0,
            first: now,
            locked_until: None,
        });
        if now.since(e.first) > WINDOW || e.locked_until.is_some_and(|u| u <= now) {
            *e = Entry {
                failures: 0,
                first: now,
                locked_until: None,
            };
        }
        e.failures += 1;
        if e.failures >= MAX_FAILURES {
            e.locked_until = Some(now.plus(LOCKOUT));
            return Some(LOCKOUT);
        }
        None
    }

    pub fn success(&mut self, ip: IpAddr) {
        self.entries.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_lock_the_address_out_for_a_while() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        let now = Timestamp(1_000_000);
        for _ in 0..4 {
            assert_eq!(t.failure(ip, now), None);
            assert!(t.check(ip, now).is_ok());
        }
        assert_eq!(t.failure(ip, now), Some(LOCKOUT));
        assert_eq!(
            t.check(ip, now.plus(Duration::from_secs(60))),
            Err(LOCKOUT - Duration::from_secs(60))
        );
        assert!(t.check(other, now).is_ok(), "other addresses are not affected");
        assert!(t.check(ip, now.plus(LOCKOUT)).is_ok(), "the lockout ends");
    }

    #[test]
    fn failures_outside_the_window_and_successes_reset() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "::1".parse().expect("ip");
        let now = Timestamp(0);
        for _ in 0..4 {
            t.failure(ip, now);
        }
        // the window has passed: this is failure 1 again
        assert_eq!(t.failure(ip, now.plus(WINDOW + Duration::from_secs(1))), None);
        for _ in 0..3 {
            t.failure(ip, now.plus(WINDOW + Duration::from_secs(1)));
        }
        t.success(ip);
        assert_eq!(t.failure(ip, now.plus(WINDOW + Duration::from_secs(2))), None);
    }
}

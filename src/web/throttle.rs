//! Login throttling: after [`MAX_FAILURES`] failed attempts from one address
//! within [`WINDOW`], that address is locked out for [`LOCKOUT`]. Pure: the
//! time is passed in.
//!
//! An attempt is recorded *before* its password is checked, and an address
//! has at most one attempt in flight: a burst of parallel guesses gets one
//! check at a time, and the sixth guess of a burst is refused without being
//! checked, whatever the password. An attempt counts as a failure until
//! [`LoginThrottle::finish`] says it succeeded, so an attempt abandoned half
//! way (the client went away) still counts.
//!
//! An IPv6 client is counted by its /64: one host usually holds a whole /64,
//! and counting each of its 2^64 addresses apart would be no limit at all.

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
    in_flight: bool,
}

/// Why an attempt may not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The address is locked out for this long.
    Locked(Duration),
    /// The address's previous attempt is still being checked.
    InFlight,
}

impl Refusal {
    /// Seconds for a `Retry-After` header.
    pub fn retry_after_secs(self) -> u64 {
        match self {
            Refusal::Locked(left) => left.as_secs().max(1),
            Refusal::InFlight => 1,
        }
    }
}

/// What one client is counted by: an IPv4 address, or an IPv6 /64.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[derive(Debug, Default)]
pub struct LoginThrottle {
    entries: HashMap<IpAddr, Entry>,
}

impl LoginThrottle {
    /// `Err(remaining)` while the address is locked out (tests look with it;
    /// the server asks [`LoginThrottle::begin`], which also records).
    #[cfg(test)]
    pub fn check(&self, ip: IpAddr, now: Timestamp) -> Result<(), Duration> {
        let ip = client_key(ip);
        match self.entries.get(&ip).and_then(|e| e.locked_until) {
            Some(until) if until > now => Err(until.since(now)),
            _ => Ok(()),
        }
    }

    /// Start an attempt: refused while the address is locked out or has an
    /// attempt in flight; otherwise counted as a failure until
    /// [`LoginThrottle::finish`] says otherwise.
    pub fn begin(&mut self, ip: IpAddr, now: Timestamp) -> Result<(), Refusal> {
        let ip = client_key(ip);
        if self.entries.len() >= MAX_TRACKED
            && !self.entries.contains_key(&ip)
            && let Some(oldest) = self
                .entries
                .iter()
                .filter(|(_, e)| !e.in_flight)
                .min_by_key(|(_, e)| e.first)
                .map(|(k, _)| *k)
        {
            self.entries.remove(&oldest);
        }
        let e = self.entries.entry(ip).or_insert(Entry {
            failures: 0,
            first: now,
            locked_until: None,
            in_flight: false,
        });
        if e.in_flight {
            return Err(Refusal::InFlight);
        }
        match e.locked_until {
            Some(until) if until > now => return Err(Refusal::Locked(until.since(now))),
            Some(_) => *e = fresh(now),
            None if now.since(e.first) > WINDOW => *e = fresh(now),
            None => {}
        }
        if e.failures >= MAX_FAILURES {
            e.locked_until = Some(now.plus(LOCKOUT));
            return Err(Refusal::Locked(LOCKOUT));
        }
        e.failures += 1;
        e.in_flight = true;
        Ok(())
    }

    /// End the attempt [`LoginThrottle::begin`] started. A success forgets
    /// the address; a failure that reaches [`MAX_FAILURES`] locks it out and
    /// returns the lockout.
    pub fn finish(&mut self, ip: IpAddr, ok: bool, now: Timestamp) -> Option<Duration> {
        let ip = client_key(ip);
        if ok {
            self.entries.remove(&ip);
            return None;
        }
        let e = self.entries.get_mut(&ip)?;
        e.in_flight = false;
        if e.failures >= MAX_FAILURES {
            e.locked_until = Some(now.plus(LOCKOUT));
            return Some(LOCKOUT);
        }
        None
    }
}

impl LoginThrottle {
    /// An attempt ended without a result (its request was dropped): it
    /// stays counted as a failure, and the address may try again.
    pub fn abandon(&mut self, ip: IpAddr) {
        let ip = client_key(ip);
        if let Some(e) = self.entries.get_mut(&ip) {
            e.in_flight = false;
        }
    }
}

fn fresh(now: Timestamp) -> Entry {
    Entry {
        failures: 0,
        first: now,
        locked_until: None,
        in_flight: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(t: &mut LoginThrottle, ip: IpAddr, now: Timestamp) -> Option<Duration> {
        t.begin(ip, now).expect("may try");
        t.finish(ip, false, now)
    }

    #[test]
    fn five_failures_lock_the_address_out_for_a_while() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        let now = Timestamp(1_000_000);
        for _ in 0..4 {
            assert_eq!(fail(&mut t, ip, now), None);
            assert!(t.check(ip, now).is_ok());
        }
        assert_eq!(fail(&mut t, ip, now), Some(LOCKOUT));
        assert_eq!(
            t.check(ip, now.plus(Duration::from_secs(60))),
            Err(LOCKOUT - Duration::from_secs(60))
        );
        assert_eq!(
            t.begin(ip, now.plus(Duration::from_secs(60))),
            Err(Refusal::Locked(LOCKOUT - Duration::from_secs(60))),
            "even the right password is not checked now"
        );
        assert!(t.check(other, now).is_ok(), "other addresses are not affected");
        assert!(t.check(ip, now.plus(LOCKOUT)).is_ok(), "the lockout ends");
        assert_eq!(t.begin(ip, now.plus(LOCKOUT)), Ok(()), "and the count starts again");
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let mut t = LoginThrottle::default();
        let now = Timestamp(0);
        for i in 0..MAX_FAILURES {
            let ip: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().expect("ip");
            assert_eq!(fail(&mut t, ip, now).is_some(), i + 1 == MAX_FAILURES);
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("ip");
        let other_64: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert_eq!(t.begin(same_64, now), Err(Refusal::Locked(LOCKOUT)));
        assert_eq!(t.begin(other_64, now), Ok(()));
        // An IPv4 address written as IPv6 is the IPv4 client.
        let v4: IpAddr = "192.0.2.7".parse().expect("ip");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("ip");
        t.begin(v4, now).expect("first");
        assert_eq!(t.begin(mapped, now), Err(Refusal::InFlight));
    }

    #[test]
    fn one_attempt_per_address_is_in_flight() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let now = Timestamp(0);
        t.begin(ip, now).expect("first");
        assert_eq!(t.begin(ip, now), Err(Refusal::InFlight));
        assert_eq!(t.begin("10.0.0.9".parse().expect("ip"), now), Ok(()));
        t.finish(ip, false, now);
        t.begin(ip, now).expect("after the first ended");
    }

    #[test]
    fn an_abandoned_attempt_counts_as_a_failure() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let now = Timestamp(0);
        for _ in 0..MAX_FAILURES {
            t.begin(ip, now).expect("may try");
            // Ended without a result (the client went away).
            t.abandon(ip);
        }
        assert_eq!(t.begin(ip, now), Err(Refusal::Locked(LOCKOUT)));
    }

    #[test]
    fn failures_outside_the_window_and_successes_reset() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "::1".parse().expect("ip");
        let now = Timestamp(0);
        for _ in 0..4 {
            fail(&mut t, ip, now);
        }
        // the window has passed: this is failure 1 again
        let later = now.plus(WINDOW + Duration::from_secs(1));
        assert_eq!(fail(&mut t, ip, later), None);
        for _ in 0..3 {
            fail(&mut t, ip, later);
        }
        t.begin(ip, later).expect("fifth");
        assert_eq!(t.finish(ip, true, later), None);
        assert_eq!(fail(&mut t, ip, later), None, "a success forgets the failures");
    }
}

//! Login throttling, per address and per account. Pure: the time is passed
//! in.
//!
//! **Per address.** After [`MAX_FAILURES`] failed attempts from one address
//! within [`WINDOW`], that address is locked out for [`LOCKOUT`]. An attempt
//! is recorded *before* its password is checked, and an address has at most
//! one attempt in flight: a burst of parallel guesses gets one check at a
//! time, and the sixth guess of a burst is refused without being checked,
//! whatever the password. An attempt counts as a failure until
//! [`LoginThrottle::finish`] says it succeeded, so an attempt abandoned half
//! way (the client went away) still counts.
//!
//! An IPv6 client is counted by its /64: one host usually holds a whole /64,
//! and counting each of its 2^64 addresses apart would be no limit at all.
//!
//! **The bound.** At most [`MAX_TRACKED`] addresses are tracked. A new
//! address beyond it takes the place of the oldest tracked one that is
//! neither locked out nor in flight: a lockout in force is never forgotten,
//! however many other addresses try. When every tracked address is locked
//! out or in flight, a new address is counted in one shared *overflow*
//! entry, with the same limits as an address: while the table is full of
//! lockouts, all untracked addresses together get [`MAX_FAILURES`] checks
//! per [`WINDOW`], one at a time. A trusted address (below) is never put in
//! the overflow entry: it is tracked on its own, beyond the bound (there are
//! at most [`MAX_TRUSTED`] of them).
//!
//! **Per account.** Failures are also counted per account name (as typed,
//! for every address together): after [`ACCOUNT_FREE_FAILURES`] within
//! [`ACCOUNT_WINDOW`], each further attempt for that name must wait a delay
//! that doubles with each failure, from 1 s up to [`ACCOUNT_MAX_DELAY`];
//! an attempt before it is refused unchecked. That slows a guesser spread
//! over many addresses (rotating IPv4 addresses, or the /64s of an IPv6
//! /48: the per-account count covers every address at once) to at most one
//! guess per [`ACCOUNT_MAX_DELAY`]. At most [`MAX_ACCOUNTS`] names are
//! tracked, the oldest whose delay is over forgotten first; beyond that,
//! new names share one overflow entry.
//!
//! **Trusted addresses** are never held back by the per-account delay or
//! the overflow entry (their own per-address limit still applies): the
//! loopback addresses `127.0.0.1` and `::1` (a shell on the machine), and
//! the [`MAX_TRUSTED`] addresses (IPv6: /64s) that most recently logged in
//! successfully. A distributed guesser therefore cannot lock the admin out
//! of a login from where the admin logged in before.

use crate::model::Timestamp;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

pub const MAX_FAILURES: u32 = 5;
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
pub const LOCKOUT: Duration = Duration::from_secs(15 * 60);
/// Addresses tracked at most (besides trusted ones; see the module comment).
pub const MAX_TRACKED: usize = 10_000;
/// Failures for one account name, from all addresses together, before
/// each further attempt must wait.
pub const ACCOUNT_FREE_FAILURES: u32 = 20;
/// Account failures are forgotten after this long without one.
pub const ACCOUNT_WINDOW: Duration = Duration::from_secs(15 * 60);
/// The longest wait between attempts for one account.
pub const ACCOUNT_MAX_DELAY: Duration = Duration::from_secs(15 * 60);
/// Account names tracked at most.
pub const MAX_ACCOUNTS: usize = 1_000;
/// Addresses remembered as trusted (they logged in successfully).
pub const MAX_TRUSTED: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    first: Timestamp,
    locked_until: Option<Timestamp>,
    in_flight: bool,
}

#[derive(Debug, Clone, Copy)]
struct Account {
    failures: u32,
    last: Timestamp,
    /// No attempt for the account is checked before this.
    not_before: Timestamp,
}

/// Why an attempt may not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The address is locked out for this long.
    Locked(Duration),
    /// The address's previous attempt is still being checked.
    InFlight,
    /// The account has failed too often lately: the next attempt for it
    /// may come after this long.
    Account(Duration),
}

impl Refusal {
    /// Seconds for a `Retry-After` header.
    pub fn retry_after_secs(self) -> u64 {
        match self {
            Refusal::Locked(left) | Refusal::Account(left) => left.as_secs().max(1),
            Refusal::InFlight => 1,
        }
    }
}

/// Who an address entry counts: one client, or every client the table had
/// no room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    Client(IpAddr),
    Overflow,
}

/// What one client is counted by: an IPv4 address, or an IPv6 /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// The account key of a name as typed (names are short; a longer one is
/// cut, so a huge name costs nothing more).
fn account_key(name: &str) -> String {
    name.trim().chars().take(64).collect()
}

#[derive(Debug, Default)]
pub struct LoginThrottle {
    entries: HashMap<Slot, Entry>,
    accounts: HashMap<Option<String>, Account>,
    /// Client keys that logged in successfully, with when (the newest kept).
    trusted: HashMap<IpAddr, Timestamp>,
    /// Where each client's attempt in flight is counted.
    slots: HashMap<IpAddr, Slot>,
}

impl LoginThrottle {
    /// `Err(remaining)` while the address is locked out (tests look with it;
    /// the server asks [`LoginThrottle::begin`], which also records).
    #[cfg(test)]
    pub fn check(&self, ip: IpAddr, now: Timestamp) -> Result<(), Duration> {
        let ip = client_key(ip);
        match self.entries.get(&Slot::Client(ip)).and_then(|e| e.locked_until) {
            Some(until) if until > now => Err(until.since(now)),
            _ => Ok(()),
        }
    }

    /// Whether `ip` is trusted (see the module comment).
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip == IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
            || ip == IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
            || self.trusted.contains_key(&client_key(ip))
    }

    /// The entry `ip` is counted in: its own, a new one (in place of the
    /// oldest evictable entry when the table is full), or the overflow.
    fn slot_for(&mut self, ip: IpAddr, trusted: bool, now: Timestamp) -> Slot {
        let own = Slot::Client(ip);
        if self.entries.contains_key(&own) || trusted {
            return own;
        }
        let tracked = self.entries.len() - usize::from(self.entries.contains_key(&Slot::Overflow));
        if tracked < MAX_TRACKED {
            return own;
        }
        let evictable = self
            .entries
            .iter()
            .filter(|(s, e)| {
                matches!(s, Slot::Client(ip) if !self.trusted.contains_key(ip))
                    && !e.in_flight
                    && e.locked_until.is_none_or(|u| u <= now)
            })
            .min_by_key(|(_, e)| e.first)
            .map(|(s, _)| *s);
        match evictable {
            Some(oldest) => {
                self.entries.remove(&oldest);
                own
            }
            None => Slot::Overflow,
        }
    }

    /// Start an attempt from `ip` for `account` (`None`: no account, e.g.
    /// the setup code): refused while the address is locked out or has an
    /// attempt in flight, or while the account must wait; otherwise counted
    /// as a failure until [`LoginThrottle::finish`] says otherwise.
    pub fn begin(&mut self, ip: IpAddr, account: Option<&str>, now: Timestamp) -> Result<(), Refusal> {
        let trusted = self.is_trusted(ip);
        let ip = client_key(ip);
        if self.slots.contains_key(&ip) {
            return Err(Refusal::InFlight);
        }
        if !trusted
            && let Some(a) = self.accounts.get(&account.map(account_key))
            && a.not_before > now
            && now.since(a.last) <= ACCOUNT_WINDOW
        {
            return Err(Refusal::Account(a.not_before.since(now)));
        }
        let slot = self.slot_for(ip, trusted, now);
        let e = self.entries.entry(slot).or_insert_with(|| fresh(now));
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
        self.slots.insert(ip, slot);
        if let Some(name) = account {
            self.account_failed(account_key(name), now);
        }
        Ok(())
    }

    /// Count a failure for the account now (undone by a success), so an
    /// attempt that never finishes counts too.
    fn account_failed(&mut self, name: String, now: Timestamp) {
        let key = Some(name);
        if !self.accounts.contains_key(&key) && self.accounts.len() >= MAX_ACCOUNTS {
            let oldest = self
                .accounts
                .iter()
                .filter(|(k, a)| k.is_some() && (a.not_before <= now || now.since(a.last) > ACCOUNT_WINDOW))
                .min_by_key(|(_, a)| a.last)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.accounts.remove(&k);
                }
                // Every tracked name is waiting: new names share one entry.
                None => return self.count_account(None, now),
            }
        }
        self.count_account(key, now)
    }

    fn count_account(&mut self, key: Option<String>, now: Timestamp) {
        let a = self.accounts.entry(key).or_insert(Account {
            failures: 0,
            last: now,
            not_before: now,
        });
        if now.since(a.last) > ACCOUNT_WINDOW {
            a.failures = 0;
        }
        a.failures += 1;
        a.last = now;
        if a.failures > ACCOUNT_FREE_FAILURES {
            let doublings = (a.failures - ACCOUNT_FREE_FAILURES - 1).min(20);
            let delay = Duration::from_secs(1u64 << doublings).min(ACCOUNT_MAX_DELAY);
            a.not_before = now.plus(delay);
        }
    }

    /// End the attempt [`LoginThrottle::begin`] started. A success forgets
    /// the address's and the account's failures and trusts the address; a
    /// failure that reaches [`MAX_FAILURES`] locks the address out and
    /// returns the lockout.
    pub fn finish(&mut self, ip: IpAddr, account: Option<&str>, ok: bool, now: Timestamp) -> Option<Duration> {
        let ip = client_key(ip);
        let slot = self.slots.remove(&ip).unwrap_or(Slot::Client(ip));
        if ok {
            self.entries.remove(&slot);
            if let Some(name) = account {
                self.accounts.remove(&Some(account_key(name)));
            }
            self.trust(ip, now);
            return None;
        }
        let e = self.entries.get_mut(&slot)?;
        e.in_flight = false;
        if e.failures >= MAX_FAILURES {
            e.locked_until = Some(now.plus(LOCKOUT));
            return Some(LOCKOUT);
        }
        None
    }

    fn trust(&mut self, ip: IpAddr, now: Timestamp) {
        self.trusted.insert(ip, now);
        if self.trusted.len() > MAX_TRUSTED
            && let Some(oldest) = self.trusted.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k)
        {
            self.trusted.remove(&oldest);
        }
    }

    /// An attempt ended without a result (its request was dropped): it
    /// stays counted as a failure, and the address may try again.
    pub fn abandon(&mut self, ip: IpAddr) {
        let ip = client_key(ip);
        let slot = self.slots.remove(&ip).unwrap_or(Slot::Client(ip));
        if let Some(e) = self.entries.get_mut(&slot) {
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
        t.begin(ip, None, now).expect("may try");
        t.finish(ip, None, false, now)
    }

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n))
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
            t.begin(ip, None, now.plus(Duration::from_secs(60))),
            Err(Refusal::Locked(LOCKOUT - Duration::from_secs(60))),
            "even the right password is not checked now"
        );
        assert!(t.check(other, now).is_ok(), "other addresses are not affected");
        assert!(t.check(ip, now.plus(LOCKOUT)).is_ok(), "the lockout ends");
        assert_eq!(
            t.begin(ip, None, now.plus(LOCKOUT)),
            Ok(()),
            "and the count starts again"
        );
    }

    #[test]
    fn a_lockout_survives_ten_thousand_and_fifty_other_addresses() {
        let mut t = LoginThrottle::default();
        let now = Timestamp(1_000_000);
        let victim: IpAddr = "127.0.0.20".parse().expect("ip");
        for _ in 0..MAX_FAILURES {
            fail(&mut t, victim, now);
        }
        assert_eq!(t.begin(victim, None, now), Err(Refusal::Locked(LOCKOUT)));
        // 10,050 other addresses, one failure each, a millisecond apart.
        for n in 0..10_050u32 {
            let at = now.plus(Duration::from_millis(u64::from(n) + 1));
            fail(&mut t, v4(n), at);
        }
        let later = now.plus(Duration::from_secs(20));
        assert_eq!(
            t.begin(victim, None, later),
            Err(Refusal::Locked(LOCKOUT - Duration::from_secs(20))),
            "the lockout is still in force"
        );
        assert!(t.entries.len() <= MAX_TRACKED + 1, "{}", t.entries.len());
    }

    #[test]
    fn a_table_full_of_lockouts_counts_new_addresses_together_but_not_a_trusted_one() {
        let mut t = LoginThrottle::default();
        let now = Timestamp(0);
        // The admin logged in from here before.
        let home: IpAddr = "192.0.2.1".parse().expect("ip");
        t.begin(home, Some("admin"), now).expect("first");
        t.finish(home, Some("admin"), true, now);
        for n in 0..MAX_TRACKED as u32 {
            for _ in 0..MAX_FAILURES {
                fail(&mut t, v4(n), now);
            }
        }
        // Every tracked address is locked out: newcomers share one entry.
        for n in 0..MAX_FAILURES {
            let lock = fail(&mut t, v4(20_000 + n), now);
            assert_eq!(lock, (n + 1 == MAX_FAILURES).then_some(LOCKOUT));
        }
        assert_eq!(
            t.begin(v4(30_000), None, now),
            Err(Refusal::Locked(LOCKOUT)),
            "the overflow entry is locked out"
        );
        // The admin's address is its own entry, and so is loopback.
        assert_eq!(t.begin(home, Some("admin"), now), Ok(()));
        assert_eq!(t.finish(home, Some("admin"), true, now), None);
        assert_eq!(t.begin("127.0.0.1".parse().expect("ip"), None, now), Ok(()));
        // The lockouts are all still there.
        assert_eq!(t.begin(v4(7), None, now), Err(Refusal::Locked(LOCKOUT)));
    }

    #[test]
    fn failures_for_one_account_from_many_addresses_slow_every_further_attempt() {
        let mut t = LoginThrottle::default();
        let now = Timestamp(1_000_000);
        let home: IpAddr = "192.0.2.1".parse().expect("ip");
        t.begin(home, Some("admin"), now).expect("first");
        t.finish(home, Some("admin"), true, now);
        // A distributed guesser: one guess from each of many IPv6 /64s of
        // one /48, all for `admin`.
        let from = |n: u32| -> IpAddr { format!("2001:db8:1:{n:x}::1").parse().expect("ip") };
        let mut at = now;
        for n in 0..ACCOUNT_FREE_FAILURES {
            t.begin(from(n), Some("admin"), at).expect("free failures");
            t.finish(from(n), Some("admin"), false, at);
        }
        // The 21st failure: the next attempt must wait 1 s, then 2 s, 4 s…
        let mut waits = Vec::new();
        for n in 0..6u32 {
            let ip = from(1000 + n);
            t.begin(ip, Some("admin"), at).expect("after the wait");
            t.finish(ip, Some("admin"), false, at);
            match t.begin(from(2000 + n), Some("admin"), at) {
                Err(Refusal::Account(left)) => waits.push(left.as_secs()),
                other => panic!("{other:?}"),
            }
            at = at.plus(Duration::from_secs(*waits.last().expect("wait")));
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32]);
        // Other names, and the trusted address, are not held back.
        assert_eq!(t.begin(from(3000), Some("bob"), at), Ok(()));
        assert_eq!(t.begin(home, Some("admin"), at), Ok(()), "the admin's own address");
        t.finish(home, Some("admin"), true, at);
        // A success forgets the account's failures.
        assert_eq!(t.begin(from(4000), Some("admin"), at), Ok(()));
        // The delay never grows past its cap.
        let mut t = LoginThrottle::default();
        for n in 0..60 {
            let ip = v4(n);
            let _ = t.begin(ip, Some("admin"), now);
            t.finish(ip, Some("admin"), false, now);
            t.accounts.values_mut().for_each(|a| a.not_before = now);
        }
        t.begin(v4(100), Some("admin"), now).expect("forced");
        t.finish(v4(100), Some("admin"), false, now);
        assert_eq!(
            t.begin(v4(101), Some("admin"), now),
            Err(Refusal::Account(ACCOUNT_MAX_DELAY))
        );
        // And the failures are forgotten after a quiet window.
        let quiet = now.plus(ACCOUNT_WINDOW + Duration::from_secs(1));
        assert_eq!(t.begin(v4(102), Some("admin"), quiet), Ok(()));
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
        assert_eq!(t.begin(same_64, None, now), Err(Refusal::Locked(LOCKOUT)));
        assert_eq!(t.begin(other_64, None, now), Ok(()));
        // An IPv4 address written as IPv6 is the IPv4 client.
        let v4: IpAddr = "192.0.2.7".parse().expect("ip");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("ip");
        t.begin(v4, None, now).expect("first");
        assert_eq!(t.begin(mapped, None, now), Err(Refusal::InFlight));
    }

    #[test]
    fn one_attempt_per_address_is_in_flight() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let now = Timestamp(0);
        t.begin(ip, None, now).expect("first");
        assert_eq!(t.begin(ip, None, now), Err(Refusal::InFlight));
        assert_eq!(t.begin("10.0.0.9".parse().expect("ip"), None, now), Ok(()));
        t.finish(ip, None, false, now);
        t.begin(ip, None, now).expect("after the first ended");
    }

    #[test]
    fn an_abandoned_attempt_counts_as_a_failure() {
        let mut t = LoginThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let now = Timestamp(0);
        for _ in 0..MAX_FAILURES {
            t.begin(ip, Some("admin"), now).expect("may try");
            // Ended without a result (the client went away).
            t.abandon(ip);
        }
        assert_eq!(t.begin(ip, None, now), Err(Refusal::Locked(LOCKOUT)));
        assert_eq!(t.accounts[&Some("admin".to_string())].failures, MAX_FAILURES);
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
        t.begin(ip, None, later).expect("fifth");
        assert_eq!(t.finish(ip, None, true, later), None);
        assert_eq!(fail(&mut t, ip, later), None, "a success forgets the failures");
    }
}

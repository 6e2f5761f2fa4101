//! Who polls what when several members share one fleet: rendezvous
//! (highest random weight, HRW) hashing of the fleet's *units* over the
//! members.
//!
//! - **The unit is the budget pool**: one member polls every instance of a
//!   pool, so an API's budget is never split between members nor doubled.
//!   An instance with no pool is a unit of its own.
//! - **Each member computes the result alone** from the members it sees:
//!   the unit goes to the member with the highest weight `w(member, unit)`.
//!   Members that see the same set agree without talking.
//! - **A join or a leave moves only the units of the member that came or
//!   went**: the weights of the other members do not change, so neither
//!   does the order among them.
//! - **The weight is stable across machines, builds and versions**: an
//!   FNV-1a hash of the member's and the unit's names with a splitmix64
//!   finish, not std's `DefaultHasher` (whose output may change between
//!   Rust releases, and would make two members of different builds
//!   disagree). `tests` pins it with fixed values.
//!
//! Pure: no I/O, no clock, no randomness.

use crate::core::catalog::Catalog;
use crate::core::task::TaskMeta;
use crate::model::{InstanceConfig, TaskKey};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What is owned as one: a budget pool, or an instance with no pool.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unit {
    Pool(String),
    Instance(String),
}

impl Unit {
    /// The unit's name as hashed: `pool:<name>` or `instance:<name>`, so a
    /// pool and an instance of the same name are different units.
    fn key(&self) -> (&'static str, &str) {
        match self {
            Unit::Pool(n) => ("pool:", n),
            Unit::Instance(n) => ("instance:", n),
        }
    }

    /// The pool's or the instance's name.
    pub fn name(&self) -> &str {
        self.key().1
    }

    /// The unit its [`fmt::Display`] names: `pool:<name>` or
    /// `instance:<name>`.
    pub fn parse(text: &str) -> Option<Unit> {
        if let Some(n) = text.strip_prefix("pool:") {
            Some(Unit::Pool(n.to_string()))
        } else {
            text.strip_prefix("instance:").map(|n| Unit::Instance(n.to_string()))
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = self.key();
        write!(f, "{kind}{name}")
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// splitmix64's finish: spreads FNV's weak low-order mixing over every bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The weight of `member` for `unit`. The member's name is closed by a 0
/// byte (names hold no NUL), so `("ab", "c")` and `("a", "bc")` differ.
pub fn weight(member: &str, unit: &Unit) -> u64 {
    let (kind, name) = unit.key();
    let h = fnv1a(FNV_OFFSET, member.as_bytes());
    let h = fnv1a(h, &[0]);
    let h = fnv1a(h, kind.as_bytes());
    mix(fnv1a(h, name.as_bytes()))
}

/// The member that owns `unit` among `members` (`None` when there are
/// none): the highest weight, ties (which need a 64-bit collision) to the
/// smaller name, so the answer does not depend on the order of `members`.
pub fn owner<'a, S: AsRef<str>>(unit: &Unit, members: &'a [S]) -> Option<&'a str> {
    members
        .iter()
        .map(AsRef::as_ref)
        .max_by(|a, b| weight(a, unit).cmp(&weight(b, unit)).then_with(|| b.cmp(a)))
}

/// Every member's units: each unit of `units` under its [`owner`], and
/// every member present, with no units if it owns none. Duplicate members
/// count once.
pub fn assign<S: AsRef<str>>(units: &[Unit], members: &[S]) -> BTreeMap<String, Vec<Unit>> {
    let mut out: BTreeMap<String, Vec<Unit>> = members.iter().map(|m| (m.as_ref().to_string(), Vec::new())).collect();
    for u in units {
        if let Some(m) = owner(u, members) {
            out.entry(m.to_string()).or_default().push(u.clone());
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// What one unit asks of the member that owns it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    /// Tasks on the schedule (not held).
    pub tasks: usize,
    /// Their planned demand, requests per second (`Σ cost / planned`).
    pub rps: f64,
}

/// The fleet's units with their loads: every pool in `pools` (also one
/// with no tasks), and every instance with a task but no pool. Held tasks
/// are left out: they are not polled.
pub fn loads<'a>(pools: impl IntoIterator<Item = &'a str>, tasks: &[(TaskKey, TaskMeta)]) -> BTreeMap<Unit, Load> {
    let mut out: BTreeMap<Unit, Load> = pools
        .into_iter()
        .map(|p| (Unit::Pool(p.to_string()), Load::default()))
        .collect();
    for (key, meta) in tasks.iter().filter(|(_, m)| m.hold.is_none()) {
        let unit = match &meta.pool {
            Some(p) => Unit::Pool(p.to_string()),
            None => Unit::Instance(key.instance.to_string()),
        };
        let l = out.entry(unit).or_default();
        l.tasks += 1;
        let secs = meta.planned.as_secs_f64();
        if secs > 0.0 && meta.cost.is_finite() {
            l.rps += meta.cost / secs;
        }
    }
    out
}

/// One member's share of the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    pub member: String,
    /// The units it owns, pools first, each by name.
    pub units: Vec<Unit>,
    pub tasks: usize,
    pub rps: f64,
}

/// Every member's share of `loads` under [`assign`], in the members' name
/// order.
pub fn shares<S: AsRef<str>>(loads: &BTreeMap<Unit, Load>, members: &[S]) -> Vec<Share> {
    let units: Vec<Unit> = loads.keys().cloned().collect();
    assign(&units, members)
        .into_iter()
        .map(|(member, units)| {
            let (tasks, rps) = units
                .iter()
                .filter_map(|u| loads.get(u))
                .fold((0, 0.0), |(t, r), l| (t + l.tasks, r + l.rps));
            Share {
                member,
                units,
                tasks,
                rps,
            }
        })
        .collect()
}

/// The unit an instance is polled in: its pool, else itself.
pub fn unit_of(instance: &InstanceConfig) -> Unit {
    match &instance.budget {
        Some(p) => Unit::Pool(p.clone()),
        None => Unit::Instance(instance.name.to_string()),
    }
}

/// The units of a catalog: every pool that has an instance, and every
/// instance with no pool, in order.
pub fn units_of(cat: &Catalog) -> Vec<Unit> {
    let set: BTreeSet<Unit> = cat.instances.values().map(|e| unit_of(&e.config)).collect();
    set.into_iter().collect()
}

/// The part of `cat` a member owning `owned` polls: the instances of those
/// units and their pools. Types stay whole.
pub fn scoped(cat: &Catalog, owned: &BTreeSet<Unit>) -> Catalog {
    let mut out = cat.clone();
    out.instances.retain(|_, e| owned.contains(&unit_of(&e.config)));
    out.budgets.retain(|b| owned.contains(&Unit::Pool(b.name.clone())));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn pools(n: usize) -> Vec<Unit> {
        (0..n).map(|i| Unit::Pool(format!("pool-{i}"))).collect()
    }

    #[test]
    fn the_weight_is_pinned_so_members_of_any_build_agree() {
        // Computed apart from this code (FNV-1a 64 and splitmix64's finish,
        // by hand). Changing them changes who owns what in a fleet whose
        // members run different builds: never change them in place.
        assert_eq!(weight("", &Unit::Pool(String::new())), 0x746b_84c9_afcc_eaff);
        assert_eq!(
            weight("pollster-0", &Unit::Pool("meraki-org".into())),
            0xade8_f3ff_b69f_c7b4
        );
        assert_eq!(
            weight("pollster-1", &Unit::Instance("pve-lab".into())),
            0x8c03_4a30_a6ce_9ac9
        );
    }

    #[test]
    fn a_pool_and_an_instance_of_the_same_name_are_different_units() {
        let (p, i) = (Unit::Pool("lab".into()), Unit::Instance("lab".into()));
        assert_ne!(weight("m", &p), weight("m", &i));
        assert_ne!(
            weight("ab", &Unit::Pool("c".into())),
            weight("a", &Unit::Pool("bc".into()))
        );
        assert_eq!((p.to_string(), i.name()), ("pool:lab".to_string(), "lab"));
    }

    #[test]
    fn no_members_own_nothing_and_a_lone_member_owns_everything() {
        let units = pools(5);
        assert_eq!(owner::<&str>(&units[0], &[]), None);
        let a = assign(&units, &["solo"]);
        assert_eq!(a.len(), 1);
        assert_eq!(a["solo"], units);
    }

    #[test]
    fn units_spread_over_the_members() {
        // 300 pools over 3 members: each gets a third, give or take.
        let a = assign(&pools(300), &["a", "b", "c"]);
        for (m, u) in &a {
            assert!((70..=130).contains(&u.len()), "{m} owns {}", u.len());
        }
    }

    #[test]
    fn a_share_counts_the_tasks_and_demand_of_the_units_owned() {
        use std::time::Duration;
        let task = |instance: &str, group: &str, pool: Option<&str>, secs: u64, held: bool| {
            let mut m = TaskMeta::new("t", 1, Duration::from_secs(secs));
            m.pool = pool.map(Into::into);
            if held {
                m.hold = Some(crate::core::task::Hold::Shed);
            }
            (TaskKey::new(instance, group), m)
        };
        let tasks = vec![
            task("a", "g", Some("org"), 10, false),
            task("b", "g", Some("org"), 5, false),
            task("b", "h", Some("org"), 5, true),
            task("lone", "g", None, 20, false),
        ];
        let l = loads(["org", "idle"], &tasks);
        assert_eq!(l.len(), 3, "{l:?}");
        let org = l[&Unit::Pool("org".into())];
        assert_eq!(org.tasks, 2, "the held task is not polled");
        assert!((org.rps - 0.3).abs() < 1e-12);
        assert_eq!(l[&Unit::Pool("idle".into())], Load::default());
        assert_eq!(l[&Unit::Instance("lone".into())].tasks, 1);
        // Shares add up to the fleet, whoever owns what.
        let s = shares(&l, &["m1", "m2"]);
        assert_eq!(s.iter().map(|x| x.member.as_str()).collect::<Vec<_>>(), ["m1", "m2"]);
        assert_eq!(s.iter().map(|x| x.tasks).sum::<usize>(), 3);
        assert!((s.iter().map(|x| x.rps).sum::<f64>() - 0.35).abs() < 1e-12);
        assert_eq!(s.iter().map(|x| x.units.len()).sum::<usize>(), 3);
    }

    proptest! {
        /// For one view every unit has exactly one owner, whatever the
        /// order the members are listed in.
        #[test]
        fn every_unit_has_exactly_one_owner(
            members in proptest::collection::btree_set("[a-z]{1,8}", 1..8),
            n in 1usize..60,
            seed in any::<u64>(),
        ) {
            let units = pools(n);
            let mut list: Vec<String> = members.iter().cloned().collect();
            let a = assign(&units, &list);
            let owned: Vec<&Unit> = a.values().flatten().collect();
            prop_assert_eq!(owned.len(), units.len());
            prop_assert_eq!(owned.iter().collect::<BTreeSet<_>>().len(), units.len());
            // Another order of the same members: the same answer.
            let k = (seed as usize) % list.len();
            list.rotate_left(k);
            list.reverse();
            prop_assert_eq!(assign(&units, &list), a);
        }

        /// A member that joins takes units only from the others, and a
        /// member that leaves gives away only its own: no other unit moves.
        #[test]
        fn a_join_or_a_leave_moves_only_that_members_units(
            members in proptest::collection::btree_set("[a-z]{1,8}", 2..8),
            n in 1usize..60,
        ) {
            let units = pools(n);
            let all: Vec<String> = members.iter().cloned().collect();
            let (gone, rest) = all.split_first().expect("two members or more");
            let before = assign(&units, &all);
            let after = assign(&units, rest);
            for u in &units {
                let was = owner(u, &all).expect("an owner");
                let now = owner(u, rest).expect("an owner");
                if was != gone.as_str() {
                    prop_assert_eq!(was, now, "{} moved although {} kept it", u, was);
                }
            }
            // The units that moved are exactly the leaver's: read the other
            // way, a join takes back exactly those and nothing else.
            let moved: BTreeSet<&Unit> = units
                .iter()
                .filter(|u| owner(u, &all) != owner(u, rest))
                .collect();
            prop_assert_eq!(moved, before[gone.as_str()].iter().collect::<BTreeSet<_>>());
            prop_assert!(!after.contains_key(gone.as_str()));
        }
    }
}

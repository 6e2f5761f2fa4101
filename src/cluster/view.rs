//! What one member makes of the members it hears: who may own units, what
//! it owns itself, and what changed. Pure: the runtime (`super`) reads
//! chitchat's state into [`Member`]s and acts on the [`Decision`].

use crate::core::ownership::{self, Unit};
use crate::model::Timestamp;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A member as the failure detector and our own ears see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    /// Heard within the last few gossip intervals.
    Live,
    /// Not declared down yet, but not heard for a while.
    Suspect,
    /// The failure detector declared it down.
    Down,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Live => "live",
            MemberState::Suspect => "suspect",
            MemberState::Down => "down",
        }
    }
}

/// One member as gossip shows it (this member too).
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    pub state: MemberState,
    /// It has loaded its state and settled, and polls what it owns.
    pub ready: bool,
    pub config_hash: Option<String>,
    /// It sees fewer live members than `min_members` and polls nothing.
    pub paused: bool,
    /// The units it says it polls now.
    pub units: BTreeSet<Unit>,
}

/// What this member does with what it sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Members that are not down (this one included).
    pub live: usize,
    /// Fewer live members than `min_members`: poll nothing.
    pub paused: bool,
    /// The config hash most live, ready members share.
    pub majority_hash: Option<String>,
    /// This member's hash is not the majority's: own nothing.
    pub mismatch: bool,
    /// The members units are hashed over: live, ready, not paused, with the
    /// majority's hash. Sorted.
    pub eligible: Vec<String>,
}

/// Decide from `members` (this one, `me`, among them, with `my_hash`).
pub fn decide(me: &str, my_hash: &str, members: &[Member], min_members: usize) -> Decision {
    let up: Vec<&Member> = members.iter().filter(|m| m.state != MemberState::Down).collect();
    let live = up.len().max(1);
    let paused = live < min_members;
    // The majority's hash among the members that are up and ready; this
    // member's own counts even before it is ready. Ties go to the smaller
    // hash, so every member picks the same one.
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &up {
        let hash = if m.name == me {
            Some(my_hash)
        } else {
            m.config_hash.as_deref()
        };
        if let Some(h) = hash.filter(|_| m.ready || m.name == me) {
            *counts.entry(h).or_default() += 1;
        }
    }
    if !up.iter().any(|m| m.name == me) {
        *counts.entry(my_hash).or_default() += 1;
    }
    let majority_hash = counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(h, _)| h.to_string());
    let mismatch = majority_hash.as_deref().is_some_and(|h| h != my_hash);
    let mut eligible: Vec<String> = up
        .iter()
        .filter(|m| m.ready && !m.paused && m.config_hash.as_deref() == majority_hash.as_deref())
        .map(|m| m.name.clone())
        .collect();
    eligible.sort();
    eligible.dedup();
    Decision {
        live,
        paused,
        majority_hash,
        mismatch,
        eligible,
    }
}

/// Who owns each unit among the eligible members.
pub fn owners(units: &[Unit], d: &Decision) -> BTreeMap<Unit, Option<String>> {
    units
        .iter()
        .map(|u| (u.clone(), ownership::owner(u, &d.eligible).map(str::to_string)))
        .collect()
}

/// The units `me` should own: none while paused or mismatched; else those
/// HRW gives it among the eligible members with itself counted in (it may
/// not be eligible in the others' eyes yet: they have not heard it is
/// ready).
pub fn mine(me: &str, units: &[Unit], d: &Decision) -> BTreeSet<Unit> {
    if d.paused || d.mismatch {
        return BTreeSet::new();
    }
    let mut with_me = d.eligible.clone();
    if !with_me.iter().any(|m| m == me) {
        with_me.push(me.to_string());
    }
    units
        .iter()
        .filter(|u| ownership::owner(u, &with_me) == Some(me))
        .cloned()
        .collect()
}

/// A unit's owner changed, in this member's view.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub at: Timestamp,
    pub unit: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The units whose owner differs between `before` and `after`.
pub fn changes(
    at: Timestamp,
    before: &BTreeMap<Unit, Option<String>>,
    after: &BTreeMap<Unit, Option<String>>,
) -> Vec<Change> {
    let mut out = Vec::new();
    let keys: BTreeSet<&Unit> = before.keys().chain(after.keys()).collect();
    for u in keys {
        let (from, to) = (before.get(u).cloned().flatten(), after.get(u).cloned().flatten());
        if from != to {
            out.push(Change {
                at,
                unit: u.to_string(),
                from,
                to,
            });
        }
    }
    out
}

/// The units `me` may take now of those it should own: a unit another
/// member still says it polls waits until that member lets it go (it stops
/// as soon as its own view gives the unit away), or until `give_up` says
/// the wait is over, or until that member is down.
pub fn takeable(me: &str, wanted: &BTreeSet<Unit>, members: &[Member]) -> (BTreeSet<Unit>, BTreeSet<Unit>) {
    let mut now = BTreeSet::new();
    let mut waiting = BTreeSet::new();
    for u in wanted {
        let held = members
            .iter()
            .any(|m| m.name != me && m.state != MemberState::Down && m.units.contains(u));
        if held {
            waiting.insert(u.clone());
        } else {
            now.insert(u.clone());
        }
    }
    (now, waiting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, state: MemberState, hash: &str) -> Member {
        Member {
            name: name.into(),
            state,
            ready: true,
            config_hash: Some(hash.into()),
            paused: false,
            units: BTreeSet::new(),
        }
    }

    fn pools(n: usize) -> Vec<Unit> {
        (0..n).map(|i| Unit::Pool(format!("p{i}"))).collect()
    }

    #[test]
    fn three_live_members_with_one_config_split_every_unit_once() {
        use MemberState::Live;
        let members = [m("a", Live, "h"), m("b", Live, "h"), m("c", Live, "h")];
        let units = pools(30);
        let mut seen = BTreeSet::new();
        for me in ["a", "b", "c"] {
            let d = decide(me, "h", &members, 2);
            assert!(!d.paused && !d.mismatch);
            assert_eq!(d.eligible, ["a", "b", "c"]);
            for u in mine(me, &units, &d) {
                assert!(seen.insert(u), "a unit owned twice");
            }
        }
        assert_eq!(seen.len(), 30);
    }

    #[test]
    fn below_min_members_a_member_owns_nothing() {
        use MemberState::*;
        let members = [m("a", Live, "h"), m("b", Down, "h"), m("c", Down, "h")];
        let d = decide("a", "h", &members, 2);
        assert!(d.paused);
        assert_eq!(d.live, 1);
        assert!(mine("a", &pools(10), &d).is_empty());
        // The two on the other side own everything between them.
        let other = [m("a", Down, "h"), m("b", Live, "h"), m("c", Live, "h")];
        let units = pools(10);
        let (db, dc) = (decide("b", "h", &other, 2), decide("c", "h", &other, 2));
        assert_eq!(mine("b", &units, &db).len() + mine("c", &units, &dc).len(), 10);
    }

    #[test]
    fn a_member_whose_config_differs_from_the_majority_owns_nothing_and_the_others_share_its_units() {
        use MemberState::Live;
        let members = [m("a", Live, "h1"), m("b", Live, "h1"), m("c", Live, "h2")];
        let units = pools(20);
        let dc = decide("c", "h2", &members, 1);
        assert!(dc.mismatch);
        assert!(mine("c", &units, &dc).is_empty());
        let (da, db) = (decide("a", "h1", &members, 1), decide("b", "h1", &members, 1));
        assert!(!da.mismatch);
        assert_eq!(da.eligible, ["a", "b"]);
        assert_eq!(mine("a", &units, &da).len() + mine("b", &units, &db).len(), 20);
    }

    #[test]
    fn a_tie_of_hashes_goes_to_the_same_hash_on_both_sides() {
        use MemberState::Live;
        let members = [m("a", Live, "h1"), m("b", Live, "h2")];
        let da = decide("a", "h1", &members, 1);
        let db = decide("b", "h2", &members, 1);
        assert_eq!(da.majority_hash, db.majority_hash);
        assert_ne!(da.mismatch, db.mismatch, "exactly one of the two stands down");
    }

    #[test]
    fn a_member_not_ready_or_paused_is_not_given_units() {
        use MemberState::Live;
        let mut members = vec![m("a", Live, "h"), m("b", Live, "h"), m("c", Live, "h")];
        members[1].ready = false;
        members[2].paused = true;
        let d = decide("a", "h", &members, 1);
        assert_eq!(d.eligible, ["a"]);
        assert_eq!(mine("a", &pools(5), &d).len(), 5);
    }

    #[test]
    fn a_unit_another_member_still_polls_waits_until_it_lets_go_or_is_down() {
        use MemberState::*;
        let wanted: BTreeSet<Unit> = pools(2).into_iter().collect();
        let mut b = m("b", Live, "h");
        b.units.insert(Unit::Pool("p0".into()));
        let (now, waiting) = takeable("a", &wanted, &[m("a", Live, "h"), b.clone()]);
        assert_eq!(now, BTreeSet::from([Unit::Pool("p1".into())]));
        assert_eq!(waiting, BTreeSet::from([Unit::Pool("p0".into())]));
        b.state = Down;
        let (now, waiting) = takeable("a", &wanted, &[m("a", Live, "h"), b]);
        assert_eq!(now, wanted);
        assert!(waiting.is_empty());
    }

    #[test]
    fn changes_name_each_unit_whose_owner_moved() {
        let before = BTreeMap::from([
            (Unit::Pool("x".into()), Some("a".to_string())),
            (Unit::Pool("y".into()), Some("b".to_string())),
        ]);
        let after = BTreeMap::from([
            (Unit::Pool("x".into()), Some("a".to_string())),
            (Unit::Pool("y".into()), Some("c".to_string())),
            (Unit::Instance("z".into()), Some("a".to_string())),
        ]);
        let c = changes(Timestamp(5), &before, &after);
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].unit.as_str(), c[0].from.as_deref(), c[0].to.as_deref()),
            ("pool:y", Some("b"), Some("c"))
        );
        assert_eq!((c[1].unit.as_str(), c[1].from.as_deref()), ("instance:z", None));
    }
}

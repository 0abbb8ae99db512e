//! [`Gossip`]: the replicated membership state — members, [`GossipOverview`] (seen set and
//! reachability), version ([`VectorClock`]) and tombstones of removed members.
//!
//! Spec: cluster-specification.md, "Membership" (a specialised CRDT with a monotonic
//! merge), "Gossip Convergence" (the seen set), "Gossip Protocol". The merge is a join of
//! semilattices: tombstones union (latest time), members per node the status of highest
//! precedence unless tombstoned, vector clocks pointwise max minus tombstoned nodes,
//! reachability the newest rows of each observer. Nobody has seen a merged state yet, so
//! its seen set is empty.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::{Fnv1a, UniqueAddress};
use crate::cluster_identity::ClusterIdentity;
use crate::member::Member;
use crate::reachability::Reachability;
use crate::vector_clock::VectorClock;

/// Seen set and reachability, the part of the gossip that is not membership.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GossipOverview {
    /// Nodes that have seen exactly this version of the gossip.
    pub seen: BTreeSet<UniqueAddress>,
    /// Failure detector observations.
    pub reachability: Reachability,
}

/// The cluster membership state that nodes gossip to each other. Two gossips are equal
/// when every field is, members compared by [`Member::same_state`].
#[derive(Clone, Debug, Default)]
pub struct Gossip {
    /// Current members (never `Removed`: removed members become tombstones).
    pub members: BTreeMap<UniqueAddress, Member>,
    /// Seen set and reachability.
    pub overview: GossipOverview,
    /// Version of this state.
    pub version: VectorClock,
    /// Removed members → time of removal (ms, the remover's clock). A tombstoned node
    /// can never be a member again; tombstones are pruned after
    /// `prune-gossip-tombstones-after` (24 h).
    pub tombstones: BTreeMap<UniqueAddress, u64>,
    /// The cluster's identity, chosen by the node that formed it
    /// ([`crate::cluster_identity`]); `None` in the empty gossip and in gossip from
    /// versions before it. Merge keeps this side's, else the other's.
    pub identity: Option<ClusterIdentity>,
}

impl PartialEq for Gossip {
    fn eq(&self, other: &Gossip) -> bool {
        self.members.len() == other.members.len()
            && self
                .members
                .iter()
                .zip(&other.members)
                .all(|((ka, a), (kb, b))| ka == kb && a.same_state(b))
            && self.overview == other.overview
            && self.version == other.version
            && self.tombstones == other.tombstones
            && self.identity == other.identity
    }
}

impl Eq for Gossip {}

impl Gossip {
    /// The empty gossip (not in a cluster).
    pub fn empty() -> Self {
        Self::default()
    }

    /// A gossip containing only `member`, versioned by it and seen by it.
    pub fn single(member: Member) -> Self {
        let node = member.unique_address.clone();
        let mut g = Gossip::empty();
        g.members.insert(node.clone(), member);
        g.version = g.version.increment(&node);
        g.overview.seen.insert(node);
        g
    }

    /// The member `node`, if present.
    pub fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        self.members.get(node)
    }

    /// True if `node` is a current member.
    pub fn has_member(&self, node: &UniqueAddress) -> bool {
        self.members.contains_key(node)
    }

    /// True if `node` is in the seen set.
    pub fn seen_by_node(&self, node: &UniqueAddress) -> bool {
        self.overview.seen.contains(node)
    }

    /// A copy with `node` added to the seen set.
    pub fn seen(mut self, node: &UniqueAddress) -> Gossip {
        self.overview.seen.insert(node.clone());
        self
    }

    /// A copy whose seen set is exactly `{node}`.
    pub fn only_seen(mut self, node: &UniqueAddress) -> Gossip {
        self.overview.seen.clear();
        self.overview.seen.insert(node.clone());
        self
    }

    /// A copy with the seen sets of both (for two gossips with the same version).
    pub fn merge_seen(mut self, other: &Gossip) -> Gossip {
        self.overview
            .seen
            .extend(other.overview.seen.iter().cloned());
        self
    }

    /// A copy with a new version: `node`'s counter incremented, seen only by `node`.
    pub fn bump(mut self, node: &UniqueAddress) -> Gossip {
        self.version = self.version.increment(node);
        self.only_seen(node)
    }

    /// A 64-bit digest of the seen set (FNV-1a over the sorted unique addresses), sent in
    /// gossip status messages.
    pub fn seen_digest(&self) -> u64 {
        let mut h = Fnv1a::new();
        for n in &self.overview.seen {
            h.write_unique_address(n);
        }
        h.finish()
    }

    /// Drops what the tombstones say is gone: tombstoned members, their vector-clock
    /// entries, reachability rows and seen entries.
    pub fn normalize(mut self) -> Gossip {
        if self.tombstones.is_empty() {
            return self;
        }
        let t = &self.tombstones;
        self.members.retain(|k, _| !t.contains_key(k));
        for node in t.keys() {
            self.version = self.version.prune(node);
        }
        self.overview.seen.retain(|k| !t.contains_key(k));
        self.overview.reachability = self
            .overview
            .reachability
            .merge(&Reachability::new(), |n| !t.contains_key(n));
        self
    }

    /// Merges two (concurrent) gossips. Commutative, associative and idempotent on
    /// everything but the seen set, which is empty in the result.
    pub fn merge(&self, other: &Gossip) -> Gossip {
        let mut tombstones = self.tombstones.clone();
        for (k, t) in &other.tombstones {
            let e = tombstones.entry(k.clone()).or_insert(*t);
            if *t > *e {
                *e = *t;
            }
        }
        let mut version = self.version.merge(&other.version);
        for node in tombstones.keys() {
            version = version.prune(node);
        }
        let mut members = BTreeMap::new();
        let keys: BTreeSet<&UniqueAddress> =
            self.members.keys().chain(other.members.keys()).collect();
        for k in keys {
            if tombstones.contains_key(k) {
                continue;
            }
            let m = match (self.members.get(k), other.members.get(k)) {
                (Some(a), Some(b)) => Member::highest_priority_of(a, b).clone(),
                (Some(a), None) | (None, Some(a)) => a.clone(),
                (None, None) => continue,
            };
            members.insert(k.clone(), m);
        }
        let reachability = self
            .overview
            .reachability
            .merge(&other.overview.reachability, |n| {
                !tombstones.contains_key(n)
            });
        Gossip {
            members,
            overview: GossipOverview {
                seen: BTreeSet::new(),
                reachability,
            },
            version,
            tombstones,
            identity: self.identity.or(other.identity),
        }
    }

    /// True if [`Gossip::merge`] of the two drops a vector-clock entry that one of them
    /// holds: a node one side has tombstoned still has an entry in the other side's version
    /// (that side has not heard of the removal yet, or the removed node kept changing its
    /// own view, e.g. a node removed while cut off that admitted a joiner). The merged
    /// state then contains changes that its version no longer records, and may carry the
    /// very version of a state without them; the receiver must give it a version of its
    /// own ([`crate::cluster_core`]'s gossip merge).
    pub fn merge_prunes_versions(&self, other: &Gossip) -> bool {
        let tombstoned =
            |n: &UniqueAddress| self.tombstones.contains_key(n) || other.tombstones.contains_key(n);
        self.version
            .entries()
            .chain(other.version.entries())
            .any(|(n, _)| tombstoned(n))
    }

    /// A copy where `node` is removed: no longer a member, tombstoned at `now_ms`, its
    /// vector clock entry, reachability rows and seen entry dropped.
    pub fn remove(&self, node: &UniqueAddress, now_ms: u64) -> Gossip {
        let mut g = self.clone();
        g.tombstones.insert(node.clone(), now_ms);
        g.normalize()
    }

    /// A copy without tombstones older than `removed_before_ms`.
    pub fn prune_tombstones(&self, removed_before_ms: u64) -> Gossip {
        let mut g = self.clone();
        g.tombstones.retain(|_, t| *t >= removed_before_ms);
        g
    }

    /// The youngest member by up-number among members that have been Up (for the next
    /// up-number); `None` when nobody has been Up yet.
    pub fn youngest_up_number(&self) -> Option<u32> {
        self.members
            .values()
            .map(|m| m.up_number)
            .filter(|n| *n != crate::member::UP_NUMBER_UNSET)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::member::{MemberStatus, UP_NUMBER_UNSET};
    use proptest::prelude::*;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "h", i + 1), 1)
    }

    fn member(i: u16, status: MemberStatus, up: u32) -> Member {
        Member {
            unique_address: n(i),
            status,
            roles: BTreeSet::new(),
            up_number: up,
            app_version: "0.0.0".into(),
        }
    }

    fn arb_status() -> impl Strategy<Value = MemberStatus> {
        (0usize..8).prop_map(|i| MemberStatus::ALL[i])
    }

    /// Reachability rows of one observer at one version are the same everywhere, so the
    /// generated gossips take prefixes of one shared history of observations.
    fn reachability_after(history: &[(u16, u16, bool)], prefix: usize) -> Reachability {
        let mut r = Reachability::new();
        for (o, s, unreach) in history.iter().take(prefix) {
            if o != s {
                r = if *unreach {
                    r.unreachable(&n(*o), &n(*s))
                } else {
                    r.reachable(&n(*o), &n(*s))
                };
            }
        }
        r
    }

    fn arb_one(history: Vec<(u16, u16, bool)>) -> impl Strategy<Value = Gossip> {
        (
            proptest::collection::btree_map(
                0u16..6,
                (arb_status(), prop_oneof![Just(UP_NUMBER_UNSET), 1u32..4]),
                0..6,
            ),
            proptest::collection::btree_map(0u16..6, 1u64..5, 0..6),
            proptest::collection::btree_map(0u16..6, 0u64..100, 0..2),
            0..=history.len(),
            proptest::collection::btree_set(0u16..6, 0..6),
        )
            .prop_map(move |(ms, vc, ts, prefix, seen)| {
                let mut g = Gossip::empty();
                for (i, (st, up)) in ms {
                    g.members.insert(n(i), member(i, st, up));
                }
                g.version = VectorClock::from_entries(vc.into_iter().map(|(k, v)| (n(k), v)));
                g.tombstones = ts.into_iter().map(|(k, t)| (n(k), t)).collect();
                g.overview.reachability = reachability_after(&history, prefix);
                g.overview.seen = seen.into_iter().map(n).collect();
                g.normalize()
            })
    }

    fn arb_gossips() -> impl Strategy<Value = (Gossip, Gossip, Gossip)> {
        proptest::collection::vec((0u16..6, 0u16..6, any::<bool>()), 0..8)
            .prop_flat_map(|h| (arb_one(h.clone()), arb_one(h.clone()), arb_one(h)))
    }

    fn unseen(mut g: Gossip) -> Gossip {
        g.overview.seen.clear();
        g
    }

    #[test]
    fn merge_keeps_down_over_up_and_drops_tombstoned() {
        let mut a = Gossip::single(member(0, MemberStatus::Up, 1));
        a.members.insert(n(1), member(1, MemberStatus::Up, 2));
        let mut b = a.clone();
        b.members.insert(n(1), member(1, MemberStatus::Down, 2));
        let m = a.merge(&b);
        assert_eq!(m.members[&n(1)].status, MemberStatus::Down);
        let removed = b.remove(&n(1), 10);
        let m = a.merge(&removed);
        assert!(!m.has_member(&n(1)), "a tombstone beats every status");
        assert!(m.tombstones.contains_key(&n(1)));
        assert!(
            m.overview.seen.is_empty(),
            "nobody has seen a merged gossip"
        );
    }

    #[test]
    fn a_merge_prunes_versions_when_one_side_still_has_a_removed_nodes_entry() {
        let mut a = Gossip::single(member(0, MemberStatus::Up, 1));
        a.members.insert(n(1), member(1, MemberStatus::Up, 2));
        let removed = a.clone().bump(&n(1)).remove(&n(1), 10);
        assert!(!a.merge_prunes_versions(&a.clone().bump(&n(0))));
        assert!(removed.merge_prunes_versions(&a.clone().bump(&n(1))));
        assert!(a.clone().bump(&n(1)).merge_prunes_versions(&removed));
        assert!(!removed.merge_prunes_versions(&removed.clone().bump(&n(0))));
    }

    #[test]
    fn prune_tombstones_drops_only_old_ones() {
        let g = Gossip::single(member(0, MemberStatus::Up, 1))
            .remove(&n(1), 10)
            .remove(&n(2), 50);
        let p = g.prune_tombstones(20);
        assert!(!p.tombstones.contains_key(&n(1)));
        assert!(p.tombstones.contains_key(&n(2)));
    }

    #[test]
    fn seen_digest_changes_with_the_seen_set() {
        let g = Gossip::single(member(0, MemberStatus::Up, 1));
        let d1 = g.seen_digest();
        let g2 = g.clone().seen(&n(1));
        assert_ne!(d1, g2.seen_digest());
        assert_eq!(d1, g.clone().seen(&n(0)).seen_digest());
    }

    proptest! {
        #[test]
        fn gossip_merge_is_commutative((a, b, _c) in arb_gossips()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
        }

        #[test]
        fn gossip_merge_is_associative((a, b, c) in arb_gossips()) {
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
        }

        #[test]
        fn gossip_merge_is_idempotent((a, _b, _c) in arb_gossips()) {
            prop_assert_eq!(a.merge(&a), unseen(a.clone()));
        }

        #[test]
        fn merge_never_loses_a_higher_priority_status((a, b, _c) in arb_gossips()) {
            let m = a.merge(&b);
            for g in [&a, &b] {
                for (k, mem) in &g.members {
                    match m.members.get(k) {
                        Some(mm) => prop_assert!(mm.status.merge_priority() >= mem.status.merge_priority()),
                        None => prop_assert!(m.tombstones.contains_key(k), "a member only disappears by tombstone"),
                    }
                }
            }
        }

        #[test]
        fn merged_version_dominates_both((a, b, _c) in arb_gossips()) {
            let m = a.merge(&b);
            for g in [&a, &b] {
                let mut pruned = g.version.clone();
                for t in m.tombstones.keys() { pruned = pruned.prune(t); }
                prop_assert!(pruned.is_before_or_same(&m.version));
            }
        }
    }
}

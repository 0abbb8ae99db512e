//! What a registry's elements mean under a membership view: the [`Listing`] of a service
//! key (Akka's `Receptionist.Listing`: `serviceInstances` without the members seen
//! unreachable, `allServiceInstances` with them), and which elements the leader removes
//! because their node is no longer a member (Akka's receptionist prunes the entries of
//! removed nodes).

use std::collections::{BTreeMap, BTreeSet};

use super::service_instance::{ServiceInstance, ServiceKeyId};
use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;

/// The instances registered under one key, as one node sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The key.
    pub key: Option<ServiceKeyId>,
    /// Instances on members that are reachable and not Down (what to send to).
    pub reachable: Vec<ServiceInstance>,
    /// Instances on every current member, unreachable ones included.
    pub all: Vec<ServiceInstance>,
}

fn alive(view: &MembershipView, instance: &ServiceInstance) -> bool {
    view.member(&instance.node)
        .is_some_and(|m| !matches!(m.status, MemberStatus::Down | MemberStatus::Removed))
}

/// The listing of `key` from its registry's `elements` under `view`: elements that do
/// not parse and instances of nodes that are not members (removed, or not yet seen) are
/// left out; `reachable` also leaves out instances on unreachable members. Sorted.
pub fn listing<'a>(
    key: &ServiceKeyId,
    elements: impl IntoIterator<Item = &'a String>,
    view: &MembershipView,
) -> Listing {
    let all: BTreeSet<ServiceInstance> = elements
        .into_iter()
        .filter_map(|e| ServiceInstance::parse_entry(e))
        .filter(|i| alive(view, i))
        .collect();
    let reachable = all
        .iter()
        .filter(|i| view.is_reachable(&i.node))
        .cloned()
        .collect();
    Listing {
        key: Some(key.clone()),
        reachable,
        all: all.into_iter().collect(),
    }
}

/// Decides which registry elements the leader removes (Akka's receptionist pruning): those
/// of nodes this node saw leave the membership (removed, or
/// replaced by a restarted incarnation), and those of nodes that have not been members for
/// `grace_ms` (Akka's `prune-removed-older-than`, 60 s) — a node that registered before its
/// join reached the leader keeps its registrations while it joins. Only the leader removes.
/// Memory is bounded by the members seen leaving within the grace and the nodes named by
/// the registry.
#[derive(Clone, Debug)]
pub struct RegistryPruner {
    grace_ms: u64,
    members: BTreeSet<UniqueAddress>,
    /// Nodes seen leaving the membership → when.
    left: BTreeMap<UniqueAddress, u64>,
    /// Nodes named by the registry that are not members → since when.
    unknown_since: BTreeMap<UniqueAddress, u64>,
}

impl RegistryPruner {
    /// A pruner with a grace of `grace_ms` for nodes it never saw as members.
    pub fn new(grace_ms: u64) -> Self {
        RegistryPruner {
            grace_ms,
            members: BTreeSet::new(),
            left: BTreeMap::new(),
            unknown_since: BTreeMap::new(),
        }
    }

    /// The membership changed: members that are gone count as having left.
    pub fn membership(&mut self, now_ms: u64, view: &MembershipView) {
        let now: BTreeSet<UniqueAddress> = view.members.keys().cloned().collect();
        for gone in self.members.difference(&now) {
            self.left.insert(gone.clone(), now_ms);
        }
        self.members = now;
        let grace = self.grace_ms;
        self.left
            .retain(|_, at| now_ms.saturating_sub(*at) <= grace.saturating_mul(2));
    }

    /// One pruning round over every registry key (`(key, elements)`): the elements to
    /// remove per key. Empty unless `view` makes this node the leader.
    pub fn round(
        &mut self,
        now_ms: u64,
        view: &MembershipView,
        registry: &[(String, Vec<String>)],
    ) -> Vec<(String, Vec<String>)> {
        if !view.is_leader() {
            return Vec::new();
        }
        let mut named = BTreeSet::new();
        let mut out = Vec::new();
        for (key, elements) in registry {
            let gone: Vec<String> = elements
                .iter()
                .filter(|e| match ServiceInstance::parse_entry(e) {
                    // Written by a later version, perhaps: left alone (listings skip it).
                    None => false,
                    Some(i) if view.member(&i.node).is_some() => false,
                    Some(i) => {
                        named.insert(i.node.clone());
                        let since = *self.unknown_since.entry(i.node.clone()).or_insert(now_ms);
                        self.left.contains_key(&i.node)
                            || now_ms.saturating_sub(since) >= self.grace_ms
                    }
                })
                .cloned()
                .collect();
            if !gone.is_empty() {
                out.push((key.clone(), gone));
            }
        }
        self.unknown_since.retain(|n, _| named.contains(n));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemberStatus::*;
    use crate::test_views::{ua, view};

    fn entry(node: u16, id: u64) -> String {
        ServiceInstance { node: ua(node), id }.to_entry()
    }

    #[test]
    fn a_listing_shows_members_instances_and_leaves_out_strangers_and_garbage() {
        let key = ServiceKeyId::new("k").unwrap();
        let mut v = view(0, &[(0, Up), (1, Up), (2, Down)]);
        v.unreachable.insert(ua(1), [ua(0)].into());
        let elements = vec![
            entry(0, 1),
            entry(1, 2),
            entry(2, 3),
            entry(9, 4),
            "garbage".to_string(),
        ];
        let l = listing(&key, &elements, &v);
        let ids = |is: &[ServiceInstance]| is.iter().map(|i| i.id).collect::<Vec<_>>();
        assert_eq!(ids(&l.all), vec![1, 2]);
        assert_eq!(ids(&l.reachable), vec![1]);
    }

    #[test]
    fn the_leader_prunes_departed_nodes_at_once_and_unknown_ones_after_the_grace() {
        let mut v = view(0, &[(0, Up), (1, Up), (2, Up)]);
        v.leader = Some(ua(0));
        let mut p = RegistryPruner::new(1_000);
        p.membership(0, &v);
        let registry = vec![(
            "receptionist/k".to_string(),
            vec![entry(0, 1), entry(2, 2), entry(7, 3), "x".to_string()],
        )];
        // Node 7 was never seen: it waits for the grace. An element that does not parse
        // (a later version's?) is left alone.
        assert!(p.round(10, &v, &registry).is_empty());
        // Node 2 leaves: its registration goes at the next round.
        let mut v2 = view(0, &[(0, Up), (1, Up)]);
        v2.leader = Some(ua(0));
        p.membership(20, &v2);
        assert_eq!(p.round(30, &v2, &registry)[0].1, vec![entry(2, 2)]);
        // After the grace, node 7's goes too.
        assert_eq!(
            p.round(1_010, &v2, &registry)[0].1,
            vec![entry(2, 2), entry(7, 3)]
        );
        // A node that is not the leader removes nothing.
        let mut other = view(1, &[(0, Up), (1, Up)]);
        other.leader = Some(ua(0));
        assert!(RegistryPruner::new(0)
            .round(5_000, &other, &registry)
            .is_empty());
    }

    #[test]
    fn a_joining_node_keeps_its_registration_within_the_grace() {
        let mut v = view(0, &[(0, Up)]);
        v.leader = Some(ua(0));
        let mut p = RegistryPruner::new(1_000);
        p.membership(0, &v);
        let registry = vec![("k".to_string(), vec![entry(1, 1)])];
        assert!(p.round(0, &v, &registry).is_empty());
        assert!(p.round(900, &v, &registry).is_empty());
        // It joined: tracking ends, and it is never pruned while a member.
        let mut v2 = view(0, &[(0, Up), (1, Joining)]);
        v2.leader = Some(ua(0));
        p.membership(950, &v2);
        assert!(p.round(5_000, &v2, &registry).is_empty());
    }
}

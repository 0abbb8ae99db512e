//! The leader's step for partitioned services: from the current [`ServicesState`], the
//! membership view, the nodes' reports and the completed handoffs, the next state (or
//! nothing to write). Pure and deterministic.
//!
//! Spec: cluster-specification-original.md, "Leader Actions" (the leader sets the partition
//! table and schedules handoffs as pending changes; "Automatic rebalancing based on runtime
//! metrics") and "Handoff" step 5 ("The leader updates the partition table").

use std::collections::{BTreeMap, BTreeSet};

use super::{
    pending_changes, place, rebalance, InstancePolicy, PartitionChange, PartitionPath,
    PartitionTable, ServicesState,
};
use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;

/// What a node last reported to the leader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeOffer {
    /// The paths it has registered.
    pub paths: BTreeSet<PartitionPath>,
    /// It is shutting down: placed nowhere, its instances handed off.
    pub draining: bool,
    /// The `(version, writer)` of its state when it reported: a leader writes only once its
    /// own state is at least as new as every member's (so a new leader never places from a
    /// table older than one a node already follows).
    pub digest: (u64, Option<UniqueAddress>),
}

/// Load-aware placement (opt-in): see [`rebalance`].
#[derive(Clone, Copy, Debug)]
pub struct LoadAware<'a> {
    /// A load figure per node (larger = busier).
    pub load: &'a BTreeMap<UniqueAddress, f64>,
    /// Overloaded above the ring's mean by more than this (unit of `load`).
    pub threshold: f64,
    /// Moves per step.
    pub max_moves: usize,
}

/// The inputs of one leader step besides the state.
#[derive(Clone, Copy, Debug)]
pub struct LeaderInput<'a> {
    /// The leader's membership view.
    pub view: &'a MembershipView,
    /// The services the leader has registered: it places only these.
    pub policies: &'a BTreeMap<PartitionPath, InstancePolicy>,
    /// Each node's latest report (the leader's own included).
    pub offers: &'a BTreeMap<UniqueAddress, NodeOffer>,
    /// Changes reported complete (step 4).
    pub completed: &'a BTreeSet<PartitionChange>,
    /// Scaling wishes, instances per path.
    pub scaling: &'a BTreeMap<PartitionPath, u32>,
    /// Load-aware placement, if on.
    pub load: Option<LoadAware<'a>>,
}

/// The nodes that can still host or hand off: Up, Leaving and Exiting members. An Exiting
/// node still runs its instances and hands them off (its coordinated shutdown drains it,
/// and it is removed only once that is done or timed out); treating it as gone would start
/// a replacement while its instance still runs.
pub fn live_nodes(view: &MembershipView) -> Vec<UniqueAddress> {
    view.members
        .values()
        .filter(|m| {
            matches!(
                m.status,
                MemberStatus::Up | MemberStatus::Leaving | MemberStatus::Exiting
            )
        })
        .map(|m| m.unique_address.clone())
        .collect()
}

/// The placement ring of `path`: Up members that offer it and are not draining.
pub fn ring_of(
    view: &MembershipView,
    offers: &BTreeMap<UniqueAddress, NodeOffer>,
    path: &PartitionPath,
) -> Vec<UniqueAddress> {
    view.members
        .values()
        .filter(|m| m.status == MemberStatus::Up)
        .filter(|m| {
            offers
                .get(&m.unique_address)
                .is_some_and(|o| !o.draining && o.paths.contains(path))
        })
        .map(|m| m.unique_address.clone())
        .collect()
}

fn same_change(a: &PartitionChange, b: &PartitionChange) -> bool {
    a.path == b.path && a.from == b.from && a.to == b.to
}

/// Applies a completed change to the table (step 5): `to` takes `from`'s place in the
/// path's list, or joins its end.
fn apply_complete(table: &mut PartitionTable, change: &PartitionChange) {
    let mut nodes = table.instances(&change.path).unwrap_or(&[]).to_vec();
    let at = change
        .from
        .as_ref()
        .and_then(|f| nodes.iter().position(|n| n == f));
    match at {
        Some(i) if !nodes.contains(&change.to) => nodes[i] = change.to.clone(),
        Some(i) => {
            nodes.remove(i);
        }
        None if !nodes.contains(&change.to) => nodes.push(change.to.clone()),
        None => {}
    }
    table.insert(change.path.clone(), nodes);
}

/// One leader step; `None` when nothing changes. The new state has `version + 1` and
/// `writer = me`.
///
/// 1. Changes reported complete are applied to the table (step 5) and leave `pending`.
/// 2. A change whose new host is no longer live (Up, Leaving or Exiting) is dropped (the previous
///    host keeps or restarts its instance); one whose previous host is no longer live
///    loses it (`from: None`: the new host starts afresh).
/// 3. Instances on nodes that are not live leave the table.
/// 4. For each registered path without a pending change: the target is [`place`] (or
///    [`rebalance`] when load-aware, and only while nothing is pending) over the path's
///    ring ([`ring_of`]) for the policy's instance count on that ring; departures without
///    an arrival leave the table at once (the demand shrank) unless their node is live,
///    off the ring and still offers the path (draining, Leaving, Exiting: the ring is
///    short, it keeps the instance until an arrival pairs with it), arrivals become
///    [`pending_changes`] (the departure they pair with stays in the table until complete).
/// 5. A path nobody offers and the leader has not registered leaves the table; one that a
///    live node offers but the leader has not registered (a rolling upgrade that adds a
///    service) is left as it is.
pub fn leader_step(
    state: &ServicesState,
    me: &UniqueAddress,
    input: &LeaderInput<'_>,
) -> Option<ServicesState> {
    let live = live_nodes(input.view);
    let is_live = |n: &UniqueAddress| live.contains(n);
    let mut table = state.table.clone();
    let mut pending: Vec<PartitionChange> = Vec::with_capacity(state.pending.len());

    // 1 and 2.
    for change in &state.pending {
        if input.completed.iter().any(|c| same_change(c, change)) {
            apply_complete(&mut table, change);
            continue;
        }
        // Kept even when this leader has not registered the path (a leader of an older
        // version): dropping a change mid-handoff could leave its instance nowhere or twice.
        if !is_live(&change.to) {
            continue;
        }
        let mut change = change.clone();
        if change.from.as_ref().is_some_and(|f| !is_live(f)) {
            change.from = None;
        }
        pending.push(change);
    }

    // 3.
    let paths: Vec<PartitionPath> = table.paths().cloned().collect();
    for path in &paths {
        let nodes: Vec<UniqueAddress> = table
            .instances(path)
            .unwrap_or(&[])
            .iter()
            .filter(|n| is_live(n))
            .cloned()
            .collect();
        table.insert(path.clone(), nodes);
    }

    // 5.
    let offered: BTreeSet<&PartitionPath> = input
        .offers
        .iter()
        .filter(|(n, _)| is_live(n))
        .flat_map(|(_, o)| o.paths.iter())
        .collect();
    for path in &paths {
        if !input.policies.contains_key(path) && !offered.contains(path) {
            table.remove(path);
        }
    }

    // 4.
    let busy: BTreeSet<PartitionPath> = pending.iter().map(|c| c.path.clone()).collect();
    let mut groups: BTreeMap<Vec<UniqueAddress>, BTreeMap<PartitionPath, u32>> = BTreeMap::new();
    for (path, policy) in input.policies {
        if busy.contains(path) {
            continue;
        }
        let mut ring = ring_of(input.view, input.offers, path);
        if ring.is_empty() {
            // Nowhere to place it (every host draining or joining): its live instances stay
            // where they are, so that a later placement hands off from them.
            continue;
        }
        ring.sort();
        let n = u32::try_from(ring.len()).unwrap_or(u32::MAX);
        let wanted = policy.instances(n, input.scaling.get(path).copied());
        groups.entry(ring).or_default().insert(path.clone(), wanted);
    }
    for (ring, demand) in &groups {
        let current: PartitionTable = demand
            .keys()
            .filter_map(|p| table.instances(p).map(|n| (p.clone(), n.to_vec())))
            .collect();
        let target = match input.load {
            Some(l) if pending.is_empty() => {
                rebalance(&current, ring, demand, l.load, l.threshold, l.max_moves)
            }
            _ => place(&current, ring, demand),
        };
        let changes = pending_changes(&current, &target, &live);
        for path in demand.keys() {
            let wanted = target.instances(path).unwrap_or(&[]);
            let leaving: Vec<&UniqueAddress> = changes
                .iter()
                .filter(|c| &c.path == path)
                .filter_map(|c| c.from.as_ref())
                .collect();
            // A live node off the ring that still offers the path (draining, Leaving,
            // Exiting) keeps an instance no arrival takes over yet: the ring is short, the
            // demand did not shrink, and a later arrival hands off from it. Dropping it
            // would stop it while a later arrival starts afresh at once (N + 1 running).
            let off_ring = |n: &UniqueAddress| {
                !ring.contains(n)
                    && is_live(n)
                    && input.offers.get(n).is_some_and(|o| o.paths.contains(path))
            };
            let kept: Vec<UniqueAddress> = current
                .instances(path)
                .unwrap_or(&[])
                .iter()
                .filter(|n| wanted.contains(n) || leaving.contains(n) || off_ring(n))
                .cloned()
                .collect();
            table.insert(path.clone(), kept);
        }
        pending.extend(changes);
    }
    pending.sort();
    pending.dedup();

    if table == state.table && pending == state.pending {
        return None;
    }
    Some(ServicesState {
        version: state.version.saturating_add(1),
        writer: Some(me.clone()),
        table,
        pending,
    })
}

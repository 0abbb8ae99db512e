//! Pruning of removed nodes' entries (Akka's pruning protocol; Pekko `Replicator.scala`
//! `receiveRemovedNodePruningTick`).
//!
//! CRDTs such as counters and ORSets keep an entry per replica that ever updated them;
//! without pruning, every node that ever lived would stay in every value. When a node is
//! removed, its entries must be folded into a live replica, exactly once:
//!
//! 1. A removed node may still have updates in flight; only after
//!    `max-pruning-dissemination` (300 s) of *all-reachable* time (the clock pauses while
//!    any node is unreachable) does the leader (the lowest address) mark each value that
//!    holds the removed node's entries `PruningInitialized(owner = itself)`.
//! 2. Every replica that merges the marked value adds itself to the marker's seen set; the
//!    marker spreads with gossip.
//! 3. Once every node has seen it, the owner collapses the removed node's entries into its
//!    own (`prune`) and replaces the marker by `PruningPerformed` with an expiry
//!    (`pruning-marker-time-to-live` 6 h; 10 d for durable keys).
//! 4. Any replica that merges the performed marker drops the removed node's entries from
//!    the data it merges (`prune_cleanup`), so a late copy does not count twice. Expired
//!    markers are dropped.

use crate::address::UniqueAddress;

use super::envelope::PruningState;
use super::Replicator;
use crate::ddata::replica_id::ReplicaId;

impl Replicator {
    /// The pruning tick: the leader initializes pruning of nodes removed long enough;
    /// every owner performs what all have seen; expired markers go.
    pub(super) fn pruning_tick(&mut self, now_ms: u64) {
        if !self.active {
            return;
        }
        if self.is_leader() && !self.removed.is_empty() {
            self.init_removed_node_pruning();
        }
        self.perform_removed_node_pruning(now_ms);
        self.delete_obsolete_pruning_performed(now_ms);
        self.forget_pruned_nodes();
    }

    fn init_removed_node_pruning(&mut self) {
        let ready: Vec<ReplicaId> = self
            .removed
            .iter()
            .filter(|(_, at)| {
                self.all_reachable_clock_ms.saturating_sub(**at)
                    >= self.settings.max_pruning_dissemination_ms
            })
            .map(|(n, _)| ReplicaId(n.uid))
            .collect();
        if ready.is_empty() {
            return;
        }
        let mut changed = Vec::new();
        for (key, e) in self.data.iter_mut() {
            for r in &ready {
                if !e
                    .envelope
                    .value()
                    .is_some_and(|v| v.pruning_needed_from(*r))
                {
                    continue;
                }
                let init = match e.envelope.pruning.get(r) {
                    None => true,
                    Some(PruningState::Initialized { owner, .. }) => *owner != self.self_node,
                    Some(PruningState::Performed { .. }) => false,
                };
                if init {
                    e.envelope.pruning.insert(
                        *r,
                        PruningState::Initialized {
                            owner: self.self_node.clone(),
                            seen: Default::default(),
                        },
                    );
                    e.digest = None;
                    changed.push(key.clone());
                }
            }
        }
        for k in changed {
            self.on_changed(&k);
        }
    }

    fn perform_removed_node_pruning(&mut self, now_ms: u64) {
        let all: Vec<UniqueAddress> = self.all_nodes().cloned().collect();
        let mut changed = Vec::new();
        for (key, e) in self.data.iter_mut() {
            let ready: Vec<ReplicaId> = e
                .envelope
                .pruning
                .iter()
                .filter_map(|(r, p)| match p {
                    PruningState::Initialized { owner, seen }
                        if *owner == self.self_node
                            && all.iter().all(|n| seen.contains(&n.address)) =>
                    {
                        Some(*r)
                    }
                    _ => None,
                })
                .collect();
            if ready.is_empty() {
                continue;
            }
            let ttl = if self.settings.is_durable(key) {
                self.settings.durable_pruning_marker_time_to_live_ms
            } else {
                self.settings.pruning_marker_time_to_live_ms
            };
            for r in ready {
                if let Some(v) = e.envelope.value_mut() {
                    v.prune_into(r, self.replica);
                }
                let marker = PruningState::Performed {
                    obsolete_at_ms: now_ms.saturating_add(ttl),
                };
                e.envelope.pruning.insert(r, marker.clone());
                e.pruned_here.push((r, marker));
                self.stats.pruning_performed += 1;
            }
            e.digest = None;
            // The pruned value's change goes out as deltas too, with the marker.
            e.dirty_delta = true;
            changed.push(key.clone());
        }
        for k in changed {
            self.on_changed(&k);
        }
    }

    fn delete_obsolete_pruning_performed(&mut self, now_ms: u64) {
        let mut changed = Vec::new();
        for (key, e) in self.data.iter_mut() {
            let before = e.envelope.pruning.len();
            e.envelope.pruning.retain(|_, p| match p {
                PruningState::Performed { obsolete_at_ms } => *obsolete_at_ms > now_ms,
                PruningState::Initialized { .. } => true,
            });
            if e.envelope.pruning.len() != before {
                e.digest = None;
                changed.push(key.clone());
            }
        }
        for k in changed {
            self.on_changed(&k);
        }
    }

    /// Forgets removed nodes no value needs pruning from any more.
    fn forget_pruned_nodes(&mut self) {
        let data = &self.data;
        self.removed.retain(|n, _| {
            let r = ReplicaId(n.uid);
            data.values().any(|e| {
                e.envelope.value().is_some_and(|v| v.pruning_needed_from(r))
                    || matches!(
                        e.envelope.pruning.get(&r),
                        Some(PruningState::Initialized { .. })
                    )
            })
        });
    }
}

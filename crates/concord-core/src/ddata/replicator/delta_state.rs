//! [`DeltaState`]: the deltas waiting to be sent and what each node has been sent (Akka's
//! `DeltaPropagationSelector` state); `delta_propagation.rs` drives it.

use std::collections::BTreeMap;

use crate::address::UniqueAddress;

use super::messages::DeltaEntry;

/// Deltas waiting to be sent, and what each node has been sent.
#[derive(Debug, Default)]
pub struct DeltaState {
    /// Per key, per sequence number, the delta.
    pub(super) pending: BTreeMap<String, BTreeMap<u64, DeltaEntry>>,
    /// Per node, per key, the highest sequence number sent.
    pub(super) sent: BTreeMap<UniqueAddress, BTreeMap<String, u64>>,
    /// Where the next slice of nodes starts.
    pub(super) rotation: usize,
}

impl DeltaState {
    pub(super) fn forget_node(&mut self, node: &UniqueAddress) {
        self.sent.remove(node);
    }

    pub(super) fn forget_key(&mut self, key: &str) {
        self.pending.remove(key);
        for s in self.sent.values_mut() {
            s.remove(key);
        }
    }

    /// Deltas pending, over all keys (for tests and metrics).
    pub fn pending_count(&self) -> usize {
        self.pending.values().map(BTreeMap::len).sum()
    }
}

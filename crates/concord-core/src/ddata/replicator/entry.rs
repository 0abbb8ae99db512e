//! [`Entry`]: one key's envelope and what the replicator caches about it.

use crate::ddata::replica_id::ReplicaId;

use super::envelope::{DataEnvelope, Digest, PruningState};

/// One key's envelope and what the replicator caches about it.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) envelope: DataEnvelope,
    /// Cached digest (`None` after a change).
    pub(super) digest: Option<Digest>,
    /// Updated locally since the last delta propagation.
    pub(super) dirty_delta: bool,
    /// Pruning this node performed on the key since the last delta propagation: the
    /// markers go with the delta that carries the pruned value.
    pub(super) pruned_here: Vec<(ReplicaId, PruningState)>,
}

impl Entry {
    pub(super) fn new(envelope: DataEnvelope) -> Self {
        Entry {
            envelope,
            digest: None,
            dirty_delta: false,
            pruned_here: Vec::new(),
        }
    }

    pub(super) fn digest(&mut self) -> Digest {
        *self.digest.get_or_insert_with(|| self.envelope.digest())
    }
}

//! The requests [`super::ClusterSharding`] has open with its embedded [`crate::ddata::Replicator`]:
//! one id counter for the coordinator's state and remembered shards and the shards'
//! remembered entities, and what each open request is for, so that the replicator's
//! answers (`GetResponse`, `UpdateResponse`) reach the part that asked (Akka: the
//! `DDataShardCoordinator` and the `DDataRememberEntitiesShardStore` each ask their
//! replicator; here both share the machine's).

use std::collections::BTreeMap;

use super::ids::ShardId;

/// What a request of the machine's replicator is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum DdataPurpose {
    /// The coordinator reads its state.
    CoordinatorLoad,
    /// The coordinator reads the remembered shards.
    AllShardsLoad,
    /// The coordinator writes its state.
    CoordinatorWrite,
    /// The coordinator records remembered shards.
    AllShardsWrite,
    /// A shard reads its remembered entities.
    RememberLoad(ShardId),
    /// A shard writes its remembered entities.
    RememberWrite(ShardId),
}

/// Open replicator requests: request id (from 1, wrapping past 0) → purpose.
#[derive(Debug)]
pub(super) struct DdataRequests {
    open: BTreeMap<u64, DdataPurpose>,
    next: u64,
}

impl DdataRequests {
    /// No request open; the first id is 1.
    pub(super) fn new() -> Self {
        DdataRequests {
            open: BTreeMap::new(),
            next: 1,
        }
    }

    /// A fresh request id, recorded as being for `purpose`.
    pub(super) fn open(&mut self, purpose: DdataPurpose) -> u64 {
        let id = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        self.open.insert(id, purpose);
        id
    }

    /// The answer to request `id` arrived: what it was for (None if unknown).
    pub(super) fn close(&mut self, id: u64) -> Option<DdataPurpose> {
        self.open.remove(&id)
    }
}

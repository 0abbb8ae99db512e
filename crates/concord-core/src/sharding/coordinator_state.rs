//! [`CoordinatorState`]: where every shard lives, as the `ShardCoordinator` persists it
//! (Akka's `ShardCoordinator.Internal.State` and its `DomainEvent`s).
//!
//! The coordinator keeps the whole state in one `LWWRegister` in Distributed Data under
//! the key `<type>CoordinatorState` (Akka's ddata mode), written with `WriteMajorityPlus`
//! and read on fail-over with `ReadMajorityPlus`, so a new coordinator sees every
//! allocation its predecessor acted on. The events are applied by [`CoordinatorState::apply`],
//! which refuses an event that does not fit the state (Akka throws there; Concord counts
//! it and changes nothing).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::address::UniqueAddress;

use super::ids::ShardId;

/// A change of the coordinator's state (Akka's domain events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorEvent {
    /// A region registered.
    RegionRegistered(UniqueAddress),
    /// A proxy registered.
    RegionProxyRegistered(UniqueAddress),
    /// A region is gone (its node removed, or it stopped after a graceful shutdown): its
    /// shards have no home (with remember-entities they become unallocated).
    RegionTerminated(UniqueAddress),
    /// A proxy is gone.
    RegionProxyTerminated(UniqueAddress),
    /// A shard was allocated to a region (moved there if it had another home).
    ShardHomeAllocated {
        /// The shard.
        shard: ShardId,
        /// Its region.
        region: UniqueAddress,
    },
    /// A shard has no home any more.
    ShardHomeDeallocated {
        /// The shard.
        shard: ShardId,
    },
}

/// Why an event does not apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The region is not registered.
    #[error("region {0} is not registered")]
    UnknownRegion(String),
    /// The region or proxy is registered already.
    #[error("{0} is registered already")]
    AlreadyRegistered(String),
    /// The shard has no home.
    #[error("shard {0} is not allocated")]
    NotAllocated(String),
}

/// Every region, proxy and shard home (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorState {
    /// Region → its shards, earliest allocated first.
    regions: BTreeMap<UniqueAddress, Vec<ShardId>>,
    /// Proxies.
    proxies: BTreeSet<UniqueAddress>,
    /// With remember-entities: shards whose region is gone, to be allocated again at once.
    unallocated: BTreeSet<ShardId>,
    /// Whether remember-entities is on (regions terminating leave their shards
    /// unallocated rather than forgotten).
    remember_entities: bool,
    /// Shard → region (derived from `regions`).
    #[serde(skip)]
    shards: BTreeMap<ShardId, UniqueAddress>,
}

impl CoordinatorState {
    /// An empty state.
    pub fn new(remember_entities: bool) -> Self {
        CoordinatorState {
            remember_entities,
            ..Default::default()
        }
    }

    /// Rebuilds the derived index after decoding (the index is not on the wire).
    pub fn rebuild_index(&mut self) {
        self.shards = self
            .regions
            .iter()
            .flat_map(|(r, shards)| shards.iter().map(move |s| (s.clone(), r.clone())))
            .collect();
    }

    /// The home of `shard`.
    pub fn home(&self, shard: &str) -> Option<&UniqueAddress> {
        self.shards.get(shard)
    }

    /// Regions and their shards, earliest allocated first.
    pub fn regions(&self) -> &BTreeMap<UniqueAddress, Vec<ShardId>> {
        &self.regions
    }

    /// Registered proxies.
    pub fn proxies(&self) -> &BTreeSet<UniqueAddress> {
        &self.proxies
    }

    /// Shards waiting to be allocated again (remember-entities).
    pub fn unallocated(&self) -> &BTreeSet<ShardId> {
        &self.unallocated
    }

    /// Every (shard, home).
    pub fn shards(&self) -> impl Iterator<Item = (&ShardId, &UniqueAddress)> {
        self.shards.iter()
    }

    /// Number of allocated shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// True if `node` is a registered region or proxy.
    pub fn is_registered(&self, node: &UniqueAddress) -> bool {
        self.regions.contains_key(node) || self.proxies.contains(node)
    }

    /// Applies `event`.
    ///
    /// # Errors
    /// The event does not fit (see [`StateError`]); the state is unchanged.
    pub fn apply(&mut self, event: &CoordinatorEvent) -> Result<(), StateError> {
        match event {
            CoordinatorEvent::RegionRegistered(r) => {
                if self.regions.contains_key(r) {
                    return Err(StateError::AlreadyRegistered(r.to_string()));
                }
                self.regions.insert(r.clone(), Vec::new());
            }
            CoordinatorEvent::RegionProxyRegistered(p) => {
                if !self.proxies.insert(p.clone()) {
                    return Err(StateError::AlreadyRegistered(p.to_string()));
                }
            }
            CoordinatorEvent::RegionTerminated(r) => {
                let shards = self
                    .regions
                    .remove(r)
                    .ok_or_else(|| StateError::UnknownRegion(r.to_string()))?;
                for s in shards {
                    self.shards.remove(&s);
                    if self.remember_entities {
                        self.unallocated.insert(s);
                    }
                }
            }
            CoordinatorEvent::RegionProxyTerminated(p) => {
                if !self.proxies.remove(p) {
                    return Err(StateError::UnknownRegion(p.to_string()));
                }
            }
            CoordinatorEvent::ShardHomeAllocated { shard, region } => {
                if !self.regions.contains_key(region) {
                    return Err(StateError::UnknownRegion(region.to_string()));
                }
                if let Some(old) = self.shards.get(shard).cloned() {
                    if let Some(v) = self.regions.get_mut(&old) {
                        v.retain(|s| s != shard);
                    }
                }
                if let Some(v) = self.regions.get_mut(region) {
                    v.push(shard.clone());
                }
                self.shards.insert(shard.clone(), region.clone());
                self.unallocated.remove(shard);
            }
            CoordinatorEvent::ShardHomeDeallocated { shard } => {
                let old = self
                    .shards
                    .remove(shard)
                    .ok_or_else(|| StateError::NotAllocated(shard.clone()))?;
                if let Some(v) = self.regions.get_mut(&old) {
                    v.retain(|s| s != shard);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", 2550 + i), u64::from(i))
    }

    #[test]
    fn allocation_moves_and_terminations() {
        let mut s = CoordinatorState::new(false);
        assert!(s
            .apply(&CoordinatorEvent::ShardHomeAllocated {
                shard: "1".into(),
                region: node(1)
            })
            .is_err());
        s.apply(&CoordinatorEvent::RegionRegistered(node(1)))
            .unwrap();
        s.apply(&CoordinatorEvent::RegionRegistered(node(2)))
            .unwrap();
        s.apply(&CoordinatorEvent::RegionProxyRegistered(node(3)))
            .unwrap();
        for sh in ["1", "2", "3"] {
            s.apply(&CoordinatorEvent::ShardHomeAllocated {
                shard: sh.into(),
                region: node(1),
            })
            .unwrap();
        }
        s.apply(&CoordinatorEvent::ShardHomeAllocated {
            shard: "2".into(),
            region: node(2),
        })
        .unwrap();
        assert_eq!(s.home("2"), Some(&node(2)));
        assert_eq!(s.regions()[&node(1)], vec!["1".to_string(), "3".into()]);
        assert!(s.is_registered(&node(3)));
        // The wire form has no index: rebuild it.
        let bytes = postcard::to_stdvec(&s).unwrap();
        let mut back: CoordinatorState = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back.home("1"), None);
        back.rebuild_index();
        assert_eq!(back, s);
        s.apply(&CoordinatorEvent::RegionTerminated(node(1)))
            .unwrap();
        assert_eq!(s.home("1"), None);
        assert_eq!(s.shard_count(), 1);
        assert!(s.unallocated().is_empty(), "no remember-entities");
        assert!(s
            .apply(&CoordinatorEvent::ShardHomeDeallocated { shard: "1".into() })
            .is_err());
    }

    #[test]
    fn with_remember_entities_terminated_shards_wait_unallocated() {
        let mut s = CoordinatorState::new(true);
        s.apply(&CoordinatorEvent::RegionRegistered(node(1)))
            .unwrap();
        s.apply(&CoordinatorEvent::ShardHomeAllocated {
            shard: "7".into(),
            region: node(1),
        })
        .unwrap();
        s.apply(&CoordinatorEvent::RegionTerminated(node(1)))
            .unwrap();
        assert!(s.unallocated().contains("7"));
        s.apply(&CoordinatorEvent::RegionRegistered(node(2)))
            .unwrap();
        s.apply(&CoordinatorEvent::ShardHomeAllocated {
            shard: "7".into(),
            region: node(2),
        })
        .unwrap();
        assert!(s.unallocated().is_empty());
    }
}

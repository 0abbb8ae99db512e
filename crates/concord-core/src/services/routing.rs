//! [`Router`]: which instance of a service a message goes to (Akka's routing logics:
//! `RoundRobinRoutingLogic`, `RandomRoutingLogic`, `ConsistentHashingRoutingLogic`,
//! `AdaptiveLoadBalancingRoutingLogic` from cluster-metrics, and broadcast).
//!
//! - **Round robin** and **random**: over the instances in their (sorted) order.
//! - **Consistent hashing** on a key: rendezvous hashing (highest random weight) — the
//!   instance with the largest `xxh3(key, instance)` — so a key maps to the same instance
//!   on every node while the set of instances is the same, and when one instance goes only
//!   the keys it had move (Akka uses a hash ring with virtual nodes for the same property).
//! - **Adaptive**: random, weighted by the capacity of each instance's node (see
//!   [`crate::cluster_metrics::weights`]): a node with twice the free capacity gets twice
//!   the messages; nodes without metrics get the mean weight.
//! - **Broadcast**: every instance.

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::address::UniqueAddress;
use crate::cluster_metrics::{pick_index, weights, CapacitySelector};

/// How a router picks.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingLogic {
    /// The next instance in turn.
    RoundRobin,
    /// A random instance.
    Random,
    /// The instance the message's key hashes to (rendezvous hashing).
    ConsistentHashing,
    /// Random, weighted by the instances' nodes' capacity.
    Adaptive(CapacitySelector),
    /// Every instance.
    Broadcast,
}

/// A router: the logic and its state (the round-robin counter, the random source).
#[derive(Clone, Debug)]
pub struct Router {
    logic: RoutingLogic,
    next: u64,
    rng: SmallRng,
}

/// The rendezvous weight of the instance whose canonical bytes are `instance` for `key`:
/// `xxh3(len(key) ‖ key ‖ instance)`, the same on every platform.
fn score(key: &[u8], instance: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&(key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(instance);
    h.digest()
}

impl Router {
    /// A router with `logic`; `seed` seeds its random choices.
    pub fn new(logic: RoutingLogic, seed: u64) -> Self {
        Router {
            logic,
            next: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The logic.
    pub fn logic(&self) -> RoutingLogic {
        self.logic
    }

    /// The targets of one message among `instances` (`node` gives an instance's node, for
    /// adaptive routing; `id` its canonical bytes, for consistent hashing — the same on
    /// every node, e.g. its registry entry; `capacity` is each node's capacity, 0.0–1.0,
    /// from cluster metrics): one index into `instances`, every index for broadcast, none
    /// when `instances` is empty. `key` is the message's consistent-hashing key (other
    /// logics ignore it; without one, consistent hashing picks at random).
    pub fn route<T, B: AsRef<[u8]>>(
        &mut self,
        instances: &[T],
        node: impl Fn(&T) -> &UniqueAddress,
        id: impl Fn(&T) -> B,
        key: Option<&[u8]>,
        capacity: &BTreeMap<UniqueAddress, f64>,
    ) -> Vec<usize> {
        if instances.is_empty() {
            return Vec::new();
        }
        let n = instances.len();
        let one = match self.logic {
            RoutingLogic::Broadcast => return (0..n).collect(),
            RoutingLogic::RoundRobin => {
                let i = (self.next % n as u64) as usize;
                self.next = self.next.wrapping_add(1);
                i
            }
            RoutingLogic::Random => self.rng.random_range(0..n),
            RoutingLogic::ConsistentHashing => match key {
                Some(k) => (0..n)
                    .max_by_key(|i| {
                        let id = id(&instances[*i]);
                        (score(k, id.as_ref()), std::cmp::Reverse(*i))
                    })
                    .unwrap_or(0),
                None => self.rng.random_range(0..n),
            },
            RoutingLogic::Adaptive(_) => {
                // Each instance weighs what its node weighs (a node may hold several).
                let nodes: Vec<UniqueAddress> = instances.iter().map(|i| node(i).clone()).collect();
                let weighted = weights(&nodes, capacity);
                let r: u64 = self.rng.random();
                pick_index(weighted.iter().map(|(_, w)| *w), r).unwrap_or(0)
            }
        };
        vec![one]
    }

    /// The selector of an adaptive router.
    pub fn selector(&self) -> Option<CapacitySelector> {
        match self.logic {
            RoutingLogic::Adaptive(s) => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "h", i), 1)
    }

    fn nodes(n: u16) -> Vec<UniqueAddress> {
        (0..n).map(node).collect()
    }

    fn route(r: &mut Router, inst: &[UniqueAddress], key: Option<&[u8]>) -> Vec<usize> {
        r.route(
            inst,
            |u| u,
            |u| u.to_string().into_bytes(),
            key,
            &BTreeMap::new(),
        )
    }

    #[test]
    fn round_robin_takes_turns_and_broadcast_takes_all() {
        let inst = nodes(3);
        let mut r = Router::new(RoutingLogic::RoundRobin, 1);
        let picks: Vec<usize> = (0..6).flat_map(|_| route(&mut r, &inst, None)).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        let mut b = Router::new(RoutingLogic::Broadcast, 1);
        assert_eq!(route(&mut b, &inst, None), vec![0, 1, 2]);
        assert!(route(&mut b, &[], None).is_empty());
    }

    #[test]
    fn consistent_hashing_is_stable_and_moves_only_the_keys_of_a_lost_instance() {
        let inst = nodes(5);
        let mut a = Router::new(RoutingLogic::ConsistentHashing, 1);
        let mut b = Router::new(RoutingLogic::ConsistentHashing, 99);
        let keys: Vec<Vec<u8>> = (0..200u32).map(|k| k.to_be_bytes().to_vec()).collect();
        let before: Vec<usize> = keys
            .iter()
            .map(|k| route(&mut a, &inst, Some(k))[0])
            .collect();
        let again: Vec<usize> = keys
            .iter()
            .map(|k| route(&mut b, &inst, Some(k))[0])
            .collect();
        assert_eq!(before, again, "the same on every node");
        // Every instance gets some keys.
        for i in 0..5 {
            assert!(before.contains(&i));
        }
        // Instance 2 goes: only its keys move.
        let fewer: Vec<UniqueAddress> = inst.iter().filter(|u| **u != node(2)).cloned().collect();
        for (k, was) in keys.iter().zip(&before) {
            let now = &fewer[route(&mut a, &fewer, Some(k))[0]];
            if *was != 2 {
                assert_eq!(*now, inst[*was]);
            }
        }
    }

    #[test]
    fn adaptive_routing_follows_capacity() {
        let inst = nodes(2);
        let capacity: BTreeMap<_, _> = [(node(0), 0.1), (node(1), 0.9)].into();
        let mut r = Router::new(RoutingLogic::Adaptive(CapacitySelector::Mix), 7);
        let mut counts = [0u32; 2];
        for _ in 0..10_000 {
            counts[r.route(&inst, |u| u, |_| Vec::new(), None, &capacity)[0]] += 1;
        }
        // Weights 1 and 9.
        assert!(counts[1] > 8 * counts[0], "{counts:?}");
        assert!(counts[0] > 0, "{counts:?}");
        // Without metrics: even.
        let mut even = [0u32; 2];
        for _ in 0..10_000 {
            even[r.route(&inst, |u| u, |_| Vec::new(), None, &BTreeMap::new())[0]] += 1;
        }
        assert!(even[0] > 4_000 && even[1] > 4_000, "{even:?}");
    }

    #[test]
    fn random_stays_in_range() {
        let inst = nodes(4);
        let mut r = Router::new(RoutingLogic::Random, 3);
        for _ in 0..100 {
            assert!(route(&mut r, &inst, None)[0] < 4);
        }
    }
}

//! The simulated network: per-message delay (with jitter, so messages reorder), loss,
//! duplication, and partitions into groups. Deterministic given the simulation's RNG.

use std::collections::{BTreeMap, BTreeSet};

use concord_core::Address;
use rand::Rng;

/// Link behaviour for every message (units: ms, probabilities 0..=1).
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkConfig {
    /// Minimum one-way delay, ms.
    pub min_delay_ms: u64,
    /// Maximum one-way delay, ms; messages with different delays arrive reordered.
    pub max_delay_ms: u64,
    /// Probability a message is lost.
    pub loss: f64,
    /// Probability a message is delivered twice.
    pub duplication: f64,
    /// Keep each link's messages in the order sent, as the runtime's lanes do (TCP per
    /// sender, receiver and lane); off: jitter reorders them (harsher than the runtime).
    pub ordered: bool,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            min_delay_ms: 1,
            max_delay_ms: 5,
            loss: 0.0,
            duplication: 0.0,
            ordered: false,
        }
    }
}

/// Partitions: each address is in a group; messages between different groups are dropped.
/// No partition: everyone is in group 0. Links can also be cut in one direction only.
#[derive(Clone, Debug, Default)]
pub struct Partitions {
    group: BTreeMap<Address, u32>,
    /// `(from, to)`: messages from `from` to `to` are dropped (the other way works).
    one_way: BTreeSet<(Address, Address)>,
}

impl Partitions {
    /// Splits into `groups` (addresses not listed stay in group 0).
    pub fn split(groups: &[BTreeSet<Address>]) -> Self {
        let mut group = BTreeMap::new();
        for (i, g) in groups.iter().enumerate() {
            for a in g {
                group.insert(a.clone(), i as u32);
            }
        }
        Partitions {
            group,
            one_way: BTreeSet::new(),
        }
    }

    /// Also drops messages from `from` to `to` (an asymmetric link: `to` stops hearing
    /// `from`, `from` still hears `to`).
    pub fn cut_one_way(&mut self, from: Address, to: Address) {
        self.one_way.insert((from, to));
    }

    /// True if messages from `a` reach `b`.
    pub fn connected(&self, a: &Address, b: &Address) -> bool {
        self.group.get(a).copied().unwrap_or(0) == self.group.get(b).copied().unwrap_or(0)
            && !self.one_way.contains(&(a.clone(), b.clone()))
    }

    /// True when there is no partition and no cut link.
    pub fn is_healed(&self) -> bool {
        self.group.values().all(|g| *g == 0) && self.one_way.is_empty()
    }
}

impl NetworkConfig {
    /// Delivery delays for one message: empty if lost, two entries if duplicated.
    pub fn delays<R: Rng>(&self, rng: &mut R) -> Vec<u64> {
        if self.loss > 0.0 && rng.random::<f64>() < self.loss {
            return Vec::new();
        }
        let mut d =
            vec![rng.random_range(self.min_delay_ms..=self.max_delay_ms.max(self.min_delay_ms))];
        if self.duplication > 0.0 && rng.random::<f64>() < self.duplication {
            d.push(rng.random_range(self.min_delay_ms..=self.max_delay_ms.max(self.min_delay_ms)));
        }
        d
    }
}

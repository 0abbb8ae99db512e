//! Injected link faults (transport level, like Akka's multi-node testkit `blackhole` and
//! `throttle`): only reachable over the management API when
//! `testkit.fault-injection = on`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use concord_core::Address;
use tracing::warn;

/// Faults on the link to one peer.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkFaults {
    /// Drop everything this node sends to the peer.
    pub blackhole_outbound: bool,
    /// Drop everything this node receives from the peer.
    pub blackhole_inbound: bool,
    /// Probability (0..=1) to drop each outbound message.
    pub drop_probability: f64,
    /// Delay added to each outbound message, ms.
    pub delay_ms: u64,
}

impl LinkFaults {
    /// True if nothing is injected.
    pub fn is_clear(&self) -> bool {
        *self == LinkFaults::default()
    }
}

/// The faults of every link; reading costs one atomic load while none is set.
#[derive(Debug, Default)]
pub(crate) struct FaultTable {
    any: AtomicBool,
    links: RwLock<HashMap<Address, LinkFaults>>,
}

impl FaultTable {
    pub(crate) fn get(&self, peer: &Address) -> Option<LinkFaults> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let links = self.links.read().unwrap_or_else(|p| p.into_inner());
        links.get(peer).cloned()
    }

    pub(crate) fn set(&self, peer: Address, faults: LinkFaults) {
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        if faults.is_clear() {
            links.remove(&peer);
        } else {
            warn!(%peer, ?faults, "fault injection on link");
            links.insert(peer, faults);
        }
        self.any.store(!links.is_empty(), Ordering::Relaxed);
    }

    pub(crate) fn all(&self) -> Vec<(Address, LinkFaults)> {
        let links = self.links.read().unwrap_or_else(|p| p.into_inner());
        links.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub(crate) fn clear(&self) {
        let mut links = self.links.write().unwrap_or_else(|p| p.into_inner());
        links.clear();
        self.any.store(false, Ordering::Relaxed);
    }
}

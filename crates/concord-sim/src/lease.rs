//! [`SimLease`]: the lease the Split Brain Resolver's lease-majority strategy acquires in a
//! simulation, answering the core's `LeaseRequest`s.

use concord_core::UniqueAddress;

/// The lease that lease-majority decisions ask for: one shared resource that every side
/// of a partition can reach (like a Kubernetes `Lease` object), held by one owner until
/// it releases it or `ttl_ms` passes.
#[derive(Clone, Debug, Default)]
pub struct SimLease {
    /// Current holder and the time its hold expires, ms.
    pub holder: Option<(UniqueAddress, u64)>,
    /// How long a grant lasts unless renewed, ms (Akka's `release-after`, 40 s).
    pub ttl_ms: u64,
}

impl SimLease {
    /// Acquire (or renew) for `owner` at `now_ms`; true if held now.
    pub fn acquire(&mut self, owner: &UniqueAddress, now_ms: u64) -> bool {
        let free = match &self.holder {
            None => true,
            Some((h, until)) => h == owner || *until <= now_ms,
        };
        if free {
            self.holder = Some((owner.clone(), now_ms.saturating_add(self.ttl_ms)));
        }
        free
    }

    /// Release if held by `owner`.
    pub fn release(&mut self, owner: &UniqueAddress) {
        if self.holder.as_ref().is_some_and(|(h, _)| h == owner) {
            self.holder = None;
        }
    }
}

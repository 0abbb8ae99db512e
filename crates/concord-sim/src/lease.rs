//! [`SimLease`]: the lease the Split Brain Resolver's lease-majority strategy acquires in a
//! simulation, and [`NodeLease`], one node's handle on it — the [`Lease`] the membership
//! layer's real effects ask, as they ask a Kubernetes lease in production.

use std::sync::{Arc, Mutex};

use concord::host::{Clock, ManualClock};
use concord::lease::{Lease, LeaseFuture};
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
    /// Acquisitions granted so far (renewals included).
    pub granted: u64,
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
            self.granted += 1;
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

/// One node's handle on the simulation's shared [`SimLease`], in virtual time.
pub struct NodeLease {
    lease: Arc<Mutex<SimLease>>,
    owner: UniqueAddress,
    clock: ManualClock,
}

impl NodeLease {
    /// `owner`'s handle on `lease`, reading `clock`.
    pub fn new(lease: Arc<Mutex<SimLease>>, owner: UniqueAddress, clock: ManualClock) -> Self {
        NodeLease {
            lease,
            owner,
            clock,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut SimLease) -> T) -> T {
        f(&mut self.lease.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Lease for NodeLease {
    fn acquire(&self) -> LeaseFuture<'_> {
        let now = self.clock.now_ms();
        let granted = self.with(|l| l.acquire(&self.owner, now));
        Box::pin(async move { Ok(granted) })
    }

    fn release(&self) -> LeaseFuture<'_> {
        self.with(|l| l.release(&self.owner));
        Box::pin(async { Ok(true) })
    }

    fn check_lease(&self) -> bool {
        let now = self.clock.now_ms();
        self.with(|l| {
            l.holder
                .as_ref()
                .is_some_and(|(h, until)| h == &self.owner && *until > now)
        })
    }
}

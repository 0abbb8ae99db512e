//! The counts behind the inbound limits of [`super::TransportSettings`]: connections open
//! (at most half the file-descriptor limit), per claimed peer address, in their handshake
//! ([`super::admission`]), and the bytes all connections hold in large frames still
//! arriving. Each place taken is a guard that gives it back when dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use concord_core::Address;

use super::admission::HandshakeAdmission;
use super::settings::READ_BUFFER_BYTES;

/// The counts behind the inbound limits of [`super::TransportSettings`].
#[derive(Debug)]
pub(crate) struct InboundLimits {
    /// Connections accepted and not yet closed (handshakes included).
    pub(super) open: AtomicUsize,
    /// Connections in their handshake.
    pub(crate) handshakes: Arc<HandshakeAdmission>,
    /// Established connections per claimed peer address.
    pub(super) per_peer: Mutex<HashMap<Address, usize>>,
    /// Bytes held beyond [`READ_BUFFER_BYTES`] by all connections.
    pub(super) buffered: AtomicUsize,
    /// `max-inbound-connections`, lowered to half the file-descriptor limit.
    pub(super) max_open: usize,
}

impl InboundLimits {
    pub(crate) fn new(settings: &super::settings::TransportSettings) -> Self {
        InboundLimits {
            open: AtomicUsize::new(0),
            handshakes: Arc::new(HandshakeAdmission::new(
                settings.max_pending_handshakes,
                settings.max_pending_handshakes_per_address,
                settings.reserved_member_handshakes,
            )),
            per_peer: Mutex::default(),
            buffered: AtomicUsize::new(0),
            max_open: settings.max_inbound_connections.min(fd_budget()).max(1),
        }
    }

    /// The effective cap on inbound connections.
    pub(crate) fn max_open(&self) -> usize {
        self.max_open
    }

    /// Inbound connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// Half the process's soft limit of file descriptors (the rest stays for everything else
/// the node opens); unlimited if the limit cannot be read.
pub(super) fn fd_budget() -> usize {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => usize::try_from(soft / 2).unwrap_or(usize::MAX),
        Err(_) => usize::MAX,
    }
}

/// Decrements a counter when dropped.
pub(super) struct Held<'a>(pub(super) &'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Takes one of `max` places of `counter`, if one is free.
pub(super) fn take_place(counter: &AtomicUsize, max: usize) -> Option<Held<'_>> {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Held(counter))
}

/// One established connection counted against its peer's limit.
pub(super) struct PeerPlace<'a> {
    limits: &'a InboundLimits,
    peer: Address,
}

impl<'a> PeerPlace<'a> {
    pub(super) fn take(limits: &'a InboundLimits, peer: &Address, max: usize) -> Option<Self> {
        let mut map = limits.per_peer.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(peer.clone()).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerPlace {
            limits,
            peer: peer.clone(),
        })
    }
}

impl Drop for PeerPlace<'_> {
    fn drop(&mut self) {
        let mut map = self
            .limits
            .per_peer
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.peer);
            }
        }
    }
}

/// The bytes one connection holds beyond [`READ_BUFFER_BYTES`], counted in the shared budget.
pub(super) struct BufferAccount<'a> {
    pub(super) limits: &'a InboundLimits,
    pub(super) budget: usize,
    pub(super) held: usize,
}

impl BufferAccount<'_> {
    /// Accounts a buffer of `capacity` bytes; false if the budget cannot hold it.
    pub(super) fn set(&mut self, capacity: usize) -> bool {
        let excess = capacity.saturating_sub(READ_BUFFER_BYTES);
        if excess > self.held {
            let more = excess - self.held;
            let before = self.limits.buffered.fetch_add(more, Ordering::Relaxed);
            if before.saturating_add(more) > self.budget {
                self.limits.buffered.fetch_sub(more, Ordering::Relaxed);
                return false;
            }
        } else {
            self.limits
                .buffered
                .fetch_sub(self.held - excess, Ordering::Relaxed);
        }
        self.held = excess;
        true
    }
}

impl Drop for BufferAccount<'_> {
    fn drop(&mut self) {
        self.limits.buffered.fetch_sub(self.held, Ordering::Relaxed);
    }
}

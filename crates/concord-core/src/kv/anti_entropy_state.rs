//! [`AntiEntropy`]: one node's anti-entropy state — the segments it owns and has not yet
//! found equal with their co-owners, and the exchanges it started; `anti_entropy.rs` runs
//! the exchanges.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::kv::ring::{Ring, SEGMENTS};

/// The anti-entropy state of one node.
#[derive(Default)]
pub(crate) struct AntiEntropy {
    /// Segments this node owns and has not yet found equal with these co-owners.
    pub(crate) pending: BTreeMap<u16, BTreeSet<UniqueAddress>>,
    /// Exchanges this node started: session → (peer, started at ms).
    pub(crate) sessions: BTreeMap<u64, (UniqueAddress, u64)>,
    pub(crate) next_session: u64,
    /// Peers whose last exchange found differences.
    pub(crate) again: BTreeSet<UniqueAddress>,
    /// The peer of the last periodic exchange (the rotation goes on after it).
    pub(crate) last_peer: Option<UniqueAddress>,
    /// When the last periodic exchange was due, ms (one per `anti-entropy-interval`).
    pub(crate) last_periodic_ms: Option<u64>,
    /// The members that own a segment with this node, for the replication factor they were
    /// computed for (forgotten when the ring changes).
    pub(crate) co_owners: Option<(u8, BTreeSet<UniqueAddress>)>,
}

impl AntiEntropy {
    /// Segments pending, count.
    pub(crate) fn pending_segments(&self) -> usize {
        self.pending.len()
    }

    /// Exchanges in progress (started here), count.
    pub(crate) fn in_progress(&self) -> usize {
        self.sessions.len()
    }

    /// True unless `segment` is pending here.
    pub(crate) fn is_complete(&self, segment: u16) -> bool {
        !self.pending.contains_key(&segment)
    }

    /// The ring changed from `old` to `new`: segments `me` now owns for `n` and did not
    /// before become pending with every co-owner; co-owners that left a segment's list
    /// no longer count.
    pub(crate) fn ring_changed(&mut self, old: &Ring, new: &Ring, me: &UniqueAddress, n: u8) {
        self.co_owners = None;
        for s in 0..SEGMENTS {
            let prefs = new.preference_list(s, n);
            if !prefs.contains(&me) {
                self.pending.remove(&s);
                continue;
            }
            let co: BTreeSet<UniqueAddress> =
                prefs.into_iter().filter(|m| *m != me).cloned().collect();
            if !old.owns(me, s, n) {
                if co.is_empty() {
                    self.pending.remove(&s);
                } else {
                    self.pending.insert(s, co);
                }
            } else if let Some(p) = self.pending.get_mut(&s) {
                p.retain(|x| co.contains(x));
                if p.is_empty() {
                    self.pending.remove(&s);
                }
            }
        }
    }

    /// Forgets peers that are no longer members.
    pub(crate) fn forget_non_members(&mut self, members: &BTreeSet<UniqueAddress>) {
        self.pending.retain(|_, p| {
            p.retain(|x| members.contains(x));
            !p.is_empty()
        });
        self.again.retain(|x| members.contains(x));
    }

    pub(crate) fn synced(&mut self, peer: &UniqueAddress, segment: u16) {
        if let Some(p) = self.pending.get_mut(&segment) {
            p.remove(peer);
            if p.is_empty() {
                self.pending.remove(&segment);
            }
        }
    }
}

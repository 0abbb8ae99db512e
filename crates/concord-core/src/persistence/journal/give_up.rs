//! Giving up on replicas lost for good: the operator's override for a segment that waits
//! for replicas that will never come back (Riak's `cluster force-remove`, Cassandra's
//! `nodetool removenode` as the models).
//!
//! After a ring change a new replica answers nothing about a segment until it merged
//! complete copies from enough of the segment's previous replicas to meet every majority
//! of them ([`super::handoff`]). If a majority of those left at once and their disks are
//! gone (two of three nodes destroyed), that wait never ends and the segment's logs stay
//! unavailable (`Unable` answers with the reason "synchronising"). An operator who knows
//! those nodes are lost names their addresses: every node then stops waiting for them —
//! they no longer count among a wait's previous replicas, a wait needs complete copies
//! from at most those left, and a wait they were part of waits for no member whose copy
//! its needs do not await — so the segments complete with what the survivors hold.
//!
//! **What it costs**: a write accepted only by the lost replicas' disks is gone; one that
//! any survivor holds is kept. Only addresses outside the ring (downed and removed) may be
//! given up: a replica that is up is never skipped. The node asked tells every other
//! member of its ring (a [`JournalMessage::GiveUp`], best effort: asking again is
//! harmless), and each remembers the addresses (at most [`MAX_REMEMBERED`], the oldest
//! forgotten first) so that copies and needs arriving later do not wait for them again —
//! until a node of that address is in the ring again. The addresses are kept on disk (one
//! record of [`Table::JournalMeta`]), so that a node restarted later still skips them: a
//! copy that waited for them when its holder stopped carries that wait after the restart
//! ([`super::owed`]).

use std::collections::BTreeSet;

use super::entry::{from_bytes, to_bytes};
use super::handoff::{Handoffs, Need, Pending};
use super::message::JournalMessage;
use super::{JournalError, JournalMachine};
use crate::address::Address;
use crate::kv::storage::{KvStorage, StorageError, Table};
use crate::protocol::{Lane, Transmit};

/// The key of the addresses given up in [`Table::JournalMeta`].
const GIVEN_UP_KEY: &[u8] = b"given-up";

/// Addresses one give-up names, at most.
pub const MAX_GIVE_UP: usize = 64;
/// Addresses a node remembers given up, at most.
pub const MAX_REMEMBERED: usize = 1024;

/// What a give-up did on the node asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GivenUp {
    /// Segments whose waits ended here.
    pub released: Vec<u16>,
    /// Other members of the ring told to give up too.
    pub told: usize,
}

impl Need {
    /// Stops waiting for the replicas in `lost`: they leave its sets, and it needs complete
    /// copies from at most the previous replicas left.
    pub fn forget(&mut self, lost: &BTreeSet<Address>) {
        self.previous.retain(|a| !lost.contains(a));
        self.delivered.retain(|a| !lost.contains(a));
        self.partial.retain(|a| !lost.contains(a));
        self.required = self.required.min(self.previous.len());
    }
}

impl Pending {
    /// Stops waiting for the replicas in `lost` (its own need and the needs it took over).
    pub fn forget(&mut self, lost: &BTreeSet<Address>) {
        if lost.is_empty() {
            return;
        }
        self.from.retain(|a| !lost.contains(&a.address));
        self.previous.retain(|a| !lost.contains(a));
        self.required = self.required.min(self.previous.len());
        for n in self.inherited.iter_mut().chain(&mut self.debts) {
            n.forget(lost);
        }
    }
}

/// Reads the addresses given up from `st` (none stored: empty).
///
/// # Errors
/// The storage failed, or the record is corrupt or holds more than [`MAX_REMEMBERED`].
pub fn load<S: KvStorage>(st: &mut S) -> Result<BTreeSet<Address>, StorageError> {
    let Some(b) = st.get(Table::JournalMeta, GIVEN_UP_KEY)? else {
        return Ok(BTreeSet::new());
    };
    let given_up: Vec<Address> = from_bytes(&b).map_err(super::acceptor::corrupt)?;
    if given_up.len() > MAX_REMEMBERED {
        return Err(super::acceptor::corrupt("too many addresses given up"));
    }
    Ok(given_up.into_iter().collect())
}

/// Writes `given_up` (durable with the next commit); empty removes the record.
///
/// # Errors
/// The storage failed.
pub fn store<S: KvStorage>(st: &mut S, given_up: &BTreeSet<Address>) -> Result<(), StorageError> {
    if given_up.is_empty() {
        return st.remove(Table::JournalMeta, GIVEN_UP_KEY);
    }
    let v: Vec<&Address> = given_up.iter().collect();
    st.put(Table::JournalMeta, GIVEN_UP_KEY, &to_bytes(&v))
}

impl Handoffs {
    /// Stops waiting for `lost` in every wait and every need owed, and remembers them;
    /// returns the segments whose waits ended.
    pub fn give_up(&mut self, lost: &BTreeSet<Address>) -> Vec<u16> {
        for a in lost {
            if self.given_up.insert(a.clone()) && self.given_up.len() > MAX_REMEMBERED {
                self.given_up.pop_first();
            }
        }
        self.given_up_dirty = true;
        for needs in self.owed.values_mut() {
            for n in needs.iter_mut() {
                if n.previous.iter().any(|a| lost.contains(a)) {
                    n.forget(lost);
                    self.owed_dirty = true;
                }
            }
            needs.retain(|n| !n.previous.is_empty());
        }
        self.owed.retain(|_, needs| !needs.is_empty());
        let mut released = Vec::new();
        self.pending.retain(|s, p| {
            let named = |set: &BTreeSet<Address>| set.iter().any(|a| lost.contains(a));
            if !named(&p.previous)
                && !p
                    .inherited
                    .iter()
                    .chain(&p.debts)
                    .any(|n| named(&n.previous))
            {
                return true; // A wait the lost had no part in.
            }
            p.forget(lost);
            // Wait only for the copies the needs still await: a member outside them (a
            // new replica of the segment too, waiting like this node and handing nothing
            // over until it completes) holds nothing they require, and two such waits
            // would wait for each other for as long as the ring stays without the lost.
            let awaited: BTreeSet<Address> = p
                .from
                .iter()
                .filter(|a| p.awaits(&a.address))
                .map(|a| a.address.clone())
                .collect();
            p.from.retain(|a| awaited.contains(&a.address));
            if p.done() {
                released.push(*s);
                false
            } else {
                true
            }
        });
        for s in &released {
            self.completed(*s);
        }
        // The waits it shortened go to disk with the next commit.
        self.owed_dirty = true;
        released
    }
}

impl<S: KvStorage> JournalMachine<S> {
    /// The operator's give-up (see the module docs): stops waiting for the replicas at
    /// `lost` here and tells every other member of the ring to.
    ///
    /// # Errors
    /// [`JournalError::Rejected`] (nothing changed): no address, more than
    /// [`MAX_GIVE_UP`], or an address of a member of this node's ring (a replica that is
    /// up is never given up; down and remove it first).
    pub fn give_up(&mut self, lost: Vec<Address>) -> Result<GivenUp, JournalError> {
        if lost.is_empty() || lost.len() > MAX_GIVE_UP {
            return Err(JournalError::Rejected(format!(
                "give up 1 to {MAX_GIVE_UP} addresses, not {}",
                lost.len()
            )));
        }
        if let Some(up) = lost.iter().find(|a| self.in_ring(a)) {
            return Err(JournalError::Rejected(format!(
                "{up} is a member of the ring: a replica that is up is not given up \
                 (down it and wait until it is removed)"
            )));
        }
        let lost: BTreeSet<Address> = lost.into_iter().collect();
        let released = self.apply_give_up(&lost);
        let others: Vec<_> = self
            .ring
            .members()
            .iter()
            .filter(|m| **m != self.self_node)
            .cloned()
            .collect();
        for m in &others {
            self.out.transmits.push_back(Transmit {
                to: m.address.clone(),
                to_uid: Some(m.uid),
                lane: Lane::Ordinary,
                message: JournalMessage::GiveUp {
                    lost: lost.iter().cloned().collect(),
                },
            });
        }
        self.after_input();
        Ok(GivenUp {
            released,
            told: others.len(),
        })
    }

    /// A member's [`JournalMessage::GiveUp`]: applied for the addresses that are not
    /// members of this node's ring; a message from outside the ring or naming too many is
    /// refused (counted in [`super::JournalStats::rejected`]).
    pub(super) fn on_give_up(&mut self, from: &Address, lost: Vec<Address>) {
        if lost.len() > MAX_GIVE_UP || !self.in_ring(from) {
            self.stats.rejected += 1;
            return;
        }
        let lost: BTreeSet<Address> = lost.into_iter().filter(|a| !self.in_ring(a)).collect();
        if !lost.is_empty() {
            self.apply_give_up(&lost);
        }
    }

    /// True if a node of address `a` is a member of this node's ring.
    fn in_ring(&self, a: &Address) -> bool {
        self.ring.members().iter().any(|m| m.address == *a)
    }

    fn apply_give_up(&mut self, lost: &BTreeSet<Address>) -> Vec<u16> {
        let released = self.handoffs.give_up(lost);
        self.stats.segments_given_up = self
            .stats
            .segments_given_up
            .saturating_add(released.len() as u64);
        released
    }

    /// Segments this node waits for, and the previous replicas each still awaits
    /// (addresses that have not delivered a complete copy), ascending by segment.
    pub fn waits(&self) -> Vec<(u16, Vec<Address>)> {
        self.handoffs
            .pending
            .iter()
            .map(|(s, p)| {
                let mut awaited: BTreeSet<Address> =
                    p.from.iter().map(|a| a.address.clone()).collect();
                awaited.extend(
                    p.previous
                        .iter()
                        .chain(
                            p.inherited
                                .iter()
                                .chain(&p.debts)
                                .flat_map(|n| n.previous.iter()),
                        )
                        .filter(|a| p.awaits(a))
                        .cloned(),
                );
                (*s, awaited.into_iter().collect())
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "give_up_tests.rs"]
mod tests;

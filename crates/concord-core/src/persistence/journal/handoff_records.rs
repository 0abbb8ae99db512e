//! What the journal keeps of its handoffs in [`Table::JournalMeta`], written into each
//! commit's transaction before the commit, so that the pages and answers the commit
//! releases never say more than the disk does: the standing marks ([`super::standing`]),
//! the needs ([`super::owed`]), the addresses given up ([`super::give_up`]) and the last
//! ring ([`super::last_ring`]). A record that fails to be written stays due; a failed
//! commit makes every record due again ([`Handoffs::rewrite_records`]).
//!
//! [`Table::JournalMeta`]: crate::kv::storage::Table::JournalMeta

use std::collections::BTreeMap;

use super::handoff::{Handoffs, Need};
use super::{give_up, last_ring, owed, JournalMachine};
use crate::kv::storage::KvStorage;

impl Handoffs {
    /// Every record is due again (the transaction that wrote them failed).
    pub(super) fn rewrite_records(&mut self) {
        self.marks_dirty = true;
        self.ring_unsaved = true;
        self.owed_dirty = true;
        self.given_up_dirty = true;
    }
}

impl<S: KvStorage> JournalMachine<S> {
    /// Writes the records that changed; returns the needs written, to be taken as what
    /// the disk holds once the commit succeeds (`None`: not written).
    pub(super) fn write_handoff_records(&mut self) -> Option<BTreeMap<u16, Vec<Need>>> {
        if self.handoffs.marks_dirty {
            match self.handoffs.marks.store(&mut self.storage) {
                Ok(()) => self.handoffs.marks_dirty = false,
                Err(_) => self.stats.storage_errors += 1,
            }
        }
        let mut owed_written = None;
        if self.handoffs.owed_dirty {
            let now = self.handoffs.needs_on_disk();
            match owed::store(&mut self.storage, &self.handoffs.owed_on_disk, &now) {
                Ok(()) => owed_written = Some(now),
                Err(_) => {
                    self.stats.storage_errors += 1;
                    // Some records may be written and others not: every segment either
                    // names is rewritten (or removed) next time — no stored record is
                    // empty, so none compares equal.
                    let keys = self.handoffs.owed_on_disk.keys().chain(now.keys());
                    self.handoffs.owed_on_disk = keys.map(|s| (*s, Vec::new())).collect();
                }
            }
        }
        if self.handoffs.given_up_dirty {
            match give_up::store(&mut self.storage, &self.handoffs.given_up) {
                Ok(()) => self.handoffs.given_up_dirty = false,
                Err(_) => self.stats.storage_errors += 1,
            }
        }
        if self.handoffs.ring_unsaved
            && self.handoffs.pending.is_empty()
            && self.ring.members().contains(&self.self_node)
        {
            match last_ring::store(&mut self.storage, self.ring.members()) {
                Ok(()) => self.handoffs.ring_unsaved = false,
                Err(_) => self.stats.storage_errors += 1,
            }
        }
        owed_written
    }
}

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

/// The needs written into a commit's transaction: for every segment (`segments` `None`),
/// or for those named; `now` holds those with needs.
pub(super) struct NeedsWritten {
    segments: Option<Vec<u16>>,
    now: BTreeMap<u16, Vec<Need>>,
}

impl Handoffs {
    /// Every record is due again (the transaction that wrote them failed).
    pub(super) fn rewrite_records(&mut self) {
        self.marks_dirty = true;
        self.ring_unsaved = true;
        self.owed_dirty = true;
        self.given_up_dirty = true;
    }

    /// The commit that held `written` succeeded: the disk holds those needs now.
    pub(super) fn needs_committed(&mut self, written: NeedsWritten) {
        match written.segments {
            None => {
                self.owed_on_disk = written.now;
                self.owed_dirty = false;
            }
            Some(segments) => {
                for s in &segments {
                    self.owed_on_disk.remove(s);
                }
                self.owed_on_disk.extend(written.now);
            }
        }
        self.owed_dirty_segments.clear();
    }
}

impl<S: KvStorage> JournalMachine<S> {
    /// Writes the records that changed; returns the needs written, to be taken as what
    /// the disk holds once the commit succeeds ([`Handoffs::needs_committed`]; `None`:
    /// none written).
    pub(super) fn write_handoff_records(&mut self) -> Option<NeedsWritten> {
        if self.handoffs.marks_dirty {
            match self.handoffs.marks.store(&mut self.storage) {
                Ok(()) => self.handoffs.marks_dirty = false,
                Err(_) => self.stats.storage_errors += 1,
            }
        }
        let written = self.write_needs();
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
        written
    }

    /// The needs of every segment after a ring change or a give-up; otherwise only those
    /// of the segments a page or a completed wait touched (a handoff of hundreds of
    /// segments computes each a few times, not all of them at every page).
    fn write_needs(&mut self) -> Option<NeedsWritten> {
        let h = &self.handoffs;
        let (segments, before, now) = if h.owed_dirty {
            (None, h.owed_on_disk.clone(), h.needs_on_disk())
        } else if !h.owed_dirty_segments.is_empty() {
            let segments: Vec<u16> = h.owed_dirty_segments.iter().copied().collect();
            let before = segments
                .iter()
                .filter_map(|s| h.owed_on_disk.get(s).map(|n| (*s, n.clone())))
                .collect();
            let now = h.needs_on_disk_of(segments.iter().copied());
            (Some(segments), before, now)
        } else {
            return None;
        };
        match owed::store(&mut self.storage, &before, &now) {
            Ok(()) => Some(NeedsWritten { segments, now }),
            Err(_) => {
                self.stats.storage_errors += 1;
                // Some records may be written and others not: every segment either names
                // is rewritten (or removed) next time — no stored record is empty, so none
                // compares equal.
                let keys: Vec<u16> = before.keys().chain(now.keys()).copied().collect();
                for s in keys {
                    self.handoffs.owed_on_disk.insert(s, Vec::new());
                }
                None
            }
        }
    }
}

//! A replica's **standing** for a segment, as its handoff pages say, and the mark on
//! disk behind it.
//!
//! A new replica of a segment waits until enough of the segment's previous replicas have
//! handed it their records to meet every majority of them ([`super::handoff`]). That
//! argument needs each previous replica it counts to hold every write chosen before it
//! became a replica, and every write it accepted since. A replica that joined the
//! segment's list and has not finished its own handoff holds neither: it never accepted
//! a write there, and its copy is empty, half-filled or stale. Counting such a copy lost
//! acknowledged writes in the simulator (seed 355: after a split brain in which both
//! sides downed the other, a new replica counted a brand-new node still waiting for its
//! handoff, and the replicas that held the writes had left). So a handoff's last page
//! says where its sender stands:
//!
//! - [`Standing::Complete`]: the sender's handoff into the segment ended, or it needed
//!   none;
//! - [`Standing::Incomplete`]: anything else: a brand-new node, a replica that came back
//!   to the list and has not caught up (even after it left the list again), a replica that
//!   waits because a majority of the segment's replicas left at once (its copy lacks what
//!   only they held), or because the segment's list shrank (its copy may lack a write the
//!   departed replica and another chose: [`super::handoff::catches_up`]; its need says its
//!   copy is complete for the old list).
//!
//! The receiver counts complete copies towards meeting every majority of the previous
//! replicas; an incomplete copy counts only once *every* previous replica has delivered
//! (the receiver then holds everything any of them holds: how a cluster formed at once
//! from new nodes, or restarted nodes that guess their previous replicas, get going).
//!
//! The mark is one bit per segment ("complete here") in one record of
//! [`Table::JournalMeta`], so that a restarted node that was a complete replica is not
//! mistaken for a new one, and a node that never caught up is not mistaken for a
//! complete one. This is narrower than the joint consensus of Raft or the configuration
//! master of Vertical Paxos (Lamport, Malkhi, Zhou, 2009), which record which members of
//! every configuration hold the previous one's state; docs/PERSISTENCE.md, "The limit to
//! state precisely", says what is left.

use serde::{Deserialize, Serialize};

use super::entry::{from_bytes, to_bytes};
use crate::kv::ring::SEGMENTS;
use crate::kv::storage::{KvStorage, StorageError, Table};

/// The key of the marks in [`Table::JournalMeta`].
const MARKS_KEY: &[u8] = b"standing";
const WORDS: usize = SEGMENTS as usize / 64;

/// Where a handoff's sender stands for the segment it sends (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Standing {
    /// Its copy may lack writes chosen before it became a replica.
    #[default]
    Incomplete,
    /// Its copy holds every write chosen before it became a replica (its handoff ended,
    /// or it needed none) and every write it accepted since.
    Complete,
}

/// This node's marks per segment, kept on disk (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks {
    complete: Vec<u64>,
}

impl Default for Marks {
    /// A brand-new node (or one whose record cannot be read): complete nowhere.
    fn default() -> Self {
        Marks {
            complete: vec![0; WORDS],
        }
    }
}

fn set(words: &mut [u64], s: u16, on: bool) -> bool {
    let Some(w) = words.get_mut(usize::from(s) / 64) else {
        return false;
    };
    let before = *w;
    if on {
        *w |= 1 << (s % 64);
    } else {
        *w &= !(1 << (s % 64));
    }
    before != *w
}

impl Marks {
    /// Where this node's copy of `segment` stands (a pending handoff aside).
    pub fn standing(&self, segment: u16) -> Standing {
        let on = self
            .complete
            .get(usize::from(segment) / 64)
            .is_some_and(|w| w & (1 << (segment % 64)) != 0);
        if on {
            Standing::Complete
        } else {
            Standing::Incomplete
        }
    }

    /// `segment`'s handoff is done (or none was needed); true if that changed anything.
    pub fn completed(&mut self, segment: u16) -> bool {
        set(&mut self.complete, segment, true)
    }

    /// This node became a new replica of `segment` and waits for its handoff; true if
    /// that changed anything.
    pub fn joined(&mut self, segment: u16) -> bool {
        set(&mut self.complete, segment, false)
    }

    /// Reads the marks from `st` (none stored: a brand-new node's).
    ///
    /// # Errors
    /// The storage failed or the record is corrupt.
    pub fn load<S: KvStorage>(st: &mut S) -> Result<Marks, StorageError> {
        match st.get(Table::JournalMeta, MARKS_KEY)? {
            None => Ok(Marks::default()),
            Some(b) => {
                let m: Marks = from_bytes(&b).map_err(super::acceptor::corrupt)?;
                if m.complete.len() != WORDS {
                    return Err(super::acceptor::corrupt("standing marks of the wrong size"));
                }
                Ok(m)
            }
        }
    }

    /// Writes the marks to `st` (durable with the next commit).
    ///
    /// # Errors
    /// The storage failed.
    pub fn store<S: KvStorage>(&self, st: &mut S) -> Result<(), StorageError> {
        st.put(Table::JournalMeta, MARKS_KEY, &to_bytes(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryStorage;

    #[test]
    fn marks_say_where_a_copy_stands_and_survive_a_restart() {
        let mut m = Marks::default();
        assert_eq!(m.standing(7), Standing::Incomplete, "a brand-new node");
        assert!(m.completed(7));
        assert!(!m.completed(7), "idempotent");
        assert_eq!(m.standing(7), Standing::Complete);
        assert!(m.joined(7));
        assert_eq!(m.standing(7), Standing::Incomplete, "a stale copy");
        assert!(m.completed(SEGMENTS - 1));
        assert_eq!(m.standing(SEGMENTS - 1), Standing::Complete);
        assert!(!m.completed(SEGMENTS), "out of range: no bit");
        assert_eq!(m.standing(SEGMENTS), Standing::Incomplete);
        let mut st = MemoryStorage::default();
        assert_eq!(Marks::load(&mut st).unwrap(), Marks::default());
        m.store(&mut st).unwrap();
        assert_eq!(Marks::load(&mut st).unwrap(), m);
    }

    #[test]
    fn a_corrupt_record_is_an_error() {
        let mut st = MemoryStorage::default();
        st.put(Table::JournalMeta, MARKS_KEY, b"\x01\x02garbage")
            .unwrap();
        assert!(Marks::load(&mut st).is_err());
        let short = Marks {
            complete: vec![0; 2],
        };
        st.put(Table::JournalMeta, MARKS_KEY, &to_bytes(&short))
            .unwrap();
        assert!(Marks::load(&mut st).is_err());
    }
}

//! The **last ring** a node was a complete replica in, kept on disk, so that a restarted
//! node knows which nodes held its segments before it stopped.
//!
//! A node's first ring after a restart does not say who replicated a segment before: the
//! handoff rules ([`super::handoff`]) then took the new ring's other members as the
//! segment's previous replicas. When the split brain resolver had downed every other node
//! and one restarted node formed a cluster alone, that guess was empty: the node answered
//! for every segment from its own disk, and a recovery missed writes that only the downed
//! nodes held (simulator seeds 321 and 3307 in earlier runs). With the last ring on disk,
//! the node's first ring counts the replicas of that ring among the segment's previous
//! replicas too, so it waits until enough of them — a majority's worth, its own disk
//! included — are back and have handed their records over.
//!
//! The ring is stored (one record of [`Table::JournalMeta`], the members' addresses: a
//! ring's placement depends on addresses only) when this node is a member of it and waits
//! for no segment: every segment it replicates is then complete here, so the ring's lists
//! are a configuration whose majorities hold every chosen write. While it waits, the ring
//! stored before stays.

use serde::{Deserialize, Serialize};

use super::entry::{from_bytes, to_bytes};
use crate::address::{Address, UniqueAddress};
use crate::kv::ring::Ring;
use crate::kv::storage::{KvStorage, StorageError, Table};

/// The key of the last ring in [`Table::JournalMeta`].
const RING_KEY: &[u8] = b"ring";
/// Members stored, at most (a larger ring is not stored: the node guesses as before).
pub const MAX_STORED_MEMBERS: usize = 10_000;

#[derive(Serialize, Deserialize)]
struct Stored {
    members: Vec<Address>,
}

/// Reads the last ring's members from `st` (`None`: none stored, as on a brand-new node or
/// one of an earlier version).
///
/// # Errors
/// The storage failed or the record is corrupt.
pub fn load<S: KvStorage>(st: &mut S) -> Result<Option<Vec<Address>>, StorageError> {
    match st.get(Table::JournalMeta, RING_KEY)? {
        None => Ok(None),
        Some(b) => {
            let s: Stored = from_bytes(&b).map_err(super::acceptor::corrupt)?;
            if s.members.len() > MAX_STORED_MEMBERS {
                return Err(super::acceptor::corrupt("a stored ring too large"));
            }
            Ok(Some(s.members))
        }
    }
}

/// Writes `members` as the last ring (durable with the next commit); a ring of more than
/// [`MAX_STORED_MEMBERS`] is not stored.
///
/// # Errors
/// The storage failed.
pub fn store<S: KvStorage>(st: &mut S, members: &[UniqueAddress]) -> Result<(), StorageError> {
    if members.len() > MAX_STORED_MEMBERS {
        return Ok(());
    }
    let s = Stored {
        members: members.iter().map(|m| m.address.clone()).collect(),
    };
    st.put(Table::JournalMeta, RING_KEY, &to_bytes(&s))
}

/// The ring of `members` (by address; incarnation 0, which no live member has).
pub fn ring_of(members: Vec<Address>, virtual_nodes: u32) -> Ring {
    Ring::new(
        members.into_iter().map(|a| UniqueAddress::new(a, 0)),
        virtual_nodes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryStorage;

    #[test]
    fn the_last_ring_survives_a_restart_and_a_corrupt_record_is_an_error() {
        let mut st = MemoryStorage::default();
        assert_eq!(load(&mut st).unwrap(), None);
        let a = |p| UniqueAddress::new(Address::new("s", "h", p), u64::from(p));
        store(&mut st, &[a(1), a(2)]).unwrap();
        let members = load(&mut st).unwrap().unwrap();
        assert_eq!(members, vec![a(1).address, a(2).address]);
        let ring = ring_of(members, 8);
        let live = Ring::new([a(1), a(2)], 8);
        for s in [0, 7, 1023] {
            let by_address = |r: &Ring| -> Vec<Address> {
                r.preference_list(s, 3)
                    .iter()
                    .map(|m| m.address.clone())
                    .collect()
            };
            assert_eq!(by_address(&ring), by_address(&live), "the same placement");
        }
        st.put(Table::JournalMeta, RING_KEY, b"\x07garbage")
            .unwrap();
        assert!(load(&mut st).is_err());
    }
}

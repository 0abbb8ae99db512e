//! The **needs a node owes**, kept on disk: for each segment where its copy is
//! incomplete, the waits it has not finished — the one it waits in now (as a new replica,
//! or one that stays in a list that shrank or lost a majority) and those it left unfinished
//! when it left the segment's list ([`super::handoff::Handoffs::owed`]) — so that after a
//! restart its incomplete copy still carries them ([`super::handoff::Need`]), and, as a
//! replica of the segment again, it waits for them itself: a node restarted before its
//! first handoff ended still names the replicas that held the segment, though every
//! member it now sees is as new as it is ([`super::handoff::Handoffs::needs_on_disk`]).
//!
//! One record of [`Table::JournalMeta`] per segment (`owed/` and the segment, big-endian):
//! postcard of its needs, written with the commit after they change (with the standing
//! marks, [`super::standing`]), before any handoff page of that turn leaves; only the
//! segments that changed are written, so a new replica's handoff of hundreds of segments
//! writes each segment's record a few times, not the whole map at each page. (Earlier
//! versions kept one record of every segment, under `owed`: read once and rewritten so.)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::entry::{from_bytes, to_bytes};
use super::handoff::{Need, MAX_NEEDS};
use crate::kv::storage::{KvStorage, StorageError, Table};
use crate::kv::SEGMENTS;

/// The key of the needs owed of every segment, as earlier versions kept them.
const OWED_KEY: &[u8] = b"owed";
/// The prefix of one segment's needs owed.
const PREFIX: &[u8] = b"owed/";

#[derive(Serialize, Deserialize)]
struct Stored {
    owed: Vec<(u16, Vec<Need>)>,
}

fn key(segment: u16) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&segment.to_be_bytes());
    k
}

fn check(segment: u16, needs: &[Need]) -> Result<(), StorageError> {
    if segment >= SEGMENTS || needs.len() > MAX_NEEDS || !needs.iter().all(Need::is_stored_bounded)
    {
        return Err(super::acceptor::corrupt("needs owed out of bounds"));
    }
    Ok(())
}

/// Reads the needs owed from `st` (none stored: empty); a record of an earlier version is
/// rewritten as one record per segment (durable with the next commit).
///
/// # Errors
/// The storage failed, or a record is corrupt or out of bounds (a segment out of range,
/// more than [`MAX_NEEDS`] needs for one, a need out of [`Need::is_stored_bounded`]).
pub fn load<S: KvStorage>(st: &mut S) -> Result<BTreeMap<u16, Vec<Need>>, StorageError> {
    let mut owed = BTreeMap::new();
    let mut end = PREFIX.to_vec();
    end.extend_from_slice(&SEGMENTS.to_be_bytes());
    for (k, v) in st.range(Table::JournalMeta, &key(0), &end, usize::from(SEGMENTS))? {
        let segment = match k.get(PREFIX.len()..) {
            Some(&[hi, lo]) => u16::from_be_bytes([hi, lo]),
            _ => return Err(super::acceptor::corrupt("a key of needs owed")),
        };
        let needs: Vec<Need> = from_bytes(&v).map_err(super::acceptor::corrupt)?;
        check(segment, &needs)?;
        owed.insert(segment, needs);
    }
    if let Some(b) = st.get(Table::JournalMeta, OWED_KEY)? {
        let s: Stored = from_bytes(&b).map_err(super::acceptor::corrupt)?;
        for (segment, needs) in s.owed {
            check(segment, &needs)?;
            st.put(Table::JournalMeta, &key(segment), &to_bytes(&needs))?;
            owed.insert(segment, needs);
        }
        st.remove(Table::JournalMeta, OWED_KEY)?;
    }
    Ok(owed)
}

/// Writes `now` over `before` (what the disk holds): the records of the segments whose
/// needs changed (durable with the next commit); a segment with none loses its record.
///
/// # Errors
/// The storage failed.
pub fn store<S: KvStorage>(
    st: &mut S,
    before: &BTreeMap<u16, Vec<Need>>,
    now: &BTreeMap<u16, Vec<Need>>,
) -> Result<(), StorageError> {
    for s in before.keys().filter(|s| !now.contains_key(s)) {
        st.remove(Table::JournalMeta, &key(*s))?;
    }
    for (s, needs) in now {
        if before.get(s) != Some(needs) {
            st.put(Table::JournalMeta, &key(*s), &to_bytes(needs))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::kv::storage::MemoryStorage;

    #[test]
    fn needs_owed_survive_a_restart_and_bad_records_are_refused() {
        let mut st = MemoryStorage::default();
        assert!(load(&mut st).unwrap().is_empty());
        let a = |p: u16| Address::new("s", "h", p);
        let need = Need {
            previous: [a(1), a(2), a(3)].into(),
            required: 2,
            delivered: [a(1)].into(),
            partial: Default::default(),
        };
        let owed: BTreeMap<u16, Vec<Need>> =
            [(7, vec![need.clone()]), (1023, vec![need.clone()])].into();
        store(&mut st, &BTreeMap::new(), &owed).unwrap();
        assert_eq!(load(&mut st).unwrap(), owed);
        // Only what changed is written: one segment's record goes, the other stays.
        let one: BTreeMap<u16, Vec<Need>> = [(7, vec![need.clone()])].into();
        store(&mut st, &owed, &one).unwrap();
        assert_eq!(load(&mut st).unwrap(), one);
        store(&mut st, &one, &BTreeMap::new()).unwrap();
        assert!(load(&mut st).unwrap().is_empty());
        assert!(st.is_empty(Table::JournalMeta));
        // An earlier version's single record is read, and rewritten per segment.
        let old = Stored {
            owed: vec![(3, vec![need.clone()])],
        };
        st.put(Table::JournalMeta, OWED_KEY, &to_bytes(&old))
            .unwrap();
        let three: BTreeMap<u16, Vec<Need>> = [(3, vec![need.clone()])].into();
        assert_eq!(load(&mut st).unwrap(), three);
        assert_eq!(st.get(Table::JournalMeta, OWED_KEY).unwrap(), None);
        assert_eq!(load(&mut st).unwrap(), three);
        st.remove(Table::JournalMeta, &key(3)).unwrap();
        for bad in [
            Stored {
                owed: vec![(SEGMENTS, vec![need.clone()])],
            },
            Stored {
                owed: vec![(
                    1,
                    vec![Need {
                        required: 4,
                        ..need.clone()
                    }],
                )],
            },
            Stored {
                owed: vec![(1, vec![need.clone(); MAX_NEEDS + 1])],
            },
        ] {
            st.put(Table::JournalMeta, OWED_KEY, &to_bytes(&bad))
                .unwrap();
            assert!(load(&mut st).is_err());
        }
        st.put(Table::JournalMeta, OWED_KEY, b"\x01garbage")
            .unwrap();
        assert!(load(&mut st).is_err());
        st.remove(Table::JournalMeta, OWED_KEY).unwrap();
        st.put(Table::JournalMeta, &key(5), b"\x01garbage").unwrap();
        assert!(load(&mut st).is_err());
        let mut wrong = PREFIX.to_vec();
        wrong.push(1);
        st.remove(Table::JournalMeta, &key(5)).unwrap();
        st.put(Table::JournalMeta, &wrong, &to_bytes(&vec![need]))
            .unwrap();
        assert!(load(&mut st).is_err(), "a key of one byte");
    }
}

//! The **needs a node owes**, kept on disk: for each segment it left while it still
//! waited there ([`super::handoff::Handoffs::owed`]), or stays in while it catches up after
//! the segment's list shrank, the waits it had not finished, so that its incomplete copy
//! still carries them ([`super::handoff::Need`]) after a restart — and so that, should it
//! become a replica of the segment again, it waits for them itself.
//!
//! One record of [`Table::JournalMeta`]: postcard of (segment, needs) pairs, written with
//! the commit after they change (with the standing marks, [`super::standing`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::entry::{from_bytes, to_bytes};
use super::handoff::{Need, MAX_NEEDS};
use crate::kv::storage::{KvStorage, StorageError, Table};
use crate::kv::SEGMENTS;

/// The key of the needs owed in [`Table::JournalMeta`].
const OWED_KEY: &[u8] = b"owed";

#[derive(Serialize, Deserialize)]
struct Stored {
    owed: Vec<(u16, Vec<Need>)>,
}

/// Reads the needs owed from `st` (none stored: empty).
///
/// # Errors
/// The storage failed, or the record is corrupt or out of bounds (a segment out of
/// range, more than [`MAX_NEEDS`] needs for one, a need out of [`Need::is_bounded`]).
pub fn load<S: KvStorage>(st: &mut S) -> Result<BTreeMap<u16, Vec<Need>>, StorageError> {
    let Some(b) = st.get(Table::JournalMeta, OWED_KEY)? else {
        return Ok(BTreeMap::new());
    };
    let s: Stored = from_bytes(&b).map_err(super::acceptor::corrupt)?;
    let mut owed = BTreeMap::new();
    for (segment, needs) in s.owed {
        if segment >= SEGMENTS || needs.len() > MAX_NEEDS || !needs.iter().all(Need::is_bounded) {
            return Err(super::acceptor::corrupt("needs owed out of bounds"));
        }
        owed.insert(segment, needs);
    }
    Ok(owed)
}

/// Writes `owed` (durable with the next commit); empty removes the record.
///
/// # Errors
/// The storage failed.
pub fn store<S: KvStorage>(
    st: &mut S,
    owed: &BTreeMap<u16, Vec<Need>>,
) -> Result<(), StorageError> {
    if owed.is_empty() {
        return st.remove(Table::JournalMeta, OWED_KEY);
    }
    let s = Stored {
        owed: owed.iter().map(|(s, n)| (*s, n.clone())).collect(),
    };
    st.put(Table::JournalMeta, OWED_KEY, &to_bytes(&s))
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
        let owed: BTreeMap<u16, Vec<Need>> = [(7, vec![need.clone()])].into();
        store(&mut st, &owed).unwrap();
        assert_eq!(load(&mut st).unwrap(), owed);
        store(&mut st, &BTreeMap::new()).unwrap();
        assert!(load(&mut st).unwrap().is_empty());
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
    }
}

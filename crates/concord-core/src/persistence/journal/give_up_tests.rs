//! Tests of [`super`]: waits that forget replicas given up.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::address::UniqueAddress;
use crate::kv::ring::{Ring, SEGMENTS};
use crate::persistence::journal::standing::Standing;

fn node(port: u16) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("sys", "h", port),
        uid: port as u64,
    }
}

fn set(nodes: &[&UniqueAddress]) -> BTreeSet<Address> {
    nodes.iter().map(|n| n.address.clone()).collect()
}

#[test]
fn a_need_forgets_the_lost_and_needs_at_most_those_left() {
    let (a, b, c) = (node(1), node(2), node(3));
    let mut n = Need {
        previous: set(&[&a, &b, &c]),
        required: 2,
        delivered: set(&[&b]),
        partial: BTreeSet::new(),
    };
    let received = BTreeMap::new();
    assert!(!n.met(&received));
    n.forget(&set(&[&b, &c]));
    assert_eq!(n.previous, set(&[&a]));
    assert_eq!(n.required, 1);
    assert!(n.delivered.is_empty());
    assert!(!n.met(&received), "a, still there, must deliver");
    let from_a = BTreeMap::from([(a.address.clone(), Standing::Complete)]);
    assert!(n.met(&from_a));
}

#[test]
fn a_wait_for_a_lost_majority_ends_when_they_are_given_up() {
    let (a, b, c) = (node(1), node(2), node(3));
    let mut p = Pending {
        previous: set(&[&a, &b, &c]),
        required: 2,
        received: BTreeMap::from([(a.address.clone(), Standing::Complete)]),
        inherited: vec![Need {
            previous: set(&[&b, &c]),
            required: 1,
            ..Need::default()
        }],
        ..Pending::default()
    };
    assert!(!p.done());
    p.forget(&set(&[&b]));
    assert!(!p.done(), "c is still awaited");
    p.forget(&set(&[&c]));
    assert!(p.done());
}

#[test]
fn handoffs_remember_what_was_given_up_until_it_is_in_the_ring_again() {
    let (a, b, c, d) = (node(1), node(2), node(3), node(4));
    let old = Ring::new([a.clone(), b.clone(), c.clone(), d.clone()], 16);
    let two_left = Ring::new([a.clone(), b.clone()], 16);
    let mut at_a = Handoffs::default();
    at_a.ring_changed(&old, &two_left, &a, 3, 16);
    let waiting = at_a.pending.len();
    assert!(waiting > 0, "c and d left at once");
    let released = at_a.give_up(&set(&[&c, &d]));
    // What b must still send is awaited; what only c and d held is not.
    assert!(!released.is_empty());
    assert!(at_a
        .pending
        .values()
        .all(|p| !p.awaits(&c.address) && !p.awaits(&d.address)));
    for s in at_a.pending.keys().copied().collect::<Vec<_>>() {
        at_a.received_last(s, &b, Standing::Complete, &[]);
    }
    assert!(at_a.pending.is_empty());
    // A copy arriving later whose needs name c is not held up by it.
    let three = Ring::new([a.clone(), b.clone(), node(5)], 16);
    at_a.ring_changed(&two_left, &three, &a, 3, 16);
    let s = (0..SEGMENTS).find(|s| at_a.is_pending(*s));
    if let Some(s) = s {
        let need = Need {
            previous: set(&[&c]),
            required: 1,
            ..Need::default()
        };
        let senders: Vec<_> = at_a.pending[&s].from.iter().cloned().collect();
        for from in senders {
            at_a.received_last(s, &from, Standing::Incomplete, std::slice::from_ref(&need));
        }
        assert!(!at_a.pending[&s].awaits(&c.address));
    }
    // c back in the ring: remembered no more.
    assert!(at_a.given_up.contains(&c.address));
    let with_c = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    at_a.ring_changed(&three, &with_c, &a, 3, 16);
    assert!(!at_a.given_up.contains(&c.address));
    assert!(at_a.given_up.contains(&d.address));
}

#[test]
fn what_is_remembered_is_bounded() {
    let mut h = Handoffs::default();
    for port in 0..(MAX_REMEMBERED as u16 + 10) {
        h.give_up(&set(&[&node(port)]));
    }
    assert_eq!(h.given_up.len(), MAX_REMEMBERED);
}

#[test]
fn what_is_remembered_survives_a_restart_and_a_bad_record_is_refused() {
    use crate::kv::storage::MemoryStorage;
    let mut st = MemoryStorage::default();
    assert!(load(&mut st).unwrap().is_empty());
    let mut h = Handoffs::default();
    h.give_up(&set(&[&node(4), &node(5)]));
    assert!(h.given_up_dirty, "stored with the next commit");
    store(&mut st, &h.given_up).unwrap();
    assert_eq!(load(&mut st).unwrap(), set(&[&node(4), &node(5)]));
    // A node of that address in the ring again: remembered no more, on disk too.
    h.given_up_dirty = false;
    let (a, b) = (node(1), node(2));
    let empty = Ring::new(std::iter::empty(), 16);
    let with_4 = Ring::new([a.clone(), b.clone(), node(4)], 16);
    h.ring_changed(&empty, &with_4, &a, 3, 16);
    assert!(h.given_up_dirty);
    store(&mut st, &h.given_up).unwrap();
    assert_eq!(load(&mut st).unwrap(), set(&[&node(5)]));
    store(&mut st, &BTreeSet::new()).unwrap();
    assert!(st.is_empty(Table::JournalMeta));
    let too_many: Vec<Address> = (0..=MAX_REMEMBERED as u16)
        .map(|p| node(p).address)
        .collect();
    st.put(Table::JournalMeta, GIVEN_UP_KEY, &to_bytes(&too_many))
        .unwrap();
    assert!(load(&mut st).is_err());
    st.put(Table::JournalMeta, GIVEN_UP_KEY, b"\x05garbage")
        .unwrap();
    assert!(load(&mut st).is_err());
}

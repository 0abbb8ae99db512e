//! Tests of [`super`]: pending segments, needs and marks across ring changes.

use super::*;

fn node(port: u16, uid: u64) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("sys", "h", port),
        uid,
    }
}

#[test]
fn a_joining_replica_waits_for_the_others_and_they_send_to_it() {
    let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
    let old = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    let new = Ring::new([a.clone(), b.clone(), c.clone(), d.clone()], 16);
    let mut at_d = Handoffs::default();
    at_d.ring_changed(&old, &new, &d, 3, 16);
    let mut at_a = Handoffs::default();
    at_a.ring_changed(&old, &new, &a, 3, 16);
    let gained: Vec<u16> = (0..SEGMENTS)
        .filter(|s| new.preference_list(*s, 3).contains(&&d))
        .collect();
    assert!(!gained.is_empty());
    for s in &gained {
        assert!(at_d.is_pending(*s), "segment {s}");
        assert!(at_a.outgoing.contains_key(&(*s, d.clone())), "a sends {s}");
    }
    assert_eq!(at_d.pending.len(), gained.len());
    // The last page from each sender clears it.
    let s = gained[0];
    for from in at_d.pending[&s].from.clone() {
        at_d.received_last(s, &from, Standing::Complete, &[]);
    }
    assert!(!at_d.is_pending(s));
    // Two of a segment's three replicas gone at once: its new replicas wait for them.
    let e = node(5, 5);
    let five = Ring::new([a.clone(), b.clone(), c.clone(), d.clone(), e.clone()], 16);
    let seg = (0..SEGMENTS)
        .find(|s| {
            let l = five.preference_list(*s, 3);
            l.contains(&&d) && l.contains(&&e) && !l.contains(&&a)
        })
        .expect("a segment on d and e");
    let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    for me in [&a, &b, &c] {
        let mut h = Handoffs::default();
        h.ring_changed(&five, &three, me, 3, 16);
        if !five.preference_list(seg, 3).contains(&me) {
            assert!(h.is_pending(seg), "{me:?} must not answer for {seg}");
            let from = h.pending[&seg].from.clone();
            for f in &from {
                h.received_last(seg, f, Standing::Complete, &[]);
            }
            assert!(
                h.is_pending(seg),
                "still short of a majority of the old replicas"
            );
            h.received_last(seg, &node(4, 44), Standing::Complete, &[]);
            assert!(!h.is_pending(seg), "d came back with its disk");
        }
    }
    // A restarted node (new uid) is a new replica too.
    let a2 = node(1, 9);
    let back = Ring::new([a2.clone(), b.clone(), c.clone(), d.clone()], 16);
    let mut at_b = Handoffs::default();
    at_b.ring_changed(&new, &back, &b, 3, 16);
    assert!(at_b.outgoing.keys().any(|(_, to)| *to == a2));
}

fn pending(previous: &[&UniqueAddress]) -> Pending {
    let previous: BTreeSet<Address> = previous.iter().map(|a| a.address.clone()).collect();
    Pending {
        required: meets_every_majority(previous.len()),
        previous,
        ..Pending::default()
    }
}

#[test]
fn incomplete_copies_count_only_when_every_previous_replica_delivered() {
    let (a, b, n) = (node(1, 1), node(2, 2), node(3, 3));
    // A new replica that still waits for its own handoff is not one of the previous
    // replicas that meet every majority (simulator seed 355): b complete, n not, a
    // gone with writes only it and a departed node held.
    let mut p = pending(&[&a, &b, &n]);
    p.count(&b.address, Standing::Complete);
    p.count(&n.address, Standing::Incomplete);
    assert!(!p.done(), "n's copy does not stand for a's");
    p.count(&a.address, Standing::Complete);
    assert!(p.done());
    // Every previous replica's copy, complete or not: all that any of them holds.
    let mut p = pending(&[&a, &b, &n]);
    p.count(&a.address, Standing::Incomplete);
    p.count(&b.address, Standing::Incomplete);
    assert!(!p.done(), "n has not answered");
    p.count(&n.address, Standing::Incomplete);
    assert!(p.done());
    // A node outside the previous replicas counts for nothing.
    let mut p = pending(&[&a, &b]);
    p.count(&n.address, Standing::Complete);
    assert!(!p.done());
}

#[test]
fn a_ring_that_emptied_in_between_counts_from_the_last_ring_seen() {
    // Simulator seed 1108: d was still joining (its view: a, b, c Up, itself not) when
    // a, b and c were downed; its view emptied, then it formed a ring alone.
    let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
    let empty = Ring::new(std::iter::empty(), 16);
    let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    let alone = Ring::new([d.clone()], 16);
    let mut h = Handoffs::default();
    h.ring_changed(&empty, &three, &d, 3, 16);
    assert!(h.pending.is_empty(), "not a member: nothing to wait for");
    h.ring_changed(&three, &empty, &d, 3, 16);
    h.ring_changed(&empty, &alone, &d, 3, 16);
    assert_eq!(h.pending.len(), usize::from(SEGMENTS), "d waits everywhere");
    let s = 0;
    let p = &h.pending[&s];
    let previous: BTreeSet<Address> = three
        .preference_list(s, 3)
        .iter()
        .map(|x| x.address.clone())
        .collect();
    assert_eq!(p.previous, previous);
    assert_eq!(p.required, 2);
    // Two of them come back with their disks (new incarnations) and hand over.
    let mut back = three
        .preference_list(s, 3)
        .into_iter()
        .map(|x| UniqueAddress {
            address: x.address.clone(),
            uid: x.uid + 100,
        });
    let (x, y) = (back.next().unwrap(), back.next().unwrap());
    h.received_last(s, &x, Standing::Complete, &[]);
    assert!(h.is_pending(s));
    h.received_last(s, &y, Standing::Complete, &[]);
    assert!(!h.is_pending(s));
    // A node that never saw a ring and forms one alone is a new cluster's first node.
    let mut fresh = Handoffs::default();
    fresh.ring_changed(&empty, &alone, &d, 3, 16);
    assert!(fresh.pending.is_empty());
}

#[test]
fn a_copy_handed_on_while_it_waited_carries_its_need_to_the_next_replica() {
    // Simulator seeds 3647 and 3810: d became a replica of s and waited for two of
    // a, b, c; only a delivered before b and c were downed; then e and f joined and d
    // left the list of s, handing its copy on to e, which counted it as enough.
    let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
    let (e, f) = (node(5, 5), node(6, 6));
    let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    let four = Ring::new([a.clone(), b.clone(), c.clone(), d.clone()], 16);
    let two = Ring::new([a.clone(), d.clone()], 16);
    let grown = Ring::new([a.clone(), d.clone(), e.clone(), f.clone()], 16);
    let s = (0..SEGMENTS)
        .find(|s| {
            four.preference_list(*s, 3).contains(&&d)
                && !grown.preference_list(*s, 3).contains(&&d)
                && grown.preference_list(*s, 3).contains(&&e)
        })
        .expect("a segment d gains, then leaves to e");
    let mut at_d = Handoffs {
        was_member: true,
        ..Handoffs::default()
    };
    at_d.ring_changed(&three, &four, &d, 3, 16);
    at_d.received_last(s, &a, Standing::Complete, &[]);
    assert!(at_d.is_pending(s));
    at_d.ring_changed(&four, &two, &d, 3, 16);
    assert!(at_d.is_pending(s), "one of a, b, c is not enough");
    at_d.ring_changed(&two, &grown, &d, 3, 16);
    assert!(!at_d.is_pending(s));
    assert_eq!(at_d.standing(s), Standing::Incomplete);
    let owed = at_d.needs_of(s);
    let abc: BTreeSet<Address> = [&a, &b, &c].iter().map(|x| x.address.clone()).collect();
    assert_eq!(owed.len(), 1);
    assert_eq!(owed[0].previous, abc);
    assert_eq!(owed[0].required, 2);
    assert_eq!(owed[0].delivered, [a.address.clone()].into());
    assert!(at_d.owed_dirty, "stored with the next commit");
    // Restarted with its disk (marks and needs owed) into a ring where it replicates s
    // again, d waits for what it owes as well as for a, while a's copy is incomplete (a
    // lost its majority when b and c left: it waits for them too).
    let d2 = node(4, 44);
    let restarted = || Handoffs {
        marks: at_d.marks.clone(),
        owed: at_d.owed.clone(),
        ..Handoffs::default()
    };
    let back = Ring::new([a.clone(), d2.clone()], 16);
    let nothing = Ring::new(std::iter::empty(), 16);
    let mut again = restarted();
    again.ring_changed(&nothing, &back, &d2, 3, 16);
    again.received_last(s, &a, Standing::Incomplete, &[]);
    assert!(again.is_pending(s), "it still owes b's or c's copy");
    assert!(
        again.owed.is_empty() && again.owed_dirty,
        "taken over by the wait"
    );
    again.received_last(s, &node(3, 33), Standing::Complete, &[]);
    assert!(!again.is_pending(s));
    // A complete copy of a (its own handoff ended: it met whatever it owed) settles it.
    let mut settled = restarted();
    settled.ring_changed(&nothing, &back, &d2, 3, 16);
    settled.received_last(s, &a, Standing::Complete, &[]);
    assert!(!settled.is_pending(s));
    // e waits for a and d (the list it joins), takes d's need over with d's copy, and
    // is not done until b or c is back.
    let mut at_e = Handoffs {
        was_member: true,
        ..Handoffs::default()
    };
    at_e.ring_changed(&two, &grown, &e, 3, 16);
    assert!(at_e.is_pending(s));
    at_e.received_last(s, &a, Standing::Complete, &[]);
    at_e.received_last(s, &d, Standing::Incomplete, &owed);
    // And for f if f is involved (a brand-new node: an incomplete copy).
    at_e.received_last(s, &f, Standing::Incomplete, &[]);
    assert!(at_e.pending[&s].from.is_empty());
    assert!(at_e.is_pending(s), "d's copy lacks what only b and c held");
    assert_eq!(at_e.needs_of(s), owed, "e's copy owes it in turn");
    at_e.received_last(s, &node(2, 22), Standing::Complete, &[]);
    assert!(!at_e.is_pending(s));
    assert_eq!(at_e.standing(s), Standing::Complete);
    assert!(at_e.needs_of(s).is_empty());
    // A need is met by every one of its replicas' copies as well (a cluster's first
    // ring, where no copy is complete).
    let need = &owed[0];
    let mut got = BTreeMap::new();
    got.insert(b.address.clone(), Standing::Incomplete);
    assert!(!need.met(&got));
    got.insert(c.address.clone(), Standing::Incomplete);
    assert!(need.met(&got));
}

#[test]
fn marks_follow_the_ring_and_the_handoffs() {
    let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
    let empty = Ring::new(std::iter::empty(), 16);
    let alone = Ring::new([a.clone()], 16);
    let mut h = Handoffs::default();
    // The first node of a new cluster waits for nobody: complete everywhere.
    h.ring_changed(&empty, &alone, &a, 3, 16);
    assert!(h.pending.is_empty());
    assert!(h.marks_dirty);
    assert!((0..SEGMENTS).all(|s| h.standing(s) == Standing::Complete));
    // A brand-new node is incomplete until it completes, there and where it holds
    // nothing.
    let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    let four = Ring::new([a.clone(), b.clone(), c.clone(), d.clone()], 16);
    let mut at_d = Handoffs::default();
    at_d.ring_changed(&three, &four, &d, 3, 16);
    let s = *at_d.pending.keys().next().expect("d waits");
    assert_eq!(at_d.standing(s), Standing::Incomplete);
    let other = (0..SEGMENTS)
        .find(|s| !four.preference_list(*s, 3).contains(&&d))
        .expect("a segment d does not replicate");
    assert_eq!(at_d.standing(other), Standing::Incomplete);
    for f in [&a, &b, &c] {
        at_d.received_last(s, f, Standing::Complete, &[]);
    }
    assert!(!at_d.is_pending(s));
    assert_eq!(at_d.standing(s), Standing::Complete);
    // Restarted (its marks from disk), it is not mistaken for a new node there.
    let d2 = node(4, 44);
    let back = Ring::new([a.clone(), b.clone(), c.clone(), d2.clone()], 16);
    let mut again = Handoffs {
        marks: at_d.marks.clone(),
        ..Handoffs::default()
    };
    again.ring_changed(&three, &back, &d2, 3, 16);
    assert!(again.is_pending(s), "a new incarnation waits");
    assert_eq!(again.standing(s), Standing::Complete);
    // A complete replica that becomes a new replica again (after it left the list)
    // holds a stale copy until that handoff ends, also after it leaves the list.
    let mut h = Handoffs::default();
    h.ring_changed(&empty, &alone, &a, 3, 16);
    h.ring_changed(&alone, &four, &a, 3, 16);
    let left = (0..SEGMENTS)
        .find(|s| !four.preference_list(*s, 3).contains(&&a))
        .expect("a segment a left");
    assert_eq!(h.standing(left), Standing::Complete, "as it left it");
    h.ring_changed(&four, &three, &a, 3, 16);
    assert!(h.is_pending(left));
    assert_eq!(h.standing(left), Standing::Incomplete);
    h.ring_changed(&three, &four, &a, 3, 16);
    assert!(!h.is_pending(left));
    assert_eq!(h.standing(left), Standing::Incomplete, "it never caught up");
}

#[test]
fn a_wait_kept_on_disk_outlives_a_restart_among_members_as_new_as_it_is() {
    // d and e join a, b and c, become replicas of s, and receive nothing before a, b and
    // c are downed; then d and e restart (with their disks) and find each other only.
    let (a, b, c, d, e) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4), node(5, 5));
    let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    let five = Ring::new([a, b, c, d.clone(), e.clone()], 16);
    let s = (0..SEGMENTS)
        .find(|s| {
            let l = five.preference_list(*s, 3);
            l.contains(&&d) && l.contains(&&e)
        })
        .expect("a segment on d and e");
    let (mut at_d, mut at_e) = (Handoffs::default(), Handoffs::default());
    at_d.ring_changed(&three, &five, &d, 3, 16);
    at_e.ring_changed(&three, &five, &e, 3, 16);
    assert!(at_d.is_pending(s) && at_e.is_pending(s));
    assert!(
        at_d.owed_dirty,
        "the wait goes to disk with the turn's commit"
    );
    let on_disk = at_d.needs_on_disk();
    let abc: BTreeSet<Address> = (1..=3).map(|p| node(p, 0).address).collect();
    assert!(on_disk[&s]
        .iter()
        .any(|n| n.previous == abc && n.required == 2));
    let restarted = |h: &Handoffs| Handoffs {
        marks: h.marks.clone(),
        owed: h.needs_on_disk(),
        ..Handoffs::default()
    };
    let (d2, e2) = (node(4, 44), node(5, 55));
    let nothing = Ring::new(std::iter::empty(), 16);
    let two = Ring::new([d2.clone(), e2.clone()], 16);
    let (mut at_d2, mut at_e2) = (restarted(&at_d), restarted(&at_e));
    at_d2.ring_changed(&nothing, &two, &d2, 3, 16);
    at_e2.ring_changed(&nothing, &two, &e2, 3, 16);
    // Each hands the other its empty copy, incomplete, with the wait it owes: not enough.
    let from_e = at_e2.needs_of(s);
    assert!(from_e.iter().any(|n| n.previous == abc));
    at_d2.received_last(s, &e2, Standing::Incomplete, &from_e);
    assert!(at_d2.is_pending(s), "d still owes a majority of a, b and c");
    // Without the wait on disk the two empty copies were enough: the hole it closes.
    let mut forgetful = Handoffs {
        marks: at_d.marks.clone(),
        ..Handoffs::default()
    };
    forgetful.ring_changed(&nothing, &two, &d2, 3, 16);
    forgetful.received_last(s, &e2, Standing::Incomplete, &[]);
    assert!(!forgetful.is_pending(s));
    // a and b come back with their disks: their complete copies meet the wait.
    at_d2.received_last(s, &node(1, 11), Standing::Complete, &[]);
    assert!(at_d2.is_pending(s));
    at_d2.received_last(s, &node(2, 22), Standing::Complete, &[]);
    assert!(!at_d2.is_pending(s));
    assert!(
        !at_d2.needs_on_disk().contains_key(&s),
        "nothing owed once complete"
    );
}

#[test]
fn a_last_page_carries_needs_within_its_bounds_folded_never_dropped() {
    let addr = |p: u16| Address::new("s", "h", p);
    // Seventy different needs over the same five replicas: folded to at most MAX_NEEDS,
    // and met only where every one of the seventy is.
    let over_five = |k: u16| Need {
        previous: (1..=5).map(addr).collect(),
        required: usize::from(1 + k / 25),
        delivered: [addr(1 + k % 5)].into(),
        partial: [addr(1 + (k / 5) % 5)].into(),
    };
    let many: Vec<Need> = (0..70).map(over_five).collect();
    let mut h = Handoffs::default();
    h.owed.insert(3, many.clone());
    assert_eq!(h.standing(3), Standing::Incomplete);
    let needs = h.needs_of(3);
    assert_eq!(needs.len(), MAX_NEEDS);
    assert!(needs.iter().all(Need::is_bounded));
    for mask in 0u32..(1 << 10) {
        // Each of the five replicas delivered nothing, an incomplete or a complete copy.
        let received: BTreeMap<Address, Standing> = (0..5u16)
            .filter_map(|i| match (mask >> (2 * i)) & 3 {
                1 => Some((addr(i + 1), Standing::Incomplete)),
                2 | 3 => Some((addr(i + 1), Standing::Complete)),
                _ => None,
            })
            .collect();
        if needs.iter().all(|n| n.met(&received)) {
            assert!(many.iter().all(|n| n.met(&received)), "{received:?}");
        }
    }
    // Seventy needs of a hundred replicas each, none shared: beyond the page's bound of
    // addresses they fold into one that names every replica (its page will be refused
    // as too large: the copy is never counted, rather than counted short).
    let disjoint = |k: u16| Need {
        previous: (0..100).map(|p| addr(k * 100 + p + 1)).collect(),
        required: 51,
        ..Need::default()
    };
    h.owed.insert(4, (0..70).map(disjoint).collect());
    let needs = h.needs_of(4);
    let named: BTreeSet<&Address> = needs.iter().flat_map(|n| &n.previous).collect();
    assert_eq!(named.len(), 7_000, "no replica dropped");
    assert_eq!(needs.len(), 1);
    assert_eq!(needs[0].required, 7_000);
    assert!(!needs[0].is_bounded() && needs[0].is_stored_bounded());
    // A complete copy carries none.
    h.marks.completed(3);
    assert!(h.needs_of(3).is_empty());
}

#[test]
fn a_list_catches_up_only_where_a_write_chosen_before_could_miss_a_majority_after() {
    let n: Vec<UniqueAddress> = (1..=7).map(|i| node(i, i as u64)).collect();
    let l = |ix: &[usize]| -> Vec<&UniqueAddress> { ix.iter().map(|i| &n[*i]).collect() };
    // Kept its size, grew, or shrank to one of two: nothing to catch up.
    assert_eq!(catches_up(&l(&[0, 1, 2]), &l(&[1, 2, 3])), None);
    assert_eq!(catches_up(&l(&[0, 1]), &l(&[0, 1, 2])), None);
    assert_eq!(catches_up(&l(&[0, 1]), &l(&[1])), None);
    assert_eq!(catches_up(&l(&[0, 1, 2, 3]), &l(&[1, 2, 3])), None);
    assert_eq!(catches_up(&[], &l(&[1])), None);
    // Three to two: they catch up, answering meanwhile (both are every majority of two).
    assert_eq!(catches_up(&l(&[0, 1, 2]), &l(&[1, 2])), Some(true));
    // Five to four: answering meanwhile; five to three: not (two of the three that stay
    // may miss a write three of five chose).
    assert_eq!(
        catches_up(&l(&[0, 1, 2, 3, 4]), &l(&[1, 2, 3, 4])),
        Some(true)
    );
    assert_eq!(
        catches_up(&l(&[0, 1, 2, 3, 4]), &l(&[2, 3, 4])),
        Some(false)
    );
}

#[test]
fn replicas_that_stay_in_a_shrunk_list_answer_hand_over_and_complete_from_each_other() {
    let (a, b, c) = (node(1, 1), node(2, 2), node(3, 3));
    let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
    let two = Ring::new([b.clone(), c.clone()], 16);
    let (mut at_b, mut at_c) = (Handoffs::default(), Handoffs::default());
    for h in [&mut at_b, &mut at_c] {
        // Complete replicas of every segment of the three.
        for s in 0..SEGMENTS {
            h.marks.completed(s);
        }
    }
    at_b.ring_changed(&three, &two, &b, 3, 16);
    at_c.ring_changed(&three, &two, &c, 3, 16);
    let s = 7;
    for h in [&at_b, &at_c] {
        assert!(h.is_waiting(s) && !h.is_pending(s), "waits, answering");
        assert!(!h.holds_back(s), "hands its copy over meanwhile");
        assert_eq!(h.standing(s), Standing::Incomplete);
        assert_eq!(
            h.pending.len(),
            usize::from(SEGMENTS),
            "every segment shrank"
        );
    }
    // c's copy says incomplete, and its need names c's own copy delivered: it counts for b.
    let needs = at_c.needs_of(s);
    assert!(needs.iter().any(|n| n.delivered.contains(&c.address)));
    assert_eq!(
        at_c.needs_on_disk()[&s],
        needs,
        "kept on disk: a restart keeps what c's copy stood for"
    );
    at_b.received_last(s, &c, Standing::Incomplete, &needs);
    assert!(!at_b.is_waiting(s), "b holds two complete copies of three");
    assert_eq!(at_b.standing(s), Standing::Complete);
    assert!(!at_b.owed.contains_key(&s));
    // A copy that says incomplete with a need for other replicas does not count.
    let other = Need {
        previous: [b.address.clone(), c.address.clone()].into(),
        required: 1,
        delivered: [b.address.clone()].into(),
        partial: BTreeSet::new(),
    };
    let t = 8;
    at_c.received_last(t, &b, Standing::Incomplete, &[other]);
    assert!(at_c.is_waiting(t));
    // The list changes again before c caught up (b leaves too): c stops answering.
    let one = Ring::new([c.clone()], 16);
    at_c.ring_changed(&two, &one, &c, 3, 16);
    assert!(at_c.is_pending(t), "waits for a or b, not answering");
}

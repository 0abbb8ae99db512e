//! Objects (dotted version vectors) and the replica store.

use proptest::prelude::*;

use crate::ddata::{ReplicaId, VersionVector};
use crate::kv::object::{decode_context, encode_context, Dot, Versioned, Write, WriteOutcome};
use crate::kv::storage::{KvStorage, MemoryStorage, Table};
use crate::kv::store::{object_key, ApplyError, ReplicaStore, Update};

fn dot(r: u64, c: u64) -> Dot {
    Dot {
        replica: ReplicaId(r),
        counter: c,
    }
}

fn write(ctx: &VersionVector, d: Dot, v: &str) -> Write {
    Write {
        context: ctx.clone(),
        dot: d,
        value: Some(v.as_bytes().to_vec()),
        n: 3,
    }
}

fn vals(o: &Versioned) -> Vec<String> {
    o.values()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect()
}

#[test]
fn blind_writes_become_siblings_and_a_write_with_the_context_resolves_them() {
    let empty = VersionVector::new();
    let mut o = Versioned::of_write(&write(&empty, dot(1, 1), "a"));
    assert_eq!(
        o.apply_write(&write(&empty, dot(2, 1), "b")),
        WriteOutcome::Applied
    );
    assert_eq!(vals(&o), ["a", "b"]);
    // Two writes through the same coordinator without contexts stay apart too (the
    // point of dotted version vectors).
    o.apply_write(&write(&empty, dot(1, 2), "c"));
    assert_eq!(vals(&o), ["a", "c", "b"]);
    let ctx = o.clock().clone();
    o.apply_write(&write(&ctx, dot(2, 2), "resolved"));
    assert_eq!(vals(&o), ["resolved"]);
    // A delete with the context leaves a tombstone that reads as deleted.
    let ctx = o.clock().clone();
    o.apply_write(&Write {
        context: ctx,
        dot: dot(3, 1),
        value: None,
        n: 3,
    });
    assert!(o.is_deleted());
    assert_eq!(o.siblings().len(), 1);
}

#[test]
fn a_duplicate_write_changes_nothing_and_a_superseded_dot_never_returns() {
    let empty = VersionVector::new();
    let w1 = write(&empty, dot(1, 1), "old");
    let mut a = Versioned::of_write(&w1);
    assert_eq!(a.apply_write(&w1), WriteOutcome::AlreadySeen);
    let ctx = a.clock().clone();
    a.apply_write(&write(&ctx, dot(2, 1), "new"));
    // A late copy of w1, and a replica that still holds it, cannot bring "old" back.
    assert_eq!(a.apply_write(&w1), WriteOutcome::AlreadySeen);
    let stale = Versioned::of_write(&w1);
    a.merge(&stale);
    assert_eq!(vals(&a), ["new"]);
    let mut b = stale.clone();
    b.merge(&a);
    assert_eq!(b, a);
    assert!(a.descends(&stale));
    assert!(!stale.descends(&a));
}

#[test]
fn encoding_round_trips_and_garbage_is_an_error() {
    let empty = VersionVector::new();
    let mut o = Versioned::of_write(&write(&empty, dot(7, 9), "x"));
    o.apply_write(&write(&empty, dot(8, 1), "y"));
    assert_eq!(Versioned::decode(&o.encode()), Ok(o.clone()));
    assert!(Versioned::decode(&[]).is_err());
    assert!(Versioned::decode(&[9, 1, 2]).is_err());
    assert!(Versioned::decode(&[1, 0xff, 0xff, 0xff]).is_err());
    let ctx = o.clock().clone();
    assert_eq!(decode_context(&encode_context(&ctx)), Ok(ctx));
    assert!(decode_context(b"nope").is_err());
    // A sibling whose dot is not in the clock is refused.
    let mut bad = o.encode();
    let last = bad.len() - 1;
    bad[last] = 0; // n = 0
    assert!(Versioned::decode(&bad).is_err());
}

/// One step of a random history over three replicas.
#[derive(Clone, Debug)]
enum Op {
    /// Replica `at` coordinates a write with the context of replica `ctx_of` (or none).
    Write { at: usize, ctx_of: Option<usize> },
    /// Replica `at` merges replica `from`.
    Merge { at: usize, from: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, proptest::option::of(0usize..3))
            .prop_map(|(at, ctx_of)| Op::Write { at, ctx_of }),
        (0usize..3, 0usize..3).prop_map(|(at, from)| Op::Merge { at, from }),
    ]
}

/// Runs a history; returns the replicas and every write made (its dot and context).
fn run(ops: &[Op]) -> (Vec<Versioned>, Vec<(Dot, VersionVector)>) {
    let mut reps = vec![
        Versioned::empty(3),
        Versioned::empty(3),
        Versioned::empty(3),
    ];
    let mut counters = [0u64; 3];
    let mut writes = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        match o {
            Op::Write { at, ctx_of } => {
                counters[*at] += 1;
                let d = dot(*at as u64 + 1, counters[*at]);
                let ctx = ctx_of.map(|c| reps[c].clock().clone()).unwrap_or_default();
                let w = write(&ctx, d, &format!("v{i}"));
                reps[*at].apply_write(&w);
                writes.push((d, ctx));
            }
            Op::Merge { at, from } => {
                let f = reps[*from].clone();
                reps[*at].merge(&f);
            }
        }
    }
    (reps, writes)
}

proptest! {
    #[test]
    fn merge_is_commutative_associative_and_idempotent(ops in proptest::collection::vec(op(), 0..40)) {
        let (r, _) = run(&ops);
        let (a, b, c) = (&r[0], &r[1], &r[2]);
        prop_assert_eq!(a.merged(b), b.merged(a));
        prop_assert_eq!(a.merged(b).merged(c), a.merged(&b.merged(c)));
        prop_assert_eq!(a.merged(a), a.clone());
        for o in &r {
            prop_assert!(o.validate().is_ok());
            prop_assert_eq!(&Versioned::decode(&o.encode()).expect("decodes"), o);
        }
    }

    #[test]
    fn no_write_is_lost_and_siblings_are_only_concurrent_writes(ops in proptest::collection::vec(op(), 0..40)) {
        let (r, writes) = run(&ops);
        let all = r[0].merged(&r[1]).merged(&r[2]);
        let present: Vec<Dot> = all.siblings().iter().map(|s| s.dot).collect();
        for (d, _) in &writes {
            // Every write is either still a sibling or was superseded by a write whose
            // context had seen it.
            let superseded = writes.iter().any(|(_, ctx)| ctx.has_seen(d.replica, d.counter));
            prop_assert!(present.contains(d) || superseded, "lost {:?}", d);
            prop_assert!(all.clock().has_seen(d.replica, d.counter));
        }
        for a in &present {
            for b in &present {
                if a != b {
                    let ctx_b = &writes.iter().find(|(d, _)| d == b).expect("made").1;
                    prop_assert!(!ctx_b.has_seen(a.replica, a.counter), "{:?} saw {:?}", b, a);
                }
            }
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Versioned::decode(&bytes);
        let _ = decode_context(&bytes);
        let mut with_format = vec![1u8];
        with_format.extend(&bytes);
        let _ = Versioned::decode(&with_format);
        let _ = decode_context(&with_format);
    }
}

fn store(disk: &MemoryStorage) -> ReplicaStore<MemoryStorage> {
    ReplicaStore::open(disk.clone(), 42).expect("open")
}

fn put(s: &mut ReplicaStore<MemoryStorage>, key: &str, v: &str) -> Versioned {
    s.coordinate(
        key,
        VersionVector::new(),
        Some(v.as_bytes().to_vec()),
        3,
        1 << 20,
    )
    .expect("coordinate")
}

#[test]
fn the_hash_tree_does_not_depend_on_the_order_of_changes() {
    let (da, db) = (MemoryStorage::new(), MemoryStorage::new());
    let (mut a, mut b) = (store(&da), store(&db));
    let objects: Vec<(String, Versioned)> = (0..200)
        .map(|i| {
            let k = format!("key-{i}");
            let o = Versioned::of_write(&write(&VersionVector::new(), dot(1, i + 1), "v"));
            (k, o)
        })
        .collect();
    for (k, o) in &objects {
        a.apply(k, Update::Merge(o)).unwrap();
    }
    for (k, o) in objects.iter().rev() {
        b.apply(k, Update::Merge(o)).unwrap();
    }
    let ga: Vec<_> = a.groups().collect();
    let gb: Vec<_> = b.groups().collect();
    assert_eq!(ga, gb);
    assert_eq!(a.key_count(), 200);
    assert_eq!(ga.iter().map(|(_, _, c)| c).sum::<u64>(), 200);
    // One more version on one side changes exactly its group.
    let (k, o) = &objects[7];
    let mut o2 = o.clone();
    o2.apply_write(&write(&VersionVector::new(), dot(2, 1), "w"));
    b.apply(k, Update::Merge(&o2)).unwrap();
    let differing: Vec<_> = a.groups().zip(b.groups()).filter(|(x, y)| x != y).collect();
    assert_eq!(differing.len(), 1);
    // A reopened store reads the same tree from its leaves.
    drop(b);
    let b2 = store(&db);
    assert_eq!(b2.key_count(), 200);
    assert_eq!(b2.groups().count(), ga.len());
}

fn actors(o: &Versioned) -> Vec<(ReplicaId, u64)> {
    o.siblings()
        .iter()
        .map(|s| (s.dot.replica, s.dot.counter))
        .collect()
}

#[test]
fn a_key_keeps_its_actor_while_held_and_gets_a_fresh_one_after_it_was_not() {
    let disk = MemoryStorage::new();
    let mut s = store(&disk);
    let first = put(&mut s, "k", "a");
    let second = put(&mut s, "k", "b");
    let (a1, a2) = (actors(&first)[0], actors(&second)[1]);
    assert_eq!(a1.0, a2.0, "the same actor while the key is held");
    assert_eq!((a1.1, a2.1), (1, 2), "contiguous counters");
    // A restart keeps the key's actor (it is stored with the key).
    drop(s);
    let mut s = ReplicaStore::open(disk.clone(), 777).unwrap();
    let third = put(&mut s, "k", "c");
    assert_eq!(actors(&third)[2], (a1.0, 3));
    // Once the key was removed here, a write mints a new actor: its counter 1 cannot be
    // mistaken for the old actor's first write, which other replicas may still hold.
    let d = third.digest();
    assert!(s.apply("k", Update::RemoveIfDigest(d)).unwrap().changed);
    let again = put(&mut s, "k", "d");
    let (actor, counter) = actors(&again)[0];
    assert_ne!(actor, a1.0);
    assert_eq!(counter, 1);
    // A version merged in from elsewhere does not make this store continue an actor.
    let mut s2 = ReplicaStore::open(MemoryStorage::new(), 43).unwrap();
    s2.apply("k", Update::Merge(&again)).unwrap();
    let from_s2 = put(&mut s2, "k", "e");
    let new_actor = from_s2.siblings().last().unwrap().dot.replica;
    assert!(new_actor != actor && new_actor != a1.0);
    assert_eq!(from_s2.values().count(), 2, "concurrent with d: siblings");
}

#[test]
fn actors_are_not_reused_across_a_restart() {
    let disk = MemoryStorage::new();
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..3 {
        let mut s = ReplicaStore::open(disk.clone(), 5).unwrap();
        for i in 0..50 {
            let o = put(&mut s, &format!("r{round}-k{i}"), "v");
            assert!(seen.insert(o.siblings()[0].dot.replica), "reused");
        }
    }
}

#[test]
fn reap_and_remove_if_unchanged_remove_only_what_they_name() {
    let disk = MemoryStorage::new();
    let mut s = store(&disk);
    let o = put(&mut s, "k", "v");
    // Not a tombstone: a reap leaves it.
    assert!(!s.apply("k", Update::Reap(o.clock())).unwrap().changed);
    let t = s
        .coordinate("k", o.clock().clone(), None, 3, 1 << 20)
        .unwrap();
    assert!(t.is_deleted());
    assert_eq!(t.siblings().len(), 1);
    // A reap with an older clock leaves it; with its own clock removes it.
    assert!(!s.apply("k", Update::Reap(o.clock())).unwrap().changed);
    assert!(s.apply("k", Update::Reap(t.clock())).unwrap().changed);
    assert_eq!(s.get("k").unwrap(), None);
    assert_eq!(s.key_count(), 0);
    assert_eq!(s.groups().count(), 0);
    let first = put(&mut s, "m", "1");
    put(&mut s, "m", "2");
    assert!(
        !s.apply("m", Update::RemoveIfDigest(first.digest()))
            .unwrap()
            .changed
    );
    let digest = s.get("m").unwrap().unwrap().digest();
    assert!(
        s.apply("m", Update::RemoveIfDigest(digest))
            .unwrap()
            .changed
    );
    assert!(disk.is_empty(Table::Objects));
    assert!(disk.is_empty(Table::Buckets));
}

#[test]
fn writes_that_would_make_an_object_too_large_are_refused_merges_are_not() {
    let disk = MemoryStorage::new();
    let mut s = store(&disk);
    let big = "x".repeat(600);
    put(&mut s, "k", &big);
    let e = s
        .coordinate(
            "k",
            VersionVector::new(),
            Some(big.clone().into_bytes()),
            3,
            1000,
        )
        .unwrap_err();
    assert!(matches!(e, ApplyError::TooLarge { siblings: 2, .. }), "{e}");
    let other = Versioned::of_write(&write(&VersionVector::new(), dot(99, 1), &big));
    assert!(s.apply("k", Update::Merge(&other)).unwrap().changed);
}

#[test]
fn a_corrupt_record_is_an_error_not_a_panic() {
    let mut disk = MemoryStorage::new();
    disk.put(Table::Objects, &object_key("k"), b"\x02\x00garbage")
        .unwrap();
    let mut s = store(&disk);
    assert!(s.get("k").is_err());
    let mut disk2 = MemoryStorage::new();
    disk2.put(Table::Buckets, b"ab", b"short").unwrap();
    assert!(ReplicaStore::open(disk2, 1).is_err());
}

#[test]
fn segment_scans_page_through_a_segment_and_filter_by_n() {
    let disk = MemoryStorage::new();
    let mut s = store(&disk);
    let seg = |k: &str| crate::kv::ring::segment_of(crate::kv::key_hash(k));
    let keys: Vec<String> = (0..5000)
        .map(|i| format!("k{i}"))
        .filter(|k| seg(k) == 3)
        .collect();
    assert!(keys.len() >= 2, "keys in segment 3: {}", keys.len());
    for k in &keys {
        put(&mut s, k, "v");
    }
    let (first, cursor) = s.scan_segment(3, Some(3), None, 1, 1 << 20).unwrap();
    assert_eq!(first.len(), 1);
    let (rest, end) = s
        .scan_segment(3, Some(3), cursor.as_deref(), 10_000, 1 << 20)
        .unwrap();
    assert_eq!(end, None);
    assert_eq!(first.len() + rest.len(), keys.len());
    assert!(s
        .scan_segment(3, Some(5), None, 10, 1 << 20)
        .unwrap()
        .0
        .is_empty());
}

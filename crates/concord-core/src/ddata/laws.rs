//! The CRDT laws, property-tested for every type: merge is commutative, associative and
//! idempotent; and a delta is below the full state it stands for (delta ⊑ full state) —
//! three replicas run a random history of updates and deliveries twice in lockstep, once
//! shipping deltas (in causal order, as the Replicator does) and once merging the sender's
//! full state. After every step each replica's delta-built state is ⊑ its full-state-built
//! one (`delta.merged(full) == full`) and both show the same value (an ORSet add delta
//! carries only its new dot, so the delta-built state may keep an older dot the full state
//! drops — metadata, not value, as in Akka); in the end every replica converges.

use proptest::prelude::*;

use super::*;

/// One step of a history: replica `.0` applies an update, or replica `.0` receives every
/// delta it has not seen yet, in the order they were made.
#[derive(Clone, Debug)]
enum Step<Op> {
    Update(usize, Op),
    Deliver(usize),
}

const REPLICAS: usize = 3;

fn replica(i: usize) -> ReplicaId {
    ReplicaId(100 + i as u64)
}

fn steps<Op: std::fmt::Debug + Clone>(
    op: impl Strategy<Value = Op>,
) -> impl Strategy<Value = Vec<Step<Op>>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (0..REPLICAS, op).prop_map(|(r, o)| Step::Update(r, o)),
            1 => (0..REPLICAS).prop_map(Step::Deliver),
        ],
        0..40,
    )
}

/// Runs `history` with deltas and with full states; checks they agree at every step, that
/// everyone converges, and the merge laws on the states met on the way.
fn check<D>(
    init: impl Fn() -> D,
    apply: impl Fn(&mut D, ReplicaId, &dyn std::any::Any, i64),
    value: impl Fn(&D) -> String,
    history: &[Step<Box<dyn std::any::Any>>],
) -> Result<(), TestCaseError>
where
    D: DeltaReplicatedData + serde::Serialize + serde::de::DeserializeOwned,
    D::Delta: serde::Serialize + serde::de::DeserializeOwned,
{
    let mut by_delta: Vec<D> = (0..REPLICAS).map(|_| init()).collect();
    let mut by_state: Vec<D> = (0..REPLICAS).map(|_| init()).collect();
    for d in &mut by_delta {
        let _ = d.take_delta();
    }
    // (origin, delta, origin's full state after the update)
    let mut log: Vec<(usize, Option<D::Delta>, D)> = Vec::new();
    let mut seen = [0usize; REPLICAS];
    let mut states_met: Vec<D> = Vec::new();
    let deliver = |i: usize,
                   by_delta: &mut Vec<D>,
                   by_state: &mut Vec<D>,
                   log: &Vec<(usize, Option<D::Delta>, D)>,
                   seen: &mut [usize; REPLICAS]| {
        for (origin, delta, full) in &log[seen[i]..] {
            if *origin == i {
                continue;
            }
            if let Some(d) = delta {
                by_delta[i].merge_delta(d);
            }
            by_state[i].merge(full);
        }
        seen[i] = log.len();
    };
    for (t, step) in history.iter().enumerate() {
        match step {
            Step::Update(i, op) => {
                apply(&mut by_delta[*i], replica(*i), op.as_ref(), t as i64);
                apply(&mut by_state[*i], replica(*i), op.as_ref(), t as i64);
                let _ = by_state[*i].take_delta();
                let delta = by_delta[*i].take_delta();
                log.push((*i, delta, by_delta[*i].clone()));
            }
            Step::Deliver(i) => deliver(*i, &mut by_delta, &mut by_state, &log, &mut seen),
        }
        for i in 0..REPLICAS {
            prop_assert_eq!(
                &by_delta[i].merged(&by_state[i]),
                &by_state[i],
                "replica {} after step {}: the delta-built state is not below the full one",
                i,
                t
            );
            prop_assert_eq!(
                value(&by_delta[i]),
                value(&by_state[i]),
                "replica {} after step {}: deltas and full states show different values",
                i,
                t
            );
        }
        states_met.push(by_delta[t % REPLICAS].clone());
    }
    for i in 0..REPLICAS {
        deliver(i, &mut by_delta, &mut by_state, &log, &mut seen);
    }
    // A last exchange of full states (anti-entropy) to include what was delivered earlier
    // than later updates.
    let all = by_state
        .iter()
        .chain(by_delta.iter())
        .skip(1)
        .fold(by_state[0].clone(), |acc, s| acc.merged(s));
    for i in 0..REPLICAS {
        // Strong eventual consistency: every replica got every update, so all show the
        // same value — with deltas alone, before any full-state exchange.
        prop_assert_eq!(
            value(&by_delta[i]),
            value(&by_delta[0]),
            "replicas {} and 0 agree",
            i
        );
        prop_assert_eq!(&by_state[i], &by_state[0], "full states {} and 0 agree", i);
        prop_assert_eq!(&by_delta[i].merged(&all), &all, "replica {} converges", i);
        prop_assert_eq!(
            value(&by_delta[i]),
            value(&all),
            "replica {} shows the value",
            i
        );
    }
    // Values and deltas survive their encoding.
    for d in &by_delta {
        let bytes = postcard::to_stdvec(d).expect("encodes");
        prop_assert_eq!(&postcard::from_bytes::<D>(&bytes).expect("decodes"), d);
    }
    for (_, delta, _) in &log {
        if let Some(delta) = delta {
            let bytes = postcard::to_stdvec(delta).expect("encodes");
            prop_assert_eq!(
                &postcard::from_bytes::<D::Delta>(&bytes).expect("decodes"),
                delta
            );
        }
    }
    // The laws, on states met on the way.
    let n = states_met.len();
    if n >= 3 {
        let (a, b, c) = (&states_met[0], &states_met[n / 2], &states_met[n - 1]);
        prop_assert_eq!(a.merged(b), b.merged(a), "commutative");
        prop_assert_eq!(a.merged(b).merged(c), a.merged(&b.merged(c)), "associative");
        prop_assert_eq!(a.merged(a), a.clone(), "idempotent");
        prop_assert_eq!(a.merged(b).merged(b), a.merged(b), "idempotent with b");
    }
    Ok(())
}

fn boxed<Op: 'static>(h: Vec<Step<Op>>) -> Vec<Step<Box<dyn std::any::Any>>> {
    h.into_iter()
        .map(|s| match s {
            Step::Update(i, o) => Step::Update(i, Box::new(o) as Box<dyn std::any::Any>),
            Step::Deliver(i) => Step::Deliver(i),
        })
        .collect()
}

fn op<T: 'static>(o: &dyn std::any::Any) -> &T {
    o.downcast_ref::<T>().expect("the op type of the history")
}

#[derive(Clone, Debug)]
enum SetOp {
    Add(u8),
    Remove(u8),
    Clear,
}

#[derive(Clone, Debug)]
enum MapOp {
    Put(u8, u8),
    Remove(u8),
}

#[derive(Clone, Debug)]
enum MultiOp {
    Add(u8, u8),
    RemoveBinding(u8, u8),
    Remove(u8),
    Put(u8, Vec<u8>),
}

fn set_op() -> impl Strategy<Value = SetOp> {
    prop_oneof![
        4 => (0u8..6).prop_map(SetOp::Add),
        3 => (0u8..6).prop_map(SetOp::Remove),
        1 => Just(SetOp::Clear),
    ]
}

fn map_op() -> impl Strategy<Value = MapOp> {
    prop_oneof![
        3 => (0u8..4, any::<u8>()).prop_map(|(k, v)| MapOp::Put(k, v)),
        1 => (0u8..4).prop_map(MapOp::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn gcounter(h in steps(0u64..5)) {
        check(GCounter::new, |c, r, o, _| c.increment(r, *op::<u64>(o)), |c| c.value().to_string(), &boxed(h))?;
    }

    #[test]
    fn pncounter(h in steps(-5i64..5)) {
        check(PNCounter::new, |c, r, o, _| c.increment(r, *op::<i64>(o)), |c| c.value().to_string(), &boxed(h))?;
    }

    #[test]
    fn gset(h in steps(0u8..8)) {
        check(GSet::<u8>::new, |s, _, o, _| s.add(*op::<u8>(o)), |s| format!("{:?}", s.elements().collect::<Vec<_>>()), &boxed(h))?;
    }

    #[test]
    fn flag(h in steps(Just(()))) {
        check(Flag::new, |f, _, _, _| f.switch_on(), |f| f.enabled().to_string(), &boxed(h))?;
    }

    #[test]
    fn lww_register(h in steps(any::<u8>())) {
        check(
            || LWWRegister::new(ReplicaId(0), 0u8, 0),
            |reg, r, o, t| reg.set(r, *op::<u8>(o), t),
            |reg| reg.value().to_string(),
            &boxed(h),
        )?;
    }

    #[test]
    fn orset(h in steps(set_op())) {
        check(ORSet::<u8>::new, |s, r, o, _| match op::<SetOp>(o) {
            SetOp::Add(e) => s.add(r, *e),
            SetOp::Remove(e) => s.remove(r, e),
            SetOp::Clear => s.clear(r),
        }, |s| format!("{:?}", s.elements().collect::<Vec<_>>()), &boxed(h))?;
    }

    #[test]
    fn lww_map(h in steps(map_op())) {
        check(LWWMap::<u8, u8>::new, |m, r, o, t| match op::<MapOp>(o) {
            MapOp::Put(k, v) => m.put(r, *k, *v, t),
            MapOp::Remove(k) => m.remove(r, k),
        }, |m| format!("{:?}", m.entries().collect::<Vec<_>>()), &boxed(h))?;
    }

    #[test]
    fn pncounter_map(h in steps(map_op())) {
        check(PNCounterMap::<u8>::new, |m, r, o, _| match op::<MapOp>(o) {
            MapOp::Put(k, v) => m.increment(r, *k, i64::from(*v) - 128),
            MapOp::Remove(k) => m.remove(r, k),
        }, |m| format!("{:?}", m.entries().collect::<Vec<_>>()), &boxed(h))?;
    }

    #[test]
    fn ormultimap(h in steps(prop_oneof![
        3 => (0u8..3, 0u8..4).prop_map(|(k, v)| MultiOp::Add(k, v)),
        2 => (0u8..3, 0u8..4).prop_map(|(k, v)| MultiOp::RemoveBinding(k, v)),
        1 => (0u8..3).prop_map(MultiOp::Remove),
        1 => (0u8..3, proptest::collection::vec(0u8..4, 0..3)).prop_map(|(k, v)| MultiOp::Put(k, v)),
    ])) {
        check(ORMultiMap::<u8, u8>::new, |m, r, o, _| match op::<MultiOp>(o) {
            MultiOp::Add(k, v) => m.add_binding(r, *k, *v),
            MultiOp::RemoveBinding(k, v) => m.remove_binding(r, k, v),
            MultiOp::Remove(k) => m.remove(r, k),
            MultiOp::Put(k, vs) => m.put(r, *k, vs.iter().copied()),
        }, |m| format!("{:?}", m.keys().iter().map(|k| (*k, m.get(k))).collect::<Vec<_>>()), &boxed(h))?;
    }
}

#[test]
fn orset_is_add_wins_and_removes_only_what_it_saw() {
    let (a, b) = (ReplicaId(1), ReplicaId(2));
    let mut x = ORSet::new();
    x.add(a, "e");
    let mut y = x.clone();
    // Concurrently: x removes e, y adds e again.
    x.remove(a, &"e");
    y.add(b, "e");
    assert!(x.merged(&y).contains(&"e"), "the concurrent add wins");
    // A remove of what was seen wins over the older add.
    let mut z = y.clone();
    z.remove(b, &"e");
    assert!(!y.merged(&z).contains(&"e"));
    assert!(!z.merged(&y).contains(&"e"));
}

#[test]
fn counters_saturate_instead_of_wrapping() {
    let mut c = GCounter::new();
    c.increment(ReplicaId(1), u64::MAX);
    c.increment(ReplicaId(1), 5);
    c.increment(ReplicaId(2), u64::MAX);
    assert_eq!(c.value(), u64::MAX);
    let mut p = PNCounter::new();
    p.increment(ReplicaId(1), i64::MIN);
    assert_eq!(p.value(), i128::from(i64::MIN));
}

#[test]
fn pruning_collapses_a_removed_replica_into_a_live_one_and_cleanup_drops_late_data() {
    let (a, b, gone) = (ReplicaId(1), ReplicaId(2), ReplicaId(3));
    let mut c = GCounter::new();
    c.increment(a, 2);
    c.increment(gone, 5);
    let late = c.clone();
    c.prune(gone, b);
    assert_eq!(c.value(), 7, "the count moved, not lost");
    assert!(!c.needs_pruning_from(gone));
    // Data from before the pruning arriving later would count twice: cleanup drops it.
    let mut l = late;
    l.prune_cleanup(gone);
    c.merge(&l);
    assert_eq!(c.value(), 7);

    let mut s = ORSet::new();
    s.add(gone, "x");
    s.add(a, "y");
    s.prune(gone, b);
    assert!(s.contains(&"x") && s.contains(&"y"));
    assert!(!s.needs_pruning_from(gone));
    assert!(s.dots(&"x").unwrap().has_replica(b));
}

#[test]
fn ormap_remove_takes_away_exactly_the_values_it_saw() {
    let (a, b) = (ReplicaId(1), ReplicaId(2));
    let mut x = PNCounterMap::new();
    let mut y = PNCounterMap::new();
    y.increment(b, "k", 5);
    x.increment(a, "k", 3);
    // y learns x's write, then x removes the key without having seen y's.
    y.merge_delta(&x.clone().take_delta().unwrap());
    x.remove(a, &"k");
    let d = x.take_delta().unwrap();
    y.merge_delta(&d);
    // y's own write survives (add-wins), x's removed count does not come back.
    assert_eq!(y.get(&"k"), Some(5));
    x.merge(&y);
    assert_eq!(x.get(&"k"), Some(5));
    assert_eq!(x, y);
}

#[test]
fn ormap_pruning_moves_a_removed_replicas_counts_and_dots() {
    let (a, b, gone) = (ReplicaId(1), ReplicaId(2), ReplicaId(3));
    let mut m = PNCounterMap::new();
    m.increment(a, "x", 2);
    let mut g = m.clone();
    g.increment(gone, "x", 5);
    g.increment(gone, "y", 1);
    m.merge(&g);
    let late = g.clone();
    assert!(m.needs_pruning_from(gone));
    m.prune(gone, b);
    assert!(!m.needs_pruning_from(gone), "{m:?}");
    assert_eq!((m.get(&"x"), m.get(&"y")), (Some(7), Some(1)));
    let mut l = late;
    l.prune_cleanup(gone);
    m.merge(&l);
    assert_eq!((m.get(&"x"), m.get(&"y")), (Some(7), Some(1)));
}

/// What a replica that applies the pruning node's deltas ends with, after dropping the
/// removed replica's entries (the marker comes with the delta): the pruned value, no count
/// twice, no element lost.
fn prune_by_delta<D>(mut with_removed: D, removed: ReplicaId, into: ReplicaId) -> (D, D)
where
    D: DeltaReplicatedData + RemovedNodePruning,
{
    let _ = with_removed.take_delta();
    let mut pruner = with_removed.clone();
    pruner.prune(removed, into);
    let delta = pruner.take_delta();
    let mut other = with_removed;
    other.prune_cleanup(removed);
    if let Some(d) = delta {
        other.merge_delta(&d);
    }
    (pruner, other)
}

#[test]
fn pruning_deltas_applied_after_cleanup_give_the_pruned_value() {
    let (a, c, gone) = (ReplicaId(1), ReplicaId(2), ReplicaId(3));
    let mut g = GCounter::new();
    g.increment(a, 2);
    g.increment(gone, 5);
    let (p, o) = prune_by_delta(g, gone, c);
    assert_eq!((p.value(), o.value()), (7, 7));

    let mut s = ORSet::new();
    s.add(gone, "x");
    s.add(a, "y");
    s.add(gone, "y");
    let (p, o) = prune_by_delta(s, gone, c);
    assert_eq!(
        p.elements().collect::<Vec<_>>(),
        o.elements().collect::<Vec<_>>()
    );
    assert_eq!(o.elements().count(), 2);
    // Later adds by the pruning replica do not hide the re-added elements.
    let mut later = p.clone();
    later.add(c, "z");
    let mut o2 = o.clone();
    o2.merge_delta(&later.take_delta().unwrap());
    assert_eq!(o2.merged(&later).elements().count(), 3);

    let mut m = PNCounterMap::new();
    m.increment(a, "k", 1);
    m.increment(gone, "k", 4);
    m.increment(gone, "j", -2);
    let (p, o) = prune_by_delta(m, gone, c);
    assert_eq!((o.get(&"k"), o.get(&"j")), (Some(5), Some(-2)));
    assert_eq!(
        p.entries().collect::<Vec<_>>(),
        o.entries().collect::<Vec<_>>()
    );
}

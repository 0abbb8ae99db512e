//! Tests of [`leader_step`]: completions, dead hosts, draining nodes, scaling wishes and
//! paths the leader does not know.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::member::MemberStatus::{Leaving, Up};
use crate::test_views::{ua, view};

fn path(p: &str) -> PartitionPath {
    PartitionPath::new(p).unwrap()
}

fn offers(
    nodes: &[u16],
    paths: &[&str],
    draining: &[u16],
) -> BTreeMap<crate::address::UniqueAddress, NodeOffer> {
    nodes
        .iter()
        .map(|i| {
            (
                ua(*i),
                NodeOffer {
                    paths: paths.iter().map(|p| path(p)).collect(),
                    draining: draining.contains(i),
                    digest: (0, None),
                },
            )
        })
        .collect()
}

fn step(
    state: &ServicesState,
    v: &crate::membership_view::MembershipView,
    policies: &BTreeMap<PartitionPath, InstancePolicy>,
    offers: &BTreeMap<crate::address::UniqueAddress, NodeOffer>,
    completed: &BTreeSet<PartitionChange>,
    scaling: &BTreeMap<PartitionPath, u32>,
) -> Option<ServicesState> {
    leader_step(
        state,
        &ua(0),
        &LeaderInput {
            view: v,
            policies,
            offers,
            completed,
            scaling,
            load: None,
        },
    )
}

#[test]
fn placement_then_a_draining_host_hands_off_and_completion_updates_the_table() {
    let v = view(0, &[(0, Up), (1, Up), (2, Up)]);
    let policies: BTreeMap<_, _> = [(path("a"), InstancePolicy::Fixed(1))].into();
    let none = BTreeSet::new();
    let no_scaling = BTreeMap::new();
    let s1 = step(
        &ServicesState::default(),
        &v,
        &policies,
        &offers(&[0, 1, 2], &["a"], &[]),
        &none,
        &no_scaling,
    )
    .unwrap();
    assert_eq!(s1.version, 1);
    assert_eq!(s1.writer, Some(ua(0)));
    // A new instance is a change without a previous host; the table gets it on completion.
    assert!(s1.table.is_empty());
    assert_eq!(s1.pending.len(), 1);
    assert!(s1.pending[0].from.is_none());
    let host = s1.pending[0].to.clone();
    let done: BTreeSet<_> = s1.pending.iter().cloned().collect();
    let s1 = step(
        &s1,
        &v,
        &policies,
        &offers(&[0, 1, 2], &["a"], &[]),
        &done,
        &no_scaling,
    )
    .unwrap();
    assert_eq!(
        s1.table.instances(&path("a")).unwrap(),
        std::slice::from_ref(&host)
    );
    assert!(s1.pending.is_empty());
    // Nothing new: no write.
    assert!(step(
        &s1,
        &v,
        &policies,
        &offers(&[0, 1, 2], &["a"], &[]),
        &none,
        &no_scaling
    )
    .is_none());
    // The host drains: a change from it, and it stays in the table until complete.
    let h = (0..3).find(|i| ua(*i) == host).unwrap();
    let s2 = step(
        &s1,
        &v,
        &policies,
        &offers(&[0, 1, 2], &["a"], &[h]),
        &none,
        &no_scaling,
    )
    .unwrap();
    assert_eq!(s2.pending.len(), 1);
    let change = s2.pending[0].clone();
    assert_eq!(change.from.as_ref(), Some(&host));
    assert_eq!(
        s2.table.instances(&path("a")).unwrap(),
        std::slice::from_ref(&host)
    );
    // Completed: the new host replaces it.
    let done: BTreeSet<_> = [change.clone()].into();
    let s3 = step(
        &s2,
        &v,
        &policies,
        &offers(&[0, 1, 2], &["a"], &[h]),
        &done,
        &no_scaling,
    )
    .unwrap();
    assert!(s3.pending.is_empty());
    assert_eq!(
        s3.table.instances(&path("a")).unwrap(),
        std::slice::from_ref(&change.to)
    );
    assert_eq!(s3.version, 4);
}

#[test]
fn dead_hosts_leave_the_table_and_changes() {
    let policies: BTreeMap<_, _> = [(path("a"), InstancePolicy::Fixed(1))].into();
    let state = ServicesState {
        version: 5,
        writer: Some(ua(0)),
        table: [(path("a"), vec![ua(1)])].into_iter().collect(),
        pending: vec![PartitionChange::awaiting(path("a"), Some(ua(1)), ua(2))],
    };
    // ua(1) is gone (removed): the change loses its previous host.
    let v = view(0, &[(0, Up), (2, Up)]);
    let s = step(
        &state,
        &v,
        &policies,
        &offers(&[0, 2], &["a"], &[]),
        &BTreeSet::new(),
        &BTreeMap::new(),
    )
    .unwrap();
    assert!(s.table.instances(&path("a")).is_none());
    assert_eq!(
        s.pending,
        vec![PartitionChange::awaiting(path("a"), None, ua(2))]
    );
    // The new host is gone too: the change is dropped and the path placed afresh.
    let v = view(0, &[(0, Up)]);
    let s = step(
        &state,
        &v,
        &policies,
        &offers(&[0], &["a"], &[]),
        &BTreeSet::new(),
        &BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(
        s.pending,
        vec![PartitionChange::awaiting(path("a"), None, ua(0))]
    );
}

#[test]
fn a_leaving_member_hands_off_and_a_scaling_wish_adds_instances() {
    let ft = InstancePolicy::FaultTolerance(
        FaultTolerance::tolerate(0).with_scaling(ScalingBounds::new(1, 3).unwrap()),
    );
    let policies: BTreeMap<_, _> = [(path("s"), ft)].into();
    let v = view(0, &[(0, Up), (1, Up), (2, Up), (3, Up)]);
    let o = offers(&[0, 1, 2, 3], &["s"], &[]);
    let s1 = step(
        &ServicesState::default(),
        &v,
        &policies,
        &o,
        &BTreeSet::new(),
        &BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(s1.pending.len(), 1, "f + 1 = 1 instance");
    let wish: BTreeMap<_, _> = [(path("s"), 3)].into();
    let s2 = step(&s1, &v, &policies, &o, &BTreeSet::new(), &wish);
    // A path with a pending change is left alone until it completes.
    assert!(s2.is_none());
    let done: BTreeSet<_> = s1.pending.iter().cloned().collect();
    let s2 = step(&s1, &v, &policies, &o, &done, &wish).unwrap();
    assert_eq!(s2.table.instances(&path("s")).unwrap().len(), 1);
    assert_eq!(s2.pending.len(), 2, "two more instances for the wish of 3");
    // A Leaving member is off the ring but live: its instance is handed off from it.
    let host = s2.table.instances(&path("s")).unwrap()[0].clone();
    let h = (0..4).find(|i| ua(*i) == host).unwrap();
    let statuses: Vec<_> = (0..4)
        .map(|i| (i, if i == h { Leaving } else { Up }))
        .collect();
    let v2 = view(0, &statuses);
    let all_done: BTreeSet<_> = s2.pending.iter().cloned().collect();
    let s3 = step(&s2, &v2, &policies, &o, &all_done, &wish).unwrap();
    assert!(
        s3.pending.iter().any(|c| c.from.as_ref() == Some(&host)),
        "{:?}",
        s3.pending
    );
}

#[test]
fn paths_the_leader_does_not_know_stay_while_offered() {
    let policies = BTreeMap::new();
    let state = ServicesState {
        version: 1,
        writer: Some(ua(1)),
        table: [(path("new"), vec![ua(1)])].into_iter().collect(),
        pending: Vec::new(),
    };
    let v = view(0, &[(0, Up), (1, Up)]);
    // Node 1 (a newer version) offers it: kept as it is.
    let mut o = offers(&[0], &[], &[]);
    o.extend(offers(&[1], &["new"], &[]));
    assert!(step(
        &state,
        &v,
        &policies,
        &o,
        &BTreeSet::new(),
        &BTreeMap::new()
    )
    .is_none());
    // Nobody offers it: removed.
    let o = offers(&[0, 1], &[], &[]);
    let s = step(
        &state,
        &v,
        &policies,
        &o,
        &BTreeSet::new(),
        &BTreeMap::new(),
    )
    .unwrap();
    assert!(s.table.is_empty());
}

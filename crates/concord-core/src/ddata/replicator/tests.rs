//! Unit tests of the replicator: a handful of replicators wired directly to each other,
//! with messages to crashed nodes dropped. The simulator runs the same machine under
//! random faults (`concord-sim`).

use std::collections::BTreeSet;

use super::*;
use crate::address::Address;
use crate::ddata::{GCounter, ORSet, PNCounter};
use crate::gossip::Gossip;
use crate::member::Member;
use crate::membership_state::MembershipState;

fn ua(i: usize) -> UniqueAddress {
    UniqueAddress::new(
        Address::new("s", "10.0.0.1", 2550 + i as u16),
        1000 + i as u64,
    )
}

struct Net {
    nodes: Vec<Replicator>,
    members: Vec<usize>,
    crashed: BTreeSet<usize>,
    now: u64,
    events: Vec<Vec<ReplicatorEvent>>,
    next_request: u64,
    /// Drop delta propagation messages (to test gossip alone).
    drop_deltas: bool,
}

impl Net {
    fn new(n: usize, settings: ReplicatorSettings) -> Net {
        let nodes = (0..n)
            .map(|i| {
                Replicator::new(
                    settings.clone(),
                    ua(i),
                    DataTypeRegistry::default(),
                    i as u64,
                    0,
                )
            })
            .collect();
        let mut net = Net {
            nodes,
            members: (0..n).collect(),
            crashed: BTreeSet::new(),
            now: 0,
            events: (0..n).map(|_| Vec::new()).collect(),
            next_request: 1,
            drop_deltas: false,
        };
        net.publish();
        net
    }

    fn view(&self, me: usize) -> MembershipView {
        let mut g = Gossip::empty();
        for (up, i) in self.members.iter().enumerate() {
            let m = Member::joining(ua(*i), BTreeSet::new(), "1").with_up(up as u32 + 1);
            g.members.insert(ua(*i), m);
        }
        let mut v = MembershipView::of(&MembershipState::new(g, ua(me)), 1);
        for c in &self.crashed {
            if self.members.contains(c) {
                v.unreachable.insert(ua(*c), [ua(me)].into());
            }
        }
        v
    }

    fn publish(&mut self) {
        for i in 0..self.nodes.len() {
            let v = self.view(i);
            self.nodes[i].handle_membership(self.now, &v, MembershipChange::CurrentClusterState);
        }
    }

    fn index(a: &Address) -> usize {
        (a.port - 2550) as usize
    }

    /// Delivers messages until none are left.
    fn flush(&mut self) {
        loop {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                while let Some(e) = self.nodes[i].poll_event() {
                    self.events[i].push(e);
                }
                while let Some(t) = self.nodes[i].poll_transmit() {
                    moved = true;
                    let to = Self::index(&t.to);
                    if self.crashed.contains(&i) || self.crashed.contains(&to) {
                        continue;
                    }
                    if self.drop_deltas
                        && matches!(t.message, ReplicatorMessage::DeltaPropagation { .. })
                    {
                        continue;
                    }
                    let now = self.now;
                    self.nodes[to].handle_message(now, &ua(i), t.message);
                }
            }
            if !moved {
                break;
            }
        }
        for i in 0..self.nodes.len() {
            while let Some(e) = self.nodes[i].poll_event() {
                self.events[i].push(e);
            }
        }
    }

    /// Advances time by `ms` in 100 ms steps.
    fn run(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += 100;
            for i in 0..self.nodes.len() {
                if !self.crashed.contains(&i) {
                    let now = self.now;
                    self.nodes[i].handle_timeout(now);
                }
            }
            self.flush();
        }
    }

    fn request(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    fn incr(&mut self, i: usize, key: &str, n: i64, c: WriteConsistency) -> RequestId {
        let r = self.request();
        let now = self.now;
        let me = self.nodes[i].replica();
        self.nodes[i].update(
            now,
            r,
            &Key::<PNCounter>::new(key).unwrap(),
            c,
            PNCounter::new,
            |v| v.increment(me, n),
        );
        self.flush();
        r
    }

    fn counter(&self, i: usize, key: &str) -> Option<i128> {
        self.nodes[i]
            .local_typed(&Key::<PNCounter>::new(key).unwrap())
            .map(PNCounter::value)
    }

    fn update_result(&self, i: usize, r: RequestId) -> Option<UpdateResult> {
        self.events[i].iter().find_map(|e| match e {
            ReplicatorEvent::UpdateResponse {
                request, result, ..
            } if *request == r => Some(result.clone()),
            _ => None,
        })
    }

    fn get(&mut self, i: usize, key: &str, c: ReadConsistency) -> RequestId {
        let r = self.request();
        let now = self.now;
        self.nodes[i].get(now, r, key, c);
        self.flush();
        r
    }

    fn get_result(&self, i: usize, r: RequestId) -> Option<GetResult> {
        self.events[i].iter().find_map(|e| match e {
            ReplicatorEvent::GetResponse {
                request, result, ..
            } if *request == r => Some(result.clone()),
            _ => None,
        })
    }
}

fn counter_of(r: &GetResult) -> Option<i128> {
    match r {
        GetResult::Success(v) => v.as_any().downcast_ref::<PNCounter>().map(PNCounter::value),
        _ => None,
    }
}

#[test]
fn local_updates_reach_every_replica_by_deltas() {
    let mut net = Net::new(5, ReplicatorSettings::default());
    for i in 0..5 {
        net.incr(i, "c", 1 + i as i64, WriteConsistency::Local);
    }
    net.run(1_000);
    for i in 0..5 {
        assert_eq!(net.counter(i, "c"), Some(15), "replica {i}");
    }
    assert!(net.nodes[0].stats().deltas_sent > 0);
    assert_eq!(
        net.nodes[0].stats().gossip_entries_sent,
        0,
        "deltas did it, not gossip"
    );
}

#[test]
fn gossip_alone_converges_when_deltas_are_lost() {
    let mut net = Net::new(4, ReplicatorSettings::default());
    net.drop_deltas = true;
    net.incr(0, "a", 3, WriteConsistency::Local);
    net.incr(3, "b", -2, WriteConsistency::Local);
    net.run(30_000);
    for i in 0..4 {
        assert_eq!(net.counter(i, "a"), Some(3), "replica {i}");
        assert_eq!(net.counter(i, "b"), Some(-2), "replica {i}");
    }
}

#[test]
fn write_majority_then_read_majority_sees_the_write_with_a_minority_crashed() {
    let mut net = Net::new(5, ReplicatorSettings::default());
    net.crashed.extend([3, 4]);
    net.publish();
    let w = net.incr(0, "k", 7, WriteConsistency::majority(3_000));
    assert_eq!(net.update_result(0, w), Some(UpdateResult::Success));
    // Read from another node before any gossip: the majority overlaps the write's.
    let r = net.get(2, "k", ReadConsistency::majority(3_000));
    assert_eq!(net.get_result(2, r).as_ref().and_then(counter_of), Some(7));
}

#[test]
fn write_times_out_without_a_majority_but_the_local_value_is_updated() {
    let mut net = Net::new(5, ReplicatorSettings::default());
    net.crashed.extend([2, 3, 4]);
    net.publish();
    let w = net.incr(0, "k", 1, WriteConsistency::majority(1_000));
    assert_eq!(net.update_result(0, w), None, "waiting");
    net.run(1_100);
    assert!(matches!(
        net.update_result(0, w),
        Some(UpdateResult::Timeout(_))
    ));
    assert_eq!(net.counter(0, "k"), Some(1));
    assert_eq!(net.nodes[0].stats().write_timeouts, 1);
    let all = WriteConsistency::All { timeout_ms: 500 };
    let w = net.incr(0, "k", 1, all);
    net.run(600);
    assert!(matches!(
        net.update_result(0, w),
        Some(UpdateResult::Timeout(_))
    ));
    let r = net.get(
        0,
        "k",
        ReadConsistency::From {
            n: 9,
            timeout_ms: 100,
        },
    );
    assert!(
        matches!(net.get_result(0, r), Some(GetResult::Failure(_))),
        "9 of 5 cannot be reached"
    );
}

#[test]
fn read_majority_repairs_every_replica_that_answered_behind() {
    let settings = ReplicatorSettings {
        delta_crdt_enabled: false,
        gossip_interval_ms: 1_000_000,
        prefer_oldest: true,
        ..Default::default()
    };
    let mut net = Net::new(3, settings);
    // Only node 1 and node 2 have different parts; node 0 has nothing.
    net.incr(1, "k", 5, WriteConsistency::Local);
    net.incr(2, "k", 2, WriteConsistency::Local);
    let r = net.get(0, "k", ReadConsistency::All { timeout_ms: 1_000 });
    assert_eq!(net.get_result(0, r).as_ref().and_then(counter_of), Some(7));
    net.flush();
    for i in 0..3 {
        assert_eq!(net.counter(i, "k"), Some(7), "replica {i} repaired");
    }
    assert_eq!(net.nodes[0].stats().read_repairs, 2);
}

#[test]
fn a_delta_gap_is_filled_with_the_full_state() {
    let mut net = Net::new(2, ReplicatorSettings::default());
    net.incr(0, "k", 1, WriteConsistency::Local);
    net.run(400);
    assert_eq!(net.counter(1, "k"), Some(1));
    // The next delta is lost; the one after shows a gap.
    net.drop_deltas = true;
    net.incr(0, "k", 1, WriteConsistency::Local);
    net.run(400);
    net.drop_deltas = false;
    net.incr(0, "k", 1, WriteConsistency::Local);
    net.run(400);
    assert_eq!(net.counter(1, "k"), Some(3));
    assert!(net.nodes[1].stats().delta_nacks >= 1);
}

#[test]
fn delete_leaves_a_tombstone_everywhere_and_updates_then_fail() {
    let mut net = Net::new(3, ReplicatorSettings::default());
    net.incr(0, "k", 1, WriteConsistency::All { timeout_ms: 1_000 });
    let r = net.request();
    let now = net.now;
    net.nodes[1].delete(now, r, "k", WriteConsistency::majority(1_000));
    net.flush();
    assert!(net.events[1].iter().any(|e| matches!(
        e,
        ReplicatorEvent::DeleteResponse {
            result: DeleteResult::Success,
            ..
        }
    )));
    net.run(5_000);
    for i in 0..3 {
        assert!(
            net.nodes[i].local_value("k").unwrap().is_deleted(),
            "replica {i}"
        );
    }
    let w = net.incr(2, "k", 1, WriteConsistency::Local);
    assert_eq!(net.update_result(2, w), Some(UpdateResult::Deleted));
    let g = net.get(0, "k", ReadConsistency::Local);
    assert!(matches!(net.get_result(0, g), Some(GetResult::Deleted)));
}

#[test]
fn subscribers_hear_changes_at_most_once_per_interval() {
    let mut net = Net::new(2, ReplicatorSettings::default());
    net.nodes[1].subscribe("k");
    for _ in 0..5 {
        net.incr(0, "k", 1, WriteConsistency::Local);
    }
    net.run(2_000);
    let changes: Vec<i128> = net.events[1]
        .iter()
        .filter_map(|e| match e {
            ReplicatorEvent::Changed { key, value } if key == "k" => value
                .as_any()
                .downcast_ref::<PNCounter>()
                .map(PNCounter::value),
            _ => None,
        })
        .collect();
    assert_eq!(changes.last(), Some(&5));
    assert!(changes.len() <= 2, "batched: {changes:?}");
}

#[test]
fn durable_keys_are_stored_on_every_change_and_load_back() {
    let settings = ReplicatorSettings {
        durable_keys: vec!["d-*".into()],
        ..Default::default()
    };
    let mut net = Net::new(2, settings.clone());
    let w = net.incr(0, "d-1", 4, WriteConsistency::Local);
    net.incr(0, "other", 1, WriteConsistency::Local);
    let stores: Vec<(usize, ReplicatorEvent)> = net.events[0]
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, ReplicatorEvent::Store { .. }))
        .map(|(i, e)| (i, e.clone()))
        .collect();
    assert_eq!(stores.len(), 1, "only the durable key");
    let update_at = net.events[0]
        .iter()
        .position(|e| matches!(e, ReplicatorEvent::UpdateResponse { request, .. } if *request == w))
        .unwrap();
    assert!(
        stores[0].0 < update_at,
        "stored before the update is answered"
    );
    let ReplicatorEvent::Store { key, envelope } = &stores[0].1 else {
        unreachable!()
    };
    // The replica that received it by delta stores it too.
    net.run(500);
    assert!(net.events[1]
        .iter()
        .any(|e| matches!(e, ReplicatorEvent::Store { key, .. } if key == "d-1")));
    let mut restarted = Replicator::new(settings, ua(7), DataTypeRegistry::default(), 7, 0);
    restarted.load_durable(key, envelope).unwrap();
    assert_eq!(
        restarted
            .local_typed(&Key::<PNCounter>::new("d-1").unwrap())
            .map(PNCounter::value),
        Some(4)
    );
}

#[test]
fn bad_requests_and_bad_data_change_nothing() {
    let settings = ReplicatorSettings {
        max_keys: 2,
        ..Default::default()
    };
    let mut net = Net::new(2, settings);
    net.incr(0, "a", 1, WriteConsistency::Local);
    // Another type under the same key.
    let r = net.request();
    let now = net.now;
    net.nodes[0].update(
        now,
        r,
        &Key::<GCounter>::new("a").unwrap(),
        WriteConsistency::Local,
        GCounter::new,
        |c| c.increment(ReplicaId(1), 1),
    );
    net.flush();
    assert!(matches!(
        net.update_result(0, r),
        Some(UpdateResult::Failure(_))
    ));
    net.incr(0, "b", 1, WriteConsistency::Local);
    let r = net.incr(0, "c", 1, WriteConsistency::Local);
    assert!(
        matches!(net.update_result(0, r), Some(UpdateResult::Failure(_))),
        "max-keys"
    );
    // A panicking modify is a ModifyFailure; the node carries on.
    let r = net.request();
    net.nodes[0].update(
        now,
        r,
        &Key::<PNCounter>::new("b").unwrap(),
        WriteConsistency::Local,
        PNCounter::new,
        |_| panic!("user bug"),
    );
    net.flush();
    assert!(
        matches!(net.update_result(0, r), Some(UpdateResult::ModifyFailure(m)) if m == "user bug")
    );
    assert_eq!(net.counter(0, "b"), Some(1));
    let r = net.request();
    net.nodes[0].update(
        now,
        r,
        &Key::<ORSet<String>>::new("x").unwrap(),
        WriteConsistency::Local,
        ORSet::new,
        |_| {},
    );
    net.flush();
    assert!(net.nodes[0].local_value("x").is_none(), "refused: max-keys");
    // Garbage from a peer: unknown type, undecodable bytes, wrong type.
    let bad = |t: DataTypeId, data: Vec<u8>| SerializedEnvelope {
        data_type: t,
        data: Some(data),
        pruning: vec![],
        delta_versions: vec![],
    };
    let before = net.counter(0, "a");
    for env in [
        bad(DataTypeId(42), vec![1, 2, 3]),
        bad(DataTypeId::of::<PNCounter>(), vec![0xff; 9]),
        bad(DataTypeId::of::<GCounter>(), GCounter::new().encode()),
    ] {
        net.nodes[0].handle_message(
            0,
            &ua(1),
            ReplicatorMessage::Write {
                request: Some(9),
                key: "a".into(),
                envelope: env,
            },
        );
    }
    net.nodes[0].handle_message(
        0,
        &ua(1),
        ReplicatorMessage::DeltaPropagation {
            deltas: vec![DeltaEntry {
                key: "a".into(),
                data_type: DataTypeId::of::<PNCounter>(),
                seq: 1,
                full: false,
                bytes: vec![0xff; 3],
                pruning: vec![],
            }],
        },
    );
    net.flush();
    assert_eq!(net.counter(0, "a"), before);
    let s = net.nodes[0].stats();
    assert_eq!(s.unknown_types, 1);
    assert!(s.bad_values >= 3);
}

#[test]
fn pruning_moves_a_removed_nodes_counts_to_the_leader() {
    let settings = ReplicatorSettings {
        pruning_interval_ms: 1_000,
        max_pruning_dissemination_ms: 3_000,
        gossip_interval_ms: 500,
        ..Default::default()
    };
    let mut net = Net::new(4, settings);
    for i in 0..4 {
        net.incr(i, "k", 10, WriteConsistency::Local);
    }
    net.run(2_000);
    let gone = ReplicaId(ua(3).uid);
    assert!(net.nodes[0]
        .local_value("k")
        .unwrap()
        .value()
        .unwrap()
        .pruning_needed_from(gone));
    // Node 3 is removed from the cluster.
    net.crashed.insert(3);
    net.members.retain(|m| *m != 3);
    net.publish();
    net.run(15_000);
    for i in 0..3 {
        let v = net.nodes[i].local_value("k").unwrap().value().unwrap();
        assert!(!v.pruning_needed_from(gone), "replica {i} pruned");
        assert_eq!(net.counter(i, "k"), Some(40), "replica {i} lost no count");
    }
    assert_eq!(
        net.nodes[0].stats().pruning_performed,
        1,
        "node 0 is the leader"
    );
}

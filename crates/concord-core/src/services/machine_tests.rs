//! Tests of [`ServicesMachine`] on a small in-memory cluster: placement converges, the
//! handoff never runs two instances of a single-instance path, and a sender's messages
//! reach the instance in the order sent across a move.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::address::UniqueAddress;
use crate::member::MemberStatus::{self, Exiting, Joining, Leaving, Up};
use crate::protocol::{MembershipChange, ProtocolMachine};
use crate::test_views::{ua, view};

fn path(p: &str) -> PartitionPath {
    PartitionPath::new(p).unwrap()
}

struct Net {
    nodes: Vec<u16>,
    machines: BTreeMap<u16, ServicesMachine>,
    statuses: Vec<(u16, MemberStatus)>,
    running: BTreeSet<(u16, PartitionPath)>,
    stopping: VecDeque<(u16, PartitionPath)>,
    delivered: Vec<(u16, PartitionPath, UniqueAddress, Vec<u8>)>,
    now: u64,
    max_running_a: usize,
    links: BTreeMap<(u16, u16), VecDeque<ServicesMessage>>,
    rng: SmallRng,
}

impl Net {
    fn new(n: u16, services: &[(&str, InstancePolicy)]) -> Net {
        let nodes: Vec<u16> = (0..n).collect();
        let settings = ServicesSettings {
            gossip_interval_ms: 100,
            ..ServicesSettings::default()
        };
        let mut machines = BTreeMap::new();
        for &i in &nodes {
            let mut m = ServicesMachine::new(ua(i), settings.clone(), u64::from(i));
            for (p, policy) in services {
                m.register(0, path(p), policy.clone()).unwrap();
            }
            machines.insert(i, m);
        }
        let mut net = Net {
            statuses: nodes.iter().map(|i| (*i, Up)).collect(),
            nodes,
            machines,
            running: BTreeSet::new(),
            stopping: VecDeque::new(),
            delivered: Vec::new(),
            now: 0,
            max_running_a: 0,
            links: BTreeMap::new(),
            rng: SmallRng::seed_from_u64(u64::from(n)),
        };
        net.publish_view();
        net
    }

    fn publish_view(&mut self) {
        for &i in &self.nodes {
            let v = view(i, &self.statuses);
            self.machines.get_mut(&i).unwrap().handle_membership(
                self.now,
                &v,
                MembershipChange::CurrentClusterState,
            );
        }
    }

    fn index(&self, to: &UniqueAddress) -> Option<u16> {
        self.nodes.iter().copied().find(|i| ua(*i) == *to)
    }

    /// Delivers one random message (or instance stop), without draining the rest.
    fn step_once(&mut self) {
        self.pump();
        self.links.retain(|_, q| !q.is_empty());
        let choices = self.links.len() + usize::from(!self.stopping.is_empty());
        if choices == 0 {
            return;
        }
        let pick = self.rng.random_range(0..choices);
        if pick == self.links.len() {
            let (i, p) = self.stopping.pop_front().unwrap();
            self.running.remove(&(i, p.clone()));
            let now = self.now;
            self.machines.get_mut(&i).unwrap().instance_stopped(now, &p);
        } else {
            let (&(i, j), q) = self.links.iter_mut().nth(pick).unwrap();
            let message = q.pop_front().unwrap();
            let now = self.now;
            self.machines
                .get_mut(&j)
                .unwrap()
                .handle_message(now, &ua(i), message);
        }
    }

    /// Moves every machine's transmits onto the links and applies its events.
    fn pump(&mut self) {
        for i in self.nodes.clone() {
            let m = self.machines.get_mut(&i).unwrap();
            let mut events = Vec::new();
            while let Some(t) = m.poll_transmit() {
                let to = UniqueAddress::new(t.to.clone(), t.to_uid.unwrap());
                if let Some(j) = self.nodes.iter().copied().find(|j| ua(*j) == to) {
                    self.links.entry((i, j)).or_default().push_back(t.message);
                }
            }
            while let Some(e) = m.poll_event() {
                events.push(e);
            }
            for e in events {
                match e {
                    ServicesEvent::StartInstance { path } => {
                        assert!(self.running.insert((i, path)), "started twice");
                    }
                    ServicesEvent::StopInstance { path } => self.stopping.push_back((i, path)),
                    ServicesEvent::Deliver {
                        path,
                        sender,
                        payload,
                    } => {
                        assert!(
                            self.running.contains(&(i, path.clone())),
                            "delivered to no instance"
                        );
                        self.delivered.push((i, path, sender, payload));
                    }
                    ServicesEvent::StateChanged { .. } | ServicesEvent::Reply { .. } => {}
                }
            }
            let a = self
                .running
                .iter()
                .filter(|(_, p)| p.as_str() == "a")
                .count();
            self.max_running_a = self.max_running_a.max(a);
        }
    }

    /// Delivers every message and event until nothing moves: messages in FIFO order per
    /// pair of nodes (as lanes are), pairs and instance stops interleaved at random.
    fn settle(&mut self) {
        for _ in 0..100_000 {
            self.pump();
            self.links.retain(|_, q| !q.is_empty());
            if self.links.is_empty() && self.stopping.is_empty() {
                return;
            }
            self.step_once();
        }
        panic!("did not settle");
    }

    /// Delivers every message in flight (FIFO per pair, pairs at random) without letting a
    /// stopping instance finish its stop.
    fn deliver_messages(&mut self) {
        for _ in 0..100_000 {
            self.pump();
            self.links.retain(|_, q| !q.is_empty());
            if self.links.is_empty() {
                return;
            }
            let pick = self.rng.random_range(0..self.links.len());
            let (&(i, j), q) = self.links.iter_mut().nth(pick).unwrap();
            let message = q.pop_front().unwrap();
            let now = self.now;
            self.machines
                .get_mut(&j)
                .unwrap()
                .handle_message(now, &ua(i), message);
        }
        panic!("did not settle");
    }

    fn set_status(&mut self, node: u16, status: MemberStatus) {
        for (i, s) in self.statuses.iter_mut() {
            if *i == node {
                *s = status;
            }
        }
        self.publish_view();
    }

    fn tick(&mut self, rounds: usize) {
        for _ in 0..rounds {
            self.now += 100;
            for m in self.machines.values_mut() {
                m.handle_timeout(self.now);
            }
            self.settle();
        }
    }

    fn m(&mut self, i: u16) -> &mut ServicesMachine {
        self.machines.get_mut(&i).unwrap()
    }

    fn send(&mut self, from: u16, p: &str, payload: u8) {
        let now = self.now;
        let out = self.m(from).send(
            now,
            &path(p),
            RoutingLogic::RoundRobin,
            None,
            vec![payload],
            &BTreeMap::new(),
        );
        assert_ne!(out, SendOutcome::Dropped(ServicesDrop::BufferFull));
    }
}

#[test]
fn the_leader_places_and_every_node_converges_on_its_table() {
    let mut net = Net::new(
        4,
        &[
            ("a", InstancePolicy::Fixed(1)),
            ("b", InstancePolicy::Fixed(3)),
        ],
    );
    net.tick(5);
    let state = net.m(0).state().clone();
    assert_eq!(state.table.instances(&path("a")).unwrap().len(), 1);
    assert_eq!(state.table.instances(&path("b")).unwrap().len(), 3);
    assert!(state.pending.is_empty());
    for i in 1..4 {
        assert_eq!(net.m(i).state(), &state);
    }
    // The running instances are exactly the table's.
    let expected: BTreeSet<(u16, PartitionPath)> = state
        .table
        .iter()
        .flat_map(|(p, nodes)| {
            nodes
                .iter()
                .map(move |n| (n.address.port - 2550, p.clone()))
        })
        .collect();
    assert_eq!(net.running, expected);
}

#[test]
fn messages_sent_before_placement_wait_and_arrive() {
    let mut net = Net::new(3, &[("a", InstancePolicy::Fixed(1))]);
    // Before any tick the leader has placed already (registration + membership), but a
    // follower has not heard yet: its message waits.
    net.send(2, "a", 1);
    net.tick(3);
    assert_eq!(net.delivered.len(), 1);
}

#[test]
fn a_leaving_host_hands_off_with_one_instance_at_a_time_and_order_kept() {
    for seed in 0..300u64 {
        leaving_host_case(seed);
    }
}

fn leaving_host_case(seed: u64) {
    let mut net = Net::new(4, &[("a", InstancePolicy::Fixed(1))]);
    net.rng = SmallRng::seed_from_u64(seed);
    net.tick(3);
    let host = net.m(0).state().table.instances(&path("a")).unwrap()[0].clone();
    let h = net.index(&host).unwrap();
    let senders: Vec<u16> = (0..4).filter(|i| *i != h).collect();
    let mut seq = 0u8;
    let send_all = |net: &mut Net, seq: &mut u8| {
        for &s in &senders {
            net.send(s, "a", *seq);
        }
        *seq += 1;
    };
    for _ in 0..3 {
        send_all(&mut net, &mut seq);
    }
    // The host leaves: it is off the ring but live, so it hands off gracefully.
    net.statuses = net
        .statuses
        .iter()
        .map(|(i, s)| (*i, if *i == h { Leaving } else { *s }))
        .collect();
    net.publish_view();
    // Messages keep flowing while the handoff runs, with others in flight.
    for round in 0..40 {
        send_all(&mut net, &mut seq);
        let steps = net.rng.random_range(0..12);
        for _ in 0..steps {
            net.step_once();
        }
        if round % 4 == 0 {
            net.now += 100;
            for m in net.machines.values_mut() {
                m.handle_timeout(net.now);
            }
        }
    }
    net.tick(5);
    let state = net.m(0).state().clone();
    let now_host = state.table.instances(&path("a")).unwrap()[0].clone();
    assert_ne!(now_host, host);
    assert!(state.pending.is_empty());
    assert_eq!(
        net.max_running_a, 1,
        "two instances of a single-instance path ran"
    );
    for s in (0..4).filter(|i| *i != h) {
        let got: Vec<u8> = net
            .delivered
            .iter()
            .filter(|(_, _, from, _)| *from == ua(s))
            .map(|(_, _, _, p)| p[0])
            .collect();
        assert_eq!(
            got,
            (0..seq).collect::<Vec<_>>(),
            "seed {seed}: sender {s} lost or reordered"
        );
    }
    assert!(net.m(h).hosts_nothing());
    assert_eq!(net.m(h).stats().handoffs, 1, "not a graceful handoff");
    assert_eq!(net.m(h).stats().dropped, BTreeMap::new());
}

/// The membership leader moves a Leaving node on to Exiting at convergence, typically
/// before its handoff is done (its instance may take long to stop). An Exiting node still
/// runs: the services leader must keep it as the change's previous host, not start the
/// instance afresh elsewhere while the old one still runs (it did: Exiting did not count
/// as live, so the change lost its `from`).
#[test]
fn a_host_that_becomes_exiting_mid_handoff_still_hands_off_first() {
    for seed in 0..20u64 {
        let mut net = Net::new(4, &[("a", InstancePolicy::Fixed(1))]);
        net.rng = SmallRng::seed_from_u64(seed);
        net.tick(3);
        let host = net.m(0).state().table.instances(&path("a")).unwrap()[0].clone();
        let h = net.index(&host).unwrap();
        net.set_status(h, Leaving);
        net.deliver_messages();
        assert_eq!(
            net.m(h).local_hosting()[&path("a")],
            "stopping",
            "seed {seed}"
        );
        // Exiting while its instance still stops; reports reach the (maybe new) leader.
        net.set_status(h, Exiting);
        net.now += 100;
        for m in net.machines.values_mut() {
            m.handle_timeout(net.now);
        }
        net.deliver_messages();
        assert_eq!(
            net.max_running_a, 1,
            "seed {seed}: started elsewhere while the Exiting host's instance ran"
        );
        net.tick(5);
        let state = net.m(0).state().clone();
        assert_ne!(state.table.instances(&path("a")).unwrap()[0], host);
        assert!(state.pending.is_empty());
        assert_eq!(net.max_running_a, 1, "seed {seed}");
        assert_eq!(
            net.m(h).stats().handoffs,
            1,
            "seed {seed}: a graceful handoff"
        );
        assert!(net.m(h).hosts_nothing());
    }
}

/// A draining host whose instance no other node can take yet keeps it until one can:
/// dropping it made its node stop the instance while a member that came Up just after
/// started a new one at once (N + 1 instances). N = 1: nobody else is on the ring; N = 2:
/// the ring is shorter than N.
#[test]
fn a_draining_host_keeps_its_instance_until_another_node_can_take_it_over() {
    for n in [1, 2] {
        for seed in 0..20u64 {
            draining_host_case(n, seed);
        }
    }
}

fn draining_host_case(n: u32, seed: u64) {
    let mut net = Net::new(3, &[("a", InstancePolicy::Fixed(n))]);
    net.rng = SmallRng::seed_from_u64(seed);
    // Node 2 is still joining: off the ring.
    net.set_status(2, Joining);
    net.tick(3);
    let hosts = net
        .m(0)
        .state()
        .table
        .instances(&path("a"))
        .unwrap()
        .to_vec();
    assert_eq!(hosts.len(), n as usize);
    let host = hosts[hosts.len() - 1].clone();
    let h = net.index(&host).unwrap();
    if n == 1 {
        // The other Up member leaves: nobody else is on the ring.
        net.set_status(1 - h, Leaving);
    }
    let now = net.now;
    net.m(h).drain(now);
    net.deliver_messages();
    assert_eq!(
        net.m(0).state().table.instances(&path("a")).unwrap(),
        &hosts[..],
        "N = {n}, seed {seed}: kept on the draining host"
    );
    assert!(!net.m(h).hosts_nothing());
    // Node 2 comes Up: the instance moves there by a graceful handoff.
    net.set_status(2, Up);
    net.deliver_messages();
    net.tick(5);
    let state = net.m(0).state().clone();
    let now_on = state.table.instances(&path("a")).unwrap();
    assert!(now_on.contains(&ua(2)) && !now_on.contains(&host));
    assert_eq!(now_on.len(), n as usize);
    assert!(state.pending.is_empty());
    assert_eq!(
        net.max_running_a, n as usize,
        "N = {n}, seed {seed}: more than N instances at once"
    );
    assert_eq!(
        net.m(h).stats().handoffs,
        1,
        "N = {n}, seed {seed}: handed off"
    );
    assert!(net.m(h).hosts_nothing());
}

#[test]
fn a_crashed_host_is_replaced_afresh() {
    let mut net = Net::new(3, &[("a", InstancePolicy::Fixed(2))]);
    net.tick(3);
    let hosts = net
        .m(0)
        .state()
        .table
        .instances(&path("a"))
        .unwrap()
        .to_vec();
    let gone = net.index(&hosts[1]).unwrap();
    // Removed from membership (downed and removed).
    net.statuses.retain(|(i, _)| *i != gone);
    net.nodes.retain(|i| *i != gone);
    net.machines.remove(&gone);
    net.running.retain(|(i, _)| *i != gone);
    net.publish_view();
    net.tick(5);
    let leader = net.nodes[0];
    let table = net.m(leader).state().table.clone();
    let now = table.instances(&path("a")).unwrap();
    assert_eq!(now.len(), 2);
    assert!(!now.contains(&hosts[1]));
    assert!(net.m(leader).state().pending.is_empty());
}

#[test]
fn strangers_and_unregistered_paths_are_dropped_and_counted() {
    let mut net = Net::new(2, &[("a", InstancePolicy::Fixed(1))]);
    net.tick(2);
    let m = net.m(0);
    m.handle_message(
        0,
        &ua(9),
        ServicesMessage::Deliver {
            path: path("a"),
            payload: vec![1],
            hold_for: None,
        },
    );
    m.handle_message(
        0,
        &ua(1),
        ServicesMessage::Deliver {
            path: path("zzz"),
            payload: vec![1],
            hold_for: None,
        },
    );
    m.handle_message(
        0,
        &ua(1),
        ServicesMessage::Forward {
            path: path("a"),
            sender: ua(1),
            payload: vec![1],
            hops: MAX_FORWARD_HOPS,
        },
    );
    let d = &m.stats().dropped;
    assert_eq!(d.get(&ServicesDrop::FromStranger), Some(&1));
    assert_eq!(d.get(&ServicesDrop::Unregistered), Some(&1));
    assert_eq!(d.get(&ServicesDrop::TooManyHops), Some(&1));
}

#[test]
fn registrations_are_bounded() {
    let settings = ServicesSettings {
        max_services: 1,
        ..ServicesSettings::default()
    };
    let mut m = ServicesMachine::new(ua(0), settings, 1);
    m.register(0, path("a"), InstancePolicy::Fixed(1)).unwrap();
    assert_eq!(
        m.register(0, path("a"), InstancePolicy::Fixed(1)),
        Err(RegisterError::Duplicate(path("a")))
    );
    assert_eq!(
        m.register(0, path("b"), InstancePolicy::Fixed(1)),
        Err(RegisterError::TooMany(1))
    );
}

#[test]
fn a_buffer_beyond_its_size_drops() {
    let settings = ServicesSettings {
        buffer_size: 2,
        ..ServicesSettings::default()
    };
    let mut m = ServicesMachine::new(ua(0), settings, 1);
    // No membership yet: nothing is placed, messages wait.
    let empty = BTreeMap::new();
    for i in 0..3u8 {
        let out = m.send(0, &path("a"), RoutingLogic::Random, None, vec![i], &empty);
        if i < 2 {
            assert_eq!(out, SendOutcome::Buffered);
        } else {
            assert_eq!(out, SendOutcome::Dropped(ServicesDrop::BufferFull));
        }
    }
    // They expire after the handoff timeout.
    m.handle_timeout(20_000);
    assert_eq!(m.buffered(), 0);
    assert_eq!(m.stats().dropped.get(&ServicesDrop::NoInstance), Some(&2));
}

#[test]
fn a_downed_host_keeps_its_paths_for_the_removal_margin() {
    let mut net = Net::new(
        3,
        &[
            ("a", InstancePolicy::Fixed(1)),
            ("b", InstancePolicy::Fixed(3)),
        ],
    );
    for m in net.machines.values_mut() {
        m.settings.removal_margin_ms = 2_000;
        // A new leader waits this long for the downed node's report.
        m.settings.handoff_timeout_ms = 500;
    }
    net.tick(3);
    let host = net.m(0).state().table.instances(&path("a")).unwrap()[0].clone();
    let gone = net.index(&host).unwrap();
    // Downed (cut off or paused: it may still run its instance), not yet removed.
    net.machines.remove(&gone);
    net.running.retain(|(i, _)| *i != gone);
    net.nodes.retain(|i| *i != gone);
    net.set_status(gone, MemberStatus::Down);
    let leader = net.nodes[0];
    // Within the margin (1.5 s of 2 s): `a` stays on the downed host, and so does `b`'s
    // instance there; nothing is pending for them.
    net.tick(15);
    let state = net.m(leader).state().clone();
    assert_eq!(
        state.table.instances(&path("a")).unwrap(),
        std::slice::from_ref(&host)
    );
    assert!(state.table.instances(&path("b")).unwrap().contains(&host));
    assert!(state.pending.iter().all(|c| c.path != path("a")));
    // After it, both are placed on live nodes.
    net.tick(15);
    let state = net.m(leader).state().clone();
    let a = state.table.instances(&path("a")).unwrap();
    assert_eq!(a.len(), 1);
    assert_ne!(a[0], host);
    assert!(!state.table.instances(&path("b")).unwrap().contains(&host));
    assert!(state.pending.is_empty(), "{:?}", state.pending);
}

#[test]
fn without_a_removal_margin_a_downed_host_is_replaced_at_once() {
    let mut net = Net::new(3, &[("a", InstancePolicy::Fixed(1))]);
    for m in net.machines.values_mut() {
        m.settings.handoff_timeout_ms = 500;
    }
    net.tick(3);
    let host = net.m(0).state().table.instances(&path("a")).unwrap()[0].clone();
    let gone = net.index(&host).unwrap();
    net.machines.remove(&gone);
    net.running.retain(|(i, _)| *i != gone);
    net.nodes.retain(|i| *i != gone);
    net.set_status(gone, MemberStatus::Down);
    net.tick(8);
    let leader = net.nodes[0];
    let a = net
        .m(leader)
        .state()
        .table
        .instances(&path("a"))
        .unwrap()
        .to_vec();
    assert_eq!(a.len(), 1);
    assert_ne!(a[0], host);
}

#[test]
fn a_host_not_yet_in_the_view_is_not_left_with_a_stale_record() {
    let mut net = Net::new(3, &[("a", InstancePolicy::Fixed(1))]);
    for m in net.machines.values_mut() {
        m.settings.removal_margin_ms = 2_000;
    }
    net.tick(3);
    let leader = net.nodes[0];
    let stranger = ua(9);
    // The leader sees a host it does not know (yet) in its table: recorded as dead...
    net.m(leader)
        .state
        .table
        .insert(path("z"), vec![stranger.clone()]);
    let now = net.now;
    assert!(net
        .m(leader)
        .frozen_by_removal_margin(now)
        .contains(&path("z")));
    assert!(net.m(leader).written_off.contains_key(&stranger));
    // ...until a view shows it alive: then the record goes, so its margin starts afresh
    // if it dies later.
    net.statuses.push((9, Up));
    net.publish_view();
    assert!(!net.m(leader).written_off.contains_key(&stranger));
}

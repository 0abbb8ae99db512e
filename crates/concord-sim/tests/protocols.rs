//! The simulator hosts several protocol machines per node, routed by protocol id, and
//! takes the rules that differ between runtime and simulator (quarantine, lease) from the
//! core's polled outputs.

use std::collections::{BTreeSet, VecDeque};

use concord_core::split_brain_resolver::{DowningStrategy, SbrSettings};
use concord_core::timers::TimerTable;
use concord_core::{
    ClusterEvent, Lane, MembershipChange, MembershipView, ProtocolId, ProtocolMachine, Transmit,
    UniqueAddress,
};
use concord_sim::network::{NetworkConfig, Partitions};
use concord_sim::schedule::sim_settings;
use concord_sim::{Hosted, Simulation};

/// A tiny protocol: every node pings each member that comes Up, and every second pings
/// the members it has not heard a Pong from; answers Ping with Pong.
#[derive(Clone, Debug, PartialEq)]
enum PingMsg {
    Ping(u64),
    Pong(u64),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PingTimer {
    Retry,
}

struct PingMachine {
    me: UniqueAddress,
    up: BTreeSet<UniqueAddress>,
    ponged: BTreeSet<UniqueAddress>,
    views: u64,
    snapshots: u64,
    timers: TimerTable<PingTimer>,
    out: VecDeque<Transmit<PingMsg>>,
    events: VecDeque<UniqueAddress>,
}

impl PingMachine {
    fn new(me: &UniqueAddress) -> Self {
        PingMachine {
            me: me.clone(),
            up: BTreeSet::new(),
            ponged: BTreeSet::new(),
            views: 0,
            snapshots: 0,
            timers: TimerTable::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    fn ping(&mut self, to: &UniqueAddress, seq: u64) {
        self.out.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message: PingMsg::Ping(seq),
        });
    }
}

impl ProtocolMachine for PingMachine {
    type Message = PingMsg;
    type Event = UniqueAddress;

    fn protocol(&self) -> ProtocolId {
        ProtocolId(ProtocolId::FIRST_APPLICATION_ID + 7)
    }

    fn handle_message(&mut self, _now: u64, from: &UniqueAddress, message: PingMsg) {
        match message {
            PingMsg::Ping(n) => self.out.push_back(Transmit {
                to: from.address.clone(),
                to_uid: Some(from.uid),
                lane: Lane::Ordinary,
                message: PingMsg::Pong(n),
            }),
            PingMsg::Pong(_) => {
                if self.ponged.insert(from.clone()) {
                    self.events.push_back(from.clone());
                }
            }
        }
    }

    fn handle_membership(&mut self, now: u64, view: &MembershipView, change: MembershipChange) {
        self.views += 1;
        match change {
            MembershipChange::CurrentClusterState => self.snapshots += 1,
            MembershipChange::Event(ClusterEvent::MemberUp(m)) if m.unique_address != self.me => {
                self.up.insert(m.unique_address.clone());
                let to = m.unique_address.clone();
                self.ping(&to, view.version);
                self.timers.set(PingTimer::Retry, now + 1000);
            }
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now: u64) {
        for _ in self.timers.expired(now) {
            let missing: Vec<UniqueAddress> = self.up.difference(&self.ponged).cloned().collect();
            for m in &missing {
                self.ping(m, 0);
            }
            if !missing.is_empty() {
                self.timers.set(PingTimer::Retry, now + 1000);
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit<PingMsg>> {
        self.out.pop_front()
    }

    fn poll_event(&mut self) -> Option<UniqueAddress> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.timers.next_deadline()
    }
}

fn ping_sim(seed: u64) -> Simulation {
    let mut sim = Simulation::new(seed, sim_settings(), NetworkConfig::default());
    sim.add_protocol(|me, _seed| Box::new(Hosted::new(PingMachine::new(me))));
    sim
}

#[test]
fn hosted_machines_get_the_membership_view_and_exchange_messages_by_protocol_id() {
    let mut sim = ping_sim(11);
    let addrs = sim.form_cluster(4, 30_000).expect("forms");
    sim.run_until_cond(10_000, 100, |s| {
        addrs.iter().all(|a| {
            s.machine::<Hosted<PingMachine>>(a)
                .is_some_and(|h| h.events.len() == 3)
        })
    })
    .expect("every node got a Pong from the three others");
    for a in &addrs {
        let h = sim.machine::<Hosted<PingMachine>>(a).unwrap();
        assert_eq!(h.machine.snapshots, 1, "one CurrentClusterState at start");
        assert!(h.machine.views > 3, "and then the events");
    }
    assert!(sim.stats.protocol_delivered >= 24);
    assert_eq!(sim.stats.unknown_dropped, 0);
}

#[test]
fn messages_of_an_unknown_protocol_or_type_are_dropped_and_counted() {
    let mut sim = ping_sim(12);
    let addrs = sim.form_cluster(2, 30_000).expect("forms");
    let before = sim.stats.protocol_delivered;
    // A protocol nobody runs, then a known protocol with a message of another type.
    sim.inject(&addrs[0], &addrs[1], ProtocolId(4242), Box::new(7u32));
    sim.inject(
        &addrs[0],
        &addrs[1],
        ProtocolId(ProtocolId::FIRST_APPLICATION_ID + 7),
        Box::new("not a PingMsg".to_string()),
    );
    sim.run_for(100);
    assert_eq!(sim.stats.unknown_dropped, 2);
    // The nodes go on as before.
    sim.inject(
        &addrs[0],
        &addrs[1],
        ProtocolId(ProtocolId::FIRST_APPLICATION_ID + 7),
        Box::new(PingMsg::Ping(1)),
    );
    sim.run_for(100);
    assert!(
        sim.stats.protocol_delivered >= before + 2,
        "Ping and its Pong"
    );
    assert!(sim.all_up_converged());
}

#[test]
fn a_removed_incarnation_is_quarantined_after_the_cores_delay_and_learns_it() {
    let mut sim = Simulation::new(5, sim_settings(), NetworkConfig::default());
    let addrs = sim.form_cluster(5, 30_000).expect("forms");
    let victim = addrs[4].clone();
    let victim_ua = sim.node(&victim).core().self_unique_address().clone();
    // Cut the victim off long enough to be downed and removed.
    let others: BTreeSet<_> = addrs[..4].iter().cloned().collect();
    sim.partitions = Partitions::split(&[others, [victim.clone()].into()]);
    sim.run_until_cond(30_000, 100, |s| {
        addrs[..4].iter().all(|a| {
            !s.node(a)
                .core()
                .latest_gossip()
                .members
                .contains_key(&victim_ua)
        })
    })
    .expect("removed by the majority");
    // Down is not learned through the partition, so the victim is still running unless its
    // own side's resolver downed it (keep-majority: 1 of 5 is the minority → it downs
    // itself). Either way, no node has quarantined it before the core's 5 s delay.
    let removed_at = sim.now;
    assert!(addrs[..4]
        .iter()
        .all(|a| !sim.node(a).quarantined.contains(&victim_ua)));
    sim.run_until_cond(10_000, 100, |s| {
        addrs[..4]
            .iter()
            .all(|a| s.node(a).quarantined.contains(&victim_ua))
    })
    .expect("quarantined by every member");
    assert!(
        sim.now - removed_at >= 4000,
        "quarantine-removed-node-after is respected"
    );
}

#[test]
fn quarantine_refuses_a_paused_node_that_was_removed_and_it_shuts_down() {
    let mut settings = sim_settings();
    settings.downing = None;
    let mut sim = Simulation::new(9, settings, NetworkConfig::default());
    let addrs = sim.form_cluster(3, 30_000).expect("forms");
    let victim = addrs[2].clone();
    // Paused (SIGSTOP) and downed by hand; it wakes up after its removal and quarantine.
    sim.pause(&victim, 20_000);
    sim.run_until_cond(10_000, 100, |s| {
        s.node(&addrs[0])
            .core()
            .membership_state()
            .unreachable_members()
            .iter()
            .any(|m| m.address() == &victim)
    })
    .expect("unreachable");
    sim.with_node(&addrs[0], |c, now| c.down(now, &victim).unwrap());
    sim.run_until_cond(30_000, 100, |s| !s.node(&victim).is_running())
        .expect("the woken node learns it is removed (quarantined or told) and stops");
    sim.run_for(5000);
    assert!(sim.all_up_converged());
}

fn lease_majority() -> concord_core::settings::ClusterSettings {
    let mut s = sim_settings();
    s.downing = Some(SbrSettings {
        strategy: DowningStrategy::LeaseMajority {
            role: None,
            acquire_lease_delay_for_minority_ms: 2000,
            release_after_ms: 10_000,
        },
        stable_after_ms: 2000,
        down_all_when_unstable_ms: None,
        rules: concord_core::split_brain_resolver::SbrRules::Concord,
    });
    s
}

#[test]
fn lease_majority_in_the_simulator_the_side_that_gets_the_lease_survives_and_releases_it() {
    let mut sim = Simulation::new(21, lease_majority(), NetworkConfig::default());
    let addrs = sim.form_cluster(5, 30_000).expect("forms");
    let majority: BTreeSet<_> = addrs[..3].iter().cloned().collect();
    let minority: BTreeSet<_> = addrs[3..].iter().cloned().collect();
    sim.partitions = Partitions::split(&[majority.clone(), minority.clone()]);
    sim.run_until_cond(40_000, 100, |s| {
        minority.iter().all(|a| !s.node(a).is_running())
    })
    .expect("the minority, which asks later, does not get the lease and downs itself");
    assert!(majority.iter().all(|a| sim.node(a).is_running()));
    assert!(sim.lease().granted >= 1);
    sim.partitions = Partitions::default();
    sim.run_until_cond(30_000, 100, |s| s.all_up_converged())
        .expect("the majority converges");
    let held_by = sim.lease().holder.clone().expect("held").0;
    assert!(majority.contains(&held_by.address));
    sim.run_until_cond(20_000, 100, |s| s.lease().holder.is_none())
        .expect("the holder releases the lease release-after the downed members are removed");
}

#[test]
fn hosted_machines_are_rebuilt_for_a_restarted_incarnation() {
    let mut sim = ping_sim(13);
    let addrs = sim.form_cluster(3, 30_000).expect("forms");
    let a = addrs[2].clone();
    sim.crash(&a);
    sim.start_node(a.clone());
    let h = sim.machine::<Hosted<PingMachine>>(&a).unwrap();
    assert!(
        h.events.is_empty(),
        "a fresh machine for the new incarnation"
    );
    assert_ne!(
        h.machine.me,
        *sim.node(&addrs[0]).core().self_unique_address()
    );
}

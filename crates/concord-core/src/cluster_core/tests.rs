//! Protocol tests of [`ClusterCore`] on an in-memory network with virtual time.

use super::*;
use crate::address::Address;

/// In-memory network of cores: instant delivery, virtual clock, crash and partitions.
struct Net {
    nodes: BTreeMap<Address, ClusterCore>,
    crashed: BTreeSet<Address>,
    cut: BTreeSet<(Address, Address)>,
    now: u64,
    events: BTreeMap<Address, Vec<ClusterEvent>>,
    /// Like the runtime's coordinated shutdown: a node that sees itself Exiting reports its
    /// exiting tasks completed at once (off: they never complete).
    complete_exiting_tasks: bool,
}

fn addr(i: u16) -> Address {
    Address::new("sys", "127.0.0.1", 2550 + i)
}

impl Net {
    fn new() -> Self {
        Net {
            nodes: BTreeMap::new(),
            crashed: BTreeSet::new(),
            cut: BTreeSet::new(),
            now: 1_000_000,
            events: BTreeMap::new(),
            complete_exiting_tasks: true,
        }
    }

    fn start(&mut self, i: u16, uid: u64, settings: ClusterSettings) -> Address {
        let a = addr(i);
        let core = ClusterCore::new(
            UniqueAddress::new(a.clone(), uid),
            BTreeSet::new(),
            "1.0.0",
            settings,
            self.now,
            uid,
        );
        self.nodes.insert(a.clone(), core);
        self.crashed.remove(&a);
        a
    }

    fn core(&mut self, a: &Address) -> &mut ClusterCore {
        self.nodes.get_mut(a).unwrap()
    }

    fn partition(&mut self, a: &[Address], b: &[Address]) {
        for x in a {
            for y in b {
                self.cut.insert((x.clone(), y.clone()));
                self.cut.insert((y.clone(), x.clone()));
            }
        }
    }

    fn heal(&mut self) {
        self.cut.clear();
    }

    fn deliver(&mut self) {
        for _ in 0..100 {
            let mut batch = Vec::new();
            let now = self.now;
            for (a, c) in self.nodes.iter_mut() {
                while let Some(e) = c.poll_event() {
                    if let ClusterEvent::MemberExited(m) = &e {
                        if m.unique_address == *c.self_unique_address()
                            && self.complete_exiting_tasks
                        {
                            c.exiting_completed(now);
                        }
                    }
                    self.events.entry(a.clone()).or_default().push(e);
                }
                while let Some(t) = c.poll_transmit() {
                    batch.push((c.self_unique_address().clone(), a.clone(), t));
                }
            }
            if batch.is_empty() {
                return;
            }
            for (from, from_addr, t) in batch {
                if self.crashed.contains(&from_addr)
                    || self.crashed.contains(&t.to)
                    || self.cut.contains(&(from_addr.clone(), t.to.clone()))
                {
                    continue;
                }
                let now = self.now;
                if let Some(dst) = self.nodes.get_mut(&t.to) {
                    if t.to_uid.is_some_and(|u| u != dst.self_unique_address().uid) {
                        continue;
                    }
                    dst.handle_message(now, &from, t.message);
                }
            }
        }
    }

    fn run_for(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += 10;
            let now = self.now;
            for (a, c) in self.nodes.iter_mut() {
                if !self.crashed.contains(a) && c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
            self.deliver();
        }
    }

    fn run_until(&mut self, max_ms: u64, mut cond: impl FnMut(&Net) -> bool) -> bool {
        let end = self.now + max_ms;
        while self.now < end {
            if cond(self) {
                return true;
            }
            self.run_for(10);
        }
        cond(self)
    }

    fn live(&self) -> impl Iterator<Item = (&Address, &ClusterCore)> {
        self.nodes
            .iter()
            .filter(|(a, c)| !self.crashed.contains(*a) && c.shutdown_reason().is_none())
    }

    fn all_up(&self, n: usize) -> bool {
        self.live().count() == n
            && self.live().all(|(_, c)| {
                let g = c.latest_gossip();
                g.members.len() == n
                    && g.members.values().all(|m| m.status == MemberStatus::Up)
                    && c.membership_state().convergence()
            })
    }

    fn status_everywhere(&self, of: &Address) -> Vec<Option<MemberStatus>> {
        self.live()
            .filter(|(a, _)| *a != of)
            .map(|(_, c)| {
                c.latest_gossip()
                    .members
                    .values()
                    .find(|m| m.address() == of)
                    .map(|m| m.status)
            })
            .collect()
    }
}

fn form(n: u16) -> (Net, Vec<Address>) {
    let mut net = Net::new();
    let addrs: Vec<Address> = (1..=n)
        .map(|i| net.start(i, u64::from(i) * 1000 + 7, ClusterSettings::fast()))
        .collect();
    let seeds = vec![addrs[0].clone(), addrs[1.min(addrs.len() - 1)].clone()];
    let now = net.now;
    for a in &addrs {
        net.core(a).join_seed_nodes(now, &seeds).unwrap();
    }
    assert!(
        net.run_until(20_000, |n2| n2.all_up(n as usize)),
        "cluster of {n} did not form"
    );
    (net, addrs)
}

#[test]
fn graceful_leave_ends_with_removed_everywhere_and_shutdown() {
    let (mut net, addrs) = form(4);
    let leaver = addrs[3].clone();
    let now = net.now;
    net.core(&addrs[0]).leave(now, &leaver).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&leaver].shutdown_reason().is_some()));
    assert_eq!(
        net.nodes[&leaver].shutdown_reason(),
        Some(ShutdownReason::Removed)
    );
    assert!(net.run_until(10_000, |n| n
        .status_everywhere(&leaver)
        .iter()
        .all(|s| s.is_none())));
    let seen: Vec<&str> = net.events[&addrs[1]]
        .iter()
        .filter(|e| e.member().is_some_and(|m| m.address() == &leaver))
        .map(|e| e.type_name())
        .collect();
    assert!(
        seen.ends_with(&["MemberLeft", "MemberExited", "MemberRemoved"]),
        "{seen:?}"
    );
    assert!(net.run_until(5000, |n| n.all_up(3)));
}

#[test]
fn an_exiting_node_is_not_removed_before_its_exiting_tasks_complete() {
    let (mut net, addrs) = form(3);
    net.complete_exiting_tasks = false;
    let leaver = addrs[2].clone();
    let now = net.now;
    net.core(&addrs[0]).leave(now, &leaver).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&leaver].exiting_tasks_in_progress()));
    // However long the hand-over takes, the leader keeps the Exiting member.
    net.run_for(20_000);
    assert_eq!(net.nodes[&leaver].shutdown_reason(), None);
    assert_eq!(
        net.status_everywhere(&leaver),
        vec![Some(MemberStatus::Exiting); 2]
    );
    assert!(
        !net.nodes[&addrs[0]]
            .latest_gossip()
            .seen_by_node(&net.nodes[&leaver].self_unique_address().clone()),
        "the exiting node does not mark the gossip seen"
    );
    let now = net.now;
    net.core(&leaver).exiting_completed(now);
    assert!(!net.nodes[&leaver].exiting_tasks_in_progress());
    assert!(net.run_until(10_000, |n| n.nodes[&leaver].shutdown_reason()
        == Some(ShutdownReason::Removed)));
    assert!(net.run_until(5000, |n| n.all_up(2)));
}

/// When the coordinated shutdown starts is the core's decision: once on Exiting (the
/// hand-over runs before the removal), and the removal itself only confirms it.
#[test]
fn the_core_asks_for_the_coordinated_shutdown_once_when_exiting_and_when_downed() {
    let (mut net, addrs) = form(3);
    net.complete_exiting_tasks = false;
    let leaver = addrs[2].clone();
    let now = net.now;
    net.core(&addrs[0]).leave(now, &leaver).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&leaver].exiting_tasks_in_progress()));
    assert_eq!(
        net.core(&leaver).poll_coordinated_shutdown(),
        Some(ShutdownReason::Removed)
    );
    assert_eq!(net.core(&leaver).poll_coordinated_shutdown(), None);
    let now = net.now;
    net.core(&leaver).exiting_completed(now);
    assert!(net.run_until(10_000, |n| n.nodes[&leaver].shutdown_reason()
        == Some(ShutdownReason::Removed)));
    assert_eq!(
        net.core(&leaver).poll_coordinated_shutdown(),
        Some(ShutdownReason::Removed)
    );
    assert_eq!(net.core(&addrs[0]).poll_coordinated_shutdown(), None);

    // Downed (run-coordinated-shutdown-when-down is on by default): asked for at once.
    let downed = addrs[1].clone();
    let now = net.now;
    net.core(&addrs[0]).down(now, &downed).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&downed]
        .latest_gossip()
        .member(&n.nodes[&downed].self_unique_address().clone())
        .is_some_and(|m| m.status == MemberStatus::Down)
        || n.nodes[&downed].shutdown_reason().is_some()));
    assert_eq!(
        net.core(&downed).poll_coordinated_shutdown(),
        Some(ShutdownReason::Downed)
    );
}

#[test]
fn exiting_tasks_completed_before_exiting_let_the_removal_go_on() {
    let (mut net, addrs) = form(3);
    net.complete_exiting_tasks = false;
    let leaver = addrs[1].clone();
    let now = net.now;
    // The coordinated shutdown finished its exiting phase early (e.g. it timed out).
    net.core(&leaver).exiting_completed(now);
    net.core(&leaver).leave(now, &leaver).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&leaver].shutdown_reason()
        == Some(ShutdownReason::Removed)));
}

#[test]
fn removed_members_are_quarantined_after_the_delay_and_the_timer_table_has_every_deadline() {
    let (mut net, addrs) = form(3);
    let leaver = addrs[2].clone();
    let leaver_ua = net.nodes[&leaver].self_unique_address().clone();
    let now = net.now;
    net.core(&addrs[0]).leave(now, &leaver).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&addrs[0]]
        .timers()
        .is_set(&ClusterTimer::QuarantineRemoved(leaver_ua.clone()))));
    let at = net.nodes[&addrs[0]]
        .timers()
        .deadline(&ClusterTimer::QuarantineRemoved(leaver_ua.clone()))
        .unwrap();
    assert_eq!(
        net.core(&addrs[0]).poll_quarantine(),
        None,
        "not before the delay"
    );
    assert!(net.nodes[&addrs[0]].poll_timeout().unwrap() <= at);
    net.run_for(at - net.now + 10);
    assert_eq!(net.core(&addrs[0]).poll_quarantine(), Some(leaver_ua));
    // The removed node has stopped: it has no timers left.
    assert_eq!(net.nodes[&leaver].poll_timeout(), None);
}

#[test]
fn a_downed_node_shuts_down_at_its_down_deadline_which_poll_timeout_reports() {
    let (mut net, addrs) = form(3);
    let victim = addrs[2].clone();
    let now = net.now;
    net.core(&addrs[0]).down(now, &victim).unwrap();
    assert!(net.run_until(5000, |n| n.nodes[&victim]
        .timers()
        .is_set(&ClusterTimer::DownShutdown)));
    let d = net.nodes[&victim]
        .timers()
        .deadline(&ClusterTimer::DownShutdown)
        .unwrap();
    assert!(net.nodes[&victim].poll_timeout().unwrap() <= d);
    // Cut off, it cannot learn of its removal: only the Down deadline stops it.
    net.partition(&addrs[..2], &addrs[2..]);
    assert!(net.run_until(5000, |n| n.nodes[&victim].shutdown_reason()
        == Some(ShutdownReason::Downed)));
}

#[test]
fn a_reachable_downed_node_stops_as_downed_whether_it_sees_down_or_only_its_removal() {
    let (mut net, addrs) = form(3);
    let victim = addrs[2].clone();
    let now = net.now;
    net.core(&addrs[0]).down(now, &victim).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&victim].shutdown_reason().is_some()));
    assert_eq!(
        net.nodes[&victim].shutdown_reason(),
        Some(ShutdownReason::Downed)
    );
}

#[test]
fn the_leader_itself_can_leave() {
    let (mut net, addrs) = form(3);
    let now = net.now;
    net.core(&addrs[0]).leave(now, &addrs[0]).unwrap();
    assert!(
        net.run_until(10_000, |n| n.nodes[&addrs[0]].shutdown_reason()
            == Some(ShutdownReason::Removed))
    );
    assert!(net.run_until(10_000, |n| n.all_up(2)));
    assert_eq!(
        net.nodes[&addrs[1]]
            .membership_state()
            .leader()
            .unwrap()
            .address,
        addrs[1]
    );
}

#[test]
fn crash_is_detected_then_down_removes_it() {
    let (mut net, addrs) = form(5);
    let victim = addrs[4].clone();
    net.crashed.insert(victim.clone());
    assert!(
        net.run_until(10_000, |n| n.live().all(|(_, c)| c
            .membership_state()
            .unreachable_members()
            .iter()
            .any(|m| m.address() == &victim))),
        "all others see the crashed node unreachable"
    );
    // No convergence, so a joining node cannot become Up...
    assert!(net.live().all(|(_, c)| !c.membership_state().convergence()));
    let now = net.now;
    net.core(&addrs[1]).down(now, &victim).unwrap();
    assert!(net.run_until(10_000, |n| n
        .status_everywhere(&victim)
        .iter()
        .all(|s| s.is_none())));
    assert!(net.run_until(5000, |n| n.all_up(4)));
    for a in &addrs[..4] {
        assert!(net.events[a]
            .iter()
            .any(|e| matches!(e, ClusterEvent::UnreachableMember(m) if m.address() == &victim)));
        assert!(net.events[a].iter().any(|e| matches!(e, ClusterEvent::MemberRemoved { member, previous_status: MemberStatus::Down } if member.address() == &victim)));
    }
}

#[test]
fn unreachable_node_that_comes_back_is_reachable_again() {
    let (mut net, addrs) = form(3);
    let (a, b, c) = (addrs[0].clone(), addrs[1].clone(), addrs[2].clone());
    net.partition(std::slice::from_ref(&c), &[a.clone(), b.clone()]);
    assert!(net.run_until(10_000, |n| n.nodes[&a]
        .membership_state()
        .unreachable_members()
        .iter()
        .any(|m| m.address() == &c)));
    net.heal();
    assert!(net.run_until(10_000, |n| n.all_up(3)
        && n.live()
            .all(|(_, x)| x.membership_state().unreachable_members().is_empty())));
    assert!(net.events[&a]
        .iter()
        .any(|e| matches!(e, ClusterEvent::ReachableMember(m) if m.address() == &c)));
}

#[test]
fn downed_node_shuts_itself_down() {
    let (mut net, addrs) = form(3);
    let now = net.now;
    net.core(&addrs[0]).down(now, &addrs[2]).unwrap();
    assert!(net.run_until(5000, |n| n.nodes[&addrs[2]].shutdown_reason().is_some()));
    assert!(matches!(
        net.nodes[&addrs[2]].shutdown_reason(),
        Some(ShutdownReason::Downed | ShutdownReason::Removed)
    ));
}

#[test]
fn joining_node_becomes_weakly_up_during_a_partition_and_up_after() {
    let (mut net, addrs) = form(3);
    let c = addrs[2].clone();
    net.partition(
        std::slice::from_ref(&c),
        &[addrs[0].clone(), addrs[1].clone()],
    );
    assert!(net.run_until(10_000, |n| !n.nodes[&addrs[0]]
        .membership_state()
        .unreachable_members()
        .is_empty()));
    let d = net.start(4, 44, ClusterSettings::fast());
    net.partition(std::slice::from_ref(&c), std::slice::from_ref(&d));
    let now = net.now;
    net.core(&d).join(now, &addrs[0]).unwrap();
    assert!(net.run_until(10_000, |n| n.nodes[&addrs[0]]
        .latest_gossip()
        .members
        .values()
        .any(|m| m.address() == &d && m.status == MemberStatus::WeaklyUp)));
    net.heal();
    assert!(net.run_until(10_000, |n| n.all_up(4)));
}

#[test]
fn weakly_up_can_be_turned_off() {
    let mut s = ClusterSettings::fast();
    s.weakly_up_after_ms = None;
    let mut net = Net::new();
    let addrs: Vec<_> = (1..=3)
        .map(|i| net.start(i, u64::from(i), s.clone()))
        .collect();
    let now = net.now;
    for a in &addrs {
        net.core(a).join_seed_nodes(now, &addrs[..1]).unwrap();
    }
    assert!(net.run_until(10_000, |n| n.all_up(3)));
    net.partition(&[addrs[2].clone()], &addrs[..2]);
    net.run_for(3000);
    let d = net.start(4, 44, s.clone());
    let now = net.now;
    net.core(&d).join(now, &addrs[0]).unwrap();
    net.run_for(5000);
    assert!(net.nodes[&addrs[0]]
        .latest_gossip()
        .members
        .values()
        .any(|m| m.address() == &d && m.status == MemberStatus::Joining));
}

#[test]
fn min_nr_of_members_delays_up() {
    let mut s = ClusterSettings::fast();
    s.min_nr_of_members = 3;
    let mut net = Net::new();
    let a = net.start(1, 1, s.clone());
    let b = net.start(2, 2, s.clone());
    let now = net.now;
    net.core(&a).join(now, &a).unwrap();
    net.core(&b).join(now, &a).unwrap();
    net.run_for(3000);
    assert!(net.nodes[&a]
        .latest_gossip()
        .members
        .values()
        .all(|m| m.status == MemberStatus::Joining));
    let c = net.start(3, 3, s);
    let now = net.now;
    net.core(&c).join(now, &a).unwrap();
    assert!(net.run_until(5000, |n| n.all_up(3)));
}

#[test]
fn full_cluster_shutdown_reaches_ready_for_shutdown() {
    let (mut net, addrs) = form(3);
    let now = net.now;
    net.core(&addrs[1])
        .prepare_for_full_cluster_shutdown(now)
        .unwrap();
    assert!(net.run_until(5000, |n| n.live().all(|(_, c)| c
        .latest_gossip()
        .members
        .values()
        .all(|m| m.status == MemberStatus::ReadyForShutdown))));
    assert!(net.events[&addrs[0]]
        .iter()
        .any(|e| e.type_name() == "MemberPreparingForShutdown"));
    assert!(net.events[&addrs[0]]
        .iter()
        .any(|e| e.type_name() == "MemberReadyForShutdown"));
}

#[test]
fn converged_cluster_sends_only_gossip_status() {
    let (mut net, addrs) = form(4);
    net.run_for(1000);
    let before = net.nodes[&addrs[0]].stats();
    net.run_for(2000);
    let after = net.nodes[&addrs[0]].stats();
    assert!(after.gossip_status_sent > before.gossip_status_sent);
    assert_eq!(
        after.gossip_sent, before.gossip_sent,
        "no full gossip while converged"
    );
}

#[test]
fn commands_on_unknown_members_fail_and_change_nothing() {
    let (mut net, addrs) = form(2);
    let now = net.now;
    let before = net.nodes[&addrs[0]].latest_gossip().clone();
    assert_eq!(
        net.core(&addrs[0]).down(now, &addr(77)),
        Err(CommandError::UnknownMember(addr(77)))
    );
    assert_eq!(
        net.core(&addrs[0]).leave(now, &addr(77)),
        Err(CommandError::UnknownMember(addr(77)))
    );
    let other = Address::new("other", "127.0.0.1", 1);
    assert!(matches!(
        net.core(&addrs[0]).join(now, &other),
        Err(CommandError::OtherCluster(..))
    ));
    assert_eq!(net.nodes[&addrs[0]].latest_gossip(), &before);
}

#[test]
fn gossip_for_another_incarnation_is_ignored() {
    let (mut net, addrs) = form(2);
    let now = net.now;
    let from = net.nodes[&addrs[1]].self_unique_address().clone();
    let stale = UniqueAddress::new(addrs[0].clone(), 123_456);
    let before = net.nodes[&addrs[0]].latest_gossip().clone();
    let mut g = before.clone();
    g.members.clear();
    net.core(&addrs[0]).handle_message(
        now,
        &from,
        ClusterMessage::GossipEnvelope {
            to: stale,
            gossip: g,
        },
    );
    assert_eq!(net.nodes[&addrs[0]].latest_gossip(), &before);
}

mod downing;
mod heartbeat;
mod hostile;
mod island;
mod join;
mod merge;

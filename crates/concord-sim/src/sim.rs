//! [`Simulation`]: many nodes in one process, a virtual clock, a seeded RNG and the
//! simulated network. Event-driven: the next event is the earliest message delivery or
//! node timer, so thousands of nodes run in virtual time.
//!
//! Each node runs the membership layer ([`ClusterCore`] with the runtime's own effects on
//! the runtime's own layer host, [`crate::membership`]) and any number of other protocol
//! machines ([`crate::hosted`]), routed by protocol id. The simulator does what the tokio
//! runtime does around them, and nothing more: it carries their transmits, feeds the
//! hosted machines the membership views and events the membership layer publishes, runs
//! the exiting tasks of a node once the core started its coordinated shutdown (the
//! `cluster-exiting` phase) and reports them done with the same command, refuses the
//! incarnations the core asks to quarantine, and reports refusals back as the transport
//! does. Lease requests go from the real effects to one shared lease ([`SimLease`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use std::sync::{Arc, Mutex};

use concord::cluster::command::{Command, MembershipCompletion};
use concord::host::{HostInput, ManualClock};
use concord::remote::codec::Inbound;
use concord_core::settings::ClusterSettings;
use concord_core::{
    Address, ClusterCore, ClusterEvent, ClusterMessage, MembershipChange, ProtocolId, Transmit,
    UniqueAddress,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::hosted::{HostedMachine, MachineFactory, Payload};
use crate::lease::SimLease;
use crate::membership::SimMembership;
pub use crate::message::SimMessage;
use crate::network::{NetworkConfig, Partitions};
pub use crate::node::SimNode;
pub use crate::stats::SimStats;

struct InFlight {
    from: UniqueAddress,
    to: Address,
    to_uid: Option<u64>,
    message: SimMessage,
}

/// The simulation.
pub struct Simulation {
    /// Virtual time, ms.
    pub now: u64,
    /// Seeded RNG for everything random in the run.
    pub rng: SmallRng,
    /// Nodes by address.
    pub nodes: BTreeMap<Address, SimNode>,
    /// Network behaviour.
    pub network: NetworkConfig,
    /// Current partitions.
    pub partitions: Partitions,
    /// Settings for new nodes.
    pub settings: ClusterSettings,
    /// Counters.
    pub stats: SimStats,
    /// Membership events per node, if recording.
    pub events: BTreeMap<Address, Vec<ClusterEvent>>,
    /// Record events (off for large runs).
    pub record_events: bool,
    /// The lease lease-majority decisions acquire (shared with every node's effects).
    pub lease: Arc<Mutex<SimLease>>,
    /// The one clock of every node's hosts: virtual time, [`Simulation::now`].
    pub clock: ManualClock,
    factories: Vec<MachineFactory>,
    messages: BTreeMap<u64, InFlight>,
    queue: BinaryHeap<Reverse<(u64, u64, EventKind)>>,
    seq: u64,
    /// Per (from, to) link, the latest delivery time queued (for ordered networks).
    link_clock: BTreeMap<(Address, Address), u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    Deliver(u64),
    Timer(Address, u64),
}

/// The address of simulated node `i` (10.x.y.z:25520, so host order is node order).
pub fn node_address(i: u32) -> Address {
    Address::new(
        "sim",
        format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
        25520,
    )
}

impl Simulation {
    /// An empty simulation.
    pub fn new(seed: u64, settings: ClusterSettings, network: NetworkConfig) -> Self {
        Simulation {
            now: 1_000_000,
            rng: SmallRng::seed_from_u64(seed),
            nodes: BTreeMap::new(),
            network,
            partitions: Partitions::default(),
            settings,
            stats: SimStats::default(),
            events: BTreeMap::new(),
            record_events: true,
            lease: Arc::new(Mutex::new(SimLease {
                holder: None,
                ttl_ms: 40_000,
                granted: 0,
            })),
            clock: ManualClock::new(1_000_000),
            factories: Vec::new(),
            messages: BTreeMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            link_clock: BTreeMap::new(),
        }
    }

    /// Hosts a protocol machine built by `factory` (given the node's unique address and a
    /// seed) on every node started from now on, including restarts.
    pub fn add_protocol(
        &mut self,
        factory: impl Fn(&UniqueAddress, u64) -> Box<dyn HostedMachine> + 'static,
    ) {
        self.factories.push(Box::new(factory));
    }

    fn push(&mut self, at: u64, kind: EventKind) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, kind)));
    }

    fn schedule_timer(&mut self, a: &Address) {
        let Some(n) = self.nodes.get(a) else { return };
        if !n.is_running() {
            return;
        }
        let uid = n.core().self_unique_address().uid;
        let Some(t) = n.next_timeout() else {
            return;
        };
        let t = t.max(self.now);
        // An already queued earlier (or equal) timer event re-arms itself when it fires.
        if n.timer_at.is_some_and(|q| q <= t) {
            return;
        }
        if let Some(n) = self.nodes.get_mut(a) {
            n.timer_at = Some(t);
        }
        self.push(t, EventKind::Timer(a.clone(), uid));
    }

    /// Starts a node at `address` with a fresh uid (a restart if one existed).
    pub fn start_node(&mut self, address: Address) -> UniqueAddress {
        let uid = self.rng.random::<u64>() | 1;
        let seed = self.rng.random::<u64>();
        let ua = UniqueAddress::new(address.clone(), uid);
        let core = ClusterCore::new(
            ua.clone(),
            BTreeSet::new(),
            "1.0.0",
            self.settings.clone(),
            self.now,
            seed,
        );
        let view = Arc::new(core.membership_view());
        let now = self.now;
        let machines = self
            .factories
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut m = f(&ua, seed ^ (i as u64 + 1));
                m.membership(now, &view, MembershipChange::CurrentClusterState);
                m
            })
            .collect();
        self.nodes.insert(
            address.clone(),
            SimNode {
                membership: SimMembership::new(core, self.lease.clone(), self.clock.clone()),
                machines,
                quarantined: BTreeSet::new(),
                alive: true,
                paused_until: None,
                coordinated_shutdown: None,
                timer_at: None,
            },
        );
        self.flush(&address);
        self.schedule_timer(&address);
        ua
    }

    /// Node at `a`.
    ///
    /// Panics if no node was started at `a` (a mistake in the scenario, not input).
    pub fn node(&self, a: &Address) -> &SimNode {
        &self.nodes[a]
    }

    /// The hosted machine of type `M` on the node at `a`.
    pub fn machine<M: 'static>(&self, a: &Address) -> Option<&M> {
        self.nodes
            .get(a)?
            .machines
            .iter()
            .find_map(|m| m.as_any().downcast_ref::<M>())
    }

    /// Runs a command on a node's membership machine, then carries its outputs.
    ///
    /// Panics if no node was started at `a` (a mistake in the scenario, not input).
    pub fn with_node<T>(&mut self, a: &Address, f: impl FnOnce(&mut ClusterCore, u64) -> T) -> T {
        let now = self.now;
        let node = self.nodes.get_mut(a).expect("node exists");
        let r = node
            .membership
            .host
            .host
            .with(|_, fx| f(&mut *fx.machine, now));
        self.flush(a);
        self.schedule_timer(a);
        r
    }

    /// Runs a command on the hosted machine of type `M` of a node (e.g. a user request),
    /// then carries its outputs. `None` if the node has no such machine.
    pub fn with_machine<M: 'static, T>(
        &mut self,
        a: &Address,
        f: impl FnOnce(&mut M, u64) -> T,
    ) -> Option<T> {
        let now = self.now;
        let node = self.nodes.get_mut(a)?;
        let m = node
            .machines
            .iter_mut()
            .find_map(|m| m.as_any_mut().downcast_mut::<M>())?;
        let r = f(m, now);
        self.flush(a);
        self.schedule_timer(a);
        Some(r)
    }

    /// Crashes the node at `a` (like SIGKILL).
    pub fn crash(&mut self, a: &Address) {
        if let Some(n) = self.nodes.get_mut(a) {
            n.alive = false;
        }
    }

    /// Pauses the node at `a` for `ms` (like SIGSTOP/SIGCONT).
    pub fn pause(&mut self, a: &Address, ms: u64) {
        let now = self.now;
        if let Some(n) = self.nodes.get_mut(a) {
            n.paused_until = Some(now + ms);
        }
    }

    /// The lease as it is now.
    pub fn lease(&self) -> SimLease {
        self.lease.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Carries every output of the node at `a`: what its membership layer published
    /// (views and events, recorded and fed to the hosted machines; quarantines; the start
    /// of the coordinated shutdown, whose exiting tasks run here) and the transmits of all
    /// its machines.
    fn flush(&mut self, a: &Address) {
        let now = self.now;
        let Some(node) = self.nodes.get_mut(a) else {
            return;
        };
        let from = node.core().self_unique_address().clone();
        let mut events: Vec<ClusterEvent> = Vec::new();
        let mut out: Vec<Transmit<SimMessage>> = Vec::new();
        // Membership outputs first; hosted machines may answer the events with transmits.
        out.extend(node.membership.take_transmits());
        let outputs = node.membership.sinks.take();
        for (view, published) in outputs.publications {
            for e in &published {
                for m in &mut node.machines {
                    m.membership(now, &view, MembershipChange::Event(e));
                }
            }
            events.extend(published);
        }
        node.quarantined.extend(outputs.quarantined);
        // The coordinated shutdown starts when the core asks (as in the tokio runtime);
        // its cluster-exiting phase: the hosted machines hand their work over first, then
        // the phase reports itself done with the runtime's command.
        for reason in outputs.coordinated_shutdown {
            node.coordinated_shutdown.get_or_insert(reason);
        }
        if node.coordinated_shutdown.is_some() && node.core().exiting_tasks_in_progress() {
            let mut done = true;
            for m in &mut node.machines {
                done &= m.exiting(now);
            }
            if done {
                let (reply, _) = futures_channel::oneshot::channel();
                node.membership
                    .host
                    .host
                    .handle(HostInput::Command(Command::ExitingCompleted(reply)));
                // Its transmits now; what it publishes is carried by the next flush.
                out.extend(node.membership.take_transmits());
            }
        }
        let mut hosted = Vec::new();
        for m in &mut node.machines {
            let p = m.protocol();
            m.drain(&mut hosted);
            out.extend(
                hosted
                    .drain(..)
                    .map(|t| t.map(|msg| SimMessage::Protocol(p, msg))),
            );
        }
        if self.record_events && !events.is_empty() {
            self.events.entry(a.clone()).or_default().extend(events);
        }
        let quarantined = node.quarantined.clone();
        for t in out {
            self.stats.sent += 1;
            if t.to_uid
                .is_some_and(|u| quarantined.contains(&UniqueAddress::new(t.to.clone(), u)))
            {
                continue;
            }
            if !self.partitions.connected(a, &t.to) {
                continue;
            }
            let delays = self.network.delays(&mut self.rng);
            let copies = delays.len();
            let mut message = Some(t.message);
            for (i, d) in delays.into_iter().enumerate() {
                // One copy per delivery (duplication delivers it more than once); the last
                // delivery takes the original.
                let Some(m) = (if i + 1 == copies {
                    message.take()
                } else {
                    message.clone()
                }) else {
                    break;
                };
                self.seq += 1;
                let id = self.seq;
                self.messages.insert(
                    id,
                    InFlight {
                        from: from.clone(),
                        to: t.to.clone(),
                        to_uid: t.to_uid,
                        message: m,
                    },
                );
                let mut at = self.now + d;
                if self.network.ordered {
                    let link = self
                        .link_clock
                        .entry((a.clone(), t.to.clone()))
                        .or_insert(0);
                    at = at.max(*link);
                    *link = at;
                }
                self.push(at, EventKind::Deliver(id));
            }
        }
    }

    /// Processes events until virtual time `until` (ms).
    pub fn run_until(&mut self, until: u64) {
        while let Some(Reverse((at, _, _))) = self.queue.peek() {
            if *at > until {
                break;
            }
            let Some(Reverse((at, _, kind))) = self.queue.pop() else {
                break;
            };
            self.now = self.now.max(at);
            self.clock.set(self.now);
            match kind {
                EventKind::Timer(a, uid) => {
                    let now = self.now;
                    let Some(n) = self.nodes.get_mut(&a) else {
                        continue;
                    };
                    if !n.is_running() || n.core().self_unique_address().uid != uid {
                        continue;
                    }
                    if n.timer_at != Some(at) {
                        // Superseded by an earlier timer event for this node.
                        continue;
                    }
                    n.timer_at = None;
                    if let Some(p) = n.paused_until {
                        if p > now {
                            n.timer_at = Some(p);
                            self.push(p, EventKind::Timer(a, uid));
                            continue;
                        }
                        n.paused_until = None;
                    }
                    if n.membership.host.next_timeout().is_some_and(|t| t <= now) {
                        n.membership.host.timeout(now);
                    }
                    for m in &mut n.machines {
                        if m.next_timeout().is_some_and(|t| t <= now) {
                            m.timeout(now);
                        }
                    }
                    self.flush(&a);
                    self.schedule_timer(&a);
                }
                EventKind::Deliver(id) => {
                    let Some(m) = self.messages.remove(&id) else {
                        continue;
                    };
                    self.deliver(id, m);
                }
            }
        }
        self.now = self.now.max(until);
        self.clock.set(self.now);
    }

    fn deliver(&mut self, id: u64, m: InFlight) {
        let now = self.now;
        if !self.partitions.connected(&m.from.address, &m.to) {
            return;
        }
        let Some(n) = self.nodes.get_mut(&m.to) else {
            return;
        };
        if !n.is_running()
            || m.to_uid
                .is_some_and(|u| u != n.core().self_unique_address().uid)
        {
            return;
        }
        if let Some(p) = n.paused_until {
            if p > now {
                // TCP buffers while the process is stopped.
                self.messages.insert(id, m);
                self.push(p, EventKind::Deliver(id));
                return;
            }
        }
        // Like the transport: a quarantined incarnation is refused, and learns it.
        if n.quarantined.contains(&m.from) {
            self.stats.quarantine_refused += 1;
            let to = m.to.clone();
            if let Some(sender) = self.nodes.get_mut(&m.from.address) {
                if sender.core().self_unique_address() == &m.from && sender.is_running() {
                    // As the transport reports a refused handshake.
                    sender.membership.host.host.handle(HostInput::Completion(
                        MembershipCompletion::QuarantinedBy(to),
                    ));
                }
            }
            return;
        }
        self.stats.delivered += 1;
        match m.message {
            SimMessage::Membership(msg) => {
                match &msg {
                    ClusterMessage::GossipEnvelope { .. } => self.stats.gossip_envelopes += 1,
                    ClusterMessage::GossipStatus { .. } => self.stats.gossip_status += 1,
                    _ => {}
                }
                n.membership.host.host.handle(HostInput::Inbound(Inbound {
                    from: m.from.clone(),
                    messages: vec![(msg, 0)],
                    traces: Vec::new(),
                }));
            }
            SimMessage::Protocol(protocol, payload) => {
                let delivered = n
                    .machines
                    .iter_mut()
                    .find(|x| x.protocol() == protocol)
                    .is_some_and(|x| x.deliver(now, &m.from, payload));
                if delivered {
                    self.stats.protocol_delivered += 1;
                } else {
                    self.stats.unknown_dropped += 1;
                }
            }
        }
        let to = m.to.clone();
        self.flush(&to);
        self.schedule_timer(&to);
    }

    /// Sends `message` of `protocol` from the node at `from` to `to` over the simulated
    /// network (for tests of unknown protocols and of machines' message handling).
    pub fn inject(&mut self, from: &Address, to: &Address, protocol: ProtocolId, message: Payload) {
        let Some(sender) = self.nodes.get(from) else {
            return;
        };
        let from_ua = sender.core().self_unique_address().clone();
        self.seq += 1;
        let id = self.seq;
        self.messages.insert(
            id,
            InFlight {
                from: from_ua,
                to: to.clone(),
                to_uid: None,
                message: SimMessage::Protocol(protocol, message),
            },
        );
        let at = self.now + self.network.min_delay_ms;
        self.push(at, EventKind::Deliver(id));
    }

    /// Runs for `ms` of virtual time.
    pub fn run_for(&mut self, ms: u64) {
        let until = self.now + ms;
        self.run_until(until);
    }

    /// Runs in steps of `step_ms` until `cond` holds or `max_ms` passed; returns the
    /// virtual time it took, or `None`.
    pub fn run_until_cond(
        &mut self,
        max_ms: u64,
        step_ms: u64,
        mut cond: impl FnMut(&Simulation) -> bool,
    ) -> Option<u64> {
        let start = self.now;
        while self.now - start <= max_ms {
            if cond(self) {
                return Some(self.now - start);
            }
            self.run_for(step_ms);
        }
        None
    }

    /// Running nodes (alive, not shut down).
    pub fn running(&self) -> impl Iterator<Item = (&Address, &SimNode)> {
        self.nodes.iter().filter(|(_, n)| n.is_running())
    }

    /// True if every running, initialized node sees exactly the running initialized nodes,
    /// all Up, converged.
    pub fn all_up_converged(&self) -> bool {
        let members: BTreeSet<UniqueAddress> = self
            .running()
            .filter(|(_, n)| n.core().is_initialized())
            .map(|(_, n)| n.core().self_unique_address().clone())
            .collect();
        !members.is_empty()
            && self
                .running()
                .filter(|(_, n)| n.core().is_initialized())
                .all(|(_, n)| {
                    let g = n.core().latest_gossip();
                    g.members.len() == members.len()
                        && g.members.values().all(|m| {
                            m.status == concord_core::MemberStatus::Up
                                && members.contains(&m.unique_address)
                        })
                        && n.core().membership_state().convergence()
                        && n.core().membership_state().unreachable_members().is_empty()
                })
    }

    /// Forms a cluster of `n` nodes: node 0 joins itself, the others join node 0 in a
    /// staggered way; returns their addresses once all are Up and converged.
    pub fn form_cluster(&mut self, n: u32, max_ms: u64) -> Option<Vec<Address>> {
        let addrs: Vec<Address> = (0..n).map(node_address).collect();
        for a in &addrs {
            self.start_node(a.clone());
        }
        let first = addrs[0].clone();
        self.with_node(&first, |c, now| c.join(now, &first).map(|_| ()).ok());
        for a in &addrs[1..] {
            let f = first.clone();
            self.with_node(a, |c, now| c.join(now, &f).ok());
        }
        self.run_until_cond(max_ms, 100, |s| s.all_up_converged())
            .map(|_| addrs)
    }
}

//! [`ServicesEffects`]: what the partitioned-services machine's events and the handles'
//! commands do on a node — instances as tasks with bounded mailboxes, asks and their
//! answers, the scaling depths and cluster metrics fed to the machine, the snapshot the
//! management API reads, and Prometheus metrics.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use concord_core::cluster_metrics::CapacitySelector;
use concord_core::services::{
    InstancePolicy, PartitionPath, RegisterError, RoutingLogic, SendOutcome, ServicesEvent,
    ServicesMachine, ServicesStats,
};
use concord_core::{Address, UniqueAddress};
use futures_channel::oneshot;
use tokio::sync::{mpsc, watch};
use tracing::warn;

use super::handle::{Factory, ServicesSnapshot, WireEnvelope};
use super::instance::{run_instance, InstanceItem};
use crate::host::{Effects, LayerEffects};
use crate::load::ClusterLoad;
use crate::sharding::entity::{decode, encode};

/// What the services host is asked (by handles and by its own instance tasks).
pub(crate) enum ServicesCommand {
    /// Register a service here.
    Register {
        path: PartitionPath,
        policy: InstancePolicy,
        factory: Factory,
        reply: oneshot::Sender<Result<(), RegisterError>>,
    },
    /// Send a message (no answer).
    Tell {
        path: PartitionPath,
        logic: RoutingLogic,
        key: Option<Vec<u8>>,
        body: Vec<u8>,
    },
    /// Send a message and answer `reply` with the instance's answer.
    Ask {
        path: PartitionPath,
        logic: RoutingLogic,
        key: Option<Vec<u8>>,
        body: Vec<u8>,
        reply: oneshot::Sender<Result<Vec<u8>, String>>,
    },
    /// An instance's answer to ask `id` of node `to`.
    Reply {
        to: UniqueAddress,
        id: u64,
        result: Result<Vec<u8>, String>,
    },
    /// An instance task has ended (after its mailbox).
    InstanceStopped {
        path: PartitionPath,
        generation: u64,
    },
    /// Coordinated shutdown: hand everything off.
    Drain,
}

struct Instance {
    mailbox: mpsc::Sender<InstanceItem>,
    generation: u64,
}

/// The services layer's effects; see the module docs.
pub(crate) struct ServicesEffects {
    commands: mpsc::Sender<ServicesCommand>,
    factories: BTreeMap<PartitionPath, Factory>,
    instances: BTreeMap<PartitionPath, Instance>,
    /// Instances told to stop, by path: the generation whose end the machine waits for.
    stopping: BTreeMap<PartitionPath, u64>,
    generation: u64,
    asks: HashMap<u64, oneshot::Sender<Result<Vec<u8>, String>>>,
    next_ask: u64,
    max_asks: usize,
    mailbox_size: usize,
    cluster_load: ClusterLoad,
    capacity: BTreeMap<String, BTreeMap<UniqueAddress, f64>>,
    snapshot: watch::Sender<Arc<ServicesSnapshot>>,
    node: Address,
    node_label: String,
    mailbox_full: u64,
    undecodable: Arc<std::sync::atomic::AtomicU64>,
    reported: ServicesStats,
    reported_full: u64,
    reported_undecodable: u64,
}

impl ServicesEffects {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        commands: mpsc::Sender<ServicesCommand>,
        max_asks: usize,
        mailbox_size: usize,
        cluster_load: ClusterLoad,
        snapshot: watch::Sender<Arc<ServicesSnapshot>>,
        node: Address,
    ) -> Self {
        ServicesEffects {
            commands,
            factories: BTreeMap::new(),
            instances: BTreeMap::new(),
            stopping: BTreeMap::new(),
            generation: 0,
            asks: HashMap::new(),
            next_ask: 1,
            max_asks,
            mailbox_size,
            cluster_load,
            capacity: BTreeMap::new(),
            snapshot,
            node_label: node.to_string(),
            node,
            mailbox_full: 0,
            undecodable: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            reported: ServicesStats::default(),
            reported_full: 0,
            reported_undecodable: 0,
        }
    }

    fn capacity(&mut self, logic: RoutingLogic) -> BTreeMap<UniqueAddress, f64> {
        let RoutingLogic::Adaptive(selector) = logic else {
            return BTreeMap::new();
        };
        let load = &self.cluster_load;
        self.capacity
            .entry(format!("{selector:?}"))
            .or_insert_with(|| load.capacity(selector))
            .clone()
    }

    fn publish(&self, machine: &ServicesMachine) {
        let snapshot = ServicesSnapshot {
            state: machine.state().clone(),
            registered: machine.registered().cloned().collect(),
            local: machine.local_hosting().into_iter().collect(),
            buffered: machine.buffered(),
            hosts_nothing: machine.hosts_nothing(),
            stats: machine.stats().clone(),
            node: Some(machine.node().clone()),
        };
        self.snapshot.send_replace(Arc::new(snapshot));
    }

    fn send(
        &mut self,
        fx: &mut Effects<'_, Self>,
        path: &PartitionPath,
        logic: RoutingLogic,
        key: Option<&[u8]>,
        envelope: &WireEnvelope,
    ) -> SendOutcome {
        let Ok(payload) = encode(envelope) else {
            return SendOutcome::Dropped(concord_core::services::ServicesDrop::NoInstance);
        };
        let capacity = self.capacity(logic);
        fx.machine
            .send(fx.now_ms, path, logic, key, payload, &capacity)
    }

    fn start_instance(&mut self, path: &PartitionPath, fx: &mut Effects<'_, Self>) {
        let Some(factory) = self.factories.get(path).cloned() else {
            return;
        };
        let (tx, rx) = mpsc::channel(self.mailbox_size);
        self.generation += 1;
        let generation = self.generation;
        self.instances.insert(
            path.clone(),
            Instance {
                mailbox: tx,
                generation,
            },
        );
        let fut = run_instance(
            generation,
            path.clone(),
            self.node.clone(),
            factory,
            rx,
            self.commands.clone(),
            self.undecodable.clone(),
        );
        fx.spawn(Box::pin(fut));
    }

    fn report(&mut self, machine: &ServicesMachine) {
        let node = self.node_label.clone();
        let stats = machine.stats().clone();
        let delta = |now: u64, before: u64| now.saturating_sub(before);
        metrics::counter!("concord_services_sent_total", "node" => node.clone())
            .increment(delta(stats.sent, self.reported.sent));
        metrics::counter!("concord_services_delivered_total", "node" => node.clone())
            .increment(delta(stats.delivered, self.reported.delivered));
        metrics::counter!("concord_services_forwarded_total", "node" => node.clone())
            .increment(delta(stats.forwarded, self.reported.forwarded));
        metrics::counter!("concord_services_handoffs_total", "node" => node.clone())
            .increment(delta(stats.handoffs, self.reported.handoffs));
        metrics::counter!("concord_services_released_by_timeout_total", "node" => node.clone())
            .increment(delta(
                stats.released_by_timeout,
                self.reported.released_by_timeout,
            ));
        for (reason, n) in &stats.dropped {
            let before = self.reported.dropped.get(reason).copied().unwrap_or(0);
            metrics::counter!("concord_services_dropped_total", "node" => node.clone(), "reason" => reason.as_str())
                .increment(delta(*n, before));
        }
        metrics::counter!("concord_services_dropped_total", "node" => node.clone(), "reason" => "mailbox-full")
            .increment(delta(self.mailbox_full, self.reported_full));
        let undecodable = self.undecodable.load(std::sync::atomic::Ordering::Relaxed);
        metrics::counter!("concord_services_undecodable_total", "node" => node.clone())
            .increment(delta(undecodable, self.reported_undecodable));
        metrics::gauge!("concord_services_instances", "node" => node.clone())
            .set(self.instances.len() as f64);
        metrics::gauge!("concord_services_buffered", "node" => node.clone())
            .set(machine.buffered() as f64);
        metrics::gauge!("concord_services_table_version", "node" => node)
            .set(machine.state().version as f64);
        self.reported = stats;
        self.reported_full = self.mailbox_full;
        self.reported_undecodable = undecodable;
    }
}

impl LayerEffects for ServicesEffects {
    type Machine = ServicesMachine;
    type Command = ServicesCommand;
    type Completion = ();

    fn name(&self) -> &'static str {
        "services"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: ServicesCommand) {
        match command {
            ServicesCommand::Register {
                path,
                policy,
                factory,
                reply,
            } => {
                if self.factories.contains_key(&path) {
                    let _ = reply.send(Err(RegisterError::Duplicate(path)));
                    return;
                }
                self.factories.insert(path.clone(), factory);
                let result = fx.machine.register(fx.now_ms, path.clone(), policy);
                if result.is_err() {
                    self.factories.remove(&path);
                }
                let _ = reply.send(result);
                self.publish(fx.machine);
            }
            ServicesCommand::Tell {
                path,
                logic,
                key,
                body,
            } => {
                let envelope = WireEnvelope { ask: None, body };
                self.send(fx, &path, logic, key.as_deref(), &envelope);
            }
            ServicesCommand::Ask {
                path,
                logic,
                key,
                body,
                reply,
            } => {
                if self.asks.len() >= self.max_asks {
                    let _ = reply.send(Err(format!(
                        "{} asks are waiting on this node, the most `services.max-pending-asks` allows",
                        self.asks.len()
                    )));
                    return;
                }
                let id = self.next_ask;
                self.next_ask = self.next_ask.wrapping_add(1);
                let envelope = WireEnvelope {
                    ask: Some(id),
                    body,
                };
                match self.send(fx, &path, logic, key.as_deref(), &envelope) {
                    SendOutcome::Dropped(reason) => {
                        let _ = reply.send(Err(format!(
                            "service `{path}`: message dropped ({})",
                            reason.as_str()
                        )));
                    }
                    _ => {
                        self.asks.insert(id, reply);
                    }
                }
            }
            ServicesCommand::Reply { to, id, result } => fx.machine.reply(&to, id, result),
            ServicesCommand::InstanceStopped { path, generation } => {
                if self.stopping.get(&path) == Some(&generation) {
                    self.stopping.remove(&path);
                    fx.machine.instance_stopped(fx.now_ms, &path);
                }
            }
            ServicesCommand::Drain => fx.machine.drain(fx.now_ms),
        }
    }

    fn completion(&mut self, _fx: &mut Effects<'_, Self>, _completion: ()) {}

    fn event(&mut self, fx: &mut Effects<'_, Self>, event: ServicesEvent) {
        match event {
            ServicesEvent::StartInstance { path } => self.start_instance(&path, fx),
            ServicesEvent::StopInstance { path } => {
                // Dropping the mailbox's sender ends the task after what it holds; the
                // task reports `InstanceStopped`.
                match self.instances.remove(&path) {
                    Some(instance) => {
                        self.stopping.insert(path, instance.generation);
                    }
                    None => fx.machine.instance_stopped(fx.now_ms, &path),
                }
            }
            ServicesEvent::Deliver {
                path,
                sender,
                payload,
            } => {
                let Some(instance) = self.instances.get(&path) else {
                    let item = InstanceItem { sender, payload };
                    fail_ask(fx, &item, "no instance here");
                    return;
                };
                match instance.mailbox.try_send(InstanceItem { sender, payload }) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(item)) => {
                        self.mailbox_full += 1;
                        fail_ask(fx, &item, "the instance's mailbox is full");
                    }
                    Err(mpsc::error::TrySendError::Closed(item)) => {
                        fail_ask(fx, &item, "the instance has stopped");
                    }
                }
            }
            ServicesEvent::Reply { id, result } => {
                if let Some(reply) = self.asks.remove(&id) {
                    let _ = reply.send(result);
                }
            }
            ServicesEvent::StateChanged { .. } => self.publish(fx.machine),
        }
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        self.asks.retain(|_, r| !r.is_canceled());
        self.capacity.clear();
        let depths: BTreeMap<PartitionPath, u32> = self
            .instances
            .iter()
            .map(|(p, i)| {
                let waiting = i.mailbox.max_capacity() - i.mailbox.capacity();
                (p.clone(), u32::try_from(waiting).unwrap_or(u32::MAX))
            })
            .collect();
        fx.machine.set_local_depths(depths);
        let load: BTreeMap<UniqueAddress, f64> = self
            .cluster_load
            .capacity(CapacitySelector::Mix)
            .into_iter()
            .map(|(n, c)| (n, 1.0 - c))
            .collect();
        fx.machine.set_node_load(load);
        self.report(fx.machine);
        self.publish(fx.machine);
    }

    fn stopped(&mut self, _machine: &mut ServicesMachine) {
        self.instances.clear();
        for (_, reply) in self.asks.drain() {
            let _ = reply.send(Err("the services layer has stopped".into()));
        }
    }
}

/// The ask carried by `item` (if any) gets `why` as its answer.
fn fail_ask(fx: &mut Effects<'_, ServicesEffects>, item: &InstanceItem, why: &str) {
    match decode::<WireEnvelope>(&item.payload) {
        Ok(WireEnvelope { ask: Some(id), .. }) => {
            fx.machine.reply(&item.sender, id, Err(why.into()))
        }
        Ok(_) => {}
        Err(e) => warn!(error = %e, "services: a message does not decode as an envelope"),
    }
}

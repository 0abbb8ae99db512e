//! [`ReceptionistEffects`]: what the receptionist's commands and events do on a node — hand
//! messages to local handles' mailboxes (bounded: a full mailbox drops and counts), keep
//! the membership view the handles read listings under, and, on the leader, remove the
//! registrations of nodes that left from Distributed Data every `pruning-interval`
//! ([`RegistryPruner`] decides which).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use concord_core::ddata::{Key, ORSet, ReadConsistency, WriteConsistency};
use concord_core::receptionist::{
    ReceptionistEvent, ReceptionistMachine, ReceptionistStats, RegistrationRefused, RegistryPruner,
    ServiceInstance, ServiceKeyId,
};
use concord_core::MembershipView;
use futures_channel::oneshot;
use tokio::sync::{mpsc, watch};
use tracing::debug;

use super::handle::{Charged, Receptionist};
use crate::ddata::Replicator;
use crate::host::{Effects, LayerEffects};

/// What the receptionist's host is asked by its handles.
pub(crate) enum ReceptionistCommand {
    /// Register local handle `id` under `key`, its messages into `mailbox`.
    Register {
        /// The handle's id.
        id: u64,
        /// Its key.
        key: ServiceKeyId,
        /// Where its messages go (encoded).
        mailbox: mpsc::Sender<Charged>,
        /// The instance, or why the registration was refused.
        reply: oneshot::Sender<Result<ServiceInstance, RegistrationRefused>>,
    },
    /// Forget local handle `id`.
    Deregister {
        /// The handle's id.
        id: u64,
    },
    /// Send `payload` to `to`, registered under `key`.
    Send {
        /// The handle.
        to: ServiceInstance,
        /// Its key.
        key: ServiceKeyId,
        /// The encoded message.
        payload: Vec<u8>,
    },
}

/// Work that finished away from the host.
pub(crate) enum ReceptionistCompletion {
    /// A pruning round read this node's replica of every registry key: `(key, elements)`.
    Registry(Vec<(String, Vec<String>)>),
    /// A pruning round ended (`removed` registrations of nodes that left).
    Pruned {
        /// Registrations removed.
        removed: usize,
    },
}

/// The receptionist's effects; see the module docs.
pub(crate) struct ReceptionistEffects {
    mailboxes: BTreeMap<u64, mpsc::Sender<Charged>>,
    replicator: Replicator,
    /// The handles' side: the budget of mailbox bytes.
    budget: Receptionist,
    view: watch::Sender<Option<Arc<MembershipView>>>,
    pruning_interval_ms: u64,
    pruning: bool,
    pruner: RegistryPruner,
    node_label: String,
    mailbox_full: u64,
    reported: ReceptionistStats,
    reported_full: u64,
}

impl ReceptionistEffects {
    pub(crate) fn new(
        replicator: Replicator,
        budget: Receptionist,
        view: watch::Sender<Option<Arc<MembershipView>>>,
        pruning: (u64, u64),
        node_label: String,
    ) -> Self {
        let (pruning_interval_ms, prune_removed_older_than_ms) = pruning;
        ReceptionistEffects {
            mailboxes: BTreeMap::new(),
            replicator,
            budget,
            view,
            pruning_interval_ms,
            pruning: false,
            pruner: RegistryPruner::new(prune_removed_older_than_ms),
            node_label,
            mailbox_full: 0,
            reported: ReceptionistStats::default(),
            reported_full: 0,
        }
    }

    fn report(&mut self, machine: &ReceptionistMachine) {
        let node = self.node_label.clone();
        let stats = machine.stats().clone();
        metrics::gauge!("concord_receptionist_registrations", "node" => node.clone())
            .set(machine.registrations() as f64);
        metrics::counter!("concord_receptionist_sent_total", "node" => node.clone())
            .increment(stats.sent.saturating_sub(self.reported.sent));
        metrics::counter!("concord_receptionist_delivered_total", "node" => node.clone())
            .increment(stats.delivered.saturating_sub(self.reported.delivered));
        for (reason, n) in &stats.dropped {
            let before = self.reported.dropped.get(reason).copied().unwrap_or(0);
            metrics::counter!("concord_receptionist_dropped_total", "node" => node.clone(), "reason" => reason.as_str())
                .increment(n.saturating_sub(before));
        }
        metrics::counter!("concord_receptionist_dropped_total", "node" => node, "reason" => "mailbox-full")
            .increment(self.mailbox_full.saturating_sub(self.reported_full));
        self.reported = stats;
        self.reported_full = self.mailbox_full;
    }

    /// Starts a pruning round on the leader: read every registry key (away from the host),
    /// then [`ReceptionistCompletion::Registry`] decides.
    fn prune(&mut self, fx: &mut Effects<'_, Self>) {
        let leader = self.view.borrow().as_ref().is_some_and(|v| v.is_leader());
        if self.pruning || !leader {
            return;
        }
        self.pruning = true;
        let replicator = self.replicator.clone();
        let completions = fx.completions().clone();
        fx.spawn(Box::pin(async move {
            let registry = read_registry(&replicator).await;
            completions.send(ReceptionistCompletion::Registry(registry));
        }));
    }
}

/// Every registry key this node's replica holds, with its elements.
async fn read_registry(replicator: &Replicator) -> Vec<(String, Vec<String>)> {
    let Ok(keys) = replicator.keys().await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for info in keys {
        if ServiceKeyId::of_ddata_key(&info.key).is_none() {
            continue;
        }
        let Ok(key) = Key::<ORSet<String>>::new(&info.key) else {
            continue;
        };
        if let Ok(Some(set)) = replicator.get(&key, ReadConsistency::Local).await {
            out.push((info.key, set.elements().cloned().collect()));
        }
    }
    out
}

/// Removes `removals` (`(key, elements)`) from the registry; the number removed.
async fn remove_registrations(
    replicator: &Replicator,
    removals: Vec<(String, Vec<String>)>,
) -> usize {
    let mut removed = 0;
    let me = replicator.replica();
    for (key_id, gone) in removals {
        let Ok(key) = Key::<ORSet<String>>::new(&key_id) else {
            continue;
        };
        let n = gone.len();
        let result = replicator
            .update(&key, WriteConsistency::Local, ORSet::new, move |s| {
                for e in &gone {
                    s.remove(me, e);
                }
            })
            .await;
        match result {
            Ok(()) => removed += n,
            Err(e) => {
                debug!(key = %key_id, error = %e, "receptionist: pruning a key failed; next round retries")
            }
        }
    }
    removed
}

impl LayerEffects for ReceptionistEffects {
    type Machine = ReceptionistMachine;
    type Command = ReceptionistCommand;
    type Completion = ReceptionistCompletion;

    fn name(&self) -> &'static str {
        "receptionist"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: ReceptionistCommand) {
        match command {
            ReceptionistCommand::Register {
                id,
                key,
                mailbox,
                reply,
            } => {
                let result = fx.machine.register(id, key).map(|()| {
                    self.mailboxes.insert(id, mailbox);
                    ServiceInstance {
                        node: fx.node().clone(),
                        id,
                    }
                });
                let registered = result.is_ok();
                if reply.send(result).is_err() && registered {
                    // The caller went away (a timeout): nobody holds the handle.
                    fx.machine.deregister(id);
                    self.mailboxes.remove(&id);
                }
            }
            ReceptionistCommand::Deregister { id } => {
                fx.machine.deregister(id);
                self.mailboxes.remove(&id);
            }
            ReceptionistCommand::Send { to, key, payload } => {
                fx.machine.send(&to, &key, payload);
            }
        }
    }

    fn completion(&mut self, fx: &mut Effects<'_, Self>, completion: ReceptionistCompletion) {
        match completion {
            ReceptionistCompletion::Registry(registry) => {
                let view = self.view.borrow().clone();
                let removals = match view {
                    Some(view) => self.pruner.round(fx.now_ms, &view, &registry),
                    None => Vec::new(),
                };
                if removals.is_empty() {
                    self.pruning = false;
                    return;
                }
                let replicator = self.replicator.clone();
                let completions = fx.completions().clone();
                fx.spawn(Box::pin(async move {
                    let removed = remove_registrations(&replicator, removals).await;
                    completions.send(ReceptionistCompletion::Pruned { removed });
                }));
            }
            ReceptionistCompletion::Pruned { removed } => {
                self.pruning = false;
                if removed > 0 {
                    debug!(
                        removed,
                        "receptionist: removed the registrations of nodes that left"
                    );
                    metrics::counter!("concord_receptionist_pruned_total", "node" => self.node_label.clone())
                        .increment(removed as u64);
                }
            }
        }
    }

    fn event(&mut self, fx: &mut Effects<'_, Self>, event: ReceptionistEvent) {
        match event {
            ReceptionistEvent::Deliver { instance, payload } => {
                let Some(mailbox) = self.mailboxes.get(&instance) else {
                    return;
                };
                // A message refused below is dropped, and its charge with it.
                let Some(charged) = self.budget.charge(Bytes::from(payload)) else {
                    self.mailbox_full += 1;
                    return;
                };
                match mailbox.try_send(charged) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => self.mailbox_full += 1,
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        // The handle was dropped; its deregistration is on its way.
                        self.mailboxes.remove(&instance);
                        fx.machine.deregister(instance);
                    }
                }
            }
        }
    }

    fn membership(&mut self, fx: &mut Effects<'_, Self>, view: &Arc<MembershipView>) {
        self.pruner.membership(fx.now_ms, view);
        self.view.send_replace(Some(view.clone()));
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        // Handles whose owner went away without deregistering (a registration cancelled
        // after the host answered it): forget them.
        let closed: Vec<u64> = self
            .mailboxes
            .iter()
            .filter(|(_, tx)| tx.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in closed {
            self.mailboxes.remove(&id);
            fx.machine.deregister(id);
        }
        metrics::gauge!("concord_receptionist_mailbox_bytes", "node" => self.node_label.clone())
            .set(self.budget.mailbox_bytes() as f64);
        self.report(fx.machine);
        self.prune(fx);
    }

    fn tick_interval_ms(&self) -> Option<u64> {
        Some(self.pruning_interval_ms.max(10))
    }
}

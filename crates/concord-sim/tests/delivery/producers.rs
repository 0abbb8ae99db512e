//! The reliable delivery simulation's producers: on every running node, one durable
//! producer per consumer type (`<type>@<address>`), the core's
//! [`ShardingProducerController`] driven as the runtime's `ShardingProducer` drives it:
//! each message is recorded in the producer's durable queue before it is accepted; each
//! transmit becomes an ask of the entity through the node's real sharding command path,
//! sent in order; the answer goes back into the machine; a confirmation is recorded in the
//! queue (lazily: some records are lost with a crash). A node that crashes or shuts down
//! loses its producers' memory and asks in flight; when it runs again they restart from
//! their queues. On top of the network's faults, the driver loses a transmit now and then,
//! sends one twice, or loses an answer.

use std::collections::BTreeMap;

use concord::delivery::{ConsumerEnvelope, ConsumerReply, Sequenced};
use concord::host::HostInput;
use concord::sharding::entity::{decode, encode};
use concord::sharding::{AskFailure, ShardingCommand};
use concord_core::delivery::{
    DeliverySettings, DurableQueueState, EntityTransmit, QueueEvent, ShardingProducerController,
    ShardingProducerEvent,
};
use concord_core::{Address, UniqueAddress};
use concord_sim::Simulation;
use futures_channel::oneshot;
use rand::Rng;

use super::consumers::{Host, DURABLE, PLAIN};

/// Entities per consumer type.
pub(crate) const ENTITIES: u32 = 16;
/// An ask unanswered this long is given up (the runtime's ask timeout): ms.
const ASK_TIMEOUT_MS: u64 = 5_000;
/// Messages in one batch, at most (the runtime's bound).
const MAX_BATCH: usize = 64;

type Reply = oneshot::Receiver<Result<Vec<u8>, AskFailure>>;

struct Ask {
    entity_id: String,
    reply: Reply,
    sent_ms: u64,
}

/// One running producer.
struct Running {
    /// The node incarnation it runs on.
    node: UniqueAddress,
    machine: ShardingProducerController,
    asks: Vec<Ask>,
}

/// What the producers did, in all.
#[derive(Debug, Default)]
pub(crate) struct ProducerCounts {
    pub(crate) accepted: u64,
    pub(crate) refused: u64,
    pub(crate) restarts: u64,
    pub(crate) transmits_lost: u64,
    pub(crate) transmits_doubled: u64,
    pub(crate) answers_lost: u64,
    pub(crate) asks_failed: u64,
    /// Asks that carried a batch (several messages to one entity).
    pub(crate) batches: u64,
}

/// Every producer, running or not, and what each accepted.
pub(crate) struct Producers {
    settings: DeliverySettings,
    /// Durable queues by producer id (they outlive crashes, as the store does).
    queues: BTreeMap<String, Vec<QueueEvent>>,
    /// The last number accepted per (producer, entity).
    pub(crate) accepted: BTreeMap<(String, String), u32>,
    running: BTreeMap<String, Running>,
    pub(crate) counts: ProducerCounts,
}

pub(crate) fn entity_id(i: u32) -> String {
    format!("e{i}")
}

impl Producers {
    pub(crate) fn new(settings: DeliverySettings) -> Self {
        Producers {
            settings,
            queues: BTreeMap::new(),
            accepted: BTreeMap::new(),
            running: BTreeMap::new(),
            counts: ProducerCounts::default(),
        }
    }

    /// Producers with a queue that are not running (their node is down).
    pub(crate) fn stopped(&self) -> Vec<String> {
        self.queues
            .keys()
            .filter(|p| !self.running.contains_key(*p))
            .cloned()
            .collect()
    }

    /// Messages held unconfirmed by running producers.
    pub(crate) fn unconfirmed(&self) -> usize {
        self.running.values().map(|r| r.machine.unconfirmed()).sum()
    }

    /// One step at the simulation's time: producers follow their nodes (stopped with a
    /// crash or shutdown, restarted from their queues), send `traffic` random messages
    /// each, and move what their machines want moved.
    pub(crate) fn step(&mut self, sim: &mut Simulation, traffic: u32) {
        let nodes: Vec<(Address, UniqueAddress, bool)> = sim
            .nodes
            .iter()
            .map(|(a, n)| {
                let acts = n.is_running()
                    && n.core().is_initialized()
                    && n.paused_until.is_none_or(|t| t <= sim.now);
                (a.clone(), n.core().self_unique_address().clone(), acts)
            })
            .collect();
        for (address, node, acts) in nodes {
            let running = sim.nodes[&address].is_running();
            for type_name in [PLAIN, DURABLE] {
                let id = format!("{type_name}@{address}");
                if self
                    .running
                    .get(&id)
                    .is_some_and(|r| !running || r.node != node)
                {
                    // Crashed or shut down: its memory and its asks are gone.
                    self.running.remove(&id);
                }
                if !acts {
                    continue;
                }
                if !self.running.contains_key(&id) {
                    self.start(sim, &id, node.clone());
                }
                for _ in 0..traffic {
                    self.send(sim, &id);
                }
                self.drive(sim, &address, type_name, &id);
            }
        }
    }

    /// Starts producer `id` on `node` from its durable queue.
    fn start(&mut self, sim: &mut Simulation, id: &str, node: UniqueAddress) {
        let mut state = DurableQueueState::new();
        let queue = self.queues.entry(id.to_string()).or_default();
        if !queue.is_empty() {
            self.counts.restarts += 1;
        }
        for (i, e) in queue.iter().cloned().enumerate() {
            state.apply(i as u64 + 1, e);
        }
        let mut machine = ShardingProducerController::new(
            id.to_string(),
            sim.now,
            sim.rng.random(),
            self.settings.clone(),
        );
        for (entity_id, held) in state.entities() {
            if let Some(incarnation) = held.incarnation {
                machine.restore(
                    sim.now,
                    entity_id,
                    incarnation,
                    held.confirmed_seq_nr,
                    held.unconfirmed.iter().map(|(_, p, _)| p.clone()).collect(),
                );
            }
        }
        self.running.insert(
            id.to_string(),
            Running {
                node,
                machine,
                asks: Vec::new(),
            },
        );
    }

    /// Producer `id` takes the next message for a random entity, recorded first.
    fn send(&mut self, sim: &mut Simulation, id: &str) {
        let entity_id = entity_id(sim.rng.random_range(0..ENTITIES));
        let Some(r) = self.running.get_mut(id) else {
            return;
        };
        let key = (id.to_string(), entity_id.clone());
        let n = self.accepted.get(&key).copied().unwrap_or(0) + 1;
        let payload = encode(&format!("{id}#{n}")).expect("a string encodes");
        match r.machine.send(sim.now, &entity_id, payload.clone()) {
            Ok(a) => {
                // Recorded before `send` returns (the runtime writes before it answers).
                self.queues
                    .entry(id.to_string())
                    .or_default()
                    .push(QueueEvent::Sent {
                        entity_id,
                        incarnation: a.incarnation,
                        seq_nr: a.seq_nr,
                        payload,
                    });
                self.accepted.insert(key, n);
                self.counts.accepted += 1;
            }
            Err(_) => self.counts.refused += 1,
        }
    }

    /// Moves producer `id`'s transmits, answers, confirmations and timeouts.
    fn drive(&mut self, sim: &mut Simulation, address: &Address, type_name: &str, id: &str) {
        let Some(r) = self.running.get_mut(id) else {
            return;
        };
        let now = sim.now;
        // Answers that came (or failed, or were given up).
        let mut answers = Vec::new();
        r.asks.retain_mut(|a| match a.reply.try_recv() {
            Ok(None) if now < a.sent_ms + ASK_TIMEOUT_MS => true,
            Ok(Some(Ok(bytes))) => {
                answers.push((a.entity_id.clone(), bytes));
                false
            }
            _ => {
                self.counts.asks_failed += 1;
                false
            }
        });
        for (entity_id, bytes) in answers {
            if sim.rng.random_bool(0.02) {
                self.counts.answers_lost += 1;
                continue;
            }
            match decode::<ConsumerReply<usize>>(&bytes) {
                Ok(ConsumerReply {
                    control: Some(c), ..
                }) => r.machine.handle_message(now, &entity_id, c),
                Ok(_) => {}
                Err(e) => panic!("{id}: an answer of {entity_id} does not decode: {e}"),
            }
        }
        if r.machine.poll_timeout().is_some_and(|at| at <= now) {
            r.machine.handle_timeout(now);
        }
        while let Some(ShardingProducerEvent::Confirmed {
            entity_id,
            incarnation,
            seq_nr,
        }) = r.machine.poll_event()
        {
            // Recorded lazily, as the runtime does: a crash may lose the record.
            if sim.rng.random_bool(0.7) {
                self.queues
                    .entry(id.to_string())
                    .or_default()
                    .push(QueueEvent::Confirmed {
                        entity_id,
                        incarnation,
                        seq_nr,
                    });
            }
        }
        let mut transmits: Vec<EntityTransmit> = Vec::new();
        while let Some(t) = r.machine.poll_transmit() {
            let roll: f64 = sim.rng.random();
            if roll < 0.02 {
                self.counts.transmits_lost += 1;
            } else if roll < 0.04 {
                self.counts.transmits_doubled += 1;
                transmits.push(t.clone());
                transmits.push(t);
            } else {
                transmits.push(t);
            }
        }
        if transmits.is_empty() {
            return;
        }
        // As the runtime's flush: what goes to one entity now goes in one ask (a batch),
        // entities in the order they first appear — in some steps; in others each
        // message alone.
        let batched = sim.rng.random_bool(0.5);
        let mut asks: Vec<(String, Vec<Sequenced>)> = Vec::new();
        // Each entity's last ask: a full batch starts another.
        let mut last: BTreeMap<String, usize> = BTreeMap::new();
        for t in transmits {
            let m = Sequenced::from(t.message);
            match last.get(&t.entity_id).copied() {
                Some(i) if batched && asks[i].1.len() < MAX_BATCH => asks[i].1.push(m),
                _ => {
                    last.insert(t.entity_id.clone(), asks.len());
                    asks.push((t.entity_id, vec![m]));
                }
            }
        }
        let mut sent = Vec::new();
        sim.with_machine::<Host, _>(address, |h, _| {
            for (entity_id, mut messages) in asks {
                let envelope = if messages.len() == 1 {
                    ConsumerEnvelope::<String>::Sequenced(messages.remove(0))
                } else {
                    self.counts.batches += 1;
                    ConsumerEnvelope::Batch(messages)
                };
                let (tx, rx) = oneshot::channel();
                h.host.handle(HostInput::Command(ShardingCommand::Tell {
                    type_name: type_name.into(),
                    entity: entity_id.clone(),
                    payload: encode(&envelope).expect("an envelope encodes"),
                    ask: Some(tx),
                    trace: None,
                }));
                sent.push(Ask {
                    entity_id,
                    reply: rx,
                    sent_ms: now,
                });
            }
        });
        if let Some(r) = self.running.get_mut(id) {
            r.asks.extend(sent);
        }
    }
}

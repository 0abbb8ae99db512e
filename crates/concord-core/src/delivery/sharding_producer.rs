//! [`ShardingProducerController`]: reliable delivery from one producer to sharded entities
//! (Akka's `ShardingProducerController`): one [`ProducerController`] per entity id, so
//! each entity has its own numbering, order and flow control window, while the producer's
//! `buffer-size` bounds the messages held over all of them.
//!
//! An entity's controller is created by its first message and forgotten after
//! `cleanup-unused-after` with nothing unconfirmed; a later message creates a new one of a
//! higher [`Incarnation::generation`], numbered from 1, which the consumer recognises as
//! new. Sans-IO like every machine here: `send`, `handle_message`, `handle_timeout` in;
//! `poll_transmit`, `poll_event`, `poll_timeout` out.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::message::{ConsumerMessage, Incarnation, SequencedMessage};
use super::producer::{ProducerController, ProducerEvent, ProducerStats, SendError};
use super::settings::DeliverySettings;

/// Longest entity id accepted, bytes (sharding's own bound is the same).
pub const MAX_ENTITY_ID_BYTES: usize = 512;

/// A message for one entity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntityTransmit {
    /// The entity.
    pub entity_id: String,
    /// The message.
    pub message: SequencedMessage,
}

/// What the sharded producer tells its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardingProducerEvent {
    /// Message `seq_nr` to `entity_id` was confirmed.
    Confirmed {
        /// The entity.
        entity_id: String,
        /// Its controller's incarnation (numbers restart with a new one).
        incarnation: Incarnation,
        /// The number.
        seq_nr: u64,
    },
}

/// Why a message was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardingSendError {
    /// The producer holds `buffer-size` messages unconfirmed.
    #[error(transparent)]
    Full(#[from] SendError),
    /// The entity id is empty or longer than 512 bytes.
    #[error("entity id is empty or longer than 512 bytes")]
    BadEntityId,
}

/// A message was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The entity's controller's incarnation.
    pub incarnation: Incarnation,
    /// The message's number.
    pub seq_nr: u64,
}

#[derive(Debug)]
struct Entry {
    controller: ProducerController,
    /// The deadline indexed in `deadlines`, if any.
    deadline: Option<u64>,
    /// When it last had something unconfirmed, ms.
    last_used_ms: u64,
}

/// The producer side for every entity one producer sends to.
#[derive(Debug)]
pub struct ShardingProducerController {
    producer_id: String,
    started_ms: u64,
    nonce: u64,
    settings: DeliverySettings,
    entities: HashMap<String, Entry>,
    /// Resend deadlines of the controllers: (deadline ms, entity id).
    deadlines: BTreeSet<(u64, String)>,
    cleanup_at: Option<u64>,
    generation: u32,
    held: usize,
    transmits: VecDeque<EntityTransmit>,
    events: VecDeque<ShardingProducerEvent>,
    /// Counters of controllers already forgotten.
    retired: ProducerStats,
    seed: u64,
}

impl ShardingProducerController {
    /// A producer `producer_id` started at `started_ms` (ms since the Unix epoch) with a
    /// random `nonce` (also the jitter's seed).
    pub fn new(
        producer_id: String,
        started_ms: u64,
        nonce: u64,
        settings: DeliverySettings,
    ) -> Self {
        ShardingProducerController {
            producer_id,
            started_ms,
            nonce,
            settings,
            entities: HashMap::new(),
            deadlines: BTreeSet::new(),
            cleanup_at: None,
            generation: 0,
            held: 0,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            retired: ProducerStats::default(),
            seed: nonce,
        }
    }

    /// The producer's id.
    pub fn producer_id(&self) -> &str {
        &self.producer_id
    }

    /// Messages held unconfirmed over all entities.
    pub fn unconfirmed(&self) -> usize {
        self.held
    }

    /// Messages sent and not confirmed yet, over all entities.
    pub fn in_flight(&self) -> u64 {
        self.entities
            .values()
            .map(|e| e.controller.in_flight())
            .sum()
    }

    /// Messages the consumers' flow control windows let it send now, over all entities
    /// (what they asked for beyond what was sent).
    pub fn window_open(&self) -> u64 {
        self.entities.values().map(|e| e.controller.demand()).sum()
    }

    /// Entities with a controller.
    pub fn entities(&self) -> usize {
        self.entities.len()
    }

    /// The controller of `entity_id`, if it has one.
    pub fn controller(&self, entity_id: &str) -> Option<&ProducerController> {
        self.entities.get(entity_id).map(|e| &e.controller)
    }

    /// Counters summed over every controller, present and forgotten.
    pub fn stats(&self) -> ProducerStats {
        let mut s = self.retired;
        for e in self.entities.values() {
            add(&mut s, &e.controller.stats());
        }
        s
    }

    /// How many more messages `entity_id`'s consumer asked for than were sent (1 for an
    /// entity without a controller: a first message goes without demand).
    pub fn demand(&self, entity_id: &str) -> u64 {
        self.entities
            .get(entity_id)
            .map_or(1, |e| e.controller.demand())
    }

    /// Forgets `entity_id`'s controller; returns its unconfirmed payloads in order (they no
    /// longer count towards the buffer). A later message to it starts a new generation.
    pub fn remove(&mut self, entity_id: &str) -> Vec<Vec<u8>> {
        let Some(e) = self.entities.remove(entity_id) else {
            return Vec::new();
        };
        if let Some(d) = e.deadline {
            self.deadlines.remove(&(d, entity_id.to_string()));
        }
        add(&mut self.retired, &e.controller.stats());
        let unconfirmed = e.controller.into_unconfirmed();
        self.held = self.held.saturating_sub(unconfirmed.len());
        unconfirmed
    }

    /// Restores `entity_id`'s controller from a durable queue (see
    /// [`ProducerController::restored`]); its messages count towards the buffer, and new
    /// controllers get generations above `incarnation`'s.
    pub fn restore(
        &mut self,
        now_ms: u64,
        entity_id: &str,
        incarnation: Incarnation,
        confirmed_seq_nr: u64,
        unconfirmed: Vec<Vec<u8>>,
    ) {
        if let Some(old) = self.entities.remove(entity_id) {
            self.held = self.held.saturating_sub(old.controller.unconfirmed());
            if let Some(d) = old.deadline {
                self.deadlines.remove(&(d, entity_id.to_string()));
            }
        }
        self.generation = self.generation.max(incarnation.generation);
        self.held += unconfirmed.len();
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let controller = ProducerController::new(
            self.producer_id.clone(),
            incarnation,
            &self.settings,
            self.settings.buffer_size.max(unconfirmed.len() as u32),
            self.seed,
        )
        .restored(now_ms, confirmed_seq_nr, unconfirmed);
        self.entities.insert(
            entity_id.to_string(),
            Entry {
                controller,
                deadline: None,
                last_used_ms: now_ms,
            },
        );
        self.after(entity_id, now_ms);
    }

    /// Takes `payload` for `entity_id`.
    ///
    /// # Errors
    /// [`ShardingSendError::Full`] when `buffer-size` messages wait for confirmation;
    /// [`ShardingSendError::BadEntityId`].
    pub fn send(
        &mut self,
        now_ms: u64,
        entity_id: &str,
        payload: Vec<u8>,
    ) -> Result<Accepted, ShardingSendError> {
        if entity_id.is_empty() || entity_id.len() > MAX_ENTITY_ID_BYTES {
            return Err(ShardingSendError::BadEntityId);
        }
        let limit = self.settings.buffer_size;
        if self.held >= limit as usize {
            return Err(SendError::BufferFull { limit }.into());
        }
        if !self.entities.contains_key(entity_id) {
            self.generation = self.generation.saturating_add(1);
            let incarnation = Incarnation {
                started_ms: self.started_ms,
                generation: self.generation,
                nonce: self.nonce,
            };
            self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let controller = ProducerController::new(
                self.producer_id.clone(),
                incarnation,
                &self.settings,
                limit,
                self.seed,
            );
            self.entities.insert(
                entity_id.to_string(),
                Entry {
                    controller,
                    deadline: None,
                    last_used_ms: now_ms,
                },
            );
        }
        let entry = self.entities.get_mut(entity_id).expect("inserted above");
        let seq_nr = entry.controller.send(now_ms, payload)?;
        entry.last_used_ms = now_ms;
        let incarnation = entry.controller.incarnation();
        self.held += 1;
        self.after(entity_id, now_ms);
        Ok(Accepted {
            incarnation,
            seq_nr,
        })
    }

    /// `entity_id`'s consumer answered. An answer for an entity without a controller is
    /// ignored (its controller was forgotten: everything was confirmed).
    pub fn handle_message(&mut self, now_ms: u64, entity_id: &str, message: ConsumerMessage) {
        let Some(entry) = self.entities.get_mut(entity_id) else {
            return;
        };
        entry.controller.handle_message(now_ms, message);
        self.after(entity_id, now_ms);
    }

    /// Time passed: resends what timed out, forgets idle controllers.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        while let Some((at, id)) = self.deadlines.first().cloned() {
            if at > now_ms {
                break;
            }
            self.deadlines.pop_first();
            if let Some(e) = self.entities.get_mut(&id) {
                e.deadline = None;
                e.controller.handle_timeout(now_ms);
            }
            self.after(&id, now_ms);
        }
        if self.cleanup_at.is_some_and(|at| at <= now_ms) {
            self.cleanup_at = None;
            let after = self.settings.cleanup_unused_after_ms;
            let idle: Vec<String> = self
                .entities
                .iter()
                .filter(|(_, e)| {
                    e.controller.unconfirmed() == 0
                        && now_ms.saturating_sub(e.last_used_ms) >= after
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in idle {
                if let Some(e) = self.entities.remove(&id) {
                    add(&mut self.retired, &e.controller.stats());
                }
            }
            self.arm_cleanup(now_ms);
        }
    }

    /// Next message to send.
    pub fn poll_transmit(&mut self) -> Option<EntityTransmit> {
        self.transmits.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<ShardingProducerEvent> {
        self.events.pop_front()
    }

    /// When [`ShardingProducerController::handle_timeout`] must run, ms.
    pub fn poll_timeout(&self) -> Option<u64> {
        let resend = self.deadlines.first().map(|(at, _)| *at);
        match (resend, self.cleanup_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Collects what `entity_id`'s controller produced and re-indexes its deadline.
    fn after(&mut self, entity_id: &str, now_ms: u64) {
        let Some(e) = self.entities.get_mut(entity_id) else {
            return;
        };
        while let Some(message) = e.controller.poll_transmit() {
            self.transmits.push_back(EntityTransmit {
                entity_id: entity_id.to_string(),
                message,
            });
        }
        let incarnation = e.controller.incarnation();
        while let Some(ProducerEvent::Confirmed { seq_nr }) = e.controller.poll_event() {
            self.held = self.held.saturating_sub(1);
            self.events.push_back(ShardingProducerEvent::Confirmed {
                entity_id: entity_id.to_string(),
                incarnation,
                seq_nr,
            });
        }
        if e.controller.unconfirmed() > 0 {
            e.last_used_ms = now_ms;
        }
        let deadline = e.controller.poll_timeout();
        if deadline != e.deadline {
            if let Some(old) = e.deadline {
                self.deadlines.remove(&(old, entity_id.to_string()));
            }
            if let Some(new) = deadline {
                self.deadlines.insert((new, entity_id.to_string()));
            }
            e.deadline = deadline;
        }
        self.arm_cleanup(now_ms);
    }

    fn arm_cleanup(&mut self, now_ms: u64) {
        if self.cleanup_at.is_none() && !self.entities.is_empty() {
            let every = (self.settings.cleanup_unused_after_ms / 2).max(1_000);
            self.cleanup_at = Some(now_ms.saturating_add(every));
        }
    }
}

fn add(sum: &mut ProducerStats, s: &ProducerStats) {
    sum.sent += s.sent;
    sum.resent += s.resent;
    sum.confirmed += s.confirmed;
    sum.invalid += s.invalid;
}

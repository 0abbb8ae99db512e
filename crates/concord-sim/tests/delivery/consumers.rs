//! The reliable delivery simulation's consumers, hosted by the real sharding layer of every
//! node (its [`LayerHost`](concord::host::LayerHost), effects and one [`ClusterSharding`]
//! machine per entity type):
//!
//! - [`PLAIN`]: the runtime's [`ReliableConsumer`] in front of an [`Applier`], whose
//!   consumer state moves with the entity on a handoff and is lost with a crash (at least
//!   once);
//! - [`DURABLE`]: a [`Journaled`] consumer, the model of an event-sourced one: each
//!   message's effect and the producer's progress are written to its journal in one write
//!   (which survives crashes: the journal simulation tests the real one), and a new
//!   incarnation recovers from it (effectively once).
//!
//! Both check, as they apply a message, that it comes after the producer's previous one
//! to the entity (the journaled one: right after it); [`Book::violations`] collects what
//! did not.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use concord::delivery::{
    ConsumerEnvelope, ConsumerReply, ConsumerState, ReliableConsumer, Sequenced,
};
use concord::sharding::entity::decode;
use concord::sharding::{Entity, EntityContext, ShardingEffects};
use concord_core::delivery::{
    ConsumerController, ConsumerMessage, DeliverySettings, ProducerProgress, SequencedMessage,
    Verdict,
};
use concord_core::group::MachineGroup;
use concord_core::sharding::{ClusterSharding, ShardingSettings};
use concord_core::{ProtocolId, UniqueAddress};
use concord_sim::{ShardingExiting, SimHost, SimRuntime};

use concord::host::{Clock, ManualClock};

/// The at-least-once consumer type.
pub(crate) const PLAIN: &str = "plain";
/// The effectively-once consumer type.
pub(crate) const DURABLE: &str = "durable";
/// Shards per type.
pub(crate) const SHARDS: u32 = 30;

pub(crate) type Host = SimHost<ShardingEffects>;

/// A payload's producer and number: `"<producer>#<n>"`, numbered from 1 per producer and
/// entity.
pub(crate) fn parse(payload: &str) -> Option<(&str, u32)> {
    let (p, n) = payload.rsplit_once('#')?;
    Some((p, n.parse().ok()?))
}

/// A durable consumer's journal.
#[derive(Clone, Debug, Default)]
pub(crate) struct Journal {
    /// The payloads applied, in order.
    pub(crate) applied: Vec<String>,
    /// The consumer controller's progress, written with each.
    pub(crate) producers: Vec<ProducerProgress>,
}

/// What the consumers of every node incarnation did; it outlives crashes.
#[derive(Default)]
pub(crate) struct Book {
    /// Durable consumers' journals by entity.
    pub(crate) journals: BTreeMap<String, Journal>,
    /// Plain consumers: the highest number handled per (producer, entity), by any
    /// incarnation.
    pub(crate) plain_highest: BTreeMap<(String, String), u32>,
    /// Plain consumers: messages handled again (after a crash lost what was handled).
    pub(crate) plain_repeats: u64,
    /// Messages the consumers applied, in all.
    pub(crate) applied: u64,
    /// Broken expectations, with what broke them.
    pub(crate) violations: Vec<String>,
}

pub(crate) type SharedBook = Arc<Mutex<Book>>;

fn lock(b: &SharedBook) -> std::sync::MutexGuard<'_, Book> {
    b.lock().unwrap_or_else(|p| p.into_inner())
}

/// The number of the producer's last payload in `applied`, 0 if none.
fn last_of(applied: &[String], producer: &str) -> u32 {
    applied
        .iter()
        .rev()
        .filter_map(|p| parse(p))
        .find(|(p, _)| *p == producer)
        .map_or(0, |(_, n)| n)
}

/// The entity behind a plain [`ReliableConsumer`]: keeps what it handled (its state on a
/// handoff).
pub(crate) struct Applier {
    id: String,
    received: Vec<String>,
    book: SharedBook,
}

impl Entity for Applier {
    type Message = String;
    type Reply = usize;
    type State = Vec<String>;

    async fn handle(&mut self, _ctx: &mut EntityContext, payload: String) -> usize {
        let mut book = lock(&self.book);
        book.applied += 1;
        match parse(&payload) {
            Some((producer, n)) => {
                // In order, no repeat, within what this entity (and those it was handed
                // over from) saw. Not without gaps: an incarnation that starts afresh
                // after a crash skips what its lost predecessor handled once the
                // predecessor's late confirmations reach the producer.
                let last = last_of(&self.received, producer);
                if n <= last {
                    book.violations.push(format!(
                        "{PLAIN} {}: {payload} after #{last} of its producer",
                        self.id
                    ));
                }
                let key = (producer.to_string(), self.id.clone());
                let highest = book.plain_highest.get(&key).copied().unwrap_or(0);
                // Never beyond what any incarnation handled: a gap would be a lost message.
                if n > highest + 1 {
                    book.violations.push(format!(
                        "{PLAIN} {}: {payload} while no incarnation handled #{}",
                        self.id,
                        highest + 1
                    ));
                }
                if n <= highest {
                    book.plain_repeats += 1;
                }
                book.plain_highest.insert(key, highest.max(n));
            }
            None => book
                .violations
                .push(format!("{PLAIN} {}: payload {payload:?}", self.id)),
        }
        self.received.push(payload);
        self.received.len()
    }

    fn hand_off(&mut self) -> Option<Vec<String>> {
        Some(std::mem::take(&mut self.received))
    }
}

/// The model of an event-sourced consumer (see the module docs): its state is its journal.
pub(crate) struct Journaled {
    id: String,
    controller: ConsumerController,
    book: SharedBook,
}

impl Journaled {
    fn new(id: &str, settings: &DeliverySettings, book: SharedBook) -> Self {
        // Recovery: the controller resumes from the progress in the journal.
        let producers = lock(&book)
            .journals
            .get(id)
            .map(|j| j.producers.clone())
            .unwrap_or_default();
        Journaled {
            id: id.to_string(),
            controller: ConsumerController::restore(settings, producers),
            book,
        }
    }
}

impl Entity for Journaled {
    type Message = ConsumerEnvelope<String>;
    type Reply = ConsumerReply<usize>;
    type State = ();

    async fn handle(&mut self, _ctx: &mut EntityContext, message: Self::Message) -> Self::Reply {
        let control = match message {
            ConsumerEnvelope::Sequenced(s) => self.one(s),
            // As the runtime's consumers answer a batch: the first gap's resend request,
            // else the answer after the last message.
            ConsumerEnvelope::Batch(batch) => {
                let (mut last, mut resend) = (None, None);
                for s in batch {
                    match self.one(s) {
                        Some(c @ ConsumerMessage::Resend { .. }) if resend.is_none() => {
                            resend = Some(c)
                        }
                        Some(c) => last = Some(c),
                        None => {}
                    }
                }
                resend.or(last)
            }
            ConsumerEnvelope::Direct(_) => None,
        };
        ConsumerReply {
            control,
            reply: None,
            replies: Vec::new(),
        }
    }
}

impl Journaled {
    /// One producer message through the controller; applied (effect and progress in one
    /// journal write) when it is the next.
    fn one(&mut self, s: Sequenced) -> Option<ConsumerMessage> {
        let m = SequencedMessage::from(s);
        match self.controller.receive(&m) {
            Verdict::Deliver => {
                let payload: String = decode(&m.payload).unwrap_or_default();
                let control = self.controller.delivered(&m);
                let progress = self.controller.state();
                let mut book = lock(&self.book);
                book.applied += 1;
                let journal = book.journals.entry(self.id.clone()).or_default();
                let last = parse(&payload).map(|(p, _)| last_of(&journal.applied, p));
                // One write: the effect and the progress (an event-sourced consumer's
                // events and its `Delivered`).
                journal.applied.push(payload.clone());
                journal.producers = progress;
                match (parse(&payload), last) {
                    (Some((_, n)), Some(last)) if n == last + 1 => {}
                    _ => {
                        let v = format!(
                            "{DURABLE} {}: applied {payload} after #{last:?} of its producer",
                            self.id
                        );
                        book.violations.push(v);
                    }
                }
                Some(control)
            }
            Verdict::Drop(answer) => Some(answer),
            Verdict::Invalid => {
                let v = format!("{DURABLE} {}: invalid {m:?}", self.id);
                lock(&self.book).violations.push(v);
                None
            }
        }
    }
}

/// The host of node `me`: the sharding machines of [`PLAIN`] and [`DURABLE`] with
/// `sharding`, their consumers recording in `book`.
pub(crate) fn node_host(
    me: &UniqueAddress,
    seed: u64,
    clock: &ManualClock,
    sharding: &ShardingSettings,
    delivery: &DeliverySettings,
    book: &SharedBook,
) -> Host {
    let runtime = SimRuntime::new(clock.clone());
    let mailbox = sharding.entity_mailbox_size;
    let (plain_book, plain_settings) = (book.clone(), delivery.clone());
    let (durable_book, durable_settings) = (book.clone(), delivery.clone());
    let type_name: Arc<str> = Arc::from(PLAIN);
    let effects = ShardingEffects::new(me.address.to_string())
        .entity_type(
            PLAIN,
            move |id: &str, state: Option<ConsumerState<Vec<String>>>| {
                let (received, producers, answers) = state
                    .map_or((None, Vec::new(), Default::default()), |s| {
                        (s.entity, s.producers, s.answers)
                    });
                let applier = Applier {
                    id: id.to_string(),
                    received: received.unwrap_or_default(),
                    book: plain_book.clone(),
                };
                ReliableConsumer::new(applier, &plain_settings, producers, type_name.clone())
                    .with_answers(answers)
            },
            SHARDS,
            mailbox,
        )
        .entity_type(
            DURABLE,
            move |id: &str, _state: Option<()>| {
                Journaled::new(id, &durable_settings, durable_book.clone())
            },
            SHARDS,
            mailbox,
        );
    let mut machines = MachineGroup::new(ProtocolId::SHARDING);
    for (i, t) in [PLAIN, DURABLE].into_iter().enumerate() {
        let settings = ShardingSettings {
            type_name: t.into(),
            ..sharding.clone()
        };
        machines.insert(
            t,
            ClusterSharding::new(settings, me.clone(), seed + i as u64, clock.now_ms()),
        );
    }
    let mut exiting = ShardingExiting::default();
    SimHost::new(machines, effects, me.clone(), clock.clone(), runtime)
        .with_exiting(move |h, now| exiting.step(h, now))
}

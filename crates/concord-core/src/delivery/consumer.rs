//! [`ConsumerController`]: the receiving side of reliable delivery (Akka's
//! `ConsumerController`), for one consumer and any number of producers.
//!
//! Per producer id it knows the highest sequence number handled. A message with the next
//! number is delivered (the owner runs its handler, then calls
//! [`ConsumerController::delivered`], which confirms it and grants the flow control
//! window); a lower number is a duplicate — dropped, and the confirmation answered again;
//! a higher one means a message went missing — dropped, and a `Resend` from the missing
//! number answered, so messages are handled in order, each once. A producer the consumer
//! does not know (it never heard of it, or it restarted, or the consumer is a new
//! incarnation after a crash) starts after the producer's own confirmed number, which the
//! message carries: nothing unconfirmed is skipped, and a message handled whose
//! confirmation was lost with a crashed consumer is handled again (at least once).
//!
//! Memory: at most `max-producers-per-consumer` producers are remembered (the least
//! recently seen is forgotten beyond it); the state a consumer hands over when it moves
//! is [`ConsumerController::state`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::message::{ConsumerMessage, Incarnation, SequencedMessage, MAX_PRODUCER_ID_BYTES};
use super::settings::DeliverySettings;

/// What to do with a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The next message of its producer: handle it, then call
    /// [`ConsumerController::delivered`] for the answer.
    Deliver,
    /// Not handled (a duplicate, a gap — a `Resend` answered once per gap — or a stale
    /// incarnation): answer this.
    Drop(ConsumerMessage),
    /// Malformed (number 0, confirmed at or beyond its own number, an id too long): no
    /// answer.
    Invalid,
}

/// Counters (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Messages delivered to the handler.
    pub delivered: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Messages dropped because an earlier one was missing (each answered by a `Resend`).
    pub gaps: u64,
    /// Messages of a stale incarnation dropped.
    pub stale: u64,
    /// Malformed messages dropped.
    pub invalid: u64,
    /// Producers forgotten to stay within `max-producers-per-consumer`.
    pub forgotten: u64,
}

/// What a consumer remembers of one producer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerProgress {
    /// The producer's id.
    pub producer_id: String,
    /// The incarnation it knows.
    pub incarnation: Incarnation,
    /// Highest number handled.
    pub delivered_seq_nr: u64,
}

#[derive(Clone, Debug)]
struct Known {
    incarnation: Incarnation,
    delivered_seq_nr: u64,
    last_seen: u64,
    /// The number a `Resend` was last asked from (0: none): asked once per gap.
    resend_asked: u64,
}

/// The consumer side.
#[derive(Clone, Debug)]
pub struct ConsumerController {
    window: u64,
    max_producers: usize,
    producers: HashMap<String, Known>,
    /// A logical clock of messages seen, for forgetting the least recently seen.
    seen: u64,
    stats: ConsumerStats,
}

impl ConsumerController {
    /// A consumer that knows no producer.
    pub fn new(settings: &DeliverySettings) -> Self {
        ConsumerController {
            window: settings.window(),
            max_producers: settings.max_producers_per_consumer.max(1) as usize,
            producers: HashMap::new(),
            seen: 0,
            stats: ConsumerStats::default(),
        }
    }

    /// A consumer that resumes from `state` (what an earlier incarnation handed over);
    /// entries beyond the bound or malformed are skipped.
    pub fn restore(settings: &DeliverySettings, state: Vec<ProducerProgress>) -> Self {
        let mut c = ConsumerController::new(settings);
        for p in state {
            if c.producers.len() >= c.max_producers || p.producer_id.len() > MAX_PRODUCER_ID_BYTES {
                c.stats.invalid += 1;
                continue;
            }
            c.seen += 1;
            c.producers.insert(
                p.producer_id,
                Known {
                    incarnation: p.incarnation,
                    delivered_seq_nr: p.delivered_seq_nr,
                    last_seen: c.seen,
                    resend_asked: 0,
                },
            );
        }
        c
    }

    /// What it knows, to hand over (sorted by producer id).
    pub fn state(&self) -> Vec<ProducerProgress> {
        let mut v: Vec<ProducerProgress> = self
            .producers
            .iter()
            .map(|(id, k)| ProducerProgress {
                producer_id: id.clone(),
                incarnation: k.incarnation,
                delivered_seq_nr: k.delivered_seq_nr,
            })
            .collect();
        v.sort_by(|a, b| a.producer_id.cmp(&b.producer_id));
        v
    }

    /// Highest number handled of `producer_id`, if known.
    pub fn delivered_seq_nr(&self, producer_id: &str) -> Option<u64> {
        self.producers.get(producer_id).map(|k| k.delivered_seq_nr)
    }

    /// Producers remembered.
    pub fn producers(&self) -> usize {
        self.producers.len()
    }

    /// Counters.
    pub fn stats(&self) -> ConsumerStats {
        self.stats
    }

    /// Decides what to do with `message`.
    pub fn receive(&mut self, message: &SequencedMessage) -> Verdict {
        if message.seq_nr == 0
            || message.confirmed_seq_nr >= message.seq_nr
            || message.producer_id.is_empty()
            || message.producer_id.len() > MAX_PRODUCER_ID_BYTES
        {
            self.stats.invalid += 1;
            return Verdict::Invalid;
        }
        self.seen += 1;
        let seen = self.seen;
        let expected = match self.producers.get_mut(&message.producer_id) {
            Some(k) if message.incarnation < k.incarnation => {
                self.stats.stale += 1;
                return Verdict::Drop(ConsumerMessage::Stale {
                    current: k.incarnation,
                });
            }
            Some(k) if message.incarnation == k.incarnation => {
                k.last_seen = seen;
                // The producer confirms only what a consumer handled: an earlier
                // incarnation of this one did, and the message that started this one's
                // count was an old one, delayed.
                k.delivered_seq_nr = k.delivered_seq_nr.max(message.confirmed_seq_nr);
                k.delivered_seq_nr + 1
            }
            // Unknown, or a newer incarnation: it starts after the producer's own
            // confirmation.
            _ => {
                self.make_room(&message.producer_id);
                self.producers.insert(
                    message.producer_id.clone(),
                    Known {
                        incarnation: message.incarnation,
                        delivered_seq_nr: message.confirmed_seq_nr,
                        last_seen: seen,
                        resend_asked: 0,
                    },
                );
                message.confirmed_seq_nr + 1
            }
        };
        if message.seq_nr == expected {
            Verdict::Deliver
        } else if message.seq_nr < expected {
            self.stats.duplicates += 1;
            Verdict::Drop(self.request(message.incarnation, expected - 1))
        } else {
            self.stats.gaps += 1;
            let k = self
                .producers
                .get_mut(&message.producer_id)
                .expect("known or inserted above");
            if k.resend_asked == expected {
                // Asked already: the messages after the gap that were in flight with it
                // must not each ask again (every ask resends a window).
                return Verdict::Drop(self.request(message.incarnation, expected - 1));
            }
            k.resend_asked = expected;
            Verdict::Drop(ConsumerMessage::Resend {
                incarnation: message.incarnation,
                from_seq_nr: expected,
            })
        }
    }

    /// The handler finished `message` (which [`ConsumerController::receive`] said to
    /// deliver): it counts as handled; the answer confirms it and grants the window.
    pub fn delivered(&mut self, message: &SequencedMessage) -> ConsumerMessage {
        if let Some(k) = self.producers.get_mut(&message.producer_id) {
            if k.incarnation == message.incarnation && k.delivered_seq_nr + 1 == message.seq_nr {
                k.delivered_seq_nr = message.seq_nr;
                self.stats.delivered += 1;
            }
        }
        let confirmed = self
            .producers
            .get(&message.producer_id)
            .filter(|k| k.incarnation == message.incarnation)
            .map_or(message.seq_nr, |k| k.delivered_seq_nr);
        self.request(message.incarnation, confirmed)
    }

    fn request(&self, incarnation: Incarnation, confirmed_seq_nr: u64) -> ConsumerMessage {
        ConsumerMessage::Request {
            incarnation,
            confirmed_seq_nr,
            request_up_to_seq_nr: confirmed_seq_nr.saturating_add(self.window),
        }
    }

    /// Forgets the least recently seen producer if `producer_id` is new and the bound is
    /// reached.
    fn make_room(&mut self, producer_id: &str) {
        if self.producers.len() < self.max_producers || self.producers.contains_key(producer_id) {
            return;
        }
        if let Some(oldest) = self
            .producers
            .iter()
            .min_by_key(|(_, k)| k.last_seen)
            .map(|(id, _)| id.clone())
        {
            self.producers.remove(&oldest);
            self.stats.forgotten += 1;
        }
    }
}

//! [`ProducerController`]: the sending side of reliable delivery to one consumer (Akka's
//! `ProducerController`; `akka.actor.typed.delivery`).
//!
//! Every message gets the next sequence number (from 1, no gaps) and is kept until the
//! consumer confirms it. Only messages up to the consumer's demand (its
//! `request_up_to_seq_nr`; the first message goes without demand, as in Akka, because it
//! is what makes the consumer known) are sent; the rest wait. Messages sent and not
//! confirmed are sent again after a timeout that backs off exponentially with jitter
//! ([`super::ResendBackoff`]), and at once from the number a consumer's `Resend` names.
//! Confirmations are cumulative. Sans-IO: `send`, `handle_message`, `handle_timeout` in;
//! `poll_transmit`, `poll_event`, `poll_timeout` out.

use std::collections::VecDeque;

use super::backoff::ResendBackoff;
use super::message::{ConsumerMessage, Incarnation, SequencedMessage};
use super::settings::DeliverySettings;

/// What a producer controller tells its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProducerEvent {
    /// Message `seq_nr` was confirmed (handled by the consumer).
    Confirmed {
        /// Its number.
        seq_nr: u64,
    },
}

/// Why a message was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The producer holds `limit` messages not confirmed yet (its `buffer-size`): send
    /// again once some are.
    #[error("the producer's buffer is full: {limit} messages wait for confirmation")]
    BufferFull {
        /// The limit, messages.
        limit: u32,
    },
}

/// Counters of one controller (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Messages sent the first time.
    pub sent: u64,
    /// Messages sent again (timeout or `Resend`).
    pub resent: u64,
    /// Messages confirmed.
    pub confirmed: u64,
    /// Consumer messages that did not fit (a confirmation beyond what was sent, a resend
    /// from the future, another incarnation's answer): ignored.
    pub invalid: u64,
}

/// The producer side for one consumer.
#[derive(Debug)]
pub struct ProducerController {
    producer_id: String,
    incarnation: Incarnation,
    window: u64,
    capacity: u32,
    /// Highest number confirmed (0: none).
    confirmed_seq_nr: u64,
    /// Payloads of `confirmed_seq_nr + 1 ..`, in order.
    unconfirmed: VecDeque<Vec<u8>>,
    /// Highest number sent at least once.
    sent_seq_nr: u64,
    /// Highest number the consumer asked for.
    requested_up_to: u64,
    /// Highest number restored from a durable queue (0: none): an earlier run may have
    /// sent up to it, so a consumer may confirm up to it.
    restored_up_to: u64,
    resend_at: Option<u64>,
    /// The number a `Resend` last resent from, until the next confirmation or timeout: a
    /// second ask for it is ignored (it is already on its way).
    resent_from: Option<u64>,
    backoff: ResendBackoff,
    transmits: VecDeque<SequencedMessage>,
    events: VecDeque<ProducerEvent>,
    stats: ProducerStats,
}

impl ProducerController {
    /// A controller of `producer_id` at `incarnation`; `capacity` bounds the messages it
    /// holds unconfirmed; `seed` seeds the resend jitter.
    pub fn new(
        producer_id: String,
        incarnation: Incarnation,
        settings: &DeliverySettings,
        capacity: u32,
        seed: u64,
    ) -> Self {
        ProducerController {
            producer_id,
            incarnation,
            window: settings.window(),
            capacity,
            confirmed_seq_nr: 0,
            unconfirmed: VecDeque::new(),
            sent_seq_nr: 0,
            requested_up_to: 1,
            restored_up_to: 0,
            resend_at: None,
            resent_from: None,
            backoff: ResendBackoff::new(
                settings.resend_interval_min_ms,
                settings.resend_interval_max_ms,
                seed,
            ),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: ProducerStats::default(),
        }
    }

    /// This new controller, restored from a durable queue: `confirmed_seq_nr` confirmed,
    /// then `unconfirmed` (in order) held and sent again — the first at once, the rest as
    /// the consumer grants demand.
    pub fn restored(
        mut self,
        now_ms: u64,
        confirmed_seq_nr: u64,
        unconfirmed: Vec<Vec<u8>>,
    ) -> Self {
        self.confirmed_seq_nr = confirmed_seq_nr;
        self.sent_seq_nr = confirmed_seq_nr;
        self.requested_up_to = confirmed_seq_nr.saturating_add(1);
        self.unconfirmed = unconfirmed.into();
        self.restored_up_to = self.next_seq_nr() - 1;
        self.send_permitted(now_ms);
        self
    }

    /// The incarnation its messages carry.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    /// Highest number confirmed.
    pub fn confirmed_seq_nr(&self) -> u64 {
        self.confirmed_seq_nr
    }

    /// The number the next message gets.
    pub fn next_seq_nr(&self) -> u64 {
        self.confirmed_seq_nr + self.unconfirmed.len() as u64 + 1
    }

    /// Messages held, not confirmed yet (sent or waiting for demand).
    pub fn unconfirmed(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Messages sent and not confirmed yet.
    pub fn in_flight(&self) -> u64 {
        self.sent_seq_nr - self.confirmed_seq_nr
    }

    /// How many more the consumer's demand lets it send now.
    pub fn demand(&self) -> u64 {
        self.requested_up_to.saturating_sub(self.sent_seq_nr)
    }

    /// Counters.
    pub fn stats(&self) -> ProducerStats {
        self.stats
    }

    /// Takes `payload` as the next message; returns its number. Sent at once if the
    /// consumer's demand allows, else when it does.
    ///
    /// # Errors
    /// [`SendError::BufferFull`] if `capacity` messages wait for confirmation.
    pub fn send(&mut self, now_ms: u64, payload: Vec<u8>) -> Result<u64, SendError> {
        if self.unconfirmed.len() >= self.capacity as usize {
            return Err(SendError::BufferFull {
                limit: self.capacity,
            });
        }
        self.unconfirmed.push_back(payload);
        let seq_nr = self.next_seq_nr() - 1;
        self.send_permitted(now_ms);
        Ok(seq_nr)
    }

    /// A message from the consumer.
    pub fn handle_message(&mut self, now_ms: u64, message: ConsumerMessage) {
        match message {
            ConsumerMessage::Request {
                incarnation,
                confirmed_seq_nr,
                request_up_to_seq_nr,
            } => {
                if incarnation != self.incarnation
                    || confirmed_seq_nr > self.sent_by_any_run()
                    || request_up_to_seq_nr < confirmed_seq_nr
                {
                    self.stats.invalid += 1;
                    return;
                }
                self.confirm(confirmed_seq_nr);
                // Demand never shrinks below what was granted (a late answer grants less).
                self.requested_up_to = self.requested_up_to.max(request_up_to_seq_nr);
                self.send_permitted(now_ms);
            }
            ConsumerMessage::Resend {
                incarnation,
                from_seq_nr,
            } => {
                if incarnation != self.incarnation
                    || from_seq_nr == 0
                    || from_seq_nr > self.sent_by_any_run()
                {
                    self.stats.invalid += 1;
                    return;
                }
                // Everything below `from_seq_nr` was handled.
                self.confirm(from_seq_nr - 1);
                if self.resent_from == Some(from_seq_nr) {
                    return;
                }
                self.resent_from = Some(from_seq_nr);
                self.resend_from(from_seq_nr);
                // The consumer waits for `from_seq_nr`: never sent in this run (a restored
                // controller), it is sent now.
                self.requested_up_to = self.requested_up_to.max(from_seq_nr);
                self.send_permitted(now_ms);
                self.resend_at = Some(self.backoff.next_deadline(now_ms));
            }
            ConsumerMessage::Stale { current } => {
                if current <= self.incarnation {
                    self.stats.invalid += 1;
                    return;
                }
                // A consumer knows a newer incarnation of this id (the producer restarted
                // with a clock behind its previous run, or an old run still sends): step
                // over it and send everything unconfirmed again under the new one.
                self.incarnation = Incarnation {
                    started_ms: current.started_ms,
                    generation: current.generation.saturating_add(1),
                    nonce: self.incarnation.nonce,
                };
                self.resend_from(self.confirmed_seq_nr + 1);
                self.resend_at = Some(self.backoff.next_deadline(now_ms));
            }
        }
    }

    /// Time passed: resends what is unconfirmed when its timeout passed, and backs off.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        match self.resend_at {
            Some(at) if at <= now_ms => {}
            _ => return,
        }
        if self.in_flight() == 0 {
            self.resend_at = None;
            return;
        }
        self.resent_from = None;
        self.resend_from(self.confirmed_seq_nr + 1);
        self.backoff.back_off();
        self.resend_at = Some(self.backoff.next_deadline(now_ms));
    }

    /// The unconfirmed payloads, in order, giving the controller up (a work-pulling
    /// producer hands a removed worker's messages to others).
    pub fn into_unconfirmed(self) -> Vec<Vec<u8>> {
        self.unconfirmed.into()
    }

    /// Next message to send.
    pub fn poll_transmit(&mut self) -> Option<SequencedMessage> {
        self.transmits.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<ProducerEvent> {
        self.events.pop_front()
    }

    /// When [`ProducerController::handle_timeout`] must run, ms.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.resend_at
    }

    /// Highest number this run or a restored earlier one may have sent.
    fn sent_by_any_run(&self) -> u64 {
        self.sent_seq_nr.max(self.restored_up_to)
    }

    fn confirm(&mut self, up_to: u64) {
        if up_to <= self.confirmed_seq_nr {
            return;
        }
        // A restored controller's earlier run sent these; confirmed, they need no sending.
        self.sent_seq_nr = self.sent_seq_nr.max(up_to);
        while self.confirmed_seq_nr < up_to {
            self.unconfirmed.pop_front();
            self.confirmed_seq_nr += 1;
            self.stats.confirmed += 1;
            self.events.push_back(ProducerEvent::Confirmed {
                seq_nr: self.confirmed_seq_nr,
            });
        }
        self.backoff.reset();
        self.resend_at = None;
        self.resent_from = None;
    }

    fn message(&self, seq_nr: u64) -> Option<SequencedMessage> {
        let index = seq_nr.checked_sub(self.confirmed_seq_nr + 1)?;
        let payload = self.unconfirmed.get(usize::try_from(index).ok()?)?;
        Some(SequencedMessage {
            producer_id: self.producer_id.clone(),
            incarnation: self.incarnation,
            seq_nr,
            confirmed_seq_nr: self.confirmed_seq_nr,
            payload: payload.clone(),
        })
    }

    /// Sends what the demand allows and was never sent.
    fn send_permitted(&mut self, now_ms: u64) {
        let last = self.next_seq_nr() - 1;
        let up_to = self.requested_up_to.min(last);
        while self.sent_seq_nr < up_to {
            self.sent_seq_nr += 1;
            if let Some(m) = self.message(self.sent_seq_nr) {
                self.transmits.push_back(m);
                self.stats.sent += 1;
            }
        }
        if self.in_flight() > 0 && self.resend_at.is_none() {
            self.resend_at = Some(self.backoff.next_deadline(now_ms));
        }
    }

    /// Sends again every message from `from_seq_nr` that was sent before (at most a window
    /// of them: the consumer grants no more beyond its confirmation).
    fn resend_from(&mut self, from_seq_nr: u64) {
        let from = from_seq_nr.max(self.confirmed_seq_nr + 1);
        let to = self.sent_seq_nr.min(from.saturating_add(self.window - 1));
        for seq_nr in from..=to {
            if let Some(m) = self.message(seq_nr) {
                self.transmits.push_back(m);
                self.stats.resent += 1;
            }
        }
    }
}

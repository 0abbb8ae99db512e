//! [`DurableQueueState`]: what a producer's durable queue holds (Akka's
//! `DurableProducerQueue`), as the fold of its events: every message is recorded
//! ([`QueueEvent::Sent`]) before the producer takes it, and its confirmation
//! ([`QueueEvent::Confirmed`]) some time after. A producer that restarts — after a crash,
//! or elsewhere — rebuilds its controllers from the state and sends what was never
//! confirmed again, under the same incarnations, so consumers drop what they had already
//! handled.
//!
//! A work-pulling (or point-to-point) producer records by its own message ids instead
//! ([`QueueEvent::Taken`], [`QueueEvent::Done`]): a message may move between workers, so
//! a worker's numbering is not kept, and a restarted producer gives every message not done
//! to the workers again (at least once).
//!
//! The log is kept short by deleting its events up to the first one still needed
//! ([`DurableQueueState::deletable_up_to`]): the oldest unconfirmed message's. No snapshot
//! is needed: the state is rebuilt from the events that remain.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::message::Incarnation;

/// An event of a durable producer queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueEvent {
    /// The producer took message `seq_nr` for `entity_id`.
    Sent {
        /// The consumer (an entity id; empty for a point-to-point consumer).
        entity_id: String,
        /// The controller's incarnation.
        incarnation: Incarnation,
        /// The message's number.
        seq_nr: u64,
        /// The message, encoded.
        payload: Vec<u8>,
    },
    /// Every message up to `seq_nr` of `entity_id`'s controller at `incarnation` was
    /// confirmed.
    Confirmed {
        /// The consumer.
        entity_id: String,
        /// The controller's incarnation.
        incarnation: Incarnation,
        /// Highest number confirmed.
        seq_nr: u64,
    },
    /// A work-pulling (or point-to-point) producer took message `id` (its own numbering,
    /// not yet given to a worker: a worker's numbers are not kept).
    Taken {
        /// The message's id.
        id: u64,
        /// The message, encoded.
        payload: Vec<u8>,
    },
    /// These messages of a work-pulling producer were confirmed (by any worker; not
    /// necessarily in order).
    Done {
        /// Their ids.
        ids: Vec<u64>,
    },
}

/// What is unconfirmed for one consumer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueuedEntity {
    /// The controller's incarnation.
    pub incarnation: Option<Incarnation>,
    /// Highest number confirmed.
    pub confirmed_seq_nr: u64,
    /// Unconfirmed messages in order: (number, payload, the queue event that recorded it).
    pub unconfirmed: VecDeque<(u64, Vec<u8>, u64)>,
}

/// The fold of a queue's events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableQueueState {
    entities: BTreeMap<String, QueuedEntity>,
    /// A work-pulling producer's unconfirmed messages: id → (payload, the event that
    /// recorded it).
    work: BTreeMap<u64, (Vec<u8>, u64)>,
    /// The highest work id taken.
    highest_work_id: u64,
    /// Events that could not apply (a number out of order): counted, skipped.
    pub skipped: u64,
}

impl DurableQueueState {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies event number `event_seq_nr` of the queue's log.
    pub fn apply(&mut self, event_seq_nr: u64, event: QueueEvent) {
        match event {
            QueueEvent::Sent {
                entity_id,
                incarnation,
                seq_nr,
                payload,
            } => {
                let e = self.entities.entry(entity_id).or_default();
                let next = e
                    .unconfirmed
                    .back()
                    .map_or(e.confirmed_seq_nr + 1, |(s, _, _)| s + 1);
                if e.incarnation != Some(incarnation) {
                    if e.incarnation.is_some_and(|i| i < incarnation) && seq_nr == next {
                        // The same controller, moved above a newer incarnation a consumer
                        // knew (a `Stale` answer): its numbering goes on, and so does what
                        // it holds.
                        e.incarnation = Some(incarnation);
                    } else {
                        // A new controller for this consumer: what the old one held was
                        // confirmed (a controller is replaced only when it holds nothing).
                        *e = QueuedEntity {
                            incarnation: Some(incarnation),
                            confirmed_seq_nr: seq_nr.saturating_sub(1),
                            unconfirmed: VecDeque::new(),
                        };
                    }
                }
                let next = e
                    .unconfirmed
                    .back()
                    .map_or(e.confirmed_seq_nr + 1, |(s, _, _)| s + 1);
                if seq_nr != next {
                    self.skipped += 1;
                    return;
                }
                e.unconfirmed.push_back((seq_nr, payload, event_seq_nr));
            }
            QueueEvent::Confirmed {
                entity_id,
                incarnation,
                seq_nr,
            } => {
                let Some(e) = self.entities.get_mut(&entity_id) else {
                    return;
                };
                if e.incarnation != Some(incarnation) || seq_nr <= e.confirmed_seq_nr {
                    return;
                }
                while e.unconfirmed.front().is_some_and(|(s, _, _)| *s <= seq_nr) {
                    e.unconfirmed.pop_front();
                }
                e.confirmed_seq_nr = seq_nr;
                if e.unconfirmed.is_empty() {
                    self.entities.remove(&entity_id);
                }
            }
            QueueEvent::Taken { id, payload } => {
                if id <= self.highest_work_id {
                    self.skipped += 1;
                    return;
                }
                self.highest_work_id = id;
                self.work.insert(id, (payload, event_seq_nr));
            }
            QueueEvent::Done { ids } => {
                for id in ids {
                    self.work.remove(&id);
                }
            }
        }
    }

    /// A work-pulling producer's unconfirmed messages, by id in order: (id, payload).
    pub fn work(&self) -> impl Iterator<Item = (u64, &Vec<u8>)> {
        self.work.iter().map(|(id, (p, _))| (*id, p))
    }

    /// The highest work id taken (a restarted producer numbers on after it).
    pub fn highest_work_id(&self) -> u64 {
        self.highest_work_id
    }

    /// Consumers with unconfirmed messages.
    pub fn entities(&self) -> impl Iterator<Item = (&String, &QueuedEntity)> {
        self.entities.iter()
    }

    /// Unconfirmed messages in all.
    pub fn unconfirmed(&self) -> usize {
        self.entities
            .values()
            .map(|e| e.unconfirmed.len())
            .sum::<usize>()
            + self.work.len()
    }

    /// The queue's events up to this number are no longer needed (`highest` is the log's
    /// highest): everything before the oldest unconfirmed message's event.
    pub fn deletable_up_to(&self, highest: u64) -> u64 {
        self.entities
            .values()
            .filter_map(|e| e.unconfirmed.front().map(|(_, _, ev)| ev.saturating_sub(1)))
            .chain(self.work.values().map(|(_, ev)| ev.saturating_sub(1)))
            .min()
            .unwrap_or(highest)
    }

    /// The highest controller generation among the incarnations held (a restarted
    /// producer numbers new controllers above it).
    pub fn max_generation(&self) -> u32 {
        self.entities
            .values()
            .filter_map(|e| e.incarnation.map(|i| i.generation))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc(g: u32) -> Incarnation {
        Incarnation {
            started_ms: 5,
            generation: g,
            nonce: 1,
        }
    }

    fn sent(e: &str, g: u32, seq: u64) -> QueueEvent {
        QueueEvent::Sent {
            entity_id: e.into(),
            incarnation: inc(g),
            seq_nr: seq,
            payload: vec![seq as u8],
        }
    }

    fn confirmed(e: &str, g: u32, seq: u64) -> QueueEvent {
        QueueEvent::Confirmed {
            entity_id: e.into(),
            incarnation: inc(g),
            seq_nr: seq,
        }
    }

    #[test]
    fn work_items_are_kept_until_done_in_any_order() {
        let mut s = DurableQueueState::new();
        let taken = |id: u64| QueueEvent::Taken {
            id,
            payload: vec![id as u8],
        };
        for (i, e) in [
            taken(1),
            taken(2),
            taken(3),
            QueueEvent::Done { ids: vec![2] },
            taken(2),
            QueueEvent::Done { ids: vec![1, 9] },
        ]
        .into_iter()
        .enumerate()
        {
            s.apply(i as u64 + 1, e);
        }
        // A repeated id is skipped; done ones are gone, in any order.
        assert_eq!(s.skipped, 1);
        assert_eq!(s.work().map(|(id, _)| id).collect::<Vec<_>>(), vec![3]);
        assert_eq!(s.highest_work_id(), 3);
        assert_eq!(s.unconfirmed(), 1);
        // Event 3 (message 3) is the oldest still needed.
        assert_eq!(s.deletable_up_to(6), 2);
        s.apply(7, QueueEvent::Done { ids: vec![3] });
        assert_eq!(s.deletable_up_to(7), 7);
    }

    #[test]
    fn the_fold_keeps_what_is_unconfirmed_and_says_what_may_be_deleted() {
        let mut s = DurableQueueState::new();
        let events = [
            sent("a", 1, 1),
            sent("a", 1, 2),
            sent("b", 2, 1),
            confirmed("a", 1, 1),
            sent("a", 1, 3),
            confirmed("b", 2, 1),
        ];
        for (i, e) in events.into_iter().enumerate() {
            s.apply(i as u64 + 1, e);
        }
        assert_eq!(s.unconfirmed(), 2);
        let (_, a) = s.entities().next().unwrap();
        assert_eq!(a.confirmed_seq_nr, 1);
        assert_eq!(
            a.unconfirmed
                .iter()
                .map(|(n, _, ev)| (*n, *ev))
                .collect::<Vec<_>>(),
            vec![(2, 2), (3, 5)]
        );
        // Event 2 (a's message 2) is the oldest still needed.
        assert_eq!(s.deletable_up_to(6), 1);
        s.apply(7, confirmed("a", 1, 3));
        assert_eq!(s.unconfirmed(), 0);
        assert_eq!(s.deletable_up_to(7), 7);
        assert_eq!(s.max_generation(), 0);
    }

    #[test]
    fn replaying_after_a_deletion_rebuilds_the_same_state() {
        let mut whole = DurableQueueState::new();
        let events = [
            sent("a", 1, 1),
            confirmed("a", 1, 1),
            sent("a", 1, 2),
            sent("a", 1, 3),
            confirmed("a", 1, 2),
        ];
        for (i, e) in events.iter().cloned().enumerate() {
            whole.apply(i as u64 + 1, e);
        }
        let cut = whole.deletable_up_to(5);
        assert_eq!(cut, 3);
        let mut rest = DurableQueueState::new();
        for (i, e) in events.iter().cloned().enumerate().skip(cut as usize) {
            rest.apply(i as u64 + 1, e);
        }
        assert_eq!(rest, whole);
        // A controller moved above a newer incarnation numbers on and keeps what it holds;
        // a newer controller numbered from 1 replaces an older one; a number out of order
        // is skipped.
        whole.apply(6, sent("a", 2, 4));
        let (_, a) = whole.entities().next().unwrap();
        assert_eq!(
            a.unconfirmed.iter().map(|(n, _, _)| *n).collect::<Vec<_>>(),
            vec![3, 4]
        );
        whole.apply(7, confirmed("a", 2, 4));
        whole.apply(8, sent("a", 4, 1));
        assert_eq!(whole.max_generation(), 4);
        whole.apply(9, sent("a", 4, 3));
        assert_eq!(whole.skipped, 1);
    }
}

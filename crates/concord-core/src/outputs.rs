//! [`Outputs`]: what a protocol machine has for its host — transmits, domain events and
//! timers — kept in one place so that every machine drains them the same way through the
//! [`crate::protocol::ProtocolMachine`] verbs (`poll_transmit`, `poll_event`,
//! `poll_timeout`) instead of each copying its own queues.

use std::collections::VecDeque;

use crate::protocol::Transmit;
use crate::timers::TimerTable;

/// A machine's outgoing messages (`M`), domain events (`E`) and timers (`T`, fired by
/// [`TimerTable::expired`] when the host calls `handle_timeout`). Bounded by what the machine
/// queues between two drains; the host drains everything after each input.
#[derive(Debug)]
pub struct Outputs<M, E, T: Ord> {
    /// Messages to send, in order.
    pub transmits: VecDeque<Transmit<M>>,
    /// Domain events, in order.
    pub events: VecDeque<E>,
    /// Timers, by deadline (ms).
    pub timers: TimerTable<T>,
}

impl<M, E, T: Ord> Default for Outputs<M, E, T> {
    fn default() -> Self {
        Outputs {
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            timers: TimerTable::default(),
        }
    }
}

impl<M, E, T: Ord + Clone> Outputs<M, E, T> {
    /// Empty outputs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit<M>> {
        self.transmits.pop_front()
    }

    /// Next domain event.
    pub fn poll_event(&mut self) -> Option<E> {
        self.events.pop_front()
    }

    /// The earliest timer deadline, ms.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.timers.next_deadline()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Lane;

    #[test]
    fn outputs_drain_in_order_and_report_the_earliest_timer() {
        let mut o: Outputs<u32, &str, u8> = Outputs::new();
        assert_eq!(o.poll_timeout(), None);
        o.events.push_back("a");
        o.events.push_back("b");
        o.timers.set(1, 50);
        o.timers.set(2, 20);
        assert_eq!(o.poll_event(), Some("a"));
        assert_eq!(o.poll_event(), Some("b"));
        assert_eq!(o.poll_event(), None);
        assert_eq!(o.poll_timeout(), Some(20));
        assert!(o.poll_transmit().is_none());
        for m in [1, 2] {
            o.transmits.push_back(Transmit {
                to: crate::address::Address::new("sys", "h", 1),
                to_uid: None,
                lane: Lane::Ordinary,
                message: m,
            });
        }
        assert_eq!(o.poll_transmit().map(|t| t.message), Some(1));
        assert_eq!(o.poll_transmit().map(|t| t.message), Some(2));
    }
}

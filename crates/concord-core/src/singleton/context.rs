//! `Ctx`: what the manager and the proxy of one singleton borrow from
//! [`crate::singleton::ClusterSingleton`] while they handle one input — the settings, this
//! node, the shared [`Outputs`] (transmits, events, timers) and the loopback queue of
//! messages to this node itself. The two halves talk to each other only through these
//! outputs (Akka's manager and proxy are separate actors that talk by messages).

use std::collections::VecDeque;

use crate::address::UniqueAddress;
use crate::outputs::Outputs;
use crate::protocol::{Lane, Transmit};

use super::event::SingletonEvent;
use super::message::{SingletonBody, SingletonMessage};
use super::settings::SingletonSettings;
use super::timer::SingletonTimer;

/// The singleton machine's outputs: messages, events for the runtime, timers (ms).
pub(super) type SingletonOutputs = Outputs<SingletonMessage, SingletonEvent, SingletonTimer>;

/// The machine's shared context for one input, borrowed by the manager or the proxy.
pub(super) struct Ctx<'a> {
    /// The singleton's settings (durations in ms).
    pub(super) settings: &'a SingletonSettings,
    /// This node.
    pub(super) self_node: &'a UniqueAddress,
    /// Transmits, events and timers for the host.
    pub(super) out: &'a mut SingletonOutputs,
    /// Messages to this node itself, handled before the input returns (in order).
    loopback: &'a mut VecDeque<SingletonBody>,
}

impl<'a> Ctx<'a> {
    /// The context over the machine's parts.
    pub(super) fn new(
        settings: &'a SingletonSettings,
        self_node: &'a UniqueAddress,
        out: &'a mut SingletonOutputs,
        loopback: &'a mut VecDeque<SingletonBody>,
    ) -> Self {
        Ctx {
            settings,
            self_node,
            out,
            loopback,
        }
    }

    /// Sends `body` of this singleton to `to`: a transmit on the ordinary lane, or the
    /// loopback queue when `to` is this node.
    pub(super) fn send(&mut self, to: &UniqueAddress, body: SingletonBody) {
        if to == self.self_node {
            self.loopback.push_back(body);
            return;
        }
        self.out.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message: SingletonMessage {
                name: self.settings.name.clone(),
                body,
            },
        });
    }

    /// Queues `event` for the runtime.
    pub(super) fn emit(&mut self, event: SingletonEvent) {
        self.out.events.push_back(event);
    }
}

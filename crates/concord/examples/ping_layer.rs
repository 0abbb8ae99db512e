// A complete, minimal layer: **ping**. Each node sends a `Ping` to every other member
// once per interval on the ordinary lane and learns the round-trip time from the `Pong`;
// a command asks a node for the latest round trip to each member.
//
// It has every part a layer has — the sans-IO machine (its messages, timers, membership
// handling, events), the codec (manifest + bytes, never panicking on any input) and the
// effects (a typed command, what an event does) — and runs in the tokio runtime and in
// the simulator alike (`concord-sim/tests/example_layer.rs` hosts this very file).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;

use bytes::Bytes;
use concord::host::{Effects, LayerEffects};
use concord::remote::codec::{Codec, DecodeError};
use concord_core::timers::TimerTable;
use concord_core::{
    Address, Lane, MemberStatus, MembershipChange, MembershipView, ProtocolId, ProtocolMachine,
    Transmit, UniqueAddress,
};
use futures_channel::oneshot;

/// The protocol id of ping (application ids start at 1000).
pub const PING: ProtocolId = ProtocolId(1000);

/// Ping's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PingMessage {
    /// "Answer me": the sender's clock when it sent it, ms.
    Ping { sent_ms: u64 },
    /// The answer, echoing the ping's time.
    Pong { sent_ms: u64 },
}

/// What the machine tells its effects: a round trip to `peer` took `rtt_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundTrip {
    /// Who answered.
    pub peer: UniqueAddress,
    /// How long the round trip took, ms.
    pub rtt_ms: u64,
}

/// The machine's one timer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PingTimer;

/// The sans-IO machine: who to ping, and when.
pub struct PingMachine {
    me: UniqueAddress,
    interval_ms: u64,
    peers: BTreeSet<UniqueAddress>,
    timers: TimerTable<PingTimer>,
    transmits: VecDeque<Transmit<PingMessage>>,
    events: VecDeque<RoundTrip>,
}

impl PingMachine {
    /// Pings every other Up member every `interval_ms`, starting at `now_ms`.
    pub fn new(me: UniqueAddress, interval_ms: u64, now_ms: u64) -> Self {
        let mut timers = TimerTable::new();
        timers.set(PingTimer, now_ms + interval_ms);
        PingMachine {
            me,
            interval_ms,
            peers: BTreeSet::new(),
            timers,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    fn send(&mut self, to: &UniqueAddress, message: PingMessage) {
        self.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message,
        });
    }
}

impl ProtocolMachine for PingMachine {
    type Message = PingMessage;
    type Event = RoundTrip;

    fn protocol(&self) -> ProtocolId {
        PING
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: PingMessage) {
        match message {
            PingMessage::Ping { sent_ms } => self.send(from, PingMessage::Pong { sent_ms }),
            PingMessage::Pong { sent_ms } => self.events.push_back(RoundTrip {
                peer: from.clone(),
                rtt_ms: now_ms.saturating_sub(sent_ms),
            }),
        }
    }

    fn handle_membership(&mut self, _now_ms: u64, view: &MembershipView, _: MembershipChange) {
        self.peers = view
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Up && m.unique_address != self.me)
            .map(|m| m.unique_address.clone())
            .collect();
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        if self.timers.expired(now_ms).is_empty() {
            return;
        }
        for p in self.peers.clone() {
            self.send(&p, PingMessage::Ping { sent_ms: now_ms });
        }
        self.timers.set(PingTimer, now_ms + self.interval_ms);
    }

    fn poll_transmit(&mut self) -> Option<Transmit<PingMessage>> {
        self.transmits.pop_front()
    }

    fn poll_event(&mut self) -> Option<RoundTrip> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.timers.next_deadline()
    }
}

/// Ping's wire form: manifest 1 (`Ping`) or 2 (`Pong`), the time as 8 bytes big-endian.
pub struct PingCodec;

impl Codec for PingCodec {
    type Message = PingMessage;

    fn encode(&self, message: &PingMessage) -> (u32, Bytes) {
        let (manifest, ms) = match message {
            PingMessage::Ping { sent_ms } => (1, *sent_ms),
            PingMessage::Pong { sent_ms } => (2, *sent_ms),
        };
        (manifest, Bytes::copy_from_slice(&ms.to_be_bytes()))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<PingMessage, DecodeError> {
        let ms = <[u8; 8]>::try_from(payload)
            .map(u64::from_be_bytes)
            .map_err(|_| DecodeError::Invalid(format!("{} bytes, not 8", payload.len())))?;
        match manifest {
            1 => Ok(PingMessage::Ping { sent_ms: ms }),
            2 => Ok(PingMessage::Pong { sent_ms: ms }),
            m => Err(DecodeError::UnknownManifest(m)),
        }
    }
}

/// What a handle asks the layer.
pub enum PingCommand {
    /// The latest round trip to each member, ms.
    RoundTrips {
        /// Where the answer goes.
        reply: oneshot::Sender<BTreeMap<Address, u64>>,
    },
}

/// Ping's effects: it keeps the latest round trip per member and answers the command.
#[derive(Default)]
pub struct PingEffects {
    latest: BTreeMap<Address, u64>,
}

impl LayerEffects for PingEffects {
    type Machine = PingMachine;
    type Command = PingCommand;
    type Completion = Infallible;

    fn name(&self) -> &'static str {
        "ping"
    }

    fn command(&mut self, _fx: &mut Effects<'_, Self>, command: PingCommand) {
        match command {
            PingCommand::RoundTrips { reply } => {
                let _ = reply.send(self.latest.clone());
            }
        }
    }

    fn completion(&mut self, _fx: &mut Effects<'_, Self>, never: Infallible) {
        match never {}
    }

    fn event(&mut self, _fx: &mut Effects<'_, Self>, event: RoundTrip) {
        self.latest.insert(event.peer.address, event.rtt_ms);
    }
}

/// Hosts the layer by hand (no runtime, no network): a `Ping` in, a `Pong` out.
#[allow(dead_code)]
fn main() {
    use std::sync::Arc;

    use concord::host::{Collect, HostInput, LayerHost, ManualClock};
    use concord::remote::codec::Inbound;

    struct Inline;
    impl concord::host::Spawner for Inline {
        fn spawn(&self, _task: concord::host::Task) {}
        fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send + 'static>) {
            work()
        }
    }

    let me = UniqueAddress::new(Address::new("demo", "10.0.0.1", 25520), 1);
    let peer = UniqueAddress::new(Address::new("demo", "10.0.0.2", 25520), 2);
    let clock = ManualClock::new(1_000);
    let out = Collect::default();
    let mut host = LayerHost::new(
        PingMachine::new(me.clone(), 1_000, 1_000),
        PingEffects::default(),
        me,
        Arc::new(clock),
        Arc::new(Inline),
        Box::new(out.clone()),
    );
    host.handle(HostInput::Inbound(Inbound {
        from: peer,
        messages: vec![(PingMessage::Ping { sent_ms: 990 }, 8)],
        traces: Vec::new(),
    }));
    host.flush();
    let sent = out.take();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].message, PingMessage::Pong { sent_ms: 990 });
}

//! [`drive`] with a layer that stops itself (as the membership layer does on `Shutdown`):
//! no input after the stop is handled, the turn is flushed ([`LayerEffects::flushed`]
//! included) and the host comes back for what the layer does after.

use std::sync::Arc;

use concord_core::{
    Address, MembershipChange, MembershipView, ProtocolId, ProtocolMachine, Transmit, UniqueAddress,
};
use tokio::sync::mpsc;

use super::{drive, HostChannels};
use crate::host::{Collect, Effects, LayerEffects, LayerHost, SystemClock};
use crate::runtime::TokioSpawner;

/// A machine that counts what it is told and says nothing.
#[derive(Default)]
struct Counter {
    told: u32,
}

impl ProtocolMachine for Counter {
    type Message = ();
    type Event = ();

    fn protocol(&self) -> ProtocolId {
        ProtocolId(1000)
    }
    fn handle_message(&mut self, _: u64, _: &UniqueAddress, _: ()) {}
    fn handle_membership(&mut self, _: u64, _: &MembershipView, _: MembershipChange) {}
    fn handle_timeout(&mut self, _: u64) {}
    fn poll_transmit(&mut self) -> Option<Transmit<()>> {
        None
    }
    fn poll_event(&mut self) -> Option<()> {
        None
    }
    fn poll_timeout(&self) -> Option<u64> {
        None
    }
}

enum Cmd {
    Tell,
    Stop,
}

#[derive(Default)]
struct Fx {
    flushes: u32,
    stopped: bool,
}

impl LayerEffects for Fx {
    type Machine = Counter;
    type Command = Cmd;
    type Completion = ();

    fn name(&self) -> &'static str {
        "test"
    }
    fn command(&mut self, fx: &mut Effects<'_, Self>, command: Cmd) {
        match command {
            Cmd::Tell => fx.machine.told += 1,
            Cmd::Stop => fx.stop(),
        }
    }
    fn completion(&mut self, _: &mut Effects<'_, Self>, _: ()) {}
    fn event(&mut self, _: &mut Effects<'_, Self>, _: ()) {}
    fn tick_interval_ms(&self) -> Option<u64> {
        None
    }
    fn flushed(&mut self, _: &mut Effects<'_, Self>) {
        self.flushes += 1;
    }
    fn stopped(&mut self, _: &mut Counter) {
        self.stopped = true;
    }
}

#[tokio::test]
async fn a_layer_that_stops_takes_no_further_input_and_is_flushed_and_returned() {
    let clock = SystemClock::new();
    let node = UniqueAddress::new(Address::new("test", "127.0.0.1", 1), 1);
    let host = LayerHost::new(
        Counter::default(),
        Fx::default(),
        node,
        Arc::new(clock),
        Arc::new(TokioSpawner::current()),
        Box::new(Collect::<()>::default()),
    );
    let (tx, rx) = mpsc::channel(8);
    for c in [Cmd::Tell, Cmd::Tell, Cmd::Stop, Cmd::Tell] {
        assert!(tx.try_send(c).is_ok());
    }
    let channels = HostChannels {
        commands: Some(rx),
        ..HostChannels::default()
    };
    let host = drive(host, clock, channels).await;
    assert!(host.is_stopped());
    let (machine, effects) = host.into_parts();
    assert_eq!(machine.told, 2, "the command after the stop is not handled");
    assert_eq!(
        effects.flushes, 2,
        "the first flush and the stopping turn's"
    );
    assert!(effects.stopped);
    assert!(
        tx.try_send(Cmd::Tell).is_err(),
        "the queue went with the host"
    );
}

//! [`ShardingExiting`]: the `cluster-exiting` work of a simulated node that hosts the
//! sharding layer, as its coordinated shutdown runs it in the runtime.

use concord::host::{HostInput, LayerHost};
use concord::sharding::{ShardingCommand, ShardingEffects};
use futures_channel::oneshot;

/// The `cluster-exiting` work of a node, as its coordinated shutdown runs it: hand the
/// shards over (`cluster-sharding-shutdown-region`, 10 s, then stop every entity), then
/// the coordinator (`cluster-exiting`, 10 s).
#[derive(Default)]
pub struct ShardingExiting {
    since: Option<u64>,
    graceful: Option<oneshot::Receiver<()>>,
    graceful_done: bool,
    exiting: Option<oneshot::Receiver<()>>,
    exiting_done: bool,
}

impl ShardingExiting {
    /// One step at `now`, ms; true once the node may stop.
    pub fn step(&mut self, host: &mut LayerHost<ShardingEffects>, now: u64) -> bool {
        let started = *self.since.get_or_insert(now);
        if self.graceful.is_none() && !self.graceful_done {
            let (done, rx) = oneshot::channel();
            host.handle(HostInput::Command(ShardingCommand::GracefulShutdown {
                done,
            }));
            self.graceful = Some(rx);
        }
        if let Some(rx) = &mut self.graceful {
            if !matches!(rx.try_recv(), Ok(None)) {
                self.graceful = None;
                self.graceful_done = true;
            }
        }
        let timed_out = now >= started + 10_000;
        if timed_out && !self.graceful_done && self.exiting.is_none() {
            host.handle(HostInput::Command(ShardingCommand::StopHosting));
        }
        if (self.graceful_done || timed_out) && self.exiting.is_none() && !self.exiting_done {
            let (done, rx) = oneshot::channel();
            host.handle(HostInput::Command(ShardingCommand::SelfExiting { done }));
            self.exiting = Some(rx);
        }
        if let Some(rx) = &mut self.exiting {
            if !matches!(rx.try_recv(), Ok(None)) {
                self.exiting = None;
                self.exiting_done = true;
            }
        }
        self.exiting_done || now >= started + 20_000
    }
}

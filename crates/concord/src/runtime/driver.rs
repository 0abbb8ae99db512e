//! [`drive`]: the one driver loop of the runtime. Every layer's host — membership,
//! singleton, distributed data, sharding, the key-value store, an application's own — runs
//! in it: it waits for the next input (the end of the node, a completion of background
//! work, a command from a handle, messages from a peer, a membership change, the host's
//! deadline), takes every other input that is ready too (up to [`INPUTS_PER_TURN`]) and
//! lets the host flush once. Protocol decisions and effects are the host's; this loop only
//! moves inputs and time.
//!
//! The membership layer runs here too, without a membership feed (it is the source) and
//! without an `ended` future (it ends on its own `Shutdown` or `Stop` command, through
//! [`crate::host::Effects::stop`]: the loop takes no further input, flushes and returns).
//! What must still happen asynchronously at its end — draining the lanes, closing the
//! listener, answering `Shutdown` — its daemon does after [`drive`] returns the host.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{FutureExt as _, Stream, StreamExt as _};
use tokio::sync::{mpsc, Notify};

use crate::host::{
    HostInput, LayerEffects, LayerHost, MembershipInput, MessageOf, SystemClock, INPUTS_PER_TURN,
};
use crate::remote::codec::Inbound;

/// The membership feed of a host: [`MembershipInput`]s in publication order.
pub type MembershipFeed = Pin<Box<dyn Stream<Item = MembershipInput> + Send>>;

/// What a host's loop waits on besides its own completions.
pub struct HostChannels<E: LayerEffects> {
    /// Commands from the layer's handles (`None`: the layer has none).
    pub commands: Option<mpsc::Receiver<E::Command>>,
    /// The layer's protocol messages, a batch per read of a peer's connection.
    pub inbound: Option<mpsc::Receiver<Inbound<MessageOf<E>>>>,
    /// Membership (`None` for the membership layer itself, which is its source).
    pub membership: Option<MembershipFeed>,
    /// Resolves when the node is gone (its membership ended): the loop stops.
    pub ended: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Notified when the host may take commands again (an outbound backlog drained).
    pub wake: Option<Arc<Notify>>,
}

impl<E: LayerEffects> Default for HostChannels<E> {
    fn default() -> Self {
        HostChannels {
            commands: None,
            inbound: None,
            membership: None,
            ended: None,
            wake: None,
        }
    }
}

/// Which input source a wait returned from, and what it brought.
enum Next<E: LayerEffects> {
    Input(HostInput<E>),
    /// Nothing to handle, but what the host waits for may have changed (backpressure).
    Wake,
    /// A source closed or the node ended: stop.
    Stop,
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Runs `host` until the node ends, a channel the host needs closes, or the layer asks to
/// stop; returns the host (stopped) for whatever the layer does after (the membership
/// layer drains the transport).
pub async fn drive<E: LayerEffects>(
    mut host: LayerHost<E>,
    clock: SystemClock,
    mut ch: HostChannels<E>,
) -> LayerHost<E> {
    let Some(mut completions) = host.take_completions() else {
        host.stop();
        return host;
    };
    host.flush();
    // Which of commands and inbound messages goes first: under load neither the handles'
    // commands nor the peers' messages (the answers to those commands among them) may
    // starve the other.
    let mut commands_first = false;
    while !host.is_stopped() {
        let deadline = host
            .next_deadline()
            .map(|t| tokio::time::Instant::from_std(clock.instant_at(t)));
        let accepting = host.accepting_commands();
        commands_first = !commands_first;
        let commands = async {
            match (&mut ch.commands, accepting) {
                (Some(rx), true) => rx.recv().await,
                _ => std::future::pending().await,
            }
        };
        let inbound = async {
            match &mut ch.inbound {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let membership = async {
            match &mut ch.membership {
                Some(s) => s.next().await,
                None => std::future::pending().await,
            }
        };
        let wake = async {
            match &ch.wake {
                Some(w) => w.notified().await,
                None => std::future::pending().await,
            }
        };
        let ended = async {
            match &mut ch.ended {
                Some(f) => f.as_mut().await,
                None => std::future::pending().await,
            }
        };
        macro_rules! wait {
            ($a:ident = $fa:expr => $oa:expr, $b:ident = $fb:expr => $ob:expr) => {
                tokio::select! {
                    biased;
                    _ = ended => Next::Stop,
                    c = completions.next() => {
                        c.map_or(Next::Stop, |c| Next::Input(HostInput::Completion(c)))
                    }
                    $a = $fa => { $oa }
                    $b = $fb => { $ob }
                    m = membership => m.map_or(Next::Stop, |m| Next::Input(HostInput::Membership(m))),
                    _ = sleep_until(deadline) => Next::Input(HostInput::Timeout),
                    _ = wake => Next::Wake,
                }
            };
        }
        let next: Next<E> = if commands_first {
            wait!(c = commands => c.map_or(Next::Stop, |c| Next::Input(HostInput::Command(c))),
                  b = inbound => b.map_or(Next::Stop, |b| Next::Input(HostInput::Inbound(b))))
        } else {
            wait!(b = inbound => b.map_or(Next::Stop, |b| Next::Input(HostInput::Inbound(b))),
                  c = commands => c.map_or(Next::Stop, |c| Next::Input(HostInput::Command(c))))
        };
        let first = match next {
            Next::Input(i) => i,
            Next::Wake => continue,
            Next::Stop => break,
        };
        host.handle(first);
        // Take what else is ready before carrying the outputs out: one flush (one lane
        // write per peer) for many inputs.
        for _ in 1..INPUTS_PER_TURN {
            // A layer that asked to stop takes nothing more (the membership layer's
            // `Shutdown`: its last outputs go out, then its runner closes remoting).
            if host.is_stopped() {
                break;
            }
            match ready_input(&mut host, &mut ch, &mut completions) {
                Some(Next::Input(i)) => host.handle(i),
                Some(Next::Wake) => {}
                Some(Next::Stop) => {
                    host.flush();
                    host.stop();
                    return host;
                }
                None => break,
            }
        }
        host.flush();
    }
    host.stop();
    host
}

/// An input that is ready now, without waiting.
fn ready_input<E: LayerEffects>(
    host: &mut LayerHost<E>,
    ch: &mut HostChannels<E>,
    completions: &mut futures_channel::mpsc::UnboundedReceiver<E::Completion>,
) -> Option<Next<E>> {
    if let Ok(c) = completions.try_recv() {
        return Some(Next::Input(HostInput::Completion(c)));
    }
    if let Some(rx) = &mut ch.inbound {
        match rx.try_recv() {
            Ok(b) => return Some(Next::Input(HostInput::Inbound(b))),
            Err(mpsc::error::TryRecvError::Disconnected) => return Some(Next::Stop),
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
    }
    if let (Some(rx), true) = (&mut ch.commands, host.accepting_commands()) {
        match rx.try_recv() {
            Ok(c) => return Some(Next::Input(HostInput::Command(c))),
            Err(mpsc::error::TryRecvError::Disconnected) => return Some(Next::Stop),
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
    }
    if let Some(s) = &mut ch.membership {
        match s.next().now_or_never() {
            Some(Some(m)) => return Some(Next::Input(HostInput::Membership(m))),
            Some(None) => return Some(Next::Stop),
            None => {}
        }
    }
    if host.next_deadline().is_some_and(|t| t <= host.now()) {
        return Some(Next::Input(HostInput::Timeout));
    }
    None
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;

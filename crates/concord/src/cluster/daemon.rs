//! The membership daemon: the membership layer's host ([`MembershipEffects`] around the
//! sans-IO `ClusterCore`) run by the runtime's one driver loop ([`drive`]), like every
//! other layer, and what only the membership layer does around it — the transport's
//! quarantine reports fed into the host as completions while it runs, and remoting closed
//! once it has stopped:
//!
//! - on `Command::Shutdown` (the `cluster-shutdown` phase) the host's last outputs go out,
//!   the driver returns, then queued messages drain (at most [`DRAIN_ON_STOP`]), the
//!   transport shuts down, the listener closes (at most [`LISTENER_CLOSE_LIMIT`]), the end
//!   of membership is recorded and the command is answered;
//! - on `Command::Stop` (or a queue the host needs closing) the transport shuts down at
//!   once, the listener closes (at most [`LISTENER_CLOSE_LIMIT`]), membership ends as
//!   `Stopped` and the coordinated shutdown is aborted.

use std::convert::Infallible;
use std::time::Duration;

use concord_core::ShutdownReason;
use tokio::sync::mpsc;
use tracing::{info, warn};

use std::sync::Arc;

use super::command::{Exit, MembershipCompletion};
use super::effects::MembershipEffects;
use super::shared::Shared;
use crate::clock::Clock;
use crate::host::LayerHost;
use crate::remote::{Transport, TransportEvent};
use crate::runtime::{drive, HostChannels};

/// How long a graceful stop waits for queued messages to be written, at most (it goes on
/// as soon as every lane's queue is empty; a loaded machine may need more than a moment).
const DRAIN_ON_STOP: Duration = Duration::from_secs(2);

/// How long a stop waits for the listening socket to close, at most.
const LISTENER_CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// Runs the membership host until `Shutdown` or `Stop` (or a queue it needs closes), then
/// closes `transport`; see the module docs. `transport_events` are the transport's reports.
pub(crate) async fn run(
    host: LayerHost<MembershipEffects>,
    clock: Clock,
    channels: HostChannels<MembershipEffects>,
    mut transport_events: mpsc::UnboundedReceiver<TransportEvent>,
    transport: Transport,
    shared: Arc<Shared>,
) {
    info!(uid = host.node().uid, "cluster node started");
    let completions = host.completions();
    // The transport's reports become completions of the host; this ends with the host.
    let forward = async move {
        while let Some(event) = transport_events.recv().await {
            match event {
                TransportEvent::QuarantinedBy(peer) => {
                    completions.send(MembershipCompletion::QuarantinedBy(peer));
                }
            }
        }
        std::future::pending::<Infallible>().await
    };
    let host = tokio::select! {
        host = drive(host, clock, channels) => host,
        never = forward => match never {},
    };
    let (core, mut effects) = host.into_parts();
    match effects.take_exit() {
        Some(Exit::Shutdown(reply)) => {
            let reason = core
                .shutdown_reason()
                .or(shared.shutdown.reason())
                .unwrap_or(ShutdownReason::Requested);
            info!(?reason, "membership stopped; closing remoting");
            transport.drain(DRAIN_ON_STOP).await;
            transport.shutdown();
            transport.listener_closed(LISTENER_CLOSE_LIMIT).await;
            effects.sinks_mut().ended(reason);
            let _ = reply.send(());
        }
        Some(Exit::Stop) | None => {
            warn!("cluster node stopped without leaving");
            transport.shutdown();
            transport.listener_closed(LISTENER_CLOSE_LIMIT).await;
            effects.sinks_mut().ended(ShutdownReason::Stopped);
            shared.shutdown.abort(ShutdownReason::Stopped);
        }
    }
}

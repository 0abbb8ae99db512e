//! The tokio runtime around the layer hosts: [`drive`], the one driver loop, and
//! [`TokioSpawner`]. Every layer — membership included — starts its host with
//! [`spawn_host`].

mod backlog;
mod driver;
mod outbound;
mod spawner;

pub use backlog::{BackloggedOutbound, BACKPRESSURE_FRAMES, MAX_BACKLOG};
pub use driver::{drive, HostChannels, MembershipFeed};
pub use outbound::{LaneOutbound, SendObserver};
pub use spawner::TokioSpawner;

use crate::host::{LayerEffects, LayerHost, SystemClock};

/// Where a host's loop runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostThread {
    /// A task on the node's runtime (effects never block).
    Task,
    /// A thread of its own, on the node's runtime (`Handle::block_on`): for layers whose
    /// effects block on storage (reads, fsyncs).
    Dedicated,
}

/// Starts `host`'s loop; the returned handle resolves to the stopped host.
pub fn spawn_host<E: LayerEffects>(
    host: LayerHost<E>,
    clock: SystemClock,
    channels: HostChannels<E>,
    thread: HostThread,
) -> tokio::sync::oneshot::Receiver<LayerHost<E>> {
    let (done, rx) = tokio::sync::oneshot::channel();
    let span = tracing::info_span!("layer", layer = host.name());
    match thread {
        HostThread::Task => {
            tokio::spawn(tracing::Instrument::instrument(
                async move {
                    let host = drive(host, clock, channels).await;
                    let _ = done.send(host);
                },
                span,
            ));
        }
        HostThread::Dedicated => {
            let rt = tokio::runtime::Handle::current();
            let name = format!("concord-{}", host.name());
            let spawned = std::thread::Builder::new().name(name).spawn(move || {
                let _g = span.enter();
                let host = rt.block_on(drive(host, clock, channels));
                let _ = done.send(host);
            });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a layer's thread");
            }
        }
    }
    rx
}

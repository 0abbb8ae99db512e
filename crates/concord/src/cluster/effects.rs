//! [`MembershipEffects`]: the membership layer's part of its [`crate::host::LayerHost`],
//! the same in the tokio runtime and in the simulator. The machine is the sans-IO
//! [`ClusterCore`]; the effects turn [`Command`]s into its operations, feed it lease
//! results and the transport's quarantine reports ([`MembershipCompletion`]), start lease
//! requests and write the membership record, and after each turn
//! ([`LayerEffects::flushed`]) hand the rest to the host's [`MembershipSinks`]:
//! quarantines, the start of the coordinated shutdown, the end of membership, and the new
//! [`MembershipView`] with the turn's event batch. Protocol decisions all live in the core.

use std::path::PathBuf;
use std::sync::Arc;

use concord_core::{
    ClusterCore, ClusterEvent, ClusterIdentity, ClusterMessage, LeaseRequest, MemberStatus,
};
use tracing::{info, warn};

use super::command::{Command, Exit, MembershipCompletion};
use super::membership_record::{self, RecordFile};
use super::membership_sinks::MembershipSinks;
use crate::host::{Effects, LayerEffects};
use crate::lease::Lease;

/// The membership layer's effects; see the module docs.
pub struct MembershipEffects {
    sinks: Box<dyn MembershipSinks>,
    lease: Option<Arc<dyn Lease>>,
    /// The core's `state_changes` as of the last publication.
    published: u64,
    /// The turn's events, published as one batch at the end of the turn.
    events: Vec<ClusterEvent>,
    /// Where the membership record is kept (`None`: `cluster.membership-record = off`).
    record_dir: Option<PathBuf>,
    /// The cluster identity the record was last written for (`Some(None)`: a cluster
    /// without identity); `None` until written.
    record_written: Option<Option<ClusterIdentity>>,
    /// How the host was asked to end (`None`: it has not been, or a queue closed).
    exit: Option<Exit>,
}

impl MembershipEffects {
    /// Effects handing their outputs to `sinks`, asking `lease` when the split brain
    /// resolver needs it (none: every acquisition is refused), and keeping the membership
    /// record in `record_dir` (`None`: off).
    pub fn new(
        sinks: Box<dyn MembershipSinks>,
        lease: Option<Arc<dyn Lease>>,
        record_dir: Option<PathBuf>,
    ) -> Self {
        MembershipEffects {
            sinks,
            lease,
            published: 0,
            events: Vec::new(),
            record_dir,
            record_written: None,
            exit: None,
        }
    }

    /// The sinks (the runtime's daemon records the end of membership through them).
    pub fn sinks_mut(&mut self) -> &mut dyn MembershipSinks {
        &mut *self.sinks
    }

    /// How the host was asked to end, once.
    pub fn take_exit(&mut self) -> Option<Exit> {
        self.exit.take()
    }

    /// Writes the membership record once this node is Up or WeaklyUp in a cluster, and again
    /// when the cluster's identity changes (in a blocking task: temp file, fsync, rename).
    fn write_membership_record(&mut self, fx: &Effects<'_, Self>) {
        let Some(dir) = self.record_dir.clone() else {
            return;
        };
        let core = &*fx.machine;
        let up = core.is_initialized()
            && core.shutdown_reason().is_none()
            && matches!(
                core.self_member().status,
                MemberStatus::Up | MemberStatus::WeaklyUp
            );
        let identity = core.cluster_identity();
        if !up || self.record_written == Some(identity) {
            return;
        }
        self.record_written = Some(identity);
        let record = RecordFile::new(core.self_unique_address(), identity);
        fx.spawn_blocking(Box::new(move || {
            match membership_record::write(&dir, &record) {
                Ok(()) => info!(
                    file = %membership_record::path(&dir).display(),
                    cluster = record.cluster_id.as_deref().unwrap_or("unknown"),
                    "membership record written"
                ),
                Err(e) => warn!(
                    dir = %dir.display(), error = %e,
                    "cannot write the membership record; after a restart this node may form a new cluster on seed-node-timeout"
                ),
            }
        }));
    }

    /// Starts a lease acquisition or release; the acquisition's outcome comes back as
    /// [`MembershipCompletion::LeaseResult`] (not granted at once without a lease).
    fn lease_request(&self, fx: &Effects<'_, Self>, r: LeaseRequest) {
        let tx = fx.completions().clone();
        let Some(lease) = self.lease.clone() else {
            if r == LeaseRequest::Acquire {
                tx.send(MembershipCompletion::LeaseResult(false));
            }
            return;
        };
        match r {
            LeaseRequest::Acquire => fx.spawn(Box::pin(async move {
                let granted = match lease.acquire().await {
                    Ok(g) => g,
                    Err(e) => {
                        warn!(error = %e, "lease acquisition failed");
                        false
                    }
                };
                tx.send(MembershipCompletion::LeaseResult(granted));
            })),
            LeaseRequest::Release => fx.spawn(Box::pin(async move {
                match lease.release().await {
                    Ok(_) => info!("lease released"),
                    Err(e) => warn!(error = %e, "lease release failed"),
                }
            })),
            _ => {}
        }
    }
}

impl LayerEffects for MembershipEffects {
    type Machine = ClusterCore;
    type Command = Command;
    type Completion = MembershipCompletion;

    fn name(&self) -> &'static str {
        "membership"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: Command) {
        let now = fx.now_ms;
        let core = &mut *fx.machine;
        let (result, reply) = match command {
            Command::Join(a, r) => (core.join(now, &a), r),
            Command::JoinSeedNodes(s, r) => (core.join_seed_nodes(now, &s), r),
            Command::Leave(a, r) => (core.leave(now, &a), r),
            Command::Down(a, r) => (core.down(now, &a), r),
            Command::PrepareForFullShutdown(r) => (core.prepare_for_full_cluster_shutdown(now), r),
            Command::IslandProbeTargets(t) => {
                core.set_island_probe_targets(t);
                return;
            }
            Command::ExitingCompleted(r) => {
                core.exiting_completed(now);
                let _ = r.send(());
                return;
            }
            Command::Shutdown(reply) => {
                self.exit = Some(Exit::Shutdown(reply));
                fx.stop();
                return;
            }
            Command::Stop => {
                self.exit = Some(Exit::Stop);
                fx.stop();
                return;
            }
        };
        let _ = reply.send(result);
    }

    fn completion(&mut self, fx: &mut Effects<'_, Self>, completion: MembershipCompletion) {
        match completion {
            MembershipCompletion::LeaseResult(granted) => {
                info!(granted, "lease acquisition result");
                fx.machine.handle_lease_result(granted);
            }
            MembershipCompletion::QuarantinedBy(peer) => {
                fx.machine.handle_quarantined_by_peer(&peer);
            }
        }
    }

    fn event(&mut self, _fx: &mut Effects<'_, Self>, event: ClusterEvent) {
        self.events.push(event);
    }

    fn received(&mut self, message: &ClusterMessage, bytes: usize) {
        self.sinks.received(message, bytes);
    }

    /// No housekeeping tick: the core's own timers (gossip, heartbeats) end turns often
    /// enough for the once-a-second metrics.
    fn tick_interval_ms(&self) -> Option<u64> {
        None
    }

    fn flushed(&mut self, fx: &mut Effects<'_, Self>) {
        while let Some(node) = fx.machine.poll_quarantine() {
            self.sinks.quarantine(&node);
        }
        while let Some(r) = fx.machine.poll_lease_request() {
            self.lease_request(fx, r);
        }
        let events = std::mem::take(&mut self.events);
        // When the coordinated shutdown starts is the core's decision: Exiting, Downed,
        // or the core's own shutdown.
        while let Some(reason) = fx.machine.poll_coordinated_shutdown() {
            self.sinks.start_coordinated_shutdown(reason);
        }
        if let Some(reason) = fx.machine.shutdown_reason() {
            self.sinks.ended(reason);
        }
        let version = fx.machine.state_changes();
        let changed = !events.is_empty() || version != self.published;
        if changed {
            self.write_membership_record(fx);
            self.published = version;
        }
        let publication = changed.then(|| (Arc::new(fx.machine.membership_view()), events));
        self.sinks.turn_ended(fx.machine, fx.now_ms, publication);
    }
}

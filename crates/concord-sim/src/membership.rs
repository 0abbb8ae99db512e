//! The membership layer on a simulated node: the real [`MembershipEffects`] around the
//! node's [`ClusterCore`] on the real layer host ([`SimHost`]), as the tokio runtime hosts
//! it, with [`SimSinks`] in place of the runtime's transport, `watch` channels and
//! coordinated shutdown: they record the outputs for the simulator, which carries them
//! out (refuses the quarantined, feeds the views and events to the node's other layers,
//! runs the `cluster-exiting` phase). Leases come from the simulation's one [`SimLease`]
//! through the same effects that ask a Kubernetes lease in production.

use std::sync::{Arc, Mutex};

use concord::cluster::membership_sinks::{MembershipSinks, Publication};
use concord::cluster::MembershipEffects;
use concord::host::ManualClock;
use concord_core::{ClusterCore, ClusterMessage, ShutdownReason, Transmit, UniqueAddress};

use crate::layer_host::{SimHost, SimRuntime};
use crate::lease::{NodeLease, SimLease};
use crate::message::SimMessage;

/// What the membership layer's sinks recorded since the simulator last took it.
#[derive(Default)]
pub struct MembershipOutputs {
    /// Incarnations to refuse from now on.
    pub quarantined: Vec<UniqueAddress>,
    /// The coordinated shutdown was asked to start, for these reasons.
    pub coordinated_shutdown: Vec<ShutdownReason>,
    /// Each changed turn's view and events.
    pub publications: Vec<Publication>,
}

/// The simulator's [`MembershipSinks`]: they record; see the module docs.
#[derive(Clone, Default)]
pub struct SimSinks(Arc<Mutex<MembershipOutputs>>);

impl SimSinks {
    /// What was recorded since the last call.
    pub fn take(&self) -> MembershipOutputs {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn with(&self, f: impl FnOnce(&mut MembershipOutputs)) {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl MembershipSinks for SimSinks {
    fn received(&mut self, _message: &ClusterMessage, _bytes: usize) {}

    fn quarantine(&mut self, node: &UniqueAddress) {
        self.with(|o| o.quarantined.push(node.clone()));
    }

    fn start_coordinated_shutdown(&mut self, reason: ShutdownReason) {
        self.with(|o| o.coordinated_shutdown.push(reason));
    }

    /// The simulator reads the end of membership from the core itself.
    fn ended(&mut self, _reason: ShutdownReason) {}

    fn turn_ended(&mut self, _core: &ClusterCore, _now_ms: u64, publication: Option<Publication>) {
        if let Some(p) = publication {
            self.with(|o| o.publications.push(p));
        }
    }
}

/// The membership layer of one simulated node.
pub struct SimMembership {
    /// The layer's host (the machine is `host.host.machine()`).
    pub host: SimHost<MembershipEffects>,
    /// Its sinks' records.
    pub sinks: SimSinks,
}

impl SimMembership {
    /// Hosts `core` with the real effects, asking `lease` on `core`'s behalf, in virtual
    /// time read from `clock`. No membership record (it is a file).
    pub fn new(core: ClusterCore, lease: Arc<Mutex<SimLease>>, clock: ManualClock) -> Self {
        let node = core.self_unique_address().clone();
        let sinks = SimSinks::default();
        let effects = MembershipEffects::new(
            Box::new(sinks.clone()),
            Some(Arc::new(NodeLease::new(lease, node.clone(), clock.clone()))),
            None,
        );
        let runtime = SimRuntime::new(clock.clone());
        SimMembership {
            host: SimHost::new(core, effects, node, clock, runtime),
            sinks,
        }
    }

    /// Settles the host and takes its transmits, as simulated-network messages.
    pub fn take_transmits(&mut self) -> Vec<Transmit<SimMessage>> {
        self.host
            .take_transmits()
            .into_iter()
            .map(|t| t.map(SimMessage::Membership))
            .collect()
    }

    /// The membership machine.
    pub fn core(&self) -> &ClusterCore {
        self.host.host.machine()
    }
}

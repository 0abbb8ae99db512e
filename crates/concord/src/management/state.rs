//! [`ManagementState`]: what the management routes act on.

use crate::cluster::Cluster;
use crate::remote::Transport;

/// What the management routes act on.
#[derive(Clone)]
pub struct ManagementState {
    /// Membership.
    pub cluster: Cluster,
    /// Remoting (counters for `/metrics`, link faults for `/testkit`).
    pub transport: Transport,
    /// `testkit.fault-injection`: the `/testkit` routes answer only when set.
    pub fault_injection: bool,
    /// Warnings about this node's configuration shown in `GET /cluster/members`
    /// (`warnings`), e.g. remoting exposed without protection (`remote.insecure`).
    pub warnings: Vec<String>,
    /// The layers' sections of the dashboard (`/dashboard`).
    pub panels: Vec<super::DashboardPanel>,
    /// The node's clock.
    pub clock: crate::host::SystemClock,
    /// When the node started, on `clock` (ms): the dashboard's uptime.
    pub started_ms: u64,
    /// The application's readiness checks: `GET /ready` answers 200 only once all are met.
    pub readiness: super::ReadinessChecks,
}

//! `[coordinated-shutdown]`: phase timeouts (Akka `akka.coordinated-shutdown`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::duration;

/// `[coordinated-shutdown]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct CoordinatedShutdownConfig {
    /// Timeout of a phase without one of its own ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub default_phase_timeout: Duration,
    /// `[coordinated-shutdown.phases.<phase>] timeout = "10s"`; phases are named as in
    /// Akka (`cluster-exiting`, ...).
    pub phases: BTreeMap<String, PhaseConfig>,
}

impl Default for CoordinatedShutdownConfig {
    fn default() -> Self {
        CoordinatedShutdownConfig {
            default_phase_timeout: Duration::from_secs(5),
            phases: BTreeMap::new(),
        }
    }
}

/// `[coordinated-shutdown.phases.<phase>]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PhaseConfig {
    /// The phase's timeout.
    #[serde(deserialize_with = "duration::de")]
    pub timeout: Duration,
}

/// A phase of the coordinated shutdown, in execution order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// `before-service-unbind`.
    BeforeServiceUnbind,
    /// `service-unbind`.
    ServiceUnbind,
    /// `service-requests-done`.
    ServiceRequestsDone,
    /// `service-stop`.
    ServiceStop,
    /// `before-cluster-shutdown`.
    BeforeClusterShutdown,
    /// `cluster-sharding-shutdown-region`.
    ClusterShardingShutdownRegion,
    /// `cluster-leave`.
    ClusterLeave,
    /// `cluster-exiting`.
    ClusterExiting,
    /// `cluster-exiting-done`.
    ClusterExitingDone,
    /// `cluster-shutdown`.
    ClusterShutdown,
    /// `before-actor-system-terminate`.
    BeforeActorSystemTerminate,
    /// `actor-system-terminate`.
    ActorSystemTerminate,
}

impl Phase {
    /// Every phase, in execution order.
    pub const ALL: [Phase; 12] = [
        Phase::BeforeServiceUnbind,
        Phase::ServiceUnbind,
        Phase::ServiceRequestsDone,
        Phase::ServiceStop,
        Phase::BeforeClusterShutdown,
        Phase::ClusterShardingShutdownRegion,
        Phase::ClusterLeave,
        Phase::ClusterExiting,
        Phase::ClusterExitingDone,
        Phase::ClusterShutdown,
        Phase::BeforeActorSystemTerminate,
        Phase::ActorSystemTerminate,
    ];

    /// The phase's name (Akka's).
    pub fn name(self) -> &'static str {
        match self {
            Phase::BeforeServiceUnbind => "before-service-unbind",
            Phase::ServiceUnbind => "service-unbind",
            Phase::ServiceRequestsDone => "service-requests-done",
            Phase::ServiceStop => "service-stop",
            Phase::BeforeClusterShutdown => "before-cluster-shutdown",
            Phase::ClusterShardingShutdownRegion => "cluster-sharding-shutdown-region",
            Phase::ClusterLeave => "cluster-leave",
            Phase::ClusterExiting => "cluster-exiting",
            Phase::ClusterExitingDone => "cluster-exiting-done",
            Phase::ClusterShutdown => "cluster-shutdown",
            Phase::BeforeActorSystemTerminate => "before-actor-system-terminate",
            Phase::ActorSystemTerminate => "actor-system-terminate",
        }
    }

    /// The phase named `name`.
    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The timeout Akka's `reference.conf` gives this phase itself (10 s for
    /// `cluster-sharding-shutdown-region`, `cluster-exiting` and `actor-system-terminate`);
    /// the others use `default-phase-timeout`.
    pub fn own_default_timeout(self) -> Option<Duration> {
        match self {
            Phase::ClusterShardingShutdownRegion
            | Phase::ClusterExiting
            | Phase::ActorSystemTerminate => Some(Duration::from_secs(10)),
            _ => None,
        }
    }
}

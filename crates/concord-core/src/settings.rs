//! [`ClusterSettings`]: the knobs of the membership protocol, with Akka's defaults
//! (`akka.cluster` in Akka's `reference.conf`). Durations are milliseconds.

use std::collections::BTreeMap;

use crate::failure_detector::PhiAccrualSettings;
use crate::leader::LeaderSettings;
use crate::split_brain_resolver::SbrSettings;

/// Failure detector settings (`cluster.failure-detector`).
#[derive(Clone, Debug, PartialEq)]
pub struct FailureDetectorSettings {
    /// How often heartbeats are sent, ms (default 1000).
    pub heartbeat_interval_ms: u64,
    /// φ threshold (default 8.0).
    pub threshold: f64,
    /// Inter-arrival samples kept (default 1000).
    pub max_sample_size: usize,
    /// Lower bound of the standard deviation, ms (default 100).
    pub min_std_deviation_ms: u64,
    /// Tolerated pause, ms (default 3000).
    pub acceptable_heartbeat_pause_ms: u64,
    /// Number of members that monitor each member (default 5, as the spec says).
    pub monitored_by_nr_of_members: usize,
    /// After this long without a first reply the detector starts counting anyway, ms
    /// (default 1000).
    pub expected_response_after_ms: u64,
}

impl Default for FailureDetectorSettings {
    fn default() -> Self {
        FailureDetectorSettings {
            heartbeat_interval_ms: 1000,
            threshold: 8.0,
            max_sample_size: 1000,
            min_std_deviation_ms: 100,
            acceptable_heartbeat_pause_ms: 3000,
            monitored_by_nr_of_members: 5,
            expected_response_after_ms: 1000,
        }
    }
}

impl FailureDetectorSettings {
    /// The φ accrual settings these imply.
    pub fn phi_settings(&self) -> PhiAccrualSettings {
        PhiAccrualSettings {
            threshold: self.threshold,
            max_sample_size: self.max_sample_size,
            min_std_deviation_ms: self.min_std_deviation_ms as f64,
            acceptable_heartbeat_pause_ms: self.acceptable_heartbeat_pause_ms as f64,
            first_heartbeat_estimate_ms: self.heartbeat_interval_ms as f64,
        }
    }
}

/// Membership protocol settings (`cluster.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSettings {
    /// First seed forms a new cluster if no other seed answers within this, ms (5000).
    pub seed_node_timeout_ms: u64,
    /// Retry joining if no Welcome arrived within this, ms (10000); `None` = never.
    pub retry_unsuccessful_join_after_ms: Option<u64>,
    /// Shut down if joining seed nodes has not succeeded within this, ms (`None` = off).
    pub shutdown_after_unsuccessful_join_seed_nodes_ms: Option<u64>,
    /// Delay before periodic tasks start, ms (1000).
    pub periodic_tasks_initial_delay_ms: u64,
    /// Gossip interval, ms (1000).
    pub gossip_interval_ms: u64,
    /// Leader actions interval, ms (1000).
    pub leader_actions_interval_ms: u64,
    /// Unreachable-nodes reaper interval, ms (1000).
    pub unreachable_nodes_reaper_interval_ms: u64,
    /// `min-nr-of-members` (1).
    pub min_nr_of_members: usize,
    /// `role.<role>.min-nr-of-members`.
    pub min_nr_of_members_of_role: BTreeMap<String, usize>,
    /// `allow-weakly-up-members`: Joining → WeaklyUp after this, ms (7000); `None` = off.
    pub weakly_up_after_ms: Option<u64>,
    /// Probability to prefer a node that has not seen the latest state (0.8).
    pub gossip_different_view_probability: f64,
    /// Cluster size above which that probability is reduced (400).
    pub reduce_gossip_different_view_probability: usize,
    /// Tombstones are dropped after this, ms (24 h).
    pub prune_gossip_tombstones_after_ms: u64,
    /// A node that sees itself Down shuts down (on).
    pub run_coordinated_shutdown_when_down: bool,
    /// An Exiting node whose exiting tasks are done and that has not learnt of its removal
    /// shuts down after this, ms (10000).
    pub exiting_shutdown_timeout_ms: u64,
    /// A removed incarnation is quarantined (its connections and messages refused) this
    /// long after its removal, ms (Akka's `quarantine-removed-node-after`, 5000).
    pub quarantine_removed_node_after_ms: u64,
    /// Failure detector.
    pub failure_detector: FailureDetectorSettings,
    /// Downing provider: the Split Brain Resolver (on by default, keep-majority) or `None`
    /// (`downing-provider = "none"`: only manual downing).
    pub downing: Option<SbrSettings>,
    /// What a member does when its cluster proves to be an island (`island-resolution`,
    /// default rejoin; [`crate::cluster_identity`]).
    pub island_resolution: crate::cluster_identity::IslandResolution,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            seed_node_timeout_ms: 5000,
            retry_unsuccessful_join_after_ms: Some(10_000),
            shutdown_after_unsuccessful_join_seed_nodes_ms: None,
            periodic_tasks_initial_delay_ms: 1000,
            gossip_interval_ms: 1000,
            leader_actions_interval_ms: 1000,
            unreachable_nodes_reaper_interval_ms: 1000,
            min_nr_of_members: 1,
            min_nr_of_members_of_role: BTreeMap::new(),
            weakly_up_after_ms: Some(7000),
            gossip_different_view_probability: 0.8,
            reduce_gossip_different_view_probability: 400,
            prune_gossip_tombstones_after_ms: 24 * 3600 * 1000,
            run_coordinated_shutdown_when_down: true,
            exiting_shutdown_timeout_ms: 10_000,
            quarantine_removed_node_after_ms: 5000,
            failure_detector: FailureDetectorSettings::default(),
            downing: Some(SbrSettings::default()),
            island_resolution: Default::default(),
        }
    }
}

impl ClusterSettings {
    /// The leader-action part.
    pub fn leader_settings(&self) -> LeaderSettings {
        LeaderSettings {
            min_nr_of_members: self.min_nr_of_members,
            min_nr_of_members_of_role: self.min_nr_of_members_of_role.clone(),
        }
    }

    /// Fast timings for tests and simulations: gossip 100 ms, heartbeat 100 ms, pause 1 s.
    pub fn fast() -> Self {
        ClusterSettings {
            seed_node_timeout_ms: 1000,
            retry_unsuccessful_join_after_ms: Some(2000),
            periodic_tasks_initial_delay_ms: 100,
            gossip_interval_ms: 100,
            leader_actions_interval_ms: 100,
            unreachable_nodes_reaper_interval_ms: 100,
            weakly_up_after_ms: Some(1000),
            exiting_shutdown_timeout_ms: 3000,
            failure_detector: FailureDetectorSettings {
                heartbeat_interval_ms: 100,
                acceptable_heartbeat_pause_ms: 1000,
                expected_response_after_ms: 200,
                ..FailureDetectorSettings::default()
            },
            ..ClusterSettings::default()
        }
    }
}

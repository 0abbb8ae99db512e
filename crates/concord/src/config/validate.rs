//! Checks of values that parse but make no sense; each error names its key.

use super::coordinated_shutdown::Phase;
use super::discovery::{parse_name_server, unknown_method, AGGREGATED_METHODS, DISCOVERY_METHODS};
use super::error::ConfigError;
use super::management::validate_http_limits;
use super::node_config::Config;

impl Config {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name_ok = !self.system.is_empty()
            && self
                .system
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(ConfigError::new(
                "system",
                "must be non-empty and use only letters, digits, '-' and '_'",
            ));
        }
        if self.remote.hostname.is_empty() {
            return Err(ConfigError::new("remote.hostname", "must not be empty"));
        }
        self.validate_remote_security()?;
        self.validate_handshake_limits()?;
        if let Some((key, _)) = self.sections.iter().find(|(_, v)| !v.is_table()) {
            return Err(ConfigError::new(
                key.as_str(),
                "unknown key (a layer's section is a table: `[name]`)",
            ));
        }
        self.validate_management()?;
        if self.remote.maximum_frame_size < 1024 {
            return Err(ConfigError::new(
                "remote.maximum-frame-size",
                "must be at least 1024 bytes",
            ));
        }
        if self.remote.maximum_decompressed_gossip_size < self.remote.maximum_frame_size {
            return Err(ConfigError::new(
                "remote.maximum-decompressed-gossip-size",
                "must be at least remote.maximum-frame-size",
            ));
        }
        if self.remote.read_timeout.is_zero() {
            return Err(ConfigError::new(
                "remote.read-timeout",
                "must be greater than zero",
            ));
        }
        if self.remote.max_inbound_connections == 0 {
            return Err(ConfigError::new(
                "remote.max-inbound-connections",
                "must be at least 1",
            ));
        }
        if self.remote.max_inbound_buffered_bytes < self.remote.maximum_large_frame_size {
            return Err(ConfigError::new(
                "remote.max-inbound-buffered-bytes",
                "must be at least remote.maximum-large-frame-size",
            ));
        }
        if self.remote.maximum_large_frame_size < self.remote.maximum_frame_size {
            return Err(ConfigError::new(
                "remote.maximum-large-frame-size",
                "must be at least remote.maximum-frame-size",
            ));
        }
        let c = &self.cluster;
        let positive = [
            ("cluster.gossip-interval", c.gossip_interval),
            ("cluster.leader-actions-interval", c.leader_actions_interval),
            (
                "cluster.unreachable-nodes-reaper-interval",
                c.unreachable_nodes_reaper_interval,
            ),
            ("cluster.seed-node-timeout", c.seed_node_timeout),
            (
                "cluster.failure-detector.heartbeat-interval",
                c.failure_detector.heartbeat_interval,
            ),
            (
                "cluster.failure-detector.min-std-deviation",
                c.failure_detector.min_std_deviation,
            ),
        ];
        for (k, d) in positive {
            if d.is_zero() {
                return Err(ConfigError::new(k, "must be greater than zero"));
            }
        }
        if !(c.failure_detector.threshold.is_finite() && c.failure_detector.threshold > 0.0) {
            return Err(ConfigError::new(
                "cluster.failure-detector.threshold",
                "must be a positive number",
            ));
        }
        if c.failure_detector.max_sample_size == 0 {
            return Err(ConfigError::new(
                "cluster.failure-detector.max-sample-size",
                "must be at least 1",
            ));
        }
        if c.failure_detector.monitored_by_nr_of_members == 0 {
            return Err(ConfigError::new(
                "cluster.failure-detector.monitored-by-nr-of-members",
                "must be at least 1",
            ));
        }
        if !(0.0..=1.0).contains(&c.gossip_different_view_probability) {
            return Err(ConfigError::new(
                "cluster.gossip-different-view-probability",
                "must be between 0.0 and 1.0",
            ));
        }
        if c.event_buffer_size == 0 {
            return Err(ConfigError::new(
                "cluster.event-buffer-size",
                "must be at least 1",
            ));
        }
        if c.min_nr_of_members == 0 {
            return Err(ConfigError::new(
                "cluster.min-nr-of-members",
                "must be at least 1",
            ));
        }
        self.seed_node_addresses()?;
        self.downing()?;
        self.validate_bootstrap()?;
        self.validate_coordinated_shutdown()?;
        if self.bootstrap_enabled() && !self.management.enabled {
            return Err(ConfigError::new(
                "management.enabled",
                "Cluster Bootstrap needs the management API (its contact point)",
            ));
        }
        if self.management.bearer_token.as_deref() == Some("") {
            return Err(ConfigError::new(
                "management.bearer-token",
                "must not be empty (leave it unset for no token)",
            ));
        }
        Ok(())
    }

    /// Secure by default: remoting reachable beyond loopback needs TLS or a cluster secret,
    /// or an explicit `remote.insecure = true`.
    fn validate_remote_security(&self) -> Result<(), ConfigError> {
        let r = &self.remote;
        if r.secret.as_ref().is_some_and(|s| !s.0.trim().is_empty()) && r.secret_file.is_some() {
            return Err(ConfigError::new(
                "remote.secret-file",
                "set either remote.secret or remote.secret-file, not both",
            ));
        }
        if r.binds_loopback_only() || r.authenticates_peers() || r.insecure {
            return Ok(());
        }
        Err(ConfigError::new(
            "remote.bind-hostname",
            format!(
                "remoting binds `{}`, beyond loopback, with no protection: anyone who reaches the \
                 port could join or disturb the cluster. Configure TLS ([remote.tls] certificate, \
                 private-key, ca-certificates; `concord certs` makes them) or a cluster secret \
                 (remote.secret-file or remote.secret), or set remote.insecure = true to accept \
                 the risk",
                r.bind_host()
            ),
        ))
    }

    /// The handshake's deadlines and places (`remote.handshake-*`, `remote.max-pending-*`).
    fn validate_handshake_limits(&self) -> Result<(), ConfigError> {
        let r = &self.remote;
        if r.handshake_timeout.is_zero() {
            return Err(ConfigError::new(
                "remote.handshake-timeout",
                "must be greater than zero",
            ));
        }
        if r.handshake_first_byte_timeout.is_zero()
            || r.handshake_first_byte_timeout > r.handshake_timeout
        {
            return Err(ConfigError::new(
                "remote.handshake-first-byte-timeout",
                "must be greater than zero and at most remote.handshake-timeout",
            ));
        }
        for (k, v) in [
            ("remote.max-pending-handshakes", r.max_pending_handshakes),
            (
                "remote.max-pending-handshakes-per-address",
                r.max_pending_handshakes_per_address,
            ),
        ] {
            if v == 0 {
                return Err(ConfigError::new(k, "must be at least 1"));
            }
        }
        Ok(())
    }

    fn validate_bootstrap(&self) -> Result<(), ConfigError> {
        let d = &self.bootstrap.contact_point_discovery;
        let p = &self.bootstrap.contact_point;
        for (k, v) in [
            ("bootstrap.contact-point-discovery.interval", d.interval),
            (
                "bootstrap.contact-point-discovery.exponential-backoff-max",
                d.exponential_backoff_max,
            ),
            (
                "bootstrap.contact-point-discovery.resolve-timeout",
                d.resolve_timeout,
            ),
            ("bootstrap.contact-point.probe-interval", p.probe_interval),
            (
                "bootstrap.contact-point.probing-failure-timeout",
                p.probing_failure_timeout,
            ),
        ] {
            if v.is_zero() {
                return Err(ConfigError::new(k, "must be greater than zero"));
            }
        }
        for (k, v) in [
            (
                "bootstrap.contact-point-discovery.exponential-backoff-random-factor",
                d.exponential_backoff_random_factor,
            ),
            (
                "bootstrap.contact-point.probe-interval-jitter",
                p.probe_interval_jitter,
            ),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ConfigError::new(k, "must be between 0.0 and 1.0"));
            }
        }
        if d.required_contact_point_nr == 0 {
            return Err(ConfigError::new(
                "bootstrap.contact-point-discovery.required-contact-point-nr",
                "must be at least 1",
            ));
        }
        if !DISCOVERY_METHODS.contains(&d.discovery_method.as_str()) {
            return Err(ConfigError::new(
                "bootstrap.contact-point-discovery.discovery-method",
                unknown_method(&d.discovery_method, &DISCOVERY_METHODS),
            ));
        }
        for m in &self.discovery.aggregate.discovery_methods {
            if !AGGREGATED_METHODS.contains(&m.as_str()) {
                return Err(ConfigError::new(
                    "discovery.aggregate.discovery-methods",
                    unknown_method(m, &AGGREGATED_METHODS),
                ));
            }
        }
        for s in &self.discovery.dns.name_servers {
            if parse_name_server(s).is_none() {
                return Err(ConfigError::new(
                    "discovery.dns.name-servers",
                    format!("`{s}` is not an IP address or IP:port"),
                ));
            }
        }
        Ok(())
    }

    /// The management API's connection limits: caps at least 1, timeouts above zero.
    pub(crate) fn validate_management(&self) -> Result<(), ConfigError> {
        let m = &self.management;
        validate_http_limits(
            "management.",
            m.max_connections,
            m.max_connections_per_source,
            m.header_read_timeout,
            m.idle_timeout,
        )
    }

    pub(super) fn validate_coordinated_shutdown(&self) -> Result<(), ConfigError> {
        let c = &self.coordinated_shutdown;
        if c.default_phase_timeout.is_zero() {
            return Err(ConfigError::new(
                "coordinated-shutdown.default-phase-timeout",
                "must be greater than zero",
            ));
        }
        for (name, p) in &c.phases {
            let key = format!("coordinated-shutdown.phases.{name}");
            if Phase::from_name(name).is_none() {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "unknown phase; phases: {}",
                        Phase::ALL.map(Phase::name).join(", ")
                    ),
                ));
            }
            if p.timeout.is_zero() {
                return Err(ConfigError::new(
                    format!("{key}.timeout"),
                    "must be greater than zero",
                ));
            }
        }
        Ok(())
    }

    /// Warnings about this configuration's security, for the log and `GET /cluster/members`.
    pub fn security_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if !self.remote.binds_loopback_only() && !self.remote.authenticates_peers() {
            w.push(format!(
                "remote.insecure: remoting listens on {} beyond loopback with neither TLS nor a cluster secret; anyone who reaches the port can join or disturb the cluster",
                self.remote.bind_host()
            ));
        }
        w
    }
}

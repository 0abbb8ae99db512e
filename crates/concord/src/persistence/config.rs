//! `[persistence]`: the store persistent entities write to, snapshots, recovery
//! (docs/PERSISTENCE.md). Defaults are Akka Persistence's where it has one, except
//! `recovery-permits` (Akka: 50 per node; 16 here, for 2-core nodes).

use std::path::PathBuf;
use std::time::Duration;

use concord_core::persistence::RetentionCriteria;
use serde::{Deserialize, Serialize};

use crate::config::{Config, ConfigError, ConfigSection};

/// The stores `persistence.store` names.
pub const STORES: &[&str] = &["replicated", "memory", "postgres"];

/// `[persistence]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct PersistenceConfig {
    /// The store: `"replicated"` (the built-in replicated journal on the cluster's own
    /// nodes; the default when empty), `"postgres"` (`[persistence.postgres]`) or
    /// `"memory"` (this process only: tests).
    pub store: String,
    /// Events between snapshots of an event-sourced entity (100; 0: none).
    pub snapshot_every: u64,
    /// Snapshots kept per entity (2).
    pub keep_snapshots: u32,
    /// Delete events when snapshotting, up to `snapshot − keep-snapshots × snapshot-every`
    /// (every kept snapshot covers them; false).
    pub delete_events_on_snapshot: bool,
    /// Entities recovering at once on this node (16); others wait for a permit.
    pub recovery_permits: usize,
    /// A recovery, waiting for its permit included, must finish within this ("30s") or
    /// the entity stops with an error.
    #[serde(with = "crate::config::duration::required")]
    pub recovery_timeout: Duration,
    /// A write must be acknowledged within this ("10s"); otherwise it counts as
    /// unavailable (it may be stored) and the entity stops.
    #[serde(with = "crate::config::duration::required")]
    pub write_timeout: Duration,
    /// Events read per replay query (1000).
    pub replay_batch_size: usize,
    /// Events by slices on the replicated store are read only up to this long before now
    /// ("2s"): longer than a write takes to reach its replicas once chosen, plus the clock
    /// skew between nodes (docs/PERSISTENCE.md, "Events by slices").
    #[serde(with = "crate::config::duration::required")]
    pub events_delay: Duration,
    /// `[persistence.postgres]`.
    pub postgres: PostgresConfig,
}

/// `[persistence.postgres]`: where PostgreSQL is. The URL is a secret (it may hold a
/// password): it is read from a file or an environment variable, never from this file, and
/// never logged.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct PostgresConfig {
    /// A file holding the connection URL (`postgres://user:pass@host:port/db` or
    /// `host=/run/postgresql user=concord`), first line; takes precedence over `url-env`.
    pub url_file: Option<PathBuf>,
    /// The environment variable holding the URL ("CONCORD_POSTGRES_URL").
    pub url_env: String,
    /// Connections in the pool (8).
    pub pool_size: usize,
    /// Connecting, waiting for a pooled connection, and each statement
    /// (`statement_timeout`) must finish within this ("10s").
    #[serde(with = "crate::config::duration::required")]
    pub timeout: Duration,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url_file: None,
            url_env: "CONCORD_POSTGRES_URL".into(),
            pool_size: 8,
            timeout: Duration::from_secs(10),
        }
    }
}

impl Default for PersistenceConfig {
    fn default() -> Self {
        PersistenceConfig {
            store: String::new(),
            snapshot_every: 100,
            keep_snapshots: 2,
            delete_events_on_snapshot: false,
            recovery_permits: 16,
            recovery_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            replay_batch_size: 1000,
            events_delay: Duration::from_secs(2),
            postgres: PostgresConfig::default(),
        }
    }
}

/// What persistent entities need of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistenceSettings {
    /// Snapshots and deletion.
    pub retention: RetentionCriteria,
    /// Recovery permits of the node.
    pub recovery_permits: usize,
    /// Recovery deadline.
    pub recovery_timeout: Duration,
    /// Write deadline.
    pub write_timeout: Duration,
    /// Events per replay query.
    pub replay_batch_size: usize,
}

impl Default for PersistenceSettings {
    fn default() -> Self {
        PersistenceConfig::default().settings()
    }
}

impl PersistenceConfig {
    /// The entities' settings.
    pub fn settings(&self) -> PersistenceSettings {
        PersistenceSettings {
            retention: RetentionCriteria {
                snapshot_every: self.snapshot_every,
                keep_snapshots: self.keep_snapshots,
                delete_events: self.delete_events_on_snapshot,
            },
            recovery_permits: self.recovery_permits,
            recovery_timeout: self.recovery_timeout,
            write_timeout: self.write_timeout,
            replay_batch_size: self.replay_batch_size,
        }
    }
}

impl ConfigSection for PersistenceConfig {
    const KEY: &'static str = "persistence";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        if !self.store.is_empty() && !STORES.contains(&self.store.as_str()) {
            return Err(ConfigError::new(
                "persistence.store",
                format!("must be one of {}", STORES.join(", ")),
            ));
        }
        if self.keep_snapshots == 0 {
            return Err(ConfigError::new(
                "persistence.keep-snapshots",
                "must be at least 1",
            ));
        }
        if !(1..=10_000).contains(&self.recovery_permits) {
            return Err(ConfigError::new(
                "persistence.recovery-permits",
                "must be from 1 to 10000",
            ));
        }
        if !(1..=100_000).contains(&self.replay_batch_size) {
            return Err(ConfigError::new(
                "persistence.replay-batch-size",
                "must be from 1 to 100000",
            ));
        }
        for (key, d) in [
            ("persistence.recovery-timeout", self.recovery_timeout),
            ("persistence.write-timeout", self.write_timeout),
            ("persistence.postgres.timeout", self.postgres.timeout),
            ("persistence.events-delay", self.events_delay),
        ] {
            if d.is_zero() {
                return Err(ConfigError::new(key, "must be above 0"));
            }
        }
        if self.events_delay > Duration::from_secs(3600) {
            return Err(ConfigError::new(
                "persistence.events-delay",
                "must be at most 1h",
            ));
        }
        if !(1..=1000).contains(&self.postgres.pool_size) {
            return Err(ConfigError::new(
                "persistence.postgres.pool-size",
                "must be from 1 to 1000",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(toml: &str) -> Result<PersistenceConfig, ConfigError> {
        Config::from_toml(&format!("system = \"s\"\n{toml}"))
            .unwrap()
            .section::<PersistenceConfig>()
    }

    #[test]
    fn defaults_and_bad_values_name_their_key() {
        let c = section("").unwrap();
        assert_eq!(c, PersistenceConfig::default());
        assert_eq!(c.settings().retention.snapshot_every, 100);
        let c = section("[persistence]\nstore = \"postgres\"\nsnapshot-every = 0\n[persistence.postgres]\npool-size = 2\nurl-env = \"PG\"").unwrap();
        assert_eq!(c.postgres.pool_size, 2);
        assert_eq!(c.settings().retention.snapshot_every, 0);
        for (toml, key) in [
            ("store = \"cassandra\"", "persistence.store"),
            ("keep-snapshots = 0", "persistence.keep-snapshots"),
            ("recovery-permits = 0", "persistence.recovery-permits"),
            ("recovery-timeout = \"0s\"", "persistence.recovery-timeout"),
            ("replay-batch-size = 0", "persistence.replay-batch-size"),
            ("events-delay = \"0s\"", "persistence.events-delay"),
            ("events-delay = \"2h\"", "persistence.events-delay"),
        ] {
            let e = section(&format!("[persistence]\n{toml}")).unwrap_err();
            assert!(e.to_string().contains(key), "{toml}: {e}");
        }
        assert!(
            section("[persistence]\nurl = \"postgres://x\"").is_err(),
            "no inline URL"
        );
    }
}

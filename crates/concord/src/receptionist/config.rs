//! `[receptionist]` and `[pubsub]`: the limits and timings of the receptionist and of
//! distributed pub-sub (docs/SERVICES.md). Defaults follow Akka's
//! `akka.cluster.typed.receptionist` where Akka has the setting.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Config, ConfigError, ConfigSection};

/// `[receptionist]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ReceptionistConfig {
    /// Handles one node may hold registered (10000); a registration beyond is refused.
    pub max_registrations: usize,
    /// Messages waiting for one handle (1000); beyond, messages to it are dropped and
    /// counted.
    pub mailbox_size: usize,
    /// Bytes of messages waiting in all of this node's handles' and pub-sub subscribers'
    /// mailboxes together, at most (67108864, 64 MiB); beyond, messages are dropped and
    /// counted.
    pub max_mailbox_bytes: u64,
    /// How often the leader removes the registrations of nodes that left ("3s", Akka's
    /// `pruning-interval`).
    #[serde(with = "crate::config::duration::required")]
    pub pruning_interval: Duration,
    /// The leader removes the registrations of a node it never saw as a member after this
    /// ("60s", Akka's `prune-removed-older-than`); those of a node it saw leave, at once.
    #[serde(with = "crate::config::duration::required")]
    pub prune_removed_older_than: Duration,
}

impl Default for ReceptionistConfig {
    fn default() -> Self {
        ReceptionistConfig {
            max_registrations: 10_000,
            mailbox_size: 1_000,
            max_mailbox_bytes: 64 << 20,
            pruning_interval: Duration::from_secs(3),
            prune_removed_older_than: Duration::from_secs(60),
        }
    }
}

impl ConfigSection for ReceptionistConfig {
    const KEY: &'static str = "receptionist";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        if !(1..=1_000_000).contains(&self.max_registrations) {
            return Err(ConfigError::new(
                "receptionist.max-registrations",
                "must be from 1 to 1000000",
            ));
        }
        if !(1..=1_000_000).contains(&self.mailbox_size) {
            return Err(ConfigError::new(
                "receptionist.mailbox-size",
                "must be from 1 to 1000000",
            ));
        }
        if self.max_mailbox_bytes < 1 << 16 {
            return Err(ConfigError::new(
                "receptionist.max-mailbox-bytes",
                "must be at least 65536",
            ));
        }
        if self.pruning_interval < Duration::from_millis(10) {
            return Err(ConfigError::new(
                "receptionist.pruning-interval",
                "must be at least 10ms",
            ));
        }
        Ok(())
    }
}

/// `[pubsub]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct PubSubConfig {
    /// Topics one node may have subscribers of (1000); a subscription to one more is
    /// refused.
    pub max_topics: usize,
    /// Subscribers one topic may have on one node (10000); one more is refused.
    pub max_subscribers_per_topic: usize,
}

impl Default for PubSubConfig {
    fn default() -> Self {
        PubSubConfig {
            max_topics: 1_000,
            max_subscribers_per_topic: 10_000,
        }
    }
}

impl ConfigSection for PubSubConfig {
    const KEY: &'static str = "pubsub";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        if self.max_topics == 0 {
            return Err(ConfigError::new("pubsub.max-topics", "must be at least 1"));
        }
        if self.max_subscribers_per_topic == 0 {
            return Err(ConfigError::new(
                "pubsub.max-subscribers-per-topic",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_nonsense_is_refused() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(
            c.section::<ReceptionistConfig>().unwrap(),
            ReceptionistConfig::default()
        );
        assert_eq!(
            c.section::<PubSubConfig>().unwrap(),
            PubSubConfig::default()
        );
        let c = Config::from_toml("[receptionist]\nmax-registrations = 0\n").unwrap();
        let e = c.section::<ReceptionistConfig>().unwrap_err().to_string();
        assert!(e.contains("receptionist.max-registrations"), "{e}");
        let c = Config::from_toml("[pubsub]\nmax-topics = 0\n").unwrap();
        assert!(c.section::<PubSubConfig>().is_err());
    }
}

//! `[kv]`: the Dynamo-style key-value store (docs/KV_STORE.md). Defaults are Riak KV's
//! where Riak has one (N = 3, R = W = quorum).

use std::time::Duration;

use concord_core::kv::{KvSettings, Quorum, MAX_N};
use serde::Deserialize;

use super::duration::{self, ms};
use super::{Config, ConfigError};

/// Space a value's envelope, key and context take beyond the value itself, bytes.
const MESSAGE_OVERHEAD: usize = 64 * 1024;

/// `[kv]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct KvConfig {
    /// The HTTP API's port (`concord node --kv-port`); unset: `concord node` runs no store.
    pub http_port: Option<u16>,
    /// The interface the HTTP API binds ("127.0.0.1"). Beyond loopback it needs
    /// `management.bearer-token` or `[management.tls]` (the same access rules as the
    /// management API's write routes, applied to every request), or `insecure = true`.
    pub http_hostname: String,
    /// Serve the HTTP API beyond loopback without a token or TLS (false).
    pub insecure: bool,
    /// Most HTTP connections served at once (512); like `management.max-connections`
    /// (lowered at start to fit the file-descriptor limit).
    pub http_max_connections: usize,
    /// Most HTTP connections from one source at once (64; an IPv6 source is its /64), like
    /// `management.max-connections-per-source`: room for an application server's pool.
    pub http_max_connections_per_source: usize,
    /// A request's head must arrive complete within this ("10s"), like
    /// `management.header-read-timeout`.
    #[serde(deserialize_with = "duration::de")]
    pub http_header_read_timeout: Duration,
    /// A connection on which no byte moves for this long is closed ("60s"), like
    /// `management.idle-timeout`.
    #[serde(deserialize_with = "duration::de")]
    pub http_idle_timeout: Duration,
    /// Replication factor N (3; 1 to 9).
    pub n: u8,
    /// Read quorum R: "one", "quorum", "all" or a number ("quorum").
    pub r: String,
    /// Write quorum W ("quorum").
    pub w: String,
    /// Count fallbacks (hinted writes) towards W and R (false).
    pub sloppy_quorum: bool,
    /// A request's deadline ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub request_timeout: Duration,
    /// Largest value, bytes (524288).
    pub max_value_size: usize,
    /// Largest object a write may make — a value and its siblings — bytes (1572864; at
    /// most `remote.maximum-large-frame-size` less 64 KiB).
    pub max_object_size: usize,
    /// Time after a delete every replica acknowledged before its tombstone is removed
    /// ("10s").
    #[serde(deserialize_with = "duration::de")]
    pub tombstone_grace: Duration,
    /// Anti-entropy exchange interval ("1s").
    #[serde(deserialize_with = "duration::de")]
    pub anti_entropy_interval: Duration,
    /// Groups of keys handed off at once (2).
    pub handoff_concurrency: usize,
    /// Values per transfer message, bytes (1048576).
    pub transfer_batch_size: usize,
    /// Ring tokens per member (64; the same on every node).
    pub virtual_nodes: u32,
    /// Hold data only on members with this role ("" = every member).
    pub role: String,
    /// Requests coordinated at once before new ones are refused (10000).
    pub max_pending_requests: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        let d = KvSettings::default();
        KvConfig {
            http_port: None,
            http_hostname: "127.0.0.1".into(),
            insecure: false,
            http_max_connections: 512,
            http_max_connections_per_source: 64,
            http_header_read_timeout: Duration::from_secs(10),
            http_idle_timeout: Duration::from_secs(60),
            n: d.n,
            r: d.r.to_string(),
            w: d.w.to_string(),
            sloppy_quorum: d.sloppy_quorum,
            request_timeout: Duration::from_millis(d.request_timeout_ms),
            max_value_size: d.max_value_bytes,
            max_object_size: d.max_object_bytes,
            tombstone_grace: Duration::from_millis(d.tombstone_grace_ms),
            anti_entropy_interval: Duration::from_millis(d.anti_entropy_interval_ms),
            handoff_concurrency: d.handoff_concurrency,
            transfer_batch_size: d.transfer_batch_bytes,
            virtual_nodes: d.virtual_nodes,
            role: String::new(),
            max_pending_requests: d.max_pending_requests,
        }
    }
}

impl KvConfig {
    /// True if `http-hostname` is a loopback name or address.
    pub fn http_is_loopback(&self) -> bool {
        self.http_hostname == "localhost"
            || self
                .http_hostname
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl Config {
    /// The store's settings from `[kv]` (validated, so the quorums parse).
    pub fn kv_settings(&self) -> KvSettings {
        let c = &self.kv;
        let d = KvSettings::default();
        KvSettings {
            n: c.n,
            r: Quorum::parse(&c.r).unwrap_or(d.r),
            w: Quorum::parse(&c.w).unwrap_or(d.w),
            sloppy_quorum: c.sloppy_quorum,
            request_timeout_ms: ms(c.request_timeout).max(1),
            max_value_bytes: c.max_value_size,
            max_object_bytes: c.max_object_size,
            max_key_bytes: d.max_key_bytes,
            tombstone_grace_ms: ms(c.tombstone_grace),
            anti_entropy_interval_ms: ms(c.anti_entropy_interval).max(1),
            handoff_concurrency: c.handoff_concurrency.max(1),
            transfer_batch_bytes: c.transfer_batch_size,
            virtual_nodes: c.virtual_nodes,
            role: (!c.role.is_empty()).then(|| c.role.clone()),
            max_pending_requests: c.max_pending_requests,
            auto_commit: false,
        }
    }

    pub(crate) fn validate_kv(&self) -> Result<(), ConfigError> {
        let c = &self.kv;
        if !(1..=MAX_N).contains(&c.n) {
            return Err(ConfigError::new(
                "kv.n",
                format!("must be from 1 to {MAX_N}"),
            ));
        }
        for (key, v) in [("kv.r", &c.r), ("kv.w", &c.w)] {
            let q = Quorum::parse(v).map_err(|e| ConfigError::new(key, e))?;
            if q.resolve(c.n).is_none() {
                return Err(ConfigError::new(
                    key,
                    format!("{q} is more than kv.n = {}", c.n),
                ));
            }
        }
        if c.virtual_nodes == 0 || c.virtual_nodes > 4096 {
            return Err(ConfigError::new(
                "kv.virtual-nodes",
                "must be from 1 to 4096",
            ));
        }
        if c.max_value_size == 0 || c.max_value_size > c.max_object_size {
            return Err(ConfigError::new(
                "kv.max-value-size",
                "must be at least 1 and at most kv.max-object-size",
            ));
        }
        let frame = self.remote.maximum_large_frame_size;
        if c.max_object_size.saturating_add(MESSAGE_OVERHEAD) > frame {
            return Err(ConfigError::new(
                "kv.max-object-size",
                format!("must leave 64 KiB of remote.maximum-large-frame-size ({frame} bytes)"),
            ));
        }
        if c.transfer_batch_size == 0
            || c.transfer_batch_size.saturating_add(MESSAGE_OVERHEAD) > frame
        {
            return Err(ConfigError::new(
                "kv.transfer-batch-size",
                format!("must be at least 1 and leave 64 KiB of remote.maximum-large-frame-size ({frame} bytes)"),
            ));
        }
        super::management::validate_http_limits(
            "kv.http-",
            c.http_max_connections,
            c.http_max_connections_per_source,
            c.http_header_read_timeout,
            c.http_idle_timeout,
        )?;
        if c.max_pending_requests == 0 {
            return Err(ConfigError::new(
                "kv.max-pending-requests",
                "must be at least 1",
            ));
        }
        let protected = self.management.tls.is_some()
            || self
                .management
                .bearer_token
                .as_deref()
                .is_some_and(|t| !t.is_empty());
        if c.http_port.is_some() && !c.http_is_loopback() && !protected && !c.insecure {
            return Err(ConfigError::new(
                "kv.http-hostname",
                format!(
                    "`{}` is not loopback: the key-value API would serve anyone who can reach it. \
                     Set management.bearer-token or [management.tls] (the API then needs them), \
                     or kv.insecure = true",
                    c.http_hostname
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_riaks_and_map_to_the_settings() {
        let c = Config::default();
        let s = c.kv_settings();
        assert_eq!(s.n, 3);
        assert_eq!(s.r, Quorum::Quorum);
        assert_eq!(s.w, Quorum::Quorum);
        assert!(!s.sloppy_quorum);
        assert!(c.validate_kv().is_ok());
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = |toml: &str| Config::from_toml(toml).unwrap_err().key;
        assert_eq!(bad("[kv]\nn = 0"), "kv.n");
        assert_eq!(bad("[kv]\nn = 10"), "kv.n");
        assert_eq!(bad("[kv]\nr = \"most\""), "kv.r");
        assert_eq!(bad("[kv]\nw = \"4\""), "kv.w");
        assert_eq!(bad("[kv]\nmax-object-size = 4000000"), "kv.max-object-size");
        assert_eq!(
            bad("[kv]\nhttp-port = 8098\nhttp-hostname = \"0.0.0.0\""),
            "kv.http-hostname"
        );
        let ok = Config::from_toml(
            "[kv]\nhttp-port = 8098\nhttp-hostname = \"0.0.0.0\"\n[management]\nbearer-token = \"t\"",
        );
        assert!(ok.is_ok(), "{ok:?}");
        let c =
            Config::from_toml("[kv]\nn = 5\nr = \"all\"\nw = \"one\"\nrole = \"data\"").unwrap();
        let s = c.kv_settings();
        assert_eq!((s.n, s.r, s.w), (5, Quorum::All, Quorum::One));
        assert_eq!(s.role.as_deref(), Some("data"));
    }
}

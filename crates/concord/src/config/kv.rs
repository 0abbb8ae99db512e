//! `[kv]`: the Dynamo-style key-value store (docs/KV_STORE.md). Defaults are Riak KV's
//! where Riak has one (N = 3, R = W = quorum).

use std::time::Duration;

use concord_core::kv::KvSettings;
use serde::Deserialize;

use super::duration;

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

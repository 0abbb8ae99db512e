//! `[kv]`: the Dynamo-style key-value store (docs/KV_STORE.md). Defaults are Riak KV's
//! where Riak has one (N = 3, R = W = quorum).

use std::time::Duration;

use concord_core::kv::{KvSettings, Quorum, MAX_N};
use serde::{Deserialize, Serialize};

use crate::config::duration::ms;
use crate::config::{validate_http_limits, Config, ConfigError, ConfigSection};
use crate::management::HttpLimits;

/// Space a value's envelope, key and context take beyond the value itself, bytes.
const MESSAGE_OVERHEAD: usize = 64 * 1024;

/// `[kv]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
    #[serde(with = "crate::config::duration::required")]
    pub http_header_read_timeout: Duration,
    /// A connection on which no byte moves for this long is closed ("60s"), like
    /// `management.idle-timeout`.
    #[serde(with = "crate::config::duration::required")]
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
    #[serde(with = "crate::config::duration::required")]
    pub request_timeout: Duration,
    /// Largest value, bytes (524288).
    pub max_value_size: usize,
    /// Largest object a write may make — a value and its siblings — bytes (1572864; at
    /// most `remote.maximum-large-frame-size` less 64 KiB).
    pub max_object_size: usize,
    /// Time after a delete every replica acknowledged before its tombstone is removed
    /// ("10s").
    #[serde(with = "crate::config::duration::required")]
    pub tombstone_grace: Duration,
    /// Anti-entropy exchange interval ("1s").
    #[serde(with = "crate::config::duration::required")]
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

impl ConfigSection for KvConfig {
    const KEY: &'static str = "kv";

    /// Quorums that fit N, value and transfer sizes that fit remoting's large frames, HTTP
    /// limits, and no unprotected HTTP API beyond loopback.
    fn validate(&self, config: &Config) -> Result<(), ConfigError> {
        let c = self;
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
        let frame = config.remote.maximum_large_frame_size;
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
        validate_http_limits(
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
        let protected = config.management.tls.is_some()
            || config
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

impl KvConfig {
    /// The store's settings from `[kv]` (validated, so the quorums parse).
    pub fn settings(&self) -> KvSettings {
        let c = self;
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

    /// The HTTP API's connection limits (`http-…`).
    pub fn http_limits(&self) -> HttpLimits {
        HttpLimits {
            max_connections: self.http_max_connections,
            max_connections_per_source: self.http_max_connections_per_source,
            header_read_timeout: self.http_header_read_timeout,
            idle_timeout: self.http_idle_timeout,
        }
    }

    /// True if `http-hostname` is a loopback name or address.
    pub fn http_is_loopback(&self) -> bool {
        self.http_hostname == "localhost"
            || self
                .http_hostname
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(config: &Config) -> Result<KvConfig, ConfigError> {
        config.section::<KvConfig>()
    }

    #[test]
    fn kv_defaults_are_riaks_and_map_to_the_settings() {
        let c = Config::default();
        let s = kv(&c).unwrap().settings();
        assert_eq!(s.n, 3);
        assert_eq!(s.r, Quorum::Quorum);
        assert_eq!(s.w, Quorum::Quorum);
        assert!(!s.sloppy_quorum);
    }

    #[test]
    fn kv_bad_values_name_their_key() {
        let bad = |toml: &str| kv(&Config::from_toml(toml).unwrap()).unwrap_err().key;
        assert_eq!(bad("[kv]\nn = 0"), "kv.n");
        assert_eq!(bad("[kv]\nn = 10"), "kv.n");
        assert_eq!(bad("[kv]\nr = \"most\""), "kv.r");
        assert_eq!(bad("[kv]\nw = \"4\""), "kv.w");
        assert_eq!(bad("[kv]\nmax-object-size = 4000000"), "kv.max-object-size");
        assert_eq!(bad("[kv]\nn = \"three\""), "kv.n");
        assert_eq!(bad("[kv]\nreplicas = 3"), "kv.replicas");
        assert_eq!(
            bad("[kv]\nhttp-port = 8098\nhttp-hostname = \"0.0.0.0\""),
            "kv.http-hostname"
        );
        let ok = Config::from_toml(
            "[kv]\nhttp-port = 8098\nhttp-hostname = \"0.0.0.0\"\n[management]\nbearer-token = \"t\"",
        )
        .unwrap();
        assert!(kv(&ok).is_ok(), "{:?}", kv(&ok));
        let c =
            Config::from_toml("[kv]\nn = 5\nr = \"all\"\nw = \"one\"\nrole = \"data\"").unwrap();
        let s = kv(&c).unwrap().settings();
        assert_eq!((s.n, s.r, s.w), (5, Quorum::All, Quorum::One));
        assert_eq!(s.role.as_deref(), Some("data"));
    }

    #[test]
    fn a_section_set_in_code_reads_back_unchanged() {
        let mut c = Config::default();
        let mut section = KvConfig {
            http_port: Some(0),
            n: 5,
            request_timeout: Duration::from_millis(1500),
            ..KvConfig::default()
        };
        c.set_section(&section).unwrap();
        assert_eq!(kv(&c).unwrap(), section);
        c.update_section(|k: &mut KvConfig| k.http_port = None)
            .unwrap();
        section.http_port = None;
        assert_eq!(kv(&c).unwrap(), section);
        // Written as the file would say it.
        assert_eq!(
            c.sections["kv"]["request-timeout"].as_str(),
            Some("1s 500ms")
        );
    }

    #[test]
    fn a_value_toml_cannot_hold_is_refused_naming_the_section() {
        let mut c = Config::default();
        let e = c
            .update_section(|k: &mut KvConfig| k.max_pending_requests = usize::MAX)
            .unwrap_err();
        assert_eq!(e.key, "kv");
        assert!(e.message.contains("TOML"), "{e}");
        // Nothing was written.
        assert!(!c.sections.contains_key("kv"));
    }

    #[test]
    fn overrides_reach_a_layer_section() {
        let o = crate::config::env_overrides(vec![
            ("CONCORD__KV__N".to_string(), "5".to_string()),
            ("CONCORD__KV__REQUEST_TIMEOUT".to_string(), "2s".to_string()),
        ]);
        let c = Config::load(None, &o).unwrap();
        let k = kv(&c).unwrap();
        assert_eq!((k.n, k.request_timeout), (5, Duration::from_secs(2)));
    }
}

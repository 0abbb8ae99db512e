//! Prometheus metrics through the `metrics` facade; rendered at `GET /metrics`.
//!
//! A leaf module: functions take plain values (core types and counters), so every layer can
//! record without this module knowing the layers. Every series carries a `node` label (the
//! node address), so several nodes in one process (tests, embedding) stay apart.
//!
//! Membership:
//! - `concord_cluster_members{node,status}` — members by status (gauge)
//! - `concord_cluster_unreachable_members{node}` — unreachable members (gauge)
//! - `concord_cluster_is_leader{node}`, `concord_cluster_convergence{node}` — 0/1 (gauges)
//! - `concord_cluster_messages_sent_total{node,kind}` / `..._received_total{node,kind}`
//! - `concord_cluster_sbr_decisions_total{node}` — split brain resolver decisions this node
//!   carried out (each is also logged at warn with the decision, its cause and the downed members)
//! - `concord_cluster_sbr_down_all_total{node,cause}` — of those, the down-all decisions, by
//!   cause: `stable` (the down-all strategy, the membership-change guard), `unstable`
//!   (down-all-when-unstable), `double-decision`
//! - `concord_cluster_gossip_rounds_total{node}`, `concord_cluster_gossip_bytes_{in,out}_total{node}`
//! - `concord_cluster_heartbeat_rtt_seconds{node}` — heartbeat round trips (summary)
//! - `concord_cluster_other_clusters{node}` — other clusters of this system name found
//!   through the seed nodes (island clusters; gauge, 0 normally; readiness fails while > 0)
//! - `concord_cluster_self_joins_refused_total{node}` — seed-node timeouts after which the
//!   node did not form a cluster because of its membership record
//! - `concord_cluster_refused_messages_total{node,reason}` — membership messages refused:
//!   `non-member` (gossip, status, InitJoinAck from outside the view), `implausible-clock`
//!   (a vector-clock counter far ahead), `join-throttled` (InitJoin/Join/heartbeats of
//!   strangers over the rate limit)
//!
//! Remoting (copied from the transport's counters when scraped):
//! - `concord_remote_{frames,bytes}_{in,out}_total{node,lane}`, `concord_remote_writes_total{node,lane}`,
//!   `concord_remote_dropped_outbound_total{node,lane}`
//! - `concord_remote_messages_{sent,received}_total{node,protocol}`,
//!   `concord_remote_payload_bytes_{sent,received}_total{node,protocol}`,
//!   `concord_remote_unknown_messages_total{node,protocol}` — by registered protocol
//! - `concord_remote_unknown_protocol_total{node}`, `concord_remote_wrong_incarnation_total{node}`,
//!   `concord_remote_malformed_frames_total{node}`, `concord_remote_handshakes_refused_total{node}`
//! - Security and limits: `concord_remote_authentication_failures_total{node}` (inbound TLS,
//!   certificate name or cluster secret), `..._outbound_authentication_failures_total`,
//!   `..._handshake_timeouts_total`, `..._connections_refused_total` (connection caps),
//!   `..._read_timeouts_total`, `..._buffer_limit_hits_total`,
//!   `..._decompression_limit_hits_total` (gzip bombs), `..._accept_errors_total` (e.g.
//!   EMFILE); gauges `concord_remote_inbound_connections{node}` and
//!   `concord_remote_max_inbound_connections{node}`; `concord_tls_reloads_total{node,result}`
//!
//! Distributed Data:
//! - `concord_ddata_keys{node}` — keys held, tombstones included (gauge)
//! - `concord_ddata_gossip_bytes_total{node}` — bytes of anti-entropy `Status`/`Gossip` sent
//! - `concord_ddata_deltas_sent_total{node}`, `..._deltas_applied_total`, `..._delta_nacks_total`,
//!   `..._read_repairs_total`, `..._unknown_types_total`, `..._bad_values_total`,
//!   `..._too_large_total`, `..._keys_refused_total`, `..._pruning_performed_total`
//! - `concord_ddata_timeouts_total{node,op}` — reads/writes that missed their consistency
//! - `concord_ddata_request_duration_seconds{node,op,consistency}` — get/update/delete latency
//!   (summary)
//! - `concord_ddata_store_failures_total{node}` — durable writes that failed
//!
//! Cluster Singleton:
//! - `concord_singleton_running{node,name}` — 1 while this node runs the instance (gauge)
//! - `concord_singleton_instances_started_total{node,name}`, `concord_singleton_hand_overs_total{node,name}`
//! - `concord_singleton_proxy_buffered{node,name}` (gauge), `concord_singleton_proxy_dropped_total{node,name}`
//! - `concord_singleton_lease_refused_total{node,name}` — lease acquisitions refused (`use-lease`)
//!
//! Cluster Sharding (per entity type):
//! - `concord_sharding_shards{node,type}`, `concord_sharding_entities{node,type}` — hosted here
//!   (gauges)
//! - `concord_sharding_handoffs_in_progress{node,type}` (gauge),
//!   `concord_sharding_handoffs_started_total{node,type}` (as the old home),
//!   `concord_sharding_handoffs_completed_total{node,type}` (as the new home)
//! - `concord_sharding_buffered_messages{node,type}` (gauge),
//!   `concord_sharding_dropped_messages_total{node,type,reason}` (`buffer-full`,
//!   `mailbox-full`, `other`), `concord_sharding_forwarded_messages_total{node,type}`,
//!   `concord_sharding_held_for_order_total{node,type}`,
//!   `concord_sharding_outbound_backlog{node}` — frames waiting for room in a peer's lane
//! - `concord_sharding_rebalance_rounds_total{node,type}`,
//!   `concord_sharding_shards_allocated_total{node,type}`, `concord_sharding_coordinator{node,type}`
//!   (1 where the coordinator runs)
//! - `concord_sharding_load_aware_nodes{node,type}` — with load-aware allocation: the nodes
//!   whose load the strategy holds (gauge)
//! - `concord_sharding_entities_started_total{node,type}`,
//!   `concord_sharding_entities_passivated_total{node,type}`,
//!   `concord_sharding_invalid_messages_total{node,type}`
//!
//! Key-value store:
//! - `concord_kv_keys{node}` — keys stored here (gauge); `concord_kv_misplaced_keys{node}`
//!   — keys held here that belong elsewhere, still to hand off (gauge);
//!   `concord_kv_pending_segments{node}` — segments this node owns and has not yet
//!   synchronised (gauge); `concord_kv_handoffs_in_progress{node}`,
//!   `concord_kv_requests_in_progress{node}` (gauges); `concord_kv_ring_segments{node,member}`
//!   — segments each member replicates (gauge)
//! - `concord_kv_requests_total{node,op,result}` and
//!   `concord_kv_request_duration_seconds{node,op}` (summary) — put, get and delete
//!   coordinated here
//! - `concord_kv_hinted_writes_total`, `..._read_repairs_total`, `..._tombstones_reaped_total`,
//!   `..._anti_entropy_exchanges_total`, `..._anti_entropy_keys_repaired_total`,
//!   `..._handoff_keys_sent_total`, `..._handoff_keys_received_total`,
//!   `..._handoff_keys_removed_total`, `..._invalid_messages_total`,
//!   `..._storage_errors_total`, `..._overloaded_total` (all `{node}`)
//!
//! HTTP servers (`server` = `management` or `kv`; recorded by `management::limits`):
//! - `concord_http_connections{node,server}`, `concord_http_max_connections{node,server}`
//!   (gauges: open connections, the cap in force)
//! - `concord_http_connections_refused_total{node,server,reason}` (`server-cap`, `source-cap`),
//!   `concord_http_timeouts_total{node,server,kind}` (`header`, `idle`, `tls-handshake`),
//!   `concord_http_accept_errors_total{node,server}`

use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

use concord_core::{CoreStats, Lane, MemberStatus, MembershipView};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::remote::TransportStats;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once); `None` if another recorder was
/// installed by the embedding program.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .as_ref()
}

/// Makes sure the process-wide recorder is installed before a layer records a metric.
pub(crate) fn ensure_recorder() {
    let _ = handle();
}

/// Renders all metrics in Prometheus text format.
pub fn render() -> String {
    handle().map(|h| h.render()).unwrap_or_default()
}

pub(crate) fn message_sent(node: &str, kind: &'static str, bytes: usize, gossip: bool) {
    let _ = handle();
    metrics::counter!("concord_cluster_messages_sent_total", "node" => node.to_string(), "kind" => kind).increment(1);
    if gossip {
        metrics::counter!("concord_cluster_gossip_bytes_out_total", "node" => node.to_string())
            .increment(bytes as u64);
    }
}

pub(crate) fn message_received(node: &str, kind: &'static str, bytes: usize) {
    let _ = handle();
    metrics::counter!("concord_cluster_messages_received_total", "node" => node.to_string(), "kind" => kind).increment(1);
    if kind == "GossipEnvelope" || kind == "GossipStatus" {
        metrics::counter!("concord_cluster_gossip_bytes_in_total", "node" => node.to_string())
            .increment(bytes as u64);
    }
}

pub(crate) fn heartbeat_rtt(node: &str, rtt_ms: u64) {
    let _ = handle();
    metrics::histogram!("concord_cluster_heartbeat_rtt_seconds", "node" => node.to_string())
        .record(rtt_ms as f64 / 1000.0);
}

/// The island report: other clusters of this system name found (gauge).
pub(crate) fn record_other_clusters(node: &str, n: usize) {
    let _ = handle();
    metrics::gauge!("concord_cluster_other_clusters", "node" => node.to_string()).set(n as f64);
}

pub(crate) fn record_membership(node: &str, view: &MembershipView, stats: &CoreStats) {
    let _ = handle();
    metrics::counter!("concord_cluster_self_joins_refused_total", "node" => node.to_string())
        .absolute(stats.self_joins_refused);
    for st in MemberStatus::ALL {
        let n = view.members_with_status(st).count();
        metrics::gauge!("concord_cluster_members", "node" => node.to_string(), "status" => st.as_str())
            .set(n as f64);
    }
    metrics::gauge!("concord_cluster_unreachable_members", "node" => node.to_string())
        .set(view.unreachable.len() as f64);
    metrics::gauge!("concord_cluster_is_leader", "node" => node.to_string())
        .set(if view.is_leader() { 1.0 } else { 0.0 });
    metrics::gauge!("concord_cluster_convergence", "node" => node.to_string())
        .set(if view.is_converged() { 1.0 } else { 0.0 });
    metrics::counter!("concord_cluster_gossip_rounds_total", "node" => node.to_string())
        .absolute(stats.gossip_rounds);
    metrics::counter!("concord_cluster_sbr_decisions_total", "node" => node.to_string())
        .absolute(stats.sbr_decisions);
    for (cause, v) in ["stable", "unstable", "double-decision"]
        .into_iter()
        .zip(stats.sbr_down_all)
    {
        metrics::counter!("concord_cluster_sbr_down_all_total", "node" => node.to_string(), "cause" => cause)
            .absolute(v);
    }
    for (reason, v) in [
        ("non-member", stats.refused_non_member),
        ("implausible-clock", stats.implausible_clocks),
        ("join-throttled", stats.join_requests_throttled),
    ] {
        metrics::counter!("concord_cluster_refused_messages_total", "node" => node.to_string(), "reason" => reason)
            .absolute(v);
    }
}

/// Copies the transport's counters into the registry (called when `/metrics` is scraped).
pub fn record_transport(node: &concord_core::Address, t: &TransportStats) {
    let _ = handle();
    let node = node.to_string();
    for lane in Lane::ALL {
        let s = t.lane(lane);
        let l = lane.as_str();
        for (name, v) in [
            ("concord_remote_frames_out_total", &s.frames_out),
            ("concord_remote_bytes_out_total", &s.bytes_out),
            ("concord_remote_frames_in_total", &s.frames_in),
            ("concord_remote_bytes_in_total", &s.bytes_in),
            ("concord_remote_writes_total", &s.writes),
            ("concord_remote_dropped_outbound_total", &s.dropped_outbound),
        ] {
            metrics::counter!(name, "node" => node.clone(), "lane" => l).absolute(v.load(Relaxed));
        }
    }
    for (p, s) in t.protocols() {
        let name = p.name();
        for (metric, v) in [
            ("concord_remote_messages_sent_total", &s.messages_out),
            ("concord_remote_payload_bytes_sent_total", &s.bytes_out),
            (
                "concord_remote_messages_received_total",
                &s.inbound.messages_in,
            ),
            (
                "concord_remote_payload_bytes_received_total",
                &s.inbound.bytes_in,
            ),
            (
                "concord_remote_unknown_messages_total",
                &s.inbound.unknown_messages,
            ),
        ] {
            metrics::counter!(metric, "node" => node.clone(), "protocol" => name.clone())
                .absolute(v.load(Relaxed));
        }
    }
    for (name, v) in [
        ("concord_remote_unknown_protocol_total", &t.unknown_protocol),
        (
            "concord_remote_wrong_incarnation_total",
            &t.wrong_incarnation,
        ),
        ("concord_remote_malformed_frames_total", &t.malformed_frames),
        (
            "concord_remote_handshakes_refused_total",
            &t.handshakes_refused,
        ),
        (
            "concord_remote_authentication_failures_total",
            &t.authentication_failures,
        ),
        (
            "concord_remote_outbound_authentication_failures_total",
            &t.outbound_authentication_failures,
        ),
        (
            "concord_remote_handshake_timeouts_total",
            &t.handshake_timeouts,
        ),
        (
            "concord_remote_connections_refused_total",
            &t.connections_refused,
        ),
        ("concord_remote_read_timeouts_total", &t.read_timeouts),
        (
            "concord_remote_buffer_limit_hits_total",
            &t.buffer_limit_hits,
        ),
        (
            "concord_remote_decompression_limit_hits_total",
            &t.decompression_limit_hits,
        ),
        ("concord_remote_accept_errors_total", &t.accept_errors),
    ] {
        metrics::counter!(name, "node" => node.clone()).absolute(v.load(Relaxed));
    }
}

/// Inbound connections open now and the cap in effect (gauges), and the TLS reload
/// counters when TLS is configured.
pub fn record_connections(
    node: &concord_core::Address,
    open: usize,
    cap: usize,
    tls: Option<&crate::tls::TlsReloadStats>,
) {
    let _ = handle();
    let node = node.to_string();
    metrics::gauge!("concord_remote_inbound_connections", "node" => node.clone()).set(open as f64);
    metrics::gauge!("concord_remote_max_inbound_connections", "node" => node.clone())
        .set(cap as f64);
    if let Some(t) = tls {
        metrics::counter!("concord_tls_reloads_total", "node" => node.clone(), "result" => "ok")
            .absolute(t.reloads.load(Relaxed));
        metrics::counter!("concord_tls_reloads_total", "node" => node, "result" => "failed")
            .absolute(t.failures.load(Relaxed));
    }
}

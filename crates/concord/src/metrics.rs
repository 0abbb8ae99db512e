//! Prometheus metrics through the `metrics` facade; rendered at `GET /metrics`.
//!
//! Every series carries a `node` label (the node address), so several nodes in one process
//! (tests, embedding) stay apart. Names:
//! - `concord_cluster_members{node,status}` — members by status (gauge)
//! - `concord_cluster_unreachable_members{node}` — unreachable members (gauge)
//! - `concord_cluster_is_leader{node}` — 1 when this node is the leader (gauge)
//! - `concord_cluster_convergence{node}` — 1 when the view has converged (gauge)
//! - `concord_cluster_messages_sent_total{node,kind}` / `..._received_total{node,kind}`
//! - `concord_cluster_gossip_rounds_total{node}`
//! - `concord_remote_bytes_received_total{node}` — inbound frame bytes
//! - `concord_remote_{frames,bytes}_{in,out}_total{node}`, `concord_remote_malformed_frames_total`,
//!   `concord_remote_handshakes_refused_total`, `concord_remote_dropped_outbound_total` — transport
//!   counters, read when `/metrics` is scraped

use std::sync::OnceLock;

use concord_core::{MemberStatus, Transmit, UniqueAddress};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::cluster::ClusterSnapshot;
use crate::remote::transport::{Inbound, TransportStats};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once); `None` if another recorder was
/// installed by the embedding program.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .as_ref()
}

/// Renders all metrics in Prometheus text format.
pub fn render() -> String {
    handle().map(|h| h.render()).unwrap_or_default()
}

pub(crate) fn message_sent(node: &str, t: &Transmit) {
    let _ = handle();
    metrics::counter!("concord_cluster_messages_sent_total", "node" => node.to_string(), "kind" => t.message.kind()).increment(1);
}

pub(crate) fn message_received(node: &str, m: &Inbound) {
    let _ = handle();
    metrics::counter!("concord_cluster_messages_received_total", "node" => node.to_string(), "kind" => m.message.kind()).increment(1);
    metrics::counter!("concord_remote_bytes_received_total", "node" => node.to_string())
        .increment(m.bytes as u64);
    if m.message.is_gossip() {
        metrics::counter!("concord_cluster_gossip_bytes_in_total", "node" => node.to_string())
            .increment(m.bytes as u64);
    }
}

pub(crate) fn record_state(s: &ClusterSnapshot, me: &UniqueAddress) {
    let _ = handle();
    let node = me.address.to_string();
    for st in MemberStatus::ALL {
        let n = s.state.members.iter().filter(|m| m.status == st).count();
        metrics::gauge!("concord_cluster_members", "node" => node.clone(), "status" => st.as_str())
            .set(n as f64);
    }
    metrics::gauge!("concord_cluster_unreachable_members", "node" => node.clone())
        .set(s.state.unreachable.len() as f64);
    let leader = s.state.leader.as_ref() == Some(&me.address);
    metrics::gauge!("concord_cluster_is_leader", "node" => node.clone()).set(if leader {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("concord_cluster_convergence", "node" => node.clone())
        .set(if s.state.convergence { 1.0 } else { 0.0 });
    metrics::counter!("concord_cluster_gossip_rounds_total", "node" => node)
        .absolute(s.stats.gossip_rounds);
}

/// Copies the transport's counters into the registry (called when `/metrics` is scraped).
pub(crate) fn record_transport(node: &concord_core::Address, t: &TransportStats) {
    use std::sync::atomic::Ordering::Relaxed;
    let _ = handle();
    let node = node.to_string();
    let pairs = [
        ("concord_remote_frames_out_total", &t.frames_out),
        ("concord_remote_bytes_out_total", &t.bytes_out),
        ("concord_remote_frames_in_total", &t.frames_in),
        ("concord_remote_bytes_in_total", &t.bytes_in),
        ("concord_remote_malformed_frames_total", &t.malformed_frames),
        (
            "concord_remote_handshakes_refused_total",
            &t.handshakes_refused,
        ),
        ("concord_remote_dropped_outbound_total", &t.dropped_outbound),
        (
            "concord_cluster_gossip_bytes_out_total",
            &t.gossip_bytes_out,
        ),
    ];
    for (name, v) in pairs {
        metrics::counter!(name, "node" => node.clone()).absolute(v.load(Relaxed));
    }
}

//! Scale study: the simulator's convergence times (join, leave, crash → unreachable,
//! crash → removed) and steady-state gossip traffic for clusters of N nodes with Akka's
//! default timings, sized with the real wire codec. The study itself is
//! `concord_sim::scale`; this bench adds the bytes (the membership codec, which needs no runtime).
//! Run: `cargo bench -p concord-sim --bench scale -- 10,100,1000,2400`.

#[path = "../../concord/benches/bench_util.rs"]
mod bench_util;

use concord::cluster::codec::{compress_gossip, MembershipCodec};
use concord::remote::Codec;
use concord_core::ClusterMessage;

fn main() {
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "10,100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!("scale study on {}", bench_util::machine());
    println!(
        "{:>6} {:>10} {:>8} {:>10} {:>14} {:>14} {:>12} {:>14} {:>8}",
        "nodes",
        "join ms",
        "rounds",
        "leave ms",
        "crash→unreach",
        "crash→removed",
        "gossip B/s",
        "gossip msg/s",
        "wall s"
    );
    let mut rows = Vec::new();
    for n in sizes {
        let r = concord_sim::scale::study(n, 1);
        let g = &r.steady_state_gossip;
        let status_bytes = MembershipCodec::default()
            .encode(&ClusterMessage::GossipStatus {
                version: g.version.clone(),
                seen_digest: g.seen_digest(),
            })
            .1
            .len() as f64;
        let envelope_bytes = compress_gossip(g).1.compressed as f64;
        let bytes_per_s = r.gossip_status_per_node_per_s * status_bytes
            + r.gossip_envelopes_per_node_per_s * envelope_bytes;
        let msgs_per_s = r.gossip_status_per_node_per_s + r.gossip_envelopes_per_node_per_s;
        let f = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "{:>6} {:>10} {:>8.1} {:>10} {:>14} {:>14} {:>12.0} {:>14.2} {:>8.1}",
            r.nodes,
            f(r.join_ms),
            r.join_ms.unwrap_or(0) as f64 / 1000.0,
            f(r.leave_ms),
            f(r.crash_unreachable_ms),
            f(r.crash_removed_ms),
            bytes_per_s,
            msgs_per_s,
            r.wall_s
        );
        rows.push(serde_json::json!({
            "nodes": r.nodes, "join_ms": r.join_ms, "leave_ms": r.leave_ms,
            "crash_unreachable_ms": r.crash_unreachable_ms, "crash_removed_ms": r.crash_removed_ms,
            "gossip_bytes_per_node_per_s": bytes_per_s, "gossip_msgs_per_node_per_s": msgs_per_s,
            "wall_s": r.wall_s,
        }));
    }
    bench_util::write_result(
        "scale",
        &serde_json::json!({"machine": bench_util::machine(), "rows": rows}),
    );
}

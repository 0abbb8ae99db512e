//! Gossip state size in bytes, protobuf raw and gzipped, for 10, 100, 1000 (and 2400)
//! members — all Up, everyone in the seen set, a full vector clock, no unreachability.
//! Run: `cargo bench -p concord --bench gossip_size`.

mod bench_util;

use concord::cluster::codec::{compress_gossip, MembershipCodec};
use concord::remote::Codec;
use concord_core::{Address, ClusterMessage, Gossip, Member, UniqueAddress};

fn gossip(n: u32) -> Gossip {
    let mut g = Gossip::empty();
    for i in 0..n {
        let host = format!("10.0.{}.{}", i / 250, i % 250 + 1);
        let ua = UniqueAddress::new(
            Address::new("concord", host, 25520),
            u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        let m =
            Member::joining(ua.clone(), ["dc-default".to_string()].into(), "1.0.0").with_up(i + 1);
        g.members.insert(ua.clone(), m);
        g.version = g.version.increment(&ua);
        g.overview.seen.insert(ua);
    }
    g
}

fn main() {
    println!("gossip_size on {}", bench_util::machine());
    println!(
        "{:>8} {:>12} {:>12} {:>8} {:>14}",
        "members", "raw bytes", "gzip bytes", "ratio", "status bytes"
    );
    let mut rows = Vec::new();
    for n in [10u32, 100, 1000, 2400] {
        let g = gossip(n);
        let (_, size) = compress_gossip(&g);
        let status = MembershipCodec::default()
            .encode(&ClusterMessage::GossipStatus {
                version: g.version.clone(),
                seen_digest: g.seen_digest(),
            })
            .1
            .len();
        println!(
            "{:>8} {:>12} {:>12} {:>7.1}x {:>14}",
            n,
            size.raw,
            size.compressed,
            size.raw as f64 / size.compressed as f64,
            status
        );
        rows.push(serde_json::json!({"members": n, "raw_bytes": size.raw, "gzip_bytes": size.compressed, "gossip_status_bytes": status}));
    }
    bench_util::write_result(
        "gossip_size",
        &serde_json::json!({"machine": bench_util::machine(), "rows": rows}),
    );
}

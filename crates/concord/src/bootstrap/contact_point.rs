//! The contact point: `GET /bootstrap/seed-nodes` on the management server, its JSON, and
//! the HTTP probe a bootstrapping node sends to it (Akka Management's
//! `HttpContactPointRoutes` / `HttpContactPointBootstrap`).

use std::collections::BTreeSet;
use std::time::Duration;

use concord_core::{Member, MemberStatus, MembershipView};
use serde::{Deserialize, Serialize};

use crate::discovery::ResolvedTarget;

/// The contact points of a lookup, each without a port given `fallback` (the management
/// port unless `contact-point.fallback-port` is set), without duplicates.
pub(super) fn with_fallback_port(
    found: Vec<ResolvedTarget>,
    fallback: u16,
) -> BTreeSet<ResolvedTarget> {
    found
        .into_iter()
        .map(|mut t| {
            t.port = t.port.or(Some(fallback));
            t
        })
        .collect()
}

/// At most this many seed nodes are reported.
pub const MAX_SEED_NODES: usize = 5;

/// A probe reads at most this much of an answer, bytes (an honest one, with
/// [`MAX_SEED_NODES`] seed nodes, is under 2 KiB); a longer one is an error.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// One reported seed node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SeedNodeJson {
    /// `concord://system@host:port`.
    pub node: String,
    /// The member's uid, a number (as in Akka's contact point).
    pub node_uid: u64,
    /// Member status.
    pub status: String,
    /// Roles.
    pub roles: Vec<String>,
}

/// `{"selfNode": "...", "seedNodes": [...]}`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SeedNodesJson {
    /// The answering node.
    pub self_node: String,
    /// Up to [`MAX_SEED_NODES`] reachable Up, WeaklyUp or Joining members (empty when the
    /// node is not in a cluster).
    pub seed_nodes: Vec<SeedNodeJson>,
}

/// The contact point's answer from this node's view: reachable members that are Up,
/// WeaklyUp or Joining, Up first (oldest first), at most [`MAX_SEED_NODES`].
pub fn seed_nodes_json(self_node: &str, v: &MembershipView) -> SeedNodesJson {
    if v.self_member().is_none() {
        return SeedNodesJson {
            self_node: self_node.to_string(),
            seed_nodes: Vec::new(),
        };
    }
    let rank = |m: &Member| match m.status {
        MemberStatus::Up => 0,
        MemberStatus::WeaklyUp => 1,
        _ => 2,
    };
    let mut candidates: Vec<&Member> = v
        .members
        .values()
        .filter(|m| {
            matches!(
                m.status,
                MemberStatus::Up | MemberStatus::WeaklyUp | MemberStatus::Joining
            )
        })
        .filter(|m| v.is_reachable(&m.unique_address))
        .collect();
    candidates.sort_by_key(|m| (rank(m), m.up_number));
    SeedNodesJson {
        self_node: self_node.to_string(),
        seed_nodes: candidates
            .into_iter()
            .take(MAX_SEED_NODES)
            .map(|m| SeedNodeJson {
                node: m.address().to_string(),
                node_uid: m.unique_address.uid,
                status: m.status.to_string(),
                roles: m.roles.iter().cloned().collect(),
            })
            .collect(),
    }
}

/// The URL of a contact point's seed-nodes route (`scheme`: `http` or `https`).
pub fn seed_nodes_url(scheme: &str, target: &ResolvedTarget, default_port: u16) -> String {
    let host = match target.address {
        Some(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        Some(ip) => ip.to_string(),
        None => target.host.clone(),
    };
    format!(
        "{scheme}://{host}:{}/bootstrap/seed-nodes",
        target.port.unwrap_or(default_port)
    )
}

/// Probes one contact point; errors (unreachable, timeout, an answer longer than
/// [`MAX_ANSWER_BYTES`], not our JSON) as text.
pub async fn probe(
    http: &reqwest::Client,
    scheme: &str,
    target: &ResolvedTarget,
    default_port: u16,
    timeout: Duration,
) -> Result<SeedNodesJson, String> {
    let url = seed_nodes_url(scheme, target, default_port);
    let mut resp = http
        .get(&url)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "{url}: answer longer than {MAX_ANSWER_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice::<SeedNodesJson>(&body)
        .map_err(|e| format!("{url}: not a seed-nodes answer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Serves one HTTP/1.1 answer with `body` on a loopback port; returns the target.
    async fn serve_once(body: Vec<u8>) -> ResolvedTarget {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(&body).await;
        });
        ResolvedTarget::new("127.0.0.1", Some(port))
    }

    #[tokio::test]
    async fn a_probe_reads_an_answer_and_refuses_one_that_is_too_long() {
        crate::tls::install_default_provider();
        let http = crate::tls::http_client_builder().build().unwrap();
        let t = Duration::from_secs(5);
        let ok = br#"{"selfNode":"concord://s@127.0.0.1:1","seedNodes":[]}"#.to_vec();
        let target = serve_once(ok).await;
        let answer = probe(&http, "http", &target, 0, t).await.unwrap();
        assert_eq!(answer.self_node, "concord://s@127.0.0.1:1");
        let huge = vec![b' '; MAX_ANSWER_BYTES + 1];
        let target = serve_once(huge).await;
        let e = probe(&http, "http", &target, 0, t).await.unwrap_err();
        assert!(e.contains("longer than"), "{e}");
    }
}

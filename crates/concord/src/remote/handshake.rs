//! The handshake that opens every connection.
//!
//! 0. The connecting side must send its first bytes within `handshake-first-byte-timeout`
//!    (1 s; a connection that sends nothing holds a handshake place no longer), and finish
//!    within `handshake-timeout` of the connection's accept.
//! 1. With `[remote.tls]`, a TLS 1.3 handshake in which both sides present a node
//!    certificate ([`crate::tls::role`]: a client certificate of the same CA is refused on
//!    either side) signed by a trusted authority, and — with `verify-peer-hostname`, on by
//!    default — one that names the host: the host dialled, or the host the connecting side
//!    claims in step 2.
//! 2. The connecting side sends a `Handshake`: its unique address, the target address, the
//!    cluster name, the protocol version, the lane, and a nonce when it has a cluster
//!    secret. The accepting side refuses a wrong cluster name, an unknown protocol version,
//!    an unknown lane, a target other than its own advertised address (host and port, as
//!    Artery refuses a handshake "addressed to unknown local address") or a quarantined
//!    incarnation with a clear reason on both ends.
//! 3. With a cluster secret, the challenge–response of [`super::cluster_secret`]: the
//!    accepting side proves the secret first, then the connecting side. A peer without the
//!    secret, or with another, is refused.
//! 4. The accepting side replies with its unique address. The uid in it is 0 unless the
//!    connecting side authenticated in step 1 or 3: a stranger does not learn it.
//!
//! Every refusal is counted and logged at most once per peer and interval.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use concord_core::{Address, Lane, UniqueAddress};
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tracing::{debug, warn};

use super::address_wire::{address_from_wire, address_to_wire, unique_from_wire, unique_to_wire};
use super::cluster_secret::{nonce, NONCE_BYTES};
use super::stats::inc;
use super::stream::Stream;
use super::transport_state::Inner;
use super::version::PROTOCOL_VERSION;
use super::wire;
use crate::tls::context::certificate_names_host;
use crate::tls::describe_tls_error;

/// Largest handshake frame accepted, bytes (a handshake is a few hundred bytes).
pub(crate) const MAX_HANDSHAKE_BYTES: usize = 16 * 1024;

/// A length-delimited codec with frames of at most `max` bytes.
pub(crate) fn frame_codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(max)
        .new_codec()
}

/// Checks an inbound handshake: `Ok((sender, lane))`, or the reason to refuse and whether
/// the refusal is because the sender is quarantined.
pub(crate) fn check_inbound(
    inner: &Inner,
    hs: &wire::Handshake,
) -> Result<(UniqueAddress, Lane), (String, bool)> {
    check_handshake(&inner.self_address.address, |u| inner.is_quarantined(u), hs)
}

/// [`check_inbound`] for a node at `me` with the quarantine test `is_quarantined`.
pub(crate) fn check_handshake(
    me: &Address,
    is_quarantined: impl Fn(&UniqueAddress) -> bool,
    hs: &wire::Handshake,
) -> Result<(UniqueAddress, Lane), (String, bool)> {
    if hs.protocol_version != PROTOCOL_VERSION {
        return Err((
            format!(
                "unsupported protocol version {} (this node speaks {PROTOCOL_VERSION}, concord {}): \
                 a rolling upgrade between these versions is not supported (docs/UPGRADES.md)",
                hs.protocol_version,
                env!("CARGO_PKG_VERSION")
            ),
            false,
        ));
    }
    if hs.cluster_name != me.system {
        return Err((
            format!(
                "cluster name `{}` does not match this node's cluster name `{}`",
                hs.cluster_name, me.system
            ),
            false,
        ));
    }
    let lane =
        Lane::from_index(hs.lane).ok_or_else(|| (format!("unknown lane {}", hs.lane), false))?;
    let from = hs
        .from
        .as_ref()
        .ok_or_else(|| "handshake without a sender address".to_string())
        .and_then(|u| unique_from_wire(u).map_err(|e| format!("bad sender address: {e}")))
        .map_err(|r| (r, false))?;
    if from.address.system != me.system {
        return Err((
            format!("sender {} belongs to another cluster", from.address),
            false,
        ));
    }
    let to = hs
        .to
        .as_ref()
        .ok_or_else(|| "handshake without a target address".to_string())
        .and_then(|t| address_from_wire(t).map_err(|e| format!("bad target address: {e}")))
        .map_err(|r| (r, false))?;
    if !is_this_address(me, &to) {
        return Err((
            format!(
                "handshake for {to} arrived at {me}: a peer must dial this node by its \
                 advertised address (remote.hostname `{}`, port {}); seed-nodes and joins \
                 must name it",
                me.host, me.port
            ),
            false,
        ));
    }
    if is_quarantined(&from) {
        return Err((
            format!("incarnation {from} is quarantined (it was removed from the cluster); restart it to join again"),
            true,
        ));
    }
    Ok((from, lane))
}

/// True if `to` is `me`, this node's advertised address: the same system and port, and the
/// same host — DNS names compared without case, IP addresses by value (`::1` is
/// `[::1]` is `0:0:0:0:0:0:0:1`). Another name or address of this machine (the bind
/// address, another interface, `localhost` for `127.0.0.1`) is not this node's address.
pub(crate) fn is_this_address(me: &Address, to: &Address) -> bool {
    fn ip(host: &str) -> Option<std::net::IpAddr> {
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok()
    }
    let same_host = match (ip(&me.host), ip(&to.host)) {
        (Some(a), Some(b)) => a.to_canonical() == b.to_canonical(),
        _ => me.host.eq_ignore_ascii_case(&to.host),
    };
    same_host && to.port == me.port && to.system == me.system
}

fn reply(result: wire::handshake_reply::Result, quarantined: bool) -> Bytes {
    Bytes::from(
        wire::HandshakeReply {
            result: Some(result),
            quarantined,
        }
        .encode_to_vec(),
    )
}

/// The reply refusing a handshake.
pub(crate) fn refusal(reason: String, quarantined: bool) -> Bytes {
    reply(wire::handshake_reply::Result::Rejected(reason), quarantined)
}

/// The reply accepting a handshake: this node, its uid only for an authenticated peer.
pub(crate) fn acceptance(me: &UniqueAddress, authenticated: bool) -> Bytes {
    let shown = UniqueAddress::new(me.address.clone(), if authenticated { me.uid } else { 0 });
    reply(
        wire::handshake_reply::Result::Accepted(unique_to_wire(&shown)),
        false,
    )
}

/// An inbound connection past its handshake.
pub(crate) struct Accepted {
    pub(crate) stream: Stream,
    /// Bytes that arrived with the handshake: the start of the first frames.
    pub(crate) read_buf: BytesMut,
    pub(crate) from: UniqueAddress,
    pub(crate) lane: Lane,
}

/// Why an inbound handshake failed (for the counters and the log line).
enum Refused {
    /// The TLS handshake failed, or the certificate does not name the claimed host, or the
    /// cluster secret is wrong or missing.
    Authentication(String),
    /// The handshake broke the protocol (not a Handshake, wrong version, cluster, lane...).
    Protocol(String),
    /// The connection closed or failed during the handshake.
    Closed,
}

/// Runs the accepting side of the handshake on `tcp`: its first bytes within
/// `handshake-first-byte-timeout`, all of it within `handshake-timeout` of `accepted_at`;
/// `None` (counted and logged, rate-limited per peer) if the peer is refused.
pub(crate) async fn accept(
    inner: &Inner,
    tcp: TcpStream,
    peer: SocketAddr,
    accepted_at: tokio::time::Instant,
) -> Option<Accepted> {
    let settings = &inner.settings;
    let first_byte_deadline = accepted_at
        + settings
            .handshake_first_byte_timeout
            .min(settings.handshake_timeout);
    let mut probe = [0u8; 1];
    match tokio::time::timeout_at(first_byte_deadline, tcp.peek(&mut probe)).await {
        Ok(Ok(n)) if n > 0 => {}
        // Closed (or failed) before sending anything.
        Ok(_) => return None,
        Err(_) => {
            inc(&inner.stats.handshake_timeouts);
            if let Some(suppressed) = inner.log.allow(&format!("inbound-{}", peer.ip())) {
                let reason = format!(
                    "no byte within handshake-first-byte-timeout ({:?})",
                    settings.handshake_first_byte_timeout
                );
                warn!(%peer, %reason, suppressed, "inbound connection closed: handshake timed out");
            }
            return None;
        }
    }
    let result = tokio::time::timeout_at(
        accepted_at + settings.handshake_timeout,
        accept_within(inner, tcp, peer),
    )
    .await;
    let (what, reason) = match result {
        Ok(Ok(a)) => return Some(a),
        Ok(Err(Refused::Closed)) => return None,
        Ok(Err(Refused::Authentication(r))) => {
            inc(&inner.stats.authentication_failures);
            ("authentication failed", r)
        }
        Ok(Err(Refused::Protocol(r))) => {
            inc(&inner.stats.handshakes_refused);
            ("handshake refused", r)
        }
        Err(_) => {
            inc(&inner.stats.handshake_timeouts);
            (
                "handshake timed out",
                format!(
                    "no complete handshake within {:?}",
                    inner.settings.handshake_timeout
                ),
            )
        }
    };
    if let Some(suppressed) = inner.log.allow(&format!("inbound-{}", peer.ip())) {
        warn!(%peer, %reason, suppressed, "inbound connection closed: {what}");
    }
    None
}

async fn accept_within(
    inner: &Inner,
    tcp: TcpStream,
    peer: SocketAddr,
) -> Result<Accepted, Refused> {
    let stream = match &inner.settings.tls {
        None => Stream::Plain(tcp),
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
            let s = acceptor
                .accept(tcp)
                .await
                .map_err(|e| Refused::Authentication(format!("TLS: {}", describe_tls_error(&e))))?;
            Stream::Tls(Box::new(tokio_rustls::TlsStream::Server(s)))
        }
    };
    let mut framed = Framed::new(stream, frame_codec(MAX_HANDSHAKE_BYTES));
    let first = match framed.next().await {
        Some(Ok(f)) => f.freeze(),
        Some(Err(e)) => {
            inc(&inner.stats.malformed_frames);
            return Err(Refused::Protocol(format!("malformed first frame: {e}")));
        }
        None => return Err(Refused::Closed),
    };
    let hs = wire::Handshake::decode(first.clone()).map_err(|e| {
        inc(&inner.stats.malformed_frames);
        Refused::Protocol(format!("malformed handshake: {e}"))
    })?;
    let (from, lane) = match check_inbound(inner, &hs) {
        Ok(ok) => ok,
        Err((reason, quarantined)) => {
            let _ = framed.send(refusal(reason.clone(), quarantined)).await;
            return Err(Refused::Protocol(reason));
        }
    };
    if let Some(tls) = &inner.settings.tls {
        if tls.verify_peer_hostname() {
            let leaf = framed
                .get_ref()
                .peer_certificates()
                .and_then(|c| c.first())
                .ok_or_else(|| Refused::Authentication("no client certificate".into()))?;
            if let Err(reason) = certificate_names_host(leaf, &from.address.host) {
                let reason = format!(
                    "{reason}: its certificate must name the host it claims \
                     (remote.tls.verify-peer-hostname; `concord certs create-node` HOST...)"
                );
                let _ = framed.send(refusal(reason.clone(), false)).await;
                return Err(Refused::Authentication(reason));
            }
        }
    }
    if let Some(secret) = &inner.settings.secret {
        if hs.nonce.len() != NONCE_BYTES {
            let reason = "this node requires the cluster secret (remote.secret)".to_string();
            let _ = framed.send(refusal(reason.clone(), false)).await;
            return Err(Refused::Authentication(reason));
        }
        let server_nonce = nonce();
        let challenge = wire::SecretChallenge {
            proof: Bytes::from(secret.server_proof(&first, &server_nonce)),
            nonce: Bytes::from(server_nonce.clone()),
        };
        framed
            .send(reply(
                wire::handshake_reply::Result::Challenge(challenge),
                false,
            ))
            .await
            .map_err(|_| Refused::Closed)?;
        let answer = match framed.next().await {
            Some(Ok(f)) => f.freeze(),
            Some(Err(e)) => {
                return Err(Refused::Authentication(format!(
                    "no cluster-secret proof (malformed frame: {e})"
                )))
            }
            None => {
                // A peer without the secret gives up here: it could not check our proof.
                return Err(Refused::Authentication(
                    "the peer closed the connection at the cluster-secret challenge".into(),
                ));
            }
        };
        let proof = wire::SecretProof::decode(answer).map_err(|e| {
            Refused::Authentication(format!("no cluster-secret proof (malformed: {e})"))
        })?;
        if !secret.verify_client(&first, &server_nonce, &proof.proof) {
            let reason = "wrong cluster secret".to_string();
            let _ = framed.send(refusal(reason.clone(), false)).await;
            return Err(Refused::Authentication(reason));
        }
    }
    let authenticated = inner.settings.authenticates_peers();
    framed
        .send(acceptance(&inner.self_address, authenticated))
        .await
        .map_err(|_| Refused::Closed)?;
    debug!(%from, %peer, lane = lane.as_str(), "inbound association established");
    let parts = framed.into_parts();
    Ok(Accepted {
        stream: parts.io,
        read_buf: parts.read_buf,
        from,
        lane,
    })
}

/// Why an outbound connection could not be established.
pub(crate) enum ConnectError {
    Io(std::io::Error),
    Refused(String),
    Quarantined(String),
    Protocol(String),
    /// TLS failed, or the peer failed the cluster-secret challenge (or has none).
    Authentication(String),
}

/// Connects to `to` for `lane` and runs the handshake within `handshake-timeout`; returns
/// the stream (ready for frames) and the peer's unique address — its uid is 0 when the
/// peer did not reveal it (no authentication configured).
pub(crate) async fn connect(
    inner: &Inner,
    to: &Address,
    lane: Lane,
) -> Result<(Stream, UniqueAddress), ConnectError> {
    let timeout = inner.settings.handshake_timeout;
    match tokio::time::timeout(timeout, connect_within(inner, to, lane)).await {
        Ok(r) => r,
        Err(_) => Err(ConnectError::Protocol(format!(
            "no complete handshake within handshake-timeout ({timeout:?})"
        ))),
    }
}

async fn connect_within(
    inner: &Inner,
    to: &Address,
    lane: Lane,
) -> Result<(Stream, UniqueAddress), ConnectError> {
    let tcp = TcpStream::connect(to.host_port())
        .await
        .map_err(ConnectError::Io)?;
    let _ = tcp.set_nodelay(true);
    let stream = match &inner.settings.tls {
        None => Stream::Plain(tcp),
        Some(tls) => {
            let name = ServerName::try_from(to.host.clone()).map_err(|e| {
                ConnectError::Protocol(format!("`{}` is not a valid TLS server name: {e}", to.host))
            })?;
            let connector = tokio_rustls::TlsConnector::from(tls.client_config());
            let s = connector.connect(name, tcp).await.map_err(|e| {
                ConnectError::Authentication(format!("TLS: {}", describe_tls_error(&e)))
            })?;
            Stream::Tls(Box::new(tokio_rustls::TlsStream::Client(s)))
        }
    };
    let mut framed = Framed::new(stream, frame_codec(MAX_HANDSHAKE_BYTES));
    let secret = inner.settings.secret.as_ref();
    let hs = wire::Handshake {
        from: Some(unique_to_wire(&inner.self_address)),
        to: Some(address_to_wire(to)),
        protocol_version: PROTOCOL_VERSION,
        cluster_name: inner.self_address.address.system.clone(),
        lane: lane.index() as u32,
        nonce: if secret.is_some() {
            Bytes::from(nonce())
        } else {
            Bytes::new()
        },
    };
    let hs_bytes = Bytes::from(hs.encode_to_vec());
    framed
        .send(hs_bytes.clone())
        .await
        .map_err(ConnectError::Io)?;
    let mut reply = read_reply(&mut framed).await?;
    if let Some(wire::handshake_reply::Result::Challenge(c)) = &reply.result {
        let Some(secret) = secret else {
            return Err(ConnectError::Authentication(
                "the peer requires a cluster secret and this node has none (remote.secret)".into(),
            ));
        };
        if !secret.verify_server(&hs_bytes, &c.nonce, &c.proof) {
            return Err(ConnectError::Authentication(
                "the peer does not know this cluster's secret".into(),
            ));
        }
        let proof = wire::SecretProof {
            proof: Bytes::from(secret.client_proof(&hs_bytes, &c.nonce)),
        };
        framed
            .send(Bytes::from(proof.encode_to_vec()))
            .await
            .map_err(ConnectError::Io)?;
        reply = read_reply(&mut framed).await?;
    } else if secret.is_some()
        && matches!(
            reply.result,
            Some(wire::handshake_reply::Result::Accepted(_))
        )
    {
        // It accepted without proving the secret: not a member of this cluster.
        return Err(ConnectError::Authentication(
            "the peer accepted without the cluster-secret challenge (it has no secret)".into(),
        ));
    }
    match reply.result {
        Some(wire::handshake_reply::Result::Accepted(u)) => {
            let peer = unique_from_wire(&u).map_err(|e| ConnectError::Protocol(e.to_string()))?;
            if peer.address.system != inner.self_address.address.system {
                return Err(ConnectError::Refused(format!(
                    "peer belongs to cluster `{}`",
                    peer.address.system
                )));
            }
            if peer.uid != 0 && inner.is_quarantined(&peer) {
                return Err(ConnectError::Refused(format!(
                    "peer incarnation {peer} is quarantined"
                )));
            }
            Ok((framed.into_inner(), peer))
        }
        Some(wire::handshake_reply::Result::Rejected(reason)) if reply.quarantined => {
            Err(ConnectError::Quarantined(reason))
        }
        Some(wire::handshake_reply::Result::Rejected(reason)) => Err(ConnectError::Refused(reason)),
        Some(wire::handshake_reply::Result::Challenge(_)) => Err(ConnectError::Protocol(
            "a second cluster-secret challenge".into(),
        )),
        None => Err(ConnectError::Protocol("empty handshake reply".into())),
    }
}

async fn read_reply(
    framed: &mut Framed<Stream, LengthDelimitedCodec>,
) -> Result<wire::HandshakeReply, ConnectError> {
    let frame = match framed.next().await {
        Some(Ok(f)) => f,
        Some(Err(e)) => return Err(ConnectError::Io(e)),
        None => {
            return Err(ConnectError::Protocol(
                "connection closed during handshake".into(),
            ))
        }
    };
    wire::HandshakeReply::decode(frame.freeze())
        .map_err(|e| ConnectError::Protocol(format!("malformed handshake reply: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake_to(to: &Address) -> wire::Handshake {
        let from = UniqueAddress::new(Address::new("sys", "10.0.0.9", 2552), 7);
        wire::Handshake {
            from: Some(unique_to_wire(&from)),
            to: Some(address_to_wire(to)),
            protocol_version: PROTOCOL_VERSION,
            cluster_name: "sys".into(),
            lane: 0,
            nonce: Bytes::new(),
        }
    }

    fn check(me: &Address, to: &Address) -> Result<(), String> {
        check_handshake(me, |_| false, &handshake_to(to))
            .map(drop)
            .map_err(|(r, _)| r)
    }

    #[test]
    fn a_handshake_for_another_host_on_this_port_is_refused() {
        let me = Address::new("sys", "10.0.0.5", 2552);
        assert_eq!(check(&me, &me), Ok(()));
        for other in ["10.0.0.6", "node1.example", "127.0.0.1"] {
            let r = check(&me, &Address::new("sys", other, 2552));
            assert!(
                r.as_ref().is_err_and(|r| r.contains(other)),
                "{other}: {r:?}"
            );
        }
        assert!(check(&me, &Address::new("sys", "10.0.0.5", 2553)).is_err());
        assert!(check(&me, &Address::new("other", "10.0.0.5", 2552)).is_err());
        let mut no_target = handshake_to(&me);
        no_target.to = None;
        assert!(check_handshake(&me, |_| false, &no_target).is_err());
    }

    #[test]
    fn equivalent_spellings_of_this_nodes_host_are_accepted() {
        let me = Address::new("sys", "Node1.Example", 2552);
        assert_eq!(
            check(&me, &Address::new("sys", "node1.example", 2552)),
            Ok(())
        );
        let v6 = Address::new("sys", "::1", 2552);
        assert_eq!(
            check(&v6, &Address::new("sys", "0:0:0:0:0:0:0:1", 2552)),
            Ok(())
        );
        assert_eq!(check(&v6, &Address::new("sys", "[::1]", 2552)), Ok(()));
    }
}

//! The handshake that opens every connection: the connecting side sends a `Handshake`
//! (its unique address, the target address, the cluster name, the protocol version and
//! the lane); the accepting side refuses a wrong cluster name, an unknown protocol version,
//! an unknown lane or a quarantined incarnation with a clear reason on both ends, and
//! otherwise replies with its own unique address.

use bytes::Bytes;
use concord_core::{Address, Lane, UniqueAddress};
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use super::gossip_wire::{address_from_wire, address_to_wire, unique_from_wire, unique_to_wire};
use super::transport::Inner;
use super::{wire, PROTOCOL_VERSION};

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
    if hs.protocol_version != PROTOCOL_VERSION {
        return Err((
            format!(
                "unsupported protocol version {} (this node speaks {PROTOCOL_VERSION})",
                hs.protocol_version
            ),
            false,
        ));
    }
    let me = &inner.self_address.address;
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
    if let Some(to) = &hs.to {
        match address_from_wire(to) {
            Ok(to) if to.port != me.port => {
                return Err((format!("handshake for {to} arrived at {me}"), false));
            }
            Ok(_) => {}
            Err(e) => return Err((format!("bad target address: {e}"), false)),
        }
    }
    if inner.is_quarantined(&from) {
        return Err((
            format!("incarnation {from} is quarantined (it was removed from the cluster); restart it to join again"),
            true,
        ));
    }
    Ok((from, lane))
}

/// The reply refusing a handshake.
pub(crate) fn refusal(reason: String, quarantined: bool) -> Bytes {
    Bytes::from(
        wire::HandshakeReply {
            result: Some(wire::handshake_reply::Result::Rejected(reason)),
            quarantined,
        }
        .encode_to_vec(),
    )
}

/// The reply accepting a handshake.
pub(crate) fn acceptance(me: &UniqueAddress) -> Bytes {
    Bytes::from(
        wire::HandshakeReply {
            result: Some(wire::handshake_reply::Result::Accepted(unique_to_wire(me))),
            quarantined: false,
        }
        .encode_to_vec(),
    )
}

/// Why an outbound connection could not be established.
pub(crate) enum ConnectError {
    Io(std::io::Error),
    Refused(String),
    Quarantined(String),
    Protocol(String),
}

/// Connects to `to` for `lane` and runs the handshake; returns the stream (ready for
/// frames) and the peer's unique address.
pub(crate) async fn connect(
    inner: &Inner,
    to: &Address,
    lane: Lane,
) -> Result<(TcpStream, UniqueAddress), ConnectError> {
    let timeout = inner.settings.handshake_timeout;
    let stream = tokio::time::timeout(timeout, TcpStream::connect(to.host_port()))
        .await
        .map_err(|_| {
            ConnectError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            ))
        })?
        .map_err(ConnectError::Io)?;
    let _ = stream.set_nodelay(true);
    let mut framed = Framed::new(stream, frame_codec(MAX_HANDSHAKE_BYTES));
    let hs = wire::Handshake {
        from: Some(unique_to_wire(&inner.self_address)),
        to: Some(address_to_wire(to)),
        protocol_version: PROTOCOL_VERSION,
        cluster_name: inner.self_address.address.system.clone(),
        lane: lane.index() as u32,
    };
    framed
        .send(Bytes::from(hs.encode_to_vec()))
        .await
        .map_err(ConnectError::Io)?;
    let reply = match tokio::time::timeout(timeout, framed.next()).await {
        Ok(Some(Ok(f))) => f,
        Ok(Some(Err(e))) => return Err(ConnectError::Io(e)),
        Ok(None) => {
            return Err(ConnectError::Protocol(
                "connection closed during handshake".into(),
            ))
        }
        Err(_) => {
            return Err(ConnectError::Protocol(
                "no handshake reply within handshake-timeout".into(),
            ))
        }
    };
    let reply = wire::HandshakeReply::decode(reply.freeze())
        .map_err(|e| ConnectError::Protocol(format!("malformed handshake reply: {e}")))?;
    match reply.result {
        Some(wire::handshake_reply::Result::Accepted(u)) => {
            let peer = unique_from_wire(&u).map_err(|e| ConnectError::Protocol(e.to_string()))?;
            if peer.address.system != inner.self_address.address.system {
                return Err(ConnectError::Refused(format!(
                    "peer belongs to cluster `{}`",
                    peer.address.system
                )));
            }
            if inner.is_quarantined(&peer) {
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
        None => Err(ConnectError::Protocol("empty handshake reply".into())),
    }
}

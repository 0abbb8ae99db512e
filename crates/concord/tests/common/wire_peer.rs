//! A hand-written peer speaking Concord's wire protocol over plain TCP (length-prefixed
//! protobuf frames), for tests that play a stranger or an attacker: it can claim any
//! address and incarnation, prove a cluster secret (or a wrong one), and send any
//! envelope — including ones a real node never would.

use bytes::{BufMut, Bytes, BytesMut};
use concord::cluster::codec::{compress_gossip, manifest, MembershipCodec};
use concord::remote::cluster_secret::{nonce, ClusterSecret};
use concord::remote::wire;
use concord::remote::{Codec, PROTOCOL_VERSION};
use concord_core::{Address, ClusterMessage, Gossip, Lane, ProtocolId, UniqueAddress};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub async fn write_frame(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut b = BytesMut::with_capacity(body.len() + 4);
    b.put_u32(body.len() as u32);
    b.put_slice(body);
    s.write_all(&b).await
}

pub async fn read_frame(s: &mut TcpStream) -> std::io::Result<Bytes> {
    let len = s.read_u32().await? as usize;
    if len > 1 << 20 {
        return Err(std::io::Error::other("frame too large"));
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body).await?;
    Ok(Bytes::from(body))
}

pub fn wire_address(a: &Address) -> wire::Address {
    wire::Address {
        system: a.system.clone(),
        host: a.host.clone(),
        port: u32::from(a.port),
    }
}

pub fn wire_unique(u: &UniqueAddress) -> wire::UniqueAddress {
    wire::UniqueAddress {
        address: Some(wire_address(&u.address)),
        uid: u.uid,
    }
}

/// How a handshake ended.
#[derive(Debug)]
pub enum Outcome {
    /// Accepted; the uid the node revealed (0 when it withholds it).
    Accepted(u64),
    /// Refused with this reason.
    Rejected(String),
    /// The node asked for the cluster secret and this peer has none.
    Challenged,
    /// The connection closed (or failed) without an answer.
    Closed,
}

/// A peer that claims to be `me`.
pub struct WirePeer {
    pub me: UniqueAddress,
    pub secret: Option<ClusterSecret>,
    /// The local IP the connection comes from (another loopback address than 127.0.0.1
    /// plays another host); `None`: the system's choice.
    pub source: Option<std::net::IpAddr>,
    /// The target the handshake names when it is not the address dialled.
    pub claimed_target: Option<Address>,
}

impl WirePeer {
    pub fn new(me: UniqueAddress) -> Self {
        WirePeer {
            me,
            secret: None,
            source: None,
            claimed_target: None,
        }
    }

    /// Connections come from `ip` (e.g. 127.0.0.2).
    pub fn with_source_ip(mut self, ip: &str) -> Self {
        self.source = Some(ip.parse().unwrap());
        self
    }

    /// The handshake names `to` as its target, whatever address it dials.
    pub fn claiming_target(mut self, to: Address) -> Self {
        self.claimed_target = Some(to);
        self
    }

    /// A TCP connection to `target` from [`WirePeer::source`].
    pub async fn tcp(&self, target: &Address) -> std::io::Result<TcpStream> {
        tcp_from(self.source, target).await
    }

    pub fn with_secret(mut self, secret: &[u8]) -> Self {
        self.secret = Some(ClusterSecret::new(secret).unwrap());
        self
    }

    /// Connects to `target` (a node's remoting address) for `lane` and runs the handshake.
    pub async fn connect(&self, target: &Address, lane: Lane) -> (Option<TcpStream>, Outcome) {
        let Ok(mut s) = self.tcp(target).await else {
            return (None, Outcome::Closed);
        };
        let hs = wire::Handshake {
            from: Some(wire_unique(&self.me)),
            to: Some(wire_address(self.claimed_target.as_ref().unwrap_or(target))),
            protocol_version: PROTOCOL_VERSION,
            cluster_name: target.system.clone(),
            lane: lane.index() as u32,
            nonce: Bytes::from(nonce()),
        };
        let hs_bytes = hs.encode_to_vec();
        if write_frame(&mut s, &hs_bytes).await.is_err() {
            return (None, Outcome::Closed);
        }
        let Ok(frame) = read_frame(&mut s).await else {
            return (None, Outcome::Closed);
        };
        let Ok(mut reply) = wire::HandshakeReply::decode(frame) else {
            return (None, Outcome::Closed);
        };
        if let Some(wire::handshake_reply::Result::Challenge(c)) = &reply.result {
            let Some(secret) = &self.secret else {
                return (Some(s), Outcome::Challenged);
            };
            // A real node checks the challenge's proof first; an attacker skips that.
            let proof = wire::SecretProof {
                proof: Bytes::from(secret.client_proof(&hs_bytes, &c.nonce)),
            };
            if write_frame(&mut s, &proof.encode_to_vec()).await.is_err() {
                return (None, Outcome::Closed);
            }
            let Ok(frame) = read_frame(&mut s).await else {
                return (None, Outcome::Closed);
            };
            let Ok(r) = wire::HandshakeReply::decode(frame) else {
                return (None, Outcome::Closed);
            };
            reply = r;
        }
        match reply.result {
            Some(wire::handshake_reply::Result::Accepted(u)) => (Some(s), Outcome::Accepted(u.uid)),
            Some(wire::handshake_reply::Result::Rejected(r)) => (None, Outcome::Rejected(r)),
            _ => (None, Outcome::Closed),
        }
    }
}

/// A TCP connection to `target` (a loopback address) from `source` if given.
pub async fn tcp_from(
    source: Option<std::net::IpAddr>,
    target: &Address,
) -> std::io::Result<TcpStream> {
    let Some(ip) = source else {
        return TcpStream::connect(target.host_port()).await;
    };
    let to = tokio::net::lookup_host(target.host_port())
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let socket = if ip.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.bind(std::net::SocketAddr::new(ip, 0))?;
    socket.connect(to).await
}

/// An envelope frame body of the membership protocol.
pub fn membership_envelope(msg: &ClusterMessage, recipient_uid: u64) -> Vec<u8> {
    let (m, payload) = MembershipCodec::default().encode(msg);
    wire::Envelope {
        protocol: ProtocolId::MEMBERSHIP.0,
        manifest: m,
        payload,
        recipient_uid,
        trace: Default::default(),
    }
    .encode_to_vec()
}

/// A GossipEnvelope frame body whose gossip is `gossip` (gzip like a real node's).
pub fn gossip_envelope(to: &UniqueAddress, gossip: &Gossip) -> Vec<u8> {
    let (gz, _) = compress_gossip(gossip);
    raw_gossip_envelope(to, gz)
}

/// A GossipEnvelope frame body carrying `gz` as its gossip bytes, whatever they are.
pub fn raw_gossip_envelope(to: &UniqueAddress, gz: Vec<u8>) -> Vec<u8> {
    let env = wire::GossipEnvelope {
        to: Some(wire_unique(to)),
        gossip: Bytes::from(gz),
    };
    wire::Envelope {
        protocol: ProtocolId::MEMBERSHIP.0,
        manifest: manifest::GOSSIP_ENVELOPE,
        payload: Bytes::from(env.encode_to_vec()),
        recipient_uid: to.uid,
        trace: Default::default(),
    }
    .encode_to_vec()
}

//! The protocol registry: which protocols this node speaks, and where their inbound
//! messages go.
//!
//! Each layer registers its [`ProtocolId`] with its [`Codec`] before the transport starts
//! and receives the decoded messages of that protocol on its own bounded queue
//! ([`Inbound`]). Inbound connections route each envelope by protocol id: an unknown
//! protocol or an unknown manifest is counted and dropped (the connection stays open, so a
//! newer peer can add messages), a message that does not decode closes the connection, and
//! a full queue slows that one connection down (backpressure) instead of growing memory.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use concord_core::{ProtocolId, UniqueAddress};
use tokio::sync::mpsc;

/// Why bytes from the network could not be turned into a message.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A message type (manifest) this build does not know. Counted and dropped; the
    /// connection stays open.
    #[error("unknown manifest {0}")]
    UnknownManifest(u32),
    /// Not a valid protobuf message.
    #[error("malformed protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A required field is missing.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// An address index points outside the address table.
    #[error("address index {0} out of range")]
    BadIndex(u32),
    /// A port outside 1..=65535.
    #[error("invalid port {0}")]
    BadPort(u32),
    /// Unknown enum value.
    #[error("unknown {0} value {1}")]
    BadEnum(&'static str, i32),
    /// The gzip payload is corrupt or too large.
    #[error("bad gzip payload: {0}")]
    Gzip(String),
    /// Any other reason a protocol's codec refuses the bytes.
    #[error("{0}")]
    Invalid(String),
}

/// A protocol's encoding of its messages: a manifest (message type number) and bytes.
/// Implementations must never panic on any input to `decode`.
pub trait Codec: Send + Sync + 'static {
    /// The protocol's message type.
    type Message: Send + 'static;

    /// The manifest and bytes of `message`.
    fn encode(&self, message: &Self::Message) -> (u32, Bytes);

    /// The message of type `manifest` in `payload`; [`DecodeError::UnknownManifest`] for a
    /// type this build does not know.
    fn decode(&self, manifest: u32, payload: Bytes) -> Result<Self::Message, DecodeError>;
}

/// A message received from an authenticated peer.
#[derive(Debug)]
pub struct Inbound<M> {
    /// The sender, as established by the handshake.
    pub from: UniqueAddress,
    /// The message.
    pub message: M,
    /// Payload size, bytes.
    pub bytes: usize,
}

/// What happened to one inbound envelope.
pub(crate) enum Delivery {
    /// Handed to the protocol's queue.
    Delivered,
    /// The queue is full: awaiting the future delivers it (false: the driver has stopped).
    Blocked(Pin<Box<dyn Future<Output = bool> + Send>>),
    /// The protocol's driver has stopped; dropped.
    Closed,
    /// The payload did not decode.
    Undecodable(DecodeError),
}

trait Route: Send + Sync {
    fn deliver(&self, from: &UniqueAddress, manifest: u32, payload: Bytes) -> Delivery;
}

struct TypedRoute<C: Codec> {
    codec: Arc<C>,
    tx: mpsc::Sender<Inbound<C::Message>>,
}

impl<C: Codec> Route for TypedRoute<C> {
    fn deliver(&self, from: &UniqueAddress, manifest: u32, payload: Bytes) -> Delivery {
        let bytes = payload.len();
        let message = match self.codec.decode(manifest, payload) {
            Ok(m) => m,
            Err(e) => return Delivery::Undecodable(e),
        };
        let inbound = Inbound {
            from: from.clone(),
            message,
            bytes,
        };
        match self.tx.try_send(inbound) {
            Ok(()) => Delivery::Delivered,
            Err(mpsc::error::TrySendError::Full(inbound)) => {
                let tx = self.tx.clone();
                Delivery::Blocked(Box::pin(async move { tx.send(inbound).await.is_ok() }))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Delivery::Closed,
        }
    }
}

/// A protocol id registered twice.
#[derive(Debug, thiserror::Error)]
#[error("protocol {0} is already registered")]
pub struct DuplicateProtocol(pub ProtocolId);

/// The protocols this node speaks. Built before the transport starts, then read-only.
#[derive(Default)]
pub struct ProtocolRegistry {
    routes: HashMap<ProtocolId, Box<dyn Route>>,
}

impl std::fmt::Debug for ProtocolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.routes.keys()).finish()
    }
}

impl ProtocolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `protocol` with `codec`; its inbound messages arrive on the returned
    /// queue (`queue_size` messages; when it is full, the sending connection waits).
    pub fn register<C: Codec>(
        &mut self,
        protocol: ProtocolId,
        codec: Arc<C>,
        queue_size: usize,
    ) -> Result<mpsc::Receiver<Inbound<C::Message>>, DuplicateProtocol> {
        if self.routes.contains_key(&protocol) {
            return Err(DuplicateProtocol(protocol));
        }
        let (tx, rx) = mpsc::channel(queue_size.max(1));
        self.routes
            .insert(protocol, Box::new(TypedRoute { codec, tx }));
        Ok(rx)
    }

    /// True if `protocol` is registered.
    pub fn contains(&self, protocol: ProtocolId) -> bool {
        self.routes.contains_key(&protocol)
    }

    /// The registered protocols.
    pub fn protocols(&self) -> impl Iterator<Item = ProtocolId> + '_ {
        self.routes.keys().copied()
    }

    /// Routes one envelope; `None` if the protocol is not registered.
    pub(crate) fn deliver(
        &self,
        protocol: ProtocolId,
        from: &UniqueAddress,
        manifest: u32,
        payload: Bytes,
    ) -> Option<Delivery> {
        self.routes
            .get(&protocol)
            .map(|r| r.deliver(from, manifest, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_core::Address;

    struct Raw;
    impl Codec for Raw {
        type Message = Bytes;
        fn encode(&self, m: &Bytes) -> (u32, Bytes) {
            (1, m.clone())
        }
        fn decode(&self, manifest: u32, payload: Bytes) -> Result<Bytes, DecodeError> {
            match manifest {
                1 => Ok(payload),
                m => Err(DecodeError::UnknownManifest(m)),
            }
        }
    }

    fn peer() -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", 1), 1)
    }

    #[tokio::test]
    async fn routes_by_protocol_and_reports_unknown_manifests_and_backpressure() {
        let mut r = ProtocolRegistry::new();
        let mut rx = r.register(ProtocolId(1000), Arc::new(Raw), 1).unwrap();
        assert!(r.register(ProtocolId(1000), Arc::new(Raw), 1).is_err());
        assert!(r.deliver(ProtocolId(7), &peer(), 1, Bytes::new()).is_none());
        assert!(matches!(
            r.deliver(ProtocolId(1000), &peer(), 9, Bytes::new()),
            Some(Delivery::Undecodable(DecodeError::UnknownManifest(9)))
        ));
        assert!(matches!(
            r.deliver(ProtocolId(1000), &peer(), 1, Bytes::from_static(b"a")),
            Some(Delivery::Delivered)
        ));
        let Some(Delivery::Blocked(wait)) =
            r.deliver(ProtocolId(1000), &peer(), 1, Bytes::from_static(b"b"))
        else {
            panic!("the queue of one is full");
        };
        assert_eq!(rx.recv().await.unwrap().message, Bytes::from_static(b"a"));
        assert!(wait.await);
        assert_eq!(rx.recv().await.unwrap().message, Bytes::from_static(b"b"));
        drop(rx);
        assert!(matches!(
            r.deliver(ProtocolId(1000), &peer(), 1, Bytes::new()),
            Some(Delivery::Closed)
        ));
    }
}

//! The protocol registry: which protocols this node speaks, and where their inbound
//! messages go.
//!
//! Each layer registers its [`ProtocolId`] with its [`Codec`] before the transport starts
//! and receives the decoded messages of that protocol on its own bounded queue, a batch
//! ([`Inbound`]) per read of a connection. Inbound connections route each envelope by
//! protocol id: an unknown protocol or an unknown manifest is counted and dropped (the
//! connection stays open, so a newer peer can add messages), a message that does not
//! decode closes the connection, and a full queue slows that one connection down
//! (backpressure) instead of growing memory.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use concord_core::{ProtocolId, UniqueAddress};
use tokio::sync::mpsc;

pub use super::codec::{Codec, DecodeError, Inbound};
use concord_core::TraceContext;

/// What happened to a batch handed to its protocol's queue.
pub(crate) enum Delivery {
    /// Handed to the protocol's queue (or nothing to hand over).
    Delivered,
    /// The queue is full: awaiting the future delivers it (false: the driver has stopped).
    Blocked(Pin<Box<dyn Future<Output = bool> + Send>>),
    /// The protocol's driver has stopped; dropped.
    Closed,
}

/// The outcome of routing one batch of envelopes of one protocol.
pub(crate) struct Routed {
    pub(crate) delivery: Delivery,
    /// Messages decoded and handed over.
    pub(crate) delivered: u64,
    /// Their payload bytes.
    pub(crate) bytes: u64,
    /// Manifests this build does not know (dropped).
    pub(crate) unknown: Vec<u32>,
    /// The first message that did not decode (the rest of the batch was not decoded).
    pub(crate) malformed: Option<(u32, DecodeError)>,
}

/// One protocol's envelopes of one read: each as its manifest and its payload's byte range
/// in the read chunk.
pub(crate) type RawBatch = Vec<(u32, Range<usize>)>;

trait Route: Send + Sync {
    /// Decodes the payloads at `raw` (manifest, byte range in `chunk`) and hands them over,
    /// with the trace contexts `traces` (index in `raw`, context).
    fn deliver(
        &self,
        from: &UniqueAddress,
        chunk: &Bytes,
        raw: &[(u32, Range<usize>)],
        traces: &[(usize, TraceContext)],
    ) -> Routed;
}

struct TypedRoute<C: Codec> {
    codec: Arc<C>,
    tx: mpsc::Sender<Inbound<C::Message>>,
}

impl<C: Codec> Route for TypedRoute<C> {
    fn deliver(
        &self,
        from: &UniqueAddress,
        chunk: &Bytes,
        raw: &[(u32, Range<usize>)],
        traces: &[(usize, TraceContext)],
    ) -> Routed {
        let mut messages = Vec::with_capacity(raw.len());
        let mut traced = Vec::new();
        let mut next_trace = traces.iter().peekable();
        let mut routed = Routed {
            delivery: Delivery::Delivered,
            delivered: 0,
            bytes: 0,
            unknown: Vec::new(),
            malformed: None,
        };
        for (i, (manifest, range)) in raw.iter().enumerate() {
            let manifest = *manifest;
            let trace = match next_trace.peek() {
                Some((at, t)) if *at == i => {
                    next_trace.next();
                    Some(*t)
                }
                _ => None,
            };
            let n = range.len();
            let decoded = match chunk.get(range.clone()) {
                None => Err(DecodeError::Invalid("payload outside its frame".into())),
                Some(_) if C::KEEPS_PAYLOAD => self
                    .codec
                    .decode_owned(manifest, chunk.slice(range.clone())),
                Some(payload) => self.codec.decode(manifest, payload),
            };
            match decoded {
                Ok(m) => {
                    routed.bytes += n as u64;
                    if let Some(t) = trace {
                        traced.push((messages.len(), t));
                    }
                    messages.push((m, n));
                }
                Err(DecodeError::UnknownManifest(m)) => routed.unknown.push(m),
                Err(e) => {
                    routed.malformed = Some((manifest, e));
                    break;
                }
            }
        }
        if messages.is_empty() {
            return routed;
        }
        routed.delivered = messages.len() as u64;
        let inbound = Inbound {
            from: from.clone(),
            messages,
            traces: traced,
        };
        routed.delivery = match self.tx.try_send(inbound) {
            Ok(()) => Delivery::Delivered,
            Err(mpsc::error::TrySendError::Full(inbound)) => {
                let tx = self.tx.clone();
                Delivery::Blocked(Box::pin(async move { tx.send(inbound).await.is_ok() }))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Delivery::Closed,
        };
        routed
    }
}

/// A protocol id registered twice.
#[derive(Debug, thiserror::Error)]
#[error("protocol {0} is already registered")]
pub struct DuplicateProtocol(pub ProtocolId);

/// The protocols this node speaks. Built before the transport starts, then read-only.
///
/// The routes are a short list searched in order (a node speaks a handful of protocols):
/// looked up once per inbound frame, that is cheaper than hashing the id.
#[derive(Default)]
pub struct ProtocolRegistry {
    routes: Vec<(ProtocolId, Box<dyn Route>)>,
}

impl std::fmt::Debug for ProtocolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.routes.iter().map(|(p, _)| p))
            .finish()
    }
}

impl ProtocolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `protocol` with `codec`; its inbound messages arrive on the returned
    /// queue (`queue_size` batches; when it is full, the sending connection waits).
    pub fn register<C: Codec>(
        &mut self,
        protocol: ProtocolId,
        codec: Arc<C>,
        queue_size: usize,
    ) -> Result<mpsc::Receiver<Inbound<C::Message>>, DuplicateProtocol> {
        if self.contains(protocol) {
            return Err(DuplicateProtocol(protocol));
        }
        let (tx, rx) = mpsc::channel(queue_size.max(1));
        self.routes
            .push((protocol, Box::new(TypedRoute { codec, tx })));
        Ok(rx)
    }

    /// True if `protocol` is registered.
    pub fn contains(&self, protocol: ProtocolId) -> bool {
        self.route(protocol).is_some()
    }

    fn route(&self, protocol: ProtocolId) -> Option<&dyn Route> {
        self.routes
            .iter()
            .find(|(p, _)| *p == protocol)
            .map(|(_, r)| r.as_ref())
    }

    /// The registered protocols.
    pub fn protocols(&self) -> impl Iterator<Item = ProtocolId> + '_ {
        self.routes.iter().map(|(p, _)| *p)
    }

    /// Decodes and hands over a batch of `(manifest, payload range in chunk)` of
    /// `protocol` from `from`; `None` if the protocol is not registered.
    pub(crate) fn deliver(
        &self,
        protocol: ProtocolId,
        from: &UniqueAddress,
        chunk: &Bytes,
        raw: &[(u32, Range<usize>)],
        traces: &[(usize, TraceContext)],
    ) -> Option<Routed> {
        self.route(protocol)
            .map(|r| r.deliver(from, chunk, raw, traces))
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
        fn decode(&self, manifest: u32, payload: &[u8]) -> Result<Bytes, DecodeError> {
            self.decode_owned(manifest, Bytes::copy_from_slice(payload))
        }
        const KEEPS_PAYLOAD: bool = true;
        fn decode_owned(&self, manifest: u32, payload: Bytes) -> Result<Bytes, DecodeError> {
            match manifest {
                1 => Ok(payload),
                m => Err(DecodeError::UnknownManifest(m)),
            }
        }
    }

    fn peer() -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", 1), 1)
    }

    /// The payloads laid out in one chunk, with their ranges.
    fn raw(items: &[(u32, &'static [u8])]) -> (Bytes, Vec<(u32, Range<usize>)>) {
        let mut chunk = Vec::new();
        let mut ranges = Vec::new();
        for (m, b) in items {
            chunk.extend_from_slice(b"--");
            ranges.push((*m, chunk.len()..chunk.len() + b.len()));
            chunk.extend_from_slice(b);
        }
        (Bytes::from(chunk), ranges)
    }

    fn deliver(r: &ProtocolRegistry, p: u32, items: &[(u32, &'static [u8])]) -> Option<Routed> {
        let (chunk, ranges) = raw(items);
        r.deliver(ProtocolId(p), &peer(), &chunk, &ranges, &[])
    }

    #[tokio::test]
    async fn routes_batches_by_protocol_and_reports_unknown_manifests_and_backpressure() {
        let mut r = ProtocolRegistry::new();
        let mut rx = r.register(ProtocolId(1000), Arc::new(Raw), 1).unwrap();
        assert!(r.register(ProtocolId(1000), Arc::new(Raw), 1).is_err());
        assert!(deliver(&r, 7, &[(1, b"")]).is_none());
        let routed = deliver(&r, 1000, &[(1, b"a"), (9, b"?"), (1, b"b")]).unwrap();
        assert_eq!(routed.unknown, vec![9]);
        assert_eq!(routed.delivered, 2);
        assert!(matches!(routed.delivery, Delivery::Delivered));
        let Delivery::Blocked(wait) = deliver(&r, 1000, &[(1, b"c")]).unwrap().delivery else {
            panic!("the queue of one batch is full");
        };
        let first = rx.recv().await.unwrap();
        assert_eq!(
            first.messages,
            vec![(Bytes::from_static(b"a"), 1), (Bytes::from_static(b"b"), 1)]
        );
        assert!(wait.await);
        assert_eq!(
            rx.recv().await.unwrap().messages[0].0,
            Bytes::from_static(b"c")
        );
        drop(rx);
        assert!(matches!(
            deliver(&r, 1000, &[(1, b"d")]).unwrap().delivery,
            Delivery::Closed
        ));
    }
}

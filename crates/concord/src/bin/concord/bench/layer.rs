//! [`BenchLayer`]: a layer whose protocol ([`ProtocolId::BENCH`]) carries opaque payloads
//! and whose driver only counts what arrives. It is the smallest complete layer: a codec,
//! a registration, a driver task. By default its codec reads each payload in place
//! ([`SizeCodec`], as the membership, singleton and Distributed Data codecs decode borrowed
//! bytes); [`BenchLayer::keeping_payloads`] keeps each payload as a zero-copy slice of the
//! read buffer instead ([`RawCodec`], as the sharding and key-value codecs do).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use concord_core::ProtocolId;
use tokio::sync::mpsc;

use concord::layer::{Layer, LayerContext, LayerError, LayerStarted};
use concord::remote::{Codec, DecodeError, Frame, Inbound, ProtocolRegistry, TransportSettings};

/// The one message type of the bench protocol.
pub const PAYLOAD_MANIFEST: u32 = 1;

/// Payloads as they are: manifest 1, the bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Message = Bytes;

    fn encode(&self, message: &Bytes) -> (u32, Bytes) {
        (PAYLOAD_MANIFEST, message.clone())
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<Bytes, DecodeError> {
        self.decode_owned(manifest, Bytes::copy_from_slice(payload))
    }

    const KEEPS_PAYLOAD: bool = true;

    /// The payload itself, without a copy.
    fn decode_owned(&self, manifest: u32, payload: Bytes) -> Result<Bytes, DecodeError> {
        match manifest {
            PAYLOAD_MANIFEST => Ok(payload),
            other => Err(DecodeError::UnknownManifest(other)),
        }
    }
}

/// Payloads read in place: the message is the payload's size, bytes (manifest 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct SizeCodec;

impl Codec for SizeCodec {
    type Message = usize;

    /// `message` zero bytes.
    fn encode(&self, message: &usize) -> (u32, Bytes) {
        (PAYLOAD_MANIFEST, Bytes::from(vec![0; *message]))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<usize, DecodeError> {
        match manifest {
            PAYLOAD_MANIFEST => Ok(payload.len()),
            other => Err(DecodeError::UnknownManifest(other)),
        }
    }
}

/// Counts what the bench layer of a node received.
#[derive(Clone, Debug, Default)]
pub struct BenchProbe {
    received: Arc<AtomicU64>,
}

impl BenchProbe {
    /// Payloads received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

/// The bench layer; add it with `Node::builder(config).layer(layer)`.
pub struct BenchLayer {
    probe: BenchProbe,
    keep_payloads: bool,
    inbound: Option<BenchInbound>,
}

/// The layer's queue, by codec.
enum BenchInbound {
    InPlace(mpsc::Receiver<Inbound<usize>>),
    Kept(mpsc::Receiver<Inbound<Bytes>>),
}

impl BenchLayer {
    /// A layer reading payloads in place, and the probe that reads its counters.
    pub fn new() -> (BenchLayer, BenchProbe) {
        Self::with(false)
    }

    /// A layer keeping each payload (a zero-copy slice of the read buffer), and its probe.
    #[allow(dead_code)] // The tests compile this file without the bench that uses it.
    pub fn keeping_payloads() -> (BenchLayer, BenchProbe) {
        Self::with(true)
    }

    fn with(keep_payloads: bool) -> (BenchLayer, BenchProbe) {
        let probe = BenchProbe::default();
        (
            BenchLayer {
                probe: probe.clone(),
                keep_payloads,
                inbound: None,
            },
            probe,
        )
    }
}

/// A bench payload frame for incarnation `to_uid` (to send through an
/// [`concord::remote::OutboundLane`]).
pub fn payload_frame(to_uid: u64, payload: Bytes) -> Frame {
    Frame {
        protocol: ProtocolId::BENCH,
        manifest: PAYLOAD_MANIFEST,
        recipient_uid: to_uid,
        payload,
        trace: None,
    }
}

impl Layer for BenchLayer {
    fn name(&self) -> &'static str {
        "bench"
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        let size = settings.inbound_queue_size;
        let inbound = if self.keep_payloads {
            registry
                .register(ProtocolId::BENCH, Arc::new(RawCodec), size)
                .map(BenchInbound::Kept)
        } else {
            registry
                .register(ProtocolId::BENCH, Arc::new(SizeCodec), size)
                .map(BenchInbound::InPlace)
        };
        let inbound = inbound.map_err(|e| LayerError::DuplicateProtocol {
            layer: "bench",
            protocol: e.0,
        })?;
        self.inbound = Some(inbound);
        Ok(())
    }

    fn start(self: Box<Self>, _ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let Some(inbound) = self.inbound else {
            return Err(LayerError::NotRegistered { layer: "bench" });
        };
        let received = self.probe.received;
        let count = move |n: usize| {
            received.fetch_add(n as u64, Ordering::Relaxed);
        };
        let counting = async move {
            match inbound {
                BenchInbound::InPlace(mut rx) => {
                    while let Some(batch) = rx.recv().await {
                        count(batch.messages.len());
                    }
                }
                BenchInbound::Kept(mut rx) => {
                    while let Some(batch) = rx.recv().await {
                        count(batch.messages.len());
                    }
                }
            }
        };
        tokio::spawn(tracing::Instrument::instrument(
            counting,
            tracing::Span::current(),
        ));
        Ok(LayerStarted::default())
    }
}

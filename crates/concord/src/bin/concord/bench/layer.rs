//! [`BenchLayer`]: a layer whose protocol ([`ProtocolId::BENCH`]) carries opaque payloads
//! and whose driver only counts what arrives. It is the smallest complete layer: a codec,
//! a registration, a driver task.

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

    /// The payload itself, without a copy.
    fn decode_owned(&self, manifest: u32, payload: Bytes) -> Result<Bytes, DecodeError> {
        match manifest {
            PAYLOAD_MANIFEST => Ok(payload),
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
    inbound: Option<mpsc::Receiver<Inbound<Bytes>>>,
}

impl BenchLayer {
    /// A layer and the probe that reads its counters.
    pub fn new() -> (BenchLayer, BenchProbe) {
        let probe = BenchProbe::default();
        (
            BenchLayer {
                probe: probe.clone(),
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
        let rx = registry
            .register(
                ProtocolId::BENCH,
                Arc::new(RawCodec),
                settings.inbound_queue_size,
            )
            .map_err(|e| LayerError::DuplicateProtocol {
                layer: "bench",
                protocol: e.0,
            })?;
        self.inbound = Some(rx);
        Ok(())
    }

    fn start(self: Box<Self>, _ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let Some(mut rx) = self.inbound else {
            return Err(LayerError::NotRegistered { layer: "bench" });
        };
        let probe = self.probe;
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                while let Some(batch) = rx.recv().await {
                    probe
                        .received
                        .fetch_add(batch.messages.len() as u64, Ordering::Relaxed);
                }
            },
            tracing::Span::current(),
        ));
        Ok(LayerStarted::default())
    }
}

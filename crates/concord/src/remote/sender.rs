//! [`ProtocolSender`]: how a layer sends its protocol's messages — its codec plus the
//! transport.

use std::sync::Arc;

use concord_core::{ProtocolId, Transmit};

use super::envelope::Outbound;
use super::registry::Codec;
use super::transport::{SendError, Transport};

/// Sends the messages of one protocol, encoded with its codec.
pub struct ProtocolSender<C: Codec> {
    transport: Transport,
    codec: Arc<C>,
    protocol: ProtocolId,
}

impl<C: Codec> Clone for ProtocolSender<C> {
    fn clone(&self) -> Self {
        ProtocolSender {
            transport: self.transport.clone(),
            codec: self.codec.clone(),
            protocol: self.protocol,
        }
    }
}

impl<C: Codec> ProtocolSender<C> {
    /// A sender of `protocol` messages encoded with `codec`.
    pub fn new(transport: Transport, protocol: ProtocolId, codec: Arc<C>) -> Self {
        ProtocolSender {
            transport,
            codec,
            protocol,
        }
    }

    /// The envelope contents of a machine's transmit.
    pub fn encode(&self, t: &Transmit<C::Message>) -> Outbound {
        let (manifest, payload) = self.codec.encode(&t.message);
        Outbound {
            to: t.to.clone(),
            to_uid: t.to_uid,
            lane: t.lane,
            protocol: self.protocol,
            manifest,
            payload,
            trace: None,
        }
    }

    /// Queues `t` without waiting; dropped and counted if the lane's queue is full
    /// (see [`Transport::send`]). Returns the encoded payload size, bytes.
    pub fn send(&self, t: &Transmit<C::Message>) -> usize {
        let o = self.encode(t);
        let n = o.payload.len();
        self.transport.send(o);
        n
    }

    /// Like [`ProtocolSender::send`], with the trace context `trace` in the envelope.
    pub fn send_traced(
        &self,
        t: &Transmit<C::Message>,
        trace: Option<concord_core::TraceContext>,
    ) -> usize {
        let mut o = self.encode(t);
        o.trace = trace;
        let n = o.payload.len();
        self.transport.send(o);
        n
    }

    /// Queues `t`, waiting while the lane's queue is full (see [`Transport::send_wait`]).
    pub async fn send_wait(&self, t: &Transmit<C::Message>) -> Result<(), SendError> {
        self.transport.send_wait(self.encode(t)).await
    }

    /// The transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }
}

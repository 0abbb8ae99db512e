//! [`LaneOutbound`]: the runtime's [`Outbound`] for layers whose messages may be dropped
//! when a peer's lane is full (membership, singleton, distributed data, the key-value
//! store: each retries by protocol): every transmit of a turn is encoded with the layer's
//! codec and queued on its peer's lane without waiting; a full lane drops and counts it
//! (see [`crate::remote::Transport::send`]).

use concord_core::Transmit;

use crate::host::{Outbound, TraceContext};
use crate::remote::{Codec, ProtocolSender};

/// Observes each message sent with its encoded size, bytes (per-kind metrics).
pub type SendObserver<M> = Box<dyn Fn(&M, usize) + Send>;

/// Sends through the transport's lanes; see the module docs.
pub struct LaneOutbound<C: Codec> {
    sender: ProtocolSender<C>,
    observer: Option<SendObserver<C::Message>>,
}

impl<C: Codec> LaneOutbound<C> {
    /// Sends with `sender`.
    pub fn new(sender: ProtocolSender<C>) -> Self {
        LaneOutbound {
            sender,
            observer: None,
        }
    }

    /// Calls `observer` with each message sent and its encoded size.
    pub fn with_observer(mut self, observer: impl Fn(&C::Message, usize) + Send + 'static) -> Self {
        self.observer = Some(Box::new(observer));
        self
    }
}

impl<C: Codec> Outbound<C::Message> for LaneOutbound<C> {
    fn send(&mut self, transmits: &mut Vec<Transmit<C::Message>>) {
        for t in transmits.drain(..) {
            let bytes = self.sender.send(&t);
            if let Some(o) = &self.observer {
                o(&t.message, bytes);
            }
        }
    }

    fn send_traced(
        &mut self,
        transmits: &mut Vec<Transmit<C::Message>>,
        traces: &[(usize, TraceContext)],
    ) {
        let mut traces = traces.iter().peekable();
        for (i, t) in transmits.drain(..).enumerate() {
            let trace = match traces.peek() {
                Some((at, c)) if *at == i => {
                    traces.next();
                    Some(*c)
                }
                _ => None,
            };
            let bytes = self.sender.send_traced(&t, trace);
            if let Some(o) = &self.observer {
                o(&t.message, bytes);
            }
        }
    }
}

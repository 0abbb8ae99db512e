//! [`SingletonMessage`]: the singleton protocol's wire vocabulary — Akka's hand-over
//! messages between managers (Pekko `ClusterSingletonManager.scala`: `HandOverToMe`,
//! `HandOverInProgress`, `HandOverDone`, `TakeOverFromMe`) and the proxy's identification
//! and delivery (`ClusterSingletonProxy`).

/// A message of the singleton protocol; every message names its singleton.
#[derive(Clone, Debug, PartialEq)]
pub struct SingletonMessage {
    /// The singleton's name.
    pub name: String,
    /// What it says.
    pub body: SingletonBody,
}

/// The singleton protocol's messages (Akka's hand-over messages, plus the proxy's).
#[derive(Clone, Debug, PartialEq)]
pub enum SingletonBody {
    /// New oldest → previous oldest: hand the singleton over to me (retried every
    /// `hand-over-retry-interval`).
    HandOverToMe,
    /// Previous oldest → new oldest: the singleton is being stopped.
    HandOverInProgress,
    /// Previous oldest → new oldest: the singleton has stopped; start yours.
    HandOverDone,
    /// Previous oldest → new oldest that may not know it: ask me for the hand-over.
    TakeOverFromMe,
    /// Proxy → oldest: is the instance running there?
    Identify,
    /// The answer: the running instance's incarnation, or `None`.
    Identified {
        /// Incarnation of the running instance.
        incarnation: Option<u64>,
    },
    /// Proxy → the node running the instance: a message for it.
    Deliver {
        /// The proxy's sequence number (its send order).
        seq: u64,
        /// The encoded message.
        payload: Vec<u8>,
        /// Set for an ask: where the reply goes back to.
        ask: Option<u64>,
    },
    /// The instance is not running here: the message goes back to the proxy.
    Undelivered {
        /// The proxy's sequence number.
        seq: u64,
        /// The encoded message.
        payload: Vec<u8>,
        /// The ask, if any.
        ask: Option<u64>,
    },
    /// The instance's reply to an ask.
    Reply {
        /// The ask answered.
        ask: u64,
        /// The encoded reply.
        payload: Vec<u8>,
    },
}

impl crate::group::Routed for SingletonMessage {
    fn route_key(&self) -> &str {
        &self.name
    }
}

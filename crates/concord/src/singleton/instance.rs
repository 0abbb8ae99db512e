//! What a singleton instance sees: its [`SingletonContext`] (mailbox, node, incarnation)
//! and each message as a [`SingletonEnvelope`] (with a [`Replier`] for an ask).

use std::marker::PhantomData;

use concord_core::{Address, UniqueAddress};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tracing::warn;

use super::driver::{Driver, Job};
use crate::remote::log_limit::LogLimiter;

/// A message for the instance as it travels: encoded, with where an ask's reply goes.
#[derive(Debug)]
pub(crate) struct RawEnvelope {
    pub(crate) payload: Vec<u8>,
    pub(crate) reply_to: Option<(UniqueAddress, u64)>,
}

/// The running instance's view of itself: its mailbox and where it runs.
pub struct SingletonContext<M, R> {
    name: String,
    node: Address,
    incarnation: u64,
    mailbox: mpsc::Receiver<RawEnvelope>,
    replies: mpsc::Sender<Job>,
    bad_messages: LogLimiter,
    _types: PhantomData<fn(M) -> R>,
}

/// One message for the instance.
pub struct SingletonEnvelope<M, R> {
    /// The message.
    pub message: M,
    /// Set for an ask: answer with [`Replier::reply`].
    pub reply: Option<Replier<R>>,
}

/// Answers one ask.
pub struct Replier<R> {
    name: String,
    to: UniqueAddress,
    ask: u64,
    replies: mpsc::Sender<Job>,
    _type: PhantomData<fn(R)>,
}

impl<R: Serialize> Replier<R> {
    /// Sends `reply` to the asker (dropped if the node's reply queue is full; the ask then
    /// times out).
    pub fn reply(self, reply: R) {
        let Ok(payload) = postcard::to_stdvec(&reply) else {
            warn!(singleton = %self.name, "the reply does not encode; dropped");
            return;
        };
        let (name, to, ask) = (self.name, self.to, self.ask);
        let _ = self.replies.try_send(Box::new(move |d: &mut Driver| {
            let now = d.now();
            if let Some(h) = d.singletons.get_mut(&name) {
                h.machine.reply(now, &to, ask, payload);
            }
        }));
    }
}

impl<M: DeserializeOwned, R> SingletonContext<M, R> {
    pub(crate) fn new(
        name: String,
        node: Address,
        incarnation: u64,
        mailbox: mpsc::Receiver<RawEnvelope>,
        replies: mpsc::Sender<Job>,
    ) -> Self {
        SingletonContext {
            name,
            node,
            incarnation,
            mailbox,
            replies,
            bad_messages: LogLimiter::new(std::time::Duration::from_secs(10)),
            _types: PhantomData,
        }
    }

    /// The singleton's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node this instance runs on.
    pub fn node(&self) -> &Address {
        &self.node
    }

    /// A number unique to this start of the instance.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The next message, in the order each sender sent them; `None` when the instance must
    /// stop (it is handed over, or the node leaves): finish, then return from the
    /// behaviour — the next instance starts only after that.
    pub async fn recv(&mut self) -> Option<SingletonEnvelope<M, R>> {
        loop {
            let raw = self.mailbox.recv().await?;
            match postcard::from_bytes::<M>(&raw.payload) {
                Ok(message) => {
                    let reply = raw.reply_to.map(|(to, ask)| Replier {
                        name: self.name.clone(),
                        to,
                        ask,
                        replies: self.replies.clone(),
                        _type: PhantomData,
                    });
                    return Some(SingletonEnvelope { message, reply });
                }
                Err(e) => {
                    if let Some(suppressed) = self.bad_messages.allow("decode") {
                        warn!(singleton = %self.name, error = %e, suppressed, "a message does not decode; dropped");
                    }
                }
            }
        }
    }
}

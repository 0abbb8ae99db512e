//! What a singleton instance sees: its [`SingletonContext`] (mailbox, node, incarnation)
//! and each message as a [`SingletonEnvelope`] (with a [`Replier`] for an ask).

use std::future::Future;
use std::marker::PhantomData;

use concord_core::{Address, UniqueAddress};
use futures_channel::mpsc;
use futures_util::StreamExt as _;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::warn;

use super::command::{Completion, SingletonCompletion};
use crate::host::Completions;
use crate::remote::log_limit::LogLimiter;

/// What singleton messages and replies must be: encodable (with serde, as `postcard`)
/// and sendable.
pub trait Wire: Serialize + DeserializeOwned + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Send + 'static> Wire for T {}

/// A singleton's behaviour: an async function of its [`SingletonContext`] that handles
/// messages until `recv` gives `None`, then returns.
pub trait Behaviour<M, R>: Send + Sync + 'static {
    /// The running behaviour.
    type Running: Future<Output = ()> + Send + 'static;
    /// Starts the behaviour for one incarnation.
    fn start(&self, ctx: SingletonContext<M, R>) -> Self::Running;
}

impl<M, R, F, Fut> Behaviour<M, R> for F
where
    F: Fn(SingletonContext<M, R>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    type Running = Fut;
    fn start(&self, ctx: SingletonContext<M, R>) -> Fut {
        self(ctx)
    }
}

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
    replies: Completions<SingletonCompletion>,
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
    replies: Completions<SingletonCompletion>,
    _type: PhantomData<fn(R)>,
}

impl<R: Serialize> Replier<R> {
    /// Sends `reply` to the asker (through the singleton machine; dropped if the node has
    /// stopped, and the ask then times out).
    pub fn reply(self, reply: R) {
        let Ok(payload) = postcard::to_stdvec(&reply) else {
            warn!(singleton = %self.name, "the reply does not encode; dropped");
            return;
        };
        self.replies.send(SingletonCompletion(Completion::Reply {
            name: self.name,
            to: self.to,
            ask: self.ask,
            payload,
        }));
    }
}

impl<M: DeserializeOwned, R> SingletonContext<M, R> {
    pub(crate) fn new(
        name: String,
        node: Address,
        incarnation: u64,
        mailbox: mpsc::Receiver<RawEnvelope>,
        replies: Completions<SingletonCompletion>,
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
            let raw = self.mailbox.next().await?;
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

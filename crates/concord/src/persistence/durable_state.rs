//! [`DurableState`]: an entity whose whole state is stored on each change, with a revision
//! (Akka's `DurableStateBehavior`), its [`StateEffect`], and [`DurableStateEntity`], which
//! runs it sharded.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use concord_core::persistence::PersistenceId;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::handle::{Persistence, Running};
use super::incarnation::{persistence_id, running, stops, write_within};
use super::{metrics, PersistenceError};
use crate::sharding::entity::{decode, encode};
use crate::sharding::{Entity, EntityContext};
use crate::singleton::Wire;

/// A durable-state entity: the handler returns the new state to store (whole), and the
/// state is replaced only once it is stored. Recovery reads the state back. Run it sharded
/// with [`Persistence::init_durable_state`].
///
/// ```
/// use concord::persistence::{DurableState, StateEffect};
/// use concord::sharding::EntityContext;
/// use serde::{Deserialize, Serialize};
///
/// struct Cart;
///
/// #[derive(Serialize, Deserialize)]
/// enum Command { Add(String), Items }
///
/// impl DurableState for Cart {
///     type Command = Command;
///     type State = Vec<String>;
///     type Reply = Vec<String>;
///
///     async fn handle_command(
///         &mut self,
///         _ctx: &mut EntityContext,
///         items: &Vec<String>,
///         command: Command,
///     ) -> StateEffect<Self> {
///         match command {
///             Command::Add(item) => {
///                 let mut next = items.clone();
///                 next.push(item);
///                 StateEffect::persist(next).then_reply(|items: &Vec<String>| items.clone())
///             }
///             Command::Items => StateEffect::reply(items.clone()),
///         }
///     }
/// }
/// ```
pub trait DurableState: Send + 'static {
    /// The commands it handles.
    type Command: Wire;
    /// Its state (encoded like messages; empty is `Default`).
    type State: Serialize + DeserializeOwned + Default + Send + Sync + 'static;
    /// What it answers (an `ask` gets `Result<Reply, PersistenceError>`).
    type Reply: Wire;

    /// Handles one command given the stored state.
    fn handle_command(
        &mut self,
        ctx: &mut EntityContext,
        state: &Self::State,
        command: Self::Command,
    ) -> impl Future<Output = StateEffect<Self>> + Send
    where
        Self: Sized;
}

enum Change<S> {
    Keep,
    Persist(S),
    Delete,
}

type ReplyFn<B> = Box<dyn FnOnce(&<B as DurableState>::State) -> <B as DurableState>::Reply + Send>;

/// What a durable-state handler decided: the state to store (or delete, or keep), what to
/// answer once stored, and whether to stop afterwards.
pub struct StateEffect<B: DurableState> {
    change: Change<B::State>,
    reply: ReplyFn<B>,
    stop: bool,
}

/// A state effect whose answer is still to be given.
pub struct StateEffectBuilder<B: DurableState> {
    change: Change<B::State>,
    stop: bool,
}

impl<B: DurableState> StateEffect<B> {
    /// Store `state` as the next revision, then …
    pub fn persist(state: B::State) -> StateEffectBuilder<B> {
        StateEffectBuilder {
            change: Change::Persist(state),
            stop: false,
        }
    }

    /// Delete the state (the next revision is empty; the entity starts from `Default`),
    /// then …
    pub fn delete() -> StateEffectBuilder<B> {
        StateEffectBuilder {
            change: Change::Delete,
            stop: false,
        }
    }

    /// Store nothing, then …
    pub fn none() -> StateEffectBuilder<B> {
        StateEffectBuilder {
            change: Change::Keep,
            stop: false,
        }
    }

    /// Store nothing and answer `reply`.
    pub fn reply(reply: B::Reply) -> StateEffect<B> {
        Self::none().reply(reply)
    }
}

impl<B: DurableState> StateEffectBuilder<B> {
    /// … stop the entity after answering.
    pub fn then_stop(mut self) -> Self {
        self.stop = true;
        self
    }

    /// … answer with a function of the state after the change.
    pub fn then_reply(
        self,
        f: impl FnOnce(&B::State) -> B::Reply + Send + 'static,
    ) -> StateEffect<B> {
        StateEffect {
            change: self.change,
            reply: Box::new(f),
            stop: self.stop,
        }
    }

    /// … answer `reply`.
    pub fn reply(self, reply: B::Reply) -> StateEffect<B> {
        self.then_reply(move |_| reply)
    }
}

/// A [`DurableState`] behaviour as a sharded entity (built by
/// [`Persistence::init_durable_state`]).
pub struct DurableStateEntity<B: DurableState> {
    behavior: B,
    entity_type: Arc<str>,
    persistence: Persistence,
    pid: Option<PersistenceId>,
    state: B::State,
    revision: u64,
    recovered: bool,
    failed: bool,
}

impl<B: DurableState> DurableStateEntity<B> {
    pub(crate) fn new(behavior: B, entity_type: Arc<str>, persistence: Persistence) -> Self {
        DurableStateEntity {
            behavior,
            entity_type,
            persistence,
            pid: None,
            state: B::State::default(),
            revision: 0,
            recovered: false,
            failed: false,
        }
    }

    async fn recover(
        &mut self,
        node: &str,
        pid: &PersistenceId,
        running: &Running,
    ) -> Result<(), PersistenceError> {
        let started = Instant::now();
        let deadline = running.settings.recovery_timeout;
        let stored = tokio::time::timeout(deadline, async {
            let _permit = running.recovery_permit(node).await;
            running.stores.state.get(pid).await
        })
        .await
        .map_err(|_| PersistenceError::RecoveryTimeout {
            persistence_id: pid.to_string(),
            timeout_ms: deadline.as_millis() as u64,
        })??;
        self.state = match &stored.payload {
            Some(bytes) => {
                decode::<B::State>(bytes).map_err(|e| PersistenceError::RecoveryFailed {
                    persistence_id: pid.to_string(),
                    seq_nr: stored.revision,
                    reason: format!("the state does not decode: {e}"),
                })?
            }
            None => B::State::default(),
        };
        self.revision = stored.revision;
        metrics::recovered(node, &self.entity_type, started.elapsed(), 0);
        Ok(())
    }

    /// After `error`: stops (unless it was a rejection), refusing what is still queued.
    fn fail(&mut self, ctx: &mut EntityContext, node: &str, error: &PersistenceError) {
        if stops(ctx, node, &self.entity_type, error) {
            self.failed = true;
        }
    }

    async fn run(
        &mut self,
        ctx: &mut EntityContext,
        command: B::Command,
    ) -> Result<B::Reply, PersistenceError> {
        let node = ctx.node().to_string();
        let pid = persistence_id(&mut self.pid, &self.entity_type, ctx)?;
        if self.failed {
            return Err(PersistenceError::Stopped {
                persistence_id: pid.to_string(),
            });
        }
        let running = match running(&self.persistence).await {
            Ok(r) => r,
            Err(e) => {
                self.fail(ctx, &node, &e);
                return Err(e);
            }
        };
        if !self.recovered {
            if let Err(e) = self.recover(&node, &pid, &running).await {
                self.fail(ctx, &node, &e);
                return Err(e);
            }
            self.recovered = true;
        }
        let StateEffect {
            change,
            reply,
            stop,
        } = self
            .behavior
            .handle_command(ctx, &self.state, command)
            .await;
        let (next, payload) = match change {
            Change::Keep => (None, None),
            Change::Persist(s) => {
                let bytes = encode(&s).map_err(|e| PersistenceError::Rejected {
                    persistence_id: pid.to_string(),
                    reason: format!("the state does not encode: {e}"),
                })?;
                (Some(s), Some(Some(bytes)))
            }
            Change::Delete => (Some(B::State::default()), Some(None)),
        };
        if let (Some(next), Some(payload)) = (next, payload) {
            let revision = self.revision.saturating_add(1);
            let write = running.stores.state.upsert(&pid, revision, payload);
            let written = match crate::host::trace::current() {
                None => write_within(&running, &pid, write).await,
                // Traced: the write in a span of its own.
                Some(_) => {
                    let span = tracing::info_span!(
                        "concord.persistence.write",
                        otel.name = "persistence write",
                        persistence_id = %pid,
                        revision,
                        node = %node,
                    );
                    tracing::Instrument::instrument(write_within(&running, &pid, write), span).await
                }
            };
            if let Err(e) = written {
                self.fail(ctx, &node, &e);
                return Err(e);
            }
            self.state = next;
            self.revision = revision;
            metrics::state_persisted(&node, &self.entity_type);
        }
        if stop {
            ctx.passivate();
        }
        Ok(reply(&self.state))
    }
}

impl<B: DurableState> Entity for DurableStateEntity<B> {
    type Message = B::Command;
    type Reply = Result<B::Reply, PersistenceError>;
    type State = ();

    async fn handle(
        &mut self,
        ctx: &mut EntityContext,
        message: B::Command,
    ) -> Result<B::Reply, PersistenceError> {
        self.run(ctx, message).await
    }
}

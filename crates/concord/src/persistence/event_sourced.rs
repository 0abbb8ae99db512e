//! [`EventSourced`]: an entity whose state is the fold of its events (Akka's
//! `EventSourcedBehavior`), and the [`Effect`] its command handler returns.

use std::future::Future;

use concord_core::persistence::RetentionCriteria;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::sharding::EntityContext;
use crate::singleton::Wire;

/// An event-sourced entity: commands come in, the handler decides which events to
/// persist, and the state is only ever changed by [`EventSourced::apply_event`] — when an
/// event has been stored, and again on recovery, from the journal. Run it sharded with
/// [`crate::persistence::Persistence::init_event_sourced`].
///
/// ```
/// use concord::persistence::{Effect, EventSourced};
/// use concord::sharding::EntityContext;
/// use serde::{Deserialize, Serialize};
///
/// /// A counter: its value survives crashes, rebalances and passivation.
/// struct Counter;
///
/// #[derive(Serialize, Deserialize)]
/// enum Command { Add(i64), Get }
///
/// #[derive(Serialize, Deserialize)]
/// struct Added(i64);
///
/// impl EventSourced for Counter {
///     type Command = Command;
///     type Event = Added;
///     type State = i64;
///     type Reply = i64;
///
///     async fn handle_command(
///         &mut self,
///         _ctx: &mut EntityContext,
///         state: &i64,
///         command: Command,
///     ) -> Effect<Self> {
///         match command {
///             // Answered once the event is stored, with the state after it.
///             Command::Add(n) => Effect::persist(Added(n)).then_reply(|value| *value),
///             Command::Get => Effect::reply(*state),
///         }
///     }
///
///     fn apply_event(state: &mut i64, event: &Added) {
///         *state += event.0;
///     }
/// }
/// ```
pub trait EventSourced: Send + 'static {
    /// The commands it handles.
    type Command: Wire;
    /// What it persists: serde, encoded like messages (MessagePack with field names, so a
    /// newer version may add fields with `#[serde(default)]` and still read old events).
    type Event: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// Its state: empty is `Default`; snapshots encode it.
    type State: Serialize + DeserializeOwned + Default + Send + Sync + 'static;
    /// What it answers (an `ask` gets `Result<Reply, PersistenceError>`).
    type Reply: Wire;

    /// Handles one command, given the state after every stored event; the effect says
    /// which events to persist (all or none) and what to answer. Runs only after recovery;
    /// the next command waits until the effect's events are stored and applied.
    fn handle_command(
        &mut self,
        ctx: &mut EntityContext,
        state: &Self::State,
        command: Self::Command,
    ) -> impl Future<Output = Effect<Self>> + Send
    where
        Self: Sized;

    /// Folds an event into the state. Also runs on recovery, so it must not have side
    /// effects, and must not fail: an event it cannot use should not have been persisted.
    fn apply_event(state: &mut Self::State, event: &Self::Event);

    /// Snapshots and deletion for this entity type; `None` takes `[persistence]`'s.
    fn retention(&self) -> Option<RetentionCriteria> {
        None
    }
}

/// A reply computed from the state after the events.
type ReplyFn<B> = Box<dyn FnOnce(&<B as EventSourced>::State) -> <B as EventSourced>::Reply + Send>;

/// What to answer: a value, or a function of the state after the events.
pub(crate) enum ReplyWith<B: EventSourced> {
    Value(B::Reply),
    FromState(ReplyFn<B>),
}

/// What a command handler decided: events to persist (atomically), what to answer
/// (after they are stored), and whether to stop afterwards (Akka's `Effect`).
pub struct Effect<B: EventSourced> {
    pub(crate) events: Vec<B::Event>,
    pub(crate) reply: ReplyWith<B>,
    pub(crate) stop: bool,
}

/// An effect whose answer is still to be given (`then_reply`, `reply`).
pub struct EffectBuilder<B: EventSourced> {
    events: Vec<B::Event>,
    stop: bool,
}

impl<B: EventSourced> Effect<B> {
    /// Persist `event`, then …
    pub fn persist(event: B::Event) -> EffectBuilder<B> {
        EffectBuilder {
            events: vec![event],
            stop: false,
        }
    }

    /// Persist `events` — all or none, in one atomic write (at most 1000) — then …
    pub fn persist_all(events: impl IntoIterator<Item = B::Event>) -> EffectBuilder<B> {
        EffectBuilder {
            events: events.into_iter().collect(),
            stop: false,
        }
    }

    /// Persist nothing, then …
    pub fn none() -> EffectBuilder<B> {
        EffectBuilder {
            events: Vec::new(),
            stop: false,
        }
    }

    /// Persist nothing and answer `reply`.
    pub fn reply(reply: B::Reply) -> Effect<B> {
        Effect::none().reply(reply)
    }
}

impl<B: EventSourced> Effect<B> {
    /// This effect as behaviour `C`'s, for a behaviour that wraps `B` (reliable
    /// delivery's event-sourced consumer): each event mapped by `event`, then `extra`
    /// persisted in the same atomic write; the answer mapped by `reply`, a function of
    /// the state computed from `C`'s state through `state`; stopping as before.
    pub fn map<C: EventSourced>(
        self,
        event: impl Fn(B::Event) -> C::Event,
        extra: Vec<C::Event>,
        state: fn(&C::State) -> &B::State,
        reply: impl FnOnce(B::Reply) -> C::Reply + Send + 'static,
    ) -> Effect<C> {
        let mut events: Vec<C::Event> = self.events.into_iter().map(event).collect();
        events.extend(extra);
        let reply = match self.reply {
            ReplyWith::Value(v) => ReplyWith::Value(reply(v)),
            ReplyWith::FromState(f) => {
                ReplyWith::FromState(Box::new(move |s: &C::State| reply(f(state(s)))))
            }
        };
        Effect {
            events,
            reply,
            stop: self.stop,
        }
    }
}

impl<B: EventSourced> EffectBuilder<B> {
    /// … stop the entity (passivate) after answering; its next message recovers it.
    pub fn then_stop(mut self) -> Self {
        self.stop = true;
        self
    }

    /// … answer with a function of the state after the events.
    pub fn then_reply(self, f: impl FnOnce(&B::State) -> B::Reply + Send + 'static) -> Effect<B> {
        Effect {
            events: self.events,
            reply: ReplyWith::FromState(Box::new(f)),
            stop: self.stop,
        }
    }

    /// … answer `reply`.
    pub fn reply(self, reply: B::Reply) -> Effect<B> {
        Effect {
            events: self.events,
            reply: ReplyWith::Value(reply),
            stop: self.stop,
        }
    }

    /// … answer nothing in particular (`Reply::default()`, e.g. `()`).
    pub fn no_reply(self) -> Effect<B>
    where
        B::Reply: Default,
    {
        self.reply(B::Reply::default())
    }
}

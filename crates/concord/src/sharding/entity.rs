//! The entity API: what an application writes ([`Entity`]), what an entity sees
//! ([`EntityContext`]), and how its messages are encoded ([`encode`], [`decode`]).
//!
//! **Encoding.** Messages, replies and handed-over states are serde types encoded as
//! MessagePack with field names (`rmp-serde`, `to_vec_named`): a struct travels as a map
//! from field name to value, so a node of a newer version may add fields — an older node
//! ignores the ones it does not know, and a newer node reading an older message fills a
//! missing field from `#[serde(default)]`. Enums travel by variant name. Chosen over
//! `postcard` (compact but positional: an added field breaks decoding) and `bincode`
//! (unmaintained, RUSTSEC-2025-0141); `rmp-serde` is maintained and is what the kameo
//! actor library uses for the same purpose.

use std::future::Future;
use std::pin::Pin;

use concord_core::Address;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::singleton::Wire;

/// Encodes a message, reply or state (MessagePack with field names; see the module docs).
///
/// # Errors
/// The value's `Serialize` implementation failed (the message).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    rmp_serde::to_vec_named(value).map_err(|e| e.to_string())
}

/// Decodes what [`encode`] made.
///
/// # Errors
/// The bytes are not a `T` (the decoder's message).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    rmp_serde::from_slice(bytes).map_err(|e| e.to_string())
}

/// What a running entity knows about itself.
#[derive(Debug)]
pub struct EntityContext {
    entity_id: String,
    shard_id: String,
    node: Address,
    passivate: bool,
}

impl EntityContext {
    pub(crate) fn new(entity_id: String, shard_id: String, node: Address) -> Self {
        EntityContext {
            entity_id,
            shard_id,
            node,
            passivate: false,
        }
    }

    /// The entity's id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// Its shard's id.
    pub fn shard_id(&self) -> &str {
        &self.shard_id
    }

    /// The node it runs on.
    pub fn node(&self) -> &Address {
        &self.node
    }

    /// Asks to be passivated (Akka's `Passivate`): messages already given to the entity are
    /// handled, then it stops (its state is dropped — keep what must last elsewhere, e.g.
    /// in Distributed Data); messages that arrive meanwhile wait and start it again.
    pub fn passivate(&mut self) {
        self.passivate = true;
    }

    pub(crate) fn take_passivate(&mut self) -> bool {
        std::mem::take(&mut self.passivate)
    }
}

/// A sharded entity: state addressed by an id, alive on at most one node of the cluster,
/// handling one message at a time.
///
/// ```
/// use concord::sharding::{Entity, EntityContext};
/// use serde::{Deserialize, Serialize};
///
/// /// A chat room: it keeps its last messages and moves with them when its shard moves.
/// #[derive(Default)]
/// struct Room {
///     lines: Vec<String>,
/// }
///
/// #[derive(Serialize, Deserialize)]
/// enum RoomMessage {
///     Post(String),
///     Last(usize),
/// }
///
/// impl Entity for Room {
///     type Message = RoomMessage;
///     type Reply = Vec<String>;
///     type State = Vec<String>;
///
///     async fn handle(&mut self, _ctx: &mut EntityContext, message: RoomMessage) -> Vec<String> {
///         match message {
///             RoomMessage::Post(line) => {
///                 self.lines.push(line);
///                 Vec::new()
///             }
///             RoomMessage::Last(n) => self.lines.iter().rev().take(n).cloned().collect(),
///         }
///     }
///
///     fn hand_off(&mut self) -> Option<Vec<String>> {
///         Some(std::mem::take(&mut self.lines))
///     }
/// }
/// ```
///
/// Start it on every node with [`crate::sharding::Sharding::init`], giving a factory that
/// builds an entity from its id and the state it handed over (if it moved), and send it
/// messages through [`crate::sharding::ShardRegion::entity_ref`].
pub trait Entity: Send + 'static {
    /// The messages it handles.
    type Message: Wire;
    /// What it answers (to an `ask`; a `tell` drops it). `()` when nothing.
    type Reply: Wire;
    /// The state it hands over when its shard moves to another node (rebalance, graceful
    /// leave). `()` when nothing moves (Akka's behaviour: the entity starts afresh there).
    type State: Wire;

    /// Handles one message. The next message waits until the future completes.
    fn handle(
        &mut self,
        ctx: &mut EntityContext,
        message: Self::Message,
    ) -> impl Future<Output = Self::Reply> + Send;

    /// Called once when the entity stops because its shard moves, after its last message:
    /// the state its next incarnation on the new node starts from (`None`: start afresh).
    /// Not called on passivation or when its node crashes.
    fn hand_off(&mut self) -> Option<Self::State> {
        None
    }
}

/// A boxed future.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An entity with its types erased, for the driver.
pub(crate) trait ErasedEntity: Send {
    /// Decodes `payload`, handles it, encodes the reply (when `reply`; empty otherwise).
    fn handle<'a>(
        &'a mut self,
        ctx: &'a mut EntityContext,
        payload: &'a [u8],
        reply: bool,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>>;

    /// The encoded state to hand over.
    fn hand_off(&mut self) -> Option<Vec<u8>>;
}

/// An [`Entity`] behind [`ErasedEntity`].
pub(crate) struct Typed<E>(pub(crate) E);

impl<E: Entity> ErasedEntity for Typed<E> {
    fn handle<'a>(
        &'a mut self,
        ctx: &'a mut EntityContext,
        payload: &'a [u8],
        reply: bool,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(async move {
            let message: E::Message =
                decode(payload).map_err(|e| format!("the message does not decode: {e}"))?;
            let r = self.0.handle(ctx, message).await;
            if reply {
                encode(&r)
            } else {
                Ok(Vec::new())
            }
        })
    }

    fn hand_off(&mut self) -> Option<Vec<u8>> {
        let state = self.0.hand_off()?;
        match encode(&state) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                tracing::warn!(error = %e, "entity state does not encode; it is not handed over");
                None
            }
        }
    }
}

/// Builds an entity from its id and its handed-over state (encoded), typed away.
pub(crate) type ErasedFactory =
    std::sync::Arc<dyn Fn(&str, Option<&[u8]>) -> Box<dyn ErasedEntity> + Send + Sync>;

/// The erased factory of `factory` (a state that does not decode is logged and dropped:
/// the entity starts afresh).
pub(crate) fn erase_factory<E, F>(factory: F) -> ErasedFactory
where
    E: Entity,
    F: Fn(&str, Option<E::State>) -> E + Send + Sync + 'static,
{
    std::sync::Arc::new(move |id: &str, state: Option<&[u8]>| {
        let state = state.and_then(|bytes| match decode::<E::State>(bytes) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(entity = %id, error = %e, "handed-over state does not decode; the entity starts afresh");
                None
            }
        });
        Box::new(Typed(factory(id, state))) as Box<dyn ErasedEntity>
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct V1 {
        id: u32,
        name: String,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct V2 {
        id: u32,
        name: String,
        #[serde(default)]
        tags: Vec<String>,
    }

    #[test]
    fn added_fields_are_tolerated_both_ways() {
        let old = encode(&V1 {
            id: 1,
            name: "a".into(),
        })
        .unwrap();
        assert_eq!(
            decode::<V2>(&old).unwrap(),
            V2 {
                id: 1,
                name: "a".into(),
                tags: vec![]
            },
            "new reader, old message: the default"
        );
        let new = encode(&V2 {
            id: 2,
            name: "b".into(),
            tags: vec!["x".into()],
        })
        .unwrap();
        assert_eq!(
            decode::<V1>(&new).unwrap(),
            V1 {
                id: 2,
                name: "b".into()
            },
            "old reader, new message: the field is ignored"
        );
        assert!(decode::<V1>(&[0xc1]).is_err(), "garbage is an error");
    }
}

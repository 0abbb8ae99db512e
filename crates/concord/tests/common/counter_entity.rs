//! The persistence tests' event-sourced counter: `Add(n)` persists `Added(n)` and answers
//! the new value; `Get` answers it.

use concord::persistence::{Effect, EventSourced};
use concord::sharding::EntityContext;
use serde::{Deserialize, Serialize};

/// The counter behaviour.
pub struct Counter;

/// Its commands.
#[derive(Serialize, Deserialize)]
pub enum Cmd {
    /// Add to the value (persisted).
    Add(i64),
    /// The value.
    Get,
}

/// Its event.
#[derive(Serialize, Deserialize)]
pub struct Added(pub i64);

impl EventSourced for Counter {
    type Command = Cmd;
    type Event = Added;
    type State = i64;
    type Reply = i64;

    async fn handle_command(&mut self, _: &mut EntityContext, state: &i64, c: Cmd) -> Effect<Self> {
        match c {
            Cmd::Add(n) => Effect::persist(Added(n)).then_reply(|v| *v),
            Cmd::Get => Effect::reply(*state),
        }
    }

    fn apply_event(state: &mut i64, e: &Added) {
        *state += e.0;
    }
}

//! The sample's persistent entities, run when the node runs persistence
//! (`[persistence].store` set; docs/PERSISTENCE.md):
//!
//! - `counter` is then [`PersistentCounter`], event-sourced: each increment is an event
//!   `Added { delta }`, and `POST /sample/counter/{id}` answers only once it is stored — a
//!   crash of the entity's node loses no acknowledged increment; its next incarnation,
//!   wherever its shard goes, recovers the value from the journal.
//! - `cart` is [`Cart`], a durable-state entity (the whole cart stored on each change):
//!   `POST /sample/cart/{id}` (form `item=<string>`, at most 256 bytes) adds an item (at most
//!   100 items), `DELETE /sample/cart/{id}` empties it, `GET /sample/cart/{id}` →
//!   `{"id", "items": [...], "node"}`.

use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use concord::persistence::{
    DurableState, DurableStateEntity, Effect, EventSourced, EventSourcedEntity, StateEffect,
};
use concord::sharding::{EntityContext, ShardRegion, ShardingError};

use super::entities::{message, sharding_error, Counter, CounterMessage, CounterValue, TIMEOUT};

/// The cart entity type's name.
pub const CART_TYPE: &str = "cart";
/// Longest cart item, bytes.
pub const MAX_ITEM: usize = 256;
/// Most items in a cart.
pub const MAX_ITEMS: usize = 100;

/// The event of an increment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Added {
    /// What was added (may be negative).
    pub delta: i64,
}

/// The event-sourced sample counter (see the module docs).
pub struct PersistentCounter;

impl EventSourced for PersistentCounter {
    type Command = CounterMessage;
    type Event = Added;
    type State = i64;
    type Reply = CounterValue;

    async fn handle_command(
        &mut self,
        ctx: &mut EntityContext,
        value: &i64,
        command: CounterMessage,
    ) -> Effect<Self> {
        let node = ctx.node().to_string();
        match command {
            CounterMessage::Add(delta) => {
                Effect::persist(Added { delta }).then_reply(move |v: &i64| CounterValue {
                    value: Ok(*v),
                    node,
                })
            }
            CounterMessage::Get => Effect::reply(CounterValue {
                value: Ok(*value),
                node,
            }),
        }
    }

    fn apply_event(value: &mut i64, e: &Added) {
        *value = value.saturating_add(e.delta);
    }
}

/// The sample's counters: replicated in Distributed Data, or event-sourced when the node
/// runs persistence.
#[derive(Clone)]
pub enum Counters {
    /// [`Counter`] (Distributed Data).
    Replicated(ShardRegion<Counter>),
    /// [`PersistentCounter`].
    EventSourced(ShardRegion<EventSourcedEntity<PersistentCounter>>),
}

impl Counters {
    /// Asks counter `id`; a persistence failure is the answer's error.
    pub async fn ask(&self, id: &str, m: CounterMessage) -> Result<CounterValue, ShardingError> {
        match self {
            Counters::Replicated(r) => r.entity_ref(id).ask(&m, TIMEOUT).await,
            Counters::EventSourced(r) => r.entity_ref(id).ask(&m, TIMEOUT).await.map(|a| {
                a.unwrap_or_else(|e| CounterValue {
                    value: Err(e.to_string()),
                    node: String::new(),
                })
            }),
        }
    }
}

/// What a cart is told.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CartMessage {
    /// Add an item.
    Add(String),
    /// Remove every item.
    Clear,
    /// Answer the items.
    Get,
}

/// A cart's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CartReply {
    /// The items, or why the command was refused.
    pub items: Result<Vec<String>, String>,
    /// The node hosting the entity.
    pub node: String,
}

/// The durable-state sample cart (see the module docs).
pub struct Cart;

impl DurableState for Cart {
    type Command = CartMessage;
    type State = Vec<String>;
    type Reply = CartReply;

    async fn handle_command(
        &mut self,
        ctx: &mut EntityContext,
        items: &Vec<String>,
        command: CartMessage,
    ) -> StateEffect<Self> {
        let node = ctx.node().to_string();
        let answer = move |items: &Vec<String>| CartReply {
            items: Ok(items.clone()),
            node,
        };
        match command {
            CartMessage::Add(_) if items.len() >= MAX_ITEMS => StateEffect::reply(CartReply {
                items: Err(format!("a cart holds at most {MAX_ITEMS} items")),
                node: ctx.node().to_string(),
            }),
            CartMessage::Add(item) => {
                let mut next = items.clone();
                next.push(item);
                StateEffect::persist(next).then_reply(answer)
            }
            CartMessage::Clear => StateEffect::delete().then_reply(answer),
            CartMessage::Get => StateEffect::none().then_reply(answer),
        }
    }
}

#[derive(Debug, Deserialize)]
struct ItemForm {
    item: String,
}

async fn ask_cart(
    carts: &ShardRegion<DurableStateEntity<Cart>>,
    id: String,
    m: CartMessage,
) -> Response {
    match carts.entity_ref(id.clone()).ask(&m, TIMEOUT).await {
        Ok(Ok(CartReply {
            items: Ok(items),
            node,
        })) => Json(serde_json::json!({ "id": id, "items": items, "node": node })).into_response(),
        Ok(Ok(CartReply {
            items: Err(why), ..
        })) => message(StatusCode::CONFLICT, why),
        Ok(Err(e)) => message(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => sharding_error(e),
    }
}

async fn get_cart(
    State(carts): State<ShardRegion<DurableStateEntity<Cart>>>,
    Path(id): Path<String>,
) -> Response {
    ask_cart(&carts, id, CartMessage::Get).await
}

async fn post_cart(
    State(carts): State<ShardRegion<DurableStateEntity<Cart>>>,
    Path(id): Path<String>,
    form: Result<Form<ItemForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return message(StatusCode::BAD_REQUEST, "form field: item=<string>");
    };
    if f.item.is_empty() || f.item.len() > MAX_ITEM {
        return message(
            StatusCode::BAD_REQUEST,
            format!("an item is 1 to {MAX_ITEM} bytes"),
        );
    }
    ask_cart(&carts, id, CartMessage::Add(f.item)).await
}

async fn delete_cart(
    State(carts): State<ShardRegion<DurableStateEntity<Cart>>>,
    Path(id): Path<String>,
) -> Response {
    ask_cart(&carts, id, CartMessage::Clear).await
}

/// `/sample/cart/{id}`.
pub fn cart_routes(carts: ShardRegion<DurableStateEntity<Cart>>) -> Router {
    Router::new()
        .route(
            "/sample/cart/{id}",
            get(get_cart).post(post_cart).delete(delete_cart),
        )
        .with_state(carts)
}

//! [`PubSub`], [`Topic`] and [`Subscriber`]; see the module docs of [`crate::pubsub`].

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use concord_core::receptionist::{InvalidServiceKey, Listing};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{mpsc, Mutex, Notify};

use crate::receptionist::handle::Charged;
use crate::receptionist::{Receptionist, ReceptionistError, Registration, ServiceKey};
use crate::sharding::entity::{decode, encode};

/// Why a pub-sub operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PubSubError {
    /// The topic or group name is not 1 to 80 bytes of `[A-Za-z0-9_.:-]`.
    #[error("topic or group name `{0}`: 1 to 80 bytes of A-Z a-z 0-9 _ . : -")]
    InvalidName(String),
    /// This node has subscribers of `pubsub.max-topics` topics already.
    #[error("this node has subscribers of {0} topics, the most `pubsub.max-topics` allows")]
    TooManyTopics(usize),
    /// This topic has `pubsub.max-subscribers-per-topic` subscribers on this node already.
    #[error("topic `{topic}` has {count} subscribers on this node, the most `pubsub.max-subscribers-per-topic` allows")]
    TooManySubscribers {
        /// The topic.
        topic: String,
        /// Its subscribers here.
        count: usize,
    },
    /// The receptionist failed (registry, encoding, stopped).
    #[error(transparent)]
    Receptionist(#[from] ReceptionistError),
}

/// The local side of one topic: its subscribers' mailboxes and whether the node's handle
/// is registered.
#[derive(Default)]
struct TopicLocal {
    state: Mutex<LocalState>,
    /// A subscriber went: the fan-out checks whether any is left.
    changed: Notify,
}

#[derive(Default)]
struct LocalState {
    subscribers: Vec<mpsc::Sender<Arc<Charged>>>,
    registered: bool,
}

/// Checks a topic or group name: 1 to 80 bytes of `[A-Za-z0-9_.:-]` (no `/`, so that
/// `pubsub/group/<topic>/<group>` names one topic and one group).
fn check_name(name: &str) -> Result<(), PubSubError> {
    let ok = !name.is_empty()
        && name.len() <= 80
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(PubSubError::InvalidName(name.chars().take(80).collect()))
    }
}

fn bad_key(e: InvalidServiceKey) -> PubSubError {
    PubSubError::InvalidName(e.0)
}

/// Distributed pub-sub on one node; cheap to clone.
#[derive(Clone)]
pub struct PubSub {
    receptionist: Receptionist,
    topics: Arc<Mutex<BTreeMap<String, Arc<TopicLocal>>>>,
}

/// A topic carrying messages of type `M`.
pub struct Topic<M> {
    name: String,
    key: ServiceKey<Vec<u8>>,
    pubsub: PubSub,
    _type: PhantomData<fn(M)>,
}

/// One subscription: the messages published to its topic (or sent to its group) after it
/// was registered, in each publisher's order. Dropping it unsubscribes.
pub struct Subscriber<M> {
    inner: Inner,
    receptionist: Receptionist,
    _type: PhantomData<fn() -> M>,
}

enum Inner {
    Topic {
        rx: mpsc::Receiver<Arc<Charged>>,
        local: Arc<TopicLocal>,
    },
    Group(Registration<Vec<u8>>),
}

impl PubSub {
    /// Pub-sub over `receptionist` (whose layer must run on the node).
    pub fn new(receptionist: Receptionist) -> Self {
        PubSub {
            receptionist,
            topics: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// The topic `name` for messages of type `M`.
    ///
    /// # Errors
    /// [`PubSubError::InvalidName`].
    pub fn topic<M>(&self, name: &str) -> Result<Topic<M>, PubSubError> {
        check_name(name)?;
        Ok(Topic {
            key: ServiceKey::reserved(&format!("pubsub/topic/{name}")).map_err(bad_key)?,
            name: name.to_string(),
            pubsub: self.clone(),
            _type: PhantomData,
        })
    }

    fn limits(&self) -> (usize, usize) {
        let c = self
            .receptionist
            .shared
            .pubsub
            .get()
            .cloned()
            .unwrap_or_default();
        (c.max_topics, c.max_subscribers_per_topic)
    }
}

impl<M> Topic<M> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn group_key(&self, group: &str) -> Result<ServiceKey<Vec<u8>>, PubSubError> {
        check_name(group)?;
        ServiceKey::reserved(&format!("pubsub/group/{}/{group}", self.name)).map_err(bad_key)
    }

    /// Subscribes on this node: every message published to the topic from now on (once
    /// this node's registration has reached the publisher's node).
    ///
    /// # Errors
    /// [`PubSubError::TooManyTopics`], [`PubSubError::TooManySubscribers`],
    /// [`PubSubError::Receptionist`].
    pub async fn subscribe(&self) -> Result<Subscriber<M>, PubSubError> {
        let pubsub = &self.pubsub;
        let (max_topics, max_subscribers) = pubsub.limits();
        let mut topics = pubsub.topics.lock().await;
        // A topic enters the map only once it has a subscriber, so a failed or cancelled
        // subscription leaves nothing behind.
        let local = match topics.get(&self.name) {
            Some(l) => l.clone(),
            None if topics.len() >= max_topics => {
                return Err(PubSubError::TooManyTopics(topics.len()));
            }
            None => Arc::new(TopicLocal::default()),
        };
        let mut state = local.state.lock().await;
        state.subscribers.retain(|s| !s.is_closed());
        if state.subscribers.len() >= max_subscribers {
            return Err(PubSubError::TooManySubscribers {
                topic: self.name.clone(),
                count: state.subscribers.len(),
            });
        }
        if !state.registered {
            let registration = pubsub.receptionist.register(&self.key).await?;
            state.registered = true;
            tokio::spawn(fan_out(
                registration,
                local.clone(),
                pubsub.topics.clone(),
                self.name.clone(),
                pubsub.receptionist.clone(),
            ));
        }
        let size = pubsub
            .receptionist
            .shared
            .mailbox_size
            .load(Ordering::Relaxed)
            .max(1);
        let (tx, rx) = mpsc::channel(usize::try_from(size).unwrap_or(usize::MAX));
        state.subscribers.push(tx);
        drop(state);
        topics.insert(self.name.clone(), local.clone());
        Ok(Subscriber {
            inner: Inner::Topic { rx, local },
            receptionist: pubsub.receptionist.clone(),
            _type: PhantomData,
        })
    }

    /// Subscribes as a member of `group`: a [`Topic::send`] to the group reaches one of its
    /// subscribers (Akka's `Send` with a group; published messages do not reach it).
    ///
    /// # Errors
    /// [`PubSubError::InvalidName`], [`PubSubError::Receptionist`] (the receptionist's
    /// `max-registrations` bounds groups' subscribers).
    pub async fn subscribe_in_group(&self, group: &str) -> Result<Subscriber<M>, PubSubError> {
        let key = self.group_key(group)?;
        let registration = self.pubsub.receptionist.register(&key).await?;
        Ok(Subscriber {
            inner: Inner::Group(registration),
            receptionist: self.pubsub.receptionist.clone(),
            _type: PhantomData,
        })
    }

    /// The subscribers of `group`, as this node knows them.
    ///
    /// # Errors
    /// [`PubSubError::InvalidName`], [`PubSubError::Receptionist`].
    pub async fn group(&self, group: &str) -> Result<Listing, PubSubError> {
        let key = self.group_key(group)?;
        Ok(self.pubsub.receptionist.find(&key).await?)
    }

    /// The nodes with subscribers of this topic, as this node knows them.
    ///
    /// # Errors
    /// [`PubSubError::Receptionist`].
    pub async fn subscribers(&self) -> Result<Listing, PubSubError> {
        Ok(self.pubsub.receptionist.find(&self.key).await?)
    }
}

impl<M: Serialize> Topic<M> {
    /// Publishes `message` to every subscriber, at most once: one copy to each reachable
    /// node with subscribers, which hands it to its local ones. Returns the number of nodes
    /// it was sent to (0: no subscriber known — the message is dropped, as Akka's go to
    /// dead letters).
    ///
    /// # Errors
    /// [`PubSubError::Receptionist`] (encoding, registry, stopped).
    pub async fn publish(&self, message: &M) -> Result<usize, PubSubError> {
        let payload = encode(message).map_err(ReceptionistError::Encoding)?;
        let listing = self.pubsub.receptionist.find(&self.key).await?;
        let receptionist = &self.pubsub.receptionist;
        for to in &listing.reachable {
            receptionist
                .tell_bytes(self.key.id(), to, payload.clone())
                .await?;
        }
        metrics::counter!("concord_pubsub_published_total", "node" => receptionist.node_label())
            .increment(1);
        Ok(listing.reachable.len())
    }

    /// Sends `message` to one subscriber of `group`, chosen at random among the reachable
    /// ones (Akka's `Send` with random routing); returns false if the group has none.
    ///
    /// # Errors
    /// [`PubSubError::InvalidName`], [`PubSubError::Receptionist`].
    pub async fn send(&self, group: &str, message: &M) -> Result<bool, PubSubError> {
        let key = self.group_key(group)?;
        let listing = self.pubsub.receptionist.find(&key).await?;
        if listing.reachable.is_empty() {
            return Ok(false);
        }
        let i = rand::random_range(0..listing.reachable.len());
        let payload = encode(message).map_err(ReceptionistError::Encoding)?;
        self.pubsub
            .receptionist
            .tell_bytes(key.id(), &listing.reachable[i], payload)
            .await?;
        Ok(true)
    }
}

/// Hands each message to the node's handle of a topic to its local subscribers, until the
/// last of them goes; then the handle is dropped (deregistered) and the topic forgotten.
async fn fan_out(
    mut registration: Registration<Vec<u8>>,
    local: Arc<TopicLocal>,
    topics: Arc<Mutex<BTreeMap<String, Arc<TopicLocal>>>>,
    name: String,
    receptionist: Receptionist,
) {
    loop {
        tokio::select! {
            charged = registration.recv_charged() => {
                let mut state = local.state.lock().await;
                let Some(charged) = charged else {
                    // The node stopped: the subscribers' `recv` ends.
                    state.subscribers.clear();
                    state.registered = false;
                    break;
                };
                state.subscribers.retain(|s| !s.is_closed());
                // One copy, charged once, shared by every local subscriber.
                let shared = Arc::new(charged);
                for s in &state.subscribers {
                    if s.try_send(shared.clone()).is_err() {
                        metrics::counter!("concord_pubsub_dropped_total", "node" => receptionist.node_label(), "reason" => "mailbox-full")
                            .increment(1);
                    }
                }
                if state.subscribers.is_empty() {
                    state.registered = false;
                    break;
                }
            }
            () = local.changed.notified() => {
                let mut state = local.state.lock().await;
                state.subscribers.retain(|s| !s.is_closed());
                if state.subscribers.is_empty() {
                    state.registered = false;
                    break;
                }
            }
        }
    }
    registration.deregister().await;
    let mut topics = topics.lock().await;
    let idle = match topics.get(&name) {
        Some(t) => {
            let s = t.state.lock().await;
            !s.registered && s.subscribers.is_empty()
        }
        None => false,
    };
    if idle {
        topics.remove(&name);
    }
}

impl<M: DeserializeOwned> Subscriber<M> {
    /// The next message; `None` once the node stopped. A message that does not decode as
    /// `M` is dropped and counted (`concord_receptionist_undecodable_total`).
    pub async fn recv(&mut self) -> Option<M> {
        loop {
            let bytes = match &mut self.inner {
                Inner::Topic { rx, .. } => rx.recv().await?,
                Inner::Group(r) => Arc::new(r.recv_charged().await?),
            };
            match decode(bytes.bytes()) {
                Ok(m) => return Some(m),
                Err(_) => self.receptionist.count_undecodable(),
            }
        }
    }
}

impl<M> Drop for Subscriber<M> {
    fn drop(&mut self) {
        if let Inner::Topic { rx, local } = &mut self.inner {
            rx.close();
            local.changed.notify_one();
        }
    }
}

//! [`Receptionist`]: register handles under a [`ServiceKey`], find them, follow them, and
//! send them messages (Akka's typed `Receptionist`: `Register`, `Find`, `Subscribe`, and a
//! `tell` to a listed instance).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use concord_core::ddata::{Key, ORSet, ReadConsistency, WriteConsistency};
use concord_core::receptionist::{
    listing, InvalidServiceKey, Listing, RegistrationRefused, ServiceInstance, ServiceKeyId,
};
use concord_core::MembershipView;
use futures_channel::oneshot;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tracing::warn;

use super::effects::ReceptionistCommand;
use crate::ddata::{Change, Changes, DdataError, Replicator};
use crate::sharding::entity::{decode, encode};

/// A typed key handles register under (Akka's `ServiceKey[T]`): every handle registered
/// under it takes messages of type `M`.
pub struct ServiceKey<M> {
    id: ServiceKeyId,
    _type: PhantomData<fn(M)>,
}

impl<M> Clone for ServiceKey<M> {
    fn clone(&self) -> Self {
        ServiceKey {
            id: self.id.clone(),
            _type: PhantomData,
        }
    }
}

impl<M> std::fmt::Debug for ServiceKey<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceKey({})", self.id)
    }
}

impl<M> ServiceKey<M> {
    /// The prefix of the keys distributed pub-sub registers under; an application's keys
    /// may not start with it.
    pub const RESERVED_PREFIX: &'static str = "pubsub/";

    /// The key `id` (1 to 200 bytes of `[A-Za-z0-9_.:/-]`, not starting with `pubsub/`).
    ///
    /// # Errors
    /// [`InvalidServiceKey`] naming the id.
    pub fn new(id: &str) -> Result<Self, InvalidServiceKey> {
        if id.starts_with(Self::RESERVED_PREFIX) {
            return Err(InvalidServiceKey(id.chars().take(200).collect()));
        }
        Self::reserved(id)
    }

    /// A key of distributed pub-sub's (`pubsub/...`).
    pub(crate) fn reserved(id: &str) -> Result<Self, InvalidServiceKey> {
        Ok(ServiceKey {
            id: ServiceKeyId::new(id)?,
            _type: PhantomData,
        })
    }

    /// The id.
    pub fn id(&self) -> &ServiceKeyId {
        &self.id
    }
}

/// Why a receptionist operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ReceptionistError {
    /// The registration was refused (the node's limit, see `receptionist.max-registrations`).
    #[error("registration refused: {0}")]
    Refused(#[from] RegistrationRefused),
    /// Distributed Data could not read or write the registry.
    #[error("registry: {0}")]
    Registry(#[from] DdataError),
    /// The message does not encode.
    #[error("encoding: {0}")]
    Encoding(String),
    /// The receptionist layer is not running (the node stopped, or the layer was not added).
    #[error("the receptionist layer has stopped")]
    Stopped,
}

/// State the layer and the handles share.
pub(crate) struct Shared {
    /// The latest membership view (set by the layer's host).
    pub(crate) view: watch::Sender<Option<Arc<MembershipView>>>,
    /// Messages waiting for one handle, at most (`receptionist.mailbox-size`).
    pub(crate) mailbox_size: AtomicU64,
    /// Bytes of messages waiting in this node's handles' and subscribers' mailboxes.
    pub(crate) mailbox_bytes: AtomicU64,
    /// At most that many (`receptionist.max-mailbox-bytes`).
    pub(crate) max_mailbox_bytes: AtomicU64,
    /// This node's address, for metric labels (set when the layer starts).
    pub(crate) node: std::sync::OnceLock<String>,
    /// The `[pubsub]` limits (set when the layer starts; defaults before).
    pub(crate) pubsub: std::sync::OnceLock<super::config::PubSubConfig>,
    /// The cluster's load, for adaptive routers (set when the layer starts).
    pub(crate) cluster_load: std::sync::OnceLock<crate::load::ClusterLoad>,
}

/// A message waiting in a mailbox, charged to the node's mailbox budget until it is dropped
/// — received, refused by a full or closed mailbox, or left in a dropped one: every path
/// returns its bytes exactly once. A fan-out shares one behind an `Arc` (charged once).
pub(crate) struct Charged {
    bytes: Bytes,
    shared: Arc<Shared>,
}

impl Charged {
    /// The message.
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

impl Drop for Charged {
    fn drop(&mut self) {
        let n = self.bytes.len() as u64;
        let released =
            self.shared
                .mailbox_bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    Some(used.saturating_sub(n))
                });
        debug_assert!(
            released.is_ok_and(|used| used >= n),
            "released more than charged"
        );
    }
}

/// The receptionist of one node; cheap to clone. Made with
/// [`crate::receptionist::ReceptionistLayer::new`].
#[derive(Clone)]
pub struct Receptionist {
    pub(crate) commands: mpsc::Sender<ReceptionistCommand>,
    pub(crate) replicator: Replicator,
    pub(crate) shared: Arc<Shared>,
    next_id: Arc<AtomicU64>,
}

/// A handle registered under a key: receives the messages sent to its instance, in the
/// order each sender sent them, at most once. Dropping it (or [`Registration::deregister`])
/// removes it from the registry.
pub struct Registration<M> {
    instance: ServiceInstance,
    key: ServiceKeyId,
    rx: mpsc::Receiver<Charged>,
    receptionist: Receptionist,
    deregistered: bool,
    _type: PhantomData<fn() -> M>,
}

fn registry_key(id: &ServiceKeyId) -> Result<Key<ORSet<String>>, ReceptionistError> {
    Key::new(id.ddata_key())
        .map_err(|e| ReceptionistError::Registry(DdataError::Refused(e.to_string())))
}

impl Receptionist {
    pub(crate) fn new(
        commands: mpsc::Sender<ReceptionistCommand>,
        replicator: Replicator,
        shared: Arc<Shared>,
    ) -> Self {
        Receptionist {
            commands,
            replicator,
            shared,
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// The Distributed Data replicator the registry lives in.
    pub fn replicator(&self) -> Replicator {
        self.replicator.clone()
    }

    /// Registers a new handle under `key` (Akka's `Register`): written to this node's
    /// replica of the registry at once, spread to the others by Distributed Data's gossip
    /// (Akka's default `write-consistency = local`).
    ///
    /// # Errors
    /// [`ReceptionistError::Refused`] beyond `receptionist.max-registrations`;
    /// [`ReceptionistError::Registry`] if the registry could not be written (nothing is
    /// registered then); [`ReceptionistError::Stopped`].
    pub async fn register<M>(
        &self,
        key: &ServiceKey<M>,
    ) -> Result<Registration<M>, ReceptionistError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let size = self.shared.mailbox_size.load(Ordering::Relaxed).max(1);
        let (mailbox, rx) = mpsc::channel::<Charged>(usize::try_from(size).unwrap_or(usize::MAX));
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(ReceptionistCommand::Register {
                id,
                key: key.id.clone(),
                mailbox,
                reply,
            })
            .await
            .map_err(|_| ReceptionistError::Stopped)?;
        let instance = answer.await.map_err(|_| ReceptionistError::Stopped)??;
        let registration = Registration {
            instance: instance.clone(),
            key: key.id.clone(),
            rx,
            receptionist: self.clone(),
            deregistered: false,
            _type: PhantomData,
        };
        let entry = instance.to_entry();
        let me = self.replicator.replica();
        self.replicator
            .update(
                &registry_key(&key.id)?,
                WriteConsistency::Local,
                ORSet::new,
                move |s| s.add(me, entry),
            )
            .await?;
        Ok(registration)
    }

    /// The instances registered under `key` as this node knows them now (Akka's `Find`,
    /// from the local replica).
    ///
    /// # Errors
    /// [`ReceptionistError::Registry`], [`ReceptionistError::Stopped`].
    pub async fn find<M>(&self, key: &ServiceKey<M>) -> Result<Listing, ReceptionistError> {
        let set = self
            .replicator
            .get(&registry_key(&key.id)?, ReadConsistency::Local)
            .await?
            .unwrap_or_default();
        Ok(self.listing_of(&key.id, &set))
    }

    fn listing_of(&self, key: &ServiceKeyId, set: &ORSet<String>) -> Listing {
        match self.shared.view.borrow().as_ref() {
            Some(view) => listing(key, set.elements(), view),
            None => Listing {
                key: Some(key.clone()),
                ..Listing::default()
            },
        }
    }

    /// Follows `key` (Akka's `Subscribe`): the listing now, then each time it changes —
    /// a registration added or removed, or a member of the listing becoming unreachable,
    /// reachable again or removed.
    ///
    /// # Errors
    /// [`ReceptionistError::Registry`], [`ReceptionistError::Stopped`].
    pub async fn subscribe<M>(
        &self,
        key: &ServiceKey<M>,
    ) -> Result<ListingSubscription, ReceptionistError> {
        let ddata_key = registry_key(&key.id)?;
        let changes = self.replicator.subscribe(&ddata_key).await?;
        let set = self
            .replicator
            .get(&ddata_key, ReadConsistency::Local)
            .await?
            .unwrap_or_default();
        Ok(ListingSubscription {
            receptionist: self.clone(),
            key: key.id.clone(),
            changes,
            view: self.shared.view.subscribe(),
            set,
            last: None,
        })
    }

    /// Sends `message` to `to`, an instance listed under `key`: at most once, in order per
    /// sender; dropped (and counted) if its node left or the handle is gone.
    ///
    /// # Errors
    /// [`ReceptionistError::Encoding`], [`ReceptionistError::Stopped`].
    pub async fn tell<M: Serialize>(
        &self,
        key: &ServiceKey<M>,
        to: &ServiceInstance,
        message: &M,
    ) -> Result<(), ReceptionistError> {
        let payload = encode(message).map_err(ReceptionistError::Encoding)?;
        self.tell_bytes(&key.id, to, payload).await
    }

    pub(crate) async fn tell_bytes(
        &self,
        key: &ServiceKeyId,
        to: &ServiceInstance,
        payload: Vec<u8>,
    ) -> Result<(), ReceptionistError> {
        self.commands
            .send(ReceptionistCommand::Send {
                to: to.clone(),
                key: key.clone(),
                payload,
            })
            .await
            .map_err(|_| ReceptionistError::Stopped)
    }

    /// `bytes` charged to the node's mailbox budget (`receptionist.max-mailbox-bytes`) until
    /// the returned value is dropped; `None` (nothing charged) when the budget has no room.
    pub(crate) fn charge(&self, bytes: Bytes) -> Option<Charged> {
        let n = bytes.len() as u64;
        let max = self.shared.max_mailbox_bytes.load(Ordering::Relaxed);
        self.shared
            .mailbox_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= max)
            })
            .ok()?;
        Some(Charged {
            bytes,
            shared: self.shared.clone(),
        })
    }

    /// Bytes of messages waiting in this node's mailboxes now.
    pub(crate) fn mailbox_bytes(&self) -> u64 {
        self.shared.mailbox_bytes.load(Ordering::Relaxed)
    }

    /// This node's address (metric label; empty before the layer starts).
    pub(crate) fn node_label(&self) -> String {
        self.shared.node.get().cloned().unwrap_or_default()
    }

    /// Counts a message that did not decode for its handle's type.
    pub(crate) fn count_undecodable(&self) {
        metrics::counter!("concord_receptionist_undecodable_total", "node" => self.node_label())
            .increment(1);
    }

    /// Removes `instance` from the registry of `key` and forgets its mailbox.
    async fn deregister_instance(&self, key: ServiceKeyId, instance: ServiceInstance) {
        let _ = self
            .commands
            .send(ReceptionistCommand::Deregister { id: instance.id })
            .await;
        let Ok(ddata_key) = registry_key(&key) else {
            return;
        };
        let entry = instance.to_entry();
        let me = self.replicator.replica();
        let removed = self
            .replicator
            .update(&ddata_key, WriteConsistency::Local, ORSet::new, move |s| {
                s.remove(me, &entry)
            })
            .await;
        if let Err(e) = removed {
            warn!(key = %key, error = %e, "receptionist: cannot remove a registration; the leader removes it when this node leaves");
        }
    }
}

impl<M> Registration<M> {
    /// This handle's instance (what listings show and messages are sent to).
    pub fn instance(&self) -> &ServiceInstance {
        &self.instance
    }

    /// The next message, encoded and still charged to the budget; `None` once the node
    /// stopped.
    pub(crate) async fn recv_charged(&mut self) -> Option<Charged> {
        self.rx.recv().await
    }

    /// Removes the handle from the registry now (dropping it does the same in the
    /// background).
    pub async fn deregister(mut self) {
        self.deregistered = true;
        let key = self.key.clone();
        let instance = self.instance.clone();
        self.receptionist.deregister_instance(key, instance).await;
    }
}

impl<M: DeserializeOwned> Registration<M> {
    /// The next message; `None` once the node stopped. A message that does not decode as
    /// `M` is dropped and counted (`concord_receptionist_undecodable_total`).
    pub async fn recv(&mut self) -> Option<M> {
        loop {
            let charged = self.recv_charged().await?;
            match decode(charged.bytes()) {
                Ok(m) => return Some(m),
                Err(_) => self.receptionist.count_undecodable(),
            }
        }
    }
}

impl<M> Drop for Registration<M> {
    fn drop(&mut self) {
        if self.deregistered {
            return;
        }
        let receptionist = self.receptionist.clone();
        let (key, instance) = (self.key.clone(), self.instance.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { receptionist.deregister_instance(key, instance).await });
        }
    }
}

/// A subscription to one key's listing ([`Receptionist::subscribe`]).
pub struct ListingSubscription {
    receptionist: Receptionist,
    key: ServiceKeyId,
    changes: Changes<ORSet<String>>,
    view: watch::Receiver<Option<Arc<MembershipView>>>,
    set: ORSet<String>,
    last: Option<Listing>,
}

impl ListingSubscription {
    /// The listing now (first call) or at its next change; `None` once the node stopped.
    pub async fn next(&mut self) -> Option<Listing> {
        loop {
            let now = self.receptionist.listing_of(&self.key, &self.set);
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Some(now);
            }
            tokio::select! {
                change = self.changes.next() => match change? {
                    Change::Changed(set) => self.set = set,
                    Change::Deleted => self.set = ORSet::new(),
                },
                changed = self.view.changed() => changed.ok()?,
            }
        }
    }
}

//! [`ServiceRouter`]: sends each message to one instance of a service key (or to all) by
//! a [`RoutingLogic`] — round robin, random, consistent hashing on a key, adaptive to the
//! nodes' load from cluster metrics (Akka's `AdaptiveLoadBalancingRoutingLogic`), or
//! broadcast — over the key's reachable instances, followed as they change.

use std::marker::PhantomData;
use std::sync::Mutex;

use concord_core::receptionist::ServiceInstance;
use concord_core::services::{Router, RoutingLogic};
use serde::Serialize;
use tokio::sync::watch;

use super::handle::{Receptionist, ReceptionistError, ServiceKey};
use crate::sharding::entity::encode;

/// A router over the instances registered under one key; see the module docs. Dropping it
/// stops following the key.
pub struct ServiceRouter<M> {
    receptionist: Receptionist,
    key: ServiceKey<M>,
    instances: watch::Receiver<Vec<ServiceInstance>>,
    router: Mutex<Router>,
    follower: tokio::task::JoinHandle<()>,
    _type: PhantomData<fn(M)>,
}

impl Receptionist {
    /// A router over `key`'s reachable instances with `logic`.
    ///
    /// # Errors
    /// [`ReceptionistError::Registry`], [`ReceptionistError::Stopped`].
    pub async fn router<M>(
        &self,
        key: &ServiceKey<M>,
        logic: RoutingLogic,
    ) -> Result<ServiceRouter<M>, ReceptionistError> {
        let mut listings = self.subscribe(key).await?;
        let first = listings.next().await.ok_or(ReceptionistError::Stopped)?;
        let (tx, instances) = watch::channel(first.reachable);
        let follower = tokio::spawn(async move {
            while let Some(l) = listings.next().await {
                if tx.send(l.reachable).is_err() {
                    return;
                }
            }
        });
        Ok(ServiceRouter {
            receptionist: self.clone(),
            key: key.clone(),
            instances,
            router: Mutex::new(Router::new(logic, rand::random())),
            follower,
            _type: PhantomData,
        })
    }
}

impl<M> ServiceRouter<M> {
    /// The instances it routes over now (reachable, sorted).
    pub fn instances(&self) -> Vec<ServiceInstance> {
        self.instances.borrow().clone()
    }

    /// Waits until it routes over at least `n` instances.
    ///
    /// # Errors
    /// [`ReceptionistError::Stopped`] if the key can no longer be followed.
    pub async fn wait_for(&mut self, n: usize) -> Result<(), ReceptionistError> {
        self.instances
            .wait_for(|i| i.len() >= n)
            .await
            .map(|_| ())
            .map_err(|_| ReceptionistError::Stopped)
    }

    fn targets(&self, hash_key: Option<&[u8]>) -> Vec<ServiceInstance> {
        let instances = self.instances.borrow().clone();
        let mut router = self.router.lock().unwrap_or_else(|p| p.into_inner());
        let capacity = match router.selector() {
            Some(selector) => self
                .receptionist
                .shared
                .cluster_load
                .get()
                .map(|l| l.capacity(selector))
                .unwrap_or_default(),
            None => Default::default(),
        };
        router
            .route(
                &instances,
                |i| &i.node,
                |i| i.to_entry().into_bytes(),
                hash_key,
                &capacity,
            )
            .into_iter()
            .filter_map(|i| instances.get(i).cloned())
            .collect()
    }
}

impl<M: Serialize> ServiceRouter<M> {
    /// Sends `message` to the instance(s) the logic picks; the number sent to (0 when the
    /// key has no reachable instance: the message is dropped). At most once.
    ///
    /// # Errors
    /// [`ReceptionistError::Encoding`], [`ReceptionistError::Stopped`].
    pub async fn tell(&self, message: &M) -> Result<usize, ReceptionistError> {
        self.send(None, message).await
    }

    /// Like [`ServiceRouter::tell`], with `hash_key` for consistent hashing (the same key
    /// reaches the same instance while the instances stay the same).
    ///
    /// # Errors
    /// As [`ServiceRouter::tell`].
    pub async fn tell_keyed(
        &self,
        hash_key: &[u8],
        message: &M,
    ) -> Result<usize, ReceptionistError> {
        self.send(Some(hash_key), message).await
    }

    async fn send(&self, hash_key: Option<&[u8]>, message: &M) -> Result<usize, ReceptionistError> {
        let payload = encode(message).map_err(ReceptionistError::Encoding)?;
        let targets = self.targets(hash_key);
        for t in &targets {
            self.receptionist
                .tell_bytes(self.key.id(), t, payload.clone())
                .await?;
        }
        Ok(targets.len())
    }
}

impl<M> Drop for ServiceRouter<M> {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

//! The task of one local instance of a partitioned service: its mailbox, one message at a
//! time, answers to asks back through the host, and `InstanceStopped` once its mailbox is
//! closed and empty (the handoff waits for it, so two instances never overlap).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::FutureExt;
use tracing::warn;

use concord_core::services::PartitionPath;
use concord_core::{Address, UniqueAddress};
use tokio::sync::mpsc;

use super::effects::ServicesCommand;
use super::handle::{Factory, ServiceContext, WireEnvelope};
use crate::sharding::entity::decode;

/// A message for the instance: who sent it and the envelope.
pub(crate) struct InstanceItem {
    pub(crate) sender: UniqueAddress,
    pub(crate) payload: Vec<u8>,
}

/// Runs an instance of `path` built by `factory` until `mailbox` closes and is empty.
pub(crate) async fn run_instance(
    generation: u64,
    path: PartitionPath,
    node: Address,
    factory: Factory,
    mut mailbox: mpsc::Receiver<InstanceItem>,
    commands: mpsc::Sender<ServicesCommand>,
    undecodable: Arc<AtomicU64>,
) {
    let mut ctx = ServiceContext {
        path: path.clone(),
        node,
        sender: None,
    };
    // A panicking factory leaves no instance: each message fails until one builds.
    let build = |ctx: &ServiceContext| {
        std::panic::catch_unwind(AssertUnwindSafe(|| factory(ctx))).map_err(|_| {
            warn!(path = %ctx.path, "a service's factory panicked; no instance");
        })
    };
    let mut service = build(&ctx).ok();
    while let Some(item) = mailbox.recv().await {
        let envelope: WireEnvelope = match decode(&item.payload) {
            Ok(e) => e,
            Err(_) => {
                undecodable.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        if service.is_none() {
            ctx.sender = None;
            service = build(&ctx).ok();
        }
        ctx.sender = Some(item.sender.clone());
        let handled = match service.as_mut() {
            Some(service) => {
                AssertUnwindSafe(service.handle(&mut ctx, &envelope.body, envelope.ask.is_some()))
                    .catch_unwind()
                    .await
            }
            None => Ok(Err("the service's factory failed: no instance".to_string())),
        };
        let result = match handled {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                undecodable.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            Err(_) => {
                // Akka's default supervision: restart, a fresh instance from the factory.
                warn!(path = %path, "a service instance panicked handling a message; it restarts");
                ctx.sender = None;
                service = build(&ctx).ok();
                Err("the instance failed handling the message".to_string())
            }
        };
        if let Some(id) = envelope.ask {
            let reply = ServicesCommand::Reply {
                to: item.sender,
                id,
                result,
            };
            if commands.send(reply).await.is_err() {
                return;
            }
        }
    }
    if std::panic::catch_unwind(AssertUnwindSafe(move || drop(service))).is_err() {
        warn!(path = %path, "a service instance panicked when dropped");
    }
    let _ = commands
        .send(ServicesCommand::InstanceStopped { path, generation })
        .await;
}

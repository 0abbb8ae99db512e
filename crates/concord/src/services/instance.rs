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
    let mut service = factory(&ctx);
    while let Some(item) = mailbox.recv().await {
        let envelope: WireEnvelope = match decode(&item.payload) {
            Ok(e) => e,
            Err(_) => {
                undecodable.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        ctx.sender = Some(item.sender.clone());
        let handled =
            AssertUnwindSafe(service.handle(&mut ctx, &envelope.body, envelope.ask.is_some()))
                .catch_unwind()
                .await;
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
                service = factory(&ctx);
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
    drop(service);
    let _ = commands
        .send(ServicesCommand::InstanceStopped { path, generation })
        .await;
}

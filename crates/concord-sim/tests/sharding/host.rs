//! The sharding simulation's nodes: each hosts the real sharding layer — its
//! [`LayerHost`](concord::host::LayerHost), its effects (entity cells, asks, hand-over
//! state) and the [`ClusterSharding`] machine of one entity type — and runs [`Recorder`]
//! entities: each keeps the messages it received (its state on a handoff), now and then takes
//! a few ms of virtual time over one (so batches continue as tasks and stops wait for
//! them), and records its incarnation's interval against the simulation's clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use concord::host::{Clock, HostInput, ManualClock};
use concord::sharding::{Entity, EntityContext, ShardingCommand, ShardingEffects};
use concord_core::group::MachineGroup;
use concord_core::sharding::{ClusterSharding, ShardingSettings};
use concord_core::{ProtocolId, UniqueAddress};
use concord_sim::{ShardingExiting, SimHost, SimRuntime};

use super::SHARDS;

/// The entity type every node runs.
pub(crate) const TYPE: &str = "sim";

pub(crate) type Host = SimHost<ShardingEffects>;

/// What one node incarnation's entities recorded.
#[derive(Default)]
pub(crate) struct NodeLog {
    /// (entity, start, end) of every incarnation on this node, ms.
    pub(crate) intervals: Vec<(String, u64, Option<u64>)>,
    /// Live entities: entity → payloads received (with what it was handed over).
    pub(crate) live: BTreeMap<String, Vec<String>>,
}

/// Every node incarnation's log, by unique address.
pub(crate) type Logs = Arc<Mutex<BTreeMap<UniqueAddress, Arc<Mutex<NodeLog>>>>>;

/// A test entity; see the module docs.
pub(crate) struct Recorder {
    id: String,
    received: Vec<String>,
    log: Arc<Mutex<NodeLog>>,
    index: usize,
    clock: ManualClock,
    runtime: SimRuntime,
    slow_ms: u64,
}

impl Entity for Recorder {
    type Message = String;
    type Reply = usize;
    type State = Vec<String>;

    async fn handle(&mut self, _ctx: &mut EntityContext, payload: String) -> usize {
        // One message in 32 takes a while: the batch continues as a task.
        if payload.bytes().map(u64::from).sum::<u64>() % 32 == 0 {
            self.runtime.sleep(self.slow_ms).await;
        }
        self.received.push(payload.clone());
        if let Some(l) = self
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .live
            .get_mut(&self.id)
        {
            l.push(payload);
        }
        self.received.len()
    }

    fn hand_off(&mut self) -> Option<Vec<String>> {
        Some(std::mem::take(&mut self.received))
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let now = self.clock.now_ms();
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.live.remove(&self.id);
        if let Some(i) = log.intervals.get_mut(self.index) {
            i.2.get_or_insert(now);
        }
    }
}

/// The host of node `me`: the sharding machine of [`TYPE`] with `settings`, the real
/// sharding effects running [`Recorder`]s that log to `logs`.
pub(crate) fn node_host(
    me: &UniqueAddress,
    seed: u64,
    clock: &ManualClock,
    settings: ShardingSettings,
    logs: &Logs,
) -> Host {
    let runtime = SimRuntime::new(clock.clone());
    let log = Arc::new(Mutex::new(NodeLog::default()));
    logs.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(me.clone(), log.clone());
    let (entity_clock, entity_runtime) = (clock.clone(), runtime.clone());
    let slow_ms = 1 + seed % 10;
    let mailbox = settings.entity_mailbox_size;
    let effects = ShardingEffects::new(me.address.to_string()).entity_type(
        TYPE,
        move |id: &str, state: Option<Vec<String>>| {
            let received = state.unwrap_or_default();
            let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
            assert!(
                l.live.insert(id.to_string(), received.clone()).is_none(),
                "{id} started twice on one node"
            );
            l.intervals
                .push((id.to_string(), entity_clock.now_ms(), None));
            Recorder {
                id: id.to_string(),
                received,
                log: log.clone(),
                index: l.intervals.len() - 1,
                clock: entity_clock.clone(),
                runtime: entity_runtime.clone(),
                slow_ms,
            }
        },
        SHARDS,
        mailbox,
    );
    let mut machines = MachineGroup::new(ProtocolId::SHARDING);
    machines.insert(
        TYPE,
        ClusterSharding::new(settings, me.clone(), seed, clock.now_ms()),
    );
    let mut exiting = ShardingExiting::default();
    SimHost::new(machines, effects, me.clone(), clock.clone(), runtime)
        .with_exiting(move |h, now| exiting.step(h, now))
}

/// The machine of [`TYPE`] on a host.
pub(crate) fn machine(h: &Host) -> &ClusterSharding {
    h.host
        .machine()
        .get(TYPE)
        .expect("every node runs the entity type")
}

/// Tells `entity` `payload` through the node's real command path.
pub(crate) fn tell(h: &mut Host, entity: &str, payload: String) {
    let payload = concord::sharding::entity::encode(&payload).expect("a string encodes");
    h.host.handle(HostInput::Command(ShardingCommand::Tell {
        type_name: TYPE.into(),
        entity: entity.to_string(),
        payload,
        ask: None,
        trace: None,
    }));
}

//! [`ShardingEffects`]: the sharding layer's part of its host. For each entity type of the
//! node it runs the entities the machine starts (see [`super::cells`]), answers asks (every
//! answer, local or remote, goes through the machine), stores the machine's durable keys
//! and remembered entities, answers shard queries, and tells the coordinated shutdown when
//! the regions' and the coordinators' hand-overs are done.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use concord_core::cluster_metrics::names;
use concord_core::group::MachineGroup;
use concord_core::sharding::{shard_id, ClusterSharding, DropReason, ShardingEvent};
use futures_channel::oneshot;
use tracing::{error, warn};

use super::cells::{AfterBatch, Cells, RunContext};
use super::command::{AskFailure, AskTx, Completion, ShardingCommand, ShardingCompletion, StatsTx};
use super::entity::{erase_factory, Entity, ErasedFactory};
use super::extractor::Extractor;
use super::metrics::{record_sharding, ShardingGauges};
use super::remember_store::RememberStore;
use crate::ddata::durable::DurableStore;
use crate::host::{Effects, LayerEffects, MessageOf, TraceContext};
use crate::load::LocalLoad;
use crate::remote::log_limit::LogLimiter;

/// The effects' side of one entity type.
pub(crate) struct TypeEffects {
    extractor: Extractor,
    pub(crate) cells: Cells,
    asks: HashMap<u64, AskTx>,
    /// The trace contexts of traced asks in flight (tracing on), sent with their delivery
    /// ([`LayerEffects::trace_of`]); at most [`MAX_ASK_TRACES`].
    ask_traces: HashMap<u64, TraceContext>,
    next_ask: u64,
    stats_queries: HashMap<u64, StatsTx>,
    next_query: u64,
    graceful_done: bool,
    exiting_done: bool,
}

impl TypeEffects {
    /// Entities built by `factory` (none on a proxy), mailboxes of `mailbox` messages,
    /// shards chosen by `extractor`.
    pub(crate) fn new(
        factory: Option<ErasedFactory>,
        extractor: Extractor,
        mailbox: usize,
    ) -> Self {
        TypeEffects {
            extractor,
            cells: Cells::new(factory, mailbox),
            asks: HashMap::new(),
            ask_traces: HashMap::new(),
            next_ask: 1,
            stats_queries: HashMap::new(),
            next_query: 1,
            graceful_done: false,
            exiting_done: false,
        }
    }
}

/// Most trace contexts of asks in flight kept per entity type (beyond it they are all
/// forgotten at once, and those asks' later deliveries go untraced).
const MAX_ASK_TRACES: usize = 4_096;

/// A hand-over in progress: who waits, and the types not done yet.
type Waiting = Option<(oneshot::Sender<()>, BTreeSet<String>)>;

/// The layer's effects; see the module docs. The tokio runtime builds them in
/// [`super::Sharding`]; the simulator builds them with [`ShardingEffects::new`] and
/// [`ShardingEffects::entity_type`].
pub struct ShardingEffects {
    types: BTreeMap<String, TypeEffects>,
    store: Option<Arc<DurableStore>>,
    remember: Option<Arc<RememberStore>>,
    node_label: String,
    graceful: Waiting,
    exiting: Waiting,
    warnings: LogLimiter,
    /// Where this node's entity counts and queues are reported for its metrics samples.
    local_load: LocalLoad,
    /// Every member's metrics, read on each tick for the machines of types with load-aware
    /// allocation (`None`: their loads stay unknown, as with the least-shard strategy).
    #[cfg(feature = "runtime")]
    cluster_load: Option<crate::load::ClusterLoad>,
}

impl ShardingEffects {
    /// Effects without entity types (add them with [`ShardingEffects::entity_type`]) nor
    /// stores (durable keys and remembered entities are then not written), on the node
    /// labelled `node_label` (its address, for metrics).
    pub fn new(node_label: impl Into<String>) -> Self {
        Self::with_types(BTreeMap::new(), None, None, node_label.into())
    }

    /// Hosts entities of type `type_name`: `factory` builds one from its id and the state
    /// it handed over; entity ids map to shards with [`shard_id`] over `number_of_shards`;
    /// each entity's mailbox holds `mailbox` messages. The node's machine group must hold
    /// a [`ClusterSharding`] machine for the same type.
    pub fn entity_type<E, F>(
        mut self,
        type_name: &str,
        factory: F,
        number_of_shards: u32,
        mailbox: usize,
    ) -> Self
    where
        E: Entity,
        F: Fn(&str, Option<E::State>) -> E + Send + Sync + 'static,
    {
        let extractor: Extractor =
            Arc::new(move |id: &str| shard_id(&id.to_string(), number_of_shards));
        self.types.insert(
            type_name.to_string(),
            TypeEffects::new(Some(erase_factory::<E, F>(factory)), extractor, mailbox),
        );
        self
    }

    /// Effects for `types`, writing durable keys to `store` and remembered entities to
    /// `remember`, on the node labelled `node_label`.
    pub(crate) fn with_types(
        types: BTreeMap<String, TypeEffects>,
        store: Option<Arc<DurableStore>>,
        remember: Option<Arc<RememberStore>>,
        node_label: String,
    ) -> Self {
        ShardingEffects {
            types,
            store,
            remember,
            node_label,
            graceful: None,
            exiting: None,
            warnings: LogLimiter::new(Duration::from_secs(10)),
            local_load: LocalLoad::new(),
            #[cfg(feature = "runtime")]
            cluster_load: None,
        }
    }

    /// Reports entity counts, region buffers and mailbox depths to `load` (the node's, for
    /// its cluster-metrics samples) on every tick.
    pub fn reporting_load(mut self, load: LocalLoad) -> Self {
        self.local_load = load;
        self
    }

    /// Feeds the machines of entity types with load-aware allocation every member's load
    /// from `load` (`1 − capacity` by each type's selector) on every tick.
    #[cfg(feature = "runtime")]
    pub fn reading_cluster_load(mut self, load: crate::load::ClusterLoad) -> Self {
        self.cluster_load = Some(load);
        self
    }

    /// Gives each load-aware machine the members' loads by its selector (each selector's
    /// loads computed once per tick).
    #[cfg(feature = "runtime")]
    fn feed_loads(&self, machines: &mut MachineGroup<ClusterSharding>) {
        use concord_core::cluster_metrics::CapacitySelector;
        use concord_core::UniqueAddress;
        let Some(cluster) = &self.cluster_load else {
            return;
        };
        let mut by_selector: Vec<(CapacitySelector, BTreeMap<UniqueAddress, f64>)> = Vec::new();
        for (name, m) in machines.iter_mut() {
            let Some(selector) = m.settings().load_aware_allocation.map(|l| l.selector) else {
                continue;
            };
            let i = match by_selector.iter().position(|(s, _)| *s == selector) {
                Some(i) => i,
                None => {
                    let loads = cluster
                        .capacity(selector)
                        .into_iter()
                        .map(|(node, capacity)| (node, 1.0 - capacity))
                        .collect();
                    by_selector.push((selector, loads));
                    by_selector.len() - 1
                }
            };
            if let Some((_, loads)) = by_selector.get(i) {
                m.set_node_loads(loads);
                metrics::gauge!("concord_sharding_load_aware_nodes", "node" => self.node_label.clone(), "type" => name.to_string())
                    .set(loads.len() as f64);
            }
        }
    }

    /// Tells the machine of `type_name` what a batch ended with.
    fn after_batch(machine: &mut ClusterSharding, now: u64, entity: &str, after: AfterBatch) {
        match after {
            AfterBatch::Nothing => {}
            AfterBatch::Passivate(shard) => machine.passivate(now, &shard, entity),
            AfterBatch::Stopped(shard, state) => machine.entity_stopped(now, &shard, entity, state),
        }
    }

    /// One type's hand-over of `which` is done.
    fn done(waiting: &mut Waiting, type_name: &str) {
        if let Some((_, remaining)) = waiting {
            remaining.remove(type_name);
            if remaining.is_empty() {
                if let Some((done, _)) = waiting.take() {
                    let _ = done.send(());
                }
            }
        }
    }

    fn tell(
        &mut self,
        fx: &mut Effects<'_, Self>,
        type_name: &str,
        entity: String,
        payload: Vec<u8>,
        ask: Option<AskTx>,
        trace: Option<TraceContext>,
    ) {
        fx.follow_trace(trace);
        let out = fx.trace_context();
        let (Some(t), Some(m)) = (self.types.get_mut(type_name), fx.machine.get_mut(type_name))
        else {
            if let Some(tx) = ask {
                let _ = tx.send(Err(AskFailure::Failed(format!(
                    "entity type `{type_name}` is not started on this node"
                ))));
            }
            return;
        };
        let shard = (t.extractor)(&entity);
        let ask = ask.map(|tx| {
            let id = t.next_ask;
            t.next_ask = t.next_ask.wrapping_add(1).max(1);
            t.asks.insert(id, tx);
            if let Some(c) = out {
                if t.ask_traces.len() >= MAX_ASK_TRACES {
                    t.ask_traces.clear();
                }
                t.ask_traces.insert(id, c);
            }
            id
        });
        m.tell(fx.now_ms, shard, entity, payload, ask);
    }
}

impl LayerEffects for ShardingEffects {
    type Machine = MachineGroup<ClusterSharding>;
    type Command = ShardingCommand;
    type Completion = ShardingCompletion;

    fn name(&self) -> &'static str {
        "sharding"
    }

    /// The delivery of a traced ask this node accepted carries the ask's trace, also when
    /// it leaves in a later turn (once the shard's home is known).
    fn trace_of(&self, message: &MessageOf<Self>) -> Option<TraceContext> {
        let concord_core::sharding::ShardingBody::Deliver {
            ask: Some(ask),
            origin: None,
            ..
        } = &message.body
        else {
            return None;
        };
        self.types
            .get(message.type_name.as_str())?
            .ask_traces
            .get(ask)
            .copied()
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: ShardingCommand) {
        let now = fx.now_ms;
        match command {
            ShardingCommand::Tell {
                type_name,
                entity,
                payload,
                ask,
                trace,
            } => self.tell(fx, &type_name, entity, payload, ask, trace),
            ShardingCommand::LocalShards { type_name, reply } => {
                let shards = fx
                    .machine
                    .get(&type_name)
                    .map(|m| m.local_shards())
                    .unwrap_or_default();
                let _ = reply.send(shards);
            }
            ShardingCommand::QueryStats { type_name, reply } => {
                if let (Some(t), Some(m)) = (
                    self.types.get_mut(&type_name),
                    fx.machine.get_mut(&type_name),
                ) {
                    let id = t.next_query;
                    t.next_query += 1;
                    t.stats_queries.insert(id, reply);
                    m.query_cluster_stats(now, id);
                }
            }
            ShardingCommand::GracefulShutdown { done } => {
                let remaining = self
                    .types
                    .iter()
                    .filter(|(_, t)| !t.graceful_done)
                    .map(|(n, _)| n.clone())
                    .collect::<BTreeSet<_>>();
                for (_, m) in fx.machine.iter_mut() {
                    m.graceful_shutdown(now);
                }
                if remaining.is_empty() {
                    let _ = done.send(());
                } else {
                    self.graceful = Some((done, remaining));
                }
            }
            ShardingCommand::StopHosting => {
                for (_, m) in fx.machine.iter_mut() {
                    m.stop_hosting(now);
                }
            }
            ShardingCommand::SelfExiting { done } => {
                let remaining = self
                    .types
                    .iter()
                    .filter(|(_, t)| !t.exiting_done)
                    .map(|(n, _)| n.clone())
                    .collect::<BTreeSet<_>>();
                for (_, m) in fx.machine.iter_mut() {
                    m.self_exiting(now);
                }
                if remaining.is_empty() {
                    let _ = done.send(());
                } else {
                    self.exiting = Some((done, remaining));
                }
            }
        }
    }

    fn completion(&mut self, fx: &mut Effects<'_, Self>, completion: ShardingCompletion) {
        let now = fx.now_ms;
        match completion {
            ShardingCompletion(Completion::BatchDone {
                type_name,
                entity,
                generation,
                outcome,
            }) => {
                let (machine, env) = fx.parts();
                let (Some(t), Some(m)) =
                    (self.types.get_mut(&type_name), machine.get_mut(&type_name))
                else {
                    return;
                };
                let ctx = RunContext {
                    type_name: &type_name,
                    node: &env.node,
                    completions: &env.completions,
                    spawner: env.spawner.as_ref(),
                };
                let after = t.cells.batch_done(&entity, generation, outcome, &ctx);
                Self::after_batch(m, now, &entity, after);
            }
            ShardingCompletion(Completion::Reply {
                type_name,
                to,
                ask,
                result,
            }) => {
                if let Some(m) = fx.machine.get_mut(&type_name) {
                    m.reply(now, &to, ask, result);
                }
            }
            ShardingCompletion(Completion::RememberLoaded {
                type_name,
                shard,
                ids,
            }) => {
                if let Some(m) = fx.machine.get_mut(&type_name) {
                    m.remember_loaded(now, &shard, ids);
                }
            }
            ShardingCompletion(Completion::RememberWritten { type_name, shard }) => {
                if let Some(m) = fx.machine.get_mut(&type_name) {
                    m.remember_written(now, &shard);
                }
            }
        }
    }

    fn event(&mut self, fx: &mut Effects<'_, Self>, (name, event): (String, ShardingEvent)) {
        let now = fx.now_ms;
        let span = fx.trace_span().cloned();
        let (machine, env) = fx.parts();
        let (Some(t), Some(m)) = (self.types.get_mut(&name), machine.get_mut(&name)) else {
            return;
        };
        let ctx = RunContext {
            type_name: &name,
            node: &env.node,
            completions: &env.completions,
            spawner: env.spawner.as_ref(),
        };
        match event {
            ShardingEvent::StartEntity {
                shard,
                entity,
                state,
            } => t.cells.start(&shard, &entity, state.as_deref()),
            ShardingEvent::Deliver {
                entity,
                payload,
                reply_to,
                ..
            } => {
                let after = t.cells.deliver(&entity, payload, reply_to, span, &ctx);
                Self::after_batch(m, now, &entity, after);
            }
            ShardingEvent::StopEntity { entity, reason, .. } => {
                let after = t.cells.stop(&entity, reason, &ctx);
                Self::after_batch(m, now, &entity, after);
            }
            ShardingEvent::KillEntity { shard, entity } => {
                t.cells.kill(&entity);
                m.entity_stopped(now, &shard, &entity, None);
            }
            ShardingEvent::Reply { ask, result } => {
                t.ask_traces.remove(&ask);
                if let Some(tx) = t.asks.remove(&ask) {
                    let _ = tx.send(result.map_err(AskFailure::Failed));
                }
            }
            ShardingEvent::Dropped { ask, reason } => {
                if let Some(a) = ask {
                    t.ask_traces.remove(&a);
                }
                if let Some(tx) = ask.and_then(|a| t.asks.remove(&a)) {
                    let _ = tx.send(Err(AskFailure::Dropped(reason)));
                }
                if reason == DropReason::BufferFull {
                    if let Some(suppressed) = self.warnings.allow("buffer-full") {
                        warn!(type_name = %name, suppressed, "sharding: the region's buffer is full; a message was dropped");
                    }
                }
            }
            ShardingEvent::RememberLoad { shard } => {
                let store = self.remember.clone();
                let type_name = name.clone();
                let completions = env.completions.clone();
                env.spawner.spawn_blocking(Box::new(move || {
                    let ids = match store.map(|s| s.load(&type_name, &shard)) {
                        Some(Ok(ids)) => ids,
                        Some(Err(e)) => {
                            error!(error = %e, "remembered entities cannot be read");
                            Vec::new()
                        }
                        None => Vec::new(),
                    };
                    completions.send(ShardingCompletion(Completion::RememberLoaded {
                        type_name,
                        shard,
                        ids,
                    }));
                }));
            }
            ShardingEvent::RememberUpdate {
                shard,
                started,
                stopped,
            } => {
                let store = self.remember.clone();
                let type_name = name.clone();
                let completions = env.completions.clone();
                env.spawner.spawn_blocking(Box::new(move || {
                    if let Some(Err(e)) =
                        store.map(|s| s.update(&type_name, &shard, &started, &stopped))
                    {
                        error!(error = %e, "remembered entities cannot be written");
                    }
                    completions.send(ShardingCompletion(Completion::RememberWritten {
                        type_name,
                        shard,
                    }));
                }));
            }
            ShardingEvent::Store { key, envelope } => {
                if let Some(store) = &self.store {
                    if let Err(e) = store.store(&key, &envelope) {
                        if let Some(suppressed) = self.warnings.allow("store") {
                            error!(error = %e, suppressed, "sharding: a durable key was not stored");
                        }
                    }
                }
            }
            ShardingEvent::GracefulShutdownDone => {
                t.graceful_done = true;
                Self::done(&mut self.graceful, &name);
            }
            ShardingEvent::ExitingDone => {
                t.exiting_done = true;
                Self::done(&mut self.exiting, &name);
            }
            ShardingEvent::ClusterShardingStats { request, regions } => {
                if let Some(tx) = t.stats_queries.remove(&request) {
                    let _ = tx.send(regions);
                }
            }
        }
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        #[cfg(feature = "runtime")]
        self.feed_loads(fx.machine);
        let backlog = fx.backlog;
        for (name, t) in self.types.iter_mut() {
            t.asks.retain(|_, tx| !tx.is_canceled());
            let asks = &t.asks;
            t.ask_traces.retain(|id, _| asks.contains_key(id));
            t.stats_queries.retain(|_, tx| !tx.is_canceled());
            let Some(m) = fx.machine.get(name) else {
                continue;
            };
            let local = m.local_shards();
            let gauges = ShardingGauges {
                shards: local.len(),
                entities: local.iter().map(|(_, n)| *n as usize).sum(),
                handoffs_in_progress: m.handoffs_in_progress(),
                buffered: m.buffered() + t.cells.mailboxed(),
                backlogged: backlog.queued,
                coordinator: m.is_coordinator(),
                mailbox_dropped: t.cells.dropped,
            };
            record_sharding(&self.node_label, name, &gauges, m.stats());
            let source = format!("sharding/{name}");
            self.local_load
                .set(names::ENTITIES, &source, gauges.entities as f64);
            self.local_load
                .set(names::REGION_BUFFERED, &source, m.buffered() as f64);
            self.local_load
                .set(names::MAILBOX_DEPTH, &source, t.cells.mailboxed() as f64);
        }
        if backlog.dropped > 0 {
            if let Some(suppressed) = self.warnings.allow("backlog") {
                warn!(
                    dropped = backlog.dropped,
                    suppressed, "sharding: a peer's backlog was full; messages to it were dropped"
                );
            }
        }
    }

    fn stopped(&mut self, _machine: &mut MachineGroup<ClusterSharding>) {
        // The node is gone: every entity stops with it.
        for t in self.types.values_mut() {
            t.cells.abort_all();
        }
    }
}

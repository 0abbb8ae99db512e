//! Cluster Sharding: stateful entities addressed by id, spread over the cluster in shards,
//! **at most one live incarnation of each**, moved between nodes as they join and leave
//! with an order-preserving, lossless handoff (spec: `cluster-sharding-concepts.md`, the
//! *Handoff* section of `cluster-specification-original.md`; Akka's `ShardRegion`,
//! `Shard` and `ShardCoordinator`; research notes §1).
//!
//! [`ClusterSharding`] is the sans-IO machine of one entity type on one node. It holds:
//!
//! - the node's **`ShardRegion`** (`region`): it maps an entity to its shard's home,
//!   asks the coordinator for unknown homes and buffers meanwhile (Scenarios 1 and 2 of the
//!   spec), then sends directly; a proxy-only region hosts nothing. It owns its state,
//!   borrows a `RegionContext` for each step and reaches the shards hosted here only
//!   through the machine (`region_shards`);
//! - the **`Shard`s** it hosts (`hosted_shards`, one `shard` each): entities created on
//!   their first message, passivated when idle or over the active-entity limit,
//!   optionally remembered, handed off in order. They own their state and methods,
//!   borrow a `ShardContext` for each step, and reach the region only through it;
//! - the **`ShardCoordinator`** (`coordinator`), active only on the node where its
//!   cluster singleton runs (the oldest member with the role; the machine embeds the
//!   singleton manager, so the coordinator moves in order and never runs twice): it
//!   allocates shards with a [`ShardAllocationStrategy`], rebalances them, and persists
//!   its [`CoordinatorState`] in Distributed Data with `WriteMajorityPlus` /
//!   `ReadMajorityPlus` — in the machine's own [`Replicator`] (Akka runs one replicator
//!   per sharding role, too), which also keeps the remembered entities.
//!
//! # Handoff (★ beyond Akka)
//!
//! Akka stops a shard on its old home while every region buffers, then starts it afresh on
//! the new home and **drops the messages the old home's region had buffered** (to avoid
//! reordering). Concord follows the original spec's design instead (options 2b, 3b and 4a
//! of its "Graceful Handoff"): moving shard A from N1 to N2,
//!
//! 1. the coordinator sends `HostShard { handoff_from: N1 }` to N2, which prepares A and
//!    holds every message for it; N2 answers `ShardStarted`;
//! 2. the coordinator sends `HandOff { to: N2 }` to N1 (*migration transition*): N1 stops
//!    A's entities — each finishes the messages it already has, then hands its state over
//!    (`EntityHandOver`) — and forwards every message for A that arrives from now on to
//!    N2, in arrival order, each with its origin; when all entities have stopped it sends
//!    `HandOverDone` to N2 (which starts the entities with their states and delivers what
//!    N1 forwarded) and `ShardStopped { handed_to: N2 }` to the coordinator;
//! 3. the coordinator persists A → N2 and sends `BeginHandOff { from: N1, to: N2 }` to
//!    every region (*update transition*). A region switches to N2 and sends its
//!    `BeginHandOffAck` to **N1**, on the same ordered link as everything it sent N1 before;
//!    N1 forwards it to N2 behind those messages. N2 keeps a buffer per sending node for
//!    messages sent to it directly, and opens it when that node's acknowledgement arrives
//!    through N1.
//!
//! **Guarantee**: for any sender node and entity, messages accepted by the sender's region
//! are delivered once and in send order across a rebalance or a graceful leave, as long as
//! no node involved crashes. (A crash loses what the crashed node held, as in Akka; a
//! coordinator fail-over during a handoff delays the buffered messages up to
//! `handoff-timeout` but does not lose or reorder them.) Buffers are bounded by
//! `buffer-size` for the whole region; beyond it messages are dropped and counted, and an
//! ask gets an error at once.
//!
//! # Crash
//!
//! A region whose node is removed (after the split brain resolver downed it) loses its
//! shards once `removal-margin` has passed — the time the downed node needs to notice and
//! stop its entities; a node that sees itself Down stops all its entities at once. Shards
//! with known homes keep serving while the coordinator fails over.

pub mod allocation;
mod api;
mod coordinator;
mod coordinator_context;
mod coordinator_persistence;
mod coordinator_regions;
pub mod coordinator_state;
mod ddata_requests;
mod dispatch;
pub mod extractor;
mod handoff;
mod hosted_shards;
mod ids;
pub mod load_aware_allocation;
pub mod message;
mod outbox;
mod rebalance;
mod rebalance_worker;
mod recency_list;
mod region;
mod region_context;
mod region_membership;
mod region_queries;
mod region_shards;
mod remember;
pub mod settings;
mod shard;
mod shard_context;
mod shard_entities;
mod shard_remember;
mod timer;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::address::UniqueAddress;
use crate::ddata::replicator::DataTypeRegistry;
use crate::ddata::{GSet, LWWRegister, ORSet, Replicator, ReplicatorSettings};
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{MembershipChange, ProtocolId, ProtocolMachine, Transmit};
use crate::singleton::{ClusterSingleton, SingletonSettings};
use crate::timers::TimerTable;

pub use allocation::{
    compare_app_versions, LeastShardAllocationStrategy, RegionEntry, ShardAllocationStrategy,
};
pub use api::{DropReason, ShardingEvent, ShardingStats, StopReason};
pub use coordinator_state::{CoordinatorEvent, CoordinatorState, StateError};
pub use extractor::{shard_id, shard_number};
pub use ids::{
    EntityId, ShardId, MAX_ENTITY_ID_BYTES, MAX_SHARDS, MAX_SHARD_ID_BYTES, SHARD_HOMES_BATCH,
};
pub use load_aware_allocation::LoadAwareShardAllocationStrategy;
pub use message::{Delivery, ShardingBody, ShardingMessage};
pub use settings::{
    EntityRecoveryStrategy, LeastShardAllocationSettings, LoadAwareAllocationSettings,
    RememberEntitiesStore, ShardingSettings,
};
use timer::{ShardingTimer, HOUSEKEEPING_MS};

/// The sharding machine of one entity type on one node; see the module docs.
pub struct ClusterSharding {
    settings: ShardingSettings,
    self_node: UniqueAddress,
    view: MembershipView,
    /// The `ShardRegion`: it owns its state, homes, buffers and membership memory.
    region: region::Region,
    /// The shards hosted here, with their entities and active-entity LRU.
    shards: hosted_shards::HostedShards,
    /// The coordinator, while its singleton runs here (it owns the allocation strategy).
    coordinator: Option<coordinator::Coordinator>,
    /// The allocation strategy while no coordinator runs here.
    strategy: Option<Box<dyn ShardAllocationStrategy>>,
    singleton: ClusterSingleton,
    replicator: Replicator,
    /// Open requests of the replicator (the coordinator's and the shards').
    ddata: ddata_requests::DdataRequests,
    /// Transmits, events and timers for the host.
    out: outbox::ShardingOutputs,
    /// Messages to this node itself, handled before the input that caused them returns.
    loopback: VecDeque<ShardingBody>,
    stats: ShardingStats,
}

impl ClusterSharding {
    /// The machine for `settings.type_name` on `self_node`, with the
    /// [`LeastShardAllocationStrategy`], or the [`LoadAwareShardAllocationStrategy`] when
    /// `settings.load_aware_allocation` is set; `seed` seeds its random choices; its timers
    /// start at `now_ms`.
    pub fn new(
        settings: ShardingSettings,
        self_node: UniqueAddress,
        seed: u64,
        now_ms: u64,
    ) -> Self {
        let least = settings.least_shard_allocation;
        let strategy: Box<dyn ShardAllocationStrategy> = match settings.load_aware_allocation {
            Some(load) => Box::new(LoadAwareShardAllocationStrategy::new(least, load)),
            None => Box::new(LeastShardAllocationStrategy::new(least)),
        };
        Self::with_strategy(settings, self_node, strategy, seed, now_ms)
    }

    /// As [`ClusterSharding::new`] with another allocation strategy.
    pub fn with_strategy(
        settings: ShardingSettings,
        self_node: UniqueAddress,
        strategy: Box<dyn ShardAllocationStrategy>,
        seed: u64,
        now_ms: u64,
    ) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let singleton = ClusterSingleton::new(
            SingletonSettings {
                name: settings.coordinator_singleton_name(),
                role: settings.role.clone(),
                removal_margin_ms: settings.removal_margin_ms,
                ..Default::default()
            },
            self_node.clone(),
            rng.random(),
        );
        let replicator = Replicator::new(
            Self::replicator_settings(&settings),
            self_node.clone(),
            Self::data_types(),
            rng.random(),
            now_ms,
        );
        let mut timers = TimerTable::new();
        timers.set(ShardingTimer::Housekeeping, now_ms + HOUSEKEEPING_MS);
        if let Some(idle) = settings.passivation_idle_timeout_ms {
            if !settings.remember_entities {
                timers.set(ShardingTimer::Passivation, now_ms + (idle / 2).max(1));
            }
        }
        ClusterSharding {
            view: MembershipView::empty(self_node.clone()),
            region: region::Region::new(),
            shards: hosted_shards::HostedShards::default(),
            coordinator: None,
            strategy: Some(strategy),
            singleton,
            replicator,
            ddata: ddata_requests::DdataRequests::new(),
            out: Outputs {
                timers,
                ..Outputs::new()
            },
            loopback: VecDeque::new(),
            stats: ShardingStats::default(),
            settings,
            self_node,
        }
    }

    /// The settings of the machine's replicator: only among members with the role, the
    /// oldest asked first, `shard-*` keys (remembered entities and shards) durable, as
    /// Akka's sharding replicator.
    pub fn replicator_settings(settings: &ShardingSettings) -> ReplicatorSettings {
        ReplicatorSettings {
            role: settings.role.clone(),
            prefer_oldest: true,
            durable_keys: vec!["shard-*".into()],
            ..Default::default()
        }
    }

    /// The data types the machine's replicator holds.
    fn data_types() -> DataTypeRegistry {
        let mut r = DataTypeRegistry::empty();
        r.register::<LWWRegister<CoordinatorState>>();
        r.register::<GSet<String>>();
        r.register::<ORSet<String>>();
        r
    }

    /// The latest load of each node, 0.0 (idle) … 1.0 (saturated): handed to the
    /// allocation strategy, wherever it is now (the coordinator's when it runs here), with
    /// [`ShardAllocationStrategy::set_node_loads`]. The runtime calls it every second when
    /// `settings.load_aware_allocation` is set; other strategies ignore it.
    pub fn set_node_loads(&mut self, loads: &std::collections::BTreeMap<UniqueAddress, f64>) {
        if let Some(c) = self.coordinator.as_mut() {
            c.strategy.set_node_loads(loads);
        }
        if let Some(s) = self.strategy.as_mut() {
            s.set_node_loads(loads);
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ShardingSettings {
        &self.settings
    }

    /// This node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// The counters.
    pub fn stats(&self) -> &ShardingStats {
        &self.stats
    }

    /// The machine's replicator (its keys, for tools and tests).
    pub fn replicator(&self) -> &Replicator {
        &self.replicator
    }

    /// True if this node's coordinator is active (it runs the coordinator singleton and
    /// has loaded the state).
    pub fn is_coordinator(&self) -> bool {
        self.coordinator.as_ref().is_some_and(|c| c.is_active())
    }

    /// The coordinator's state, when this node runs the active coordinator.
    pub fn coordinator_state(&self) -> Option<&CoordinatorState> {
        self.coordinator
            .as_ref()
            .filter(|c| c.is_active())
            .map(|c| c.state())
    }

    /// The state of this node's coordinator singleton manager.
    pub fn coordinator_singleton_state(&self) -> crate::singleton::ManagerState {
        self.singleton.state()
    }

    /// The node this region is registered with (the coordinator's), if any.
    pub fn registered_coordinator(&self) -> Option<&UniqueAddress> {
        self.region.coordinator.as_ref()
    }

    /// Messages in the region's buffers, count.
    pub fn buffered(&self) -> usize {
        self.region.buffered()
    }

    /// The shards hosted here (active, receiving or handing off) with their numbers of
    /// entities, by shard id.
    pub fn local_shards(&self) -> Vec<(ShardId, u32)> {
        self.shards.local_shards()
    }

    /// The entities alive here (started, not yet stopped) as (shard, entity).
    pub fn local_entities(&self) -> Vec<(ShardId, EntityId)> {
        self.shards.local_entities()
    }

    /// Handoffs in progress on this node (as old or new home), count.
    pub fn handoffs_in_progress(&self) -> usize {
        self.shards.handoffs_in_progress()
    }

    /// The home this region has cached for `shard`.
    pub fn cached_home(&self, shard: &str) -> Option<&UniqueAddress> {
        self.region.homes.get(shard)
    }

    /// Loads a durable key of the machine's replicator stored earlier (before anything
    /// else happens).
    ///
    /// # Errors
    /// The value does not decode.
    pub fn load_durable(
        &mut self,
        key: &str,
        envelope: &crate::ddata::replicator::SerializedEnvelope,
    ) -> Result<(), crate::ddata::replicator::DataError> {
        self.replicator.load_durable(key, envelope)
    }

    // ---- plumbing ----

    /// Sends `body` to `to` (handled locally, after the current input, if it is this node).
    fn send(&mut self, to: &UniqueAddress, body: ShardingBody) {
        outbox::send(
            &mut self.out,
            &mut self.loopback,
            &self.settings.type_name,
            &self.self_node,
            to,
            body,
        );
    }

    /// True if `node` is a member this node can talk sharding with (in the view, not
    /// Removed).
    fn is_member(&self, node: &UniqueAddress) -> bool {
        self.view.is_member(node)
    }

    // ---- inputs from the runtime ----

    /// Sends `payload` to `entity` in `shard` (the runtime computed the shard with its
    /// message extractor); `ask` is set when a reply is awaited (it comes back as
    /// [`ShardingEvent::Reply`], or [`ShardingEvent::Dropped`]).
    pub fn tell(
        &mut self,
        now_ms: u64,
        shard: ShardId,
        entity: EntityId,
        payload: Vec<u8>,
        ask: Option<u64>,
    ) {
        if entity.len() > MAX_ENTITY_ID_BYTES || shard.len() > MAX_SHARD_ID_BYTES {
            self.stats.dropped_other += 1;
            self.out.events.push_back(ShardingEvent::Dropped {
                ask,
                reason: DropReason::InvalidId,
            });
            return;
        }
        let origin = self.self_node.clone();
        self.region_route(
            now_ms,
            shard,
            Delivery {
                entity,
                payload,
                origin,
                ask,
            },
        );
        self.settle(now_ms);
    }

    /// The entity answers an ask of `to` (the `reply_to` of its [`ShardingEvent::Deliver`]).
    pub fn reply(
        &mut self,
        now_ms: u64,
        to: &UniqueAddress,
        ask: u64,
        result: Result<Vec<u8>, String>,
    ) {
        self.send(to, ShardingBody::Reply { ask, result });
        self.settle(now_ms);
    }

    /// The entity stopped (after [`ShardingEvent::StopEntity`] or
    /// [`ShardingEvent::KillEntity`], or by itself); `state` is what it hands over when it
    /// was stopped for a handoff.
    pub fn entity_stopped(
        &mut self,
        now_ms: u64,
        shard: &str,
        entity: &str,
        state: Option<Vec<u8>>,
    ) {
        self.with_shards(|s, ctx| s.entity_stopped(ctx, now_ms, shard, entity, state));
        self.settle(now_ms);
    }

    /// The entity asks to be passivated (Akka's `Passivate`): it is stopped; messages that
    /// arrive meanwhile are buffered and start it again.
    pub fn passivate(&mut self, now_ms: u64, shard: &str, entity: &str) {
        self.with_shards(|s, ctx| s.passivate(ctx, now_ms, shard, entity));
        self.settle(now_ms);
    }

    /// The answer to [`ShardingEvent::RememberLoad`].
    pub fn remember_loaded(&mut self, now_ms: u64, shard: &str, entities: Vec<EntityId>) {
        self.with_shards(|s, ctx| s.remember_ids_loaded(ctx, now_ms, shard, entities));
        self.settle(now_ms);
    }

    /// The answer to [`ShardingEvent::RememberUpdate`].
    pub fn remember_written(&mut self, now_ms: u64, shard: &str) {
        self.with_shards(|s, ctx| s.remember_write_done(ctx, now_ms, shard));
        self.settle(now_ms);
    }

    /// Coordinated shutdown's `cluster-sharding-shutdown-region` phase: hand every shard
    /// over to other regions; [`ShardingEvent::GracefulShutdownDone`] follows.
    pub fn graceful_shutdown(&mut self, now_ms: u64) {
        self.region_graceful_shutdown(now_ms);
        self.settle(now_ms);
    }

    /// The node stops hosting entities (its graceful shutdown could not hand everything
    /// over in time, or it is about to stop): every entity here is stopped now, handing
    /// nothing over, and none starts here again. Other regions get the shards after this
    /// node is removed and `removal-margin` has passed.
    pub fn stop_hosting(&mut self, now_ms: u64) {
        if !self.region.membership.stopped_hosting {
            tracing::warn!(type_name = %self.settings.type_name, entities = self.shards.entity_count(), "stopping every entity here without handing them over");
        }
        self.region.membership.stopped_hosting = true;
        self.with_shards(|s, ctx| s.stop_all_entities(ctx));
        self.settle(now_ms);
    }

    /// Coordinated shutdown's `cluster-exiting` phase: hand the coordinator singleton
    /// over; [`ShardingEvent::ExitingDone`] follows.
    pub fn self_exiting(&mut self, now_ms: u64) {
        self.singleton.self_exiting(now_ms);
        self.settle(now_ms);
    }

    /// Asks every region for its shards and their entities (Akka's
    /// `GetClusterShardingStats`); answered by [`ShardingEvent::ClusterShardingStats`]
    /// within `shard-region-query-timeout`.
    pub fn query_cluster_stats(&mut self, now_ms: u64, request: u64) {
        self.with_region(|r, ctx| r.queries.start(ctx, now_ms, request));
        self.settle(now_ms);
    }
}

impl ProtocolMachine for ClusterSharding {
    type Message = ShardingMessage;
    type Event = ShardingEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::SHARDING
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: ShardingMessage) {
        if message.type_name != self.settings.type_name {
            return;
        }
        // Only members talk sharding (the replicator and the singleton check the same).
        // Only members talk sharding. A node removed a moment ago (it left, or was downed)
        // may still have messages for entities in flight: those are accepted for a while.
        let recently_removed =
            self.region
                .membership
                .recently_removed(from, self.settings.handoff_timeout_ms, now_ms)
                && message.body.is_data();
        if !self.is_member(from) && !recently_removed {
            self.stats.invalid_messages += 1;
            return;
        }
        self.dispatch(now_ms, from, message.body);
        self.settle(now_ms);
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, change: MembershipChange) {
        self.region
            .membership
            .view_changed(&self.settings, &self.view, view, now_ms);
        self.view = view.clone();
        self.replicator.handle_membership(now_ms, view, change);
        self.singleton.handle_membership(now_ms, view, change);
        self.region_membership(now_ms);
        self.with_coordinator(|c, ctx| c.membership_changed(ctx, now_ms));
        self.settle(now_ms);
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        if self.replicator.poll_timeout().is_some_and(|t| t <= now_ms) {
            self.replicator.handle_timeout(now_ms);
        }
        if self.singleton.poll_timeout().is_some_and(|t| t <= now_ms) {
            self.singleton.handle_timeout(now_ms);
        }
        for t in self.out.timers.expired(now_ms) {
            match t {
                ShardingTimer::Register => self.with_region(|r, ctx| r.register(ctx, now_ms)),
                ShardingTimer::RetryShardHomes => {
                    self.with_region(|r, ctx| r.retry_shard_homes(ctx, now_ms))
                }
                ShardingTimer::Rebalance => {
                    self.with_coordinator(|c, ctx| c.rebalance_tick(ctx, now_ms))
                }
                ShardingTimer::RegionTerminated(r) => {
                    self.with_coordinator(|c, ctx| c.region_terminated(ctx, now_ms, r))
                }
                ShardingTimer::Housekeeping => {
                    self.region_housekeeping(now_ms);
                    self.with_shards(|s, ctx| s.handoff_housekeeping(ctx, now_ms));
                    self.with_coordinator(|c, ctx| c.housekeeping(ctx, now_ms));
                    self.out
                        .timers
                        .set(ShardingTimer::Housekeeping, now_ms + HOUSEKEEPING_MS);
                }
                ShardingTimer::Passivation => {
                    self.with_shards(|s, ctx| s.passivate_idle(ctx, now_ms))
                }
                ShardingTimer::Recovery => {
                    self.with_shards(|s, ctx| s.remember_recovery_tick(ctx, now_ms))
                }
            }
        }
        self.settle(now_ms);
    }

    fn poll_transmit(&mut self) -> Option<Transmit<ShardingMessage>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<ShardingEvent> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        [
            self.out.timers.next_deadline(),
            self.replicator.poll_timeout(),
            self.singleton.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

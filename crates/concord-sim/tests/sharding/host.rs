//! The sharding simulation's stand-in for the runtime: runs one node's sharding machine,
//! keeps each live entity as the list of messages it received (its state on handoff), stops
//! entities after a few ms, and records every incarnation's interval.

use std::collections::BTreeMap;

use concord_core::sharding::{
    shard_id, ClusterSharding, ShardingEvent, ShardingMessage, ShardingSettings, StopReason,
};
use concord_core::{
    MembershipChange, MembershipView, ProtocolId, ProtocolMachine, Transmit, UniqueAddress,
};

use super::SHARDS;

/// The test's stand-in for the runtime around one node's sharding machine.
pub(crate) struct ShardingHost {
    pub(crate) inner: ClusterSharding,
    pub(crate) stop_delay_ms: u64,
    /// (due, shard, entity, for a handoff).
    pub(crate) stopping: Vec<(u64, String, String, bool)>,
    /// Live entities: (shard, entity) → payloads received (handed over with the entity).
    pub(crate) entities: BTreeMap<(String, String), Vec<String>>,
    /// (entity, start, end) of every incarnation on this node.
    pub(crate) intervals: Vec<(String, u64, Option<u64>)>,
    pub(crate) graceful_requested: bool,
    pub(crate) graceful_done: bool,
    pub(crate) exiting_requested: bool,
    pub(crate) exiting_done: bool,
    pub(crate) exiting_since: Option<u64>,
}

impl ShardingHost {
    pub(crate) fn new(me: &UniqueAddress, seed: u64, now: u64, settings: ShardingSettings) -> Self {
        ShardingHost {
            inner: ClusterSharding::new(settings, me.clone(), seed, now),
            stop_delay_ms: 5 + seed % 40,
            stopping: Vec::new(),
            entities: BTreeMap::new(),
            intervals: Vec::new(),
            graceful_requested: false,
            graceful_done: false,
            exiting_requested: false,
            exiting_done: false,
            exiting_since: None,
        }
    }

    pub(crate) fn close_interval(&mut self, entity: &str, now: u64) {
        if let Some(i) = self
            .intervals
            .iter_mut()
            .rev()
            .find(|(e, _, end)| e == entity && end.is_none())
        {
            i.2 = Some(now);
        }
    }

    pub(crate) fn react(&mut self, now: u64) {
        while let Some(e) = self.inner.poll_event() {
            if let Ok(t) = std::env::var("SHARD_TRACE") {
                let show = match &e {
                    ShardingEvent::StartEntity { entity, .. }
                    | ShardingEvent::StopEntity { entity, .. }
                    | ShardingEvent::KillEntity { entity, .. } => *entity == t,
                    ShardingEvent::Deliver { .. } => false,
                    _ => true,
                };
                if show {
                    eprintln!("    {now} {} {:?}", self.inner.self_node().address.host, e);
                }
            }
            match e {
                ShardingEvent::StartEntity {
                    shard,
                    entity,
                    state,
                } => {
                    let received = state
                        .map(|s| {
                            String::from_utf8(s)
                                .expect("utf-8 state")
                                .split('|')
                                .filter(|x| !x.is_empty())
                                .map(String::from)
                                .collect()
                        })
                        .unwrap_or_default();
                    assert!(
                        self.entities
                            .insert((shard, entity.clone()), received)
                            .is_none(),
                        "{entity} started twice on one node"
                    );
                    self.intervals.push((entity, now, None));
                }
                ShardingEvent::Deliver {
                    shard,
                    entity,
                    payload,
                    reply_to,
                } => {
                    let list = self
                        .entities
                        .get_mut(&(shard, entity.clone()))
                        .unwrap_or_else(|| panic!("{entity} delivered before it started"));
                    list.push(String::from_utf8(payload).expect("utf-8"));
                    if let Some((to, ask)) = reply_to {
                        self.inner.reply(now, &to, ask, Ok(Vec::new()));
                    }
                }
                ShardingEvent::StopEntity {
                    shard,
                    entity,
                    reason,
                } => self.stopping.push((
                    now + self.stop_delay_ms,
                    shard,
                    entity,
                    reason == StopReason::HandOff,
                )),
                ShardingEvent::KillEntity { shard, entity } => {
                    self.stopping.retain(|s| !(s.1 == shard && s.2 == entity));
                    self.entities.remove(&(shard.clone(), entity.clone()));
                    self.close_interval(&entity, now);
                    self.inner.entity_stopped(now, &shard, &entity, None);
                }
                ShardingEvent::GracefulShutdownDone => self.graceful_done = true,
                ShardingEvent::ExitingDone => self.exiting_done = true,
                _ => {}
            }
        }
    }

    pub(crate) fn run_stops(&mut self, now: u64) {
        let due: Vec<_> = self
            .stopping
            .iter()
            .filter(|s| s.0 <= now)
            .cloned()
            .collect();
        self.stopping.retain(|s| s.0 > now);
        for (_, shard, entity, handoff) in due {
            let list = self.entities.remove(&(shard.clone(), entity.clone()));
            self.close_interval(&entity, now);
            let state = match (handoff, list) {
                (true, Some(l)) => Some(l.join("|").into_bytes()),
                _ => None,
            };
            self.inner.entity_stopped(now, &shard, &entity, state);
            self.react(now);
        }
    }

    /// Coordinated shutdown as the node runs it: hand the shards over, then the
    /// coordinator singleton.
    pub(crate) fn exiting(&mut self, now: u64) -> bool {
        let started = *self.exiting_since.get_or_insert(now);
        if !self.graceful_requested {
            self.graceful_requested = true;
            self.inner.graceful_shutdown(now);
            self.react(now);
        }
        // The phases' timeouts (10 s each in the runtime): a hand-over that cannot finish
        // (no coordinator left, say) does not hold the node forever.
        let timed_out = now >= started + 10_000;
        if timed_out && !self.graceful_done && !self.exiting_requested {
            self.inner.stop_hosting(now);
            self.react(now);
        }
        if (self.graceful_done || timed_out) && !self.exiting_requested {
            self.exiting_requested = true;
            self.inner.self_exiting(now);
            self.react(now);
        }
        self.exiting_done || now >= started + 20_000
    }

    pub(crate) fn tell(&mut self, now: u64, entity: &str, payload: String) {
        let shard = shard_id(&entity.to_string(), SHARDS);
        self.inner
            .tell(now, shard, entity.to_string(), payload.into_bytes(), None);
        self.react(now);
    }
}

impl ProtocolMachine for ShardingHost {
    type Message = ShardingMessage;
    type Event = ShardingEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::SHARDING
    }

    fn handle_message(&mut self, now: u64, from: &UniqueAddress, m: ShardingMessage) {
        if let Ok(shard) = std::env::var("SHARD_TRACE_SHARD") {
            let d = format!("{:?}", m.body);
            if d.contains(&format!("\"{shard}\"")) && !d.starts_with("Deliver") {
                eprintln!(
                    "    {now} {} <- {} {}",
                    self.inner.self_node().address.host,
                    from.address.host,
                    d.chars().take(600).collect::<String>()
                );
            }
        }
        self.inner.handle_message(now, from, m);
        self.react(now);
    }

    fn handle_membership(&mut self, now: u64, view: &MembershipView, change: MembershipChange) {
        self.inner.handle_membership(now, view, change);
        self.react(now);
    }

    fn handle_timeout(&mut self, now: u64) {
        self.run_stops(now);
        if self.inner.poll_timeout().is_some_and(|t| t <= now) {
            self.inner.handle_timeout(now);
        }
        self.react(now);
    }

    fn poll_transmit(&mut self) -> Option<Transmit<ShardingMessage>> {
        self.inner.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<ShardingEvent> {
        None
    }

    fn poll_timeout(&self) -> Option<u64> {
        let stop = self.stopping.iter().map(|s| s.0).min();
        match (self.inner.poll_timeout(), stop) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

//! [`ReplicatorEffects`]: the Distributed Data layer's part of its host — commands from
//! the [`super::Replicator`] handle into the sans-IO [`Replicator`] machine, and what the
//! machine's events do: answer the waiting callers (with the request's latency metric),
//! notify subscribers, and write durable keys (committed before the events after them are
//! acted on, so an update is answered only once its key is on disk: the host of a layer
//! with durable keys runs on a thread of its own).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use concord_core::ddata::replicator::{
    DeleteResult, GetResult, ReplicatorEvent, ReplicatorStats, RequestId, UpdateResult,
};
use concord_core::ddata::Replicator;
use futures_channel::oneshot;
use tracing::{error, warn};

use super::command::{KeyInfo, Notification, ReplicatorCommand};
use super::durable::DurableStore;
use super::metrics;
use crate::host::{Effects, LayerEffects};
use crate::remote::log_limit::LogLimiter;

/// Changes a subscriber has not read yet are folded into the latest (the channel keeps one).
const SUBSCRIBER_CAPACITY: usize = 1;

/// Where an answer goes.
enum Reply {
    Get(oneshot::Sender<GetResult>),
    Update(oneshot::Sender<(UpdateResult, Option<String>)>),
    Delete(oneshot::Sender<DeleteResult>),
}

/// A caller waiting for the machine's answer, with what its latency metric needs.
struct Pending {
    reply: Reply,
    started: Instant,
    consistency: &'static str,
}

/// The layer's effects; see the module docs.
pub struct ReplicatorEffects {
    pending: HashMap<RequestId, Pending>,
    subscribers: BTreeMap<String, Vec<async_broadcast::Sender<Arc<Notification>>>>,
    next_request: u64,
    store: Option<Arc<DurableStore>>,
    /// Keys whose last durable write failed (their update is answered with the failure).
    store_failed: HashSet<String>,
    node: String,
    warnings: LogLimiter,
    last_stats: ReplicatorStats,
}

impl ReplicatorEffects {
    /// Effects for the node `node` (its address, the metrics' label), writing durable keys
    /// to `store`.
    pub fn new(store: Option<Arc<DurableStore>>, node: String) -> Self {
        ReplicatorEffects {
            pending: HashMap::new(),
            subscribers: BTreeMap::new(),
            next_request: 1,
            store,
            store_failed: HashSet::new(),
            node,
            warnings: LogLimiter::new(Duration::from_secs(10)),
            last_stats: ReplicatorStats::default(),
        }
    }

    fn request(&mut self, reply: Reply, consistency: &'static str) -> RequestId {
        let r = RequestId(self.next_request);
        self.next_request += 1;
        self.pending.insert(
            r,
            Pending {
                reply,
                started: Instant::now(),
                consistency,
            },
        );
        r
    }

    /// Takes the caller waiting for `request`, recording the request's latency.
    fn take(&mut self, request: RequestId) -> Option<Reply> {
        let p = self.pending.remove(&request)?;
        let op = match p.reply {
            Reply::Get(_) => "get",
            Reply::Update(_) => "update",
            Reply::Delete(_) => "delete",
        };
        metrics::ddata_request(
            &self.node,
            op,
            p.consistency,
            p.started.elapsed().as_secs_f64(),
        );
        Some(p.reply)
    }

    /// One line (at most every 10 s) when values from peers were dropped.
    fn warn_bad_input(&self, before: &ReplicatorStats, now: &ReplicatorStats) {
        let unknown = now.unknown_types - before.unknown_types;
        let bad = now.bad_values - before.bad_values;
        let large = now.too_large - before.too_large;
        if unknown + bad + large > 0 {
            if let Some(suppressed) = self.warnings.allow("input") {
                warn!(
                    unknown_types = unknown,
                    bad_values = bad,
                    too_large = large,
                    suppressed,
                    "distributed data dropped values (register every data type on every node; \
                     keep values under remote.maximum-large-frame-size)"
                );
            }
        }
    }

    /// Forgets subscribers that went away (the machine stops tracking their keys).
    fn drop_closed_subscriptions(&mut self, machine: &mut Replicator) {
        self.subscribers.retain(|key, subs| {
            let before = subs.len();
            subs.retain(|s| s.receiver_count() > 0);
            for _ in subs.len()..before {
                machine.unsubscribe(key);
            }
            !subs.is_empty()
        });
    }

    fn notify(&mut self, machine: &mut Replicator, key: &str, n: Notification) {
        let Some(subs) = self.subscribers.get_mut(key) else {
            return;
        };
        let n = Arc::new(n);
        let before = subs.len();
        subs.retain(|s| s.receiver_count() > 0 && s.try_broadcast(n.clone()).is_ok());
        for _ in subs.len()..before {
            machine.unsubscribe(key);
        }
        if subs.is_empty() {
            self.subscribers.remove(key);
        }
    }

    fn store(
        &mut self,
        key: String,
        envelope: &concord_core::ddata::replicator::SerializedEnvelope,
    ) {
        let Some(store) = &self.store else {
            return;
        };
        match store.store(&key, envelope) {
            Ok(()) => {
                self.store_failed.remove(&key);
            }
            Err(e) => {
                metrics::ddata_store_failure(&self.node);
                if let Some(suppressed) = self.warnings.allow("store") {
                    error!(key = %key, error = %e, suppressed, "durable store write failed");
                }
                self.store_failed.insert(key);
            }
        }
    }
}

impl LayerEffects for ReplicatorEffects {
    type Machine = Replicator;
    type Command = ReplicatorCommand;
    type Completion = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "distributed-data"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: ReplicatorCommand) {
        let now = fx.now_ms;
        match command {
            ReplicatorCommand::RegisterType { register, reply } => {
                let _ = reply.send(register(fx.machine));
            }
            ReplicatorCommand::Get {
                key,
                consistency,
                reply,
            } => {
                let request = self.request(Reply::Get(reply), consistency.label());
                fx.machine.get(now, request, &key, consistency);
            }
            ReplicatorCommand::Update {
                consistency,
                update,
                reply,
            } => {
                let request = self.request(Reply::Update(reply), consistency.label());
                update(fx.machine, now, request);
            }
            ReplicatorCommand::Delete {
                key,
                consistency,
                reply,
            } => {
                let request = self.request(Reply::Delete(reply), consistency.label());
                fx.machine.delete(now, request, &key, consistency);
            }
            ReplicatorCommand::Subscribe { key, reply } => {
                let (mut tx, rx) = async_broadcast::broadcast(SUBSCRIBER_CAPACITY);
                tx.set_overflow(true);
                tx.set_await_active(false);
                self.subscribers.entry(key.clone()).or_default().push(tx);
                fx.machine.subscribe(&key);
                let _ = reply.send(rx);
            }
            ReplicatorCommand::Keys { reply } => {
                let keys = fx
                    .machine
                    .key_summaries()
                    .into_iter()
                    .map(|(key, type_name, size_bytes, durable)| KeyInfo {
                        key,
                        type_name: type_name.map(str::to_string),
                        size_bytes,
                        durable,
                    })
                    .collect();
                let _ = reply.send(keys);
            }
            ReplicatorCommand::Stats { reply } => {
                let _ = reply.send(fx.machine.stats().clone());
            }
            ReplicatorCommand::Nodes { reply } => {
                let nodes = fx.machine.nodes().map(|n| n.address.to_string()).collect();
                let _ = reply.send(nodes);
            }
        }
    }

    fn completion(&mut self, _fx: &mut Effects<'_, Self>, never: std::convert::Infallible) {
        match never {}
    }

    fn event(&mut self, fx: &mut Effects<'_, Self>, event: ReplicatorEvent) {
        match event {
            ReplicatorEvent::Store { key, envelope } => self.store(key, &envelope),
            ReplicatorEvent::GetResponse {
                request, result, ..
            } => {
                if let Some(Reply::Get(tx)) = self.take(request) {
                    let _ = tx.send(result);
                }
            }
            ReplicatorEvent::UpdateResponse {
                request,
                key,
                result,
            } => {
                let failure = self
                    .store_failed
                    .contains(&key)
                    .then(|| format!("the change of `{key}` was not stored"));
                if let Some(Reply::Update(tx)) = self.take(request) {
                    let _ = tx.send((result, failure));
                }
            }
            ReplicatorEvent::DeleteResponse {
                request, result, ..
            } => {
                if let Some(Reply::Delete(tx)) = self.take(request) {
                    let _ = tx.send(result);
                }
            }
            ReplicatorEvent::Changed { key, value } => {
                self.notify(fx.machine, &key, Notification::Changed(value))
            }
            ReplicatorEvent::Deleted { key } => {
                self.notify(fx.machine, &key, Notification::Deleted)
            }
        }
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        let stats = fx.machine.stats().clone();
        metrics::record_replicator(
            &self.node,
            fx.machine.key_count(),
            fx.machine.nodes().count(),
            &stats,
        );
        self.warn_bad_input(&self.last_stats, &stats);
        self.last_stats = stats;
        self.drop_closed_subscriptions(fx.machine);
    }

    fn stopped(&mut self, _machine: &mut Replicator) {
        // Callers learn the replicator stopped (their channels close).
        self.pending.clear();
        self.subscribers.clear();
    }
}

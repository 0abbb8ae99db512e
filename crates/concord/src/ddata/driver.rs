//! The Distributed Data driver task: owns the sans-IO [`Replicator`] machine and feeds it
//! inbound messages, membership views, the handles' jobs and timer ticks; carries its
//! outputs out — messages to the transport, answers to the waiting callers, notifications
//! to subscribers, and durable writes (committed before the events after them are acted
//! on, so an update is answered only once its key is on disk).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use concord_core::ddata::replicator::{
    ReplicatedValue, ReplicatorEvent, ReplicatorMessage, ReplicatorStats, RequestId,
};
use concord_core::ddata::Replicator;
use concord_core::{MembershipChange, ProtocolMachine};
use tokio::sync::watch;
use tracing::{error, warn};

use super::codec::ReplicatorCodec;
use super::durable::DurableStore;
use super::replicator::{DeleteReply, GetReply, Job, UpdateReply};
use crate::clock::Clock;
use crate::layer::{DriverInput, DriverInputs};
use crate::metrics;
use crate::remote::log_limit::LogLimiter;
use crate::remote::ProtocolSender;

/// What a subscriber is told.
#[derive(Debug)]
pub enum Notification {
    /// The key's value now.
    Changed(Box<dyn ReplicatedValue>),
    /// The key was deleted.
    Deleted,
}

/// Where an answer goes.
pub(super) enum Reply {
    Get(GetReply),
    Update(UpdateReply),
    Delete(DeleteReply),
}

/// A caller waiting for the machine's answer, with what its latency metric needs.
pub(super) struct Pending {
    pub(super) reply: Reply,
    pub(super) started: Instant,
    pub(super) consistency: &'static str,
}

impl Pending {
    pub(super) fn new(reply: Reply, consistency: &'static str) -> Self {
        Pending {
            reply,
            started: Instant::now(),
            consistency,
        }
    }
}

/// The driver's state; jobs from the handles run on it.
pub(crate) struct Driver {
    pub(super) machine: Replicator,
    pub(super) pending: HashMap<RequestId, Pending>,
    pub(super) subscribers: BTreeMap<String, Vec<watch::Sender<Option<Arc<Notification>>>>>,
    next_request: u64,
    clock: Clock,
    sender: ProtocolSender<ReplicatorCodec>,
    store: Option<Arc<DurableStore>>,
    node: String,
    store_errors: LogLimiter,
}

impl Driver {
    pub(super) fn new(
        machine: Replicator,
        clock: Clock,
        sender: ProtocolSender<ReplicatorCodec>,
        store: Option<Arc<DurableStore>>,
        node: String,
    ) -> Self {
        Driver {
            machine,
            pending: HashMap::new(),
            subscribers: BTreeMap::new(),
            next_request: 1,
            clock,
            sender,
            store,
            node,
            store_errors: LogLimiter::new(Duration::from_secs(10)),
        }
    }

    /// The clock now, ms.
    pub(super) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A fresh request id.
    pub(super) fn next_request(&mut self) -> RequestId {
        let r = RequestId(self.next_request);
        self.next_request += 1;
        r
    }

    pub(super) async fn run(mut self, mut inputs: DriverInputs<Job, ReplicatorMessage>) {
        let view = inputs.view();
        let now = self.now();
        self.machine
            .handle_membership(now, &view, MembershipChange::CurrentClusterState);
        let mut last_stats = self.machine.stats().clone();
        loop {
            let deadline = self
                .machine
                .poll_timeout()
                .map(|t| self.clock.instant_at(t));
            let input = inputs.next(deadline).await;
            let now = self.now();
            match input {
                DriverInput::Stop => break,
                DriverInput::Job(job) => job(&mut self),
                DriverInput::Inbound(b) => {
                    for (m, _) in b.messages {
                        self.machine.handle_message(now, &b.from, m);
                    }
                }
                DriverInput::View(view) => {
                    self.machine.handle_membership(
                        now,
                        &view,
                        MembershipChange::CurrentClusterState,
                    );
                }
                DriverInput::Timeout => self.machine.handle_timeout(now),
                DriverInput::Tick => {
                    let stats = self.machine.stats().clone();
                    metrics::record_replicator(&self.node, self.machine.key_count(), &stats);
                    self.warn_bad_input(&last_stats, &stats);
                    last_stats = stats;
                    self.drop_closed_subscriptions();
                }
            }
            self.flush().await;
        }
    }

    /// One line (at most every 10 s) when values from peers were dropped.
    fn warn_bad_input(&self, before: &ReplicatorStats, now: &ReplicatorStats) {
        let unknown = now.unknown_types - before.unknown_types;
        let bad = now.bad_values - before.bad_values;
        let large = now.too_large - before.too_large;
        if unknown + bad + large > 0 {
            if let Some(suppressed) = self.store_errors.allow("input") {
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

    /// Carries the machine's outputs out.
    async fn flush(&mut self) {
        while let Some(t) = self.machine.poll_transmit() {
            let gossip = matches!(
                t.message,
                ReplicatorMessage::Status { .. } | ReplicatorMessage::Gossip { .. }
            );
            let bytes = self.sender.send(&t);
            if gossip {
                metrics::ddata_gossip_bytes(&self.node, bytes);
            }
        }
        let mut store_failed: HashSet<String> = HashSet::new();
        while let Some(e) = self.machine.poll_event() {
            match e {
                ReplicatorEvent::Store { key, envelope } => {
                    let Some(store) = self.store.clone() else {
                        continue;
                    };
                    let k = key.clone();
                    let r = tokio::task::spawn_blocking(move || store.store(&k, &envelope)).await;
                    let failure = match r {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(e) => Some(format!("store task failed: {e}")),
                    };
                    if let Some(f) = failure {
                        metrics::ddata_store_failure(&self.node);
                        if let Some(suppressed) = self.store_errors.allow("store") {
                            error!(key = %key, error = %f, suppressed, "durable store write failed");
                        }
                        store_failed.insert(key);
                    } else {
                        store_failed.remove(&key);
                    }
                }
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
                    let failure = store_failed
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
                    self.notify(&key, Notification::Changed(value))
                }
                ReplicatorEvent::Deleted { key } => self.notify(&key, Notification::Deleted),
            }
        }
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

    /// Forgets subscribers that went away (the machine stops tracking their keys).
    fn drop_closed_subscriptions(&mut self) {
        let machine = &mut self.machine;
        self.subscribers.retain(|key, subs| {
            let before = subs.len();
            subs.retain(|s| !s.is_closed());
            for _ in subs.len()..before {
                machine.unsubscribe(key);
            }
            !subs.is_empty()
        });
    }

    fn notify(&mut self, key: &str, n: Notification) {
        let Some(subs) = self.subscribers.get_mut(key) else {
            return;
        };
        let n = Arc::new(n);
        let before = subs.len();
        subs.retain(|s| s.send(Some(n.clone())).is_ok());
        for _ in subs.len()..before {
            self.machine.unsubscribe(key);
        }
        if subs.is_empty() {
            self.subscribers.remove(key);
        }
    }
}

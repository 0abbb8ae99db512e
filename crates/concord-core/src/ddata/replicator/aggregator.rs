//! Reads and writes that wait for a quorum of replicas (Akka's `ReadAggregator` and
//! `WriteAggregator`), and read repair.
//!
//! A request goes to `needed - 1` primary nodes (reachable first; for reads with
//! `prefer-oldest` the oldest first, otherwise shuffled) and, after a fifth of its timeout,
//! to up to 10 secondaries. A read that has its quorum merges the replies with the local
//! value, keeps the merge locally, writes it back to each replica that answered with less
//! (read repair; late answers are repaired until the timeout), and answers.

use std::collections::{BTreeMap, BTreeSet};

use rand::seq::SliceRandom;

use crate::address::UniqueAddress;

use super::api::{DeleteResult, GetResult, ReplicatorEvent, RequestId, UpdateResult};
use super::consistency::Quorum;
use super::envelope::{DataEnvelope, EnvelopeData, SerializedEnvelope};
use super::messages::ReplicatorMessage;
use super::read_aggregator::ReadAggregator;
use super::timer::ReplicatorTimer;
use super::write_aggregator::{WriteAggregator, WriteKind};
use super::Replicator;

/// Most secondary nodes a request also goes to.
const MAX_SECONDARIES: usize = 10;

/// Targets of a request: primaries, secondaries; or why the quorum is out of reach.
type Targets = Result<(Vec<UniqueAddress>, Vec<UniqueAddress>, usize), String>;

impl Replicator {
    /// Chooses the nodes a request with `quorum` goes to.
    fn targets(&mut self, quorum: Quorum, oldest_first: bool) -> Targets {
        let skip_exiting = quorum.skips_exiting();
        let mut candidates: Vec<UniqueAddress> = if oldest_first {
            self.by_age
                .iter()
                .filter(|n| self.nodes.get(*n).is_some_and(|ex| !(skip_exiting && *ex)))
                .cloned()
                .collect()
        } else {
            let mut v: Vec<UniqueAddress> = self
                .nodes
                .iter()
                .filter(|(_, ex)| !(skip_exiting && **ex))
                .map(|(n, _)| n.clone())
                .collect();
            v.shuffle(&mut self.rng);
            v
        };
        let n = candidates.len() + 1;
        let needed = quorum.needed(n);
        if needed > n {
            return Err(format!(
                "needs {needed} replicas, only {n} are members (this one included)"
            ));
        }
        // Reachable first, keeping the order within each group.
        candidates.sort_by_key(|c| self.unreachable.contains(c));
        let secondaries = candidates.split_off((needed - 1).min(candidates.len()));
        let secondaries = secondaries.into_iter().take(MAX_SECONDARIES).collect();
        Ok((candidates, secondaries, needed))
    }

    fn arm_request_timers(&mut self, id: u64, now_ms: u64, timeout_ms: u64) {
        self.out
            .timers
            .set(ReplicatorTimer::Secondaries(id), now_ms + timeout_ms / 5);
        self.out.timers.set(
            ReplicatorTimer::RequestTimeout(id),
            now_ms + timeout_ms.max(1),
        );
    }

    fn disarm_request_timers(&mut self, id: u64) {
        self.out.timers.cancel(&ReplicatorTimer::Secondaries(id));
        self.out.timers.cancel(&ReplicatorTimer::RequestTimeout(id));
    }

    /// Starts a read of `key` at `quorum`, or answers at once when it needs no other node.
    pub(super) fn start_read(
        &mut self,
        request: RequestId,
        key: &str,
        quorum: Quorum,
        timeout_ms: u64,
        now_ms: u64,
    ) {
        let (primaries, secondaries, needed) =
            match self.targets(quorum, self.settings.prefer_oldest) {
                Ok(t) => t,
                Err(reason) => {
                    self.answer_get(request, key, Some(GetResult::Failure(reason)));
                    return;
                }
            };
        if needed <= 1 {
            self.answer_get(request, key, None);
            return;
        }
        let id = self.next_request_id();
        for p in &primaries {
            self.send(
                p,
                ReplicatorMessage::Read {
                    request: id,
                    key: key.to_string(),
                },
            );
        }
        self.reads.insert(
            id,
            ReadAggregator {
                request,
                key: key.to_string(),
                needed,
                secondaries,
                asked: primaries.into_iter().collect(),
                replies: BTreeMap::new(),
                answered: false,
            },
        );
        self.arm_request_timers(id, now_ms, timeout_ms);
    }

    /// Answers a get from the local value (`override_result` replaces it).
    pub(super) fn answer_get(
        &mut self,
        request: RequestId,
        key: &str,
        override_result: Option<GetResult>,
    ) {
        let result = override_result.unwrap_or_else(|| match self.data.get(key) {
            None => GetResult::NotFound,
            Some(e) => match &e.envelope.data {
                EnvelopeData::Value(v) => GetResult::Success(v.clone_value()),
                EnvelopeData::Deleted => GetResult::Deleted,
            },
        });
        self.out.events.push_back(ReplicatorEvent::GetResponse {
            request,
            key: key.to_string(),
            result,
        });
    }

    /// Starts a write of `key`'s current envelope at `quorum`, or answers at once.
    pub(super) fn start_write(
        &mut self,
        request: RequestId,
        key: &str,
        kind: WriteKind,
        quorum: Quorum,
        timeout_ms: u64,
        now_ms: u64,
    ) {
        let (primaries, secondaries, needed) = match self.targets(quorum, false) {
            Ok(t) => t,
            Err(reason) => {
                self.answer_write(request, key, kind, Some(reason));
                return;
            }
        };
        if needed <= 1 {
            self.answer_write(request, key, kind, None);
            return;
        }
        let Some(envelope) = self.data.get(key).map(|e| e.envelope.serialize()) else {
            self.answer_write(request, key, kind, Some("the key is gone".into()));
            return;
        };
        if envelope.size_bytes() > self.settings.max_value_bytes {
            self.stats.too_large += 1;
            let reason = format!(
                "the value is {} bytes, more than max-value-bytes {}",
                envelope.size_bytes(),
                self.settings.max_value_bytes
            );
            self.answer_write(request, key, kind, Some(reason));
            return;
        }
        let id = self.next_request_id();
        let message = ReplicatorMessage::Write {
            request: Some(id),
            key: key.to_string(),
            envelope,
        };
        for p in &primaries {
            self.send(p, message.clone());
        }
        self.writes.insert(
            id,
            WriteAggregator {
                request,
                key: key.to_string(),
                kind,
                needed,
                secondaries,
                asked: primaries.into_iter().collect(),
                acks: BTreeSet::new(),
                nacks: BTreeSet::new(),
                message,
            },
        );
        self.arm_request_timers(id, now_ms, timeout_ms);
    }

    /// Tells the owner how a write ended: success, or the reason it did not reach its
    /// consistency.
    fn answer_write(
        &mut self,
        request: RequestId,
        key: &str,
        kind: WriteKind,
        failed: Option<String>,
    ) {
        let event = match kind {
            WriteKind::Update => ReplicatorEvent::UpdateResponse {
                request,
                key: key.to_string(),
                result: match failed {
                    None => UpdateResult::Success,
                    Some(r) => UpdateResult::Timeout(r),
                },
            },
            WriteKind::Delete => ReplicatorEvent::DeleteResponse {
                request,
                key: key.to_string(),
                result: match failed {
                    None => DeleteResult::Success,
                    Some(r) => DeleteResult::Timeout(r),
                },
            },
        };
        self.out.events.push_back(event);
    }

    pub(super) fn send_to_secondaries(&mut self, id: u64) {
        if let Some(r) = self.reads.get_mut(&id) {
            let secondaries = std::mem::take(&mut r.secondaries);
            let key = r.key.clone();
            r.asked.extend(secondaries.iter().cloned());
            for s in &secondaries {
                self.send(
                    s,
                    ReplicatorMessage::Read {
                        request: id,
                        key: key.clone(),
                    },
                );
            }
        } else if let Some(w) = self.writes.get_mut(&id) {
            let secondaries = std::mem::take(&mut w.secondaries);
            let message = w.message.clone();
            w.asked.extend(secondaries.iter().cloned());
            for s in &secondaries {
                self.send(s, message.clone());
            }
        }
    }

    pub(super) fn request_timed_out(&mut self, id: u64) {
        self.out.timers.cancel(&ReplicatorTimer::Secondaries(id));
        if let Some(r) = self.reads.remove(&id) {
            if !r.answered {
                self.stats.read_timeouts += 1;
                let reason = format!(
                    "read timed out: {} of {} replicas answered",
                    r.replies.len() + 1,
                    r.needed
                );
                self.answer_get(r.request, &r.key, Some(GetResult::Failure(reason)));
            }
        } else if let Some(w) = self.writes.remove(&id) {
            self.stats.write_timeouts += 1;
            let reason = format!(
                "write timed out: {} of {} replicas acknowledged",
                w.acks.len() + 1,
                w.needed
            );
            self.answer_write(w.request, &w.key, w.kind, Some(reason));
        }
    }

    pub(super) fn on_write_reply(&mut self, from: &UniqueAddress, id: u64, ack: bool) {
        let Some(w) = self.writes.get_mut(&id) else {
            return;
        };
        if !w.asked.contains(from) {
            return;
        }
        if ack {
            w.acks.insert(from.clone());
        } else {
            w.nacks.insert(from.clone());
        }
        let done = w.acks.len() + 1 >= w.needed;
        // Every node asked (and every secondary still to ask) cannot make up the rest.
        let hopeless = w.acks.len()
            + 1
            + (w.asked.len() + w.secondaries.len()).saturating_sub(w.acks.len() + w.nacks.len())
            < w.needed;
        if done || hopeless {
            let w = self.writes.remove(&id).expect("present");
            self.disarm_request_timers(id);
            let failed = (!done).then(|| {
                format!(
                    "write refused by {} replicas ({} of {} acknowledged)",
                    w.nacks.len(),
                    w.acks.len() + 1,
                    w.needed
                )
            });
            self.answer_write(w.request, &w.key, w.kind, failed);
        }
    }

    pub(super) fn on_read_result(
        &mut self,
        from: &UniqueAddress,
        id: u64,
        envelope: Option<SerializedEnvelope>,
    ) {
        if !self
            .reads
            .get(&id)
            .is_some_and(|r| r.asked.contains(from) && !r.replies.contains_key(from))
        {
            return;
        }
        let decoded = envelope.as_ref().and_then(|e| self.decode_envelope(e));
        let Some(r) = self.reads.get_mut(&id) else {
            return;
        };
        r.replies.insert(from.clone(), decoded);
        if r.answered {
            // A late reply: repair it if it is behind.
            let key = r.key.clone();
            let reply = r.replies.get(from).cloned().flatten();
            if let Some(reply) = reply.as_ref() {
                self.write_local(&key, reply.clone());
            }
            self.repair(&key, from, reply.as_ref());
        } else if r.replies.len() + 1 >= r.needed {
            r.answered = true;
            let key = r.key.clone();
            let request = r.request;
            let replies: Vec<(UniqueAddress, Option<DataEnvelope>)> = r
                .replies
                .iter()
                .map(|(n, e)| (n.clone(), e.clone()))
                .collect();
            for env in replies.iter().filter_map(|(_, e)| e.clone()) {
                self.write_local(&key, env);
            }
            for (node, env) in &replies {
                self.repair(&key, node, env.as_ref());
            }
            self.answer_get(request, &key, None);
        }
        if let Some(r) = self.reads.get(&id) {
            if r.answered && r.replies.len() >= r.asked.len() && r.secondaries.is_empty() {
                self.reads.remove(&id);
                self.disarm_request_timers(id);
            }
        }
    }

    /// Read repair: writes the local (merged) envelope of `key` to `node` if what it
    /// answered differs.
    fn repair(&mut self, key: &str, node: &UniqueAddress, answered: Option<&DataEnvelope>) {
        let Some(local) = self.data.get_mut(key) else {
            return;
        };
        let merged = local.digest();
        if answered.is_some_and(|a| a.digest() == merged) {
            return;
        }
        let envelope = local.envelope.serialize();
        self.stats.read_repairs += 1;
        self.send(
            node,
            ReplicatorMessage::Write {
                request: None,
                key: key.to_string(),
                envelope,
            },
        );
    }
}

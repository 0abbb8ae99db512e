//! Delta propagation (Akka's `DeltaPropagationSelector` and `DeltaPropagation`; Almeida et
//! al., "Delta State Replicated Data Types", 2018).
//!
//! Every `delta-propagation-interval` (400 ms) the replicator takes the delta each locally
//! updated key has gathered since the last tick and numbers it: the key's delta version
//! for this replica goes up by one. It then sends, to a rotating slice of
//! `min(max(N/5 + 1, 2), min(N, 10))` nodes, every delta each of them has not been sent
//! yet, in order. A receiver applies a key's deltas only in sequence; on a gap it answers
//! `DeltaNack` and gets the full state. Deltas every node has been sent are dropped, and
//! at most `max-delta-size` are kept per key (a node that misses older ones gets the full
//! state), so memory stays bounded. A key's first delta, and a delta larger than its
//! value, are sent as the value.

use crate::address::UniqueAddress;

use super::envelope::{DataEnvelope, PruningState};
use super::messages::{DeltaEntry, ReplicatorMessage};
use super::{check_key_id, Replicator};

pub use super::delta_state::DeltaState;

/// Nodes per delta propagation tick: `min(max(N/5 + 1, 2), min(N, 10))`.
pub fn slice_size(n: usize) -> usize {
    (n / 5 + 1).max(2).min(n.min(10))
}

impl Replicator {
    /// Takes and numbers the deltas of locally updated keys.
    fn collect_deltas(&mut self) {
        let dirty: Vec<String> = self
            .data
            .iter()
            .filter(|(_, e)| e.dirty_delta)
            .map(|(k, _)| k.clone())
            .collect();
        for key in dirty {
            let Some(e) = self.data.get_mut(&key) else {
                continue;
            };
            e.dirty_delta = false;
            // Only the delta that carries this node's own pruning carries its markers: a
            // receiver may drop a pruned replica's entries only together with the value
            // they were folded into.
            let pruning = std::mem::take(&mut e.pruned_here);
            let seq = e.envelope.delta_versions.get(self.replica) + 1;
            let Some(value) = e.envelope.value_mut() else {
                continue;
            };
            let data_type = value.data_type();
            let Some(delta) = value.take_delta_encoded() else {
                continue;
            };
            // The first delta of a key goes as the value (receivers do not have the key
            // yet) if that fits a message, and so does a delta larger than its value.
            let (full, bytes) = if seq == 1 || delta.len() > 4096 {
                let whole = value.encode();
                if (seq == 1 && whole.len() <= self.settings.max_message_bytes)
                    || whole.len() <= delta.len()
                {
                    (true, whole)
                } else {
                    (false, delta)
                }
            } else {
                (false, delta)
            };
            e.envelope.delta_versions.observe(self.replica, seq);
            // A whole value is a state: it goes with every pruning marker it was cleaned by.
            let pruning = if full {
                e.envelope
                    .pruning
                    .iter()
                    .filter(|(_, p)| matches!(p, PruningState::Performed { .. }))
                    .map(|(r, p)| (*r, p.clone()))
                    .collect()
            } else {
                pruning
            };
            let entries = self.deltas.pending.entry(key.clone()).or_default();
            entries.insert(
                seq,
                DeltaEntry {
                    key: key.clone(),
                    data_type,
                    seq,
                    full,
                    bytes,
                    pruning,
                },
            );
            while entries.len() > self.settings.max_delta_size.max(1) {
                entries.pop_first();
            }
        }
    }

    /// The delta propagation tick.
    pub(super) fn delta_propagation_tick(&mut self) {
        if !self.settings.delta_crdt_enabled {
            return;
        }
        self.collect_deltas();
        let all: Vec<UniqueAddress> = self.all_nodes().cloned().collect();
        if all.is_empty() || !self.active {
            self.deltas.pending.clear();
            return;
        }
        if self.deltas.pending.is_empty() {
            return;
        }
        let k = slice_size(all.len());
        let start = self.deltas.rotation % all.len();
        self.deltas.rotation = (start + k) % all.len();
        for i in 0..k {
            let node = all[(start + i) % all.len()].clone();
            if self.unreachable.contains(&node) {
                continue;
            }
            self.send_deltas_to(&node);
        }
        // Drop what every node has been sent.
        let deltas = &mut self.deltas;
        deltas.pending.retain(|key, entries| {
            let floor = all
                .iter()
                .map(|n| {
                    deltas
                        .sent
                        .get(n)
                        .and_then(|s| s.get(key))
                        .copied()
                        .unwrap_or(0)
                })
                .min()
                .unwrap_or(0);
            entries.retain(|seq, _| *seq > floor);
            !entries.is_empty()
        });
        let pending = &deltas.pending;
        for s in deltas.sent.values_mut() {
            s.retain(|k, _| pending.contains_key(k));
        }
    }

    fn send_deltas_to(&mut self, node: &UniqueAddress) {
        let limit = self.settings.max_message_bytes;
        let sent = self.deltas.sent.entry(node.clone()).or_default();
        let mut batches: Vec<Vec<DeltaEntry>> = vec![Vec::new()];
        let mut size = 0;
        for (key, entries) in &self.deltas.pending {
            let from = sent.get(key).copied().unwrap_or(0);
            let mut last = from;
            for (seq, d) in entries.range(from + 1..) {
                let s = d.bytes.len() + key.len() + 32;
                if size + s > limit && !batches.last().is_some_and(Vec::is_empty) {
                    batches.push(Vec::new());
                    size = 0;
                }
                size += s;
                if let Some(b) = batches.last_mut() {
                    b.push(d.clone());
                }
                last = *seq;
            }
            if last > from {
                sent.insert(key.clone(), last);
            }
        }
        for deltas in batches.into_iter().filter(|b| !b.is_empty()) {
            self.stats.deltas_sent += deltas.len() as u64;
            self.send(node, ReplicatorMessage::DeltaPropagation { deltas });
        }
    }

    /// Deltas from `from` (their origin): applied in sequence per key; a gap is nacked.
    pub(super) fn receive_deltas(&mut self, from: &UniqueAddress, deltas: Vec<DeltaEntry>) {
        if !self.active {
            return;
        }
        let origin = super::ReplicaId(from.uid);
        let mut nacked: Vec<String> = Vec::new();
        for d in deltas {
            if nacked.contains(&d.key) || check_key_id(&d.key).is_err() {
                continue;
            }
            let Some(e) = self.data.get_mut(&d.key) else {
                if d.full {
                    if let Ok(v) = self.registry.decode(d.data_type, &d.bytes) {
                        let mut env = DataEnvelope::new(v);
                        env.pruning = d.pruning.iter().cloned().collect();
                        env.delta_versions.observe(origin, d.seq);
                        if self.write_local(&d.key, env) {
                            self.stats.deltas_applied += 1;
                        }
                    } else {
                        self.stats.unknown_types += 1;
                    }
                } else {
                    self.stats.delta_nacks += 1;
                    self.send(from, ReplicatorMessage::DeltaNack { key: d.key.clone() });
                    nacked.push(d.key);
                }
                continue;
            };
            if e.envelope.is_deleted() {
                continue;
            }
            let last = e.envelope.delta_versions.get(origin);
            if d.seq <= last {
                continue;
            }
            if d.seq > last + 1 {
                self.stats.delta_nacks += 1;
                self.send(from, ReplicatorMessage::DeltaNack { key: d.key.clone() });
                nacked.push(d.key);
                continue;
            }
            if e.envelope.data_type() != Some(d.data_type) {
                self.stats.bad_values += 1;
                continue;
            }
            // The sender's pruning goes with the delta: it may hold a pruned replica's
            // counts folded into the pruning node's, so that replica's entries go first.
            let mut pruned = false;
            for (r, p) in &d.pruning {
                let merged = match e.envelope.pruning.get(r) {
                    Some(mine) => mine.merge(p),
                    None => p.clone(),
                };
                if e.envelope.pruning.get(r) != Some(&merged) {
                    e.envelope.pruning.insert(*r, merged);
                    pruned = true;
                }
            }
            if pruned {
                e.envelope.cleanup();
            }
            let Some(value) = e.envelope.value_mut() else {
                continue;
            };
            let applied = if d.full {
                match self.registry.decode(d.data_type, &d.bytes) {
                    Ok(v) => value.merge_value(v.as_ref()).is_ok(),
                    Err(_) => false,
                }
            } else {
                value.merge_delta_encoded(&d.bytes).is_ok()
            };
            if !applied {
                self.stats.bad_values += 1;
                continue;
            }
            e.envelope.delta_versions.observe(origin, d.seq);
            e.envelope.cleanup();
            e.digest = None;
            self.stats.deltas_applied += 1;
            self.on_changed(&d.key);
        }
    }

    /// A `DeltaNack`: the full state of `key`.
    pub(super) fn receive_delta_nack(&mut self, from: &UniqueAddress, key: &str) {
        if self.data.contains_key(key) {
            let keys = vec![key.to_string()];
            self.send_gossip(from, keys, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slice_size;

    #[test]
    fn slice_sizes_follow_akka() {
        assert_eq!(slice_size(1), 1);
        assert_eq!(slice_size(2), 2);
        assert_eq!(slice_size(5), 2);
        assert_eq!(slice_size(10), 3);
        assert_eq!(slice_size(100), 10);
    }
}

//! Anti-entropy gossip (Akka's `Status`/`Gossip` exchange): every `gossip-interval` the
//! replicator sends the digests of a chunk of its keys to one random reachable node; the
//! node answers with its envelopes of the keys that differ or that the sender lacks (and
//! asks back for the keys it lacks), so any two replicas converge even when deltas and
//! writes were lost.
//!
//! Keys are split into `ceil(keys / max-delta-elements)` chunks by a hash of the key; up
//! to 10 chunks go per tick, in rotation. Replies are packed into messages of at most
//! `max-message-bytes`; a single value larger than that travels alone (on the large lane),
//! and one larger than `max-value-bytes` is not replicated (counted).

use std::collections::{BTreeMap, BTreeSet};

use rand::seq::IteratorRandom;

use crate::address::UniqueAddress;
use crate::protocol::{Lane, Transmit};

use super::envelope::{Digest, SerializedEnvelope};
use super::messages::ReplicatorMessage;
use super::{check_key_id, Replicator};

/// Most chunks of digests sent per gossip tick (Akka's constant).
const MAX_CHUNKS_PER_TICK: u64 = 10;

/// The chunk of `key` among `total` chunks.
pub fn chunk_of(key: &str, total: u32) -> u32 {
    (xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % u64::from(total.max(1))) as u32
}

impl Replicator {
    fn total_chunks(&self) -> u32 {
        let per = self.settings.max_delta_elements.max(1);
        u32::try_from(self.data.len().div_ceil(per).max(1)).unwrap_or(u32::MAX)
    }

    /// The gossip tick: `Status` of the next chunks to one random reachable node.
    pub(super) fn gossip_tick(&mut self) {
        if !self.active {
            return;
        }
        let candidates: Vec<UniqueAddress> = self
            .all_nodes()
            .filter(|n| !self.unreachable.contains(*n))
            .cloned()
            .collect();
        let target = candidates.into_iter().choose(&mut self.rng);
        let Some(target) = target else {
            return;
        };
        let total = self.total_chunks();
        let chunks = if total == 1 {
            1
        } else {
            MAX_CHUNKS_PER_TICK.min(u64::from(total))
        };
        for _ in 0..chunks {
            let chunk = (self.status_count % u64::from(total)) as u32;
            self.status_count = self.status_count.wrapping_add(1);
            let keys: Vec<String> = self
                .data
                .keys()
                .filter(|k| total == 1 || chunk_of(k, total) == chunk)
                .cloned()
                .collect();
            let mut digests = Vec::with_capacity(keys.len());
            for k in keys {
                if let Some(e) = self.data.get_mut(&k) {
                    digests.push((k, e.digest()));
                }
            }
            self.send_status(&target, digests, chunk, total);
        }
    }

    /// Sends digests, split so that each message stays under the size limit.
    fn send_status(
        &mut self,
        to: &UniqueAddress,
        digests: Vec<(String, Digest)>,
        chunk: u32,
        total: u32,
    ) {
        let limit = self.settings.max_message_bytes;
        let mut batch = Vec::new();
        let mut size = 0;
        let mut sent_any = false;
        for (k, d) in digests {
            let s = k.len() + 24;
            if size + s > limit && !batch.is_empty() {
                self.stats.status_sent += 1;
                self.send(
                    to,
                    ReplicatorMessage::Status {
                        digests: std::mem::take(&mut batch),
                        chunk,
                        total_chunks: total,
                    },
                );
                size = 0;
                sent_any = true;
            }
            size += s;
            batch.push((k, d));
        }
        if !batch.is_empty() || !sent_any {
            self.stats.status_sent += 1;
            self.send(
                to,
                ReplicatorMessage::Status {
                    digests: batch,
                    chunk,
                    total_chunks: total,
                },
            );
        }
    }

    /// Envelopes of `keys` in messages under the size limit (`send_back` on each).
    pub(super) fn send_gossip(&mut self, to: &UniqueAddress, keys: Vec<String>, send_back: bool) {
        let limit = self.settings.max_message_bytes;
        let mut batch: Vec<(String, SerializedEnvelope)> = Vec::new();
        let mut size = 0;
        for k in keys {
            let Some(e) = self.data.get(&k) else {
                continue;
            };
            let env = e.envelope.serialize();
            let s = env.size_bytes() + k.len();
            if s > self.settings.max_value_bytes {
                self.stats.too_large += 1;
                continue;
            }
            if size + s > limit && !batch.is_empty() {
                self.push_gossip(to, std::mem::take(&mut batch), send_back, size);
                size = 0;
            }
            size += s;
            batch.push((k, env));
        }
        if !batch.is_empty() {
            self.push_gossip(to, batch, send_back, size);
        }
    }

    fn push_gossip(
        &mut self,
        to: &UniqueAddress,
        entries: Vec<(String, SerializedEnvelope)>,
        send_back: bool,
        size: usize,
    ) {
        self.stats.gossip_entries_sent += entries.len() as u64;
        let lane = if size > self.settings.max_message_bytes {
            Lane::Large
        } else {
            Lane::Ordinary
        };
        self.out.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane,
            message: ReplicatorMessage::Gossip { entries, send_back },
        });
    }

    /// A `Status`: answer with what differs, ask for what is missing here.
    pub(super) fn receive_status(
        &mut self,
        from: &UniqueAddress,
        digests: Vec<(String, Digest)>,
        chunk: u32,
        total_chunks: u32,
    ) {
        if !self.active || total_chunks == 0 || chunk >= total_chunks {
            return;
        }
        let theirs: BTreeMap<String, Digest> = digests
            .into_iter()
            .filter(|(k, _)| check_key_id(k).is_ok())
            .collect();
        let mut different = Vec::new();
        for (k, d) in &theirs {
            if let Some(e) = self.data.get_mut(k) {
                if e.digest() != *d {
                    different.push(k.clone());
                }
            }
        }
        let mine: BTreeSet<&String> = self
            .data
            .keys()
            .filter(|k| total_chunks == 1 || chunk_of(k, total_chunks) == chunk)
            .collect();
        let their_missing: Vec<String> = mine
            .iter()
            .filter(|k| !theirs.contains_key(**k))
            .map(|k| (*k).clone())
            .collect();
        let my_missing: Vec<(String, Digest)> = theirs
            .iter()
            .filter(|(k, d)| **d != Digest::NOT_FOUND && !self.data.contains_key(*k))
            .map(|(k, _)| (k.clone(), Digest::NOT_FOUND))
            .collect();
        let send_back = !different.is_empty();
        let keys: Vec<String> = different
            .into_iter()
            .chain(their_missing)
            .take(self.settings.max_delta_elements.max(1))
            .collect();
        if !keys.is_empty() {
            self.send_gossip(from, keys, send_back);
        }
        if !my_missing.is_empty() {
            self.send_status(from, my_missing, chunk, total_chunks);
        }
    }

    /// A `Gossip`: merge each envelope; with `send_back`, answer with ours where they
    /// still differ.
    pub(super) fn receive_gossip(
        &mut self,
        from: &UniqueAddress,
        entries: Vec<(String, SerializedEnvelope)>,
        send_back: bool,
    ) {
        if !self.active {
            return;
        }
        let mut reply = Vec::new();
        for (k, s) in entries {
            if check_key_id(&k).is_err() {
                self.stats.bad_values += 1;
                continue;
            }
            let Some(env) = self.decode_envelope(&s) else {
                continue;
            };
            self.stats.gossip_entries_received += 1;
            let theirs = if send_back { Some(env.digest()) } else { None };
            if !self.write_local(&k, env) {
                continue;
            }
            if let Some(d) = theirs {
                if self.data.get_mut(&k).is_some_and(|e| e.digest() != d) {
                    reply.push(k);
                }
            }
        }
        if !reply.is_empty() {
            self.send_gossip(from, reply, false);
        }
    }
}

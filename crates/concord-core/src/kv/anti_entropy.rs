//! Anti-entropy: two replicas of the same segments compare a hash tree of what they hold
//! and exchange the versions that differ — repairing keys that reads never touch (Dynamo
//! §4.7 uses Merkle trees per key range; Riak's active anti-entropy likewise).
//!
//! The tree has three levels: **groups** (segment, n) — the keys one preference list holds
//! — whose hashes are the XOR of their 64 **buckets**' hashes, which are the XOR of their
//! **keys**' contributions (see [`super::store`]). One exchange between an initiator I and
//! a responder R, over the groups both own on the ring:
//!
//! 1. I → R `AeGroups`: I's group hashes;
//! 2. R → I `AeBuckets`: R's leaves of up to 64 groups that differ;
//! 3. I → R `AeKeys`: I's (key, digest) pairs in the buckets that differ (up to 20 000);
//! 4. R → I `AeObjects`: R's versions I lacks or holds differently (up to
//!    `transfer-batch-size` of values), and the keys R wants;
//! 5. I → R `AeWanted`: I's versions of those.
//!
//! Both sides merge what they get, so after an exchange both hold the merge of the two
//! versions of every key compared. An exchange that found differences is followed at once
//! by the next with the same peer, until their groups are equal.
//!
//! **New owners.** When the ring makes this node an owner of a segment (it joined, or a
//! member left or was removed) the segment is *pending* until an exchange with each
//! co-owner found their groups equal. While a segment is pending this node's "not found"
//! for its keys does not count towards a read's R (it may simply not have received them
//! yet). A node's first ring makes every segment it owns pending (after a restart its
//! copies may be stale).

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::kv::message::{BucketKeys, GroupBuckets, GroupHash};
use crate::kv::object::{Versioned, MAX_N};
use crate::kv::ring::{BUCKETS, SEGMENTS};
use crate::kv::store::Update;
use crate::kv::{limits, KvMachine, KvMessage, KvStorage};

/// Exchanges one node starts at once.
const CONCURRENT_EXCHANGES: usize = 2;

impl<S: KvStorage> KvMachine<S> {
    /// True if `self` and `peer` both own `segment` for `n`.
    fn shares(&self, peer: &UniqueAddress, segment: u16, n: u8) -> bool {
        self.ring.owns(&self.self_node, segment, n) && self.ring.owns(peer, segment, n)
    }

    /// The segments `self` and `peer` both own for the default `n`.
    fn shared_segments(&self, peer: &UniqueAddress) -> Vec<u16> {
        let n = self.settings.n;
        (0..SEGMENTS).filter(|s| self.shares(peer, *s, n)).collect()
    }

    /// The members that own a segment with this node (for the default `n` or any `n` it
    /// holds keys with); computed once per ring and largest `n`.
    fn co_owners(&mut self) -> BTreeSet<UniqueAddress> {
        let n = self
            .store
            .groups()
            .map(|((_, n), _, _)| n)
            .chain([self.settings.n])
            .max()
            .unwrap_or(self.settings.n)
            .min(MAX_N);
        if let Some((cached_n, co)) = &self.ae.co_owners {
            if *cached_n == n {
                return co.clone();
            }
        }
        let mut out = BTreeSet::new();
        for s in 0..SEGMENTS {
            let prefs = self.ring.preference_list(s, n);
            if prefs.contains(&&self.self_node) {
                out.extend(prefs.into_iter().filter(|m| **m != self.self_node).cloned());
            }
        }
        self.ae.co_owners = Some((n, out.clone()));
        out
    }

    /// Starts exchanges: at once with peers this node is pending on or whose last exchange
    /// found differences; one with the next co-owner in rotation per
    /// `anti-entropy-interval`. Returns when to tick next, ms.
    pub(super) fn anti_entropy_tick(&mut self, now_ms: u64) -> u64 {
        let timeout = self.settings.request_timeout_ms;
        self.ae
            .sessions
            .retain(|_, (_, at)| at.saturating_add(timeout) > now_ms);
        let interval = self.settings.anti_entropy_interval_ms.max(1);
        let periodic_due = self
            .ae
            .last_periodic_ms
            .is_none_or(|t| now_ms >= t.saturating_add(interval));
        if periodic_due {
            self.ae.last_periodic_ms = Some(now_ms);
        }
        let next_periodic = self
            .ae
            .last_periodic_ms
            .map_or(now_ms, |t| t.saturating_add(interval));
        if !self.ring.members().contains(&self.self_node) {
            return next_periodic.max(now_ms + 1);
        }
        let co = self.co_owners();
        let busy: BTreeSet<UniqueAddress> =
            self.ae.sessions.values().map(|(p, _)| p.clone()).collect();
        let urgent: BTreeSet<UniqueAddress> = self
            .ae
            .pending
            .values()
            .flatten()
            .chain(self.ae.again.iter())
            .filter(|p| co.contains(*p))
            .cloned()
            .collect();
        let rotation: Vec<UniqueAddress> = match &self.ae.last_peer {
            Some(last) => co
                .range::<UniqueAddress, _>((
                    std::ops::Bound::Excluded(last),
                    std::ops::Bound::Unbounded,
                ))
                .chain(co.iter())
                .cloned()
                .collect(),
            None => co.iter().cloned().collect(),
        };
        let mut periodic_left = periodic_due;
        for peer in urgent.iter().cloned().chain(rotation) {
            if self.ae.sessions.len() >= CONCURRENT_EXCHANGES {
                break;
            }
            if busy.contains(&peer) || !self.is_reachable(&peer) {
                continue;
            }
            if !urgent.contains(&peer) {
                if !periodic_left {
                    continue;
                }
                periodic_left = false;
                self.ae.last_peer = Some(peer.clone());
            }
            if self.ae.sessions.values().any(|(p, _)| *p == peer) {
                continue;
            }
            self.start_exchange(now_ms, &peer);
        }
        if urgent.is_empty() {
            next_periodic.max(now_ms + 1)
        } else {
            next_periodic.min(now_ms + super::TICK_MS).max(now_ms + 1)
        }
    }

    fn start_exchange(&mut self, now_ms: u64, peer: &UniqueAddress) {
        self.ae.next_session = self.ae.next_session.wrapping_add(1);
        let session = self.ae.next_session;
        self.ae.sessions.insert(session, (peer.clone(), now_ms));
        self.stats.ae_exchanges += 1;
        let groups: Vec<GroupHash> = self
            .store
            .groups()
            .filter(|((s, n), _, _)| self.shares(peer, *s, *n))
            .map(|((segment, n), hash, _)| GroupHash { segment, n, hash })
            .collect();
        self.send(peer, KvMessage::AeGroups { session, groups });
    }

    /// Responder: compares the initiator's group hashes with its own.
    pub(super) fn ae_groups(
        &mut self,
        _now_ms: u64,
        from: &UniqueAddress,
        session: u64,
        groups: Vec<GroupHash>,
    ) {
        if groups.len() > usize::from(SEGMENTS) * usize::from(MAX_N) {
            self.stats.invalid_messages += 1;
            return;
        }
        let theirs: BTreeMap<(u16, u8), u64> = groups
            .into_iter()
            .filter(|g| g.segment < SEGMENTS && self.shares(from, g.segment, g.n))
            .map(|g| ((g.segment, g.n), g.hash))
            .collect();
        let mine: BTreeMap<(u16, u8), u64> = self
            .store
            .groups()
            .filter(|((s, n), _, _)| self.shares(from, *s, *n))
            .map(|(g, h, _)| (g, h))
            .collect();
        let differing: BTreeSet<(u16, u8)> = theirs
            .keys()
            .chain(mine.keys())
            .filter(|g| theirs.get(g).copied().unwrap_or(0) != mine.get(g).copied().unwrap_or(0))
            .copied()
            .collect();
        let differing_segments: BTreeSet<u16> = differing.iter().map(|(s, _)| *s).collect();
        for s in self.shared_segments(from) {
            if !differing_segments.contains(&s) {
                self.ae.synced(from, s);
            }
        }
        let truncated = differing.len() > limits::AE_GROUPS_PER_EXCHANGE;
        let groups = differing
            .into_iter()
            .take(limits::AE_GROUPS_PER_EXCHANGE)
            .map(|(segment, n)| GroupBuckets {
                segment,
                n,
                buckets: self.store.bucket_hashes((segment, n)),
            })
            .collect();
        self.send(
            from,
            KvMessage::AeBuckets {
                session,
                groups,
                truncated,
            },
        );
    }

    /// Initiator: the groups that differ, with the responder's leaves.
    pub(super) fn ae_buckets(
        &mut self,
        _now_ms: u64,
        from: &UniqueAddress,
        session: u64,
        groups: Vec<GroupBuckets>,
        truncated: bool,
    ) {
        if self.ae.sessions.get(&session).map(|(p, _)| p) != Some(from) {
            self.stats.invalid_messages += 1;
            return;
        }
        let listed: BTreeSet<u16> = groups.iter().map(|g| g.segment).collect();
        let last = listed.last().copied();
        for s in self.shared_segments(from) {
            let proven_equal = !listed.contains(&s) && (!truncated || last.is_some_and(|l| s < l));
            if proven_equal {
                self.ae.synced(from, s);
            }
        }
        if groups.is_empty() {
            self.ae.sessions.remove(&session);
            self.ae.again.remove(from);
            return;
        }
        self.stats.ae_exchanges_with_differences += 1;
        self.ae.again.insert(from.clone());
        let mut buckets = Vec::new();
        let mut keys = 0usize;
        'groups: for g in groups.into_iter().take(limits::AE_GROUPS_PER_EXCHANGE) {
            if g.segment >= SEGMENTS || !self.shares(from, g.segment, g.n) {
                continue;
            }
            let theirs: BTreeMap<u8, u64> = g.buckets.into_iter().collect();
            let mine: BTreeMap<u8, u64> = self
                .store
                .bucket_hashes((g.segment, g.n))
                .into_iter()
                .collect();
            for b in 0..BUCKETS {
                if theirs.get(&b).copied().unwrap_or(0) == mine.get(&b).copied().unwrap_or(0) {
                    continue;
                }
                match self.store.bucket_digests((g.segment, g.n), b) {
                    Ok(k) => {
                        keys += k.len();
                        buckets.push(BucketKeys {
                            segment: g.segment,
                            n: g.n,
                            bucket: b,
                            keys: k,
                        });
                    }
                    Err(_) => {
                        self.stats.storage_errors += 1;
                        break 'groups;
                    }
                }
                if keys >= limits::AE_KEYS_PER_EXCHANGE {
                    break 'groups;
                }
            }
        }
        self.send(from, KvMessage::AeKeys { session, buckets });
    }

    /// Responder: the initiator's keys in the differing buckets.
    pub(super) fn ae_keys(
        &mut self,
        _now_ms: u64,
        from: &UniqueAddress,
        session: u64,
        buckets: Vec<BucketKeys>,
    ) {
        let total: usize = buckets.iter().map(|b| b.keys.len()).sum();
        if buckets.len() > limits::AE_GROUPS_PER_EXCHANGE * usize::from(BUCKETS)
            || total > limits::AE_KEYS_PER_EXCHANGE * 2
        {
            self.stats.invalid_messages += 1;
            return;
        }
        let budget = self.settings.transfer_batch_bytes;
        let max_key = self.settings.max_key_bytes;
        let mut bytes = 0usize;
        let mut objects = Vec::new();
        let mut want = Vec::new();
        for bk in buckets {
            if bk.segment >= SEGMENTS
                || bk.bucket >= BUCKETS
                || !self.shares(from, bk.segment, bk.n)
            {
                continue;
            }
            let mine: BTreeMap<String, u64> =
                match self.store.bucket_digests((bk.segment, bk.n), bk.bucket) {
                    Ok(m) => m.into_iter().collect(),
                    Err(_) => {
                        self.stats.storage_errors += 1;
                        break;
                    }
                };
            let theirs: BTreeMap<&str, u64> =
                bk.keys.iter().map(|(k, d)| (k.as_str(), *d)).collect();
            for (k, d) in &mine {
                if theirs.get(k.as_str()) == Some(d) || bytes >= budget {
                    continue;
                }
                if let Ok(Some(o)) = self.store.get(k) {
                    bytes = bytes.saturating_add(o.value_bytes() + k.len());
                    objects.push((k.clone(), o));
                }
            }
            for (k, d) in bk.keys {
                if k.len() <= max_key && mine.get(&k) != Some(&d) {
                    want.push(k);
                }
            }
        }
        self.send(
            from,
            KvMessage::AeObjects {
                session,
                objects,
                want,
            },
        );
    }

    /// Merges versions from a peer; true for each that changed a key.
    fn merge_all(&mut self, objects: Vec<(String, Versioned)>) -> u64 {
        let mut changed = 0;
        for (k, o) in objects {
            if k.is_empty() || k.len() > self.settings.max_key_bytes || o.validate().is_err() {
                self.stats.invalid_messages += 1;
                continue;
            }
            match self.store.apply(&k, Update::Merge(&o)) {
                Ok(a) if a.changed => changed += 1,
                Ok(_) => {}
                Err(_) => self.stats.storage_errors += 1,
            }
        }
        changed
    }

    /// Initiator: the responder's versions, and the keys it wants.
    pub(super) fn ae_objects(
        &mut self,
        _now_ms: u64,
        from: &UniqueAddress,
        session: u64,
        objects: Vec<(String, Versioned)>,
        want: Vec<String>,
    ) {
        if self.ae.sessions.get(&session).map(|(p, _)| p) != Some(from) {
            self.stats.invalid_messages += 1;
            return;
        }
        self.ae.sessions.remove(&session);
        let repaired = self.merge_all(objects);
        self.stats.ae_keys_repaired += repaired;
        let budget = self.settings.transfer_batch_bytes;
        let mut bytes = 0usize;
        let mut out = Vec::new();
        for k in want.into_iter().take(limits::AE_KEYS_PER_EXCHANGE * 2) {
            if bytes >= budget {
                break;
            }
            if let Ok(Some(o)) = self.store.get(&k) {
                bytes = bytes.saturating_add(o.value_bytes() + k.len());
                out.push((k, o));
            }
        }
        if !out.is_empty() {
            self.send(
                from,
                KvMessage::AeWanted {
                    session,
                    objects: out,
                },
            );
        }
    }

    /// Responder: the initiator's versions of the keys it wanted.
    pub(super) fn ae_wanted(
        &mut self,
        _now_ms: u64,
        _from: &UniqueAddress,
        _session: u64,
        objects: Vec<(String, Versioned)>,
    ) {
        let repaired = self.merge_all(objects);
        self.stats.ae_keys_repaired += repaired;
    }
}

//! The coordinator side of [`KvMachine`]: a client's put, get or delete taken by any node,
//! sent to the key's replicas and answered once its quorum is reached (Dynamo §4.5).
//!
//! **Targets.** The key's preference list for its `n` (the first `n` members of its
//! segment's walk on the ring); a primary that no member can reach is replaced by the next
//! reachable member of the walk — a **fallback** that stores a hinted copy and hands it to
//! the primaries once they can be reached. Without `sloppy-quorum` only primaries count
//! towards W and R.
//!
//! **Writes** are coordinated by a target of the key — a node that is not one forwards the
//! write to the first target (Riak's put forwarding). The coordinator applies the write to
//! its local copy ([`super::ReplicaStore::coordinate`]: a fresh dot of the key's local
//! actor, the client's context) and sends the resulting version to the other targets,
//! which merge it and acknowledge once durable. The write succeeds when W
//! acknowledgements counted; it fails with every replica's answer (or silence) named when
//! that can no longer happen before the deadline — replicas that stored it keep it (as in
//! Dynamo, a failed write may still be visible).
//!
//! **Reads** count a replica's version, or its "not found" when it is a primary that has
//! synchronised its segment since it became an owner; the answer is the merge of every
//! version received. When every replica answered (or the deadline passed) each primary
//! that answered an older version or none is sent the merged one (**read repair**). A
//! tombstone that every primary holds, or that every primary acknowledged, is removed
//! after `tombstone-grace` (**reaped**).

mod read;
mod write;

use crate::address::UniqueAddress;
use crate::ddata::VersionVector;
use crate::kv::object::MAX_N;
use crate::kv::ring::{key_hash, segment_of};
use crate::kv::settings::Quorum;
use crate::kv::store::Update;
use crate::kv::{limits, KvError, KvMachine, KvMessage, KvStorage};

use crate::kv::requests::{quorum_failure, Client, Outcome, Reap, Request};

impl<S: KvStorage> KvMachine<S> {
    fn check_key(&self, key: &str) -> Result<(), KvError> {
        if key.is_empty() {
            return Err(KvError::Invalid("the key is empty".into()));
        }
        if key.len() > self.settings.max_key_bytes {
            return Err(KvError::Invalid(format!(
                "the key is {} bytes, over the limit of {}",
                key.len(),
                self.settings.max_key_bytes
            )));
        }
        Ok(())
    }

    fn resolve_n(&self, n: Option<u8>) -> Result<u8, KvError> {
        let n = n.unwrap_or(self.settings.n);
        if (1..=MAX_N).contains(&n) {
            Ok(n)
        } else {
            Err(KvError::Invalid(format!(
                "n must be from 1 to {MAX_N}, not {n}"
            )))
        }
    }

    fn resolve_quorum(name: &str, q: Quorum, n: u8) -> Result<u8, KvError> {
        q.resolve(n)
            .ok_or_else(|| KvError::Invalid(format!("{name}={q} is not possible with n={n}")))
    }

    /// The key's preference list and the targets of a request: each reachable primary,
    /// and for each unreachable one the next reachable member of the walk (a fallback).
    fn targets(&self, key: &str, n: u8) -> (Vec<UniqueAddress>, Vec<(UniqueAddress, bool)>) {
        let segment = segment_of(key_hash(key));
        let walk: Vec<&UniqueAddress> = self.ring.walk(segment).collect();
        let split = usize::from(n).min(walk.len());
        let (primaries, rest) = walk.split_at(split);
        let mut fallbacks = rest.iter().filter(|m| self.is_reachable(m));
        let mut targets = Vec::with_capacity(split);
        for p in primaries {
            if self.is_reachable(p) {
                targets.push(((*p).clone(), true));
            } else if let Some(f) = fallbacks.next() {
                targets.push(((*f).clone(), false));
            }
        }
        (primaries.iter().map(|p| (*p).clone()).collect(), targets)
    }

    /// Refuses a new request when too many are in progress.
    fn admit(&mut self) -> Result<(), KvError> {
        if self.requests.len() >= self.settings.max_pending_requests {
            self.stats.overloaded += 1;
            return Err(KvError::Overloaded(self.requests.len()));
        }
        Ok(())
    }
    /// Ends every request whose deadline passed.
    pub(in crate::kv) fn expire_requests(&mut self, now_ms: u64) {
        let due: Vec<u64> = self
            .requests
            .deadlines
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .map(|(_, id)| *id)
            .collect();
        for id in due {
            match self.requests.map.get(&id) {
                Some(Request::Write(_)) => self.check_write(now_ms, id, true),
                Some(Request::Read(_)) => self.check_read(now_ms, id, true),
                Some(Request::Forwarded { .. }) => {
                    if let Some(Request::Forwarded { client, to, w, .. }) = self.requests.remove(id)
                    {
                        let failure =
                            quorum_failure("w", w, std::iter::once((&to, Outcome::Waiting)));
                        self.answer_write(
                            Client::Local(client),
                            Err(KvError::Unavailable(failure)),
                        );
                    }
                }
                None => {}
            }
        }
    }

    fn schedule_reap(
        &mut self,
        now_ms: u64,
        key: String,
        clock: VersionVector,
        replicas: Vec<UniqueAddress>,
    ) {
        if self.requests.reaps.len() >= limits::MAX_PENDING_REAPS {
            // The tombstone stays; a later read that finds it everywhere reaps it.
            return;
        }
        self.requests.reap_seq += 1;
        let due = now_ms.saturating_add(self.settings.tombstone_grace_ms);
        self.requests.reaps.insert(
            (due, self.requests.reap_seq),
            Reap {
                key,
                clock,
                replicas,
            },
        );
    }

    /// Sends the reaps whose grace period passed.
    pub(in crate::kv) fn run_due_reaps(&mut self, now_ms: u64) {
        while let Some(entry) = self.requests.reaps.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let reap = entry.remove();
            for node in &reap.replicas {
                if *node == self.self_node {
                    match self.store.apply(&reap.key, Update::Reap(&reap.clock)) {
                        Ok(a) if a.changed => self.stats.tombstones_reaped += 1,
                        Ok(_) => {}
                        Err(_) => self.stats.storage_errors += 1,
                    }
                } else {
                    self.send(
                        node,
                        KvMessage::Reap {
                            key: reap.key.clone(),
                            clock: reap.clock.clone(),
                        },
                    );
                }
            }
        }
    }
}

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

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::ddata::VersionVector;
use crate::kv::object::{Versioned, MAX_CLOCK_ENTRIES, MAX_N};
use crate::kv::ring::{key_hash, segment_of};
use crate::kv::settings::Quorum;
use crate::kv::store::Update;
use crate::kv::{
    addresses, limits, KvError, KvEvent, KvMachine, KvMessage, KvStorage, QuorumFailure,
    ReadOptions, ReadResult, WriteOptions,
};

/// The requests a node coordinates, their deadlines, and tombstones waiting to be reaped.
#[derive(Default)]
pub(crate) struct Requests {
    map: BTreeMap<u64, Request>,
    deadlines: BTreeSet<(u64, u64)>,
    next: u64,
    reaps: BTreeMap<(u64, u64), Reap>,
    reap_seq: u64,
}

impl Requests {
    /// Requests in progress, count.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn insert(&mut self, deadline: u64, r: Request) -> u64 {
        self.next = self.next.wrapping_add(1);
        let id = self.next;
        self.deadlines.insert((deadline, id));
        self.map.insert(id, r);
        id
    }

    fn remove(&mut self, id: u64) -> Option<Request> {
        let r = self.map.remove(&id)?;
        self.deadlines.remove(&(r.deadline(), id));
        Some(r)
    }
}

struct Reap {
    key: String,
    clock: VersionVector,
    replicas: Vec<UniqueAddress>,
}

enum Request {
    Write(WriteRequest),
    Read(ReadRequest),
    /// A write this node forwarded to a replica of its key.
    Forwarded {
        client: u64,
        to: UniqueAddress,
        w: u8,
        deadline: u64,
    },
}

impl Request {
    fn deadline(&self) -> u64 {
        match self {
            Request::Write(w) => w.deadline,
            Request::Read(r) => r.deadline,
            Request::Forwarded { deadline, .. } => *deadline,
        }
    }
}

/// Who a write answers.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Client {
    /// This node's runtime (its request id).
    Local(u64),
    /// The node that forwarded the write (its request id there).
    Remote(UniqueAddress, u64),
}

#[derive(Clone, Debug, PartialEq)]
enum TargetState {
    Waiting,
    Acked,
    Failed(String),
}

struct WriteTarget {
    node: UniqueAddress,
    primary: bool,
    state: TargetState,
}

struct WriteRequest {
    client: Client,
    key: String,
    /// The version after the write (its clock is what a reap of a tombstone needs).
    object: Versioned,
    needed: u8,
    /// The key's whole preference list (for reaping a tombstone every primary has).
    primaries: Vec<UniqueAddress>,
    targets: Vec<WriteTarget>,
    answered: bool,
    deadline: u64,
}

#[derive(Clone, Debug, PartialEq)]
enum ReadState {
    Waiting,
    Replied {
        object: Option<Versioned>,
        complete: bool,
    },
    Failed(String),
}

struct ReadTarget {
    node: UniqueAddress,
    primary: bool,
    state: ReadState,
}

/// What a read is for.
#[derive(Clone, Copy)]
enum Then {
    /// Answer the client.
    Answer,
    /// A delete without a context: write a tombstone over what the read found.
    Delete(WriteOptions),
}

struct ReadRequest {
    client: u64,
    key: String,
    needed: u8,
    primaries: Vec<UniqueAddress>,
    targets: Vec<ReadTarget>,
    answered: bool,
    deadline: u64,
    then: Then,
}

/// The merge of every version the replicas answered.
fn merge_replies(targets: &[ReadTarget]) -> Option<Versioned> {
    targets
        .iter()
        .filter_map(|t| match &t.state {
            ReadState::Replied {
                object: Some(o), ..
            } => Some(o),
            _ => None,
        })
        .fold(None::<Versioned>, |acc, o| {
            Some(match acc {
                Some(mut a) => {
                    a.merge(o);
                    a
                }
                None => o.clone(),
            })
        })
}

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

    pub(super) fn coordinate_write(
        &mut self,
        now_ms: u64,
        client: u64,
        key: String,
        value: Option<Vec<u8>>,
        context: Option<VersionVector>,
        options: WriteOptions,
    ) {
        let checked = (|| {
            let n = self.resolve_n(options.n)?;
            let w = Self::resolve_quorum("w", options.w.unwrap_or(self.settings.w), n)?;
            self.check_write_request(&key, value.as_deref(), context.as_ref())?;
            self.admit()?;
            Ok((n, w))
        })();
        match checked {
            Ok((n, w)) => self.route_write(
                now_ms,
                Client::Local(client),
                key,
                value,
                context.unwrap_or_default(),
                n,
                w,
            ),
            Err(e) => self.answer_write(Client::Local(client), Err(e)),
        }
    }

    /// Checks a write's key, value and context against the limits.
    fn check_write_request(
        &self,
        key: &str,
        value: Option<&[u8]>,
        context: Option<&VersionVector>,
    ) -> Result<(), KvError> {
        self.check_key(key)?;
        if let Some(v) = value {
            if v.len() > self.settings.max_value_bytes {
                return Err(KvError::TooLarge(format!(
                    "the value is {} bytes, over kv.max-value-size ({} bytes)",
                    v.len(),
                    self.settings.max_value_bytes
                )));
            }
        }
        if context.is_some_and(|c| c.len() > MAX_CLOCK_ENTRIES) {
            return Err(KvError::Invalid("the context has too many entries".into()));
        }
        Ok(())
    }

    /// Answers a write: this node's runtime, or the node that forwarded it.
    fn answer_write(&mut self, client: Client, result: Result<(), KvError>) {
        match client {
            Client::Local(request) => {
                match &result {
                    Ok(()) => self.stats.writes_ok += 1,
                    Err(_) => self.stats.writes_failed += 1,
                }
                self.emit(KvEvent::WriteDone { request, result });
            }
            Client::Remote(node, request) => {
                self.send(&node, KvMessage::ForwardReply { request, result })
            }
        }
    }

    /// Coordinates the write here if this node is one of its targets (or the write was
    /// forwarded to it); forwards it to the first target otherwise.
    #[allow(clippy::too_many_arguments)]
    fn route_write(
        &mut self,
        now_ms: u64,
        client: Client,
        key: String,
        value: Option<Vec<u8>>,
        context: VersionVector,
        n: u8,
        w: u8,
    ) {
        let (primaries, targets) = self.targets(&key, n);
        let here = targets.iter().any(|(t, _)| *t == self.self_node);
        match (&client, targets.first()) {
            (Client::Local(request), Some((to, _))) if !here => {
                let to = to.clone();
                let deadline = now_ms.saturating_add(self.settings.request_timeout_ms);
                let id = self.requests.insert(
                    deadline,
                    Request::Forwarded {
                        client: *request,
                        to: to.clone(),
                        w,
                        deadline,
                    },
                );
                self.send(
                    &to,
                    KvMessage::Forward {
                        request: id,
                        key,
                        value,
                        context,
                        n,
                        w,
                    },
                );
            }
            _ => self.start_write(
                now_ms,
                client,
                key,
                value,
                context,
                (n, w),
                primaries,
                targets,
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_write(
        &mut self,
        now_ms: u64,
        client: Client,
        key: String,
        value: Option<Vec<u8>>,
        context: VersionVector,
        (n, w): (u8, u8),
        primaries: Vec<UniqueAddress>,
        targets: Vec<(UniqueAddress, bool)>,
    ) {
        let max = self.settings.max_object_bytes;
        let object = match self.store.coordinate(&key, context, value, n, max) {
            Ok(o) => o,
            Err(e) => {
                if matches!(e, crate::kv::store::ApplyError::Storage(_)) {
                    self.stats.storage_errors += 1;
                    return self.answer_write(client, Err(KvError::Storage(e.to_string())));
                }
                return self.answer_write(client, Err(KvError::TooLarge(e.to_string())));
            }
        };
        let request = WriteRequest {
            client,
            key: key.clone(),
            object: object.clone(),
            needed: w,
            primaries,
            targets: targets
                .iter()
                .map(|(node, primary)| WriteTarget {
                    node: node.clone(),
                    primary: *primary,
                    // This node's copy is written (durable at the next commit).
                    state: if *node == self.self_node {
                        TargetState::Acked
                    } else {
                        TargetState::Waiting
                    },
                })
                .collect(),
            answered: false,
            deadline: now_ms.saturating_add(self.settings.request_timeout_ms),
        };
        let deadline = request.deadline;
        let id = self.requests.insert(deadline, Request::Write(request));
        for (node, primary) in targets {
            if !primary {
                self.stats.hinted_writes += 1;
            }
            if node != self.self_node {
                self.send(
                    &node,
                    KvMessage::Put {
                        request: id,
                        key: key.clone(),
                        object: object.clone(),
                    },
                );
            }
        }
        self.check_write(now_ms, id, false);
    }

    /// A node that holds no replica of a key forwarded a write of it here.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_received(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        request: u64,
        key: String,
        value: Option<Vec<u8>>,
        context: VersionVector,
        n: u8,
        w: u8,
    ) {
        let client = Client::Remote(from.clone(), request);
        let checked = (|| {
            if n == 0 || n > MAX_N || w == 0 || w > n {
                return Err(KvError::Invalid(format!("n={n}, w={w}")));
            }
            self.check_write_request(&key, value.as_deref(), Some(&context))?;
            self.admit()
        })();
        match checked {
            Ok(()) => self.route_write(now_ms, client, key, value, context, n, w),
            Err(e) => self.answer_write(client, Err(e)),
        }
    }

    /// The replica this node forwarded a write to answered.
    pub(super) fn forward_replied(
        &mut self,
        from: &UniqueAddress,
        request: u64,
        result: Result<(), KvError>,
    ) {
        if !matches!(self.requests.map.get(&request), Some(Request::Forwarded { to, .. }) if to == from)
        {
            return;
        }
        if let Some(Request::Forwarded { client, .. }) = self.requests.remove(request) {
            self.answer_write(Client::Local(client), result);
        }
    }

    fn note_write_reply(&mut self, id: u64, from: &UniqueAddress, result: Result<(), String>) {
        if let Some(Request::Write(w)) = self.requests.map.get_mut(&id) {
            if let Some(t) = w
                .targets
                .iter_mut()
                .find(|t| &t.node == from && t.state == TargetState::Waiting)
            {
                t.state = match result {
                    Ok(()) => TargetState::Acked,
                    Err(why) => TargetState::Failed(why),
                };
            }
        }
    }

    /// A replica answered a `Put`.
    pub(super) fn write_replied(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        request: u64,
        result: Result<(), String>,
    ) {
        self.note_write_reply(request, from, result);
        self.check_write(now_ms, request, false);
    }

    /// Answers the write once its quorum is reached (or cannot be), and forgets it once
    /// every target answered or the deadline passed.
    fn check_write(&mut self, now_ms: u64, id: u64, expired: bool) {
        let sloppy = self.settings.sloppy_quorum;
        let Some(Request::Write(w)) = self.requests.map.get_mut(&id) else {
            return;
        };
        let counts = |t: &WriteTarget| t.state == TargetState::Acked && (t.primary || sloppy);
        let counted = w.targets.iter().filter(|t| counts(t)).count();
        let done = expired || w.targets.iter().all(|t| t.state != TargetState::Waiting);
        let mut answer = None;
        if !w.answered && counted >= usize::from(w.needed) {
            w.answered = true;
            answer = Some(Ok(()));
        } else if !w.answered && done {
            w.answered = true;
            answer = Some(Err(KvError::Unavailable(QuorumFailure {
                quorum: "w",
                needed: w.needed,
                counted: addresses(w.targets.iter().filter(|t| counts(t)).map(|t| &t.node)),
                uncounted: addresses(
                    w.targets
                        .iter()
                        .filter(|t| t.state == TargetState::Acked && !counts(t))
                        .map(|t| &t.node),
                ),
                failed: w
                    .targets
                    .iter()
                    .filter_map(|t| match &t.state {
                        TargetState::Failed(why) => Some((t.node.address.clone(), why.clone())),
                        _ => None,
                    })
                    .collect(),
                unanswered: addresses(
                    w.targets
                        .iter()
                        .filter(|t| t.state == TargetState::Waiting)
                        .map(|t| &t.node),
                ),
            })));
        }
        let client = w.client.clone();
        if let Some(result) = answer {
            self.answer_write(client, result);
        }
        if done {
            if let Some(Request::Write(w)) = self.requests.remove(id) {
                let every_primary = !w.primaries.is_empty()
                    && w.primaries.iter().all(|p| {
                        w.targets
                            .iter()
                            .any(|t| &t.node == p && t.primary && t.state == TargetState::Acked)
                    });
                if w.object.is_deleted() && every_primary {
                    self.schedule_reap(now_ms, w.key, w.object.clock().clone(), w.primaries);
                }
            }
        }
    }

    pub(super) fn coordinate_read(
        &mut self,
        now_ms: u64,
        client: u64,
        key: String,
        options: ReadOptions,
    ) {
        let checked = (|| {
            self.check_key(&key)?;
            let n = self.resolve_n(options.n)?;
            let r = Self::resolve_quorum("r", options.r.unwrap_or(self.settings.r), n)?;
            self.admit()?;
            Ok((n, r))
        })();
        match checked {
            Ok((n, r)) => self.start_read(now_ms, client, key, n, r, Then::Answer),
            Err(e) => {
                self.stats.reads_failed += 1;
                self.emit(KvEvent::ReadDone {
                    request: client,
                    result: Err(e),
                });
            }
        }
    }

    pub(super) fn coordinate_delete_after_read(
        &mut self,
        now_ms: u64,
        client: u64,
        key: String,
        options: WriteOptions,
    ) {
        let checked = (|| {
            self.check_key(&key)?;
            let n = self.resolve_n(options.n)?;
            Self::resolve_quorum("w", options.w.unwrap_or(self.settings.w), n)?;
            let r = Self::resolve_quorum("r", self.settings.r, n)?;
            self.admit()?;
            Ok((n, r))
        })();
        match checked {
            Ok((n, r)) => self.start_read(now_ms, client, key, n, r, Then::Delete(options)),
            Err(e) => self.answer_write(Client::Local(client), Err(e)),
        }
    }

    fn start_read(&mut self, now_ms: u64, client: u64, key: String, n: u8, r: u8, then: Then) {
        let (primaries, targets) = self.targets(&key, n);
        let request = ReadRequest {
            client,
            key: key.clone(),
            needed: r,
            primaries,
            targets: targets
                .iter()
                .map(|(node, primary)| ReadTarget {
                    node: node.clone(),
                    primary: *primary,
                    state: ReadState::Waiting,
                })
                .collect(),
            answered: false,
            deadline: now_ms.saturating_add(self.settings.request_timeout_ms),
            then,
        };
        let id = self
            .requests
            .insert(request.deadline, Request::Read(request));
        for (node, _) in targets {
            if node == self.self_node {
                let result = self.store.get(&key).map_err(|e| e.to_string());
                let complete = self.ae.is_complete(segment_of(key_hash(&key)));
                self.note_read_reply(id, &node, result, complete);
            } else {
                self.send(
                    &node,
                    KvMessage::Get {
                        request: id,
                        key: key.clone(),
                    },
                );
            }
        }
        self.check_read(now_ms, id, false);
    }

    fn note_read_reply(
        &mut self,
        id: u64,
        from: &UniqueAddress,
        result: Result<Option<Versioned>, String>,
        complete: bool,
    ) {
        if let Some(Request::Read(r)) = self.requests.map.get_mut(&id) {
            if let Some(t) = r
                .targets
                .iter_mut()
                .find(|t| &t.node == from && t.state == ReadState::Waiting)
            {
                t.state = match result {
                    Ok(object) => ReadState::Replied { object, complete },
                    Err(why) => ReadState::Failed(why),
                };
            }
        }
    }

    /// A replica answered a `Get`.
    pub(super) fn read_replied(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        request: u64,
        result: Result<Option<Versioned>, String>,
        complete: bool,
    ) {
        let result = match result {
            Ok(Some(o)) if o.validate().is_err() => {
                self.stats.invalid_messages += 1;
                Err("invalid version".into())
            }
            r => r,
        };
        self.note_read_reply(request, from, result, complete);
        self.check_read(now_ms, request, false);
    }

    fn check_read(&mut self, now_ms: u64, id: u64, expired: bool) {
        let sloppy = self.settings.sloppy_quorum;
        let Some(Request::Read(r)) = self.requests.map.get_mut(&id) else {
            return;
        };
        let counts = |t: &ReadTarget| match &t.state {
            ReadState::Replied {
                object: Some(_), ..
            } => t.primary || sloppy,
            ReadState::Replied {
                object: None,
                complete,
            } => t.primary && *complete,
            _ => false,
        };
        let counted = r.targets.iter().filter(|t| counts(t)).count();
        let done = expired || r.targets.iter().all(|t| t.state != ReadState::Waiting);
        let mut answer = None;
        if !r.answered && counted >= usize::from(r.needed) {
            r.answered = true;
            answer = Some(Ok(ReadResult {
                object: merge_replies(&r.targets),
            }));
        } else if !r.answered && done {
            r.answered = true;
            answer = Some(Err(KvError::Unavailable(QuorumFailure {
                quorum: "r",
                needed: r.needed,
                counted: addresses(r.targets.iter().filter(|t| counts(t)).map(|t| &t.node)),
                uncounted: addresses(
                    r.targets
                        .iter()
                        .filter(|t| matches!(t.state, ReadState::Replied { .. }) && !counts(t))
                        .map(|t| &t.node),
                ),
                failed: r
                    .targets
                    .iter()
                    .filter_map(|t| match &t.state {
                        ReadState::Failed(why) => Some((t.node.address.clone(), why.clone())),
                        _ => None,
                    })
                    .collect(),
                unanswered: addresses(
                    r.targets
                        .iter()
                        .filter(|t| t.state == ReadState::Waiting)
                        .map(|t| &t.node),
                ),
            })));
        }
        let (client, then, key) = (r.client, r.then, r.key.clone());
        if done {
            self.finish_read(now_ms, id);
        }
        let Some(result) = answer else {
            return;
        };
        match then {
            Then::Answer => {
                match &result {
                    Ok(_) => self.stats.reads_ok += 1,
                    Err(_) => self.stats.reads_failed += 1,
                }
                self.emit(KvEvent::ReadDone {
                    request: client,
                    result,
                });
            }
            Then::Delete(options) => match result {
                Ok(found) if !found.is_not_found() => {
                    let n = self.resolve_n(options.n).unwrap_or(self.settings.n);
                    let w = options.w.unwrap_or(self.settings.w).resolve(n).unwrap_or(n);
                    let context = found.object.map(|o| o.clock().clone()).unwrap_or_default();
                    self.route_write(now_ms, Client::Local(client), key, None, context, n, w);
                }
                Ok(_) => self.answer_write(Client::Local(client), Err(KvError::NotFound)),
                Err(e) => self.answer_write(Client::Local(client), Err(e)),
            },
        }
    }

    /// Every replica answered (or the deadline passed): read repair, and reaping a
    /// tombstone every primary holds.
    fn finish_read(&mut self, now_ms: u64, id: u64) {
        let Some(Request::Read(r)) = self.requests.remove(id) else {
            return;
        };
        let Some(merged) = merge_replies(&r.targets) else {
            return;
        };
        let digest = merged.digest();
        let mut up_to_date = 0usize;
        for t in r.targets.iter().filter(|t| t.primary) {
            let ReadState::Replied { object, .. } = &t.state else {
                continue;
            };
            if object.as_ref().is_some_and(|o| o.digest() == digest) {
                up_to_date += 1;
                continue;
            }
            self.stats.read_repairs += 1;
            if t.node == self.self_node {
                if let Err(e) = self.store.apply(&r.key, Update::Merge(&merged)) {
                    self.stats.storage_errors += 1;
                    tracing::warn!(error = %e, "key-value store: read repair not stored");
                }
            } else {
                self.send(
                    &t.node.clone(),
                    KvMessage::Repair {
                        key: r.key.clone(),
                        object: merged.clone(),
                    },
                );
            }
        }
        if merged.is_deleted() && up_to_date == r.primaries.len() && !r.primaries.is_empty() {
            self.schedule_reap(now_ms, r.key, merged.clock().clone(), r.primaries);
        }
    }

    /// Ends every request whose deadline passed.
    pub(super) fn expire_requests(&mut self, now_ms: u64) {
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
                        let failure = QuorumFailure {
                            quorum: "w",
                            needed: w,
                            counted: Vec::new(),
                            uncounted: Vec::new(),
                            failed: Vec::new(),
                            unanswered: vec![to.address],
                        };
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
    pub(super) fn run_due_reaps(&mut self, now_ms: u64) {
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

//! Reads: sent to the key's targets, answered once R answers counted with the merge of every
//! version received; then read repair of the primaries that answered an older version, and
//! reaping of a tombstone every primary holds. A delete without a context is a read first.

use crate::address::UniqueAddress;
use crate::kv::object::Versioned;
use crate::kv::ring::{key_hash, segment_of};
use crate::kv::store::Update;
use crate::kv::{
    KvError, KvEvent, KvMachine, KvMessage, KvStorage, ReadOptions, ReadResult, WriteOptions,
};

use crate::kv::requests::{
    merge_replies, quorum_failure, Client, Outcome, ReadRequest, ReadState, ReadTarget, Request,
    Then,
};

impl<S: KvStorage> KvMachine<S> {
    pub(in crate::kv) fn coordinate_read(
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

    pub(in crate::kv) fn coordinate_delete_after_read(
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
    pub(in crate::kv) fn read_replied(
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

    pub(super) fn check_read(&mut self, now_ms: u64, id: u64, expired: bool) {
        let sloppy = self.settings.sloppy_quorum;
        let Some(Request::Read(r)) = self.requests.map.get_mut(&id) else {
            return;
        };
        let counted = r
            .targets
            .iter()
            .filter(|t| t.outcome(sloppy) == Outcome::Counted)
            .count();
        let done = expired || r.targets.iter().all(|t| t.state != ReadState::Waiting);
        let mut answer = None;
        if !r.answered && counted >= usize::from(r.needed) {
            r.answered = true;
            answer = Some(Ok(ReadResult {
                object: merge_replies(&r.targets),
            }));
        } else if !r.answered && done {
            r.answered = true;
            answer = Some(Err(KvError::Unavailable(quorum_failure(
                "r",
                r.needed,
                r.targets.iter().map(|t| (&t.node, t.outcome(sloppy))),
            ))));
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
}

//! Writes: a put or delete routed to a target of its key (forwarded if this node is not
//! one), coordinated there — applied to the local copy, the resulting version sent to the
//! other targets — and answered once W acknowledged.

use crate::address::UniqueAddress;
use crate::ddata::VersionVector;
use crate::kv::object::{MAX_CLOCK_ENTRIES, MAX_N};
use crate::kv::{KvError, KvEvent, KvMachine, KvMessage, KvStorage, WriteOptions};

use crate::kv::requests::{
    quorum_failure, Client, Outcome, Request, TargetState, WriteRequest, WriteTarget,
};

impl<S: KvStorage> KvMachine<S> {
    pub(in crate::kv) fn coordinate_write(
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
    pub(super) fn answer_write(&mut self, client: Client, result: Result<(), KvError>) {
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
    pub(super) fn route_write(
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
    pub(in crate::kv) fn forward_received(
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
        // Coordinating a duplicate would write the client's value twice, with two dots.
        let keep = self.settings.request_timeout_ms.saturating_mul(4);
        if !self.requests.first_forward(now_ms, keep, from, request) {
            return;
        }
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
    pub(in crate::kv) fn forward_replied(
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
    pub(in crate::kv) fn write_replied(
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
    pub(super) fn check_write(&mut self, now_ms: u64, id: u64, expired: bool) {
        let sloppy = self.settings.sloppy_quorum;
        let Some(Request::Write(w)) = self.requests.map.get_mut(&id) else {
            return;
        };
        let counted = w
            .targets
            .iter()
            .filter(|t| t.outcome(sloppy) == Outcome::Counted)
            .count();
        let done = expired || w.targets.iter().all(|t| t.state != TargetState::Waiting);
        let mut answer = None;
        if !w.answered && counted >= usize::from(w.needed) {
            w.answered = true;
            answer = Some(Ok(()));
        } else if !w.answered && done {
            w.answered = true;
            answer = Some(Err(KvError::Unavailable(quorum_failure(
                "w",
                w.needed,
                w.targets.iter().map(|t| (&t.node, t.outcome(sloppy))),
            ))));
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
}

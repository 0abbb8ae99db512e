//! The proposer side of [`JournalMachine`]: requests of this node's writers — ballots,
//! rounds to a log's replicas, promises (recovery: the chain and its uncertain tail),
//! accepts and refusals (held rounds and deadlines: `held`).

use super::chain::{self, Answer};
use super::entry::{Ballot, Entry};
use super::message::JournalMessage;
use super::request::{AcceptContent, Op, Phase, Request};
use super::{replicas_digest, JournalError, JournalMachine, JournalOutput, Writer, MAX_PREPARES};
use crate::address::UniqueAddress;
use crate::kv::storage::KvStorage;
use crate::protocol::{Lane, Transmit};

impl<S: KvStorage> JournalMachine<S> {
    fn next_ballot(&mut self, now_ms: u64, above: Ballot) -> Ballot {
        let round = now_ms
            .max(self.last_round.saturating_add(1))
            .max(above.round.saturating_add(1));
        self.last_round = round;
        Ballot {
            round,
            node: self.self_node.uid,
        }
    }

    pub(super) fn start(&mut self, now_ms: u64, caller: u64, log: String, op: Op) {
        let in_flight = self.requests.len() + self.held_requests.len();
        if in_flight >= self.settings.max_in_flight {
            self.finish(
                caller,
                Err(JournalError::Unavailable(format!(
                    "{in_flight} journal requests in flight on this node already",
                ))),
            );
            return;
        }
        let replicas = self.replicas(&log);
        if replicas.is_empty() {
            self.finish(
                caller,
                Err(JournalError::Unavailable(
                    "no member hosts the journal yet".into(),
                )),
            );
            return;
        }
        let mut req = Request {
            caller,
            log,
            op,
            phase: Phase::Single,
            replicas_digest: replicas_digest(&replicas),
            replicas,
            answers: Default::default(),
            snapshots: Default::default(),
            newest_snapshot: None,
            refused: Default::default(),
            unable: Default::default(),
            deadline_ms: now_ms.saturating_add(self.settings.request_timeout_ms),
            local_turn: None,
            holds: 0,
            maybe_stored: false,
        };
        match req.op.clone() {
            Op::Append { write, compact } => match self.writers.get(&req.log).copied() {
                Some(w) if w.next_seq == write.first_seq => {
                    let highest = write.last_seq();
                    req.phase = Phase::Accepting {
                        ballot: w.ballot,
                        highest,
                        page: Vec::new(),
                        learn: vec![(write.first_seq, w.ballot)],
                        accept: AcceptContent {
                            committed: write.first_seq - 1,
                            compact,
                            writes: vec![write],
                        },
                    };
                    self.send_accept(now_ms, req);
                }
                Some(w) => {
                    self.stats.conflicts += 1;
                    self.finish(
                        caller,
                        Err(conflict_next(&req.log, w.next_seq, write.first_seq)),
                    );
                }
                None => self.prepare(now_ms, req, Ballot::ZERO, 1),
            },
            Op::Recover { .. } => self.prepare(now_ms, req, Ballot::ZERO, 1),
            _ => self.send_single(now_ms, req),
        }
    }

    /// Sends the one round of a read, snapshot save or load, or delete.
    pub(super) fn send_single(&mut self, now_ms: u64, req: Request) {
        match req.op.clone() {
            Op::Read {
                from, max_events, ..
            } => self.send_round(now_ms, req, |request, log| JournalMessage::Read {
                request,
                log: log.to_owned(),
                from,
                max_events,
            }),
            Op::SaveSnapshot(snapshot) => {
                self.send_round(now_ms, req, |request, log| JournalMessage::SaveSnapshot {
                    request,
                    log: log.to_owned(),
                    snapshot: snapshot.clone(),
                })
            }
            Op::LoadSnapshot => {
                self.send_round(now_ms, req, |request, log| JournalMessage::LoadSnapshot {
                    request,
                    log: log.to_owned(),
                })
            }
            Op::Delete(to) => self.send_round(now_ms, req, |request, log| JournalMessage::Delete {
                request,
                log: log.to_owned(),
                to,
            }),
            // Not a single round (never sent here): answered, never dropped.
            Op::Recover { .. } | Op::Append { .. } => self.finish(
                req.caller,
                Err(JournalError::Unavailable(format!(
                    "{}: a write or recovery cannot be sent as one round",
                    req.log
                ))),
            ),
        }
    }

    /// Sends the accept round of `req` (in [`Phase::Accepting`]) to its replicas.
    pub(super) fn send_accept(&mut self, now_ms: u64, req: Request) {
        let Phase::Accepting { ballot, accept, .. } = &req.phase else {
            return;
        };
        let (ballot, accept) = (*ballot, accept.clone());
        self.send_round(now_ms, req, |request, log| JournalMessage::Accept {
            request,
            log: log.to_owned(),
            ballot,
            committed: accept.committed,
            compact: accept.compact,
            writes: accept.writes.clone(),
        });
    }

    pub(super) fn prepare(&mut self, now_ms: u64, mut req: Request, above: Ballot, attempt: u32) {
        let ballot = self.next_ballot(now_ms, above);
        req.phase = Phase::Preparing { ballot, attempt };
        req.newest_snapshot = None;
        let (from, max_events, snapshot) = match &req.op {
            Op::Recover {
                from,
                max_events,
                snapshot,
            } => (*from, *max_events, *snapshot),
            Op::Append { write, .. } => (write.first_seq, 1, false),
            _ => (1, 1, false),
        };
        self.send_round(now_ms, req, |request, log| JournalMessage::Prepare {
            request,
            log: log.to_owned(),
            ballot,
            from,
            max_events,
            snapshot,
        });
    }

    /// Sends one round of `req` (a fresh wire id: late answers of an earlier round are
    /// ignored) to every replica; this node's own answer is taken at once.
    fn send_round(
        &mut self,
        now_ms: u64,
        mut req: Request,
        message: impl Fn(u64, &str) -> JournalMessage,
    ) {
        req.next_round();
        let wire = self.next_wire;
        self.next_wire += 1;
        let replicas = req.replicas.clone();
        let log = req.log.clone();
        self.requests.insert(wire, req);
        for r in replicas {
            let msg = message(wire, &log);
            if r == self.self_node {
                if let Some(answer) = self.answer(now_ms, &r, msg) {
                    let me = self.self_node.clone();
                    self.on_reply(now_ms, &me, answer);
                }
            } else {
                let lane = if matches!(&msg, JournalMessage::Accept { writes, .. } if writes.iter().map(Entry::payload_bytes).sum::<usize>() > 256 * 1024)
                {
                    Lane::Large
                } else {
                    Lane::Ordinary
                };
                self.out.transmits.push_back(Transmit {
                    to: r.address.clone(),
                    to_uid: Some(r.uid),
                    lane,
                    message: msg,
                });
            }
        }
    }

    // ---- answers to this node's requests ----

    pub(super) fn on_reply(&mut self, now_ms: u64, from: &UniqueAddress, mut msg: JournalMessage) {
        let Some(wire) = msg.reply_to() else { return };
        let Some(mut req) = self.requests.remove(&wire) else {
            return;
        };
        if !req.replicas.contains(from) {
            self.requests.insert(wire, req);
            return;
        }
        if *from == self.self_node {
            req.local_turn = Some(self.turns);
        }
        if matches!(msg, JournalMessage::Accepted { .. }) {
            // Stored there, counted or not.
            req.maybe_stored = true;
        }
        if let Some(&mut replicas) = msg.replicas_mut() {
            if replicas != 0 && replicas != req.replicas_digest {
                // The replier sees another replica list for the log: one of the two views
                // lags a ring change. Its answer does not count towards this list's
                // majority (that may not intersect the majority that chose the last
                // writes, or that a newer writer prepared); a lost round is held and sent
                // again with this node's view then (`hold`).
                self.stats.view_mismatches += 1;
                req.refused.insert(from.clone(), None);
                return self.after_answer(now_ms, wire, req);
            }
        }
        match msg {
            JournalMessage::Promise {
                committed,
                page,
                page_from,
                covered_to,
                tail,
                snapshot,
                ..
            } => {
                // Only a recovery that asked for the snapshot takes one.
                let asked = matches!(req.op, Op::Recover { snapshot: true, .. });
                if let Some(s) = snapshot.filter(|_| asked) {
                    if req
                        .newest_snapshot
                        .as_ref()
                        .is_none_or(|n| s.seq_nr > n.seq_nr)
                    {
                        req.newest_snapshot = Some(s);
                    }
                }
                req.answers.insert(
                    from.clone(),
                    Answer {
                        page,
                        page_from,
                        covered_to,
                        committed,
                        tail,
                        promise: true,
                    },
                );
            }
            JournalMessage::ReadReply {
                page, covered_to, ..
            } => {
                req.answers.insert(
                    from.clone(),
                    Answer {
                        page,
                        covered_to,
                        ..Answer::default()
                    },
                );
            }
            JournalMessage::Accepted { .. } | JournalMessage::Done { .. } => {
                req.answers.insert(from.clone(), Answer::default());
            }
            JournalMessage::SnapshotReply { snapshot, .. } => {
                req.snapshots.insert(from.clone(), snapshot);
            }
            JournalMessage::Nack { promised, .. } => {
                req.refused.insert(from.clone(), Some(promised));
            }
            JournalMessage::Unable { reason, .. } => {
                req.unable.insert(from.clone(), reason);
                req.refused.insert(from.clone(), None);
            }
            _ => {
                req.refused.insert(from.clone(), None);
            }
        }
        self.after_answer(now_ms, wire, req);
    }

    /// The round of `req` (wire id `wire`) after an answer: won, lost, or waiting on.
    fn after_answer(&mut self, now_ms: u64, wire: u64, req: Request) {
        if req.answered() >= req.quorum() {
            self.round_won(now_ms, req);
        } else if req.lost() {
            self.round_lost(now_ms, req);
        } else {
            self.requests.insert(wire, req);
        }
    }

    fn round_won(&mut self, now_ms: u64, req: Request) {
        match (&req.phase, &req.op) {
            (Phase::Preparing { ballot, .. }, _) => {
                let ballot = *ballot;
                self.promised(now_ms, req, ballot);
            }
            (
                Phase::Accepting {
                    ballot,
                    highest,
                    page,
                    learn,
                    ..
                },
                op,
            ) => {
                self.remember_writer(&req.log, *ballot, highest.saturating_add(1));
                self.send_learn(now_ms, &req.log, &req.replicas, learn.clone());
                let out = match op {
                    Op::Recover { .. } => {
                        self.stats.recoveries += 1;
                        JournalOutput::Recovered {
                            page: page.clone(),
                            highest: *highest,
                            snapshot: req.newest_snapshot.clone(),
                        }
                    }
                    _ => {
                        self.stats.appends += 1;
                        JournalOutput::Appended
                    }
                };
                self.finish_round(req.caller, req.local_turn, Ok(out));
            }
            (
                Phase::Single,
                Op::Read {
                    from,
                    to,
                    max_events,
                },
            ) => {
                let answers: Vec<Answer> = req.answers.into_values().collect();
                let until = to.saturating_add(1);
                let (page, _) = chain::walk(&answers, *from, *from, until, *max_events as usize);
                self.finish_round(req.caller, req.local_turn, Ok(JournalOutput::Read(page)));
            }
            (Phase::Single, Op::LoadSnapshot) => {
                let best = req
                    .snapshots
                    .into_values()
                    .flatten()
                    .max_by_key(|s| s.seq_nr);
                let out = Ok(JournalOutput::Snapshot(best));
                self.finish_round(req.caller, req.local_turn, out);
            }
            (Phase::Single, _) => {
                self.finish_round(req.caller, req.local_turn, Ok(JournalOutput::Done))
            }
        }
    }

    /// A majority promised `ballot`: propose the uncertain tail again (and an append's
    /// write after it).
    fn promised(&mut self, now_ms: u64, mut req: Request, ballot: Ballot) {
        let answers: Vec<Answer> = std::mem::take(&mut req.answers).into_values().collect();
        let rec = chain::recovered(&answers);
        let (writes, highest, page, compact) = match &req.op {
            Op::Recover {
                from, max_events, ..
            } => {
                // From the newest snapshot a promise sent (a recovery that asked for it):
                // snapshots are saved on a majority, so one of the promises holds the
                // newest saved.
                let from = req
                    .newest_snapshot
                    .as_ref()
                    .map_or(*from, |s| (*from).max(s.seq_nr.saturating_add(1)));
                let found = chain::recovery_page(&answers, &rec, from, *max_events as usize);
                if let Some(slot) = found.gap {
                    // None of the promises holds a chosen write (see
                    // `chain::RecoveryPage::gap`): answering would give a page that ends
                    // short of the highest number. Prepared again until they hold it.
                    self.stats.gaps += 1;
                    let why =
                        format!("the answering replicas do not hold its chosen write at {slot}");
                    self.hold_or_fail(now_ms, req, &why);
                    return;
                }
                (rec.tail.clone(), rec.highest, found.page, false)
            }
            Op::Append { write, compact } => {
                if rec.highest.checked_add(1) != Some(write.first_seq) {
                    self.remember_writer(&req.log, ballot, rec.highest.saturating_add(1));
                    self.stats.conflicts += 1;
                    self.finish(
                        req.caller,
                        Err(conflict_next(
                            &req.log,
                            rec.highest.saturating_add(1),
                            write.first_seq,
                        )),
                    );
                    return;
                }
                let mut w = rec.tail.clone();
                w.push(write.clone());
                (w, write.last_seq(), Vec::new(), *compact)
            }
            _ => return,
        };
        // The page's committed prefix is chosen: its replicas index it (again: a writer
        // that crashed may have learned it to none of them), each write named by the
        // ballot of the copy found. The tail is chosen at this ballot once accepted, and
        // only that ballot names it (the copy found may not be chosen).
        let mut learn: Vec<(u64, Ballot)> = page
            .iter()
            .filter(|e| e.last_seq() <= rec.committed)
            .map(|e| (e.first_seq, e.ballot))
            .collect();
        if writes.is_empty() {
            self.remember_writer(&req.log, ballot, highest.saturating_add(1));
            self.send_learn(now_ms, &req.log, &req.replicas, learn);
            self.stats.recoveries += 1;
            let snapshot = req.newest_snapshot.take();
            let out = JournalOutput::Recovered {
                page,
                highest,
                snapshot,
            };
            self.finish_round(req.caller, req.local_turn, Ok(out));
            return;
        }
        learn.extend(writes.iter().map(|w| (w.first_seq, ballot)));
        req.phase = Phase::Accepting {
            ballot,
            highest,
            page,
            learn,
            accept: AcceptContent {
                committed: rec.committed,
                compact,
                writes,
            },
        };
        self.send_accept(now_ms, req);
    }

    fn round_lost(&mut self, now_ms: u64, req: Request) {
        let refusal = req.highest_refusal();
        let nacked = req.refused.values().any(Option::is_some);
        match req.phase {
            Phase::Preparing { attempt, .. } if nacked && attempt < MAX_PREPARES => {
                self.prepare(now_ms, req, refusal, attempt + 1);
            }
            Phase::Preparing { .. } | Phase::Accepting { .. } if nacked => {
                self.writers.remove(&req.log);
                self.stats.conflicts += 1;
                let promised = format!(
                    "a replica promised ballot {}.{}",
                    refusal.round, refusal.node
                );
                let error = if matches!(req.phase, Phase::Accepting { .. })
                    && matches!(req.op, Op::Append { .. })
                    && req.maybe_stored
                {
                    // A replica may hold the write (an earlier round of this accept, or an
                    // answer not counted), which the other writer's recovery may choose.
                    JournalError::Unavailable(format!(
                        "{}: another writer took it over ({promised}); the write may be stored",
                        req.log
                    ))
                } else {
                    JournalError::Conflict(format!(
                        "{}: another writer holds it ({promised})",
                        req.log
                    ))
                };
                self.finish(req.caller, Err(error));
            }
            _ => self.hold_or_fail(now_ms, req, "a majority of its replicas could not answer"),
        }
    }

    fn remember_writer(&mut self, log: &str, ballot: Ballot, next_seq: u64) {
        if self.writers.len() >= self.settings.max_writers && !self.writers.contains_key(log) {
            // Forget one: it prepares again on its next append.
            if let Some(k) = self.writers.keys().next().cloned() {
                self.writers.remove(&k);
            }
        }
        self.writers
            .insert(log.to_owned(), Writer { ballot, next_seq });
    }
}

fn conflict_next(log: &str, next: u64, first: u64) -> JournalError {
    JournalError::Conflict(format!(
        "{log}: the next sequence number is {next}, the write starts at {first} (another writer wrote)"
    ))
}

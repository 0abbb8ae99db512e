//! Held rounds of [`JournalMachine`]'s requests: a round that a majority of a log's
//! replicas could not answer yet, none refusing (new replicas still waiting for their
//! handoff after a ring change, or replicas whose view of the ring differs from this
//! node's), is sent again after a while instead of failing, until its deadline; and the
//! deadlines themselves.

use super::entry::Ballot;
use super::request::{Phase, Request};
use super::{replicas_digest, JournalError, JournalMachine, Timer, RETRY_FIRST_MS, RETRY_MS};
use crate::kv::storage::KvStorage;

impl<S: KvStorage> JournalMachine<S> {
    /// Holds `req` (its round was lost to replicas that could not answer yet, none
    /// refusing: e.g. new replicas still waiting for their handoff, or a replica whose
    /// view of the ring differs) to be sent again — after [`RETRY_FIRST_MS`], doubled at
    /// each hold of the request up to [`RETRY_MS`] — if its deadline leaves time and no
    /// replica found it malformed; gives it back otherwise.
    ///
    /// A lost accept (phase 2: an established writer's append, or the tail a recovery
    /// proposes again) is sent again as it was — the same ballot and writes — to the log's
    /// replicas in this node's view then, as the writer's next append would be after a
    /// ring change: so a ring change that leaves a majority of a log's replicas unable to
    /// answer for a moment delays the append instead of failing it, and a writer that
    /// lost the log meanwhile is refused (then the append fails as unavailable: an
    /// earlier round may have been taken by a minority, so the write may be stored).
    pub(super) fn hold(&mut self, now_ms: u64, mut req: Request) -> Option<Request> {
        let wait = RETRY_FIRST_MS
            .saturating_mul(1u64 << req.holds.min(16))
            .min(RETRY_MS);
        let again = now_ms.saturating_add(wait);
        let malformed = req
            .unable
            .values()
            .any(|r| *r == super::UnableReason::BadRequest);
        if malformed || again >= req.deadline_ms {
            return Some(req);
        }
        if matches!(req.phase, Phase::Accepting { .. }) {
            self.stats.accepts_held += 1;
            req.maybe_stored = true;
        }
        self.stats.held += 1;
        req.holds = req.holds.saturating_add(1);
        self.held_requests.push((again, req));
        self.arm_held_timer();
        None
    }

    /// Sends the held requests that are due again, each to the log's replicas in this
    /// node's current view of the ring.
    pub(super) fn retry_held(&mut self, now_ms: u64) {
        if self.held_requests.is_empty() {
            return;
        }
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_requests)
            .into_iter()
            .partition(|(at, _)| *at <= now_ms);
        self.held_requests = wait;
        self.arm_held_timer();
        for (_, mut req) in due {
            req.replicas = self.replicas(&req.log);
            req.replicas_digest = replicas_digest(&req.replicas);
            if req.replicas.is_empty() {
                if matches!(req.phase, Phase::Accepting { .. }) {
                    self.writers.remove(&req.log);
                }
                self.finish(
                    req.caller,
                    Err(JournalError::Unavailable(
                        "no member hosts the journal now".into(),
                    )),
                );
                continue;
            }
            match req.phase {
                Phase::Preparing { attempt, .. } => {
                    self.prepare(now_ms, req, Ballot::ZERO, attempt)
                }
                Phase::Accepting { .. } => self.send_accept(now_ms, req),
                Phase::Single => self.send_single(now_ms, req),
            }
        }
    }

    /// Sets [`Timer::Held`] to the earliest held request's due time (cancels it if none).
    pub(super) fn arm_held_timer(&mut self) {
        match self.held_requests.iter().map(|(at, _)| *at).min() {
            Some(at) => self.out.timers.set(Timer::Held, at),
            None => {
                self.out.timers.cancel(&Timer::Held);
            }
        }
    }

    /// Holds `req` to be sent again ([`Self::hold`]); if it cannot be held, fails it as
    /// unavailable for `why`, with the replicas' reasons for any `Unable` answers (an
    /// established writer is forgotten).
    pub(super) fn hold_or_fail(&mut self, now_ms: u64, req: Request, why: &str) {
        let Some(req) = self.hold(now_ms, req) else {
            return;
        };
        if matches!(req.phase, Phase::Accepting { .. }) {
            self.writers.remove(&req.log);
        }
        self.finish(
            req.caller,
            Err(JournalError::Unavailable(format!(
                "{}: {why}{}",
                req.log,
                req.unable_reasons()
            ))),
        );
    }

    pub(super) fn expire(&mut self, now_ms: u64) {
        let due: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.deadline_ms <= now_ms)
            .map(|(w, _)| *w)
            .collect();
        for w in due {
            if let Some(req) = self.requests.remove(&w) {
                self.stats.timeouts += 1;
                if matches!(req.phase, Phase::Accepting { .. }) {
                    self.writers.remove(&req.log);
                }
                let names: Vec<String> =
                    req.replicas.iter().map(|r| r.address.to_string()).collect();
                self.finish(
                    req.caller,
                    Err(JournalError::Unavailable(format!(
                        "{}: no majority of its replicas [{}] answered within {} ms{}",
                        req.log,
                        names.join(", "),
                        self.settings.request_timeout_ms,
                        req.unable_reasons()
                    ))),
                );
            }
        }
    }
}

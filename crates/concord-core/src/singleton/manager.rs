//! The manager half of [`crate::singleton::ClusterSingleton`]: Akka's
//! `ClusterSingletonManager` state machine (Pekko `ClusterSingletonManager.scala`; states
//! Start, AcquiringLease, Oldest, Younger, BecomingOldest, WasOldest, HandingOver,
//! Stopping, End). `Manager` owns its state and memory; it reads and writes the machine
//! only through the `Ctx` it is handed (settings, this node, the shared outputs). This
//! file holds the state, becoming the oldest and the membership; the hand-over itself is in
//! `manager_hand_over.rs`, the lease in `manager_lease.rs`.
//!
//! - **Graceful hand-over.** When the oldest leaves, every node drops it from the
//!   candidates once it is Exiting (and it drops itself in its `cluster-exiting` phase).
//!   The new oldest sends `HandOverToMe` (retried every `hand-over-retry-interval`); the
//!   old one answers `HandOverInProgress`, stops its instance, and when the instance has
//!   stopped sends `HandOverDone`; only then does the new oldest start its own. The old
//!   oldest also sends `TakeOverFromMe`, for a new oldest that does not know it.
//! - **Crash.** A crashed oldest stays the oldest candidate until it is removed (downed
//!   first, by the split brain resolver); the new oldest then waits `removal-margin` more
//!   — the time the removed node needs to notice and stop — before it starts.
//! - **Lease** (`use-lease`): the instance starts only once the lease is granted, and
//!   is stopped when the lease is lost.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;

use super::context::Ctx;
use super::event::SingletonEvent;
use super::message::SingletonBody;
use super::oldest::OldestChangedBuffer;
use super::timer::SingletonTimer;

/// How long removed members are remembered, ms (Akka: 15 minutes).
const REMEMBER_REMOVED_MS: u64 = 15 * 60 * 1_000;

/// The manager's state (Akka's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagerState {
    /// Waiting for this node to be Up.
    Start,
    /// Oldest, waiting for the lease.
    AcquiringLease,
    /// Oldest; runs the instance.
    Oldest,
    /// Not the oldest.
    Younger,
    /// Oldest, waiting for the previous oldest to hand over.
    BecomingOldest,
    /// Was the oldest; waiting for the new oldest to ask for the hand-over.
    WasOldest,
    /// Stopping the instance to hand over.
    HandingOver,
    /// Stopping the instance for good (this node is down or leaving).
    Stopping,
    /// Done: this node will not run the instance again.
    End,
}

/// Counters of the manager.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerStats {
    /// Instances started on this node.
    pub instances_started: u64,
    /// Hand-overs this node completed as the previous oldest.
    pub hand_overs: u64,
    /// Times the manager gave up on a hand-over and started over.
    pub stuck: u64,
}

#[derive(Clone, Debug)]
pub(super) enum State {
    Start,
    AcquiringLease,
    Oldest {
        running: Option<u64>,
    },
    Younger {
        previous_oldest: Vec<UniqueAddress>,
    },
    BecomingOldest {
        previous_oldest: Vec<UniqueAddress>,
        retries: u32,
    },
    WasOldest {
        running: Option<u64>,
        new_oldest: Option<UniqueAddress>,
        retries: u32,
    },
    HandingOver {
        hand_over_to: Option<UniqueAddress>,
    },
    Stopping {
        then_acquire_lease: bool,
    },
    End,
}

/// The manager's state and memory (Akka's `ClusterSingletonManager` actor with its
/// `OldestChangedBuffer` child).
#[derive(Debug)]
pub(super) struct Manager {
    pub(super) state: State,
    /// Who is the oldest candidate, as Akka's `OldestChangedBuffer` counts it.
    pub(super) oldest: OldestChangedBuffer,
    /// Members counted as gone (removed, plus the removal margin), with when (ms).
    pub(super) removed: BTreeMap<UniqueAddress, u64>,
    /// Members seen in the membership (to notice removals), with their up-numbers.
    known: BTreeMap<UniqueAddress, u32>,
    /// Removed members that were older than this node, within their removal margin.
    removing_older: BTreeSet<UniqueAddress>,
    pub(super) self_status: Option<MemberStatus>,
    /// No other member (with the role) is Down, Leaving or Exiting.
    safe_to_be_oldest: bool,
    pub(super) exiting_requested: bool,
    exiting_done: bool,
    /// Draws the incarnation numbers of the instances started here.
    rng: SmallRng,
    pub(super) stats: ManagerStats,
}

impl Manager {
    /// The manager of `self_node`, counting members with `role`; `seed` seeds the
    /// incarnation numbers.
    pub(super) fn new(self_node: UniqueAddress, role: Option<String>, seed: u64) -> Self {
        Manager {
            state: State::Start,
            oldest: OldestChangedBuffer::new(self_node, role),
            removed: BTreeMap::new(),
            known: BTreeMap::new(),
            removing_older: BTreeSet::new(),
            self_status: None,
            safe_to_be_oldest: true,
            exiting_requested: false,
            exiting_done: false,
            rng: SmallRng::seed_from_u64(seed),
            stats: ManagerStats::default(),
        }
    }

    /// The state, by Akka's names.
    pub(super) fn state(&self) -> ManagerState {
        match self.state {
            State::Start => ManagerState::Start,
            State::AcquiringLease => ManagerState::AcquiringLease,
            State::Oldest { .. } => ManagerState::Oldest,
            State::Younger { .. } => ManagerState::Younger,
            State::BecomingOldest { .. } => ManagerState::BecomingOldest,
            State::WasOldest { .. } => ManagerState::WasOldest,
            State::HandingOver { .. } => ManagerState::HandingOver,
            State::Stopping { .. } => ManagerState::Stopping,
            State::End => ManagerState::End,
        }
    }

    /// The incarnation of the instance running here, if one runs.
    pub(super) fn running(&self) -> Option<u64> {
        match self.state {
            State::Oldest { running } => running,
            _ => None,
        }
    }
}

impl Manager {
    /// Arms the hand-over / take-over retry `hand-over-retry-interval` (ms) after `now_ms`.
    pub(super) fn arm_retry(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        let at = now_ms + cx.settings.hand_over_retry_interval_ms;
        cx.out.timers.set(SingletonTimer::Retry, at);
    }

    /// Tells the runtime the `cluster-exiting` phase may go on, once (if it asked).
    pub(super) fn exiting_done(&mut self, cx: &mut Ctx<'_>) {
        if self.exiting_requested && !self.exiting_done {
            self.exiting_done = true;
            cx.emit(SingletonEvent::ExitingDone);
        }
    }

    /// Becomes the oldest: starts the instance (after the lease, with `use-lease`) — unless
    /// a member older than this node was removed less than the removal margin ago: it may
    /// still run the instance, so wait for it as for a previous oldest.
    pub(super) fn goto_oldest(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        // A node that is leaving never starts an instance: the others stopped counting it
        // as a candidate when they saw it Leaving, so one of them may start its own. (It
        // still counts itself until its `cluster-exiting` phase, which may come later —
        // e.g. after sharding's hand-over phase — so that an instance it runs is handed
        // over in order.)
        if matches!(
            self.self_status,
            Some(MemberStatus::Leaving) | Some(MemberStatus::Exiting)
        ) {
            cx.out.timers.cancel(&SingletonTimer::Retry);
            self.state = State::Younger {
                previous_oldest: Vec::new(),
            };
            return;
        }
        if !self.removing_older.is_empty() {
            self.state = State::BecomingOldest {
                previous_oldest: self.removing_older.iter().cloned().collect(),
                retries: 0,
            };
            self.arm_retry(cx, now_ms);
            return;
        }
        cx.out.timers.cancel(&SingletonTimer::Retry);
        if cx.settings.use_lease {
            self.state = State::AcquiringLease;
            cx.emit(SingletonEvent::AcquireLease);
        } else {
            self.start_instance(cx);
        }
    }

    /// Starts the instance with a fresh incarnation number: Oldest.
    pub(super) fn start_instance(&mut self, cx: &mut Ctx<'_>) {
        let incarnation = self.rng.random::<u64>();
        self.stats.instances_started += 1;
        self.state = State::Oldest {
            running: Some(incarnation),
        };
        cx.emit(SingletonEvent::StartInstance { incarnation });
    }

    /// The first decision, once this node is a candidate.
    pub(super) fn init(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        let oldest = self.oldest.oldest().cloned();
        if oldest.as_ref() == Some(cx.self_node) {
            if self.safe_to_be_oldest {
                self.goto_oldest(cx, now_ms);
            } else {
                self.state = State::BecomingOldest {
                    previous_oldest: Vec::new(),
                    retries: 0,
                };
                self.arm_retry(cx, now_ms);
            }
        } else {
            self.state = State::Younger {
                previous_oldest: oldest.into_iter().collect(),
            };
        }
    }

    /// A new membership `view` at `now_ms`: notes this node's status and removals (each
    /// counted after `removal-margin`, ms), stops for good when this node is down or
    /// removed, and acts on a change of the oldest (Akka's `OldestChanged`).
    pub(super) fn membership(&mut self, cx: &mut Ctx<'_>, now_ms: u64, view: &MembershipView) {
        let role = cx.settings.role.clone();
        let with_role = |m: &crate::member::Member| role.as_deref().is_none_or(|r| m.has_role(r));
        self.self_status = view.self_member().map(|m| m.status);
        self.safe_to_be_oldest = !view.members.values().any(|m| {
            m.unique_address != *cx.self_node
                && with_role(m)
                && matches!(
                    m.status,
                    MemberStatus::Down | MemberStatus::Leaving | MemberStatus::Exiting
                )
        });
        // Removals: each counts only after the removal margin.
        let members: BTreeMap<UniqueAddress, u32> = view
            .members
            .iter()
            .map(|(u, m)| (u.clone(), m.up_number))
            .collect();
        let me = (
            view.self_member()
                .map_or(crate::member::UP_NUMBER_UNSET, |m| m.up_number),
            cx.self_node.clone(),
        );
        let gone: Vec<(UniqueAddress, u32)> = self
            .known
            .iter()
            .filter(|(u, _)| !members.contains_key(*u))
            .map(|(u, n)| (u.clone(), *n))
            .collect();
        self.known = members;
        for (m, up_number) in gone {
            if m == *cx.self_node {
                continue;
            }
            if let State::WasOldest {
                running,
                new_oldest: Some(n),
                ..
            } = &self.state
            {
                if *n == m && !self.oldest.self_exited() {
                    let running = *running;
                    self.removed.insert(m.clone(), now_ms);
                    self.goto_handing_over(cx, running, None);
                    continue;
                }
            }
            if (up_number, m.clone()) < me {
                self.removing_older.insert(m.clone());
            }
            let at = now_ms + cx.settings.removal_margin_ms;
            cx.out
                .timers
                .set(SingletonTimer::DelayedMemberRemoved(m), at);
        }
        // This node downed or removed: stop for good.
        let self_gone = matches!(
            self.self_status,
            None | Some(MemberStatus::Down) | Some(MemberStatus::Removed)
        ) && !matches!(self.state, State::Start);
        if self_gone {
            self.stop_for_good(cx);
            return;
        }
        let changed = self.oldest.update(view);
        match (&self.state, changed) {
            (State::Start, _) if self.oldest.candidates().any(|c| *c == *cx.self_node) => {
                self.init(cx, now_ms)
            }
            (State::Start, _) => {}
            (_, Some(new)) => self.on_oldest_changed(cx, now_ms, new),
            _ => {}
        }
    }

    /// This node is down or removed: stop the instance if it runs, then End.
    fn stop_for_good(&mut self, cx: &mut Ctx<'_>) {
        match self.state.clone() {
            State::Oldest { running: Some(_) }
            | State::WasOldest {
                running: Some(_), ..
            } => {
                cx.emit(SingletonEvent::StopInstance);
                self.state = State::Stopping {
                    then_acquire_lease: false,
                };
            }
            State::HandingOver { .. } | State::Stopping { .. } | State::End => {}
            _ => {
                if cx.settings.use_lease {
                    cx.emit(SingletonEvent::ReleaseLease);
                }
                self.state = State::End;
                self.exiting_done(cx);
            }
        }
        cx.out.timers.cancel(&SingletonTimer::Retry);
    }

    /// The oldest candidate is now `new` (Akka's `OldestChanged`): become the oldest, or
    /// offer the hand-over to the new one.
    fn on_oldest_changed(&mut self, cx: &mut Ctx<'_>, now_ms: u64, new: Option<UniqueAddress>) {
        let is_self = new.as_ref() == Some(cx.self_node);
        match self.state.clone() {
            State::Start => {}
            State::Younger { previous_oldest } => {
                if is_self {
                    if previous_oldest.iter().all(|p| self.removed.contains_key(p)) {
                        self.goto_oldest(cx, now_ms);
                    } else {
                        let first = previous_oldest[0].clone();
                        cx.send(&first, SingletonBody::HandOverToMe);
                        self.state = State::BecomingOldest {
                            previous_oldest,
                            retries: 0,
                        };
                        self.arm_retry(cx, now_ms);
                    }
                } else {
                    let mut previous: Vec<UniqueAddress> = new.into_iter().collect();
                    for p in previous_oldest {
                        if !previous.contains(&p) && !self.removed.contains_key(&p) {
                            previous.push(p);
                        }
                    }
                    self.state = State::Younger {
                        previous_oldest: previous,
                    };
                }
            }
            State::BecomingOldest { .. } | State::AcquiringLease if !is_self => {
                // No longer the oldest (this node is leaving): nothing runs here.
                if cx.settings.use_lease {
                    cx.emit(SingletonEvent::ReleaseLease);
                }
                cx.out.timers.cancel(&SingletonTimer::Retry);
                self.state = State::Younger {
                    previous_oldest: new.into_iter().collect(),
                };
            }
            State::Oldest { running } if !is_self => match new {
                Some(a) if !self.oldest.self_exited() && self.removed.contains_key(&a) => {
                    // A removed node counts as oldest again: stop, it will become
                    // oldest again here once it is removed again.
                    self.goto_handing_over(cx, running, None);
                }
                Some(a) => {
                    cx.send(&a, SingletonBody::TakeOverFromMe);
                    self.state = State::WasOldest {
                        running,
                        new_oldest: Some(a),
                        retries: 1,
                    };
                    self.arm_retry(cx, now_ms);
                }
                None => {
                    self.state = State::WasOldest {
                        running,
                        new_oldest: None,
                        retries: 1,
                    };
                    self.arm_retry(cx, now_ms);
                }
            },
            State::WasOldest {
                running, retries, ..
            } if !is_self => {
                self.state = State::WasOldest {
                    running,
                    new_oldest: new,
                    retries,
                };
            }
            _ => {}
        }
    }

    /// Member `m`'s removal margin has passed at `now_ms`: it counts as gone (Akka's
    /// `DelayedMemberRemoved`), so a hand-over need not wait for it.
    pub(super) fn delayed_member_removed(
        &mut self,
        cx: &mut Ctx<'_>,
        now_ms: u64,
        m: UniqueAddress,
    ) {
        self.removing_older.remove(&m);
        self.removed.insert(m.clone(), now_ms);
        cx.out
            .timers
            .set_if_unset(SingletonTimer::CleanupRemoved, now_ms + REMEMBER_REMOVED_MS);
        match self.state.clone() {
            State::Younger { previous_oldest } => {
                self.state = State::Younger {
                    previous_oldest: previous_oldest.into_iter().filter(|p| *p != m).collect(),
                };
            }
            State::BecomingOldest {
                previous_oldest,
                retries,
            } if previous_oldest.contains(&m) => {
                let rest: Vec<UniqueAddress> =
                    previous_oldest.into_iter().filter(|p| *p != m).collect();
                match rest.first().cloned() {
                    None => self.goto_oldest(cx, now_ms),
                    Some(next) => {
                        cx.send(&next, SingletonBody::HandOverToMe);
                        self.state = State::BecomingOldest {
                            previous_oldest: rest,
                            retries,
                        };
                    }
                }
            }
            _ => {}
        }
    }

    /// Forgets removed members remembered for more than 15 minutes (Akka's `Cleanup`).
    pub(super) fn cleanup_removed(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        self.removed
            .retain(|_, at| now_ms.saturating_sub(*at) < REMEMBER_REMOVED_MS);
        if let Some(first) = self.removed.values().min() {
            let at = first + REMEMBER_REMOVED_MS;
            cx.out.timers.set(SingletonTimer::CleanupRemoved, at);
        }
    }

    /// This node's `cluster-exiting` phase: it stops being a candidate; the phase is held
    /// only while an instance is to be handed over.
    pub(super) fn self_exiting(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        self.exiting_requested = true;
        if let Some(new) = self.oldest.self_exiting() {
            self.on_oldest_changed(cx, now_ms, new);
        }
        // Only an instance to hand over holds the phase up.
        let holds = match &self.state {
            State::Oldest { running } | State::WasOldest { running, .. } => running.is_some(),
            State::HandingOver { .. } | State::Stopping { .. } => true,
            _ => false,
        };
        if !holds {
            self.exiting_done(cx);
        }
    }
}

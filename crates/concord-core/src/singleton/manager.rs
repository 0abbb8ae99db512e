//! The manager half of [`super::ClusterSingleton`]: Akka's `ClusterSingletonManager`
//! state machine (Start, AcquiringLease, Oldest, Younger, BecomingOldest, WasOldest,
//! HandingOver, Stopping, End).
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

use rand::Rng;

use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;

use super::{ClusterSingleton, SingletonBody, SingletonEvent, SingletonTimer};

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

/// The manager's state and memory.
#[derive(Debug)]
pub(super) struct Manager {
    pub(super) state: State,
    /// Members counted as gone (removed, plus the removal margin), with when.
    removed: BTreeMap<UniqueAddress, u64>,
    /// Members seen in the membership (to notice removals), with their up-numbers.
    known: BTreeMap<UniqueAddress, u32>,
    /// Removed members that were older than this node, within their removal margin.
    removing_older: BTreeSet<UniqueAddress>,
    self_status: Option<MemberStatus>,
    /// No other member (with the role) is Down, Leaving or Exiting.
    safe_to_be_oldest: bool,
    exiting_requested: bool,
    exiting_done: bool,
    pub(super) stats: ManagerStats,
}

impl Manager {
    pub(super) fn new() -> Self {
        Manager {
            state: State::Start,
            removed: BTreeMap::new(),
            known: BTreeMap::new(),
            removing_older: BTreeSet::new(),
            self_status: None,
            safe_to_be_oldest: true,
            exiting_requested: false,
            exiting_done: false,
            stats: ManagerStats::default(),
        }
    }

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

    /// The incarnation of the instance running here.
    pub(super) fn running(&self) -> Option<u64> {
        match self.state {
            State::Oldest { running } => running,
            _ => None,
        }
    }
}

impl ClusterSingleton {
    fn retry_interval(&self) -> u64 {
        self.settings.hand_over_retry_interval_ms
    }

    fn arm_retry(&mut self, now_ms: u64) {
        let at = now_ms + self.retry_interval();
        self.out.timers.set(SingletonTimer::Retry, at);
    }

    fn exiting_done(&mut self) {
        if self.manager.exiting_requested && !self.manager.exiting_done {
            self.manager.exiting_done = true;
            self.out.events.push_back(SingletonEvent::ExitingDone);
        }
    }

    /// Becomes the oldest: starts the instance (after the lease, with `use-lease`) — unless
    /// a member older than this node was removed less than the removal margin ago: it may
    /// still run the instance, so wait for it as for a previous oldest.
    fn goto_oldest(&mut self, now_ms: u64) {
        // A node that is leaving never starts an instance: the others stopped counting it
        // as a candidate when they saw it Leaving, so one of them may start its own. (It
        // still counts itself until its `cluster-exiting` phase, which may come later —
        // e.g. after sharding's hand-over phase — so that an instance it runs is handed
        // over in order.)
        if matches!(
            self.manager.self_status,
            Some(MemberStatus::Leaving) | Some(MemberStatus::Exiting)
        ) {
            self.out.timers.cancel(&SingletonTimer::Retry);
            self.manager.state = State::Younger {
                previous_oldest: Vec::new(),
            };
            return;
        }
        if !self.manager.removing_older.is_empty() {
            self.manager.state = State::BecomingOldest {
                previous_oldest: self.manager.removing_older.iter().cloned().collect(),
                retries: 0,
            };
            self.arm_retry(now_ms);
            return;
        }
        self.out.timers.cancel(&SingletonTimer::Retry);
        if self.settings.use_lease {
            self.manager.state = State::AcquiringLease;
            self.out.events.push_back(SingletonEvent::AcquireLease);
        } else {
            self.start_instance();
        }
    }

    pub(super) fn start_instance(&mut self) {
        let incarnation = self.rng.random::<u64>();
        self.manager.stats.instances_started += 1;
        self.manager.state = State::Oldest {
            running: Some(incarnation),
        };
        self.out
            .events
            .push_back(SingletonEvent::StartInstance { incarnation });
    }

    /// The first decision, once this node is a candidate.
    fn init(&mut self, now_ms: u64) {
        let oldest = self.oldest.oldest().cloned();
        if oldest.as_ref() == Some(&self.self_node) {
            if self.manager.safe_to_be_oldest {
                self.goto_oldest(now_ms);
            } else {
                self.manager.state = State::BecomingOldest {
                    previous_oldest: Vec::new(),
                    retries: 0,
                };
                self.arm_retry(now_ms);
            }
        } else {
            self.manager.state = State::Younger {
                previous_oldest: oldest.into_iter().collect(),
            };
        }
    }

    pub(super) fn manager_membership(&mut self, now_ms: u64, view: &MembershipView) {
        let role = self.settings.role.clone();
        let with_role = |m: &crate::member::Member| role.as_deref().is_none_or(|r| m.has_role(r));
        self.manager.self_status = view.self_member().map(|m| m.status);
        self.manager.safe_to_be_oldest = !view.members.values().any(|m| {
            m.unique_address != self.self_node
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
            self.self_node.clone(),
        );
        let gone: Vec<(UniqueAddress, u32)> = self
            .manager
            .known
            .iter()
            .filter(|(u, _)| !members.contains_key(*u))
            .map(|(u, n)| (u.clone(), *n))
            .collect();
        self.manager.known = members;
        for (m, up_number) in gone {
            if m == self.self_node {
                continue;
            }
            if let State::WasOldest {
                running,
                new_oldest: Some(n),
                ..
            } = &self.manager.state
            {
                if *n == m && !self.oldest.self_exited() {
                    let running = *running;
                    self.manager.removed.insert(m.clone(), now_ms);
                    self.goto_handing_over(running, None);
                    continue;
                }
            }
            if (up_number, m.clone()) < me {
                self.manager.removing_older.insert(m.clone());
            }
            let at = now_ms + self.settings.removal_margin_ms;
            self.out
                .timers
                .set(SingletonTimer::DelayedMemberRemoved(m), at);
        }
        // This node downed or removed: stop for good.
        let self_gone = matches!(
            self.manager.self_status,
            None | Some(MemberStatus::Down) | Some(MemberStatus::Removed)
        ) && !matches!(self.manager.state, State::Start);
        if self_gone {
            self.stop_for_good();
            return;
        }
        let changed = self.oldest.update(view);
        match (&self.manager.state, changed) {
            (State::Start, _) if self.oldest.candidates().any(|c| *c == self.self_node) => {
                self.init(now_ms)
            }
            (State::Start, _) => {}
            (_, Some(new)) => self.on_oldest_changed(now_ms, new),
            _ => {}
        }
    }

    /// This node is down or removed: stop the instance if it runs, then End.
    fn stop_for_good(&mut self) {
        match self.manager.state.clone() {
            State::Oldest { running: Some(_) }
            | State::WasOldest {
                running: Some(_), ..
            } => {
                self.out.events.push_back(SingletonEvent::StopInstance);
                self.manager.state = State::Stopping {
                    then_acquire_lease: false,
                };
            }
            State::HandingOver { .. } | State::Stopping { .. } | State::End => {}
            _ => {
                if self.settings.use_lease {
                    self.out.events.push_back(SingletonEvent::ReleaseLease);
                }
                self.manager.state = State::End;
                self.exiting_done();
            }
        }
        self.out.timers.cancel(&SingletonTimer::Retry);
    }

    fn on_oldest_changed(&mut self, now_ms: u64, new: Option<UniqueAddress>) {
        let is_self = new.as_ref() == Some(&self.self_node);
        match self.manager.state.clone() {
            State::Start => {}
            State::Younger { previous_oldest } => {
                if is_self {
                    if previous_oldest
                        .iter()
                        .all(|p| self.manager.removed.contains_key(p))
                    {
                        self.goto_oldest(now_ms);
                    } else {
                        let first = previous_oldest[0].clone();
                        self.send(&first, SingletonBody::HandOverToMe);
                        self.manager.state = State::BecomingOldest {
                            previous_oldest,
                            retries: 0,
                        };
                        self.arm_retry(now_ms);
                    }
                } else {
                    let mut previous: Vec<UniqueAddress> = new.into_iter().collect();
                    for p in previous_oldest {
                        if !previous.contains(&p) && !self.manager.removed.contains_key(&p) {
                            previous.push(p);
                        }
                    }
                    self.manager.state = State::Younger {
                        previous_oldest: previous,
                    };
                }
            }
            State::BecomingOldest { .. } | State::AcquiringLease if !is_self => {
                // No longer the oldest (this node is leaving): nothing runs here.
                if self.settings.use_lease {
                    self.out.events.push_back(SingletonEvent::ReleaseLease);
                }
                self.out.timers.cancel(&SingletonTimer::Retry);
                self.manager.state = State::Younger {
                    previous_oldest: new.into_iter().collect(),
                };
            }
            State::Oldest { running } if !is_self => match new {
                Some(a) if !self.oldest.self_exited() && self.manager.removed.contains_key(&a) => {
                    // A removed node counts as oldest again: stop, it will become
                    // oldest again here once it is removed again.
                    self.goto_handing_over(running, None);
                }
                Some(a) => {
                    self.send(&a, SingletonBody::TakeOverFromMe);
                    self.manager.state = State::WasOldest {
                        running,
                        new_oldest: Some(a),
                        retries: 1,
                    };
                    self.arm_retry(now_ms);
                }
                None => {
                    self.manager.state = State::WasOldest {
                        running,
                        new_oldest: None,
                        retries: 1,
                    };
                    self.arm_retry(now_ms);
                }
            },
            State::WasOldest {
                running, retries, ..
            } if !is_self => {
                self.manager.state = State::WasOldest {
                    running,
                    new_oldest: new,
                    retries,
                };
            }
            _ => {}
        }
    }

    /// Stops the instance to hand it over to `to` (or just stops it).
    fn goto_handing_over(&mut self, running: Option<u64>, to: Option<UniqueAddress>) {
        self.out.timers.cancel(&SingletonTimer::Retry);
        match running {
            None => self.hand_over_done(to),
            Some(_) => {
                if let Some(t) = &to {
                    self.send(t, SingletonBody::HandOverInProgress);
                }
                self.out.events.push_back(SingletonEvent::StopInstance);
                self.manager.state = State::HandingOver { hand_over_to: to };
            }
        }
    }

    fn hand_over_done(&mut self, to: Option<UniqueAddress>) {
        if let Some(t) = &to {
            self.send(t, SingletonBody::HandOverDone);
            self.manager.stats.hand_overs += 1;
        }
        if self.settings.use_lease {
            self.out.events.push_back(SingletonEvent::ReleaseLease);
        }
        self.exiting_done();
        self.manager.state = if self.manager.removed.contains_key(&self.self_node) || to.is_some() {
            State::End
        } else {
            State::Younger {
                previous_oldest: Vec::new(),
            }
        };
    }

    pub(super) fn manager_message(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        body: SingletonBody,
    ) {
        match (body, self.manager.state.clone()) {
            (SingletonBody::HandOverToMe, State::Younger { .. }) => {
                // A node restarted at the same address asks; this node runs nothing —
                // unless it is leaving, when it may be about to (Akka issue 27487).
                let leaving = matches!(
                    self.manager.self_status,
                    Some(MemberStatus::Leaving) | Some(MemberStatus::Exiting)
                );
                if !leaving {
                    self.send(from, SingletonBody::HandOverDone);
                }
            }
            (SingletonBody::HandOverToMe, State::Oldest { running })
            | (SingletonBody::HandOverToMe, State::WasOldest { running, .. }) => {
                self.goto_handing_over(running, Some(from.clone()));
            }
            (SingletonBody::HandOverToMe, State::HandingOver { hand_over_to })
                if hand_over_to.as_ref() == Some(from) =>
            {
                self.send(from, SingletonBody::HandOverInProgress);
            }
            (SingletonBody::HandOverToMe, State::End) => {
                self.send(from, SingletonBody::HandOverDone);
            }
            (
                SingletonBody::HandOverDone,
                State::BecomingOldest {
                    previous_oldest, ..
                },
            ) if previous_oldest.first() == Some(from) => self.goto_oldest(now_ms),
            (
                SingletonBody::TakeOverFromMe,
                State::BecomingOldest {
                    previous_oldest,
                    retries,
                },
            ) => match previous_oldest.first() {
                Some(p) if p == from => self.send(from, SingletonBody::HandOverToMe),
                Some(_) => {}
                None => {
                    self.send(from, SingletonBody::HandOverToMe);
                    self.manager.state = State::BecomingOldest {
                        previous_oldest: vec![from.clone()],
                        retries,
                    };
                }
            },
            _ => {}
        }
        let _ = now_ms;
    }

    pub(super) fn manager_retry(&mut self, now_ms: u64) {
        let max_hand_over = self.settings.max_hand_over_retries();
        let max_take_over = self.settings.max_take_over_retries();
        match self.manager.state.clone() {
            State::BecomingOldest {
                previous_oldest,
                retries,
            } => {
                let retries = retries + 1;
                if retries <= max_hand_over {
                    if let Some(p) = previous_oldest.first().cloned() {
                        self.send(&p, SingletonBody::HandOverToMe);
                    }
                    self.manager.state = State::BecomingOldest {
                        previous_oldest,
                        retries,
                    };
                    self.arm_retry(now_ms);
                } else if previous_oldest
                    .iter()
                    .all(|p| self.manager.removed.contains_key(p))
                {
                    self.goto_oldest(now_ms);
                } else {
                    self.stuck(now_ms);
                }
            }
            State::WasOldest {
                running,
                new_oldest,
                retries,
            } => {
                let self_exited = self.oldest.self_exited();
                if self_exited && (new_oldest.is_none() || retries > max_take_over) {
                    match running {
                        Some(_) => {
                            self.out.events.push_back(SingletonEvent::StopInstance);
                            self.manager.state = State::Stopping {
                                then_acquire_lease: false,
                            };
                        }
                        None => {
                            self.manager.state = State::End;
                            self.exiting_done();
                        }
                    }
                } else if retries <= max_take_over {
                    if let Some(n) = &new_oldest {
                        self.send(n, SingletonBody::TakeOverFromMe);
                    }
                    self.manager.state = State::WasOldest {
                        running,
                        new_oldest,
                        retries: retries + 1,
                    };
                    self.arm_retry(now_ms);
                } else {
                    self.stuck(now_ms);
                }
            }
            _ => {}
        }
    }

    /// Akka's `ClusterSingletonManagerIsStuck`: start over from the current membership
    /// (stopping an instance that runs here first).
    fn stuck(&mut self, now_ms: u64) {
        self.manager.stats.stuck += 1;
        self.out.events.push_back(SingletonEvent::Stuck);
        match self.manager.state.clone() {
            State::WasOldest { running, .. } => self.goto_handing_over(running, None),
            _ => self.init(now_ms),
        }
    }

    pub(super) fn manager_delayed_member_removed(&mut self, now_ms: u64, m: UniqueAddress) {
        self.manager.removing_older.remove(&m);
        self.manager.removed.insert(m.clone(), now_ms);
        self.out
            .timers
            .set_if_unset(SingletonTimer::CleanupRemoved, now_ms + REMEMBER_REMOVED_MS);
        match self.manager.state.clone() {
            State::Younger { previous_oldest } => {
                self.manager.state = State::Younger {
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
                    None => self.goto_oldest(now_ms),
                    Some(next) => {
                        self.send(&next, SingletonBody::HandOverToMe);
                        self.manager.state = State::BecomingOldest {
                            previous_oldest: rest,
                            retries,
                        };
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn manager_cleanup_removed(&mut self, now_ms: u64) {
        self.manager
            .removed
            .retain(|_, at| now_ms.saturating_sub(*at) < REMEMBER_REMOVED_MS);
        if let Some(first) = self.manager.removed.values().min() {
            let at = first + REMEMBER_REMOVED_MS;
            self.out.timers.set(SingletonTimer::CleanupRemoved, at);
        }
    }

    pub(super) fn manager_instance_terminated(&mut self, now_ms: u64) {
        match self.manager.state.clone() {
            State::HandingOver { hand_over_to } => self.hand_over_done(hand_over_to),
            State::Stopping { then_acquire_lease } => {
                if then_acquire_lease && !self.manager.exiting_requested {
                    self.manager.state = State::AcquiringLease;
                    self.out.events.push_back(SingletonEvent::AcquireLease);
                } else {
                    if self.settings.use_lease {
                        self.out.events.push_back(SingletonEvent::ReleaseLease);
                    }
                    self.manager.state = State::End;
                    self.exiting_done();
                }
            }
            State::Oldest { .. } => self.manager.state = State::Oldest { running: None },
            State::WasOldest {
                new_oldest,
                retries,
                ..
            } => {
                self.manager.state = State::WasOldest {
                    running: None,
                    new_oldest,
                    retries,
                }
            }
            _ => {}
        }
        let _ = now_ms;
    }

    pub(super) fn manager_self_exiting(&mut self, now_ms: u64) {
        self.manager.exiting_requested = true;
        if let Some(new) = self.oldest.self_exiting() {
            self.on_oldest_changed(now_ms, new);
        }
        // Only an instance to hand over holds the phase up.
        let holds = match &self.manager.state {
            State::Oldest { running } | State::WasOldest { running, .. } => running.is_some(),
            State::HandingOver { .. } | State::Stopping { .. } => true,
            _ => false,
        };
        if !holds {
            self.exiting_done();
        }
    }
}

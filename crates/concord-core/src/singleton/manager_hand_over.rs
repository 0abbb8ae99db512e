//! The manager's hand-over (Akka's `ClusterSingletonManager`, Pekko
//! `ClusterSingletonManager.scala`): the previous oldest stops its instance and says
//! `HandOverDone` when it has stopped (`HandingOver`), the new oldest asks with
//! `HandOverToMe` and the previous one offers with `TakeOverFromMe`, both retried every
//! `hand-over-retry-interval` (ms) up to their retry counts, after which the manager is
//! stuck and starts over.

use crate::address::UniqueAddress;
use crate::member::MemberStatus;

use super::context::Ctx;
use super::event::SingletonEvent;
use super::manager::{Manager, State};
use super::message::SingletonBody;
use super::timer::SingletonTimer;

impl Manager {
    /// Stops the instance to hand it over to `to` (or just stops it).
    pub(super) fn goto_handing_over(
        &mut self,
        cx: &mut Ctx<'_>,
        running: Option<u64>,
        to: Option<UniqueAddress>,
    ) {
        cx.out.timers.cancel(&SingletonTimer::Retry);
        match running {
            None => self.hand_over_done(cx, to),
            Some(_) => {
                if let Some(t) = &to {
                    cx.send(t, SingletonBody::HandOverInProgress);
                }
                cx.emit(SingletonEvent::StopInstance);
                self.state = State::HandingOver { hand_over_to: to };
            }
        }
    }

    /// The instance has stopped (or none ran): tell `to` it may start its own, release the
    /// lease, and end (or wait as Younger when there was no one to hand over to).
    fn hand_over_done(&mut self, cx: &mut Ctx<'_>, to: Option<UniqueAddress>) {
        if let Some(t) = &to {
            cx.send(t, SingletonBody::HandOverDone);
            self.stats.hand_overs += 1;
        }
        if cx.settings.use_lease {
            cx.emit(SingletonEvent::ReleaseLease);
        }
        self.exiting_done(cx);
        self.state = if self.removed.contains_key(cx.self_node) || to.is_some() {
            State::End
        } else {
            State::Younger {
                previous_oldest: Vec::new(),
            }
        };
    }

    /// A hand-over message `body` from `from` (HandOverToMe, HandOverInProgress,
    /// HandOverDone, TakeOverFromMe), by state.
    pub(super) fn handle_message(
        &mut self,
        cx: &mut Ctx<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        body: SingletonBody,
    ) {
        match (body, self.state.clone()) {
            (SingletonBody::HandOverToMe, State::Younger { .. }) => {
                // A node restarted at the same address asks; this node runs nothing —
                // unless it is leaving, when it may be about to (Akka issue 27487).
                let leaving = matches!(
                    self.self_status,
                    Some(MemberStatus::Leaving) | Some(MemberStatus::Exiting)
                );
                if !leaving {
                    cx.send(from, SingletonBody::HandOverDone);
                }
            }
            (SingletonBody::HandOverToMe, State::Oldest { running })
            | (SingletonBody::HandOverToMe, State::WasOldest { running, .. }) => {
                self.goto_handing_over(cx, running, Some(from.clone()));
            }
            (SingletonBody::HandOverToMe, State::HandingOver { hand_over_to })
                if hand_over_to.as_ref() == Some(from) =>
            {
                cx.send(from, SingletonBody::HandOverInProgress);
            }
            (SingletonBody::HandOverToMe, State::End) => {
                cx.send(from, SingletonBody::HandOverDone);
            }
            (
                SingletonBody::HandOverDone,
                State::BecomingOldest {
                    previous_oldest, ..
                },
            ) if previous_oldest.first() == Some(from) => self.goto_oldest(cx, now_ms),
            (
                SingletonBody::TakeOverFromMe,
                State::BecomingOldest {
                    previous_oldest,
                    retries,
                },
            ) => match previous_oldest.first() {
                Some(p) if p == from => cx.send(from, SingletonBody::HandOverToMe),
                Some(_) => {}
                None => {
                    cx.send(from, SingletonBody::HandOverToMe);
                    self.state = State::BecomingOldest {
                        previous_oldest: vec![from.clone()],
                        retries,
                    };
                }
            },
            _ => {}
        }
    }

    /// The retry timer fired at `now_ms`: ask again (`HandOverToMe` / `TakeOverFromMe`) up
    /// to the retry counts, then go on without the other node or be stuck.
    pub(super) fn retry(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        let max_hand_over = cx.settings.max_hand_over_retries();
        let max_take_over = cx.settings.max_take_over_retries();
        match self.state.clone() {
            State::BecomingOldest {
                previous_oldest,
                retries,
            } => {
                let retries = retries + 1;
                if retries <= max_hand_over {
                    if let Some(p) = previous_oldest.first().cloned() {
                        cx.send(&p, SingletonBody::HandOverToMe);
                    }
                    self.state = State::BecomingOldest {
                        previous_oldest,
                        retries,
                    };
                    self.arm_retry(cx, now_ms);
                } else if previous_oldest.iter().all(|p| self.removed.contains_key(p)) {
                    self.goto_oldest(cx, now_ms);
                } else {
                    self.stuck(cx, now_ms);
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
                            cx.emit(SingletonEvent::StopInstance);
                            self.state = State::Stopping {
                                then_acquire_lease: false,
                            };
                        }
                        None => {
                            self.state = State::End;
                            self.exiting_done(cx);
                        }
                    }
                } else if retries <= max_take_over {
                    if let Some(n) = &new_oldest {
                        cx.send(n, SingletonBody::TakeOverFromMe);
                    }
                    self.state = State::WasOldest {
                        running,
                        new_oldest,
                        retries: retries + 1,
                    };
                    self.arm_retry(cx, now_ms);
                } else {
                    self.stuck(cx, now_ms);
                }
            }
            _ => {}
        }
    }

    /// Akka's `ClusterSingletonManagerIsStuck`: start over from the current membership
    /// (stopping an instance that runs here first).
    fn stuck(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        self.stats.stuck += 1;
        cx.emit(SingletonEvent::Stuck);
        match self.state.clone() {
            State::WasOldest { running, .. } => self.goto_handing_over(cx, running, None),
            _ => self.init(cx, now_ms),
        }
    }

    /// The instance has stopped: finish the hand-over or the stop, or note that nothing runs.
    pub(super) fn instance_terminated(&mut self, cx: &mut Ctx<'_>) {
        match self.state.clone() {
            State::HandingOver { hand_over_to } => self.hand_over_done(cx, hand_over_to),
            State::Stopping { then_acquire_lease } => {
                if then_acquire_lease && !self.exiting_requested {
                    self.state = State::AcquiringLease;
                    cx.emit(SingletonEvent::AcquireLease);
                } else {
                    if cx.settings.use_lease {
                        cx.emit(SingletonEvent::ReleaseLease);
                    }
                    self.state = State::End;
                    self.exiting_done(cx);
                }
            }
            State::Oldest { .. } => self.state = State::Oldest { running: None },
            State::WasOldest {
                new_oldest,
                retries,
                ..
            } => {
                self.state = State::WasOldest {
                    running: None,
                    new_oldest,
                    retries,
                }
            }
            _ => {}
        }
    }
}

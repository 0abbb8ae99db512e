//! The manager's lease (`use-lease`, Akka's `ClusterSingletonManager` with a lease; Pekko
//! `ClusterSingletonManager.scala`): the instance starts only once the lease is granted, a
//! refusal is retried after `lease-retry-interval` (ms), and a lost lease stops the
//! instance and asks again.

use super::context::Ctx;
use super::event::SingletonEvent;
use super::manager::{Manager, State};
use super::timer::SingletonTimer;

impl Manager {
    /// The runtime's answer to [`SingletonEvent::AcquireLease`] at `now_ms`: start the
    /// instance, retry after `lease-retry-interval`, or release a lease no longer wanted.
    pub(super) fn lease_result(&mut self, cx: &mut Ctx<'_>, now_ms: u64, granted: bool) {
        match (&self.state, granted) {
            (State::AcquiringLease, true) => self.start_instance(cx),
            (State::AcquiringLease, false) => {
                let at = now_ms + cx.settings.lease_retry_interval_ms;
                cx.out.timers.set(SingletonTimer::LeaseRetry, at);
            }
            (_, true) => cx.emit(SingletonEvent::ReleaseLease),
            (_, false) => {}
        }
    }

    /// The lease retry timer fired: ask for the lease again if still waiting for it.
    pub(super) fn lease_retry(&mut self, cx: &mut Ctx<'_>) {
        if matches!(self.state, State::AcquiringLease) {
            cx.emit(SingletonEvent::AcquireLease);
        }
    }

    /// The lease was lost while held: stop the instance, then ask for the lease again.
    pub(super) fn lease_lost(&mut self, cx: &mut Ctx<'_>) {
        match self.state {
            State::Oldest { running: Some(_) } => {
                cx.emit(SingletonEvent::StopInstance);
                self.state = State::Stopping {
                    then_acquire_lease: true,
                };
            }
            State::Oldest { running: None } => {
                self.state = State::AcquiringLease;
                cx.emit(SingletonEvent::AcquireLease);
            }
            _ => {}
        }
    }
}

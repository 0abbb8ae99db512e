//! The manager's lease (`use-lease`, Akka's `ClusterSingletonManager` with a lease): the
//! instance starts only once the lease is granted, a refusal is retried after
//! `lease-retry-interval`, and a lost lease stops the instance and asks again.

use super::manager::State;
use super::{ClusterSingleton, SingletonEvent, SingletonTimer};

impl ClusterSingleton {
    pub(super) fn manager_lease_result(&mut self, now_ms: u64, granted: bool) {
        match (&self.manager.state, granted) {
            (State::AcquiringLease, true) => self.start_instance(),
            (State::AcquiringLease, false) => {
                let at = now_ms + self.settings.lease_retry_interval_ms;
                self.out.timers.set(SingletonTimer::LeaseRetry, at);
            }
            (_, true) => self.out.events.push_back(SingletonEvent::ReleaseLease),
            (_, false) => {}
        }
    }

    pub(super) fn manager_lease_retry(&mut self, _now_ms: u64) {
        if matches!(self.manager.state, State::AcquiringLease) {
            self.out.events.push_back(SingletonEvent::AcquireLease);
        }
    }

    pub(super) fn manager_lease_lost(&mut self, _now_ms: u64) {
        match self.manager.state {
            State::Oldest { running: Some(_) } => {
                self.out.events.push_back(SingletonEvent::StopInstance);
                self.manager.state = State::Stopping {
                    then_acquire_lease: true,
                };
            }
            State::Oldest { running: None } => {
                self.manager.state = State::AcquiringLease;
                self.out.events.push_back(SingletonEvent::AcquireLease);
            }
            _ => {}
        }
    }
}

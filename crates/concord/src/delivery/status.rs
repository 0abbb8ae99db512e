//! [`ProducerStatus`] and [`WorkPullingStatus`]: what a producer holds and has done, for
//! tests and operators.

/// A producer's state, for tests and operators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStatus {
    /// Messages held, not confirmed yet.
    pub unconfirmed: usize,
    /// Messages sent, not confirmed yet.
    pub in_flight: u64,
    /// Entities with a controller.
    pub entities: usize,
    /// Messages the consumers' flow control windows let the producer send now (what they
    /// asked for beyond what was sent), over all of them.
    pub window: u64,
    /// Messages sent the first time, in all.
    pub sent: u64,
    /// Messages sent again, in all.
    pub resent: u64,
    /// Messages confirmed, in all.
    pub confirmed: u64,
    /// Consumer answers that did not fit (a confirmation beyond what was sent, a resend
    /// from the future, another incarnation's answer): counted and ignored.
    pub invalid: u64,
}

/// A work-pulling producer's state, for tests and operators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkPullingStatus {
    /// The counters and gauges every producer has (`entities`: the workers messages may
    /// go to now, as `workers`).
    pub producer: ProducerStatus,
    /// Messages waiting for a worker that asks for work.
    pub waiting: usize,
    /// Workers messages may go to now (given, their node a member, and their endpoint not
    /// found missing in the last 5 s).
    pub workers: usize,
    /// Messages given back by workers that left, in all.
    pub reassigned: u64,
}

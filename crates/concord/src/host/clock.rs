//! The node's one clock: every layer host, and every effect that needs the time, reads it.
//!
//! [`Clock`] is what a host is given; [`SystemClock`] is the runtime's (milliseconds that
//! never go backwards, anchored at the Unix epoch when the node starts so tombstone times
//! are comparable across nodes, advanced by a monotonic clock so the failure detector is
//! immune to wall-clock jumps); [`ManualClock`] is the simulator's and the tests' (virtual
//! time, set by whoever drives it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of the current time, ms.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time, ms (never less than a value returned before).
    fn now_ms(&self) -> u64;
}

/// Monotonic milliseconds anchored at the wall clock at start (the runtime's clock).
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    start: Instant,
    start_wall_ms: u64,
}

impl SystemClock {
    /// A clock starting now.
    pub fn new() -> Self {
        let start_wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        SystemClock {
            start: Instant::now(),
            start_wall_ms,
        }
    }

    /// The current time, ms.
    pub fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.start_wall_ms.saturating_add(elapsed)
    }

    /// What the clock read when it was created, ms (wall-clock milliseconds since the
    /// Unix epoch).
    pub fn started_ms(&self) -> u64 {
        self.start_wall_ms
    }

    /// The instant at which this clock reads `ms` (`ms` before the start: the start).
    pub fn instant_at(&self, ms: u64) -> Instant {
        let offset = ms.saturating_sub(self.start_wall_ms);
        self.start + std::time::Duration::from_millis(offset)
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemClock::now_ms(self)
    }
}

/// Virtual time: reads what was last set (the simulator's clock, shared by every host of
/// a simulated node). Cheap to clone; clones share the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(now_ms)),
        }
    }

    /// Sets the time, ms (a value before the current one is ignored: time never goes back).
    pub fn set(&self, now_ms: u64) {
        self.now.fetch_max(now_ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_anchored_at_the_wall_clock_and_maps_back_to_instants() {
        let c = SystemClock::new();
        let a = c.now_ms();
        assert!(a > 1_600_000_000_000, "anchored at the Unix epoch");
        let at = c.instant_at(a + 50);
        assert!(at >= Instant::now());
        assert!(
            c.instant_at(0) <= Instant::now(),
            "times before the start map to the start"
        );
    }

    #[test]
    fn manual_clock_never_goes_back_and_is_shared_by_clones() {
        let c = ManualClock::new(10);
        let d = c.clone();
        c.set(25);
        assert_eq!(d.now_ms(), 25);
        d.set(5);
        assert_eq!(c.now_ms(), 25);
    }
}

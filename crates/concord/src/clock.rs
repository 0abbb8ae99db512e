//! The runtime's clock: milliseconds that never go backwards, anchored at the Unix epoch
//! when the node starts (so tombstone times are comparable across nodes), advanced by a
//! monotonic clock (so the failure detector is immune to wall-clock jumps).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Monotonic milliseconds anchored at the wall clock at start.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    start_wall_ms: u64,
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Self {
        let start_wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Clock {
            start: Instant::now(),
            start_wall_ms,
        }
    }

    /// Current time, ms.
    pub fn now_ms(&self) -> u64 {
        self.start_wall_ms + self.start.elapsed().as_millis() as u64
    }

    /// The tokio instant at which this clock reads `ms`.
    pub fn instant_at(&self, ms: u64) -> tokio::time::Instant {
        let offset = ms.saturating_sub(self.start_wall_ms);
        tokio::time::Instant::from_std(self.start + std::time::Duration::from_millis(offset))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Sleeps until `deadline`, or forever without one.
pub(crate) async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

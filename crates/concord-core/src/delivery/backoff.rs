//! [`ResendBackoff`]: exponential backoff with jitter for a producer's resends.
//!
//! The interval starts at `resend-interval-min`, doubles after every resend that brought no
//! confirmation, is capped at `resend-interval-max`, and starts over once a confirmation
//! arrives. Each deadline is drawn uniformly from [interval / 2, interval] ("equal jitter",
//! AWS Architecture Blog, "Exponential Backoff And Jitter", 2015), so producers that lost
//! their consumer at the same moment do not resend in step.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The backoff of one producer controller.
#[derive(Clone, Debug)]
pub struct ResendBackoff {
    min_ms: u64,
    max_ms: u64,
    interval_ms: u64,
    rng: SmallRng,
}

impl ResendBackoff {
    /// Starts at `min_ms` (at least 1), capped at `max_ms` (at least `min_ms`); `seed`
    /// seeds the jitter.
    pub fn new(min_ms: u64, max_ms: u64, seed: u64) -> Self {
        let min_ms = min_ms.max(1);
        ResendBackoff {
            min_ms,
            max_ms: max_ms.max(min_ms),
            interval_ms: min_ms,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The current interval (before jitter), ms.
    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    /// The next deadline after `now_ms`: within [interval / 2, interval] of it.
    pub fn next_deadline(&mut self, now_ms: u64) -> u64 {
        let half = self.interval_ms / 2;
        let delay = self.rng.random_range(half..=self.interval_ms).max(1);
        now_ms.saturating_add(delay)
    }

    /// A resend brought nothing: double the interval (capped).
    pub fn back_off(&mut self) {
        self.interval_ms = self.interval_ms.saturating_mul(2).min(self.max_ms);
    }

    /// A confirmation arrived: start over.
    pub fn reset(&mut self) {
        self.interval_ms = self.min_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_with_jitter_and_starts_over() {
        let mut b = ResendBackoff::new(2_000, 30_000, 7);
        let mut seen = Vec::new();
        for _ in 0..6 {
            let d = b.next_deadline(1_000) - 1_000;
            assert!(d >= b.interval_ms() / 2 && d <= b.interval_ms(), "{d}");
            seen.push(b.interval_ms());
            b.back_off();
        }
        assert_eq!(seen, vec![2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
        b.reset();
        assert_eq!(b.interval_ms(), 2_000);
        // Jitter: two seeds do not draw the same deadlines.
        let mut other = ResendBackoff::new(2_000, 30_000, 8);
        let mine: Vec<u64> = (0..8).map(|_| b.next_deadline(0)).collect();
        let theirs: Vec<u64> = (0..8).map(|_| other.next_deadline(0)).collect();
        assert_ne!(mine, theirs);
    }

    #[test]
    fn bounds_that_make_no_sense_are_mended() {
        let mut b = ResendBackoff::new(0, 0, 1);
        assert_eq!(b.interval_ms(), 1);
        assert!(b.next_deadline(u64::MAX) == u64::MAX);
        b.back_off();
        assert_eq!(b.interval_ms(), 1);
    }
}

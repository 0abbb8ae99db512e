//! [`TokenBucket`]: a rate limit over the machine's clock (ms), for requests a node answers
//! for anyone — InitJoin, Join and heartbeats from nodes outside its view — so that a flood
//! of them, each claiming another address, cannot make it open connections without bound.

/// A token bucket: `capacity` requests at once, refilled at `per_second`. Integer
/// arithmetic in thousandths of a token, saturating; deterministic for the simulator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    capacity_milli: u64,
    per_second: u64,
    tokens_milli: u64,
    last_ms: Option<u64>,
}

impl TokenBucket {
    /// A full bucket of `capacity` tokens refilled with `per_second` tokens a second.
    pub fn new(capacity: u64, per_second: u64) -> Self {
        let capacity_milli = capacity.saturating_mul(1000);
        TokenBucket {
            capacity_milli,
            per_second,
            tokens_milli: capacity_milli,
            last_ms: None,
        }
    }

    /// Takes a token at `now_ms` if one is left: true if the request may proceed. A clock
    /// that goes backwards refills nothing.
    pub fn try_take(&mut self, now_ms: u64) -> bool {
        self.try_take_n(now_ms, 1)
    }

    /// Takes `n` tokens at `now_ms` if that many are left, none otherwise: true if the `n`
    /// requests may proceed (all or nothing; `n` = 0 always may). More than the capacity
    /// never fits.
    pub fn try_take_n(&mut self, now_ms: u64, n: u64) -> bool {
        if let Some(last) = self.last_ms {
            let elapsed = now_ms.saturating_sub(last);
            self.tokens_milli = self
                .tokens_milli
                .saturating_add(elapsed.saturating_mul(self.per_second))
                .min(self.capacity_milli);
        }
        self.last_ms = Some(self.last_ms.map_or(now_ms, |l| l.max(now_ms)));
        let need = n.saturating_mul(1000);
        if self.tokens_milli >= need {
            self.tokens_milli -= need;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_burst_then_the_rate() {
        let mut b = TokenBucket::new(3, 10);
        assert!((0..3).all(|_| b.try_take(1000)));
        assert!(!b.try_take(1000));
        assert!(!b.try_take(1099));
        assert!(b.try_take(1100)); // 100 ms at 10/s = 1 token
        assert!(!b.try_take(1100));
        // A long pause refills only up to the capacity.
        assert!((0..3).all(|_| b.try_take(100_000)));
        assert!(!b.try_take(100_000));
    }

    #[test]
    fn several_at_once_all_or_nothing() {
        let mut b = TokenBucket::new(10, 10);
        assert!(b.try_take_n(0, 0));
        assert!(!b.try_take_n(0, 11), "more than the capacity never fits");
        assert!(b.try_take_n(0, 7));
        assert!(!b.try_take_n(0, 4), "only 3 left: none taken");
        assert!(b.try_take_n(0, 3));
        assert!(!b.try_take(0));
        assert!(!b.try_take_n(0, u64::MAX));
    }

    proptest! {
        #[test]
        fn never_more_than_burst_plus_rate_times_time(
            cap in 0u64..50, rate in 0u64..100, steps in proptest::collection::vec(0u64..500, 1..200)
        ) {
            let mut b = TokenBucket::new(cap, rate);
            let (mut now, mut taken) = (0u64, 0u64);
            for s in steps {
                now += s;
                if b.try_take(now) { taken += 1; }
            }
            prop_assert!(taken <= cap + rate * now / 1000);
        }

        #[test]
        fn extreme_clocks_never_panic(cap in any::<u64>(), rate in any::<u64>(), t in proptest::collection::vec(any::<u64>(), 1..20)) {
            let mut b = TokenBucket::new(cap, rate);
            for now in t { let _ = b.try_take(now); }
        }
    }
}

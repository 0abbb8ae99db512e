//! Rate-limited warnings for input from the network: one line per kind of problem per
//! interval, with the number of occurrences suppressed since the last line, so a peer that
//! sends garbage cannot flood the log (the counters in [`super::stats`] count every one).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line per key per interval.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    interval: Duration,
    /// Bounded: at most this many keys are tracked; beyond that, lines share one key.
    max_keys: usize,
    last: Mutex<HashMap<String, (Instant, u64)>>,
}

impl LogLimiter {
    pub(crate) fn new(interval: Duration) -> Self {
        LogLimiter {
            interval,
            max_keys: 256,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(suppressed)` if a line for `key` may be logged now (with the number of lines
    /// suppressed since the previous one), `None` if it must be suppressed.
    pub(crate) fn allow(&self, key: &str) -> Option<u64> {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.len() >= self.max_keys && !last.contains_key(key) {
            // Forget keys whose interval is over and that suppressed nothing since.
            let interval = self.interval;
            last.retain(|_, (at, suppressed)| {
                *suppressed > 0 || now.duration_since(*at) < interval
            });
        }
        let key = if last.len() >= self.max_keys && !last.contains_key(key) {
            "<other>"
        } else {
            key
        };
        match last.get_mut(key) {
            Some((at, suppressed)) if now.duration_since(*at) < self.interval => {
                *suppressed += 1;
                None
            }
            Some((at, suppressed)) => {
                *at = now;
                Some(std::mem::take(suppressed))
            }
            None => {
                last.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_per_interval_with_the_suppressed_count() {
        let l = LogLimiter::new(Duration::from_secs(3600));
        assert_eq!(l.allow("a"), Some(0));
        assert_eq!(l.allow("a"), None);
        assert_eq!(l.allow("a"), None);
        assert_eq!(l.allow("b"), Some(0), "keys are independent");
        let l = LogLimiter::new(Duration::ZERO);
        assert_eq!(l.allow("a"), Some(0));
        assert_eq!(l.allow("a"), Some(0));
    }

    #[test]
    fn the_number_of_keys_is_bounded() {
        let l = LogLimiter::new(Duration::from_secs(3600));
        for i in 0..10_000 {
            l.allow(&format!("k{i}"));
        }
        assert!(l.last.lock().unwrap().len() <= 257);
    }
}

//! [`PhiAccrualFailureDetector`]: the accrual failure detector of Hayashibara et al.
//! ("The φ Accrual Failure Detector", 2004), as Akka implements it.
//!
//! Instead of answering "is the node down?", it returns φ = -log10(P(a heartbeat arrives
//! later than now)), computed from a bounded history of inter-arrival times assumed to be
//! normally distributed. The normal CDF uses the logistic approximation
//! `1 / (1 + e^(-y(1.5976 + 0.070566 y²)))` (Akka `PhiAccrualFailureDetector.phi`).
//! `acceptable-heartbeat-pause` is added to the mean so that pauses (GC, bursts) up to
//! that long are tolerated, and the standard deviation is at least `min-std-deviation`.
//! The history starts with two samples around `first-heartbeat-estimate`
//! (mean ± mean/4) so the first intervals do not give extreme φ.
//!
//! Times are milliseconds from any monotonic origin, passed in by the caller.

use std::collections::VecDeque;

/// Settings of one failure detector (units: ms).
#[derive(Clone, Debug, PartialEq)]
pub struct PhiAccrualSettings {
    /// φ at or above which the node is considered unavailable (default 8.0).
    pub threshold: f64,
    /// Number of inter-arrival samples kept (default 1000).
    pub max_sample_size: usize,
    /// Lower bound of the standard deviation, ms (default 100).
    pub min_std_deviation_ms: f64,
    /// Tolerated pause added to the mean, ms (default 3000).
    pub acceptable_heartbeat_pause_ms: f64,
    /// Expected first inter-arrival time, ms (default = heartbeat-interval, 1000).
    pub first_heartbeat_estimate_ms: f64,
}

impl Default for PhiAccrualSettings {
    fn default() -> Self {
        PhiAccrualSettings {
            threshold: 8.0,
            max_sample_size: 1000,
            min_std_deviation_ms: 100.0,
            acceptable_heartbeat_pause_ms: 3000.0,
            first_heartbeat_estimate_ms: 1000.0,
        }
    }
}

/// Bounded window of inter-arrival times with running sums.
#[derive(Clone, Debug)]
struct HeartbeatHistory {
    max_sample_size: usize,
    intervals: VecDeque<f64>,
    sum: f64,
    squared_sum: f64,
}

impl HeartbeatHistory {
    fn new(max_sample_size: usize) -> Self {
        HeartbeatHistory {
            max_sample_size: max_sample_size.max(1),
            intervals: VecDeque::new(),
            sum: 0.0,
            squared_sum: 0.0,
        }
    }

    fn push(&mut self, interval: f64) {
        if self.intervals.len() >= self.max_sample_size {
            if let Some(old) = self.intervals.pop_front() {
                self.sum -= old;
                self.squared_sum -= old * old;
            }
        }
        self.intervals.push_back(interval);
        self.sum += interval;
        self.squared_sum += interval * interval;
    }

    fn mean(&self) -> f64 {
        self.sum / self.intervals.len() as f64
    }

    fn variance(&self) -> f64 {
        (self.squared_sum / self.intervals.len() as f64 - self.mean() * self.mean()).max(0.0)
    }

    fn std_deviation(&self) -> f64 {
        self.variance().sqrt()
    }
}

/// φ for a heartbeat `time_diff_ms` after the last one, given the distribution of
/// inter-arrival times (`mean_ms`, `std_deviation_ms`), with the logistic approximation of
/// the normal CDF. Returns a value in `[0, ∞)`; very large `time_diff_ms` gives `+∞`.
pub fn phi(time_diff_ms: f64, mean_ms: f64, std_deviation_ms: f64) -> f64 {
    let y = (time_diff_ms - mean_ms) / std_deviation_ms;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    if time_diff_ms > mean_ms {
        -(e / (1.0 + e)).log10()
    } else {
        -(1.0 - 1.0 / (1.0 + e)).log10()
    }
}

/// The φ accrual failure detector for one monitored node.
#[derive(Clone, Debug)]
pub struct PhiAccrualFailureDetector {
    settings: PhiAccrualSettings,
    history: HeartbeatHistory,
    last_heartbeat_ms: Option<u64>,
}

impl PhiAccrualFailureDetector {
    /// A detector that has not received any heartbeat yet (φ = 0, available).
    pub fn new(settings: PhiAccrualSettings) -> Self {
        let history = HeartbeatHistory::new(settings.max_sample_size);
        PhiAccrualFailureDetector {
            settings,
            history,
            last_heartbeat_ms: None,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &PhiAccrualSettings {
        &self.settings
    }

    /// True once at least one heartbeat was recorded.
    pub fn is_monitoring(&self) -> bool {
        self.last_heartbeat_ms.is_some()
    }

    /// Records a heartbeat arriving at `now_ms`. An interval that ends a period of
    /// unavailability is not added to the history, so one long pause does not skew it.
    pub fn heartbeat(&mut self, now_ms: u64) {
        match self.last_heartbeat_ms {
            None => {
                let mean = self.settings.first_heartbeat_estimate_ms;
                let std = mean / 4.0;
                self.history = HeartbeatHistory::new(self.settings.max_sample_size);
                self.history.push(mean - std);
                self.history.push(mean + std);
            }
            Some(last) => {
                let interval = now_ms.saturating_sub(last) as f64;
                if self.is_available(now_ms) {
                    self.history.push(interval);
                }
            }
        }
        self.last_heartbeat_ms = Some(now_ms);
    }

    /// φ at `now_ms`; 0 before the first heartbeat.
    pub fn phi(&self, now_ms: u64) -> f64 {
        match self.last_heartbeat_ms {
            None => 0.0,
            Some(last) => {
                let diff = now_ms.saturating_sub(last) as f64;
                let mean = self.history.mean() + self.settings.acceptable_heartbeat_pause_ms;
                let std = self
                    .history
                    .std_deviation()
                    .max(self.settings.min_std_deviation_ms);
                phi(diff, mean, std)
            }
        }
    }

    /// True while φ is below the threshold.
    pub fn is_available(&self, now_ms: u64) -> bool {
        self.phi(now_ms) < self.settings.threshold
    }

    /// True if no heartbeat came for longer than four mean intervals (three lost in a
    /// row) or half the acceptable pause past the mean, whichever is shorter, while φ is
    /// still below the threshold: the node may be about to become unreachable — its
    /// acceptable pause is running.
    pub fn is_suspect(&self, now_ms: u64) -> bool {
        let Some(last) = self.last_heartbeat_ms else {
            return false;
        };
        let silence = now_ms.saturating_sub(last) as f64;
        let mean = self.history.mean().max(1.0);
        let limit = (4.0 * mean).min(mean + self.settings.acceptable_heartbeat_pause_ms / 2.0);
        self.is_available(now_ms) && silence > limit
    }

    /// Mean of the inter-arrival history, ms (without the acceptable pause).
    pub fn mean_interval_ms(&self) -> f64 {
        if self.history.intervals.is_empty() {
            0.0
        } else {
            self.history.mean()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd(threshold: f64, pause: f64, min_std: f64) -> PhiAccrualFailureDetector {
        PhiAccrualFailureDetector::new(PhiAccrualSettings {
            threshold,
            max_sample_size: 1000,
            min_std_deviation_ms: min_std,
            acceptable_heartbeat_pause_ms: pause,
            first_heartbeat_estimate_ms: 1000.0,
        })
    }

    /// The formula by hand, independent of `phi`.
    fn expected_phi(t: f64, mean: f64, std: f64) -> f64 {
        let y = (t - mean) / std;
        let cdf = 1.0 / (1.0 + (-y * (1.5976 + 0.070566 * y * y)).exp());
        -(1.0 - cdf).log10()
    }

    #[test]
    fn phi_matches_the_formula_for_known_inputs() {
        for (t, mean, std) in [
            (0.0, 10.0, 100.0),
            (1000.0, 1000.0, 100.0),
            (1100.0, 1000.0, 100.0),
            (1500.0, 1000.0, 200.0),
            (3000.0, 1000.0, 500.0),
        ] {
            let got = phi(t, mean, std);
            let want = expected_phi(t, mean, std);
            assert!(
                (got - want).abs() < 1e-6,
                "phi({t},{mean},{std}) = {got}, want {want}"
            );
        }
        // Values from Akka's AccrualFailureDetectorSpec: phi(0.0, 10.0, 100.0) small,
        // mean → ~0.3, mean+1σ ≈ 0.8, mean+2σ ≈ 1.6, mean+3σ ≈ 2.9.
        assert!((phi(1000.0, 1000.0, 100.0) - std::f64::consts::LOG10_2).abs() < 1e-3);
        assert!((phi(1100.0, 1000.0, 100.0) - 0.80).abs() < 0.02);
        assert!((phi(1200.0, 1000.0, 100.0) - 1.64).abs() < 0.02);
        assert!((phi(1300.0, 1000.0, 100.0) - 2.91).abs() < 0.02);
    }

    #[test]
    fn phi_increases_with_elapsed_time() {
        let mut prev = -1.0;
        for t in (0..5000).step_by(100) {
            let p = phi(t as f64, 1000.0, 100.0);
            assert!(p >= prev, "monotonic at {t}");
            prev = p;
        }
        assert!(phi(1e9, 1000.0, 100.0).is_infinite() || phi(1e9, 1000.0, 100.0) > 100.0);
    }

    #[test]
    fn a_silent_node_is_suspect_before_it_is_unreachable() {
        let mut d = fd(8.0, 3000.0, 100.0);
        assert!(!d.is_suspect(0), "nothing heard yet: not suspect");
        let mut t = 0;
        for _ in 0..20 {
            t += 1000;
            d.heartbeat(t);
        }
        assert!(
            !d.is_suspect(t + 2000),
            "one lost heartbeat is no suspicion"
        );
        assert!(
            d.is_suspect(t + 2600),
            "silent for mean + half the acceptable pause"
        );
        assert!(d.is_available(t + 2600), "but not unreachable yet");
        let late = (t..).step_by(100).find(|x| !d.is_available(*x)).unwrap();
        assert!(
            !d.is_suspect(late),
            "once unreachable it is no longer merely suspect"
        );
    }

    #[test]
    fn available_before_first_heartbeat() {
        let d = fd(8.0, 3000.0, 100.0);
        assert_eq!(d.phi(1_000_000), 0.0);
        assert!(d.is_available(1_000_000));
    }

    #[test]
    fn regular_heartbeats_keep_phi_low() {
        let mut d = fd(8.0, 0.0, 100.0);
        let mut t = 0;
        for _ in 0..20 {
            d.heartbeat(t);
            t += 1000;
        }
        assert!(d.phi(t - 1000 + 500) < 1.0);
        assert!(d.is_available(t));
    }

    #[test]
    fn phi_crosses_the_threshold_exactly_when_expected() {
        // Heartbeats every 1000 ms: history is exactly 1000 ms (the bootstrap samples 750
        // and 1250 average to 1000 too), std = 250 bootstrap → falls as samples accumulate.
        // Use enough samples to make std < min-std (100), so mean = 1000 + pause, std = 100.
        let pause = 3000.0;
        let mut d = fd(8.0, pause, 100.0);
        let mut t = 0u64;
        for _ in 0..1000 {
            d.heartbeat(t);
            t += 1000;
        }
        let last = t - 1000;
        let mean = d.mean_interval_ms() + pause;
        // Solve phi(x) = 8 numerically from the formula, then check the detector flips there.
        let mut lo = mean;
        let mut hi = mean + 5000.0;
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if expected_phi(mid, mean, 100.0) < 8.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let crossing = hi.ceil() as u64;
        assert!(
            d.is_available(last + crossing - 2),
            "still available just before {crossing} ms"
        );
        assert!(
            !d.is_available(last + crossing + 1),
            "unavailable just after {crossing} ms"
        );
        // With default settings that is about heartbeat + pause + ~0.4-0.5 s.
        assert!(
            (4300..4700).contains(&crossing),
            "crossing at {crossing} ms"
        );
    }

    #[test]
    fn a_long_pause_is_not_added_to_the_history() {
        let mut d = fd(8.0, 0.0, 100.0);
        for i in 0..10 {
            d.heartbeat(i * 1000);
        }
        let before = d.mean_interval_ms();
        d.heartbeat(9000 + 60_000);
        assert!((d.mean_interval_ms() - before).abs() < 1e-9);
    }

    #[test]
    fn history_is_bounded() {
        let mut d = PhiAccrualFailureDetector::new(PhiAccrualSettings {
            max_sample_size: 3,
            ..Default::default()
        });
        for i in 0..100 {
            d.heartbeat(i * 1000);
        }
        assert_eq!(d.history.intervals.len(), 3);
    }
}

//! [`Ewma`]: the exponentially weighted moving average that smooths every sampled metric,
//! as Akka's cluster-metrics extension does (`akka.cluster.metrics.EWMA`): a sample's weight
//! halves every `half-life`, so a short spike moves the average little and a lasting change
//! moves it all the way.

/// The smoothing factor for samples taken every `interval_ms` with a weight that halves
/// every `half_life_ms`: `alpha = 1 − exp(−ln 2 / half_life × interval)` (Akka's
/// `EWMA.alpha`). With Akka's defaults (half-life 12 s, samples every 3 s) alpha ≈ 0.159.
/// A half-life of 0 gives 1 (no smoothing: the average is the last sample); an interval of
/// 0 counts as 1 ms. The result is always in (0, 1].
pub fn alpha(half_life_ms: u64, interval_ms: u64) -> f64 {
    if half_life_ms == 0 {
        return 1.0;
    }
    let interval = interval_ms.max(1) as f64;
    let a = 1.0 - (-std::f64::consts::LN_2 / half_life_ms as f64 * interval).exp();
    a.clamp(f64::MIN_POSITIVE, 1.0)
}

/// A moving average: `value` after the samples so far, weighted by `alpha` (see [`alpha`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    /// The smoothed value (same unit as the samples).
    pub value: f64,
    /// The weight of a new sample, in (0, 1].
    pub alpha: f64,
}

impl Ewma {
    /// An average that starts at its first sample.
    pub fn new(first: f64, alpha: f64) -> Self {
        Ewma {
            value: first,
            alpha,
        }
    }

    /// The average after one more sample: `alpha × sample + (1 − alpha) × value`.
    pub fn next(self, sample: f64) -> Self {
        Ewma {
            value: self.alpha * sample + (1.0 - self.alpha) * self.value,
            alpha: self.alpha,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn akka_defaults_give_alpha_0_159() {
        let a = alpha(12_000, 3_000);
        assert!((a - 0.159).abs() < 0.001, "{a}");
    }

    #[test]
    fn a_step_is_half_way_after_one_half_life() {
        // Samples every second, half-life 4 s: after 4 samples of 100 from 0 the average
        // has covered half the step.
        let a = alpha(4_000, 1_000);
        let mut e = Ewma::new(0.0, a);
        for _ in 0..4 {
            e = e.next(100.0);
        }
        assert!((e.value - 50.0).abs() < 1e-9, "{}", e.value);
    }

    #[test]
    fn no_half_life_means_no_smoothing() {
        let e = Ewma::new(3.0, alpha(0, 3_000)).next(7.0);
        assert_eq!(e.value, 7.0);
        assert!(alpha(1, 0) > 0.0);
    }

    proptest! {
        #[test]
        fn the_average_stays_between_its_samples(
            half_life in 0u64..100_000, interval in 0u64..100_000,
            samples in proptest::collection::vec(-1e9f64..1e9, 1..50),
        ) {
            let a = alpha(half_life, interval);
            prop_assert!(a > 0.0 && a <= 1.0);
            let lo = samples.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = samples.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut e = Ewma::new(samples[0], a);
            for s in &samples[1..] {
                e = e.next(*s);
            }
            prop_assert!(e.value >= lo - 1e-6 && e.value <= hi + 1e-6);
        }
    }
}

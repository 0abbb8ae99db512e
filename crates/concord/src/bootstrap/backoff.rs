//! The random jitter and the exponential backoff of lookups and probes.

use std::time::Duration;

use rand::Rng;

/// `d` scaled by a random factor in [1 − `factor`, 1 + `factor`] (`factor` clamped to 0..=1).
pub fn jittered(d: Duration, factor: f64, rng: &mut impl Rng) -> Duration {
    let f = if factor.is_finite() {
        factor.abs().min(1.0)
    } else {
        0.0
    };
    if f == 0.0 {
        return d;
    }
    d.mul_f64(1.0 + rng.random_range(-f..=f))
}

/// `base` × 2^`attempt`, capped at `max`, then [`jittered`] by `random_factor`.
pub fn backoff(
    base: Duration,
    max: Duration,
    random_factor: f64,
    attempt: u32,
    rng: &mut impl Rng,
) -> Duration {
    jittered(
        base.saturating_mul(1u32 << attempt.min(16)).min(max),
        random_factor,
        rng,
    )
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_within_the_random_factor() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(15);
        assert_eq!(backoff(base, max, 0.0, 0, &mut rng), base);
        assert_eq!(backoff(base, max, 0.0, 3, &mut rng), Duration::from_secs(8));
        assert_eq!(backoff(base, max, 0.0, 10, &mut rng), max);
        for attempt in 0..20 {
            let d = backoff(base, max, 0.2, attempt, &mut rng);
            let exp = base.saturating_mul(1 << attempt.min(16)).min(max);
            assert!(
                d >= exp.mul_f64(0.8) && d <= exp.mul_f64(1.2),
                "{d:?} vs {exp:?}"
            );
        }
    }

    #[test]
    fn jitter_factor_is_clamped_and_never_panics() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let d = Duration::from_secs(1);
        assert_eq!(jittered(d, f64::NAN, &mut rng), d);
        assert_eq!(jittered(d, 0.0, &mut rng), d);
        for f in [-0.5, 3.0] {
            let j = jittered(d, f, &mut rng);
            assert!(j <= Duration::from_secs(2), "{f}: {j:?}");
        }
    }
}

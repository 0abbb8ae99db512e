//! Quantisation: how a node turns each smoothed metric into the small integer *code* the
//! gossip carries, and when a moved value is worth a new version of its entry.
//!
//! Each metric has a [`Scale`]: codes count steps of `unit` up to `1 / relative_step` units
//! (exact small values: 0, 1, 2 … messages), and above that each step is `relative_step` of
//! the value (a logarithmic scale: the same relative precision for 200 MiB and 200 GiB).
//! A code of `L = 1 / relative_step` or more stands for `L·unit·(1 + relative_step)^(code − L)`.
//! On the wire a code is a LEB128 varint, so codes below 128 take one byte.
//!
//! A node publishes a new version of its entry only when, for some metric, the exact
//! smoothed value's position on the scale is `dead_band` steps or more away from the code it
//! published ([`Scale::moved`]; hysteresis, so a value wobbling across a rounding boundary
//! does not publish each sample), or on a refresh. So a published value is within
//! `dead_band` steps of the node's exact moving average, and within half a step right after
//! it is published. The table ([`scale`]):
//!
//! | metric | unit | linear up to | then steps of | dead band |
//! |---|---|---|---|---|
//! | `cpu-combined`, `cpu-process` | 0.5 % of all cores | — | (linear) | 3 steps: 1.5 % |
//! | `system-load-average` | 0.01 threads | 0.32 | 3.1 % | 3 steps: 0.03, then ~9.5 % |
//! | `processors` | 1 core | — | (linear) | 1 step (exact) |
//! | `memory-rss`, `-available`, `-total` | 1 MiB | 64 MiB | 1.6 % | 1.5 steps: ~2.4 % |
//! | `lane-queue`, `region-buffered`, `mailbox-depth` | 1 | 8 | 12.5 % | 1.5 steps: 2, then ~19 % |
//! | `entities` | 1 | 16 | 6.25 % | 1 step: 1, then 6.25 % |
//!
//! What that means for [`super::CapacitySelector`]: `cpu` is within 0.015 of the exact
//! average; `load` within ~10 % of the load average (so within 0.1 × load / processors);
//! `memory` within ~5 % of its ratio; `queues` within ~20 % of the backlog (at 100 waiting
//! messages, 0.5 ± 0.05). Routing weights are whole numbers from `capacity / least`, so
//! these move a weight by at most about one step.
//!
//! The design (quantised, change-driven versions) follows the "significant change" filters
//! of Ganglia's gmond (`value_threshold`, a metric re-sent only when it moved by more than
//! its threshold, and at least every `time_threshold`), with Akka's metrics otherwise.

use super::node_metrics::names;

/// Largest code (a varint of at most 4 bytes); larger positions saturate here.
pub const MAX_CODE: u32 = (1 << 28) - 1;

/// One metric's quantisation; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    /// The value of one step in the linear range, in the metric's unit (fraction, threads,
    /// bytes, count). Greater than 0.
    pub unit: f64,
    /// Above `1 / relative_step` units, each step is this fraction of the value; 0: linear
    /// throughout.
    pub relative_step: f64,
    /// How far (in steps) the exact smoothed value must move from the published code before
    /// the node publishes a new version.
    pub dead_band: f64,
}

const FRACTION: Scale = Scale {
    unit: 0.005,
    relative_step: 0.0,
    dead_band: 3.0,
};
const MEMORY: Scale = Scale {
    unit: 1_048_576.0,
    relative_step: 1.0 / 64.0,
    dead_band: 1.5,
};
const QUEUE: Scale = Scale {
    unit: 1.0,
    relative_step: 1.0 / 8.0,
    dead_band: 1.5,
};

/// The scales of the metrics in [`names::ALL`], in that order.
const SCALES: [Scale; 11] = [
    FRACTION, // cpu-combined
    FRACTION, // cpu-process
    Scale {
        unit: 0.01,
        relative_step: 1.0 / 32.0,
        dead_band: 3.0,
    }, // system-load-average
    Scale {
        unit: 1.0,
        relative_step: 0.0,
        dead_band: 1.0,
    }, // processors
    MEMORY,   // memory-rss
    MEMORY,   // memory-available
    MEMORY,   // memory-total
    QUEUE,    // lane-queue
    QUEUE,    // region-buffered
    QUEUE,    // mailbox-depth
    Scale {
        unit: 1.0,
        relative_step: 1.0 / 16.0,
        dead_band: 1.0,
    }, // entities
];

const _: () = assert!(SCALES.len() == names::ALL.len());

/// The scale of metric number `id` ([`names::id`]); `None` for a number this version does
/// not know (its codes are kept and forwarded, never read).
pub fn scale(id: u8) -> Option<Scale> {
    SCALES.get(usize::from(id)).copied()
}

impl Scale {
    /// Where `value` falls on the scale, in steps (a real number: its code is the nearest
    /// integer). Values below 0 or not finite count as 0; the result is at most
    /// [`MAX_CODE`].
    pub fn position(&self, value: f64) -> f64 {
        let x = if value.is_finite() && value > 0.0 {
            value / self.unit
        } else {
            0.0
        };
        let p = if self.relative_step <= 0.0 || x <= 1.0 / self.relative_step {
            x
        } else {
            let l = 1.0 / self.relative_step;
            l + (x / l).ln() / self.relative_step.ln_1p()
        };
        p.min(f64::from(MAX_CODE))
    }

    /// The code of `value`: its position rounded to the nearest step.
    pub fn code(&self, value: f64) -> u32 {
        self.position(value).round() as u32
    }

    /// The value code `code` stands for (finite and ≥ 0 for every code).
    pub fn value(&self, code: u32) -> f64 {
        let c = f64::from(code.min(MAX_CODE));
        if self.relative_step <= 0.0 || c <= 1.0 / self.relative_step {
            return c * self.unit;
        }
        let l = 1.0 / self.relative_step;
        // e^700 is finite; no code of a real value comes near it.
        let exponent = (l * self.unit).ln() + (c - l) * self.relative_step.ln_1p();
        exponent.min(700.0).exp()
    }

    /// True if `value` is at least [`Scale::dead_band`] steps away from `published`: worth a
    /// new version.
    pub fn moved(&self, published: u32, value: f64) -> bool {
        (self.position(value) - f64::from(published)).abs() >= self.dead_band
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn of(name: &str) -> Scale {
        scale(names::id(name).unwrap()).unwrap()
    }

    #[test]
    fn small_counts_cores_and_fractions_are_exact() {
        for name in [names::ENTITIES, names::MAILBOX_DEPTH, names::PROCESSORS] {
            let s = of(name);
            for n in 0..=8u32 {
                assert_eq!(s.code(f64::from(n)), n, "{name}");
                assert_eq!(s.value(n), f64::from(n), "{name}");
            }
        }
        let cpu = of(names::CPU_COMBINED);
        assert_eq!(cpu.code(0.25), 50);
        assert_eq!(cpu.value(50), 0.25);
        assert_eq!(cpu.code(1.0), 200);
        assert_eq!(of(names::PROCESSORS).code(96.0), 96);
        assert_eq!(scale(names::ALL.len() as u8), None);
    }

    #[test]
    fn typical_values_take_one_or_two_bytes() {
        // 16 GiB of memory, 10,000 entities, load 1.5, 50 % CPU.
        assert!(of(names::MEMORY_TOTAL).code(17_179_869_184.0) < 1 << 14);
        assert!(of(names::ENTITIES).code(10_000.0) < 128);
        assert!(of(names::SYSTEM_LOAD_AVERAGE).code(1.5) < 128);
        assert!(of(names::MAILBOX_DEPTH).code(1_000_000.0) < 128);
        assert!(of(names::CPU_COMBINED).code(0.5) < 128);
    }

    #[test]
    fn the_dead_band_is_hysteresis_around_the_published_code() {
        let q = of(names::MAILBOX_DEPTH);
        assert!(!q.moved(5, 6.0));
        assert!(q.moved(5, 7.0));
        assert!(q.moved(5, 3.0));
        let e = of(names::ENTITIES);
        assert!(!e.moved(5, 5.9));
        assert!(e.moved(5, 6.0));
        let cpu = of(names::CPU_COMBINED);
        // 1.5 % of CPU either way.
        assert!(!cpu.moved(100, 0.514));
        assert!(!cpu.moved(100, 0.486));
        assert!(cpu.moved(100, 0.516));
        assert!(cpu.moved(100, 0.484));
    }

    #[test]
    fn nonsense_and_huge_values_saturate() {
        let m = of(names::MEMORY_RSS);
        assert_eq!(m.code(f64::NAN), 0);
        assert_eq!(m.code(-5.0), 0);
        assert!(m.code(f64::MAX) <= MAX_CODE);
        assert!(m.value(MAX_CODE).is_finite());
        assert_eq!(of(names::CPU_COMBINED).code(f64::INFINITY), 0);
    }

    proptest! {
        #[test]
        fn a_code_stands_for_its_value_within_half_a_step(id in 0u8..11, v in 0.0f64..1e13) {
            let s = scale(id).unwrap();
            prop_assume!(s.position(v) < f64::from(MAX_CODE) - 1.0);
            let back = s.value(s.code(v));
            let abs = s.unit / 2.0 + 1e-9 * v;
            let rel = (1.0 + s.relative_step).sqrt() - 1.0 + 1e-9;
            prop_assert!((back - v).abs() <= abs.max(rel * v), "{id}: {v} → {back}");
        }

        #[test]
        fn codes_are_monotonic_and_decode_to_themselves(id in 0u8..11, c in 0u32..5_000) {
            let s = scale(id).unwrap();
            prop_assert_eq!(s.code(s.value(c)), c);
            prop_assert!(s.value(c + 1) > s.value(c));
        }
    }
}

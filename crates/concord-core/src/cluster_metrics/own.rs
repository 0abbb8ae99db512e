//! [`OwnMetrics`]: this node's samples, their moving averages, and the versions of its entry
//! it publishes — a new one only when a quantised value moved past its dead band
//! ([`super::quantise::Scale::moved`]) or when the last one is `refresh-interval` old.

use std::collections::BTreeMap;

use super::entry::MetricsEntry;
use super::ewma::Ewma;
use super::quantise::scale;

/// This node's side of the metrics; see the module docs.
#[derive(Debug)]
pub(super) struct OwnMetrics {
    uid: u64,
    alpha: f64,
    refresh_interval_ms: u64,
    /// Metric number → exact moving average.
    smoothed: BTreeMap<u8, f64>,
    /// Metric number → latest sample.
    latest: BTreeMap<u8, f64>,
    sampled_at_ms: u64,
    /// The latest version published, and when.
    published: Option<(MetricsEntry, u64)>,
}

impl OwnMetrics {
    pub(super) fn new(uid: u64, alpha: f64, refresh_interval_ms: u64) -> Self {
        OwnMetrics {
            uid,
            alpha,
            refresh_interval_ms,
            smoothed: BTreeMap::new(),
            latest: BTreeMap::new(),
            sampled_at_ms: 0,
            published: None,
        }
    }

    /// Records a sample taken at `now_ms` (metric number → value; numbers this version
    /// knows, values finite and ≥ 0): each value moves its average (a metric seen for the
    /// first time starts at its value; one missing from the sample is dropped). Returns the
    /// new version of the entry if one is due.
    pub(super) fn record(
        &mut self,
        now_ms: u64,
        values: BTreeMap<u8, f64>,
    ) -> Option<MetricsEntry> {
        let smoothed = values
            .iter()
            .map(|(id, v)| {
                let s = match self.smoothed.get(id) {
                    Some(previous) => Ewma::new(*previous, self.alpha).next(*v).value,
                    None => *v,
                };
                (*id, s)
            })
            .collect();
        self.smoothed = smoothed;
        self.latest = values;
        self.sampled_at_ms = now_ms;
        let due = match &self.published {
            None => true,
            Some((entry, at)) => {
                now_ms.saturating_sub(*at) >= self.refresh_interval_ms
                    || entry.codes.len() != self.smoothed.len()
                    || entry
                        .codes
                        .iter()
                        .zip(&self.smoothed)
                        .any(|((id, code), (sid, v))| {
                            id != sid || scale(*id).is_some_and(|s| s.moved(*code, *v))
                        })
            }
        };
        if !due {
            return None;
        }
        let entry = MetricsEntry {
            uid: self.uid,
            sequence: self.published.as_ref().map_or(1, |(e, _)| e.sequence + 1),
            codes: self
                .smoothed
                .iter()
                .filter_map(|(id, v)| scale(*id).map(|s| (*id, s.code(*v))))
                .collect(),
        };
        self.published = Some((entry.clone(), now_ms));
        Some(entry)
    }

    /// The latest version published.
    pub(super) fn published(&self) -> Option<&MetricsEntry> {
        self.published.as_ref().map(|(e, _)| e)
    }

    /// The latest sample of metric `id`.
    pub(super) fn latest(&self, id: u8) -> Option<f64> {
        self.latest.get(&id).copied()
    }

    /// When the latest sample was taken, ms.
    pub(super) fn sampled_at_ms(&self) -> u64 {
        self.sampled_at_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_metrics::names;

    fn cpu(v: f64) -> BTreeMap<u8, f64> {
        [(names::id(names::CPU_COMBINED).unwrap(), v)].into()
    }

    #[test]
    fn a_version_only_when_a_value_moves_past_its_dead_band_or_on_refresh() {
        // No smoothing, refresh after 30 s.
        let mut own = OwnMetrics::new(7, 1.0, 30_000);
        let first = own.record(0, cpu(0.5)).expect("the first sample publishes");
        assert_eq!((first.uid, first.sequence), (7, 1));
        assert_eq!(first.codes, vec![(0, 100)]);
        // 1 % of CPU is within the 1.5 % dead band: no new version.
        assert_eq!(own.record(3_000, cpu(0.51)), None);
        assert_eq!(own.latest(0), Some(0.51));
        // 2 % is past it.
        let moved = own.record(6_000, cpu(0.52)).expect("moved");
        assert_eq!((moved.sequence, moved.codes.clone()), (2, vec![(0, 104)]));
        // Unchanged, but 30 s after the last version: a refresh.
        assert_eq!(own.record(33_000, cpu(0.52)), None);
        assert_eq!(own.record(36_000, cpu(0.52)).map(|e| e.sequence), Some(3));
        // A metric that appears or goes is a change.
        let mut two = cpu(0.52);
        two.insert(names::id(names::PROCESSORS).unwrap(), 4.0);
        assert_eq!(own.record(39_000, two).map(|e| e.codes.len()), Some(2));
        assert_eq!(
            own.record(42_000, cpu(0.52)).map(|e| e.codes.len()),
            Some(1)
        );
        assert_eq!(own.published().map(|e| e.sequence), Some(5));
    }
}

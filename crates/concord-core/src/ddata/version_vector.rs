//! [`VersionVector`]: per-replica counters, the causal context of an [`super::ORSet`]; and
//! [`Dots`]: the (replica, counter) events that added one element.

use std::collections::BTreeMap;

use super::replica_id::ReplicaId;

/// Per-replica counters (absent = 0). Counters saturate at `u64::MAX` instead of wrapping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct VersionVector {
    versions: BTreeMap<ReplicaId, u64>,
}

impl VersionVector {
    /// The empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// From entries (zero counters dropped).
    pub fn from_entries(entries: impl IntoIterator<Item = (ReplicaId, u64)>) -> Self {
        VersionVector {
            versions: entries.into_iter().filter(|(_, v)| *v > 0).collect(),
        }
    }

    /// The entries, in replica order.
    pub fn entries(&self) -> impl Iterator<Item = (ReplicaId, u64)> + '_ {
        self.versions.iter().map(|(k, v)| (*k, *v))
    }

    /// The counter of `r`.
    pub fn get(&self, r: ReplicaId) -> u64 {
        self.versions.get(&r).copied().unwrap_or(0)
    }

    /// Increments `r`'s counter; returns the new value.
    pub fn increment(&mut self, r: ReplicaId) -> u64 {
        let e = self.versions.entry(r).or_insert(0);
        *e = e.saturating_add(1);
        *e
    }

    /// Raises `r`'s counter to at least `v`.
    pub fn observe(&mut self, r: ReplicaId, v: u64) {
        if v > 0 {
            let e = self.versions.entry(r).or_insert(0);
            if v > *e {
                *e = v;
            }
        }
    }

    /// Pointwise maximum.
    pub fn merge(&mut self, other: &VersionVector) {
        for (r, v) in &other.versions {
            self.observe(*r, *v);
        }
    }

    /// True if this vector has seen the event `(r, v)`.
    pub fn has_seen(&self, r: ReplicaId, v: u64) -> bool {
        self.get(r) >= v
    }

    /// Removes `r`'s entry.
    pub fn remove(&mut self, r: ReplicaId) -> Option<u64> {
        self.versions.remove(&r)
    }

    /// True if `r` has an entry.
    pub fn contains(&self, r: ReplicaId) -> bool {
        self.versions.contains_key(&r)
    }

    /// Number of replicas with an entry.
    pub fn len(&self) -> usize {
        self.versions.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}

/// The add events of one element of an ORSet: at most one (the latest) per replica, sorted
/// by replica. Usually one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(from = "Vec<(ReplicaId, u64)>")]
pub struct Dots(Vec<(ReplicaId, u64)>);

impl Dots {
    /// One dot.
    pub fn one(r: ReplicaId, v: u64) -> Self {
        Dots(vec![(r, v)])
    }

    /// From dots (sorted, one per replica: the highest).
    pub fn from_entries(entries: impl IntoIterator<Item = (ReplicaId, u64)>) -> Self {
        let mut v: VersionVector = VersionVector::from_entries(std::iter::empty());
        for (r, c) in entries {
            v.observe(r, c);
        }
        Dots(v.entries().collect())
    }

    /// The dots.
    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, u64)> + '_ {
        self.0.iter().copied()
    }

    /// True if there is no dot.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True if `(r, v)` is one of the dots.
    pub fn contains(&self, r: ReplicaId, v: u64) -> bool {
        self.0.binary_search(&(r, v)).is_ok()
    }

    /// True if every dot has been seen by `context`.
    pub fn all_seen_by(&self, context: &VersionVector) -> bool {
        self.0.iter().all(|(r, v)| context.has_seen(*r, *v))
    }

    /// ORSWOT merge of one element's dots: the dots both sides have, plus the dots of each
    /// side the other side's context has not seen (a seen dot missing from the other side
    /// was removed there).
    pub fn merge(a: &Dots, a_ctx: &VersionVector, b: &Dots, b_ctx: &VersionVector) -> Dots {
        let mut out = Vec::with_capacity(a.0.len().max(b.0.len()));
        for (r, v) in a.iter() {
            if b.contains(r, v) || !b_ctx.has_seen(r, v) {
                out.push((r, v));
            }
        }
        for (r, v) in b.iter() {
            if !a.contains(r, v) && !a_ctx.has_seen(r, v) {
                out.push((r, v));
            }
        }
        Dots::from_entries(out)
    }

    /// The dots `context` has not seen (the only ones that matter against it).
    pub fn unseen_by(&self, context: &VersionVector) -> Dots {
        Dots(
            self.0
                .iter()
                .copied()
                .filter(|(r, v)| !context.has_seen(*r, *v))
                .collect(),
        )
    }

    /// True if a dot belongs to `r`.
    pub fn has_replica(&self, r: ReplicaId) -> bool {
        self.0.iter().any(|(x, _)| *x == r)
    }

    /// Without `r`'s dot.
    pub fn without(&self, r: ReplicaId) -> Dots {
        Dots(self.0.iter().copied().filter(|(x, _)| *x != r).collect())
    }
}

/// Decoded dots are put back in order, one per replica.
impl From<Vec<(ReplicaId, u64)>> for Dots {
    fn from(v: Vec<(ReplicaId, u64)>) -> Self {
        Dots::from_entries(v)
    }
}

//! [`GSet`]: a grow-only set — add, never remove; merge is union (Akka `GSet`).

use std::collections::BTreeSet;

use super::replicated_data::{DeltaReplicatedData, ReplicatedData};

/// A grow-only set of `T`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GSet<T: Ord + Clone> {
    elements: BTreeSet<T>,
    #[serde(skip)]
    delta: Option<BTreeSet<T>>,
}

impl<T: Ord + Clone> Default for GSet<T> {
    fn default() -> Self {
        GSet {
            elements: BTreeSet::new(),
            delta: None,
        }
    }
}

impl<T: Ord + Clone> PartialEq for GSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.elements == other.elements
    }
}

impl<T: Ord + Clone> Eq for GSet<T> {}

impl<T: Ord + Clone> GSet<T> {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// From elements (a decoded value).
    pub fn from_elements(elements: impl IntoIterator<Item = T>) -> Self {
        GSet {
            elements: elements.into_iter().collect(),
            delta: None,
        }
    }

    /// Adds `e`.
    pub fn add(&mut self, e: T) {
        if self.elements.insert(e.clone()) {
            self.delta.get_or_insert_with(BTreeSet::new).insert(e);
        }
    }

    /// True if `e` is in the set.
    pub fn contains(&self, e: &T) -> bool {
        self.elements.contains(e)
    }

    /// The elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &T> {
        self.elements.iter()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }
}

impl<T: Ord + Clone + std::fmt::Debug> ReplicatedData for GSet<T> {
    fn merge(&mut self, other: &Self) {
        self.elements.extend(other.elements.iter().cloned());
    }
}

impl<T: Ord + Clone + std::fmt::Debug> DeltaReplicatedData for GSet<T> {
    type Delta = GSet<T>;

    fn take_delta(&mut self) -> Option<GSet<T>> {
        self.delta.take().map(GSet::from_elements)
    }

    fn merge_delta(&mut self, delta: &GSet<T>) {
        self.merge(delta);
    }
}

// A grow-only set holds no per-replica entries.
no_replica_entries!([T: Ord + Clone] GSet<T>);

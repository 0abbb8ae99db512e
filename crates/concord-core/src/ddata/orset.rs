//! [`ORSet`]: an observed-remove set without tombstones (ORSWOT; Bieniusa et al., "An
//! optimized conflict-free replicated set", 2012; riak_dt; Akka `ORSet`).
//!
//! Each element carries the *dots* (replica, counter) of the adds that put it there; the set
//! carries a [`VersionVector`], its causal context. An add takes a new dot; a remove drops the
//! element and its dots. On merge an element present on one side only survives with the dots
//! the other side has not seen — a dot the other side has seen but lacks was removed there —
//! so a remove wins only over the adds it observed, and a concurrent add wins (add-wins).
//!
//! Deltas are the operations (after Akka's `AddDeltaOp`, `RemoveDeltaOp`,
//! `FullStateDeltaOp`): an add carries the element, its new dot and the dots it replaced; a
//! remove the element and the dots it removed; a clear the (empty) state and context.
//! Unlike Akka's, which remove an element only if every dot of it was seen, these name the
//! dots exactly, so a replica that applies every delta in causal order holds the same value
//! as one that merged full states (property-tested). The Replicator applies each replica's
//! deltas in order and full-state gossip repairs anything else.

use std::collections::{BTreeMap, BTreeSet};

use super::removed_node_pruning::RemovedNodePruning;
use super::replica_id::ReplicaId;
use super::replicated_data::{DeltaReplicatedData, ReplicatedData};
use super::version_vector::{Dots, VersionVector};

/// An observed-remove set of `T` (add-wins).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(bound(deserialize = "T: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug"))]
#[serde(from = "ORSetRepr<T>")]
pub struct ORSet<T: Ord + Clone> {
    elements: BTreeMap<T, Dots>,
    context: VersionVector,
    #[serde(skip)]
    delta: Option<ORSetDelta<T>>,
}

/// A delta of an [`ORSet`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(bound(deserialize = "T: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug"))]
pub enum ORSetDelta<T: Ord + Clone> {
    /// `element` was added with the new dot (replica, counter), replacing the dots the
    /// adder had for it.
    Add {
        /// The element.
        element: T,
        /// Its new dot.
        dot: (ReplicaId, u64),
        /// The element's dots at the adder before the add.
        replaces: Dots,
    },
    /// `element` was removed: these were its dots at the remover.
    Remove {
        /// The element.
        element: T,
        /// The dots removed.
        dots: Dots,
    },
    /// A whole state (after a clear).
    Full(Box<ORSet<T>>),
    /// Several deltas, in order.
    Group(Vec<ORSetDelta<T>>),
}

/// The decoded form of an [`ORSet`]: elements without dots are dropped.
#[derive(serde::Deserialize)]
struct ORSetRepr<T: Ord> {
    elements: BTreeMap<T, Dots>,
    context: VersionVector,
}

impl<T: Ord + Clone + std::fmt::Debug> From<ORSetRepr<T>> for ORSet<T> {
    fn from(r: ORSetRepr<T>) -> Self {
        ORSet::from_parts(r.elements, r.context)
    }
}

impl<T: Ord + Clone> Default for ORSet<T> {
    fn default() -> Self {
        ORSet {
            elements: BTreeMap::new(),
            context: VersionVector::new(),
            delta: None,
        }
    }
}

impl<T: Ord + Clone> PartialEq for ORSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.elements == other.elements && self.context == other.context
    }
}

impl<T: Ord + Clone + std::fmt::Debug> ORSet<T> {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// From its parts (a decoded value).
    pub fn from_parts(
        elements: impl IntoIterator<Item = (T, Dots)>,
        context: VersionVector,
    ) -> Self {
        ORSet {
            elements: elements
                .into_iter()
                .filter(|(_, d)| !d.is_empty())
                .collect(),
            context,
            delta: None,
        }
    }

    /// The elements with their dots, and the context (to encode the value).
    pub fn parts(&self) -> (impl Iterator<Item = (&T, &Dots)>, &VersionVector) {
        (self.elements.iter(), &self.context)
    }

    /// True if `e` is in the set.
    pub fn contains(&self, e: &T) -> bool {
        self.elements.contains_key(e)
    }

    /// The dots of `e`, if it is in the set.
    pub fn dots(&self, e: &T) -> Option<&Dots> {
        self.elements.get(e)
    }

    /// The elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &T> {
        self.elements.keys()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// The causal context.
    pub fn context(&self) -> &VersionVector {
        &self.context
    }

    fn record(&mut self, op: ORSetDelta<T>) {
        self.delta = Some(match self.delta.take() {
            None => op,
            Some(ORSetDelta::Group(mut v)) => {
                v.push(op);
                ORSetDelta::Group(v)
            }
            Some(d) => ORSetDelta::Group(vec![d, op]),
        });
    }

    /// Adds `e` at `node` (a new dot, replacing the dots this replica has seen).
    pub fn add(&mut self, node: ReplicaId, e: T) {
        let (dot, replaces) = self.add_dot(node, e.clone());
        self.record(ORSetDelta::Add {
            element: e,
            dot,
            replaces,
        });
    }

    /// Adds `e` without recording a delta: its new dot and the dots it replaced.
    pub(super) fn add_dot(&mut self, node: ReplicaId, e: T) -> ((ReplicaId, u64), Dots) {
        let c = self.context.increment(node);
        let replaces = self
            .elements
            .insert(e, Dots::one(node, c))
            .unwrap_or_default();
        ((node, c), replaces)
    }

    /// Removes `e` (only the adds this replica has seen).
    pub fn remove(&mut self, _node: ReplicaId, e: &T) {
        if let Some(dots) = self.elements.remove(e) {
            self.record(ORSetDelta::Remove {
                element: e.clone(),
                dots,
            });
        }
    }

    /// Removes every element this replica has seen.
    pub fn clear(&mut self, _node: ReplicaId) {
        if self.elements.is_empty() {
            return;
        }
        self.elements.clear();
        let full = ORSet {
            elements: BTreeMap::new(),
            context: self.context.clone(),
            delta: None,
        };
        self.record(ORSetDelta::Full(Box::new(full)));
    }

    fn apply(&mut self, d: &ORSetDelta<T>) {
        match d {
            ORSetDelta::Add {
                element,
                dot,
                replaces,
            } => {
                let (r, c) = *dot;
                let mut dots: Vec<(ReplicaId, u64)> = self
                    .elements
                    .get(element)
                    .map(|mine| {
                        mine.iter()
                            .filter(|(x, v)| !replaces.contains(*x, *v))
                            .collect()
                    })
                    .unwrap_or_default();
                let fresh = !self.context.has_seen(r, c);
                let had = self.elements.get(element).is_some_and(|d| d.contains(r, c));
                if fresh || had {
                    dots.push((r, c));
                }
                let dots = Dots::from_entries(dots);
                if dots.is_empty() {
                    self.elements.remove(element);
                } else {
                    self.elements.insert(element.clone(), dots);
                }
                self.context.observe(r, c);
            }
            ORSetDelta::Remove { element, dots } => {
                if let Some(mine) = self.elements.get(element) {
                    let left =
                        Dots::from_entries(mine.iter().filter(|(r, v)| !dots.contains(*r, *v)));
                    if left.is_empty() {
                        self.elements.remove(element);
                    } else {
                        self.elements.insert(element.clone(), left);
                    }
                }
            }
            ORSetDelta::Full(s) => self.merge(s),
            ORSetDelta::Group(v) => {
                for d in v {
                    self.apply(d);
                }
            }
        }
    }
}

impl<T: Ord + Clone + std::fmt::Debug> ReplicatedData for ORSet<T> {
    fn merge(&mut self, other: &Self) {
        let mut merged: BTreeMap<T, Dots> = BTreeMap::new();
        for (e, mine) in &self.elements {
            let dots = match other.elements.get(e) {
                Some(theirs) => Dots::merge(mine, &self.context, theirs, &other.context),
                None => mine.unseen_by(&other.context),
            };
            if !dots.is_empty() {
                merged.insert(e.clone(), dots);
            }
        }
        for (e, theirs) in &other.elements {
            if self.elements.contains_key(e) {
                continue;
            }
            let dots = theirs.unseen_by(&self.context);
            if !dots.is_empty() {
                merged.insert(e.clone(), dots);
            }
        }
        self.elements = merged;
        self.context.merge(&other.context);
    }
}

impl<T: Ord + Clone + std::fmt::Debug> DeltaReplicatedData for ORSet<T> {
    type Delta = ORSetDelta<T>;

    fn take_delta(&mut self) -> Option<ORSetDelta<T>> {
        self.delta.take()
    }

    fn merge_delta(&mut self, delta: &ORSetDelta<T>) {
        self.apply(delta);
    }
}

impl<T: Ord + Clone + std::fmt::Debug> RemovedNodePruning for ORSet<T> {
    fn modified_by_nodes(&self) -> BTreeSet<ReplicaId> {
        self.context.entries().map(|(r, _)| r).collect()
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.context.contains(removed)
    }

    /// The removed replica's dots become new dots of `collapse_into` (its elements are
    /// re-added there), and its context entry goes.
    fn prune(&mut self, removed: ReplicaId, collapse_into: ReplicaId) {
        let readd: Vec<(T, Dots)> = self
            .elements
            .iter()
            .filter(|(_, d)| d.has_replica(removed))
            .map(|(e, d)| {
                (
                    e.clone(),
                    Dots::from_entries(d.iter().filter(|(r, _)| *r == removed)),
                )
            })
            .collect();
        for (e, _) in &readd {
            if let Some(d) = self.elements.get_mut(e) {
                *d = d.without(removed);
            }
        }
        self.context.remove(removed);
        // Each element the removed replica added is added again by `collapse_into`, as a
        // delta too: replicas that apply it after the pruning marker (which the replicator
        // sends with it) end where a full-state merge would.
        for (e, replaces) in readd {
            let c = self.context.increment(collapse_into);
            let dots = match self.elements.get(&e) {
                Some(d) => Dots::from_entries(d.iter().chain([(collapse_into, c)])),
                None => Dots::one(collapse_into, c),
            };
            self.elements.insert(e.clone(), dots);
            self.record(ORSetDelta::Add {
                element: e,
                dot: (collapse_into, c),
                replaces,
            });
        }
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        let mut empty = Vec::new();
        for (e, d) in self.elements.iter_mut() {
            if d.has_replica(removed) {
                *d = d.without(removed);
                if d.is_empty() {
                    empty.push(e.clone());
                }
            }
        }
        for e in empty {
            self.elements.remove(&e);
        }
        self.context.remove(removed);
    }
}

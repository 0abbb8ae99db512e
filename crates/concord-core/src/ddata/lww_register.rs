//! [`LWWRegister`]: a register whose last write wins — the value with the highest
//! timestamp, ties broken by the lowest replica (Akka `LWWRegister`). It needs clocks that
//! are roughly synchronised; a writer's timestamp is at least one more than the one it
//! overwrites, so a writer's own writes are ordered even if its clock goes back.

use super::replica_id::ReplicaId;
use super::replicated_data::{DeltaReplicatedData, ReplicatedData};

/// A last-writer-wins register of `T`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LWWRegister<T: Clone> {
    value: T,
    timestamp: i64,
    node: ReplicaId,
    #[serde(skip)]
    changed: bool,
}

impl<T: Clone + PartialEq> PartialEq for LWWRegister<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value && self.timestamp == other.timestamp && self.node == other.node
    }
}

impl<T: Clone + Eq> Eq for LWWRegister<T> {}

impl<T: Clone> LWWRegister<T> {
    /// A register holding `value`, written by `node` at `timestamp` (ms since the epoch).
    pub fn new(node: ReplicaId, value: T, timestamp: i64) -> Self {
        LWWRegister {
            value,
            timestamp,
            node,
            changed: true,
        }
    }

    /// The value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The timestamp of the value, ms.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The replica that wrote the value.
    pub fn updated_by(&self) -> ReplicaId {
        self.node
    }

    /// Writes `value` at `node` with clock reading `now_ms` (the timestamp is at least one
    /// more than the current one).
    pub fn set(&mut self, node: ReplicaId, value: T, now_ms: i64) {
        self.timestamp = now_ms.max(self.timestamp.saturating_add(1));
        self.value = value;
        self.node = node;
        self.changed = true;
    }

    /// True if `other` wins over `self`.
    fn loses_to(&self, other: &Self) -> bool {
        other.timestamp > self.timestamp
            || (other.timestamp == self.timestamp && other.node < self.node)
    }
}

impl<T: Clone + PartialEq + std::fmt::Debug> ReplicatedData for LWWRegister<T> {
    fn merge(&mut self, other: &Self) {
        if self.loses_to(other) {
            self.value = other.value.clone();
            self.timestamp = other.timestamp;
            self.node = other.node;
        }
    }
}

impl<T: Clone + PartialEq + std::fmt::Debug> DeltaReplicatedData for LWWRegister<T> {
    type Delta = LWWRegister<T>;

    fn take_delta(&mut self) -> Option<LWWRegister<T>> {
        if std::mem::take(&mut self.changed) {
            let mut d = self.clone();
            d.changed = false;
            Some(d)
        } else {
            None
        }
    }

    fn merge_delta(&mut self, delta: &LWWRegister<T>) {
        self.merge(delta);
    }
}

// A register holds no per-replica entries: the writer is only a tie-breaker, and a removed
// writer's value stays until overwritten.
no_replica_entries!([T: Clone] LWWRegister<T>);

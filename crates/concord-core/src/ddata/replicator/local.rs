//! The local owner's requests: `get`, `update`, `delete`, `subscribe` (Akka's `Get`,
//! `Update`, `Delete`, `Subscribe`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::api::{DeleteResult, GetResult, ReplicatorEvent, RequestId, UpdateResult};
use super::consistency::{ReadConsistency, WriteConsistency};
use super::entry::Entry;
use super::envelope::{DataEnvelope, EnvelopeData};
use super::value::{check_key_id, Key, ReplicatedType, ReplicatedValue};
use super::write_aggregator::WriteKind;
use super::Replicator;

/// The message of a panic payload.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the modify function panicked".into())
}

impl Replicator {
    /// Reads `key` at `consistency`; answered by [`ReplicatorEvent::GetResponse`]
    /// (`Success` with the value, `NotFound`, `Failure` when the consistency is not reached
    /// in time, `Deleted`).
    pub fn get(
        &mut self,
        now_ms: u64,
        request: RequestId,
        key: &str,
        consistency: ReadConsistency,
    ) {
        self.advance_clock(now_ms);
        if let Err(e) = check_key_id(key) {
            self.answer_get(request, key, Some(GetResult::Failure(e.to_string())));
            return;
        }
        if self.reads.len() + self.writes.len() >= self.settings.max_requests_in_flight {
            let reason = "too many requests in flight".to_string();
            self.answer_get(request, key, Some(GetResult::Failure(reason)));
            return;
        }
        match consistency {
            ReadConsistency::Local => self.answer_get(request, key, None),
            c => self.start_read(request, key, c.quorum(), c.timeout_ms(), now_ms),
        }
    }

    /// Updates `key`: applies `modify` to the local value (`initial()` if the key is new),
    /// then writes it at `consistency`; answered by [`ReplicatorEvent::UpdateResponse`].
    /// The type `T` is registered on the way. A panic in `modify` is caught and answered
    /// as `ModifyFailure`.
    pub fn update<T: ReplicatedType>(
        &mut self,
        now_ms: u64,
        request: RequestId,
        key: &Key<T>,
        consistency: WriteConsistency,
        initial: impl FnOnce() -> T,
        modify: impl FnOnce(&mut T),
    ) where
        T::Delta: Serialize + DeserializeOwned,
    {
        self.update_with(now_ms, request, key, consistency, initial, |v| {
            modify(v);
            Ok(())
        });
    }

    /// As [`Replicator::update`], with a `modify` that may refuse (its error is answered as
    /// `ModifyFailure`).
    pub fn update_with<T: ReplicatedType>(
        &mut self,
        now_ms: u64,
        request: RequestId,
        key: &Key<T>,
        consistency: WriteConsistency,
        initial: impl FnOnce() -> T,
        modify: impl FnOnce(&mut T) -> Result<(), String>,
    ) where
        T::Delta: Serialize + DeserializeOwned,
    {
        self.advance_clock(now_ms);
        let id = key.id();
        let respond = |this: &mut Self, result: UpdateResult| {
            this.out.events.push_back(ReplicatorEvent::UpdateResponse {
                request,
                key: id.to_string(),
                result,
            });
        };
        if self.reads.len() + self.writes.len() >= self.settings.max_requests_in_flight
            && consistency != WriteConsistency::Local
        {
            respond(
                self,
                UpdateResult::Failure("too many requests in flight".into()),
            );
            return;
        }
        if !self.registry.contains(super::DataTypeId::of::<T>()) {
            self.registry.register::<T>();
        }
        let is_new = !self.data.contains_key(id);
        if is_new && self.data.len() >= self.settings.max_keys {
            self.stats.keys_refused += 1;
            let reason = format!("max-keys {} reached", self.settings.max_keys);
            respond(self, UpdateResult::Failure(reason));
            return;
        }
        let entry = self
            .data
            .entry(id.to_string())
            .or_insert_with(|| Entry::new(DataEnvelope::new(Box::new(initial()))));
        let value = match &mut entry.envelope.data {
            EnvelopeData::Deleted => {
                respond(self, UpdateResult::Deleted);
                return;
            }
            EnvelopeData::Value(v) => v,
        };
        let held = value.type_name();
        let Some(typed) = value.as_any_mut().downcast_mut::<T>() else {
            let reason = format!(
                "type mismatch: the key holds {held}, not {}",
                std::any::type_name::<T>()
            );
            respond(self, UpdateResult::Failure(reason));
            return;
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| modify(typed)))
            .unwrap_or_else(|p| Err(panic_message(p)));
        entry.digest = None;
        if !self.settings.delta_crdt_enabled {
            let _ = entry.envelope.value_mut().map(|v| v.take_delta_encoded());
        } else {
            entry.dirty_delta = true;
        }
        if let Err(reason) = outcome {
            if is_new {
                self.data.remove(id);
            } else {
                self.on_changed(id);
            }
            respond(self, UpdateResult::ModifyFailure(reason));
            return;
        }
        self.on_changed(id);
        match consistency {
            WriteConsistency::Local => respond(self, UpdateResult::Success),
            c => self.start_write(
                request,
                id,
                WriteKind::Update,
                c.quorum(),
                c.timeout_ms(),
                now_ms,
            ),
        }
    }

    /// Deletes `key` for good (a tombstone that spreads like a value; the key can never be
    /// used again), at `consistency`; answered by [`ReplicatorEvent::DeleteResponse`].
    pub fn delete(
        &mut self,
        now_ms: u64,
        request: RequestId,
        key: &str,
        consistency: WriteConsistency,
    ) {
        self.advance_clock(now_ms);
        let respond = |this: &mut Self, result: DeleteResult| {
            this.out.events.push_back(ReplicatorEvent::DeleteResponse {
                request,
                key: key.to_string(),
                result,
            });
        };
        if let Err(e) = check_key_id(key) {
            respond(self, DeleteResult::Failure(e.to_string()));
            return;
        }
        match self.data.get_mut(key) {
            Some(e) if e.envelope.is_deleted() => {
                respond(self, DeleteResult::AlreadyDeleted);
                return;
            }
            Some(e) => {
                e.envelope = DataEnvelope::deleted();
                e.digest = None;
                e.dirty_delta = false;
            }
            None => {
                if self.data.len() >= self.settings.max_keys {
                    self.stats.keys_refused += 1;
                    let reason = format!("max-keys {} reached", self.settings.max_keys);
                    respond(self, DeleteResult::Failure(reason));
                    return;
                }
                self.data
                    .insert(key.to_string(), Entry::new(DataEnvelope::deleted()));
            }
        }
        self.deltas.forget_key(key);
        self.on_changed(key);
        match consistency {
            WriteConsistency::Local => respond(self, DeleteResult::Success),
            c => self.start_write(
                request,
                key,
                WriteKind::Delete,
                c.quorum(),
                c.timeout_ms(),
                now_ms,
            ),
        }
    }

    /// Subscribes to changes of `key`: a [`ReplicatorEvent::Changed`] (or `Deleted`) at
    /// most every notify interval while it changes, and one soon for its current value.
    pub fn subscribe(&mut self, key: &str) {
        *self.subscriptions.entry(key.to_string()).or_insert(0) += 1;
        if self.data.contains_key(key) {
            self.changed.insert(key.to_string());
        }
    }

    /// Ends one subscription to `key`.
    pub fn unsubscribe(&mut self, key: &str) {
        if let Some(n) = self.subscriptions.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.subscriptions.remove(key);
            }
        }
    }

    /// The local value of `key` as `T`, if it holds one.
    pub fn local_typed<T: ReplicatedType>(&self, key: &Key<T>) -> Option<&T>
    where
        T::Delta: Serialize + DeserializeOwned,
    {
        self.data
            .get(key.id())
            .and_then(|e| e.envelope.value())
            .and_then(|v: &dyn ReplicatedValue| v.as_any().downcast_ref::<T>())
    }
}

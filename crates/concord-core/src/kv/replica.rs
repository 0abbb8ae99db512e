//! The replica side of [`KvMachine`]: writes, reads, read repairs and reaps sent by a
//! coordinator, applied to the local [`super::ReplicaStore`]. Answers leave only after the
//! change is committed (see [`KvMachine::commit`]). Every version from the network is
//! validated before it is merged; a refused one is counted and changes nothing.

use crate::address::UniqueAddress;
use crate::kv::object::{Versioned, MAX_CLOCK_ENTRIES};
use crate::kv::ring::{key_hash, segment_of};
use crate::kv::store::Update;
use crate::kv::{KvMachine, KvMessage, KvStorage};

impl<S: KvStorage> KvMachine<S> {
    /// A message for the replica (or a handoff page).
    pub(super) fn replica_message(&mut self, now_ms: u64, from: &UniqueAddress, m: KvMessage) {
        match m {
            KvMessage::Put {
                request,
                key,
                object,
            } => {
                let result = self.replica_put(&key, &object);
                self.send(from, KvMessage::PutReply { request, result });
            }
            KvMessage::Forward {
                request,
                key,
                value,
                context,
                n,
                w,
            } => self.forward_received(now_ms, from, request, key, value, context, n, w),
            KvMessage::Get { request, key } => {
                let result = self.store.get(&key).map_err(|e| {
                    self.stats.storage_errors += 1;
                    e.to_string()
                });
                let complete = self.ae.is_complete(segment_of(key_hash(&key)));
                self.send(
                    from,
                    KvMessage::GetReply {
                        request,
                        result,
                        complete,
                    },
                );
            }
            KvMessage::Repair { key, object } => {
                if object.validate().is_err() || key.len() > self.settings.max_key_bytes {
                    self.stats.invalid_messages += 1;
                    return;
                }
                if self.store.apply(&key, Update::Merge(&object)).is_err() {
                    self.stats.storage_errors += 1;
                }
            }
            KvMessage::Reap { key, clock } => {
                if clock.len() > MAX_CLOCK_ENTRIES {
                    self.stats.invalid_messages += 1;
                    return;
                }
                match self.store.apply(&key, Update::Reap(&clock)) {
                    Ok(a) if a.changed => self.stats.tombstones_reaped += 1,
                    Ok(_) => {}
                    Err(_) => self.stats.storage_errors += 1,
                }
            }
            KvMessage::Handoff { session, objects } => {
                self.handoff_received(now_ms, from, session, objects)
            }
            // Answers and anti-entropy are routed before this.
            _ => self.stats.invalid_messages += 1,
        }
    }

    /// Merges a coordinator's version of a key, checked against this node's limits.
    fn replica_put(&mut self, key: &str, object: &Versioned) -> Result<(), String> {
        if key.is_empty() || key.len() > self.settings.max_key_bytes || object.validate().is_err() {
            self.stats.invalid_messages += 1;
            return Err("invalid key or version".into());
        }
        if object
            .values()
            .any(|v| v.len() > self.settings.max_value_bytes)
        {
            return Err(format!(
                "a value is over kv.max-value-size ({} bytes) here",
                self.settings.max_value_bytes
            ));
        }
        self.store
            .apply(key, Update::Merge(object))
            .map(|_| ())
            .map_err(|e| {
                self.stats.storage_errors += 1;
                e.to_string()
            })
    }
}

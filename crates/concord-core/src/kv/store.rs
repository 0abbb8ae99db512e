//! [`ReplicaStore`]: one node's replicas of the key-value store — its objects in a
//! [`KvStorage`], and the anti-entropy hash tree over them kept up to date with every
//! change.
//!
//! **Hash tree.** Keys are grouped by (segment, n) — the keys one preference list holds —
//! and each group by the 64 buckets of the segment. A key contributes
//! `xxh3_64_with_seed(key, digest(object))` to its bucket; a bucket's hash is the XOR of its
//! keys' contributions (so a change updates it in O(1)) and a group's hash the XOR of its
//! buckets'. Two replicas with equal group hashes hold the same versions of the same keys
//! (up to 64-bit collisions). The leaves are stored next to the objects (in the same
//! commit) and the tree is kept in memory, so start-up reads 64 rows per group, not every
//! object.
//!
//! **Dots and per-key actors.** A write is coordinated by a replica of its key: it applies
//! the write to its local copy — the new dot continues the counter of the key's *local
//! actor* — and the resulting object is what the other replicas merge. A version vector
//! entry `A: c` claims "every write of A up to c is seen", which holds only if A's counters
//! for the key are contiguous and A's copy never lost one of its own writes. So each local
//! copy records the actor this store writes it with; a store coordinating a key it does not
//! hold — a new key, or one it reaped or handed off — mints a fresh actor (Riak KV's
//! per-key epochs): `xxh3_64_with_seed(epoch, store id)`, with a store id made when the
//! store is created (a wiped data directory gets a new one) and epochs reserved in blocks
//! of [`EPOCH_BLOCK`], committed before any of them is used, so no actor is ever reused.

use std::collections::BTreeMap;

use crate::ddata::{ReplicaId, VersionVector};
use crate::kv::object::{Dot, ObjectError, Versioned, Write};
pub use crate::kv::record::decode_record;
use crate::kv::record::{u64_at, Record};
use crate::kv::ring::{bucket_of, key_hash, segment_of, BUCKETS};
use crate::kv::storage::{KvStorage, StorageError, Table};

/// Epochs reserved at once.
pub const EPOCH_BLOCK: u64 = 1 << 16;
const META_REPLICA: &[u8] = b"replica";
const META_EPOCHS: &[u8] = b"epochs-reserved";
/// A (segment, n) group of keys: the keys one preference list holds.
pub type Group = (u16, u8);

/// A leaf of the hash tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketEntry {
    /// XOR of the keys' contributions.
    pub hash: u64,
    /// Keys in the bucket.
    pub count: u64,
}

/// A page of a segment scan: (key, version) pairs, and the cursor to continue from
/// (`None`: the segment is done).
pub type ScanPage = (Vec<(String, Versioned)>, Option<Vec<u8>>);

/// How an object changes.
#[derive(Clone, Copy, Debug)]
pub enum Update<'a> {
    /// Another replica's version (a coordinated write, read repair, anti-entropy,
    /// handoff).
    Merge(&'a Versioned),
    /// Remove the object if it is a tombstone this clock has seen all of.
    Reap(&'a VersionVector),
    /// Remove the object if its digest is still this one (after a handoff).
    RemoveIfDigest(u64),
}

/// What [`ReplicaStore::apply`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// True if the stored object changed.
    pub changed: bool,
    /// The object now (`None`: absent).
    pub object: Option<Versioned>,
}

/// Why an update was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The write would make the object larger than allowed (too many siblings).
    #[error("the object would hold {bytes} bytes with {siblings} siblings, over the limit of {limit} bytes: resolve its siblings with a write carrying the context of a read")]
    TooLarge {
        /// Its encoded size.
        bytes: usize,
        /// Its siblings.
        siblings: usize,
        /// The limit.
        limit: usize,
    },
}

/// The bytes under which `key` is stored: segment, bucket, key.
pub fn object_key(key: &str) -> Vec<u8> {
    let h = key_hash(key);
    let mut k = Vec::with_capacity(3 + key.len());
    k.extend_from_slice(&segment_of(h).to_be_bytes());
    k.push(bucket_of(h));
    k.extend_from_slice(key.as_bytes());
    k
}

fn segment_start(segment: u32) -> Vec<u8> {
    // Segments are < 1024, and 1024 is the end bound of the last one.
    (segment as u16).to_be_bytes().to_vec()
}

fn bucket_row_key(group: Group, bucket: u8) -> [u8; 4] {
    let s = group.0.to_be_bytes();
    [s[0], s[1], group.1, bucket]
}

/// A key's contribution to its bucket's hash.
pub fn entry_hash(key: &str, object: &Versioned) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), object.digest())
}

fn corrupt(what: &str, e: ObjectError) -> StorageError {
    StorageError(format!("corrupt {what}: {e}"))
}

/// One node's replicas; see the module docs.
pub struct ReplicaStore<S> {
    storage: S,
    index: BTreeMap<Group, Box<[BucketEntry; BUCKETS as usize]>>,
    replica: ReplicaId,
    next_epoch: u64,
    reserved: u64,
    keys: u64,
}

impl<S: KvStorage> ReplicaStore<S> {
    /// Opens the store in `storage`: reads its replica id (or makes it `fresh_replica`, for
    /// a new store), its dot reservation and the hash tree's leaves.
    ///
    /// # Errors
    /// The storage failed or holds a corrupt record.
    pub fn open(mut storage: S, fresh_replica: u64) -> Result<Self, StorageError> {
        let replica = match storage.get(Table::Meta, META_REPLICA)? {
            Some(b) => {
                ReplicaId(u64_at(&b, 0).ok_or_else(|| StorageError("corrupt replica id".into()))?)
            }
            None => {
                let r = fresh_replica.max(1);
                storage.put(Table::Meta, META_REPLICA, &r.to_le_bytes())?;
                storage.commit()?;
                ReplicaId(r)
            }
        };
        let reserved = match storage.get(Table::Meta, META_EPOCHS)? {
            Some(b) => {
                u64_at(&b, 0).ok_or_else(|| StorageError("corrupt epoch reservation".into()))?
            }
            None => 0,
        };
        let mut store = ReplicaStore {
            storage,
            index: BTreeMap::new(),
            replica,
            // Epochs up to the last reservation may have been used before a restart.
            next_epoch: reserved.saturating_add(1),
            reserved,
            keys: 0,
        };
        store.load_index()?;
        Ok(store)
    }

    fn load_index(&mut self) -> Result<(), StorageError> {
        self.index.clear();
        self.keys = 0;
        let rows = self
            .storage
            .range(Table::Buckets, &[0], &[0xff; 5], usize::MAX)?;
        for (k, v) in rows {
            let (Ok(k), Some(hash), Some(count)) = (
                <[u8; 4]>::try_from(k.as_slice()),
                u64_at(&v, 0),
                u64_at(&v, 8),
            ) else {
                return Err(StorageError("corrupt hash tree leaf".into()));
            };
            let group = (u16::from_be_bytes([k[0], k[1]]), k[2]);
            let bucket = usize::from(k[3]);
            if bucket >= usize::from(BUCKETS) {
                return Err(StorageError("corrupt hash tree leaf".into()));
            }
            self.index
                .entry(group)
                .or_insert_with(|| Box::new([BucketEntry::default(); BUCKETS as usize]))[bucket] =
                BucketEntry { hash, count };
            self.keys = self.keys.saturating_add(count);
        }
        self.index
            .retain(|_, b| b.iter().any(|e| e.count > 0 || e.hash != 0));
        Ok(())
    }

    /// This store's id (it seeds the actors of the writes it coordinates).
    pub fn replica(&self) -> ReplicaId {
        self.replica
    }

    /// A fresh actor: the next epoch, hashed with the store id.
    fn mint_actor(&mut self) -> Result<ReplicaId, StorageError> {
        if self.next_epoch > self.reserved {
            let reserved = self.reserved.saturating_add(EPOCH_BLOCK);
            self.storage
                .put(Table::Meta, META_EPOCHS, &reserved.to_le_bytes())?;
            // The reservation is durable before an epoch of it is used.
            self.storage.commit()?;
            self.reserved = reserved;
        }
        let epoch = self.next_epoch;
        self.next_epoch = self.next_epoch.saturating_add(1);
        Ok(ReplicaId(
            xxhash_rust::xxh3::xxh3_64_with_seed(&epoch.to_le_bytes(), self.replica.0).max(1),
        ))
    }

    fn record(&mut self, key: &str) -> Result<Option<Record>, StorageError> {
        match self.storage.get(Table::Objects, &object_key(key))? {
            Some(b) => Record::decode(&b)
                .map(Some)
                .map_err(|e| corrupt("object", e)),
            None => Ok(None),
        }
    }

    /// The stored object of `key`.
    ///
    /// # Errors
    /// The storage failed or the record is corrupt.
    pub fn get(&mut self, key: &str) -> Result<Option<Versioned>, StorageError> {
        Ok(self.record(key)?.map(|r| r.object))
    }

    /// Coordinates a client's write of `key`: a new dot of the key's local actor (minted
    /// if this store does not hold the key), applied with `context` to the local copy.
    /// Returns the resulting object, for the other replicas to merge. A write whose result
    /// would encode larger than `max_object_bytes` is refused.
    ///
    /// # Errors
    /// The storage failed, or the write is refused.
    pub fn coordinate(
        &mut self,
        key: &str,
        context: VersionVector,
        value: Option<Vec<u8>>,
        n: u8,
        max_object_bytes: usize,
    ) -> Result<Versioned, ApplyError> {
        let before = self.record(key)?;
        let actor = match before.as_ref().and_then(|r| r.local_actor) {
            Some(a) => a,
            None => self.mint_actor()?,
        };
        let mut object = before
            .as_ref()
            .map_or_else(|| Versioned::empty(n), |r| r.object.clone());
        let counter = object.clock().get(actor).saturating_add(1);
        object.apply_write(&Write {
            context,
            dot: Dot {
                replica: actor,
                counter,
            },
            value,
            n,
        });
        let bytes = object.encode().len();
        if bytes > max_object_bytes {
            return Err(ApplyError::TooLarge {
                bytes,
                siblings: object.siblings().len(),
                limit: max_object_bytes,
            });
        }
        let after = Record {
            local_actor: Some(actor),
            object: object.clone(),
        };
        self.store_record(key, before.as_ref().map(|r| &r.object), Some(&after))?;
        Ok(object)
    }

    /// Applies `update` to `key`'s object (never refused for its size: a merge only brings
    /// together versions that exist).
    ///
    /// # Errors
    /// The storage failed.
    pub fn apply(&mut self, key: &str, update: Update<'_>) -> Result<Applied, ApplyError> {
        let before = self.record(key)?;
        let current = before.as_ref().map(|r| &r.object);
        let after: Option<Versioned> = match update {
            Update::Merge(other) => Some(match current {
                Some(b) => b.merged(other),
                None => other.clone(),
            }),
            Update::Reap(clock) => match current {
                Some(b)
                    if b.is_deleted() && b.clock().entries().all(|(r, c)| clock.has_seen(r, c)) =>
                {
                    None
                }
                _ => current.cloned(),
            },
            Update::RemoveIfDigest(d) => match current {
                Some(b) if b.digest() == d => None,
                _ => current.cloned(),
            },
        };
        if after.as_ref() == current {
            return Ok(Applied {
                changed: false,
                object: after,
            });
        }
        // A merge keeps the local actor; a removal forgets it (the next write mints one).
        let record = after.clone().map(|object| Record {
            local_actor: before.as_ref().and_then(|r| r.local_actor),
            object,
        });
        self.store_record(key, current, record.as_ref())?;
        Ok(Applied {
            changed: true,
            object: after,
        })
    }

    /// Writes (or removes) a record and moves its key's contribution in the hash tree.
    fn store_record(
        &mut self,
        key: &str,
        before: Option<&Versioned>,
        after: Option<&Record>,
    ) -> Result<(), StorageError> {
        let k = object_key(key);
        match after {
            Some(r) => self.storage.put(Table::Objects, &k, &r.encode())?,
            None => self.storage.remove(Table::Objects, &k)?,
        }
        let h = key_hash(key);
        let (segment, bucket) = (segment_of(h), bucket_of(h));
        if let Some(b) = before {
            self.adjust((segment, b.n()), bucket, entry_hash(key, b), false)?;
        }
        if let Some(a) = after {
            let o = &a.object;
            self.adjust((segment, o.n()), bucket, entry_hash(key, o), true)?;
        }
        Ok(())
    }

    /// Adds (or removes) one key's contribution to a leaf, in memory and in storage.
    fn adjust(
        &mut self,
        group: Group,
        bucket: u8,
        hash: u64,
        add: bool,
    ) -> Result<(), StorageError> {
        let leaves = self
            .index
            .entry(group)
            .or_insert_with(|| Box::new([BucketEntry::default(); BUCKETS as usize]));
        let e = &mut leaves[usize::from(bucket)];
        e.hash ^= hash;
        if add {
            e.count = e.count.saturating_add(1);
            self.keys = self.keys.saturating_add(1);
        } else {
            e.count = e.count.saturating_sub(1);
            self.keys = self.keys.saturating_sub(1);
        }
        let e = *e;
        let row = bucket_row_key(group, bucket);
        if e.count == 0 && e.hash == 0 {
            self.storage.remove(Table::Buckets, &row)?;
            if leaves.iter().all(|x| x.count == 0 && x.hash == 0) {
                self.index.remove(&group);
            }
        } else {
            let mut v = [0u8; 16];
            v[..8].copy_from_slice(&e.hash.to_le_bytes());
            v[8..].copy_from_slice(&e.count.to_le_bytes());
            self.storage.put(Table::Buckets, &row, &v)?;
        }
        Ok(())
    }

    /// Objects of `segment` (with replication factor `n`, if given) in storage order,
    /// after the storage key `after`, until `max_objects` or `max_bytes` of values; and the
    /// cursor to continue from (`None`: the segment is done).
    ///
    /// # Errors
    /// The storage failed or a record is corrupt.
    pub fn scan_segment(
        &mut self,
        segment: u16,
        n: Option<u8>,
        after: Option<&[u8]>,
        max_objects: usize,
        max_bytes: usize,
    ) -> Result<ScanPage, StorageError> {
        let start = match after {
            Some(a) => {
                let mut s = a.to_vec();
                s.push(0);
                s
            }
            None => segment_start(u32::from(segment)),
        };
        let end = segment_start(u32::from(segment) + 1);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut cursor = start;
        loop {
            let page = self.storage.range(Table::Objects, &cursor, &end, 256)?;
            let last_page = page.len() < 256;
            for (k, v) in page {
                let key = String::from_utf8(k.get(3..).unwrap_or_default().to_vec())
                    .map_err(|_| StorageError("corrupt object key".into()))?;
                let o = Record::decode(&v).map_err(|e| corrupt("object", e))?.object;
                cursor = k;
                cursor.push(0);
                if n.is_some_and(|n| n != o.n()) {
                    continue;
                }
                bytes = bytes.saturating_add(o.value_bytes() + key.len());
                out.push((key, o));
                if out.len() >= max_objects || bytes >= max_bytes {
                    cursor.pop();
                    return Ok((out, Some(cursor)));
                }
            }
            if last_page {
                return Ok((out, None));
            }
        }
    }

    /// The (key, digest) of each key in one bucket of a group, in key order.
    ///
    /// # Errors
    /// The storage failed or a record is corrupt.
    pub fn bucket_digests(
        &mut self,
        group: Group,
        bucket: u8,
    ) -> Result<Vec<(String, u64)>, StorageError> {
        let s = group.0.to_be_bytes();
        let start = [s[0], s[1], bucket];
        let end = [s[0], s[1], bucket.saturating_add(1)];
        let mut out = Vec::new();
        let mut cursor = start.to_vec();
        loop {
            let page = self.storage.range(Table::Objects, &cursor, &end, 256)?;
            let done = page.len() < 256;
            for (k, v) in page {
                let o = Record::decode(&v).map_err(|e| corrupt("object", e))?.object;
                if o.n() == group.1 {
                    let key = String::from_utf8(k.get(3..).unwrap_or_default().to_vec())
                        .map_err(|_| StorageError("corrupt object key".into()))?;
                    out.push((key, o.digest()));
                }
                cursor = k;
                cursor.push(0);
            }
            if done {
                return Ok(out);
            }
        }
    }

    /// The groups this store holds keys of, with their hash and key count.
    pub fn groups(&self) -> impl Iterator<Item = (Group, u64, u64)> + '_ {
        self.index.iter().map(|(g, leaves)| {
            let (h, c) = leaves.iter().fold((0u64, 0u64), |(h, c), e| {
                (h ^ e.hash, c.saturating_add(e.count))
            });
            (*g, h, c)
        })
    }

    /// The hash of a group (0 when empty).
    pub fn group_hash(&self, group: Group) -> u64 {
        self.index
            .get(&group)
            .map_or(0, |l| l.iter().fold(0, |h, e| h ^ e.hash))
    }

    /// The keys of a group, count.
    pub fn group_count(&self, group: Group) -> u64 {
        self.index
            .get(&group)
            .map_or(0, |l| l.iter().map(|e| e.count).sum())
    }

    /// The non-zero leaf hashes of a group, by bucket.
    pub fn bucket_hashes(&self, group: Group) -> Vec<(u8, u64)> {
        self.index
            .get(&group)
            .map(|l| {
                l.iter()
                    .enumerate()
                    .filter(|(_, e)| e.hash != 0 || e.count != 0)
                    .map(|(b, e)| (b as u8, e.hash))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Keys stored, count.
    pub fn key_count(&self) -> u64 {
        self.keys
    }

    /// Makes the changes since the last commit durable. On failure the in-memory hash tree
    /// is read back from storage (the changes may be lost).
    ///
    /// # Errors
    /// The storage failed.
    pub fn commit(&mut self) -> Result<(), StorageError> {
        match self.storage.commit() {
            Ok(()) => Ok(()),
            Err(e) => {
                // Whatever was not committed is gone: rebuild the tree from what is there.
                let _ = self.load_index();
                Err(e)
            }
        }
    }

    /// The storage (for tools and tests).
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// The storage, read-only (its file, its size).
    pub fn storage_ref(&self) -> &S {
        &self.storage
    }
}

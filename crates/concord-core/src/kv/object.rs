//! [`Versioned`]: a stored value of the key-value store with its siblings and causal
//! context — the original cluster spec's `Versioned(hash, version: VectorClock, data)`,
//! made precise with **dotted version vectors** (Preguiça, Baquero, Almeida, Fonte and
//! Gonçalves, "Dotted Version Vectors: Logical Clocks for Optimistic Replication", 2010;
//! the model Riak KV 2.0 adopted to stop concurrent writes through one coordinator from
//! overwriting each other).
//!
//! Every write gets a fresh [`Dot`] — (replica, counter) of the store that coordinated it —
//! and carries the **context** the client last read (a [`VersionVector`]): the write
//! supersedes exactly the siblings whose dots the context has seen and is kept next to
//! every other sibling as a concurrent version. The object's **clock** is everything it has
//! seen. Merging two replicas' objects keeps a sibling if both have it, or if one has it and
//! the other's clock has not seen it (a seen dot missing from the other side was superseded
//! there) — the join of a dotted causal container, a CRDT: commutative, associative and
//! idempotent (property-tested in `kv::tests`). A delete writes a **tombstone** sibling.
//!
//! Shapes and bounds: at most [`MAX_CLOCK_ENTRIES`] clock entries and [`MAX_SIBLINGS`]
//! siblings are decoded; every sibling's dot is in the clock; dots are unique and sorted.

use serde::{Deserialize, Serialize};

use crate::ddata::{ReplicaId, VersionVector};

/// Most clock entries a decoded object or context may have (one per store that
/// coordinated a write of the key).
pub const MAX_CLOCK_ENTRIES: usize = 1_024;
/// Most siblings a decoded object may have.
pub const MAX_SIBLINGS: usize = 1_024;
/// Largest replication factor (`n`).
pub const MAX_N: u8 = 9;
/// Format byte in front of every encoded object and context.
const FORMAT: u8 = 1;

/// One write event: the store that coordinated it and that store's counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dot {
    /// The coordinating store.
    pub replica: ReplicaId,
    /// Its counter (unique per store, increasing).
    pub counter: u64,
}

/// One concurrent version of a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sibling {
    /// The write that made it.
    pub dot: Dot,
    /// The value; `None` is a tombstone (a delete).
    pub value: Option<Vec<u8>>,
}

/// A write as a replica applies it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// What the client had read (empty: a blind write, kept next to what exists).
    pub context: VersionVector,
    /// The write's fresh dot.
    pub dot: Dot,
    /// The value; `None` deletes (writes a tombstone).
    pub value: Option<Vec<u8>>,
    /// The replication factor the key is written with (1..=[`MAX_N`]).
    pub n: u8,
}

/// Why bytes are not an object or a context.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// Not decodable.
    #[error("malformed: {0}")]
    Malformed(String),
    /// Decodable but breaks an invariant or a bound.
    #[error("invalid: {0}")]
    Invalid(&'static str),
}

/// A key's stored value: its siblings and causal context (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versioned {
    clock: VersionVector,
    siblings: Vec<Sibling>,
    n: u8,
}

/// What [`Versioned::apply_write`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The write is in.
    Applied,
    /// The object had already seen the write's dot (a duplicate): nothing changed.
    AlreadySeen,
}

impl Versioned {
    /// An object that has seen nothing, with replication factor `n`.
    pub fn empty(n: u8) -> Self {
        Versioned {
            clock: VersionVector::new(),
            siblings: Vec::new(),
            n,
        }
    }

    /// The object a single write makes.
    pub fn of_write(w: &Write) -> Self {
        let mut o = Versioned::empty(w.n);
        o.apply_write(w);
        o
    }

    /// The causal context: every write this object has seen (what a client passes back
    /// with its next write).
    pub fn clock(&self) -> &VersionVector {
        &self.clock
    }

    /// The siblings, sorted by dot.
    pub fn siblings(&self) -> &[Sibling] {
        &self.siblings
    }

    /// The replication factor the key was written with (the largest seen).
    pub fn n(&self) -> u8 {
        self.n
    }

    /// True if every sibling is a tombstone (or there is none): the key reads as absent.
    pub fn is_deleted(&self) -> bool {
        self.siblings.iter().all(|s| s.value.is_none())
    }

    /// The values of the live siblings, in dot order.
    pub fn values(&self) -> impl Iterator<Item = &[u8]> {
        self.siblings.iter().filter_map(|s| s.value.as_deref())
    }

    /// Bytes of values held, summed over siblings.
    pub fn value_bytes(&self) -> usize {
        self.siblings
            .iter()
            .map(|s| s.value.as_ref().map_or(0, Vec::len))
            .sum()
    }

    fn has_dot(&self, d: &Dot) -> bool {
        self.siblings.binary_search_by(|s| s.dot.cmp(d)).is_ok()
    }

    fn seen(clock: &VersionVector, d: &Dot) -> bool {
        clock.has_seen(d.replica, d.counter)
    }

    /// Applies a write: the siblings its context has seen are superseded, its value is
    /// added as a sibling, the clock takes in the context and the dot; `n` becomes the
    /// larger of the two. A write whose dot this object has already seen changes nothing
    /// (duplicates and late retries are harmless).
    pub fn apply_write(&mut self, w: &Write) -> WriteOutcome {
        if Self::seen(&self.clock, &w.dot) {
            return WriteOutcome::AlreadySeen;
        }
        self.siblings.retain(|s| !Self::seen(&w.context, &s.dot));
        let at = self
            .siblings
            .binary_search_by(|s| s.dot.cmp(&w.dot))
            .unwrap_or_else(|i| i);
        self.siblings.insert(
            at,
            Sibling {
                dot: w.dot,
                value: w.value.clone(),
            },
        );
        self.clock.merge(&w.context);
        self.clock.observe(w.dot.replica, w.dot.counter);
        self.n = self.n.max(w.n);
        WriteOutcome::Applied
    }

    /// Merges another replica's object (the dotted causal container join): keeps each
    /// sibling both have, and each sibling of one side the other side's clock has not
    /// seen; the clocks merge pointwise; `n` is the larger.
    pub fn merge(&mut self, other: &Versioned) {
        let mut out: Vec<Sibling> =
            Vec::with_capacity(self.siblings.len().max(other.siblings.len()));
        for s in &self.siblings {
            if other.has_dot(&s.dot) || !Self::seen(&other.clock, &s.dot) {
                out.push(s.clone());
            }
        }
        for s in &other.siblings {
            if !self.has_dot(&s.dot) && !Self::seen(&self.clock, &s.dot) {
                out.push(s.clone());
            }
        }
        out.sort_by_key(|s| s.dot);
        self.siblings = out;
        self.clock.merge(&other.clock);
        self.n = self.n.max(other.n);
    }

    /// `self` merged with `other`.
    pub fn merged(&self, other: &Versioned) -> Versioned {
        let mut m = self.clone();
        m.merge(other);
        m
    }

    /// True if this object holds everything `other` holds: merging `other` in would
    /// change nothing.
    pub fn descends(&self, other: &Versioned) -> bool {
        self.merged(other) == *self
    }

    /// A 64-bit digest of the object's version — its clock, its siblings' dots and
    /// tombstone marks, and `n` — for anti-entropy. Values are not hashed: a dot names
    /// one write, so equal dots mean equal values.
    pub fn digest(&self) -> u64 {
        let mut buf = Vec::with_capacity(16 * (self.clock.len() + self.siblings.len()) + 1);
        for (r, c) in self.clock.entries() {
            buf.extend_from_slice(&r.0.to_le_bytes());
            buf.extend_from_slice(&c.to_le_bytes());
        }
        buf.push(0xff);
        for s in &self.siblings {
            buf.extend_from_slice(&s.dot.replica.0.to_le_bytes());
            buf.extend_from_slice(&s.dot.counter.to_le_bytes());
            buf.push(u8::from(s.value.is_some()));
        }
        buf.push(self.n);
        xxhash_rust::xxh3::xxh3_64(&buf)
    }

    /// Checks the invariants an object from the network or the disk must hold.
    ///
    /// # Errors
    /// Which invariant or bound is broken.
    pub fn validate(&self) -> Result<(), ObjectError> {
        if self.clock.len() > MAX_CLOCK_ENTRIES {
            return Err(ObjectError::Invalid("too many clock entries"));
        }
        if self.siblings.len() > MAX_SIBLINGS {
            return Err(ObjectError::Invalid("too many siblings"));
        }
        if self.n == 0 || self.n > MAX_N {
            return Err(ObjectError::Invalid("n out of range"));
        }
        if !self.siblings.windows(2).all(|w| w[0].dot < w[1].dot) {
            return Err(ObjectError::Invalid("siblings not sorted and unique"));
        }
        if !self
            .siblings
            .iter()
            .all(|s| Self::seen(&self.clock, &s.dot))
        {
            return Err(ObjectError::Invalid("a sibling's dot is not in the clock"));
        }
        Ok(())
    }

    /// The object's bytes (a format byte, then postcard).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        // Serializing plain data into a Vec cannot fail.
        out.extend(postcard::to_stdvec(self).unwrap_or_default());
        out
    }

    /// An object from [`Versioned::encode`]'s bytes, validated.
    ///
    /// # Errors
    /// Not an object of this format, or an invalid one.
    pub fn decode(bytes: &[u8]) -> Result<Versioned, ObjectError> {
        let body = match bytes.split_first() {
            Some((&FORMAT, body)) => body,
            Some((f, _)) => return Err(ObjectError::Malformed(format!("unknown format {f}"))),
            None => return Err(ObjectError::Malformed("empty".into())),
        };
        let o: Versioned =
            postcard::from_bytes(body).map_err(|e| ObjectError::Malformed(e.to_string()))?;
        o.validate()?;
        Ok(o)
    }
}

impl crate::ddata::ReplicatedData for Versioned {
    fn merge(&mut self, other: &Self) {
        Versioned::merge(self, other)
    }
}

/// A context's bytes (what clients get as an opaque token): a format byte, then postcard.
pub fn encode_context(context: &VersionVector) -> Vec<u8> {
    let mut out = vec![FORMAT];
    out.extend(postcard::to_stdvec(context).unwrap_or_default());
    out
}

/// A context from [`encode_context`]'s bytes.
///
/// # Errors
/// Not a context, or more than [`MAX_CLOCK_ENTRIES`] entries.
pub fn decode_context(bytes: &[u8]) -> Result<VersionVector, ObjectError> {
    let body = match bytes.split_first() {
        Some((&FORMAT, body)) => body,
        Some((f, _)) => return Err(ObjectError::Malformed(format!("unknown format {f}"))),
        None => return Err(ObjectError::Malformed("empty".into())),
    };
    let c: VersionVector =
        postcard::from_bytes(body).map_err(|e| ObjectError::Malformed(e.to_string()))?;
    if c.len() > MAX_CLOCK_ENTRIES {
        return Err(ObjectError::Invalid("too many clock entries"));
    }
    Ok(c)
}

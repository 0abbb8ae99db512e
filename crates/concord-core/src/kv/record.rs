//! A stored record of the key-value store's `Objects` table: the object and the local
//! actor its store writes it with (see [`super::store`]), in a format byte, an actor flag
//! (and the actor) and the encoded object.

use crate::ddata::ReplicaId;
use crate::kv::object::{ObjectError, Versioned};

/// Format byte of a stored record: the local actor, then the object.
const RECORD_FORMAT: u8 = 2;

/// A stored copy: the object and the actor this store writes it with (if it has
/// coordinated a write of it since it last did not hold it).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Record {
    /// The actor this store writes the key with, if any.
    pub(crate) local_actor: Option<ReplicaId>,
    /// The object.
    pub(crate) object: Versioned,
}

impl Record {
    /// The stored bytes: format byte, local-actor flag (and actor), the object.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![RECORD_FORMAT];
        match self.local_actor {
            Some(a) => {
                out.push(1);
                out.extend_from_slice(&a.0.to_le_bytes());
            }
            None => out.push(0),
        }
        out.extend(self.object.encode());
        out
    }

    /// Reads stored bytes.
    ///
    /// # Errors
    /// Not a record of this format.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Record, ObjectError> {
        let malformed = || ObjectError::Malformed("record".into());
        let (&format, rest) = bytes.split_first().ok_or_else(malformed)?;
        if format != RECORD_FORMAT {
            return Err(ObjectError::Malformed(format!(
                "unknown record format {format}"
            )));
        }
        let (&flag, rest) = rest.split_first().ok_or_else(malformed)?;
        let (local_actor, rest) = match flag {
            0 => (None, rest),
            1 => (
                Some(ReplicaId(u64_at(rest, 0).ok_or_else(malformed)?)),
                rest.get(8..).ok_or_else(malformed)?,
            ),
            _ => return Err(malformed()),
        };
        Ok(Record {
            local_actor,
            object: Versioned::decode(rest)?,
        })
    }
}

/// The object in a stored record of the `Objects` table (for tools and tests that read a
/// store's tables directly).
///
/// # Errors
/// The bytes are not a record.
pub fn decode_record(bytes: &[u8]) -> Result<Versioned, ObjectError> {
    Record::decode(bytes).map(|r| r.object)
}

/// The little-endian `u64` at `at`, if `bytes` holds one there.
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

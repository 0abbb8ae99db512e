//! [`PersistenceId`]: `<entity type>|<entity id>`, the key of one journal (Akka's
//! `PersistenceId.apply(entityTypeHint, entityId)`), and its slice.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Slices the persistence ids of an entity type are spread over (Akka's fixed 1024: a
/// projection reads a range of them; changing the number would move stored events).
pub const NUMBER_OF_SLICES: u16 = 1024;

/// Longest entity type, bytes.
pub const MAX_ENTITY_TYPE_BYTES: usize = 255;

/// Longest entity id, bytes (the key-value store's key limit less the type and the
/// separator leaves room for this).
pub const MAX_ENTITY_ID_BYTES: usize = 512;

/// Why a persistence id cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersistenceIdError {
    /// The entity type is empty, longer than [`MAX_ENTITY_TYPE_BYTES`], or contains `|`
    /// or NUL.
    #[error("entity type {0:?} must be 1 to 255 bytes without `|` or NUL")]
    BadEntityType(String),
    /// The entity id is empty, longer than [`MAX_ENTITY_ID_BYTES`], or contains NUL (which
    /// PostgreSQL's `text` cannot hold).
    #[error("entity id must be 1 to 512 bytes without NUL (it is {0} bytes)")]
    BadEntityId(usize),
    /// The text has no `|` separating type and id.
    #[error("a persistence id is `<entity type>|<entity id>`: {0:?} has no `|`")]
    NoSeparator(String),
}

/// The id of one entity's journal, snapshots and durable state: entity type and entity id,
/// written `<type>|<id>` (the type may not contain `|`; the id may).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PersistenceId {
    entity_type: String,
    entity_id: String,
}

impl PersistenceId {
    /// The persistence id of entity `entity_id` of type `entity_type`.
    ///
    /// # Errors
    /// [`PersistenceIdError`] for an empty, over-long, `|`- or NUL-containing type, or an
    /// empty, over-long or NUL-containing id.
    pub fn new(entity_type: &str, entity_id: &str) -> Result<Self, PersistenceIdError> {
        if entity_type.is_empty()
            || entity_type.len() > MAX_ENTITY_TYPE_BYTES
            || entity_type.contains(['|', '\0'])
        {
            return Err(PersistenceIdError::BadEntityType(
                entity_type.chars().take(64).collect(),
            ));
        }
        if entity_id.is_empty() || entity_id.len() > MAX_ENTITY_ID_BYTES || entity_id.contains('\0')
        {
            return Err(PersistenceIdError::BadEntityId(entity_id.len()));
        }
        Ok(PersistenceId {
            entity_type: entity_type.to_string(),
            entity_id: entity_id.to_string(),
        })
    }

    /// Parses `<type>|<id>` (split at the first `|`).
    ///
    /// # Errors
    /// As [`PersistenceId::new`]; [`PersistenceIdError::NoSeparator`] without a `|`.
    pub fn parse(text: &str) -> Result<Self, PersistenceIdError> {
        let (t, id) = text
            .split_once('|')
            .ok_or_else(|| PersistenceIdError::NoSeparator(text.chars().take(64).collect()))?;
        PersistenceId::new(t, id)
    }

    /// The entity type.
    pub fn entity_type(&self) -> &str {
        &self.entity_type
    }

    /// The entity id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// The slice, 0 to [`NUMBER_OF_SLICES`] − 1: XXH3-64 (seed 0) of `<type>|<id>` modulo
    /// 1024 — the same on every node, build and platform (Akka uses Java's `hashCode`).
    pub fn slice(&self) -> u16 {
        let h = xxhash_rust::xxh3::xxh3_64(self.to_string().as_bytes());
        (h % u64::from(NUMBER_OF_SLICES)) as u16
    }

    /// `n` equal ranges of slices covering all of them (Akka's `sliceRanges`): what `n`
    /// projection instances each read.
    ///
    /// # Errors
    /// `n` is not a divisor of [`NUMBER_OF_SLICES`] (1, 2, 4, … 1024).
    pub fn slice_ranges(n: u16) -> Result<Vec<std::ops::RangeInclusive<u16>>, String> {
        if n == 0 || !NUMBER_OF_SLICES.is_multiple_of(n) {
            return Err(format!(
                "the number of slice ranges must divide {NUMBER_OF_SLICES} (it is {n})"
            ));
        }
        let width = NUMBER_OF_SLICES / n;
        Ok((0..n).map(|i| i * width..=(i + 1) * width - 1).collect())
    }
}

impl fmt::Display for PersistenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}|{}", self.entity_type, self.entity_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_are_type_bar_id_and_bad_parts_are_refused() {
        let p = PersistenceId::new("counter", "a|b").unwrap();
        assert_eq!(p.to_string(), "counter|a|b");
        assert_eq!(PersistenceId::parse("counter|a|b").unwrap(), p);
        assert!(PersistenceId::new("", "x").is_err());
        assert!(PersistenceId::new("a|b", "x").is_err());
        assert!(PersistenceId::new("t", "").is_err());
        assert!(PersistenceId::new("t", "a\0b").is_err(), "NUL");
        assert!(PersistenceId::new("t\0", "a").is_err(), "NUL");
        assert!(PersistenceId::new("t", &"x".repeat(513)).is_err());
        assert!(PersistenceId::new(&"t".repeat(256), "x").is_err());
        assert!(matches!(
            PersistenceId::parse("nobar"),
            Err(PersistenceIdError::NoSeparator(_))
        ));
    }

    #[test]
    fn the_slice_is_fixed_by_the_hash() {
        // XXH3-64 is specified; these values must never change (stored events name them).
        let p = PersistenceId::new("counter", "1").unwrap();
        assert_eq!(
            p.slice(),
            (xxhash_rust::xxh3::xxh3_64(b"counter|1") % 1024) as u16
        );
        assert_eq!(
            PersistenceId::slice_ranges(4).unwrap(),
            vec![0..=255, 256..=511, 512..=767, 768..=1023]
        );
        assert!(PersistenceId::slice_ranges(3).is_err());
        assert!(PersistenceId::slice_ranges(0).is_err());
    }

    proptest! {
        #[test]
        fn display_and_parse_round_trip(t in "[a-z][a-z0-9-]{0,20}", id in "[^\u{0}]{1,40}") {
            let p = PersistenceId::new(&t, &id).unwrap();
            prop_assert_eq!(PersistenceId::parse(&p.to_string()).unwrap(), p.clone());
            prop_assert!(p.slice() < NUMBER_OF_SLICES);
        }

        #[test]
        fn slice_ranges_cover_every_slice_once(k in 0u32..=10) {
            let n = 1u16 << k;
            let ranges = PersistenceId::slice_ranges(n).unwrap();
            let mut covered = 0u32;
            let mut next = 0u32;
            for r in ranges {
                prop_assert_eq!(u32::from(*r.start()), next);
                next = u32::from(*r.end()) + 1;
                covered += u32::from(*r.end() - *r.start()) + 1;
            }
            prop_assert_eq!(covered, u32::from(NUMBER_OF_SLICES));
        }
    }
}

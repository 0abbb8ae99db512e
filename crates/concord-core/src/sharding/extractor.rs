//! The default message extractor: entity id → shard id.
//!
//! Akka's `HashCodeMessageExtractor` takes `abs(entityId.hashCode % number-of-shards)`,
//! with the JVM's `String.hashCode`. Concord takes the **xxh3 64-bit hash** (XXH3, seed 0,
//! as specified at <https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md>) of
//! the entity id's UTF-8 bytes, modulo `number-of-shards`, written in decimal. XXH3's output
//! is fixed by its specification and does not depend on the platform's endianness, word
//! size or the Rust version, so every node, build and platform places an entity in the
//! same shard; the tests pin values that must never change.
//!
//! Changing `number-of-shards` moves almost every entity to another shard: like Akka, it
//! needs a full cluster restart.

use super::ids::{EntityId, ShardId};

/// The shard of `entity_id` among `number_of_shards` shards (at least 1), as a number in
/// `0..number_of_shards`.
pub fn shard_number(entity_id: &str, number_of_shards: u32) -> u32 {
    let n = u64::from(number_of_shards.max(1));
    // The remainder is < n ≤ u32::MAX, so the conversion cannot fail.
    u32::try_from(xxhash_rust::xxh3::xxh3_64(entity_id.as_bytes()) % n).unwrap_or(0)
}

/// The shard id of `entity_id` among `number_of_shards` shards: [`shard_number`] in decimal.
pub fn shard_id(entity_id: &EntityId, number_of_shards: u32) -> ShardId {
    shard_number(entity_id, number_of_shards).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fixed_values_never_change() {
        // These values are part of the wire contract: every node of every version and
        // platform must place these entities in these shards.
        let cases = [
            ("", 1000, PIN_EMPTY),
            ("a", 1000, PIN_A),
            ("user-42", 1000, PIN_USER_42),
            ("counter-7", 1000, PIN_COUNTER_7),
            ("ünïcödé", 1000, PIN_UNICODE),
            ("user-42", 10, PIN_USER_42 % 10),
        ];
        for (id, n, want) in cases {
            assert_eq!(shard_number(id, n), want, "entity {id:?} with {n} shards");
        }
        assert_eq!(
            shard_id(&"user-42".to_string(), 1000),
            PIN_USER_42.to_string()
        );
    }

    // xxh3_64 of the ids, mod 1000; the same as the reference implementation gives
    // (python `xxhash.xxh3_64_intdigest(id.encode()) % 1000`).
    const PIN_EMPTY: u32 = 138;
    const PIN_A: u32 = 719;
    const PIN_USER_42: u32 = 621;
    const PIN_COUNTER_7: u32 = 83;
    const PIN_UNICODE: u32 = 569;

    #[test]
    fn zero_shards_means_one() {
        assert_eq!(shard_number("x", 0), 0);
        assert_eq!(shard_number("x", 1), 0);
    }

    proptest! {
        #[test]
        fn always_in_range(id in ".{0,40}", n in 1u32..5000) {
            prop_assert!(shard_number(&id, n) < n);
        }
    }
}

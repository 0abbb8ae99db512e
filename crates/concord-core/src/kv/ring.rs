//! [`Ring`]: where the key-value store places keys — consistent hashing with virtual
//! nodes over the members that host data (Dynamo §4.2; Riak KV's ring).
//!
//! **Keys → segments.** A key's hash is the XXH3 64-bit hash (seed 0, the algorithm pinned
//! by its specification, the same on every platform and build) of its UTF-8 bytes. Its top
//! 10 bits name one of [`SEGMENTS`] = 1024 segments, the next 6 bits one of
//! [`BUCKETS`] = 64 buckets inside the segment (the leaves of anti-entropy's hash tree).
//! Segments are Riak's partitions: the unit of placement, anti-entropy and transfer.
//!
//! **Members → tokens.** Each hosting member (Up, and with `kv.role` if set) owns
//! `virtual-nodes` tokens: token *i* of the member at address `A` is
//! `xxh3_64("A#i")` with `A` written `concord://system@host:port` — the address, not the
//! incarnation, so a restarted node takes its old place.
//!
//! **Preference list.** Segment *s* starts at ring position `s << 54`; its preference list
//! for replication factor *n* is the first *n* distinct members met walking clockwise from
//! there, over the tokens in position order. Every node with the same membership view
//! computes the same lists. A member that joins only inserts itself into walks, so a
//! segment's list changes only if the new member enters it (pushing the *n*-th out); a
//! member that leaves only removes itself (property-tested) — the minimal movement of
//! consistent hashing, at the granularity of segments.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::kv::object::MAX_N;

/// Segments of the key space (Riak's ring size; 2^10).
pub const SEGMENTS: u16 = 1024;
/// Buckets per segment, the leaves of the anti-entropy hash tree (2^6).
pub const BUCKETS: u8 = 64;
/// How many distinct members a segment's walk keeps: `n` primaries and one fallback for
/// each.
const WALK_DEPTH: usize = 2 * MAX_N as usize;

/// The key's hash: XXH3-64 (seed 0) of its bytes.
pub fn key_hash(key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key.as_bytes())
}

/// The segment of a key hash (its top 10 bits).
pub fn segment_of(hash: u64) -> u16 {
    // The shifted value is < 1024.
    (hash >> 54) as u16
}

/// The anti-entropy bucket of a key hash inside its segment (the next 6 bits).
pub fn bucket_of(hash: u64) -> u8 {
    ((hash >> 48) & u64::from(BUCKETS - 1)) as u8
}

/// The ring position of a member's virtual node `i`.
pub fn token(address: &crate::address::Address, i: u32) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("{address}#{i}").as_bytes())
}

/// The placement of segments on the hosting members; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ring {
    members: Vec<UniqueAddress>,
    /// Per segment, the distinct members of its walk (indices into `members`), in order.
    walks: Vec<Vec<u32>>,
}

impl Ring {
    /// The ring of `members` with `virtual_nodes` tokens each (at least 1).
    pub fn new(members: impl IntoIterator<Item = UniqueAddress>, virtual_nodes: u32) -> Ring {
        let members: Vec<UniqueAddress> = members
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let vnodes = virtual_nodes.max(1);
        let mut tokens: Vec<(u64, u32)> = Vec::with_capacity(members.len() * vnodes as usize);
        for (i, m) in members.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            for v in 0..vnodes {
                tokens.push((token(&m.address, v), i));
            }
        }
        tokens.sort_unstable();
        let depth = WALK_DEPTH.min(members.len());
        let walks = (0..SEGMENTS)
            .map(|s| {
                let mut walk: Vec<u32> = Vec::with_capacity(depth);
                if tokens.is_empty() {
                    return walk;
                }
                let start = u64::from(s) << 54;
                let first = tokens.partition_point(|(p, _)| *p < start);
                for k in 0..tokens.len() {
                    if walk.len() == depth {
                        break;
                    }
                    let (_, m) = tokens[(first + k) % tokens.len()];
                    if !walk.contains(&m) {
                        walk.push(m);
                    }
                }
                walk
            })
            .collect();
        Ring { members, walks }
    }

    /// The hosting members, in address order.
    pub fn members(&self) -> &[UniqueAddress] {
        &self.members
    }

    /// True if no member hosts data.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The distinct members met walking from `segment`'s position, up to `2 ×` [`MAX_N`]:
    /// the first `n` are its preference list, the rest its fallbacks in order.
    pub fn walk(&self, segment: u16) -> impl Iterator<Item = &UniqueAddress> + '_ {
        self.walks
            .get(usize::from(segment))
            .into_iter()
            .flatten()
            .map(|i| &self.members[*i as usize])
    }

    /// The preference list of `segment` for replication factor `n`: its first `n`
    /// distinct members (fewer when fewer members host data).
    pub fn preference_list(&self, segment: u16, n: u8) -> Vec<&UniqueAddress> {
        self.walk(segment).take(usize::from(n)).collect()
    }

    /// True if `node` is in the preference list of `segment` for `n`.
    pub fn owns(&self, node: &UniqueAddress, segment: u16, n: u8) -> bool {
        self.walk(segment).take(usize::from(n)).any(|m| m == node)
    }

    /// Segments each member holds a replica of, for replication factor `n`.
    pub fn ownership(&self, n: u8) -> BTreeMap<UniqueAddress, usize> {
        let mut out: BTreeMap<UniqueAddress, usize> =
            self.members.iter().map(|m| (m.clone(), 0)).collect();
        for s in 0..SEGMENTS {
            for m in self.walk(s).take(usize::from(n)) {
                if let Some(c) = out.get_mut(m) {
                    *c += 1;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use proptest::prelude::*;

    fn node(i: u32) -> UniqueAddress {
        UniqueAddress::new(
            Address::new("kv", format!("10.0.0.{i}"), 25520),
            u64::from(i) + 7,
        )
    }

    #[test]
    fn fixed_hashes_never_change() {
        // Part of the on-disk and placement contract: every node of every version and
        // platform must put these keys in these segments and buckets.
        let h = key_hash("alice");
        assert_eq!(h, 0x4da1_0dd6_1a01_16b0);
        assert_eq!((segment_of(h), bucket_of(h)), (310, 33));
        let h = key_hash("cart/42");
        assert_eq!(h, 0x6b79_38a3_b812_45b5);
        assert_eq!((segment_of(h), bucket_of(h)), (429, 57));
        assert_eq!(
            token(&Address::new("shop", "10.0.0.1", 25520), 0),
            0xfd10_b64a_1a06_0474
        );
        assert_eq!(segment_of(u64::MAX), 1023);
        assert_eq!(bucket_of(u64::MAX), 63);
        assert_eq!(segment_of(0), 0);
        assert_eq!(key_hash(""), 0x2d06800538d394c2);
    }

    #[test]
    fn lists_are_distinct_and_the_same_whatever_the_order_members_come_in() {
        let a = Ring::new((0..5).map(node), 64);
        let b = Ring::new((0..5).rev().map(node), 64);
        assert_eq!(a, b);
        for s in 0..SEGMENTS {
            let p = a.preference_list(s, 3);
            assert_eq!(p.len(), 3);
            let set: BTreeSet<_> = p.iter().collect();
            assert_eq!(set.len(), 3);
        }
        // Fewer members than n: every member.
        let two = Ring::new((0..2).map(node), 64);
        assert_eq!(two.preference_list(17, 3).len(), 2);
        assert!(Ring::new(std::iter::empty(), 64)
            .preference_list(3, 3)
            .is_empty());
    }

    #[test]
    fn a_restarted_member_keeps_its_place() {
        let a = Ring::new((0..4).map(node), 64);
        let mut restarted: Vec<UniqueAddress> = (0..4).map(node).collect();
        restarted[2].uid = 999;
        let b = Ring::new(restarted, 64);
        for s in 0..SEGMENTS {
            let pa: Vec<_> = a
                .preference_list(s, 3)
                .iter()
                .map(|m| m.address.clone())
                .collect();
            let pb: Vec<_> = b
                .preference_list(s, 3)
                .iter()
                .map(|m| m.address.clone())
                .collect();
            assert_eq!(pa, pb);
        }
    }

    #[test]
    fn ownership_is_spread() {
        let r = Ring::new((0..5).map(node), 64);
        let own = r.ownership(3);
        assert_eq!(own.values().sum::<usize>(), 3 * usize::from(SEGMENTS));
        for (m, c) in own {
            // 614 on average; virtual nodes keep every member within ±35 %.
            assert!((400..=830).contains(&c), "{m}: {c}");
        }
    }

    proptest! {
        #[test]
        fn a_join_moves_only_segments_the_new_member_enters(
            base in 1u32..9, extra in 9u32..40, n in 1u8..=5, vnodes in 1u32..80
        ) {
            let before = Ring::new((0..base).map(node), vnodes);
            let after = Ring::new((0..base).chain([extra]).map(node), vnodes);
            let new = node(extra);
            for s in 0..SEGMENTS {
                let old: Vec<_> = before.preference_list(s, n);
                let now: Vec<_> = after.preference_list(s, n);
                if old != now {
                    prop_assert!(now.contains(&&new));
                    let left: Vec<_> = old.iter().filter(|m| !now.contains(m)).collect();
                    prop_assert!(left.len() <= 1);
                    // The others keep their relative order.
                    let kept: Vec<_> = now.iter().filter(|m| **m != &new).collect();
                    let was: Vec<_> = old.iter().filter(|m| now.contains(m)).collect();
                    prop_assert_eq!(kept, was);
                }
            }
        }

        #[test]
        fn a_leave_moves_only_segments_the_member_was_in(
            count in 2u32..10, gone in 0u32..10, n in 1u8..=5, vnodes in 1u32..80
        ) {
            let gone = gone % count;
            let before = Ring::new((0..count).map(node), vnodes);
            let after = Ring::new((0..count).filter(|i| *i != gone).map(node), vnodes);
            for s in 0..SEGMENTS {
                let old = before.preference_list(s, n);
                let now = after.preference_list(s, n);
                if old != now {
                    prop_assert!(old.contains(&&node(gone)));
                    // Everyone else stays, in order; at most one member enters.
                    let stayed: Vec<_> = old.iter().filter(|m| ***m != node(gone)).collect();
                    let prefix: Vec<_> = now.iter().take(stayed.len()).collect();
                    prop_assert_eq!(stayed, prefix);
                }
            }
        }
    }
}

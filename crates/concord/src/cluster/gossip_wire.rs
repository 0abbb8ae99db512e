//! The wire form of membership's data: addresses, members, reachability and the full
//! [`Gossip`] state, serialized with an address table (members, vector clock, seen set and
//! reachability refer to addresses by index, as Akka's serializer does) and gzip-compressed
//! with bounded decompression. Decoding never panics: every malformed input gives a
//! [`DecodeError`]. Spec: cluster-specification.md, "Gossip Protocol".

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};

use concord_core::gossip::{Gossip, GossipOverview};
use concord_core::member::{Member, MemberStatus};
use concord_core::reachability::{Reachability, ReachabilityStatus};
use concord_core::vector_clock::VectorClock;
use concord_core::{ClusterId, ClusterIdentity, UniqueAddress};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::remote::address_wire::{unique_from_wire, unique_to_wire};
use crate::remote::{wire, DecodeError};

/// Encoded sizes of a gossip state, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GossipSize {
    /// Protobuf bytes before compression.
    pub raw: usize,
    /// Bytes after gzip.
    pub compressed: usize,
}

fn status_to_wire(s: MemberStatus) -> wire::MemberStatus {
    use wire::MemberStatus as W;
    match s {
        MemberStatus::Joining => W::Joining,
        MemberStatus::WeaklyUp => W::WeaklyUp,
        MemberStatus::Up => W::Up,
        MemberStatus::PreparingForShutdown => W::PreparingForShutdown,
        MemberStatus::ReadyForShutdown => W::ReadyForShutdown,
        MemberStatus::Leaving => W::Leaving,
        MemberStatus::Exiting => W::Exiting,
        MemberStatus::Down => W::Down,
        MemberStatus::Removed => W::Removed,
    }
}

fn status_from_wire(v: i32) -> Result<MemberStatus, DecodeError> {
    use wire::MemberStatus as W;
    Ok(
        match W::try_from(v).map_err(|_| DecodeError::BadEnum("MemberStatus", v))? {
            W::Joining => MemberStatus::Joining,
            W::WeaklyUp => MemberStatus::WeaklyUp,
            W::Up => MemberStatus::Up,
            W::PreparingForShutdown => MemberStatus::PreparingForShutdown,
            W::ReadyForShutdown => MemberStatus::ReadyForShutdown,
            W::Leaving => MemberStatus::Leaving,
            W::Exiting => MemberStatus::Exiting,
            W::Down => MemberStatus::Down,
            W::Removed => MemberStatus::Removed,
        },
    )
}

fn reach_to_wire(s: ReachabilityStatus) -> wire::ReachabilityStatus {
    match s {
        ReachabilityStatus::Reachable => wire::ReachabilityStatus::Reachable,
        ReachabilityStatus::Unreachable => wire::ReachabilityStatus::Unreachable,
        ReachabilityStatus::Terminated => wire::ReachabilityStatus::Terminated,
    }
}

fn reach_from_wire(v: i32) -> Result<ReachabilityStatus, DecodeError> {
    Ok(
        match wire::ReachabilityStatus::try_from(v)
            .map_err(|_| DecodeError::BadEnum("ReachabilityStatus", v))?
        {
            wire::ReachabilityStatus::Reachable => ReachabilityStatus::Reachable,
            wire::ReachabilityStatus::Unreachable => ReachabilityStatus::Unreachable,
            wire::ReachabilityStatus::Terminated => ReachabilityStatus::Terminated,
        },
    )
}

struct AddressTable {
    index: BTreeMap<UniqueAddress, u32>,
    list: Vec<wire::UniqueAddress>,
}

impl AddressTable {
    fn new() -> Self {
        AddressTable {
            index: BTreeMap::new(),
            list: Vec::new(),
        }
    }
    fn idx(&mut self, u: &UniqueAddress) -> u32 {
        if let Some(i) = self.index.get(u) {
            return *i;
        }
        let i = self.list.len() as u32;
        self.index.insert(u.clone(), i);
        self.list.push(unique_to_wire(u));
        i
    }
}

/// Gossip → protobuf (not compressed).
pub fn gossip_to_wire(g: &Gossip) -> wire::Gossip {
    let mut t = AddressTable::new();
    let members = g
        .members
        .values()
        .map(|m| wire::Member {
            address_index: t.idx(&m.unique_address),
            status: status_to_wire(m.status) as i32,
            roles: m.roles.iter().cloned().collect(),
            up_number: m.up_number,
            app_version: m.app_version.clone(),
        })
        .collect();
    let seen = g.overview.seen.iter().map(|u| t.idx(u)).collect();
    let mut reach: BTreeMap<u32, wire::ObserverReachability> = BTreeMap::new();
    for (o, v) in g.overview.reachability.versions() {
        let oi = t.idx(o);
        reach.insert(
            oi,
            wire::ObserverReachability {
                observer_index: oi,
                version: v,
                subjects: Vec::new(),
            },
        );
    }
    for (o, s, st) in g.overview.reachability.records() {
        let oi = t.idx(o);
        let si = t.idx(s);
        reach
            .entry(oi)
            .or_insert_with(|| wire::ObserverReachability {
                observer_index: oi,
                version: 0,
                subjects: Vec::new(),
            })
            .subjects
            .push(wire::SubjectReachability {
                subject_index: si,
                status: reach_to_wire(st) as i32,
            });
    }
    let version = g
        .version
        .entries()
        .map(|(n, c)| wire::VectorClockEntry {
            node_index: t.idx(n),
            counter: c,
        })
        .collect();
    let tombstones = g
        .tombstones
        .iter()
        .map(|(n, at)| wire::Tombstone {
            address_index: t.idx(n),
            removed_at_ms: *at,
        })
        .collect();
    let (cluster_id, reformed_from) = identity_parts(g.identity);
    wire::Gossip {
        all_addresses: t.list,
        members,
        seen,
        reachability: reach.into_values().collect(),
        version,
        tombstones,
        cluster_id,
        reformed_from,
    }
}

/// Protobuf → Gossip, validating every index and enum.
pub fn gossip_from_wire(w: &wire::Gossip) -> Result<Gossip, DecodeError> {
    let table: Vec<UniqueAddress> = w
        .all_addresses
        .iter()
        .map(unique_from_wire)
        .collect::<Result<_, _>>()?;
    let at = |i: u32| {
        table
            .get(i as usize)
            .cloned()
            .ok_or(DecodeError::BadIndex(i))
    };
    let mut members = BTreeMap::new();
    for m in &w.members {
        let ua = at(m.address_index)?;
        let status = status_from_wire(m.status)?;
        members.insert(
            ua.clone(),
            Member {
                unique_address: ua,
                status,
                roles: m.roles.iter().cloned().collect::<BTreeSet<_>>(),
                up_number: m.up_number,
                app_version: m.app_version.clone(),
            },
        );
    }
    let seen = w
        .seen
        .iter()
        .map(|i| at(*i))
        .collect::<Result<BTreeSet<_>, _>>()?;
    let mut records = Vec::new();
    let mut versions = Vec::new();
    for o in &w.reachability {
        let obs = at(o.observer_index)?;
        versions.push((obs.clone(), o.version));
        for s in &o.subjects {
            records.push((
                obs.clone(),
                at(s.subject_index)?,
                reach_from_wire(s.status)?,
            ));
        }
    }
    let version = VectorClock::from_entries(
        w.version
            .iter()
            .map(|e| Ok((at(e.node_index)?, e.counter)))
            .collect::<Result<Vec<_>, DecodeError>>()?,
    );
    let tombstones = w
        .tombstones
        .iter()
        .map(|t| Ok((at(t.address_index)?, t.removed_at_ms)))
        .collect::<Result<BTreeMap<_, _>, DecodeError>>()?;
    Ok(Gossip {
        members,
        overview: GossipOverview {
            seen,
            reachability: Reachability::from_parts(records, versions),
        },
        version,
        tombstones,
        identity: identity_of(w.cluster_id, w.reformed_from),
    }
    .normalize())
}

/// A cluster identity as its two wire numbers (0: none).
pub(crate) fn identity_parts(c: Option<ClusterIdentity>) -> (u64, u64) {
    match c {
        Some(c) => (c.id.0, c.reformed_from.map_or(0, |p| p.0)),
        None => (0, 0),
    }
}

/// The identity of two wire numbers: none when the id is 0.
pub(crate) fn identity_of(cluster_id: u64, reformed_from: u64) -> Option<ClusterIdentity> {
    (cluster_id != 0).then_some(ClusterIdentity {
        id: ClusterId(cluster_id),
        reformed_from: (reformed_from != 0).then_some(ClusterId(reformed_from)),
    })
}

/// Gossip → gzip(protobuf), with the sizes before and after compression.
pub fn compress_gossip(g: &Gossip) -> (Vec<u8>, GossipSize) {
    let raw = gossip_to_wire(g).encode_to_vec();
    let mut enc = GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(&raw);
    let out = enc.finish().unwrap_or_default();
    let size = GossipSize {
        raw: raw.len(),
        compressed: out.len(),
    };
    (out, size)
}

/// gzip(protobuf) → Gossip. Refuses payloads that decompress beyond `limit` bytes
/// ([`DecodeError::DecompressedTooLarge`]); inflating stops at the limit, so a bomb costs
/// at most `limit` bytes of memory.
pub fn decompress_gossip(bytes: &[u8], limit: usize) -> Result<Gossip, DecodeError> {
    let mut raw = Vec::new();
    GzDecoder::new(bytes)
        .take(limit as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| DecodeError::Gzip(e.to_string()))?;
    if raw.len() > limit {
        return Err(DecodeError::DecompressedTooLarge(limit));
    }
    gossip_from_wire(&wire::Gossip::decode(raw.as_slice())?)
}

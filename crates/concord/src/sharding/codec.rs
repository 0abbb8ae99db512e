//! The Cluster Sharding protocol's codec ([`ShardingCodec`]): the core's
//! [`ShardingMessage`]s to and from the `Sharding*` protobuf messages of
//! `sharding.proto`, one manifest per message type ([`manifest`]). The messages of
//! the machine's own replicator and coordinator singleton travel inside
//! `ShardingEmbedded`, in their protocols' own encodings. User payloads are opaque bytes.
//! Decoding never panics.

use bytes::Bytes;
use concord_core::sharding::{ShardingBody, ShardingMessage};
use concord_core::singleton::SingletonMessage;
use concord_core::UniqueAddress;
use prost::Message;

use crate::ddata::codec::ReplicatorCodec;
use crate::remote::address_wire::{unique_from_wire, unique_to_wire};
use crate::remote::wire;
use crate::remote::{Codec, DecodeError};
use crate::singleton::codec::SingletonCodec;

/// The sharding manifests.
pub mod manifest {
    /// `ShardingRegister`.
    pub const REGISTER: u32 = 1;
    /// `ShardingShard`.
    pub const GET_SHARD_HOME: u32 = 2;
    /// `ShardingShard`.
    pub const SHARD_STARTED: u32 = 3;
    /// `ShardingShardStopped`.
    pub const SHARD_STOPPED: u32 = 4;
    /// `ShardingType`.
    pub const GRACEFUL_SHUTDOWN_REQ: u32 = 5;
    /// `ShardingType`.
    pub const REGION_STOPPED: u32 = 6;
    /// `ShardingType`.
    pub const REGISTER_ACK: u32 = 7;
    /// `ShardingShardHomes`.
    pub const SHARD_HOMES: u32 = 8;
    /// `ShardingShardHome`.
    pub const SHARD_HOME: u32 = 9;
    /// `ShardingHostShard`.
    pub const HOST_SHARD: u32 = 10;
    /// `ShardingBeginHandOff`.
    pub const BEGIN_HAND_OFF: u32 = 11;
    /// `ShardingHandOff`.
    pub const HAND_OFF: u32 = 12;
    /// `ShardingDeliver`.
    pub const DELIVER: u32 = 13;
    /// `ShardingReply`.
    pub const REPLY: u32 = 14;
    /// `ShardingEntityHandOver`.
    pub const ENTITY_HAND_OVER: u32 = 15;
    /// `ShardingShard`.
    pub const HAND_OVER_DONE: u32 = 16;
    /// `ShardingAckForward`.
    pub const HAND_OFF_ACK_FORWARD: u32 = 17;
    /// `ShardingShard`.
    pub const BEGIN_HAND_OFF_ACK: u32 = 18;
    /// `ShardingStatsRequest`.
    pub const GET_SHARD_REGION_STATS: u32 = 19;
    /// `ShardingRegionStats`.
    pub const SHARD_REGION_STATS: u32 = 20;
    /// `ShardingEmbedded` (Distributed Data).
    pub const REPLICATOR: u32 = 21;
    /// `ShardingEmbedded` (singleton).
    pub const SINGLETON: u32 = 22;
}

/// The codec of [`concord_core::ProtocolId::SHARDING`].
#[derive(Clone, Debug, Default)]
pub struct ShardingCodec;

fn ua(u: &UniqueAddress) -> Option<wire::UniqueAddress> {
    Some(unique_to_wire(u))
}

fn opt_ua(u: &Option<UniqueAddress>) -> Option<wire::UniqueAddress> {
    u.as_ref().map(unique_to_wire)
}

fn req_ua(
    u: Option<wire::UniqueAddress>,
    field: &'static str,
) -> Result<UniqueAddress, DecodeError> {
    unique_from_wire(&u.ok_or(DecodeError::MissingField(field))?)
}

fn from_opt_ua(u: Option<wire::UniqueAddress>) -> Result<Option<UniqueAddress>, DecodeError> {
    u.as_ref().map(unique_from_wire).transpose()
}

impl Codec for ShardingCodec {
    type Message = ShardingMessage;

    fn encode(&self, msg: &ShardingMessage) -> (u32, Bytes) {
        let t = msg.type_name.clone();
        let shard_msg = |m: u32, shard: &str| {
            (
                m,
                wire::ShardingShard {
                    type_name: t.clone(),
                    shard: shard.to_string(),
                }
                .encode_to_vec(),
            )
        };
        let type_msg = |m: u32| {
            (
                m,
                wire::ShardingType {
                    type_name: t.clone(),
                }
                .encode_to_vec(),
            )
        };
        let (m, bytes) = match &msg.body {
            ShardingBody::Register { proxy } => (
                manifest::REGISTER,
                wire::ShardingRegister {
                    type_name: t.clone(),
                    proxy: *proxy,
                }
                .encode_to_vec(),
            ),
            ShardingBody::GetShardHome { shard } => shard_msg(manifest::GET_SHARD_HOME, shard),
            ShardingBody::ShardStarted { shard } => shard_msg(manifest::SHARD_STARTED, shard),
            ShardingBody::ShardStopped { shard, handed_to } => (
                manifest::SHARD_STOPPED,
                wire::ShardingShardStopped {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    handed_to: opt_ua(handed_to),
                }
                .encode_to_vec(),
            ),
            ShardingBody::GracefulShutdownReq => type_msg(manifest::GRACEFUL_SHUTDOWN_REQ),
            ShardingBody::RegionStopped => type_msg(manifest::REGION_STOPPED),
            ShardingBody::RegisterAck => type_msg(manifest::REGISTER_ACK),
            ShardingBody::ShardHomes { homes } => {
                // Regions once in a table, shards by index (homes come 500 at a time).
                let mut regions: Vec<&UniqueAddress> = Vec::new();
                let mut entries = Vec::with_capacity(homes.len());
                for (shard, home) in homes {
                    let i = match regions.iter().position(|r| *r == home) {
                        Some(i) => i,
                        None => {
                            regions.push(home);
                            regions.len() - 1
                        }
                    };
                    entries.push(wire::ShardingHomeEntry {
                        shard: shard.clone(),
                        region: u32::try_from(i).unwrap_or(u32::MAX),
                    });
                }
                (
                    manifest::SHARD_HOMES,
                    wire::ShardingShardHomes {
                        type_name: t.clone(),
                        regions: regions.into_iter().map(unique_to_wire).collect(),
                        homes: entries,
                    }
                    .encode_to_vec(),
                )
            }
            ShardingBody::ShardHome {
                shard,
                home,
                previous,
            } => (
                manifest::SHARD_HOME,
                wire::ShardingShardHome {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    home: ua(home),
                    previous: opt_ua(previous),
                }
                .encode_to_vec(),
            ),
            ShardingBody::HostShard {
                shard,
                handoff_from,
            } => (
                manifest::HOST_SHARD,
                wire::ShardingHostShard {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    handoff_from: opt_ua(handoff_from),
                }
                .encode_to_vec(),
            ),
            ShardingBody::BeginHandOff {
                shard,
                from,
                to,
                regions,
            } => (
                manifest::BEGIN_HAND_OFF,
                wire::ShardingBeginHandOff {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    from: ua(from),
                    to: ua(to),
                    regions: regions.iter().map(unique_to_wire).collect(),
                }
                .encode_to_vec(),
            ),
            ShardingBody::HandOff { shard, to } => (
                manifest::HAND_OFF,
                wire::ShardingHandOff {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    to: opt_ua(to),
                }
                .encode_to_vec(),
            ),
            ShardingBody::Deliver {
                shard,
                entity,
                payload,
                origin,
                ask,
            } => (
                manifest::DELIVER,
                wire::ShardingDeliver {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    entity: entity.clone(),
                    payload: Bytes::copy_from_slice(payload),
                    origin: opt_ua(origin),
                    ask: *ask,
                }
                .encode_to_vec(),
            ),
            ShardingBody::Reply { ask, result } => (
                manifest::REPLY,
                wire::ShardingReply {
                    type_name: t.clone(),
                    ask: *ask,
                    result: Some(match result {
                        Ok(p) => wire::sharding_reply::Result::Payload(Bytes::copy_from_slice(p)),
                        Err(e) => wire::sharding_reply::Result::Error(e.clone()),
                    }),
                }
                .encode_to_vec(),
            ),
            ShardingBody::EntityHandOver {
                shard,
                entity,
                state,
            } => (
                manifest::ENTITY_HAND_OVER,
                wire::ShardingEntityHandOver {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    entity: entity.clone(),
                    state: Bytes::copy_from_slice(state),
                }
                .encode_to_vec(),
            ),
            ShardingBody::HandOverDone { shard } => shard_msg(manifest::HAND_OVER_DONE, shard),
            ShardingBody::HandOffAckForward { shard, region } => (
                manifest::HAND_OFF_ACK_FORWARD,
                wire::ShardingAckForward {
                    type_name: t.clone(),
                    shard: shard.clone(),
                    region: ua(region),
                }
                .encode_to_vec(),
            ),
            ShardingBody::BeginHandOffAck { shard } => {
                shard_msg(manifest::BEGIN_HAND_OFF_ACK, shard)
            }
            ShardingBody::GetShardRegionStats { request } => (
                manifest::GET_SHARD_REGION_STATS,
                wire::ShardingStatsRequest {
                    type_name: t.clone(),
                    request: *request,
                }
                .encode_to_vec(),
            ),
            ShardingBody::ShardRegionStats { request, shards } => (
                manifest::SHARD_REGION_STATS,
                wire::ShardingRegionStats {
                    type_name: t.clone(),
                    request: *request,
                    shards: shards
                        .iter()
                        .map(|(s, n)| wire::ShardingShardStats {
                            shard: s.clone(),
                            entities: *n,
                        })
                        .collect(),
                }
                .encode_to_vec(),
            ),
            ShardingBody::Replicator(r) => {
                let (inner, payload) = ReplicatorCodec.encode(r);
                (
                    manifest::REPLICATOR,
                    wire::ShardingEmbedded {
                        type_name: t.clone(),
                        manifest: inner,
                        payload,
                    }
                    .encode_to_vec(),
                )
            }
            ShardingBody::Singleton(body) => {
                let (inner, payload) = SingletonCodec.encode(&SingletonMessage {
                    name: format!("{t}Coordinator"),
                    body: body.clone(),
                });
                (
                    manifest::SINGLETON,
                    wire::ShardingEmbedded {
                        type_name: t.clone(),
                        manifest: inner,
                        payload,
                    }
                    .encode_to_vec(),
                )
            }
        };
        (m, Bytes::from(bytes))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<ShardingMessage, DecodeError> {
        self.decode_owned(manifest, Bytes::copy_from_slice(payload))
    }

    const KEEPS_PAYLOAD: bool = true;

    /// Entity messages keep their payload as a slice of `payload`, without a copy.
    fn decode_owned(&self, manifest: u32, payload: Bytes) -> Result<ShardingMessage, DecodeError> {
        let shard = |payload: Bytes, f: fn(String) -> ShardingBody| {
            let w = wire::ShardingShard::decode(payload)?;
            Ok::<_, DecodeError>(ShardingMessage {
                type_name: w.type_name,
                body: f(w.shard),
            })
        };
        let typed = |payload: Bytes, body: ShardingBody| {
            let w = wire::ShardingType::decode(payload)?;
            Ok::<_, DecodeError>(ShardingMessage {
                type_name: w.type_name,
                body,
            })
        };
        let msg = |type_name: String, body: ShardingBody| ShardingMessage { type_name, body };
        match manifest {
            manifest::REGISTER => {
                let w = wire::ShardingRegister::decode(payload)?;
                Ok(msg(w.type_name, ShardingBody::Register { proxy: w.proxy }))
            }
            manifest::GET_SHARD_HOME => {
                shard(payload, |shard| ShardingBody::GetShardHome { shard })
            }
            manifest::SHARD_STARTED => shard(payload, |shard| ShardingBody::ShardStarted { shard }),
            manifest::SHARD_STOPPED => {
                let w = wire::ShardingShardStopped::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::ShardStopped {
                        shard: w.shard,
                        handed_to: from_opt_ua(w.handed_to)?,
                    },
                ))
            }
            manifest::GRACEFUL_SHUTDOWN_REQ => typed(payload, ShardingBody::GracefulShutdownReq),
            manifest::REGION_STOPPED => typed(payload, ShardingBody::RegionStopped),
            manifest::REGISTER_ACK => typed(payload, ShardingBody::RegisterAck),
            manifest::SHARD_HOMES => {
                let w = wire::ShardingShardHomes::decode(payload)?;
                let regions = w
                    .regions
                    .iter()
                    .map(unique_from_wire)
                    .collect::<Result<Vec<_>, _>>()?;
                let homes = w
                    .homes
                    .into_iter()
                    .map(|e| {
                        let r = usize::try_from(e.region)
                            .ok()
                            .and_then(|i| regions.get(i))
                            .ok_or(DecodeError::BadIndex(e.region))?;
                        Ok((e.shard, r.clone()))
                    })
                    .collect::<Result<Vec<_>, DecodeError>>()?;
                Ok(msg(w.type_name, ShardingBody::ShardHomes { homes }))
            }
            manifest::SHARD_HOME => {
                let w = wire::ShardingShardHome::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::ShardHome {
                        shard: w.shard,
                        home: req_ua(w.home, "home")?,
                        previous: from_opt_ua(w.previous)?,
                    },
                ))
            }
            manifest::HOST_SHARD => {
                let w = wire::ShardingHostShard::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::HostShard {
                        shard: w.shard,
                        handoff_from: from_opt_ua(w.handoff_from)?,
                    },
                ))
            }
            manifest::BEGIN_HAND_OFF => {
                let w = wire::ShardingBeginHandOff::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::BeginHandOff {
                        shard: w.shard,
                        from: req_ua(w.from, "from")?,
                        to: req_ua(w.to, "to")?,
                        regions: w
                            .regions
                            .iter()
                            .map(unique_from_wire)
                            .collect::<Result<_, _>>()?,
                    },
                ))
            }
            manifest::HAND_OFF => {
                let w = wire::ShardingHandOff::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::HandOff {
                        shard: w.shard,
                        to: from_opt_ua(w.to)?,
                    },
                ))
            }
            manifest::DELIVER => {
                let w = wire::ShardingDeliver::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::Deliver {
                        shard: w.shard,
                        entity: w.entity,
                        payload: w.payload.to_vec(),
                        origin: from_opt_ua(w.origin)?,
                        ask: w.ask,
                    },
                ))
            }
            manifest::REPLY => {
                let w = wire::ShardingReply::decode(payload)?;
                let result = match w.result.ok_or(DecodeError::MissingField("result"))? {
                    wire::sharding_reply::Result::Payload(p) => Ok(p.to_vec()),
                    wire::sharding_reply::Result::Error(e) => Err(e),
                };
                Ok(msg(w.type_name, ShardingBody::Reply { ask: w.ask, result }))
            }
            manifest::ENTITY_HAND_OVER => {
                let w = wire::ShardingEntityHandOver::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::EntityHandOver {
                        shard: w.shard,
                        entity: w.entity,
                        state: w.state.to_vec(),
                    },
                ))
            }
            manifest::HAND_OVER_DONE => {
                shard(payload, |shard| ShardingBody::HandOverDone { shard })
            }
            manifest::HAND_OFF_ACK_FORWARD => {
                let w = wire::ShardingAckForward::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::HandOffAckForward {
                        shard: w.shard,
                        region: req_ua(w.region, "region")?,
                    },
                ))
            }
            manifest::BEGIN_HAND_OFF_ACK => {
                shard(payload, |shard| ShardingBody::BeginHandOffAck { shard })
            }
            manifest::GET_SHARD_REGION_STATS => {
                let w = wire::ShardingStatsRequest::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::GetShardRegionStats { request: w.request },
                ))
            }
            manifest::SHARD_REGION_STATS => {
                let w = wire::ShardingRegionStats::decode(payload)?;
                Ok(msg(
                    w.type_name,
                    ShardingBody::ShardRegionStats {
                        request: w.request,
                        shards: w
                            .shards
                            .into_iter()
                            .map(|s| (s.shard, s.entities))
                            .collect(),
                    },
                ))
            }
            manifest::REPLICATOR => {
                let w = wire::ShardingEmbedded::decode(payload)?;
                let inner = ReplicatorCodec.decode(w.manifest, &w.payload)?;
                Ok(msg(w.type_name, ShardingBody::Replicator(inner)))
            }
            manifest::SINGLETON => {
                let w = wire::ShardingEmbedded::decode(payload)?;
                let inner = SingletonCodec.decode(w.manifest, &w.payload)?;
                Ok(msg(w.type_name, ShardingBody::Singleton(inner.body)))
            }
            m => Err(DecodeError::UnknownManifest(m)),
        }
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
pub(crate) mod tests;

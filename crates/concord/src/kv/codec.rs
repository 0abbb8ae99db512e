//! The key-value store protocol's codec ([`KvCodec`]): the core's [`KvMessage`]s to and
//! from the `Kv*` protobuf messages of `kv.proto`, one manifest per message type
//! ([`manifest`]). Versions and contexts travel in the core's own encoding and are
//! validated when decoded; a peer's bytes never panic the node.

use bytes::Bytes;
use concord_core::kv::message::{BucketKeys, GroupBuckets, GroupHash};
use concord_core::kv::{
    decode_context, encode_context, KvError, KvMessage, QuorumFailure, Versioned,
};
use prost::Message;

use crate::remote::address_wire::{address_from_wire, address_to_wire};
use crate::remote::wire;
use crate::remote::{Codec, DecodeError};

/// The key-value store's manifests.
pub mod manifest {
    /// `KvForward`.
    pub const FORWARD: u32 = 1;
    /// `KvForwardReply`.
    pub const FORWARD_REPLY: u32 = 2;
    /// `KvPut`.
    pub const PUT: u32 = 3;
    /// `KvAck` (put).
    pub const PUT_REPLY: u32 = 4;
    /// `KvGet`.
    pub const GET: u32 = 5;
    /// `KvGetReply`.
    pub const GET_REPLY: u32 = 6;
    /// `KvKeyObject`.
    pub const REPAIR: u32 = 7;
    /// `KvReap`.
    pub const REAP: u32 = 8;
    /// `KvAeGroups`.
    pub const AE_GROUPS: u32 = 9;
    /// `KvAeBuckets`.
    pub const AE_BUCKETS: u32 = 10;
    /// `KvAeKeys`.
    pub const AE_KEYS: u32 = 11;
    /// `KvObjects`.
    pub const AE_OBJECTS: u32 = 12;
    /// `KvObjects`.
    pub const AE_WANTED: u32 = 13;
    /// `KvObjects`.
    pub const HANDOFF: u32 = 14;
    /// `KvAck` (handoff).
    pub const HANDOFF_ACK: u32 = 15;
}

/// The codec of [`concord_core::ProtocolId::KEY_VALUE`].
#[derive(Clone, Copy, Debug, Default)]
pub struct KvCodec;

fn object(bytes: &[u8]) -> Result<Versioned, DecodeError> {
    Versioned::decode(bytes).map_err(|e| DecodeError::Invalid(format!("version: {e}")))
}

fn objects_to_wire(objects: &[(String, Versioned)]) -> Vec<wire::KvKeyObject> {
    objects
        .iter()
        .map(|(k, o)| wire::KvKeyObject {
            key: k.clone(),
            object: o.encode().into(),
        })
        .collect()
}

fn objects_from_wire(
    objects: Vec<wire::KvKeyObject>,
) -> Result<Vec<(String, Versioned)>, DecodeError> {
    objects
        .into_iter()
        .map(|o| Ok((o.key, object(&o.object)?)))
        .collect()
}

fn small(v: u32, what: &'static str) -> Result<u8, DecodeError> {
    u8::try_from(v).map_err(|_| DecodeError::Invalid(format!("{what} {v} out of range")))
}

fn segment(v: u32) -> Result<u16, DecodeError> {
    u16::try_from(v).map_err(|_| DecodeError::Invalid(format!("segment {v} out of range")))
}

fn addresses_to_wire(v: &[concord_core::Address]) -> Vec<wire::Address> {
    v.iter().map(address_to_wire).collect()
}

fn addresses_from_wire(v: &[wire::Address]) -> Result<Vec<concord_core::Address>, DecodeError> {
    v.iter().map(address_from_wire).collect()
}

/// A request's error on the wire (the outcome of a forwarded write).
pub fn error_to_wire(e: &KvError) -> wire::KvError {
    let mut w = wire::KvError {
        message: e.to_string(),
        ..Default::default()
    };
    match e {
        KvError::Invalid(m) => {
            w.kind = 1;
            w.message = m.clone();
        }
        KvError::TooLarge(m) => {
            w.kind = 2;
            w.message = m.clone();
        }
        KvError::NotFound => w.kind = 3,
        KvError::Overloaded(n) => {
            w.kind = 4;
            w.overloaded = *n as u64;
        }
        KvError::Unavailable(f) => {
            w.kind = 5;
            w.quorum = f.quorum.to_string();
            w.needed = u32::from(f.needed);
            w.counted = addresses_to_wire(&f.counted);
            w.uncounted = addresses_to_wire(&f.uncounted);
            w.failed = f
                .failed
                .iter()
                .map(|(a, why)| wire::KvRefusal {
                    node: Some(address_to_wire(a)),
                    reason: why.clone(),
                })
                .collect();
            w.unanswered = addresses_to_wire(&f.unanswered);
        }
        KvError::Storage(m) => {
            w.kind = 6;
            w.message = m.clone();
        }
    }
    w
}

/// A request's error from the wire.
///
/// # Errors
/// An unknown kind or a malformed address.
pub fn error_from_wire(w: &wire::KvError) -> Result<KvError, DecodeError> {
    Ok(match w.kind {
        1 => KvError::Invalid(w.message.clone()),
        2 => KvError::TooLarge(w.message.clone()),
        3 => KvError::NotFound,
        4 => KvError::Overloaded(usize::try_from(w.overloaded).unwrap_or(usize::MAX)),
        5 => KvError::Unavailable(QuorumFailure {
            quorum: if w.quorum == "r" { "r" } else { "w" },
            needed: small(w.needed, "needed")?,
            counted: addresses_from_wire(&w.counted)?,
            uncounted: addresses_from_wire(&w.uncounted)?,
            failed: w
                .failed
                .iter()
                .map(|f| {
                    let node = f
                        .node
                        .as_ref()
                        .ok_or(DecodeError::MissingField("failed.node"))?;
                    Ok((address_from_wire(node)?, f.reason.clone()))
                })
                .collect::<Result<_, DecodeError>>()?,
            unanswered: addresses_from_wire(&w.unanswered)?,
        }),
        6 => KvError::Storage(w.message.clone()),
        k => return Err(DecodeError::BadEnum("kv error kind", k as i32)),
    })
}

impl Codec for KvCodec {
    type Message = KvMessage;

    fn encode(&self, msg: &KvMessage) -> (u32, Bytes) {
        let (m, bytes) = match msg {
            KvMessage::Forward {
                request,
                key,
                value,
                context,
                n,
                w,
            } => (
                manifest::FORWARD,
                wire::KvForward {
                    request: *request,
                    key: key.clone(),
                    value: value.as_ref().map(|v| Bytes::copy_from_slice(v)),
                    context: encode_context(context).into(),
                    n: u32::from(*n),
                    w: u32::from(*w),
                }
                .encode_to_vec(),
            ),
            KvMessage::ForwardReply { request, result } => (
                manifest::FORWARD_REPLY,
                wire::KvForwardReply {
                    request: *request,
                    error: result.as_ref().err().map(error_to_wire),
                }
                .encode_to_vec(),
            ),
            KvMessage::Put {
                request,
                key,
                object,
            } => (
                manifest::PUT,
                wire::KvPut {
                    request: *request,
                    key: key.clone(),
                    object: object.encode().into(),
                }
                .encode_to_vec(),
            ),
            KvMessage::PutReply { request, result } => (
                manifest::PUT_REPLY,
                wire::KvAck {
                    request: *request,
                    error: result.as_ref().err().cloned(),
                }
                .encode_to_vec(),
            ),
            KvMessage::Get { request, key } => (
                manifest::GET,
                wire::KvGet {
                    request: *request,
                    key: key.clone(),
                }
                .encode_to_vec(),
            ),
            KvMessage::GetReply {
                request,
                result,
                complete,
            } => (
                manifest::GET_REPLY,
                wire::KvGetReply {
                    request: *request,
                    result: Some(match result {
                        Ok(Some(o)) => wire::kv_get_reply::Result::Object(o.encode().into()),
                        Ok(None) => wire::kv_get_reply::Result::Absent(true),
                        Err(e) => wire::kv_get_reply::Result::Error(e.clone()),
                    }),
                    complete: *complete,
                }
                .encode_to_vec(),
            ),
            KvMessage::Repair { key, object } => (
                manifest::REPAIR,
                wire::KvKeyObject {
                    key: key.clone(),
                    object: object.encode().into(),
                }
                .encode_to_vec(),
            ),
            KvMessage::Reap { key, clock } => (
                manifest::REAP,
                wire::KvReap {
                    key: key.clone(),
                    clock: encode_context(clock).into(),
                }
                .encode_to_vec(),
            ),
            KvMessage::AeGroups { session, groups } => (
                manifest::AE_GROUPS,
                wire::KvAeGroups {
                    session: *session,
                    groups: groups
                        .iter()
                        .map(|g| wire::KvGroupHash {
                            segment: u32::from(g.segment),
                            n: u32::from(g.n),
                            hash: g.hash,
                        })
                        .collect(),
                }
                .encode_to_vec(),
            ),
            KvMessage::AeBuckets {
                session,
                groups,
                truncated,
            } => (
                manifest::AE_BUCKETS,
                wire::KvAeBuckets {
                    session: *session,
                    groups: groups
                        .iter()
                        .map(|g| wire::KvGroupBuckets {
                            segment: u32::from(g.segment),
                            n: u32::from(g.n),
                            buckets: g
                                .buckets
                                .iter()
                                .map(|(b, h)| wire::KvBucketHash {
                                    bucket: u32::from(*b),
                                    hash: *h,
                                })
                                .collect(),
                        })
                        .collect(),
                    truncated: *truncated,
                }
                .encode_to_vec(),
            ),
            KvMessage::AeKeys { session, buckets } => (
                manifest::AE_KEYS,
                wire::KvAeKeys {
                    session: *session,
                    buckets: buckets
                        .iter()
                        .map(|b| wire::KvBucketKeys {
                            segment: u32::from(b.segment),
                            n: u32::from(b.n),
                            bucket: u32::from(b.bucket),
                            keys: b
                                .keys
                                .iter()
                                .map(|(k, d)| wire::KvKeyDigest {
                                    key: k.clone(),
                                    digest: *d,
                                })
                                .collect(),
                        })
                        .collect(),
                }
                .encode_to_vec(),
            ),
            KvMessage::AeObjects {
                session,
                objects,
                want,
            } => (
                manifest::AE_OBJECTS,
                wire::KvObjects {
                    session: *session,
                    objects: objects_to_wire(objects),
                    want: want.clone(),
                }
                .encode_to_vec(),
            ),
            KvMessage::AeWanted { session, objects } => (
                manifest::AE_WANTED,
                wire::KvObjects {
                    session: *session,
                    objects: objects_to_wire(objects),
                    want: Vec::new(),
                }
                .encode_to_vec(),
            ),
            KvMessage::Handoff { session, objects } => (
                manifest::HANDOFF,
                wire::KvObjects {
                    session: *session,
                    objects: objects_to_wire(objects),
                    want: Vec::new(),
                }
                .encode_to_vec(),
            ),
            KvMessage::HandoffAck { session, result } => (
                manifest::HANDOFF_ACK,
                wire::KvAck {
                    request: *session,
                    error: result.as_ref().err().cloned(),
                }
                .encode_to_vec(),
            ),
        };
        (m, Bytes::from(bytes))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<KvMessage, DecodeError> {
        self.decode_owned(manifest, Bytes::copy_from_slice(payload))
    }

    const KEEPS_PAYLOAD: bool = true;

    /// Values are read from `payload` without a first copy into a buffer of their own.
    fn decode_owned(&self, manifest: u32, payload: Bytes) -> Result<KvMessage, DecodeError> {
        let ack = |a: wire::KvAck| match a.error {
            Some(e) => Err(e),
            None => Ok(()),
        };
        Ok(match manifest {
            manifest::FORWARD => {
                let f = wire::KvForward::decode(payload)?;
                KvMessage::Forward {
                    request: f.request,
                    key: f.key,
                    value: f.value.map(|v| v.to_vec()),
                    context: decode_context(&f.context)
                        .map_err(|e| DecodeError::Invalid(format!("context: {e}")))?,
                    n: small(f.n, "n")?,
                    w: small(f.w, "w")?,
                }
            }
            manifest::FORWARD_REPLY => {
                let r = wire::KvForwardReply::decode(payload)?;
                KvMessage::ForwardReply {
                    request: r.request,
                    result: match &r.error {
                        Some(e) => Err(error_from_wire(e)?),
                        None => Ok(()),
                    },
                }
            }
            manifest::PUT => {
                let p = wire::KvPut::decode(payload)?;
                KvMessage::Put {
                    request: p.request,
                    key: p.key,
                    object: object(&p.object)?,
                }
            }
            manifest::PUT_REPLY => {
                let a = wire::KvAck::decode(payload)?;
                KvMessage::PutReply {
                    request: a.request,
                    result: ack(a),
                }
            }
            manifest::GET => {
                let g = wire::KvGet::decode(payload)?;
                KvMessage::Get {
                    request: g.request,
                    key: g.key,
                }
            }
            manifest::GET_REPLY => {
                let r = wire::KvGetReply::decode(payload)?;
                let result = match r.result.ok_or(DecodeError::MissingField("result"))? {
                    wire::kv_get_reply::Result::Object(o) => Ok(Some(object(&o)?)),
                    wire::kv_get_reply::Result::Absent(_) => Ok(None),
                    wire::kv_get_reply::Result::Error(e) => Err(e),
                };
                KvMessage::GetReply {
                    request: r.request,
                    result,
                    complete: r.complete,
                }
            }
            manifest::REPAIR => {
                let o = wire::KvKeyObject::decode(payload)?;
                KvMessage::Repair {
                    key: o.key,
                    object: object(&o.object)?,
                }
            }
            manifest::REAP => {
                let r = wire::KvReap::decode(payload)?;
                KvMessage::Reap {
                    key: r.key,
                    clock: decode_context(&r.clock)
                        .map_err(|e| DecodeError::Invalid(format!("clock: {e}")))?,
                }
            }
            manifest::AE_GROUPS => {
                let g = wire::KvAeGroups::decode(payload)?;
                KvMessage::AeGroups {
                    session: g.session,
                    groups: g
                        .groups
                        .into_iter()
                        .map(|h| {
                            Ok(GroupHash {
                                segment: segment(h.segment)?,
                                n: small(h.n, "n")?,
                                hash: h.hash,
                            })
                        })
                        .collect::<Result<_, DecodeError>>()?,
                }
            }
            manifest::AE_BUCKETS => {
                let b = wire::KvAeBuckets::decode(payload)?;
                KvMessage::AeBuckets {
                    session: b.session,
                    groups: b
                        .groups
                        .into_iter()
                        .map(|g| {
                            Ok(GroupBuckets {
                                segment: segment(g.segment)?,
                                n: small(g.n, "n")?,
                                buckets: g
                                    .buckets
                                    .into_iter()
                                    .map(|h| Ok((small(h.bucket, "bucket")?, h.hash)))
                                    .collect::<Result<_, DecodeError>>()?,
                            })
                        })
                        .collect::<Result<_, DecodeError>>()?,
                    truncated: b.truncated,
                }
            }
            manifest::AE_KEYS => {
                let k = wire::KvAeKeys::decode(payload)?;
                KvMessage::AeKeys {
                    session: k.session,
                    buckets: k
                        .buckets
                        .into_iter()
                        .map(|b| {
                            Ok(BucketKeys {
                                segment: segment(b.segment)?,
                                n: small(b.n, "n")?,
                                bucket: small(b.bucket, "bucket")?,
                                keys: b.keys.into_iter().map(|d| (d.key, d.digest)).collect(),
                            })
                        })
                        .collect::<Result<_, DecodeError>>()?,
                }
            }
            manifest::AE_OBJECTS => {
                let o = wire::KvObjects::decode(payload)?;
                KvMessage::AeObjects {
                    session: o.session,
                    objects: objects_from_wire(o.objects)?,
                    want: o.want,
                }
            }
            manifest::AE_WANTED => {
                let o = wire::KvObjects::decode(payload)?;
                KvMessage::AeWanted {
                    session: o.session,
                    objects: objects_from_wire(o.objects)?,
                }
            }
            manifest::HANDOFF => {
                let o = wire::KvObjects::decode(payload)?;
                KvMessage::Handoff {
                    session: o.session,
                    objects: objects_from_wire(o.objects)?,
                }
            }
            manifest::HANDOFF_ACK => {
                let a = wire::KvAck::decode(payload)?;
                KvMessage::HandoffAck {
                    session: a.request,
                    result: ack(a),
                }
            }
            other => return Err(DecodeError::UnknownManifest(other)),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;

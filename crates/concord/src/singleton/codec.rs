//! The Cluster Singleton protocol's codec ([`SingletonCodec`]): the core's
//! [`SingletonMessage`]s to and from the `Singleton*` protobuf messages of
//! `singleton.proto`. Decoding never panics.

use bytes::Bytes;
use concord_core::singleton::{SingletonBody, SingletonMessage};
use prost::Message;

use crate::remote::wire;
use crate::remote::{Codec, DecodeError};

/// The singleton manifests.
pub mod manifest {
    /// `HandOverToMe` (`SingletonName`).
    pub const HAND_OVER_TO_ME: u32 = 1;
    /// `HandOverInProgress` (`SingletonName`).
    pub const HAND_OVER_IN_PROGRESS: u32 = 2;
    /// `HandOverDone` (`SingletonName`).
    pub const HAND_OVER_DONE: u32 = 3;
    /// `TakeOverFromMe` (`SingletonName`).
    pub const TAKE_OVER_FROM_ME: u32 = 4;
    /// `Identify` (`SingletonName`).
    pub const IDENTIFY: u32 = 5;
    /// `SingletonIdentified`.
    pub const IDENTIFIED: u32 = 6;
    /// `SingletonDeliver`.
    pub const DELIVER: u32 = 7;
    /// `SingletonDeliver` (returned).
    pub const UNDELIVERED: u32 = 8;
    /// `SingletonReply`.
    pub const REPLY: u32 = 9;
}

/// The codec of [`concord_core::ProtocolId::SINGLETON`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SingletonCodec;

impl Codec for SingletonCodec {
    type Message = SingletonMessage;

    fn encode(&self, msg: &SingletonMessage) -> (u32, Bytes) {
        let name = msg.name.clone();
        let named = |m: u32| {
            (
                m,
                wire::SingletonName { name: name.clone() }.encode_to_vec(),
            )
        };
        let (m, bytes) = match &msg.body {
            SingletonBody::HandOverToMe => named(manifest::HAND_OVER_TO_ME),
            SingletonBody::HandOverInProgress => named(manifest::HAND_OVER_IN_PROGRESS),
            SingletonBody::HandOverDone => named(manifest::HAND_OVER_DONE),
            SingletonBody::TakeOverFromMe => named(manifest::TAKE_OVER_FROM_ME),
            SingletonBody::Identify => named(manifest::IDENTIFY),
            SingletonBody::Identified { incarnation } => (
                manifest::IDENTIFIED,
                wire::SingletonIdentified {
                    name: name.clone(),
                    incarnation: *incarnation,
                }
                .encode_to_vec(),
            ),
            SingletonBody::Deliver { seq, payload, ask }
            | SingletonBody::Undelivered { seq, payload, ask } => (
                if matches!(msg.body, SingletonBody::Deliver { .. }) {
                    manifest::DELIVER
                } else {
                    manifest::UNDELIVERED
                },
                wire::SingletonDeliver {
                    name: name.clone(),
                    seq: *seq,
                    payload: Bytes::from(payload.clone()),
                    ask: *ask,
                }
                .encode_to_vec(),
            ),
            SingletonBody::Reply { ask, payload } => (
                manifest::REPLY,
                wire::SingletonReply {
                    name: name.clone(),
                    ask: *ask,
                    payload: Bytes::from(payload.clone()),
                }
                .encode_to_vec(),
            ),
        };
        (m, Bytes::from(bytes))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<SingletonMessage, DecodeError> {
        let named =
            |body: SingletonBody, payload: &[u8]| -> Result<SingletonMessage, DecodeError> {
                Ok(SingletonMessage {
                    name: wire::SingletonName::decode(payload)?.name,
                    body,
                })
            };
        match manifest {
            manifest::HAND_OVER_TO_ME => named(SingletonBody::HandOverToMe, payload),
            manifest::HAND_OVER_IN_PROGRESS => named(SingletonBody::HandOverInProgress, payload),
            manifest::HAND_OVER_DONE => named(SingletonBody::HandOverDone, payload),
            manifest::TAKE_OVER_FROM_ME => named(SingletonBody::TakeOverFromMe, payload),
            manifest::IDENTIFY => named(SingletonBody::Identify, payload),
            manifest::IDENTIFIED => {
                let w = wire::SingletonIdentified::decode(payload)?;
                Ok(SingletonMessage {
                    name: w.name,
                    body: SingletonBody::Identified {
                        incarnation: w.incarnation,
                    },
                })
            }
            manifest::DELIVER | manifest::UNDELIVERED => {
                let w = wire::SingletonDeliver::decode(payload)?;
                let (seq, payload, ask) = (w.seq, w.payload.to_vec(), w.ask);
                let body = if manifest == manifest::DELIVER {
                    SingletonBody::Deliver { seq, payload, ask }
                } else {
                    SingletonBody::Undelivered { seq, payload, ask }
                };
                Ok(SingletonMessage { name: w.name, body })
            }
            manifest::REPLY => {
                let w = wire::SingletonReply::decode(payload)?;
                Ok(SingletonMessage {
                    name: w.name,
                    body: SingletonBody::Reply {
                        ask: w.ask,
                        payload: w.payload.to_vec(),
                    },
                })
            }
            other => Err(DecodeError::UnknownManifest(other)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One message body of every kind (also the seeds of the wire fuzz tests).
    pub(crate) fn all_bodies() -> Vec<SingletonBody> {
        vec![
            SingletonBody::HandOverToMe,
            SingletonBody::HandOverInProgress,
            SingletonBody::HandOverDone,
            SingletonBody::TakeOverFromMe,
            SingletonBody::Identify,
            SingletonBody::Identified {
                incarnation: Some(3),
            },
            SingletonBody::Identified { incarnation: None },
            SingletonBody::Deliver {
                seq: 1,
                payload: vec![1],
                ask: Some(2),
            },
            SingletonBody::Undelivered {
                seq: 1,
                payload: vec![],
                ask: None,
            },
            SingletonBody::Reply {
                ask: 4,
                payload: vec![5],
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for body in all_bodies() {
            let m = SingletonMessage {
                name: "s".into(),
                body,
            };
            let (manifest, bytes) = SingletonCodec.encode(&m);
            assert_eq!(SingletonCodec.decode_owned(manifest, bytes).unwrap(), m);
        }
        assert!(SingletonCodec.decode_owned(77, Bytes::new()).is_err());
        assert!(SingletonCodec
            .decode_owned(manifest::DELIVER, Bytes::from_static(&[0xff]))
            .is_err());
    }
}

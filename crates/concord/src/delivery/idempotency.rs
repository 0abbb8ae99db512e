//! Asks over reliable delivery with an **idempotency key**
//! ([`super::ShardingProducer::ask`]): the key travels in front of the message, and the
//! consumer keeps the answers of the last [`MAX_KEYS`] keys it handled, at most
//! [`MAX_ANSWER_BYTES`] of keys and answers ([`Answers`], in its state: handed over with the entity, persisted with an event-sourced consumer's
//! events). A message whose key it knows is not handled again: it is confirmed and
//! answered with the first answer — whichever producer sent it, so a caller that retries
//! after a timeout, or through another node after its producer's node crashed, gets the
//! same answer and the entity applies the request once.
//!
//! Framing: a keyed payload is `0xC1`, the key's length (u16, big-endian), the key, then the
//! message as usual. `0xC1` is the one byte MessagePack never uses, so an unkeyed payload
//! (a MessagePack value) is never mistaken for a keyed one, and queues and consumers of
//! earlier versions read unkeyed payloads as before.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Answers kept per consumer entity.
pub const MAX_KEYS: usize = 1_000;
/// Keys and answers kept per consumer entity, bytes at most (the kept answers travel in
/// the entity's handed-over state, under the transport's 2 MiB frame; an answer larger
/// than this alone is not kept).
pub const MAX_ANSWER_BYTES: usize = 512 * 1024;
/// Longest idempotency key, bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The first byte of a keyed payload (never used by MessagePack).
const KEYED: u8 = 0xC1;

/// `message` (encoded) behind `key`.
#[cfg(feature = "runtime")]
pub(super) fn frame(key: &str, message: &[u8]) -> Vec<u8> {
    let len = u16::try_from(key.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(3 + key.len() + message.len());
    out.push(KEYED);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&key.as_bytes()[..usize::from(len)]);
    out.extend_from_slice(message);
    out
}

/// The key (if any) and the message of a payload. A keyed frame that does not hold
/// together (too short, the key longer than [`MAX_KEY_BYTES`] or not UTF-8) yields no key and the whole payload, which then
/// fails to decode as a message (0xC1 begins no MessagePack value): confirmed and skipped.
pub(super) fn unframe(payload: &[u8]) -> (Option<&str>, &[u8]) {
    let Some((&KEYED, rest)) = payload.split_first() else {
        return (None, payload);
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return (None, payload);
    };
    let len = usize::from(u16::from_be_bytes(*len));
    if len > MAX_KEY_BYTES {
        return (None, payload);
    }
    match (rest.get(..len).map(std::str::from_utf8), rest.get(len..)) {
        (Some(Ok(key)), Some(message)) if !key.is_empty() => (Some(key), message),
        _ => (None, payload),
    }
}

/// The answers of the last [`MAX_KEYS`] keys a consumer handled, at most
/// [`MAX_ANSWER_BYTES`] of keys and answers (the oldest forgotten beyond either), encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answers {
    /// Key → (when handled, in keys counted; the answer, encoded).
    entries: BTreeMap<String, (u64, serde_bytes::ByteBuf)>,
    /// Keys counted.
    counted: u64,
}

impl Answers {
    /// The answer given to `key`, if kept.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.entries.get(key).map(|(_, a)| a.as_slice())
    }

    /// Keys kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the keys and answers kept.
    pub fn bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, (_, a))| k.len() + a.len())
            .sum()
    }

    /// Keeps `answer` for `key`, forgetting the oldest keys beyond [`MAX_KEYS`] or
    /// [`MAX_ANSWER_BYTES`]. Returns false, keeping nothing new, if the key and answer
    /// alone are larger than [`MAX_ANSWER_BYTES`] (a repeat of the key is then handled
    /// again).
    pub fn insert(&mut self, key: &str, answer: Vec<u8>) -> bool {
        let size = key.len() + answer.len();
        if size > MAX_ANSWER_BYTES {
            return false;
        }
        self.counted += 1;
        self.entries.insert(
            key.to_string(),
            (self.counted, serde_bytes::ByteBuf::from(answer)),
        );
        let mut bytes = self.bytes();
        while self.entries.len() > MAX_KEYS || bytes > MAX_ANSWER_BYTES {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, a)) = self.entries.remove(&oldest) {
                bytes -= oldest.len() + a.len();
            }
        }
        true
    }
}

#[cfg(all(test, feature = "runtime"))]
mod tests {
    use super::*;
    use crate::sharding::entity::encode;

    #[test]
    fn keyed_and_plain_payloads_are_told_apart() {
        let message = encode(&"hello".to_string()).unwrap();
        assert_eq!(unframe(&message), (None, &message[..]));
        let keyed = frame("order-17", &message);
        assert_eq!(unframe(&keyed), (Some("order-17"), &message[..]));
        // Broken frames: no key, and the payload as it is (which does not decode).
        for broken in [
            &[KEYED][..],
            &[KEYED, 0][..],
            &[KEYED, 0, 9, b'a'][..],
            &[KEYED, 0, 0, 1][..],
        ] {
            assert_eq!(unframe(broken), (None, broken));
        }
    }

    #[test]
    fn answers_forget_the_oldest_key_beyond_the_bound() {
        let mut a = Answers::default();
        for i in 0..MAX_KEYS + 5 {
            a.insert(&format!("k{i}"), vec![i as u8]);
        }
        assert_eq!(a.len(), MAX_KEYS);
        assert_eq!(a.get("k0"), None);
        assert_eq!(a.get("k4"), None);
        assert_eq!(a.get("k5"), Some(&[5u8][..]));
        // Again under a known key: refreshed, nothing else forgotten.
        a.insert("k5", vec![9]);
        assert_eq!(a.len(), MAX_KEYS);
        assert_eq!(a.get("k5"), Some(&[9u8][..]));
    }

    #[test]
    fn answers_forget_the_oldest_keys_beyond_the_byte_bound() {
        let mut a = Answers::default();
        let big = MAX_ANSWER_BYTES / 4;
        for i in 0..6 {
            assert!(a.insert(&format!("k{i}"), vec![0; big]));
            assert!(a.bytes() <= MAX_ANSWER_BYTES, "{} bytes kept", a.bytes());
        }
        // Three answers of a quarter each, and their keys, fit; the oldest went.
        assert_eq!(a.len(), 3);
        assert_eq!(a.get("k2"), None);
        assert!(a.get("k3").is_some() && a.get("k5").is_some());
        // An answer larger than the bound alone is not kept, and forgets nothing.
        assert!(!a.insert("huge", vec![0; MAX_ANSWER_BYTES]));
        assert_eq!(a.get("huge"), None);
        assert_eq!(a.len(), 3);
    }
}

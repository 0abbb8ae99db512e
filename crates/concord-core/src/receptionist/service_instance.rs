//! [`ServiceKeyId`] (the name services register under, Akka's `ServiceKey`'s id),
//! [`ServiceInstance`] (one registered handle: a node and a local id) and its form as an
//! element of the replicated registry.

use std::fmt;
use std::str::FromStr;

use crate::address::{Address, UniqueAddress};

/// Longest service key id, bytes.
pub const MAX_SERVICE_KEY_BYTES: usize = 200;

/// The id of a service key: 1 to [`MAX_SERVICE_KEY_BYTES`] bytes of `[A-Za-z0-9_.:/-]`.
/// Its registry lives in the Distributed Data key [`ServiceKeyId::ddata_key`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKeyId(String);

/// A service key id that is empty, too long or has a character outside `[A-Za-z0-9_.:/-]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("service key `{0}`: 1 to {MAX_SERVICE_KEY_BYTES} bytes of A-Z a-z 0-9 _ . : / -")]
pub struct InvalidServiceKey(pub String);

impl ServiceKeyId {
    /// Prefix of the registry's Distributed Data keys.
    pub const DDATA_PREFIX: &'static str = "receptionist/";

    /// Validates `id`.
    ///
    /// # Errors
    /// [`InvalidServiceKey`] naming the id.
    pub fn new(id: &str) -> Result<Self, InvalidServiceKey> {
        let ok = !id.is_empty()
            && id.len() <= MAX_SERVICE_KEY_BYTES
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:/-".contains(&b));
        if ok {
            Ok(ServiceKeyId(id.to_string()))
        } else {
            Err(InvalidServiceKey(
                id.chars().take(MAX_SERVICE_KEY_BYTES).collect(),
            ))
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The Distributed Data key (an `ORSet` of [`ServiceInstance::to_entry`] strings) that
    /// holds this key's registrations: `receptionist/<id>`.
    pub fn ddata_key(&self) -> String {
        format!("{}{}", Self::DDATA_PREFIX, self.0)
    }

    /// The service key of a registry's Distributed Data key, if it is one.
    pub fn of_ddata_key(key: &str) -> Option<ServiceKeyId> {
        ServiceKeyId::new(key.strip_prefix(Self::DDATA_PREFIX)?).ok()
    }
}

impl fmt::Display for ServiceKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One registered handle: the node that holds it and its id there (unique per node
/// incarnation). Messages to it travel to that incarnation only.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceInstance {
    /// The node (incarnation) that registered it.
    pub node: UniqueAddress,
    /// Its id on that node.
    pub id: u64,
}

impl ServiceInstance {
    /// Its element in the registry's `ORSet`: `<address>#<uid>#<id>`.
    pub fn to_entry(&self) -> String {
        format!("{}#{}#{}", self.node.address, self.node.uid, self.id)
    }

    /// The instance of a registry element, `None` if it is not one (an element written by
    /// a stranger or a later version: ignored, never a panic).
    pub fn parse_entry(entry: &str) -> Option<ServiceInstance> {
        let mut parts = entry.rsplitn(3, '#');
        let id = parts.next()?.parse().ok()?;
        let uid = parts.next()?.parse().ok()?;
        let address = Address::from_str(parts.next()?).ok()?;
        Some(ServiceInstance {
            node: UniqueAddress::new(address, uid),
            id,
        })
    }
}

impl fmt::Display for ServiceInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_entry())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_map_to_their_ddata_key() {
        let k = ServiceKeyId::new("chat/room-1").unwrap();
        assert_eq!(k.ddata_key(), "receptionist/chat/room-1");
        assert_eq!(ServiceKeyId::of_ddata_key(&k.ddata_key()), Some(k));
        assert_eq!(ServiceKeyId::of_ddata_key("counter"), None);
        for bad in ["", "a b", "a#b", "é"] {
            assert!(ServiceKeyId::new(bad).is_err(), "{bad}");
        }
        assert!(ServiceKeyId::new(&"k".repeat(MAX_SERVICE_KEY_BYTES)).is_ok());
        assert!(ServiceKeyId::new(&"k".repeat(MAX_SERVICE_KEY_BYTES + 1)).is_err());
    }

    #[test]
    fn entries_round_trip_and_garbage_is_none() {
        let i = ServiceInstance {
            node: UniqueAddress::new(Address::new("sys", "10.0.0.1", 25520), 42),
            id: 7,
        };
        assert_eq!(ServiceInstance::parse_entry(&i.to_entry()), Some(i));
        for bad in [
            "",
            "#",
            "a#1#2",
            "concord://s@h:1#x#2",
            "concord://s@h:1#1#-2",
        ] {
            assert_eq!(ServiceInstance::parse_entry(bad), None, "{bad}");
        }
    }
}

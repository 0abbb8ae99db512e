//! Node addresses: [`Address`] (`concord://<system>@<host>:<port>`) and [`UniqueAddress`]
//! (an address plus the random 64-bit uid of one incarnation).
//!
//! Spec: cluster-specification.md, "Membership" — a node is identified by `hostname:port:uid`;
//! a restarted node at the same `hostname:port` gets a new uid and is a different node.
//!
//! Ordering is the cluster's single total order, used for the leader, "oldest" ties and
//! heartbeat-ring fallbacks: host (string order), then port, then system name; a
//! [`UniqueAddress`] then orders by uid. It is identical on every node.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The URI scheme of Concord addresses.
pub const PROTOCOL: &str = "concord";

/// A node's network address within a named cluster (actor system):
/// `concord://<system>@<host>:<port>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Address {
    /// Cluster (actor system) name; nodes only talk to nodes with the same name.
    pub system: String,
    /// Host name or IP address the node is reachable at.
    pub host: String,
    /// Remoting TCP port.
    pub port: u16,
}

impl Address {
    /// Builds an address from its parts.
    pub fn new(system: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        Address {
            system: system.into(),
            host: host.into(),
            port,
        }
    }

    /// `host:port`, the part a socket connects to.
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl Ord for Address {
    fn cmp(&self, other: &Self) -> Ordering {
        self.host
            .cmp(&other.host)
            .then(self.port.cmp(&other.port))
            .then_with(|| self.system.cmp(&other.system))
    }
}

impl PartialOrd for Address {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PROTOCOL}://{}@{}", self.system, self.host_port())
    }
}

/// Why a string is not a valid [`Address`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressParseError {
    /// The string does not start with `concord://`.
    #[error("address `{0}` must start with `concord://`")]
    Scheme(String),
    /// The `<system>@` part is missing or empty.
    #[error("address `{0}` has no `<system>@` part")]
    System(String),
    /// The `<host>:<port>` part is missing or malformed.
    #[error("address `{0}` must end with `<host>:<port>`")]
    HostPort(String),
    /// The port is not a number in 1..=65535.
    #[error("address `{0}` has an invalid port")]
    Port(String),
}

impl FromStr for Address {
    type Err = AddressParseError;

    /// Parses `concord://system@host:port` (IPv6 hosts in brackets).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .strip_prefix("concord://")
            .ok_or_else(|| AddressParseError::Scheme(s.to_string()))?;
        let (system, host_port) = rest
            .split_once('@')
            .ok_or_else(|| AddressParseError::System(s.to_string()))?;
        if system.is_empty()
            || !system
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(AddressParseError::System(s.to_string()));
        }
        let (host, port) = parse_host_port(host_port).map_err(|e| match e {
            HostPortError::Port => AddressParseError::Port(s.to_string()),
            HostPortError::Shape => AddressParseError::HostPort(s.to_string()),
        })?;
        Ok(Address::new(system, host, port))
    }
}

/// Why a `host:port` string is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPortError {
    /// Not of the form `host:port` / `[v6]:port`.
    Shape,
    /// The port is not a number in 1..=65535.
    Port,
}

/// Splits `host:port` or `[ipv6]:port` into its parts.
pub fn parse_host_port(s: &str) -> Result<(String, u16), HostPortError> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or(HostPortError::Shape)?;
        (h, p)
    } else {
        s.rsplit_once(':').ok_or(HostPortError::Shape)?
    };
    if host.is_empty() || host.contains('/') || host.contains('@') {
        return Err(HostPortError::Shape);
    }
    let port: u16 = port.parse().map_err(|_| HostPortError::Port)?;
    if port == 0 {
        return Err(HostPortError::Port);
    }
    Ok((host.to_string(), port))
}

/// One incarnation of a node: its [`Address`] and a random 64-bit uid chosen at start.
/// A restart at the same address gets a new uid, and so is a different `UniqueAddress`.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct UniqueAddress {
    /// Network address.
    pub address: Address,
    /// Random uid of this incarnation.
    pub uid: u64,
}

impl UniqueAddress {
    /// Builds a unique address.
    pub fn new(address: Address, uid: u64) -> Self {
        UniqueAddress { address, uid }
    }

    /// A stable 64-bit FNV-1a hash of address and uid, identical on every node and
    /// every platform (used to order the heartbeat ring).
    pub fn stable_hash(&self) -> u64 {
        let mut h = Fnv1a::new();
        h.write_unique_address(self);
        h.finish()
    }
}

impl fmt::Display for UniqueAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.address, self.uid)
    }
}

/// 64-bit FNV-1a: a tiny, platform-independent hash used where every node must compute
/// the same value (ring order, seen digests). Not for untrusted keys in hash tables.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Fnv1a {
    /// A fresh hasher.
    pub fn new() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
    /// Feeds bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    /// Feeds a node identity field by field (system, host, port, uid; strings end with a
    /// 0 byte so that field boundaries cannot shift), without formatting it.
    pub fn write_unique_address(&mut self, node: &UniqueAddress) {
        self.write(node.address.system.as_bytes());
        self.write(&[0]);
        self.write(node.address.host.as_bytes());
        self.write(&[0]);
        self.write(&node.address.port.to_le_bytes());
        self.write(&node.uid.to_le_bytes());
    }
    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_round_trips_through_its_string_form() {
        let a = Address::new("sys", "127.0.0.1", 25520);
        assert_eq!(a.to_string(), "concord://sys@127.0.0.1:25520");
        assert_eq!(
            "concord://sys@127.0.0.1:25520".parse::<Address>().unwrap(),
            a
        );
        let v6 = Address::new("sys", "::1", 25520);
        assert_eq!(v6.to_string(), "concord://sys@[::1]:25520");
        assert_eq!(v6.to_string().parse::<Address>().unwrap(), v6);
    }

    #[test]
    fn malformed_addresses_are_rejected_with_the_reason() {
        assert!(matches!(
            "akka://s@h:1".parse::<Address>(),
            Err(AddressParseError::Scheme(_))
        ));
        assert!(matches!(
            "concord://h:1".parse::<Address>(),
            Err(AddressParseError::System(_))
        ));
        assert!(matches!(
            "concord://s@h".parse::<Address>(),
            Err(AddressParseError::HostPort(_))
        ));
        assert!(matches!(
            "concord://s@h:99999".parse::<Address>(),
            Err(AddressParseError::Port(_))
        ));
        assert!(matches!(
            "concord://s@h:0".parse::<Address>(),
            Err(AddressParseError::Port(_))
        ));
        assert!(matches!(
            "concord://s@:1".parse::<Address>(),
            Err(AddressParseError::HostPort(_))
        ));
    }

    #[test]
    fn addresses_order_by_host_then_port_then_uid() {
        let a = Address::new("s", "10.0.0.1", 2552);
        let b = Address::new("s", "10.0.0.1", 2553);
        let c = Address::new("s", "10.0.0.2", 1);
        assert!(a < b && b < c);
        let ua = UniqueAddress::new(a.clone(), 9);
        let ub = UniqueAddress::new(a, 10);
        assert!(ua < ub);
        assert!(ub < UniqueAddress::new(b, 0));
    }

    #[test]
    fn stable_hash_is_fixed() {
        let u = UniqueAddress::new(Address::new("s", "h", 1), 42);
        assert_eq!(u.stable_hash(), u.clone().stable_hash());
        assert_ne!(
            u.stable_hash(),
            UniqueAddress::new(Address::new("s", "h", 1), 43).stable_hash()
        );
    }
}

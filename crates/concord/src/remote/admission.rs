//! [`HandshakeAdmission`]: who may hold one of the node's places for connections in their
//! handshake, so that strangers cannot starve members of them (issue 24: 128 places held
//! 5 s each by a silent flood refused 19 of 20 legitimate handshakes).
//!
//! - A source address that is not a current member's holds at most
//!   `max-pending-handshakes-per-address` places, and strangers together at most
//!   `max-pending-handshakes`.
//! - The source addresses of current members (the hosts of the membership view, resolved to
//!   IP addresses, passed down by the node: [`super::Transport::set_member_addresses`]) have
//!   `reserved-member-handshakes` places more that strangers never take, and no per-address
//!   limit (members may share an address: one host, NAT).
//!
//! A place is taken when the connection is accepted and released when its handshake ends
//! (done, refused, or timed out: `handshake-first-byte-timeout` for its first byte,
//! `handshake-timeout` for all of it). A member's address is known by its IP: an attacker on
//! a member's host shares its reserve (and the reserve is all it can take beyond strangers').

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Mutex, RwLock, Weak};
use std::time::Duration;

/// Why a connection got no handshake place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoPlace {
    /// Strangers hold `max-pending-handshakes` places (members: that plus their reserve).
    Full,
    /// This (non-member) address holds `max-pending-handshakes-per-address` places.
    PerAddress,
}

impl NoPlace {
    /// For the log line.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            NoPlace::Full => "too many connections in their handshake",
            NoPlace::PerAddress => {
                "too many connections in their handshake from this address \
                 (remote.max-pending-handshakes-per-address)"
            }
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    /// Places held, all addresses.
    total: usize,
    /// Places held per source address (entries removed at zero: at most `total` entries).
    per_address: HashMap<IpAddr, usize>,
}

/// The members' hosts and the IP addresses their names resolved to.
#[derive(Debug, Default)]
struct MemberHosts {
    hosts: BTreeSet<String>,
    resolved: HashMap<String, Vec<IpAddr>>,
}

impl MemberHosts {
    /// The literal IP addresses and the resolved ones.
    fn ips(&self) -> HashSet<IpAddr> {
        self.hosts
            .iter()
            .filter_map(|h| host_ip(h))
            .chain(self.resolved.values().flatten().copied())
            .collect()
    }
}

/// `host` as an IP address, if it is one (`[::1]` included).
fn host_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Longest wait for the resolution of one member's host name.
const MEMBER_RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The handshake places of one listener (see the module documentation).
#[derive(Debug)]
pub(crate) struct HandshakeAdmission {
    max_pending: usize,
    per_address: usize,
    reserved_for_members: usize,
    pending: Mutex<Pending>,
    members: RwLock<HashSet<IpAddr>>,
    member_hosts: Mutex<MemberHosts>,
}

/// The address as the admission knows it: an IPv4-mapped IPv6 address (a dual-stack
/// listener's view of an IPv4 peer) as the IPv4 address.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

impl HandshakeAdmission {
    /// Places for `max_pending` strangers' handshakes, at most `per_address` from one
    /// address, and `reserved_for_members` more for members' addresses. Limits of 0 are
    /// taken as 1.
    pub(crate) fn new(max_pending: usize, per_address: usize, reserved_for_members: usize) -> Self {
        HandshakeAdmission {
            max_pending: max_pending.max(1),
            per_address: per_address.max(1),
            reserved_for_members,
            pending: Mutex::new(Pending::default()),
            members: RwLock::new(HashSet::new()),
            member_hosts: Mutex::new(MemberHosts::default()),
        }
    }

    /// The members' hosts from now on: their IP addresses apply at once; returns the host
    /// names to resolve (then [`HandshakeAdmission::add_resolved`]), none if the hosts are
    /// those of the last call.
    pub(crate) fn set_member_hosts<'h>(
        &self,
        hosts: impl IntoIterator<Item = &'h str>,
    ) -> Vec<String> {
        let hosts: BTreeSet<String> = hosts.into_iter().map(str::to_ascii_lowercase).collect();
        let mut m = self.member_hosts.lock().unwrap_or_else(|p| p.into_inner());
        if m.hosts == hosts {
            return Vec::new();
        }
        m.resolved.retain(|h, _| hosts.contains(h));
        m.hosts = hosts;
        self.set_members(m.ips());
        m.hosts
            .iter()
            .filter(|h| host_ip(h).is_none())
            .cloned()
            .collect()
    }

    /// The addresses member host `name` resolved to (ignored if it is no longer a
    /// member's).
    pub(crate) fn add_resolved(&self, name: String, ips: Vec<IpAddr>) {
        let mut m = self.member_hosts.lock().unwrap_or_else(|p| p.into_inner());
        if m.hosts.contains(&name) {
            m.resolved.insert(name, ips);
            self.set_members(m.ips());
        }
    }

    /// The members' source addresses from now on.
    pub(crate) fn set_members(&self, ips: HashSet<IpAddr>) {
        let ips = ips.into_iter().map(canonical).collect();
        *self.members.write().unwrap_or_else(|p| p.into_inner()) = ips;
    }

    /// True if `ip` is a current member's address.
    pub(crate) fn is_member(&self, ip: IpAddr) -> bool {
        self.members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&canonical(ip))
    }

    /// Takes a place for a connection from `ip`; [`HandshakeAdmission::release`] gives it
    /// back.
    ///
    /// # Errors
    /// [`NoPlace`]: the connection must be closed now.
    pub(crate) fn try_take(&self, ip: IpAddr) -> Result<(), NoPlace> {
        let ip = canonical(ip);
        let member = self.is_member(ip);
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if member {
            if p.total >= self.max_pending.saturating_add(self.reserved_for_members) {
                return Err(NoPlace::Full);
            }
        } else {
            if p.total >= self.max_pending {
                return Err(NoPlace::Full);
            }
            if p.per_address.get(&ip).copied().unwrap_or(0) >= self.per_address {
                return Err(NoPlace::PerAddress);
            }
        }
        p.total += 1;
        *p.per_address.entry(ip).or_insert(0) += 1;
        Ok(())
    }

    /// Gives back a place taken for `ip`.
    pub(crate) fn release(&self, ip: IpAddr) {
        let ip = canonical(ip);
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        p.total = p.total.saturating_sub(1);
        if let Some(n) = p.per_address.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                p.per_address.remove(&ip);
            }
        }
    }

    /// Places held now.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

/// Resolves members' host `names` (each within 2 s; a failure leaves that name out until
/// the members change) for `admission`, while it exists.
pub(crate) async fn resolve_member_names(admission: Weak<HandshakeAdmission>, names: Vec<String>) {
    for name in names {
        let lookup = tokio::net::lookup_host((name.as_str(), 0));
        let ips = match tokio::time::timeout(MEMBER_RESOLVE_TIMEOUT, lookup).await {
            Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
            _ => continue,
        };
        let Some(admission) = admission.upgrade() else {
            return;
        };
        admission.add_resolved(name, ips);
    }
}

/// A place held by one connection, given back when dropped.
pub(crate) struct HandshakePlace<'a> {
    admission: &'a HandshakeAdmission,
    ip: IpAddr,
}

impl<'a> HandshakePlace<'a> {
    /// Takes over a place already taken for `ip` (by [`HandshakeAdmission::try_take`]).
    pub(crate) fn adopt(admission: &'a HandshakeAdmission, ip: IpAddr) -> Self {
        HandshakePlace { admission, ip }
    }
}

impl Drop for HandshakePlace<'_> {
    fn drop(&mut self) {
        self.admission.release(self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_stranger_address_holds_at_most_its_share() {
        let a = HandshakeAdmission::new(10, 3, 2);
        for _ in 0..3 {
            assert_eq!(a.try_take(ip("10.0.0.9")), Ok(()));
        }
        assert_eq!(a.try_take(ip("10.0.0.9")), Err(NoPlace::PerAddress));
        // The same address mapped into IPv6 is the same address.
        assert_eq!(a.try_take(ip("::ffff:10.0.0.9")), Err(NoPlace::PerAddress));
        assert_eq!(a.try_take(ip("10.0.0.8")), Ok(()));
        a.release(ip("10.0.0.9"));
        assert_eq!(a.try_take(ip("10.0.0.9")), Ok(()));
        assert_eq!(a.pending(), 4);
    }

    #[test]
    fn members_keep_a_reserve_strangers_cannot_take() {
        let a = HandshakeAdmission::new(4, 1, 2);
        a.set_members([ip("10.0.0.1")].into());
        for i in 0..4 {
            assert_eq!(a.try_take(ip(&format!("10.9.0.{i}"))), Ok(()));
        }
        assert_eq!(a.try_take(ip("10.9.0.200")), Err(NoPlace::Full));
        // A member's address: no per-address limit, and the reserve.
        assert_eq!(a.try_take(ip("10.0.0.1")), Ok(()));
        assert_eq!(a.try_take(ip("10.0.0.1")), Ok(()));
        assert_eq!(a.try_take(ip("10.0.0.1")), Err(NoPlace::Full));
        // Freed places go to whoever asks first, within their limits.
        a.release(ip("10.9.0.0"));
        a.release(ip("10.9.0.1"));
        // Four places held, two of them by members: none for strangers yet.
        assert_eq!(a.try_take(ip("10.9.0.200")), Err(NoPlace::Full));
        a.release(ip("10.0.0.1"));
        a.release(ip("10.0.0.1"));
        assert_eq!(a.try_take(ip("10.9.0.200")), Ok(()));
        assert_eq!(a.pending(), 3);
    }

    #[test]
    fn a_former_member_is_a_stranger_again() {
        let a = HandshakeAdmission::new(8, 1, 2);
        a.set_members([ip("10.0.0.1")].into());
        assert_eq!(a.try_take(ip("10.0.0.1")), Ok(()));
        assert_eq!(a.try_take(ip("10.0.0.1")), Ok(()));
        a.set_members(HashSet::new());
        assert_eq!(a.try_take(ip("10.0.0.1")), Err(NoPlace::PerAddress));
        a.release(ip("10.0.0.1"));
        a.release(ip("10.0.0.1"));
        assert_eq!(a.try_take(ip("10.0.0.1")), Ok(()));
    }

    #[test]
    fn member_hosts_apply_as_addresses_and_names_once_resolved() {
        let a = HandshakeAdmission::new(8, 1, 2);
        let names = a.set_member_hosts(["10.0.0.1", "[::1]", "Node2.Example"]);
        assert_eq!(names, vec!["node2.example".to_string()]);
        assert!(a.is_member(ip("10.0.0.1")) && a.is_member(ip("::1")));
        assert!(!a.is_member(ip("10.0.0.2")));
        a.add_resolved("node2.example".into(), vec![ip("10.0.0.2")]);
        assert!(a.is_member(ip("10.0.0.2")));
        // The same hosts again: nothing to do.
        assert!(a
            .set_member_hosts(["10.0.0.1", "[::1]", "node2.example"])
            .is_empty());
        // A name that left the membership takes its addresses with it.
        assert!(a.set_member_hosts(["10.0.0.1"]).is_empty());
        assert!(!a.is_member(ip("10.0.0.2")) && !a.is_member(ip("::1")));
        a.add_resolved("node2.example".into(), vec![ip("10.0.0.2")]);
        assert!(
            !a.is_member(ip("10.0.0.2")),
            "a late answer for a former member"
        );
    }

    #[tokio::test]
    async fn names_are_resolved_in_the_background() {
        let a = std::sync::Arc::new(HandshakeAdmission::new(8, 1, 2));
        let names = a.set_member_hosts(["localhost"]);
        resolve_member_names(std::sync::Arc::downgrade(&a), names).await;
        assert!(a.is_member(ip("127.0.0.1")) || a.is_member(ip("::1")));
    }

    #[test]
    fn a_place_is_given_back_when_dropped() {
        let a = HandshakeAdmission::new(1, 1, 0);
        a.try_take(ip("10.0.0.1")).unwrap();
        let place = HandshakePlace::adopt(&a, ip("10.0.0.1"));
        assert_eq!(a.try_take(ip("10.0.0.2")), Err(NoPlace::Full));
        drop(place);
        assert_eq!(a.pending(), 0);
        assert_eq!(a.try_take(ip("10.0.0.2")), Ok(()));
    }
}

//! Connection limits of the node's HTTP servers (the management API and the key-value
//! API): a cap per server and per source address, and a reserve for the node's own host,
//! all budgeted against the process's file-descriptor limit.
//!
//! - **Server cap** (`management.max-connections`, `kv.http-max-connections`): connections
//!   served at once. A connection over it is accepted and closed at once (503 over plain
//!   HTTP), so the listen queue does not fill and the refusal is counted.
//! - **Source cap** (`…max-connections-per-source`): connections from one source at once.
//!   A source is an IPv4 address or an IPv6 /64 (one host's usual allocation, so a client
//!   cannot step around the cap by cycling through its own prefix).
//! - **Local reserve**: [`LOCAL_RESERVE`] connections from 127.0.0.1 or ::1 are admitted
//!   beyond both caps, so an operator on the node's host — `concord leave` in a preStop
//!   hook, `concord members` over SSH — is served while remote clients hold every place.
//! - **Descriptor budget**: each server's cap is lowered so that both servers' caps with
//!   their reserves, remoting's inbound cap (at most half the soft limit) and a quarter of
//!   the soft limit for everything else (outbound lanes, storage, listeners, DNS) fit in
//!   the soft limit ([`descriptor_share`]). A flood of HTTP connections then cannot take
//!   the descriptors remoting and the node's own files need (the report: 4,296 connections
//!   made remoting's accepts fail with "Too many open files").

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{debug, warn};

use crate::remote::log_limit::LogLimiter;

/// Connections from the node's own host (127.0.0.1, ::1) admitted beyond both caps.
pub const LOCAL_RESERVE: usize = 2;

/// One HTTP server's connection limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections served at once (beyond them, only the local reserve).
    pub max_connections: usize,
    /// Connections from one source (IPv4 address, IPv6 /64) at once.
    pub max_connections_per_source: usize,
    /// Time for the TLS handshake, and for each request's head, counted from accept or
    /// from the end of the previous response (hyper's `header_read_timeout`).
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves in either direction for this long is closed.
    pub idle_timeout: Duration,
}

impl HttpLimits {
    /// `[management]`'s limits.
    pub fn for_management(c: &crate::config::ManagementConfig) -> Self {
        HttpLimits {
            max_connections: c.max_connections,
            max_connections_per_source: c.max_connections_per_source,
            header_read_timeout: c.header_read_timeout,
            idle_timeout: c.idle_timeout,
        }
    }

    /// These limits with the server cap lowered to fit `share` descriptors (the cap and
    /// the local reserve), at least 1, and the source cap at most the server cap.
    pub fn within(mut self, share: usize) -> Self {
        let fits = share.saturating_sub(LOCAL_RESERVE).max(1);
        self.max_connections = self.max_connections.clamp(1, fits);
        self.max_connections_per_source = self
            .max_connections_per_source
            .clamp(1, self.max_connections);
        self
    }
}

impl HttpLimits {
    /// These limits within this process's share of descriptors for one HTTP server, given
    /// remoting's inbound cap in force (see [`descriptor_share`]).
    pub fn fitted(self, remoting_cap: usize) -> Self {
        self.within(descriptor_share(descriptor_limit(), remoting_cap))
    }
}

/// The descriptors one HTTP server may hold (its cap and its local reserve), for a
/// process whose soft `RLIMIT_NOFILE` is `soft_limit` and whose remoting admits at most
/// `remoting_cap` inbound connections: a quarter of the limit is kept for everything else
/// the node opens, and the rest after remoting is split between the two HTTP servers
/// (management and key-value; both are budgeted whether or not the second runs).
pub fn descriptor_share(soft_limit: u64, remoting_cap: usize) -> usize {
    let soft = usize::try_from(soft_limit).unwrap_or(usize::MAX);
    soft.saturating_sub(remoting_cap).saturating_sub(soft / 4) / 2
}

/// The process's soft limit of file descriptors; `u64::MAX` if it cannot be read.
pub fn descriptor_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(u64::MAX, |(soft, _)| soft)
}

/// Raises the process's soft limit of file descriptors to its hard limit (as the JVM and
/// Go's runtime do at start), so the connection caps budgeted against it are as large as
/// the operator allowed. Returns the soft limit before and after. `concord node` calls it
/// before starting the node; a program embedding a node decides for itself.
///
/// # Errors
/// The limit cannot be read or set.
pub fn raise_descriptor_limit() -> Result<(u64, u64), nix::Error> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok((soft, getrlimit(Resource::RLIMIT_NOFILE)?.0))
}

/// What a per-source cap counts: an IPv4 address, or an IPv6 address's /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    V4(Ipv4Addr),
    V6Prefix(u64),
}

impl Source {
    fn of(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            IpAddr::V4(a) => Source::V4(a),
            IpAddr::V6(a) => Source::V6Prefix((u128::from(a) >> 64) as u64),
        }
    }
}

/// True for the node's own host as local clients reach it by default: 127.0.0.1 or ::1.
fn is_own_host(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(a) => a == Ipv4Addr::LOCALHOST,
        IpAddr::V6(a) => a == Ipv6Addr::LOCALHOST,
    }
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server's cap is reached.
    ServerCap,
    /// The source's cap is reached.
    SourceCap,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::ServerCap => "server-cap",
            Refusal::SourceCap => "source-cap",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    /// Connections admitted within the caps.
    open: usize,
    /// Connections admitted from the local reserve.
    reserve: usize,
    per_source: HashMap<Source, usize>,
}

/// The counts behind one server's limits, and its metrics and rate-limited log lines.
#[derive(Debug)]
pub(crate) struct ConnectionGate {
    limits: HttpLimits,
    /// `management` or `kv` (the `server` label).
    server: &'static str,
    /// This node's address (the `node` label).
    node: String,
    counts: Mutex<Counts>,
    log: LogLimiter,
}

/// A connection's place; released when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    gate: Arc<ConnectionGate>,
    /// None: a place of the local reserve.
    source: Option<Source>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let open = {
            let mut c = self.gate.lock();
            match self.source {
                None => c.reserve = c.reserve.saturating_sub(1),
                Some(s) => {
                    c.open = c.open.saturating_sub(1);
                    if let Some(n) = c.per_source.get_mut(&s) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            c.per_source.remove(&s);
                        }
                    }
                }
            }
            c.open + c.reserve
        };
        self.gate.record_open(open);
    }
}

impl ConnectionGate {
    /// A gate enforcing `limits` for the server named `server` of node `node`.
    pub(crate) fn new(limits: HttpLimits, server: &'static str, node: String) -> Arc<Self> {
        let _ = crate::metrics::handle();
        metrics::gauge!("concord_http_max_connections", "node" => node.clone(), "server" => server)
            .set(limits.max_connections as f64);
        Arc::new(ConnectionGate {
            limits,
            server,
            node,
            counts: Mutex::new(Counts::default()),
            log: LogLimiter::new(Duration::from_secs(10)),
        })
    }

    /// The limits in force (after the descriptor budget).
    pub(crate) fn limits(&self) -> &HttpLimits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a connection from `peer`, or why there is none (counted and logged,
    /// rate-limited).
    pub(crate) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Place, Refusal> {
        let source = Source::of(peer.ip());
        let (admitted, open) = {
            let mut c = self.lock();
            let from_source = c.per_source.get(&source).copied().unwrap_or(0);
            let refusal = if c.open >= self.limits.max_connections {
                Some(Refusal::ServerCap)
            } else if from_source >= self.limits.max_connections_per_source {
                Some(Refusal::SourceCap)
            } else {
                None
            };
            let admitted = match refusal {
                None => {
                    c.open += 1;
                    *c.per_source.entry(source).or_insert(0) += 1;
                    Ok(Some(source))
                }
                Some(_) if is_own_host(peer.ip()) && c.reserve < LOCAL_RESERVE => {
                    c.reserve += 1;
                    Ok(None)
                }
                Some(r) => Err(r),
            };
            (admitted, c.open + c.reserve)
        };
        match admitted {
            Ok(source) => {
                self.record_open(open);
                Ok(Place {
                    gate: self.clone(),
                    source,
                })
            }
            Err(r) => {
                metrics::counter!("concord_http_connections_refused_total", "node" => self.node.clone(), "server" => self.server, "reason" => r.label())
                    .increment(1);
                if let Some(suppressed) = self.log.allow(r.label()) {
                    let (cap, key) = match r {
                        Refusal::ServerCap => (self.limits.max_connections, "max-connections"),
                        Refusal::SourceCap => (
                            self.limits.max_connections_per_source,
                            "max-connections-per-source",
                        ),
                    };
                    warn!(server = self.server, %peer, cap, suppressed, "HTTP connection refused: at {key}");
                }
                Err(r)
            }
        }
    }

    fn record_open(&self, open: usize) {
        metrics::gauge!("concord_http_connections", "node" => self.node.clone(), "server" => self.server)
            .set(open as f64);
    }

    /// Counts a connection closed by a timeout (`kind`: `header`, `idle`, `tls-handshake`).
    pub(crate) fn timed_out(&self, kind: &'static str, peer: SocketAddr) {
        metrics::counter!("concord_http_timeouts_total", "node" => self.node.clone(), "server" => self.server, "kind" => kind)
            .increment(1);
        debug!(server = self.server, %peer, kind, "HTTP connection closed: timeout");
    }

    /// Counts a failed accept (e.g. out of descriptors) and logs it, rate-limited.
    pub(crate) fn accept_failed(&self, e: &std::io::Error, retry_in: Duration) {
        metrics::counter!("concord_http_accept_errors_total", "node" => self.node.clone(), "server" => self.server)
            .increment(1);
        if let Some(suppressed) = self.log.allow("accept") {
            warn!(server = self.server, error = %e, suppressed, ?retry_in, "accepting an HTTP connection failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max: usize, per_source: usize) -> Arc<ConnectionGate> {
        ConnectionGate::new(
            HttpLimits {
                max_connections: max,
                max_connections_per_source: per_source,
                header_read_timeout: Duration::from_secs(1),
                idle_timeout: Duration::from_secs(1),
            },
            "test",
            "test-node".into(),
        )
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40000)
    }

    #[test]
    fn caps_per_source_and_per_server_with_a_reserve_for_the_own_host() {
        let g = gate(4, 2);
        let a: Vec<Place> = (0..2).map(|_| g.admit(peer("10.0.0.1")).unwrap()).collect();
        assert_eq!(g.admit(peer("10.0.0.1")).unwrap_err(), Refusal::SourceCap);
        let b: Vec<Place> = (0..2).map(|_| g.admit(peer("10.0.0.2")).unwrap()).collect();
        assert_eq!(g.admit(peer("10.0.0.3")).unwrap_err(), Refusal::ServerCap);
        // The own host gets LOCAL_RESERVE more, and no other loopback address does.
        assert_eq!(g.admit(peer("127.0.0.2")).unwrap_err(), Refusal::ServerCap);
        let local: Vec<Place> = (0..LOCAL_RESERVE)
            .map(|_| g.admit(peer("127.0.0.1")).unwrap())
            .collect();
        assert!(g.admit(peer("::1")).is_err());
        // Places come back when connections close.
        drop(local);
        assert!(g.admit(peer("::ffff:127.0.0.1")).is_ok());
        drop(a);
        assert!(g.admit(peer("10.0.0.1")).is_ok());
        drop(b);
        assert_eq!(
            g.lock().per_source.len(),
            0,
            "no entry kept for closed sources"
        );
    }

    #[test]
    fn an_ipv6_source_is_its_64() {
        let g = gate(10, 1);
        let _p = g.admit(peer("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            g.admit(peer("2001:db8:1:2:ffff::9")).unwrap_err(),
            Refusal::SourceCap
        );
        assert!(g.admit(peer("2001:db8:1:3::1")).is_ok());
    }

    #[test]
    fn the_caps_fit_the_descriptor_budget() {
        // 1,024 descriptors: remoting 512, a quarter kept, 128 for each HTTP server.
        assert_eq!(descriptor_share(1024, 512), 128);
        assert_eq!(descriptor_share(1_048_576, 4096), 391_168);
        assert_eq!(descriptor_share(64, 512), 0);
        assert!(
            descriptor_share(u64::MAX, 4096) > 1 << 40,
            "an unlimited process"
        );
        let l = HttpLimits {
            max_connections: 256,
            max_connections_per_source: 32,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        };
        let fitted = l.clone().within(128);
        assert_eq!(fitted.max_connections, 128 - LOCAL_RESERVE);
        assert_eq!(fitted.max_connections_per_source, 32);
        assert_eq!(l.clone().within(1_000_000), l);
        let tiny = l.within(0);
        assert_eq!(
            (tiny.max_connections, tiny.max_connections_per_source),
            (1, 1)
        );
        // Both servers with their reserves, remoting and the quarter fit the limit.
        let soft = 1024u64;
        let share = descriptor_share(soft, 512);
        assert!(2 * share + 512 + (soft as usize) / 4 <= soft as usize);
    }
}

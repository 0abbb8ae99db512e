//! Transport counters: per lane, per protocol, and for what is refused or dropped. Read
//! when `/metrics` is scraped (`metrics::record_transport`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use concord_core::{Lane, ProtocolId};

/// Counters of one lane (all peers).
#[derive(Debug, Default)]
pub struct LaneStats {
    /// Frames written.
    pub frames_out: AtomicU64,
    /// Bytes written (frames with their length prefix).
    pub bytes_out: AtomicU64,
    /// Frames read.
    pub frames_in: AtomicU64,
    /// Bytes read (frames with their length prefix).
    pub bytes_in: AtomicU64,
    /// Outbound messages dropped: queue full, peer unreachable, wrong incarnation, too large.
    pub dropped_outbound: AtomicU64,
    /// Writes (system calls) that carried the frames out; frames_out / writes is the
    /// batching factor.
    pub writes: AtomicU64,
}

/// Counters of one registered protocol. The sending and the receiving counters are
/// updated by different threads for every message: they live on separate cache lines.
#[derive(Debug, Default)]
pub struct ProtocolStats {
    /// Messages handed to the transport.
    pub messages_out: AtomicU64,
    /// Payload bytes handed to the transport.
    pub bytes_out: AtomicU64,
    /// Counters of the inbound side.
    pub inbound: InboundProtocolStats,
}

/// The inbound counters of a protocol (own cache line, see [`ProtocolStats`]).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct InboundProtocolStats {
    /// Messages delivered to the protocol's driver.
    pub messages_in: AtomicU64,
    /// Payload bytes delivered.
    pub bytes_in: AtomicU64,
    /// Messages of a type (manifest) this build does not know: dropped, connection kept.
    pub unknown_messages: AtomicU64,
}

/// All transport counters.
#[derive(Debug, Default)]
pub struct TransportStats {
    lanes: [LaneStats; 3],
    protocols: BTreeMap<ProtocolId, ProtocolStats>,
    /// Connections closed because of a malformed or oversized frame or envelope.
    pub malformed_frames: AtomicU64,
    /// Handshakes refused (either direction).
    pub handshakes_refused: AtomicU64,
    /// Envelopes of a protocol this node does not run: dropped, connection kept.
    pub unknown_protocol: AtomicU64,
    /// Envelopes for another incarnation of this address: dropped.
    pub wrong_incarnation: AtomicU64,
    /// Inbound connections whose peer failed to authenticate: TLS handshake, certificate
    /// name (`verify-peer-hostname`), or the cluster secret.
    pub authentication_failures: AtomicU64,
    /// Inbound handshakes not finished within `handshake-timeout`.
    pub handshake_timeouts: AtomicU64,
    /// Inbound connections closed at once: at `max-inbound-connections`, too many in their
    /// handshake, or too many from one peer.
    pub connections_refused: AtomicU64,
    /// Inbound connections closed by `read-timeout` (an unfinished frame) or as idle.
    pub read_timeouts: AtomicU64,
    /// Inbound connections closed because `max-inbound-buffered-bytes` was spent.
    pub buffer_limit_hits: AtomicU64,
    /// Gossip refused because it inflates beyond `maximum-decompressed-gossip-size`.
    pub decompression_limit_hits: AtomicU64,
    /// Failed accepts (e.g. out of file descriptors), each followed by a back-off.
    pub accept_errors: AtomicU64,
    /// Outbound connections whose peer failed to authenticate (TLS, cluster secret).
    pub outbound_authentication_failures: AtomicU64,
}

impl TransportStats {
    /// Counters for the given protocols (the registry's).
    pub(crate) fn new(protocols: impl IntoIterator<Item = ProtocolId>) -> Self {
        TransportStats {
            protocols: protocols
                .into_iter()
                .map(|p| (p, ProtocolStats::default()))
                .collect(),
            ..TransportStats::default()
        }
    }

    /// Counters of `lane`.
    pub fn lane(&self, lane: Lane) -> &LaneStats {
        &self.lanes[lane.index()]
    }

    /// Counters of a registered protocol.
    pub fn protocol(&self, p: ProtocolId) -> Option<&ProtocolStats> {
        self.protocols.get(&p)
    }

    /// Every registered protocol's counters.
    pub fn protocols(&self) -> impl Iterator<Item = (ProtocolId, &ProtocolStats)> {
        self.protocols.iter().map(|(k, v)| (*k, v))
    }

    pub(crate) fn dropped(&self, lane: Lane, n: u64) {
        self.lane(lane)
            .dropped_outbound
            .fetch_add(n, Ordering::Relaxed);
    }
}

/// Adds 1 to a counter.
pub(crate) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

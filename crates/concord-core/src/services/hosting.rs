//! The node-local side of partitioned services: what this node does with each path it
//! hosts or hands off ([`Hosting`]), the settings, events and counters of
//! [`super::ServicesMachine`].

use std::collections::{BTreeMap, VecDeque};

use super::PartitionPath;
use crate::address::UniqueAddress;

/// Settings of [`super::ServicesMachine`] (config section `[services]`).
#[derive(Clone, Debug, PartialEq)]
pub struct ServicesSettings {
    /// Gossip, report and retry interval, ms (default 1000).
    pub gossip_interval_ms: u64,
    /// How long held messages wait for their sender's [`Drained`] marker, and a handed-off
    /// path's forwarding record lives, ms (default 10,000). Held messages released by the
    /// timeout (the previous host crashed) may overtake messages lost with it.
    ///
    /// [`Drained`]: super::ServicesMessage::Drained
    pub handoff_timeout_ms: u64,
    /// Messages this node buffers at most, all paths together (during handoffs, before a
    /// path is placed, held for order); beyond it they are dropped and counted (default
    /// 10,000).
    pub buffer_size: usize,
    /// Services this node registers at most, and paths a received state may hold (default
    /// 1,000).
    pub max_services: usize,
    /// A path's instances are "busy" while their mean mailbox depth exceeds this (default
    /// 100 messages): the scaling wish rises by one after `scale_sustained_rounds`.
    pub scale_up_depth: u32,
    /// Gossip intervals a path must stay busy (or idle: nothing waiting) before its
    /// scaling wish moves by one (default 3).
    pub scale_sustained_rounds: u32,
    /// Load-aware placement: move an instance off a node whose load exceeds the mean by
    /// more than this (the load figure's unit; cluster metrics' capacity use, 0–1); `None`:
    /// off (default).
    pub load_threshold: Option<f64>,
    /// Largest service message, bytes (default 200 KiB, under the transport's ordinary
    /// frame limit: a larger one would take the large-message lane and could overtake).
    pub max_message_bytes: usize,
    /// How long the leader waits, after it first sees a node that hosts an instance (or is
    /// in a pending change) Down or removed, before it writes any change, ms (default 0;
    /// the runtime uses the split brain resolver's `stable-after`, as the singleton does).
    /// It is the time a downed node cut off or paused has to learn it is Down and stop its
    /// instances: with it longer than failure detection on the downed side plus its pause,
    /// a single-instance path never runs twice (Akka's `down-removal-margin`).
    pub removal_margin_ms: u64,
}

impl Default for ServicesSettings {
    fn default() -> Self {
        ServicesSettings {
            gossip_interval_ms: 1000,
            handoff_timeout_ms: 10_000,
            buffer_size: 10_000,
            max_services: 1000,
            scale_up_depth: 100,
            scale_sustained_rounds: 3,
            load_threshold: None,
            removal_margin_ms: 0,
            max_message_bytes: 200 * 1024,
        }
    }
}

/// What the machine tells its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServicesEvent {
    /// Create the local instance of `path` (the service's factory).
    StartInstance {
        /// The partition.
        path: PartitionPath,
    },
    /// Stop the local instance of `path` once it has handled what it holds; then call
    /// [`super::ServicesMachine::instance_stopped`].
    StopInstance {
        /// The partition.
        path: PartitionPath,
    },
    /// Hand `payload` to the local instance of `path`.
    Deliver {
        /// The partition.
        path: PartitionPath,
        /// The node that sent it.
        sender: UniqueAddress,
        /// The message.
        payload: Vec<u8>,
    },
    /// The answer to this node's ask `id`.
    Reply {
        /// The correlation id.
        id: u64,
        /// The encoded answer, or why there is none.
        result: Result<Vec<u8>, String>,
    },
    /// A newer state was written or learnt.
    StateChanged {
        /// Its version.
        version: u64,
    },
}

/// A message (or an order marker) kept while a path's instance stops or starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Buffered {
    /// A service message.
    Message {
        sender: UniqueAddress,
        payload: Vec<u8>,
    },
    /// A sender's flush marker, passed on to `next` after the messages before it.
    Drained {
        sender: UniqueAddress,
        next: UniqueAddress,
    },
}

/// What this node does with one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Hosting {
    /// The instance runs.
    Running,
    /// Handoff step 2: `Prepare` sent to `to`; the instance still runs.
    Preparing { to: UniqueAddress },
    /// The instance is stopping; arrivals are kept. `to`: the new host, if handing off.
    Stopping {
        to: Option<UniqueAddress>,
        buffer: VecDeque<Buffered>,
    },
    /// Handed off to `to` at `since_ms`: late messages are forwarded there.
    Moved { to: UniqueAddress, since_ms: u64 },
    /// This node is the new host: messages are kept until the instance starts
    /// (`HandOver`, or at once when `from` is `None`). `version`: the state version the
    /// change was announced in.
    Arriving {
        from: Option<UniqueAddress>,
        version: u64,
        since_ms: u64,
        buffer: VecDeque<Buffered>,
    },
}

impl Hosting {
    /// The name shown by the management API.
    pub fn as_str(&self) -> &'static str {
        match self {
            Hosting::Running => "running",
            Hosting::Preparing { .. } => "preparing",
            Hosting::Stopping { .. } => "stopping",
            Hosting::Moved { .. } => "moved",
            Hosting::Arriving { .. } => "arriving",
        }
    }

    pub(super) fn buffered(&self) -> usize {
        match self {
            Hosting::Stopping { buffer, .. } | Hosting::Arriving { buffer, .. } => buffer.len(),
            _ => 0,
        }
    }
}

/// Why a service message was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServicesDrop {
    /// No instance of the path exists (nothing placed, and the wait ran out).
    NoInstance,
    /// The node's buffer (`buffer-size`) is full.
    BufferFull,
    /// From a node that is not a member.
    FromStranger,
    /// For a path this node has not registered.
    Unregistered,
    /// Passed on too often.
    TooManyHops,
    /// A state larger than `max-services` allows.
    StateTooLarge,
    /// A message larger than `max-message-bytes`.
    TooLarge,
    /// An order marker or handoff message that does not fit this node's state (a path not
    /// registered here, a next host that is not a member, a stale `Prepare`).
    Stale,
}

impl ServicesDrop {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ServicesDrop::NoInstance => "no-instance",
            ServicesDrop::BufferFull => "buffer-full",
            ServicesDrop::FromStranger => "from-stranger",
            ServicesDrop::Unregistered => "unregistered",
            ServicesDrop::TooManyHops => "too-many-hops",
            ServicesDrop::StateTooLarge => "state-too-large",
            ServicesDrop::TooLarge => "too-large",
            ServicesDrop::Stale => "stale",
        }
    }
}

/// Counters (for metrics and tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServicesStats {
    /// Service messages sent to other nodes.
    pub sent: u64,
    /// Service messages handed to local instances.
    pub delivered: u64,
    /// Messages passed on by this node (it no longer hosts the path).
    pub forwarded: u64,
    /// Held messages released by the timeout instead of their marker.
    pub released_by_timeout: u64,
    /// Handoffs this node completed as the previous host.
    pub handoffs: u64,
    /// Drops, by reason.
    pub dropped: BTreeMap<ServicesDrop, u64>,
}

/// Why [`super::ServicesMachine::register`] refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// `max-services` reached.
    #[error("this node registers {0} services, the most `services.max-services` allows")]
    TooMany(usize),
    /// The path is registered already.
    #[error("service `{0}` is registered already")]
    Duplicate(PartitionPath),
}

/// What became of a message given to [`super::ServicesMachine::send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Sent to (or delivered at) this many instances.
    Sent(usize),
    /// Kept until the path is placed (at most `handoff-timeout`).
    Buffered,
    /// Dropped (counted).
    Dropped(ServicesDrop),
}

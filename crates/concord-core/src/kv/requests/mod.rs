//! The state of the requests a node coordinates ([`Requests`]): puts, gets and deletes in
//! progress with their targets' answers, their deadlines, forwarded writes, and tombstones
//! waiting to be reaped. `coordinator/` drives it.

mod outcome;
mod read_request;
mod write_request;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::address::UniqueAddress;
use crate::ddata::VersionVector;
use crate::kv::limits;

pub(crate) use outcome::{quorum_failure, Client, Outcome};
pub(crate) use read_request::{merge_replies, ReadRequest, ReadState, ReadTarget, Then};
pub(crate) use write_request::{TargetState, WriteRequest, WriteTarget};

/// The requests a node coordinates, their deadlines, and tombstones waiting to be reaped.
#[derive(Default)]
pub(crate) struct Requests {
    pub(crate) map: BTreeMap<u64, Request>,
    pub(crate) deadlines: BTreeSet<(u64, u64)>,
    pub(crate) next: u64,
    pub(crate) reaps: BTreeMap<(u64, u64), Reap>,
    pub(crate) reap_seq: u64,
    /// Forwarded writes coordinated here lately, (sender, its request), oldest first with
    /// the time they may be forgotten: a duplicate of one must not become a second write.
    pub(crate) forwards: VecDeque<(u64, UniqueAddress, u64)>,
    pub(crate) forwards_seen: BTreeSet<(UniqueAddress, u64)>,
}

impl Requests {
    /// Requests in progress, count.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn insert(&mut self, deadline: u64, r: Request) -> u64 {
        self.next = self.next.wrapping_add(1);
        let id = self.next;
        self.deadlines.insert((deadline, id));
        self.map.insert(id, r);
        id
    }

    /// Records a forwarded write from `from`; false if it was seen already (a duplicate).
    pub(crate) fn first_forward(
        &mut self,
        now_ms: u64,
        keep_ms: u64,
        from: &UniqueAddress,
        request: u64,
    ) -> bool {
        while let Some((until, f, r)) = self.forwards.front() {
            if *until > now_ms && self.forwards.len() < limits::MAX_REMEMBERED_FORWARDS {
                break;
            }
            self.forwards_seen.remove(&(f.clone(), *r));
            self.forwards.pop_front();
        }
        if !self.forwards_seen.insert((from.clone(), request)) {
            return false;
        }
        self.forwards
            .push_back((now_ms.saturating_add(keep_ms), from.clone(), request));
        true
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<Request> {
        let r = self.map.remove(&id)?;
        self.deadlines.remove(&(r.deadline(), id));
        Some(r)
    }
}

pub(crate) struct Reap {
    pub(crate) key: String,
    pub(crate) clock: VersionVector,
    pub(crate) replicas: Vec<UniqueAddress>,
}

pub(crate) enum Request {
    Write(WriteRequest),
    Read(ReadRequest),
    /// A write this node forwarded to a replica of its key.
    Forwarded {
        client: u64,
        to: UniqueAddress,
        w: u8,
        deadline: u64,
    },
}

impl Request {
    pub(crate) fn deadline(&self) -> u64 {
        match self {
            Request::Write(w) => w.deadline,
            Request::Read(r) => r.deadline,
            Request::Forwarded { deadline, .. } => *deadline,
        }
    }
}

//! How a target's answer counts towards a request's quorum ([`Outcome`]), who a write
//! answers ([`Client`]), and the [`QuorumFailure`] a request ends with.

use crate::address::UniqueAddress;
use crate::kv::api::QuorumFailure;

/// Who a write answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Client {
    /// This node's runtime (its request id).
    Local(u64),
    /// The node that forwarded the write (its request id there).
    Remote(UniqueAddress, u64),
}

/// How one target's answer counts towards a request's quorum.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// It answered, and the answer counts.
    Counted,
    /// It answered without counting (a fallback without `sloppy-quorum`; a replica still
    /// synchronising that had nothing).
    Uncounted,
    /// It refused, for this reason.
    Failed(String),
    /// No answer yet.
    Waiting,
}

/// The failure of a request whose targets ended with these outcomes.
pub(crate) fn quorum_failure<'a>(
    quorum: &'static str,
    needed: u8,
    targets: impl Iterator<Item = (&'a UniqueAddress, Outcome)>,
) -> QuorumFailure {
    let mut f = QuorumFailure {
        quorum,
        needed,
        counted: Vec::new(),
        uncounted: Vec::new(),
        failed: Vec::new(),
        unanswered: Vec::new(),
    };
    for (node, outcome) in targets {
        let a = node.address.clone();
        match outcome {
            Outcome::Counted => f.counted.push(a),
            Outcome::Uncounted => f.uncounted.push(a),
            Outcome::Failed(why) => f.failed.push((a, why)),
            Outcome::Waiting => f.unanswered.push(a),
        }
    }
    f
}

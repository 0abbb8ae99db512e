//! [`UnableReason`]: why an acceptor answered [`super::JournalMessage::Unable`] — counted
//! by the acceptor (`concord_journal_unable_answers_total{reason}`) and named in the
//! proposer's error when a round fails for want of a majority.

/// Why an acceptor could not answer a request. On the wire as [`UnableReason::code`]; an
/// earlier version sends none, and a code this version does not know reads as
/// [`UnableReason::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum UnableReason {
    /// Not given (a node of an earlier version) or not known to this version.
    #[default]
    Unknown,
    /// The acceptor is not one of the log's replicas in its view of the ring.
    NotAReplica,
    /// The acceptor is one of the log's replicas but its copy of the log's ring segment
    /// is still being synchronised after a ring change (it waits for previous replicas'
    /// handoffs; gauge `concord_journal_pending_segments`).
    Synchronising,
    /// The acceptor's storage failed to read or write.
    Storage,
    /// The log's uncertain tail (entries after its committed prefix) is longer than
    /// [`super::acceptor::MAX_TAIL_ENTRIES`].
    TailTooLong,
    /// The request is malformed: a log or entity type name too long or holding a NUL, or
    /// a write that is not valid.
    BadRequest,
}

impl UnableReason {
    /// Every reason, in code order.
    pub const ALL: [UnableReason; 6] = [
        UnableReason::Unknown,
        UnableReason::NotAReplica,
        UnableReason::Synchronising,
        UnableReason::Storage,
        UnableReason::TailTooLong,
        UnableReason::BadRequest,
    ];

    /// The wire code (0: unknown).
    pub fn code(self) -> u32 {
        match self {
            UnableReason::Unknown => 0,
            UnableReason::NotAReplica => 1,
            UnableReason::Synchronising => 2,
            UnableReason::Storage => 3,
            UnableReason::TailTooLong => 4,
            UnableReason::BadRequest => 5,
        }
    }

    /// The reason of a wire code; [`UnableReason::Unknown`] for 0 and for codes this
    /// version does not know.
    pub fn from_code(code: u32) -> UnableReason {
        UnableReason::ALL
            .into_iter()
            .find(|r| r.code() == code)
            .unwrap_or(UnableReason::Unknown)
    }

    /// A short label (the metric's `reason`).
    pub fn label(self) -> &'static str {
        match self {
            UnableReason::Unknown => "unknown",
            UnableReason::NotAReplica => "not_a_replica",
            UnableReason::Synchronising => "synchronising",
            UnableReason::Storage => "storage",
            UnableReason::TailTooLong => "tail_too_long",
            UnableReason::BadRequest => "bad_request",
        }
    }

    /// The reason in words, for errors and logs.
    pub fn describe(self) -> &'static str {
        match self {
            UnableReason::Unknown => "gave no reason",
            UnableReason::NotAReplica => "is not one of the log's replicas in its view",
            UnableReason::Synchronising => {
                "is still synchronising the log's segment after a ring change"
            }
            UnableReason::Storage => "could not read or write its storage",
            UnableReason::TailTooLong => "holds too long an uncertain tail of the log",
            UnableReason::BadRequest => "found the request malformed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_read_as_unknown() {
        for r in UnableReason::ALL {
            assert_eq!(UnableReason::from_code(r.code()), r);
        }
        let codes: std::collections::BTreeSet<u32> =
            UnableReason::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), UnableReason::ALL.len());
        assert_eq!(UnableReason::from_code(6), UnableReason::Unknown);
        assert_eq!(UnableReason::from_code(u32::MAX), UnableReason::Unknown);
    }

    #[test]
    fn labels_are_distinct() {
        let labels: std::collections::BTreeSet<&str> =
            UnableReason::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), UnableReason::ALL.len());
    }
}

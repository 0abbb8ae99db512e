//! [`JournalStats`]: the replicated journal machine's counters (exported as the
//! `concord_journal_*` metrics, docs/PERSISTENCE.md).

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Writes chosen through this node.
    pub appends: u64,
    /// Recoveries (phase 1) completed.
    pub recoveries: u64,
    /// Refusals: another writer held the log.
    pub conflicts: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Commits that failed.
    pub storage_errors: u64,
    /// Messages refused as malformed.
    pub rejected: u64,
    /// Handoff pages merged.
    pub handoff_pages: u64,
    /// Handoff records sent.
    pub handoff_records_sent: u64,
    /// Handoff records left out: the new replica said it held them already
    /// ([`super::holding`]).
    pub handoff_records_skipped: u64,
    /// Handoff records sent of segments this node does not replicate (misplaced copies,
    /// [`super::handoff::Handoffs::send_misplaced`]; counted in `handoff_records_sent` too).
    pub handoff_misplaced_records_sent: u64,
    /// Holdings received that were malformed or beyond the bound kept (those segments are
    /// sent whole).
    pub holdings_ignored: u64,
    /// Learns sent again (not acknowledged in time).
    pub learn_resends: u64,
    /// Learns given up (too many waiting).
    pub learns_dropped: u64,
    /// Rounds held to be sent again: a majority of the log's replicas could not answer
    /// yet (new replicas waiting for their handoff, or replicas whose view of the ring
    /// differs from this node's), none refused.
    pub held: u64,
    /// Accepts among them (a ring change under way): sent again instead of failing the
    /// append.
    pub accepts_held: u64,
    /// Recovery rounds whose majority of promises lacked a write of the committed prefix
    /// (a replica set changing, a handoff half done): not answered, held.
    pub gaps: u64,
    /// Promises and accept answers not counted: the replier's view of the log's replicas
    /// differed from the proposer's (one of the two views lags a ring change).
    pub view_mismatches: u64,
    /// Won rounds answered before the turn's commit (their answers were all on disk).
    pub answered_before_commit: u64,
    /// Segments whose waits ended because the operator gave up replicas lost for good
    /// ([`super::give_up`]).
    pub segments_given_up: u64,
    /// `Unable` answers this node gave, per reason (indexed by
    /// [`super::UnableReason::code`]).
    pub unable_answers: [u64; super::UnableReason::ALL.len()],
}

impl JournalStats {
    /// Counts an `Unable` answer given for `reason`.
    pub fn count_unable(&mut self, reason: super::UnableReason) {
        if let Some(c) = self.unable_answers.get_mut(reason.code() as usize) {
            *c = c.saturating_add(1);
        }
    }
}

//! The replicated journal's metrics (`concord_journal_*`, label `node`).

use std::time::Duration;

use concord_core::kv::KvStorage;
use concord_core::persistence::journal::{
    JournalError, JournalMachine, JournalOutput, UnableReason,
};

/// A request finished.
pub(super) fn request(
    node: &str,
    op: &'static str,
    result: &Result<JournalOutput, JournalError>,
    took: Duration,
) {
    crate::metrics::ensure_recorder();
    let outcome = match result {
        Ok(_) => "ok",
        Err(JournalError::Conflict(_)) => "conflict",
        Err(JournalError::Unavailable(_)) => "unavailable",
        Err(JournalError::Rejected(_)) => "rejected",
    };
    let l = [
        ("node", node.to_string()),
        ("op", op.to_string()),
        ("outcome", outcome.to_string()),
    ];
    metrics::counter!("concord_journal_requests_total", &l).increment(1);
    metrics::histogram!("concord_journal_request_seconds", &l).record(took.as_secs_f64());
}

/// The node's `concord_journal_commit_seconds` summary: each turn's commit (its writes made
/// durable at once, fsync included), what every answer of the turn waited for — a slow disk
/// or a storage engine stall shows here first. Taken once per host, recorded per turn.
pub(super) fn commit_seconds(node: &str) -> metrics::Histogram {
    crate::metrics::ensure_recorder();
    metrics::histogram!("concord_journal_commit_seconds", "node" => node.to_string())
}

/// Records a commit that took `took` in `h`; commits under 50 µs are not recorded (a turn
/// without writes has nothing to make durable, and would fill the summary with zeros).
pub(super) fn commit(h: &metrics::Histogram, took: Duration) {
    if took >= Duration::from_micros(50) {
        h.record(took.as_secs_f64());
    }
}

/// The machine's gauges and counters.
pub(super) fn record<S: KvStorage>(node: &str, m: &JournalMachine<S>) {
    crate::metrics::ensure_recorder();
    let l = [("node", node.to_string())];
    let s = m.stats();
    metrics::gauge!("concord_journal_in_flight", &l).set(m.in_flight() as f64);
    metrics::gauge!("concord_journal_pending_segments", &l).set(m.pending_segments() as f64);
    metrics::gauge!("concord_journal_outgoing_handoffs", &l).set(m.outgoing_handoffs() as f64);
    metrics::gauge!("concord_journal_incomplete_segments", &l).set(m.incomplete_segments() as f64);
    metrics::counter!("concord_journal_appends_total", &l).absolute(s.appends);
    metrics::counter!("concord_journal_recoveries_total", &l).absolute(s.recoveries);
    metrics::counter!("concord_journal_conflicts_total", &l).absolute(s.conflicts);
    metrics::counter!("concord_journal_timeouts_total", &l).absolute(s.timeouts);
    metrics::counter!("concord_journal_storage_errors_total", &l).absolute(s.storage_errors);
    metrics::counter!("concord_journal_rejected_total", &l).absolute(s.rejected);
    metrics::counter!("concord_journal_handoff_pages_total", &l).absolute(s.handoff_pages);
    metrics::counter!("concord_journal_handoff_records_sent_total", &l)
        .absolute(s.handoff_records_sent);
    metrics::counter!("concord_journal_handoff_records_skipped_total", &l)
        .absolute(s.handoff_records_skipped);
    metrics::counter!("concord_journal_handoff_misplaced_records_sent_total", &l)
        .absolute(s.handoff_misplaced_records_sent);
    metrics::counter!("concord_journal_holdings_ignored_total", &l).absolute(s.holdings_ignored);
    metrics::gauge!("concord_journal_pending_learns", &l).set(m.pending_learns() as f64);
    metrics::gauge!("concord_journal_holdings_kept", &l).set(m.holdings_kept() as f64);
    metrics::counter!("concord_journal_learn_resends_total", &l).absolute(s.learn_resends);
    metrics::counter!("concord_journal_learns_dropped_total", &l).absolute(s.learns_dropped);
    metrics::counter!("concord_journal_held_total", &l).absolute(s.held);
    metrics::counter!("concord_journal_accepts_held_total", &l).absolute(s.accepts_held);
    metrics::counter!("concord_journal_gaps_total", &l).absolute(s.gaps);
    metrics::counter!("concord_journal_view_mismatches_total", &l).absolute(s.view_mismatches);
    metrics::counter!("concord_journal_state_cache_hits_total", &l).absolute(m.state_cache_hits());
    metrics::counter!("concord_journal_entry_cache_hits_total", &l).absolute(m.entry_cache_hits());
    metrics::counter!("concord_journal_segments_given_up_total", &l).absolute(s.segments_given_up);
    for reason in UnableReason::ALL {
        let n = s.unable_answers[reason.code() as usize];
        let l = [
            ("node", node.to_string()),
            ("reason", reason.label().to_string()),
        ];
        metrics::counter!("concord_journal_unable_answers_total", &l).absolute(n);
    }
}

/// The bytes the node's share of the journal takes on disk.
pub(super) fn disk(node: &str, bytes: u64) {
    crate::metrics::ensure_recorder();
    metrics::gauge!("concord_journal_disk_bytes", "node" => node.to_string()).set(bytes as f64);
}

//! The events-by-type stream checks of the journal's network runs.

use std::collections::BTreeSet;

use super::{Known, Net, NODES};
use crate::persistence::journal::{stream, JournalOutput};
use rand::Rng;

/// A reader of the events-by-type stream, resuming after the last offset it read.
#[derive(Default)]
pub(super) struct Reader {
    pub(super) after: (u64, u64),
    pub(super) pending: Option<u64>,
    /// Every event read: (log, seq, payload).
    seen: Vec<(usize, u64, Vec<u8>)>,
}

impl Reader {
    pub(super) fn take(&mut self, page: Vec<stream::StreamEvent>, seed: u64) {
        for e in page {
            assert!(e.offset() > self.after, "seed {seed}: offsets rise");
            self.after = e.offset();
            let l: usize = e.persistence_id["counter|".len()..].parse().unwrap();
            self.seen.push((l, e.seq_nr, e.payload));
        }
    }
}

/// The events-by-type stream, followed during the faults and read to its end after they
/// healed: every event read is the one chosen at its sequence number, and every
/// acknowledged event was read (at least once). Returns how many were read during the
/// faults.
pub(super) fn check_stream(net: &mut Net, known: &Known, seed: u64, mut reader: Reader) -> usize {
    let live = reader.seen.len();
    let delay = net.machines[0].settings.stream_delay_ms;
    net.run_until(net.now + delay + 100);
    let node = net.rng.random_range(0..NODES as usize);
    let mut request = 1u64 << 40;
    loop {
        request += 1;
        let r = request;
        net.machines[node].events_by_type(net.now, r, "counter".into(), 0..=1023, reader.after, 7);
        let ev = net.answer(node, r, 200);
        let Ok(JournalOutput::Events(page)) = ev.result else {
            panic!("seed {seed}: the stream read failed: {:?}", ev.result)
        };
        if page.is_empty() {
            break;
        }
        reader.take(page, seed);
    }
    let mut seen = BTreeSet::new();
    for (l, seq, payload) in &reader.seen {
        assert_eq!(
            known.events.get(l).and_then(|k| k.get(seq)),
            Some(payload),
            "seed {seed}: the stream's event {seq} of log {l} is not the chosen event"
        );
        seen.insert((*l, *seq));
    }
    for (l, seqs) in &known.acked_seqs {
        for s in seqs {
            assert!(
                seen.contains(&(*l, *s)),
                "seed {seed}: acknowledged event {s} of log {l} is not in the stream"
            );
        }
    }
    live
}

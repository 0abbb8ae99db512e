//! What the journal simulation's writers were told — [`History`], the state of each
//! [`Writer`] — and [`collect`], which checks every answer the machines gave against it.

use super::*;

#[derive(Clone, Debug)]
pub(super) enum Writer {
    Idle,
    Recovering {
        acked_before: u64,
        snapshot_before: u64,
    },
    Ready {
        next: u64,
    },
    Appending {
        write: Entry,
    },
    Saving {
        next: u64,
        seq: u64,
    },
    /// A read of the whole log, which must hold every write acknowledged before it began.
    Reading {
        next: u64,
        acked_before: u64,
    },
    /// A snapshot load, which must return the newest saved before it began, or a newer one.
    Loading {
        next: u64,
        snapshot_before: u64,
    },
}

/// The replicas of log `l` in `j`'s view, as host:uid (the uid's last three digits).
fn replica_names(j: &Journal, l: usize) -> Vec<String> {
    j.machine
        .replicas(&log_name(l))
        .iter()
        .map(|r| format!("{}:{}", r.address.host, r.uid % 1000))
        .collect()
}

/// A snapshot's payload in this test: the log and its sequence number.
pub(super) fn snapshot_payload(l: usize, seq: u64) -> Vec<u8> {
    format!("{l}/{seq}").into_bytes()
}

#[derive(Default)]
pub(super) struct History {
    pub(super) next_request: u64,
    pub(super) tag: u64,
    /// (node, its uid, log) → the writer there.
    pub(super) writers: BTreeMap<(Address, u64, usize), Writer>,
    /// request → (node, uid, log).
    pub(super) requests: BTreeMap<u64, (Address, u64, usize)>,
    /// log → seq → event: every event acknowledged or read.
    pub(super) known: BTreeMap<usize, BTreeMap<u64, Vec<u8>>>,
    /// log → acknowledged seqs.
    pub(super) acked: BTreeMap<usize, BTreeSet<u64>>,
    /// log → the highest sequence number of a snapshot whose save was acknowledged.
    pub(super) snapshots: BTreeMap<usize, u64>,
    /// Events of each node already looked at: (uid, count).
    pub(super) consumed: BTreeMap<Address, (u64, usize)>,
    pub(super) recoveries: u64,
    pub(super) conflicts: u64,
}

impl History {
    pub(super) fn learn(
        &mut self,
        log: usize,
        entries: &[Entry],
        what: &str,
    ) -> Result<(), String> {
        let known = self.known.entry(log).or_default();
        for e in entries {
            for (k, ev) in e.events.iter().enumerate() {
                let seq = e.first_seq + k as u64;
                if let Some(old) = known.insert(seq, ev.clone()) {
                    if &old != ev {
                        return Err(format!(
                            "log {log} seq {seq}: two different events {:?} and {:?} ({what})",
                            String::from_utf8_lossy(&old),
                            String::from_utf8_lossy(ev)
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn acked_max(&self, log: usize) -> u64 {
        self.acked
            .get(&log)
            .and_then(|s| s.iter().next_back().copied())
            .unwrap_or(0)
    }
}

/// Reads the answers the machines gave since the last call and checks them.
pub(super) fn collect(sim: &Simulation, h: &mut History) -> Result<(), String> {
    for (a, node) in sim.running() {
        let uid = node.core().self_unique_address().uid;
        let Some(j) = sim.machine::<Journal>(a) else {
            continue;
        };
        let (seen_uid, seen) = h.consumed.get(a).copied().unwrap_or((uid, 0));
        let from = if seen_uid == uid { seen } else { 0 };
        let events: Vec<_> = j.events[from.min(j.events.len())..].to_vec();
        h.consumed.insert(a.clone(), (uid, j.events.len()));
        for e in events {
            let Some(key) = h.requests.remove(&e.request) else {
                continue;
            };
            let l = key.2;
            let Some(state) = h.writers.get(&key).cloned() else {
                continue;
            };
            match (state, e.result) {
                (
                    Writer::Recovering {
                        acked_before,
                        snapshot_before,
                    },
                    Ok(JournalOutput::Recovered {
                        page,
                        highest,
                        snapshot,
                    }),
                ) => {
                    h.recoveries += 1;
                    let taken = snapshot.as_ref().map_or(0, |s| s.seq_nr);
                    if let Some(s) = &snapshot {
                        if s.payload != snapshot_payload(l, s.seq_nr) || s.seq_nr > highest {
                            return Err(format!(
                                "log {l}: recovered snapshot {s:?} (highest {highest})"
                            ));
                        }
                    }
                    if taken < snapshot_before {
                        return Err(format!("log {l}: recovered from snapshot {taken}, {snapshot_before} was saved before"));
                    }
                    if highest < acked_before {
                        let reps = replica_names(j, l);
                        return Err(format!("log {l}: recovered to {highest}, {acked_before} was acknowledged before (at {} {}; replicas {reps:?})", a.host, uid % 1000));
                    }
                    h.learn(l, &page, "recovery")?;
                    let end = page.last().map_or(taken, Entry::last_seq);
                    if page.first().is_some_and(|e| e.first_seq != taken + 1) || end != highest {
                        let reps = replica_names(j, l);
                        return Err(format!("log {l}: a recovery page ends at {end} of {highest} (at {} {}; replicas {reps:?})", a.host, uid % 1000));
                    }
                    h.writers.insert(key, Writer::Ready { next: highest + 1 });
                }
                (Writer::Appending { write }, Ok(JournalOutput::Appended)) => {
                    h.learn(l, std::slice::from_ref(&write), "append")?;
                    h.acked
                        .entry(l)
                        .or_default()
                        .extend(write.first_seq..=write.last_seq());
                    h.writers.insert(
                        key,
                        Writer::Ready {
                            next: write.last_seq() + 1,
                        },
                    );
                }
                (Writer::Saving { next, seq }, Ok(JournalOutput::Done)) => {
                    let best = h.snapshots.entry(l).or_default();
                    *best = (*best).max(seq);
                    h.writers.insert(key, Writer::Ready { next });
                }
                (Writer::Reading { next, acked_before }, Ok(JournalOutput::Read(page))) => {
                    // Every slot up to `acked_before` was chosen before the read began.
                    let chosen: Vec<Entry> = page
                        .into_iter()
                        .filter(|e| e.first_seq <= acked_before)
                        .collect();
                    h.learn(l, &chosen, "read")?;
                    let seqs: BTreeSet<u64> = chosen
                        .iter()
                        .flat_map(|e| e.first_seq..=e.last_seq())
                        .collect();
                    if let Some(missing) = (1..=acked_before).find(|s| !seqs.contains(s)) {
                        return Err(format!(
                            "log {l}: a read lacks {missing}, {acked_before} was acknowledged before (at {} {})",
                            a.host,
                            uid % 1000
                        ));
                    }
                    h.writers.insert(key, Writer::Ready { next });
                }
                (
                    Writer::Loading {
                        next,
                        snapshot_before,
                    },
                    Ok(JournalOutput::Snapshot(s)),
                ) => {
                    let seq = s.as_ref().map_or(0, |s| s.seq_nr);
                    if seq < snapshot_before
                        || s.is_some_and(|s| s.payload != snapshot_payload(l, s.seq_nr))
                    {
                        return Err(format!(
                            "log {l}: loaded snapshot {seq}, {snapshot_before} was saved before"
                        ));
                    }
                    h.writers.insert(key, Writer::Ready { next });
                }
                (Writer::Reading { next, .. } | Writer::Loading { next, .. }, Err(_)) => {
                    // Unavailable (a majority could not answer in time): no harm done.
                    h.writers.insert(key, Writer::Ready { next });
                }
                (_, Err(_)) => {
                    h.conflicts += 1;
                    h.writers.remove(&key);
                }
                (state, result) => return Err(format!("{state:?} got {result:?}")),
            }
        }
    }
    Ok(())
}

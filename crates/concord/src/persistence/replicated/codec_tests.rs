use super::*;
use concord_core::persistence::journal::holding::{EntryRun, LogHolding, SegmentHolding, SlotRun};
use concord_core::persistence::journal::learn::LearnedLog;
use concord_core::persistence::journal::stream::StreamEvent;

fn need() -> Need {
    let a = |p: u16| Address::new("s", "h", p);
    Need {
        previous: [a(1), a(2), a(3)].into(),
        required: 2,
        delivered: [a(1)].into(),
        partial: [a(3)].into(),
    }
}

/// One of each journal message (the round-trip test's and the wire corpus's samples).
pub(crate) fn all_messages() -> Vec<JournalMessage> {
    let e = Entry {
        first_seq: 3,
        ballot: Ballot { round: 9, node: 2 },
        timestamp_ms: 4,
        events: vec![b"a".to_vec(), b"bc".to_vec()],
    };
    let snap = StoredSnapshot {
        seq_nr: 4,
        timestamp_ms: 1,
        payload: vec![7],
    };
    vec![
        JournalMessage::Prepare {
            request: 1,
            log: "ex|1".into(),
            ballot: e.ballot,
            from: 1,
            max_events: 9,
            snapshot: true,
        },
        JournalMessage::Promise {
            request: 1,
            committed: 2,
            page: vec![e.clone()],
            page_from: 3,
            covered_to: u64::MAX,
            tail: vec![e.clone()],
            snapshot: Some(snap.clone()),
            replicas: 77,
        },
        JournalMessage::Promise {
            request: 1,
            committed: 2,
            page: vec![],
            page_from: 0,
            covered_to: u64::MAX,
            tail: vec![],
            snapshot: None,
            replicas: 0,
        },
        JournalMessage::Accept {
            request: 2,
            log: "ex|1".into(),
            ballot: e.ballot,
            committed: 2,
            compact: true,
            writes: vec![e.clone()],
        },
        JournalMessage::Accepted {
            request: 2,
            replicas: 5,
        },
        JournalMessage::Nack {
            request: 2,
            promised: e.ballot,
        },
        JournalMessage::Read {
            request: 3,
            log: "ex|1".into(),
            from: 1,
            max_events: 5,
        },
        JournalMessage::ReadReply {
            request: 3,
            page: vec![e],
            covered_to: 7,
            replicas: 0xfeed,
        },
        JournalMessage::SaveSnapshot {
            request: 4,
            log: "ex|1".into(),
            snapshot: snap.clone(),
        },
        JournalMessage::LoadSnapshot {
            request: 5,
            log: "ex|1".into(),
        },
        JournalMessage::SnapshotReply {
            request: 5,
            snapshot: Some(snap),
            replicas: 0xbeef,
        },
        JournalMessage::SnapshotReply {
            request: 5,
            snapshot: None,
            replicas: 0,
        },
        JournalMessage::Delete {
            request: 6,
            log: "ex|1".into(),
            to: 3,
        },
        JournalMessage::Done {
            request: 6,
            replicas: 77,
        },
        JournalMessage::Unable {
            request: 7,
            reason: UnableReason::Synchronising,
        },
        JournalMessage::Handoff {
            segment: 3,
            page: 1,
            records: vec![(vec![1], vec![2])],
            last: true,
            standing: Standing::Incomplete,
            needs: vec![need()],
        },
        JournalMessage::HandoffAck {
            segment: 3,
            page: 1,
        },
        JournalMessage::HandoffEmpty {
            segments: vec![(1, Standing::Complete), (2, Standing::Incomplete)],
            needs: vec![(2, need()), (2, Need::default())],
        },
        JournalMessage::HandoffEmptyAck {
            segments: vec![1, 2],
        },
        JournalMessage::HandoffWanted {
            segments: vec![3],
            held: Vec::new(),
        },
        JournalMessage::HandoffWanted {
            segments: vec![3, 4],
            held: vec![SegmentHolding {
                segment: 4,
                logs: vec![LogHolding {
                    log: "ex|1".into(),
                    entries: vec![EntryRun {
                        first: 1,
                        count: 40,
                        ballot: Ballot { round: 9, node: 2 },
                    }],
                    marks: vec![SlotRun {
                        first: 1,
                        count: 39,
                    }],
                    snapshot_seq: 20,
                }],
            }],
        },
        JournalMessage::Learn {
            id: 8,
            logs: vec![LearnedLog {
                log: "ex|1".into(),
                at_ms: 12,
                writes: vec![(3, Ballot { round: 9, node: 2 })],
            }],
        },
        JournalMessage::LearnAck { id: 8 },
        JournalMessage::GiveUp {
            lost: vec![Address::new("s", "h", 1), Address::new("s", "h2", 2)],
        },
        JournalMessage::StreamRead {
            request: 9,
            entity_type: "x".into(),
            slice_from: 0,
            slice_to: 1023,
            after_at_ms: 5,
            after_ordering: 6,
            horizon_ms: 7,
            limit: 100,
        },
        JournalMessage::StreamReply {
            request: 9,
            segments: vec![0, 1023],
            events: vec![StreamEvent {
                at_ms: 5,
                ordering: 7,
                persistence_id: "x|1".into(),
                seq_nr: 3,
                timestamp_ms: 4,
                payload: b"p".to_vec(),
            }],
            full: true,
        },
    ]
}

#[test]
fn messages_round_trip_and_garbage_is_an_error() {
    for m in all_messages() {
        let (manifest, bytes) = JournalCodec.encode(&m);
        assert_eq!(JournalCodec.decode(manifest, &bytes).unwrap(), m);
    }
    assert!(JournalCodec
        .decode(
            manifest::HANDOFF_ACK,
            &wire::JournalHandoffAck {
                segment: 5000,
                page: 0
            }
            .encode_to_vec()
        )
        .is_err());
    assert!(JournalCodec.decode(99, &[]).is_err());
    // A standing per segment, each one known.
    for (segments, standings) in [(vec![1, 2], vec![1]), (vec![1], vec![7])] {
        let m = wire::JournalHandoffEmpty {
            segments,
            standings,
            needs: Vec::new(),
        };
        assert!(JournalCodec
            .decode(manifest::HANDOFF_EMPTY, &m.encode_to_vec())
            .is_err());
    }
    // Needs: well-formed addresses, at most MAX_NEEDS per segment and MAX_NEED_ADDRESSES per
    // set, never more required than previous replicas.
    let good = wire::JournalNeed {
        segment: 1,
        previous: vec!["concord://s@h:1".into(), "concord://s@h:2".into()],
        required: 2,
        ..Default::default()
    };
    let many = |k: usize| {
        (1..=k)
            .map(|p| format!("concord://s@h:{p}"))
            .collect::<Vec<_>>()
    };
    for bad in [
        wire::JournalNeed {
            previous: vec!["h:1".into()],
            ..good.clone()
        },
        wire::JournalNeed {
            required: 3,
            ..good.clone()
        },
        wire::JournalNeed {
            partial: many(MAX_NEED_ADDRESSES + 1),
            ..good.clone()
        },
        wire::JournalNeed {
            segment: 70_000,
            ..good.clone()
        },
    ] {
        let m = wire::JournalHandoffEmpty {
            segments: vec![1],
            standings: vec![0],
            needs: vec![bad],
        };
        assert!(JournalCodec
            .decode(manifest::HANDOFF_EMPTY, &m.encode_to_vec())
            .is_err());
    }
    let ok = wire::JournalHandoffEmpty {
        segments: vec![1],
        standings: vec![0],
        needs: vec![good.clone(); MAX_NEEDS],
    };
    assert!(JournalCodec
        .decode(manifest::HANDOFF_EMPTY, &ok.encode_to_vec())
        .is_ok());
    let too_many = wire::JournalHandoffEmpty {
        needs: vec![good; MAX_NEEDS + 1],
        ..ok
    };
    assert!(JournalCodec
        .decode(manifest::HANDOFF_EMPTY, &too_many.encode_to_vec())
        .is_err());
    let bad_slices = wire::JournalStreamRead {
        slice_from: 9,
        slice_to: 2,
        ..Default::default()
    };
    assert!(JournalCodec
        .decode(manifest::STREAM_READ, &bad_slices.encode_to_vec())
        .is_err());
    let bad_pid = wire::JournalStreamReply {
        events: vec![wire::JournalStreamEvent {
            persistence_id: "no-bar".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert!(JournalCodec
        .decode(manifest::STREAM_REPLY, &bad_pid.encode_to_vec())
        .is_err());
    let bad = wire::JournalReadReply {
        request: 1,
        page: vec![wire::JournalEntry {
            first_seq: 1,
            record: Bytes::from_static(b"xx"),
        }],
        covered_to: 1,
        replicas: 0,
    };
    assert!(JournalCodec
        .decode(manifest::READ_REPLY, &bad.encode_to_vec())
        .is_err());
}

#[test]
fn unable_carries_its_reason_and_an_earlier_versions_reads_as_unknown() {
    let c = JournalCodec;
    for reason in UnableReason::ALL {
        let m = JournalMessage::Unable { request: 9, reason };
        let (manifest, bytes) = c.encode(&m);
        assert_eq!(c.decode(manifest, &bytes).unwrap(), m);
    }
    let (manifest, _) = c.encode(&JournalMessage::Unable {
        request: 9,
        reason: UnableReason::Storage,
    });
    // An earlier version's Unable: the request id alone.
    let earlier = wire::JournalRequestId {
        request: 9,
        replicas: 0,
        unable_reason: 0,
    }
    .encode_to_vec();
    // A later version's reason this one does not know.
    let later = wire::JournalRequestId {
        request: 9,
        replicas: 0,
        unable_reason: 77,
    }
    .encode_to_vec();
    for bytes in [earlier, later] {
        assert_eq!(
            c.decode(manifest, &bytes).unwrap(),
            JournalMessage::Unable {
                request: 9,
                reason: UnableReason::Unknown,
            }
        );
    }
}

#[test]
fn a_give_up_naming_too_many_or_a_bad_address_is_an_error() {
    use concord_core::persistence::journal::give_up::MAX_GIVE_UP;
    let c = JournalCodec;
    let too_many = wire::JournalGiveUp {
        lost: (0..=MAX_GIVE_UP).map(|p| format!("s@h:{p}")).collect(),
    }
    .encode_to_vec();
    let bad = wire::JournalGiveUp {
        lost: vec!["not an address".into()],
    }
    .encode_to_vec();
    for bytes in [too_many, bad] {
        assert!(c.decode(manifest::GIVE_UP, &bytes).is_err());
    }
}

#[test]
fn a_handoff_wanted_with_holdings_is_one_an_earlier_version_reads_and_the_reverse() {
    // An earlier version's ask: the segments alone.
    let old = wire::JournalSegments {
        segments: vec![1, 2],
    }
    .encode_to_vec();
    assert_eq!(
        JournalCodec.decode(manifest::HANDOFF_WANTED, &old).unwrap(),
        JournalMessage::HandoffWanted {
            segments: vec![1, 2],
            held: Vec::new(),
        }
    );
    // This version's ask, as an earlier version reads it: the same segments.
    let m = all_messages()
        .into_iter()
        .find(|m| matches!(m, JournalMessage::HandoffWanted { held, .. } if !held.is_empty()))
        .unwrap();
    let (manifest, bytes) = JournalCodec.encode(&m);
    assert_eq!(manifest, manifest::HANDOFF_WANTED);
    assert_eq!(
        wire::JournalSegments::decode(bytes.as_ref())
            .unwrap()
            .segments,
        [3, 4]
    );
    // A holding beyond its bounds is an error, not a large allocation kept.
    let huge = wire::JournalHandoffWanted {
        segments: vec![1],
        held: vec![wire::JournalSegmentHolding {
            segment: 1,
            logs: vec![wire::JournalLogHolding {
                log: "x".into(),
                marks: vec![wire::JournalSlotRun { first: 1, count: 1 }; 5_000],
                ..Default::default()
            }],
        }],
    }
    .encode_to_vec();
    assert!(JournalCodec
        .decode(manifest::HANDOFF_WANTED, &huge)
        .is_err());
}

//! Tests of one collector: sampling and publishing, refusals, rounds, digests and answers,
//! the first version's message, and members that come and go. The cluster-wide
//! behaviour (convergence, cost) is in `tests_cluster.rs`.

use std::collections::BTreeMap;

use super::*;
use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::protocol::{MembershipChange, ProtocolMachine, Transmit};
use crate::test_views::{ua, view};

pub(super) fn up(n: u16) -> Vec<(u16, MemberStatus)> {
    (0..n).map(|i| (i, MemberStatus::Up)).collect()
}

pub(super) fn collector_with(
    settings: ClusterMetricsSettings,
    me: u16,
    members: &[(u16, MemberStatus)],
) -> ClusterMetricsCollector {
    let mut c = ClusterMetricsCollector::new(settings, ua(me), u64::from(me));
    c.handle_membership(0, &view(me, members), MembershipChange::CurrentClusterState);
    c
}

fn collector(me: u16, members: &[(u16, MemberStatus)]) -> ClusterMetricsCollector {
    collector_with(ClusterMetricsSettings::default(), me, members)
}

pub(super) fn events(c: &mut ClusterMetricsCollector) -> Vec<ClusterMetricsEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn transmits(c: &mut ClusterMetricsCollector) -> Vec<Transmit<ClusterMetricsMessage>> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

pub(super) fn sample(cpu: f64) -> BTreeMap<String, f64> {
    [(names::CPU_COMBINED.to_string(), cpu)].into()
}

fn cpu_scale() -> quantise::Scale {
    quantise::scale(0).unwrap()
}

/// An entry of node `i` with CPU `cpu`.
fn entry(i: u16, sequence: u64, cpu: f64) -> MetricsEntry {
    MetricsEntry {
        uid: ua(i).uid,
        sequence,
        codes: vec![(0, cpu_scale().code(cpu))],
    }
}

fn gossip(m: &ClusterMetricsMessage) -> &MetricsGossipMessage {
    match m {
        ClusterMetricsMessage::Gossip(g) => g,
        ClusterMetricsMessage::Legacy(_) => panic!("a legacy message"),
    }
}

#[test]
fn samples_are_asked_for_on_the_interval_smoothed_and_quantised() {
    let mut c = collector(0, &up(2));
    let settings = ClusterMetricsSettings::default();
    assert_eq!(
        c.poll_timeout(),
        Some(settings.periodic_tasks_initial_delay_ms)
    );
    c.handle_timeout(settings.periodic_tasks_initial_delay_ms);
    assert_eq!(events(&mut c), vec![ClusterMetricsEvent::SampleWanted]);
    c.record_sample(1_000, sample(1.0));
    assert_eq!(events(&mut c), vec![ClusterMetricsEvent::Changed]);
    c.record_sample(4_000, sample(0.0));
    let a = alpha(
        settings.moving_average_half_life_ms,
        settings.sample_interval_ms,
    );
    let own = c.gossip().get(&ua(0)).cloned().unwrap();
    // The latest sample as it was; the average as published: quantised.
    let published = cpu_scale().value(cpu_scale().code(1.0 - a));
    assert_eq!(
        own.get(names::CPU_COMBINED),
        Some(Metric {
            value: 0.0,
            smoothed: published
        })
    );
    assert!((published - (1.0 - a)).abs() <= 0.0025);
    assert_eq!((own.sequence, own.sampled_at_ms), (2, 4_000));
    assert_eq!(c.stats().published, 2);
    // The next sample is asked for one interval later.
    c.handle_timeout(1_000 + settings.sample_interval_ms);
    assert!(events(&mut c).contains(&ClusterMetricsEvent::SampleWanted));
}

#[test]
fn bad_and_unknown_sampled_values_are_dropped_and_counted() {
    let mut c = collector(0, &up(1));
    let values: BTreeMap<String, f64> = [
        (names::CPU_COMBINED.to_string(), f64::NAN),
        (names::ENTITIES.to_string(), -1.0),
        ("a-metric-this-version-does-not-know".to_string(), 1.0),
        (names::PROCESSORS.to_string(), 2.0),
    ]
    .into();
    c.record_sample(0, values);
    let e = c.gossip().get(&ua(0)).cloned().unwrap();
    assert_eq!(e.metrics.keys().collect::<Vec<_>>(), vec!["processors"]);
    assert_eq!(c.stats().sample_values_dropped, 3);
    assert_eq!(c.state().get(ua(0).uid).map(|e| e.validate()), Some(Ok(())));
}

#[test]
fn gossip_from_strangers_bad_entries_and_false_claims_about_this_node_are_refused() {
    let mut c = collector(0, &up(2));
    c.record_sample(0, sample(0.5));
    events(&mut c);
    // A node that is not a member.
    c.handle_message(0, &ua(9), compact_round(&[(9, 1)]));
    assert!(c.gossip().get(&ua(9)).is_none());
    assert!(c.poll_transmit().is_none(), "no answer to a stranger");
    // A member sending: a bad entry, an entry of a non-member, a claim of a version of
    // this node it never published, a malformed one, an echo of this node's own entry, and
    // its own good entry.
    let mut malformed = entry(1, 3, 0.1);
    malformed.codes.push((0, 1));
    let own = c.state().get(ua(0).uid).cloned().unwrap();
    let message = ClusterMetricsMessage::Gossip(MetricsGossipMessage {
        entries: vec![
            entry(1, 0, 0.1),
            entry(7, 1, 0.1),
            entry(0, 99, 0.9),
            malformed,
            own,
            entry(1, 2, 0.2),
        ],
        ..Default::default()
    });
    c.handle_message(0, &ua(1), message);
    assert_eq!(c.stats().entries_refused, 5);
    assert_eq!(c.stats().entries_merged, 1);
    assert_eq!(c.gossip().get(&ua(1)).map(|e| e.sequence), Some(2));
    assert_eq!(c.gossip().get(&ua(0)).map(|e| e.sequence), Some(1));
    let cpu = c
        .gossip()
        .get(&ua(1))
        .and_then(|e| e.smoothed(names::CPU_COMBINED));
    assert!(cpu.is_some_and(|v| (v - 0.2).abs() < 1e-9), "{cpu:?}");
    assert_eq!(events(&mut c), vec![ClusterMetricsEvent::Changed]);
    assert!(c.poll_transmit().is_none(), "an answer is not answered");
}

/// A round from a node holding `versions` (node index, version), as a compact digest.
fn compact_round(versions: &[(u16, u64)]) -> ClusterMetricsMessage {
    let mut held = MetricsState::new();
    for (i, s) in versions {
        held.merge_entry(entry(*i, *s, 0.0));
    }
    ClusterMetricsMessage::Gossip(MetricsGossipMessage {
        digest: Some(Digest::Compact {
            nodes: held.nodes_hash(),
            sequences: held.entries().map(|e| e.sequence).collect(),
        }),
        reply: true,
        ..Default::default()
    })
}

fn push(entries: Vec<MetricsEntry>) -> ClusterMetricsMessage {
    ClusterMetricsMessage::Gossip(MetricsGossipMessage {
        entries,
        ..Default::default()
    })
}

fn uids(m: &MetricsGossipMessage) -> Vec<u64> {
    m.entries.iter().map(|e| e.uid).collect()
}

#[test]
fn rounds_send_a_compact_digest_to_one_random_peer() {
    let mut c = collector(0, &up(3));
    c.record_sample(0, sample(0.5));
    c.handle_message(0, &ua(1), push(vec![entry(1, 2, 0.1)]));
    let first = ClusterMetricsSettings::default().periodic_tasks_initial_delay_ms;
    c.handle_timeout(first);
    let round = transmits(&mut c);
    assert_eq!(round.len(), 1);
    assert!(round[0].to_uid == Some(ua(1).uid) || round[0].to_uid == Some(ua(2).uid));
    let r = gossip(&round[0].message);
    assert!(r.reply && r.entries.is_empty());
    assert_eq!(
        r.digest,
        Some(Digest::Compact {
            nodes: c.state().nodes_hash(),
            sequences: vec![1, 2],
        })
    );
}

#[test]
fn a_round_is_answered_once_with_what_the_sender_lacks_and_what_this_node_wants() {
    let mut c = collector(0, &up(3));
    c.record_sample(0, sample(0.5));
    c.record_sample(1, sample(0.9));
    c.handle_message(0, &ua(2), push(vec![entry(1, 2, 0.1), entry(2, 1, 0.2)]));
    events(&mut c);
    // Node 1 holds this node's version 1 (older), its own version 3 (newer), node 2's 1.
    c.handle_message(5, &ua(1), compact_round(&[(0, 1), (1, 3), (2, 1)]));
    let answer = transmits(&mut c);
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].to_uid, Some(ua(1).uid));
    let a = gossip(&answer[0].message);
    assert!(!a.reply && a.digest.is_none());
    assert_eq!(uids(a), vec![ua(0).uid]);
    assert_eq!(a.want, vec![1], "the position of node 1's entry");
    // A second round within half a gossip interval is not answered.
    c.handle_message(6, &ua(1), compact_round(&[(0, 1), (1, 3), (2, 1)]));
    assert!(c.poll_transmit().is_none(), "answers are spaced");
    // Later it is; and a round of a node that holds all this node holds needs no answer.
    let later = ClusterMetricsSettings::default().gossip_interval_ms;
    c.handle_message(later, &ua(1), compact_round(&[(0, 2), (1, 2), (2, 1)]));
    assert!(c.poll_transmit().is_none());
    c.handle_message(2 * later, &ua(1), compact_round(&[(0, 1), (1, 2), (2, 1)]));
    assert_eq!(transmits(&mut c).len(), 1);
}

#[test]
fn a_compact_digest_of_other_nodes_is_answered_with_the_full_digest_and_wants_are_served() {
    let mut c = collector(0, &up(3));
    c.record_sample(0, sample(0.5));
    c.handle_message(0, &ua(2), push(vec![entry(2, 4, 0.2)]));
    // Node 1 holds entries of nodes 0 and 1 only: another set of nodes.
    c.handle_message(5, &ua(1), compact_round(&[(0, 1), (1, 1)]));
    let answer = transmits(&mut c);
    let a = gossip(&answer[0].message);
    assert!(a.reply, "answer my digest");
    let full = vec![
        EntryVersion {
            uid: ua(0).uid,
            sequence: 1,
        },
        EntryVersion {
            uid: ua(2).uid,
            sequence: 4,
        },
    ];
    assert_eq!(a.digest, Some(Digest::Full(full)));
    // Node 1 answers it: its entry, and it wants position 1 (node 2's) and a position
    // beyond the digest (ignored).
    let wants = ClusterMetricsMessage::Gossip(MetricsGossipMessage {
        entries: vec![entry(1, 1, 0.1)],
        want: vec![1, 7],
        ..Default::default()
    });
    c.handle_message(6, &ua(1), wants.clone());
    assert_eq!(c.state().sequence_of(ua(1).uid), Some(1));
    let sent = transmits(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!(uids(gossip(&sent[0].message)), vec![ua(2).uid]);
    // Once per digest: asking again gets nothing.
    c.handle_message(7, &ua(1), wants);
    assert!(c.poll_transmit().is_none());
}

#[test]
fn a_full_digest_is_answered_by_uid_and_a_removed_members_entry_goes() {
    let mut c = collector(0, &up(4));
    c.record_sample(0, sample(0.5));
    c.handle_message(0, &ua(1), push(vec![entry(2, 4, 0.2), entry(3, 1, 0.3)]));
    // Node 1 holds node 2 at version 3 (older), node 3 at version 2 (newer), a non-member,
    // and lacks node 0.
    let digest = vec![
        EntryVersion {
            uid: ua(2).uid,
            sequence: 3,
        },
        EntryVersion {
            uid: 999,
            sequence: 9,
        },
        EntryVersion {
            uid: ua(3).uid,
            sequence: 2,
        },
    ];
    let round = MetricsGossipMessage {
        digest: Some(Digest::Full(digest)),
        reply: true,
        ..Default::default()
    };
    c.handle_message(10, &ua(1), ClusterMetricsMessage::Gossip(round));
    let answer = transmits(&mut c);
    let a = gossip(&answer[0].message);
    assert_eq!(uids(a), vec![ua(0).uid, ua(2).uid]);
    assert_eq!(a.want, vec![2]);
    events(&mut c);
    c.handle_membership(
        0,
        &view(
            0,
            &[
                (0, MemberStatus::Up),
                (1, MemberStatus::Up),
                (3, MemberStatus::Up),
            ],
        ),
        MembershipChange::CurrentClusterState,
    );
    assert!(c.gossip().get(&ua(2)).is_none());
    assert!(c.state().get(ua(2).uid).is_none());
    assert_eq!(events(&mut c), vec![ClusterMetricsEvent::Changed]);
}

#[test]
fn the_first_versions_message_is_understood_and_answered_in_kind() {
    let mut c = collector(0, &up(3));
    c.record_sample(0, sample(0.5));
    let legacy = |node: UniqueAddress, sequence: u64| NodeMetrics {
        node,
        sequence,
        sampled_at_ms: 5,
        metrics: [(
            names::CPU_COMBINED.to_string(),
            Metric {
                value: 0.9,
                smoothed: 0.3,
            },
        )]
        .into(),
    };
    let envelope = MetricsGossipEnvelope {
        entries: vec![legacy(ua(1), 8), legacy(ua(0), 1), legacy(ua(9), 1)],
        reply: true,
    };
    c.handle_message(7, &ua(1), ClusterMetricsMessage::Legacy(envelope));
    let e = c.gossip().get(&ua(1)).cloned().unwrap();
    assert_eq!(e.sequence, 8);
    let cpu = e.smoothed(names::CPU_COMBINED);
    assert!(cpu.is_some_and(|v| (v - 0.3).abs() < 1e-9), "{cpu:?}");
    // Its own entry coming back is no refusal; a non-member's is.
    assert_eq!(c.stats().entries_refused, 1);
    let answer = transmits(&mut c);
    match &answer[0].message {
        ClusterMetricsMessage::Legacy(m) => {
            assert!(!m.reply);
            assert_eq!(m.entries.len(), 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn two_members_with_one_uid_cannot_be_told_apart_and_get_no_entries() {
    use crate::address::Address;
    use crate::gossip::Gossip;
    use crate::member::Member;
    use crate::membership_state::MembershipState;
    use crate::membership_view::MembershipView;
    let twin = |port: u16| UniqueAddress::new(Address::new("s", "h", port), 42);
    let mut g = Gossip::empty();
    for (i, n) in [ua(0), twin(1), twin(2)].into_iter().enumerate() {
        let m = Member::joining(n.clone(), Default::default(), "1")
            .with_up(i as u32 + 1)
            .with_status(MemberStatus::Up);
        g.members.insert(n, m);
    }
    let v = MembershipView::of(&MembershipState::new(g, ua(0)), 1);
    let mut c = ClusterMetricsCollector::new(ClusterMetricsSettings::default(), ua(0), 0);
    c.handle_membership(0, &v, MembershipChange::CurrentClusterState);
    let e = MetricsEntry {
        uid: 42,
        sequence: 1,
        codes: vec![(0, 1)],
    };
    c.handle_message(0, &twin(1), push(vec![e]));
    assert!(c.state().is_empty());
    assert_eq!(c.stats().entries_refused, 1);
}

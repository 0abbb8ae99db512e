//! Tests of the collector: one node's sampling and refusals, and a small cluster of
//! collectors whose gossip spreads every node's metrics to every node.

use std::collections::BTreeMap;

use super::*;
use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::protocol::{MembershipChange, ProtocolMachine};
use crate::test_views::{ua, view};

fn up(n: u16) -> Vec<(u16, MemberStatus)> {
    (0..n).map(|i| (i, MemberStatus::Up)).collect()
}

fn collector(me: u16, members: &[(u16, MemberStatus)]) -> ClusterMetricsCollector {
    let mut c =
        ClusterMetricsCollector::new(ClusterMetricsSettings::default(), ua(me), u64::from(me));
    c.handle_membership(0, &view(me, members), MembershipChange::CurrentClusterState);
    c
}

fn events(c: &mut ClusterMetricsCollector) -> Vec<ClusterMetricsEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn sample(cpu: f64) -> BTreeMap<String, f64> {
    [(names::CPU_COMBINED.to_string(), cpu)].into()
}

fn entry(node: UniqueAddress, sequence: u64, cpu: f64) -> NodeMetrics {
    NodeMetrics {
        node,
        sequence,
        sampled_at_ms: 0,
        metrics: [(
            names::CPU_COMBINED.to_string(),
            Metric {
                value: cpu,
                smoothed: cpu,
            },
        )]
        .into(),
    }
}

#[test]
fn samples_are_asked_for_on_the_interval_and_smoothed() {
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
    let m = c
        .gossip()
        .get(&ua(0))
        .and_then(|e| e.get(names::CPU_COMBINED));
    let a = alpha(
        settings.moving_average_half_life_ms,
        settings.sample_interval_ms,
    );
    assert_eq!(
        m,
        Some(Metric {
            value: 0.0,
            smoothed: 1.0 - a
        })
    );
    assert_eq!(c.gossip().get(&ua(0)).map(|e| e.sequence), Some(2));
    // The next sample is asked for one interval later.
    c.handle_timeout(1_000 + settings.sample_interval_ms);
    assert!(events(&mut c).contains(&ClusterMetricsEvent::SampleWanted));
}

#[test]
fn bad_sampled_values_are_dropped_and_counted() {
    let mut c = collector(0, &up(1));
    let long = "x".repeat(MAX_METRIC_NAME_BYTES + 1);
    let values: BTreeMap<String, f64> = [
        ("nan".to_string(), f64::NAN),
        ("neg".to_string(), -1.0),
        (long, 1.0),
        ("ok".to_string(), 2.0),
    ]
    .into();
    c.record_sample(0, values);
    let e = c.gossip().get(&ua(0)).cloned().unwrap();
    assert_eq!(e.metrics.keys().collect::<Vec<_>>(), vec!["ok"]);
    assert_eq!(c.stats().sample_values_dropped, 3);
    assert_eq!(e.validate(), Ok(()));
}

#[test]
fn gossip_from_strangers_bad_entries_and_claims_about_this_node_are_refused() {
    let mut c = collector(0, &up(2));
    c.record_sample(0, sample(0.5));
    events(&mut c);
    // A node that is not a member.
    c.handle_message(
        0,
        &ua(9),
        MetricsGossipEnvelope {
            entries: vec![entry(ua(9), 1, 0.1)],
            reply: true,
        },
    );
    assert!(c.gossip().get(&ua(9)).is_none());
    assert!(c.poll_transmit().is_none(), "no answer to a stranger");
    // A member sending: a bad entry, an entry of a non-member, a claim about this node,
    // and its own good entry.
    c.handle_message(
        0,
        &ua(1),
        MetricsGossipEnvelope {
            entries: vec![
                entry(ua(1), 0, 0.1),
                entry(ua(7), 1, 0.1),
                entry(ua(0), 99, 0.9),
                entry(ua(1), 3, f64::NAN),
                entry(ua(1), 2, 0.2),
            ],
            reply: false,
        },
    );
    assert_eq!(c.stats().entries_refused, 5);
    assert_eq!(c.stats().entries_merged, 1);
    assert_eq!(c.gossip().get(&ua(1)).map(|e| e.sequence), Some(2));
    assert_eq!(c.gossip().get(&ua(0)).map(|e| e.sequence), Some(1));
    assert_eq!(events(&mut c), vec![ClusterMetricsEvent::Changed]);
    assert!(c.poll_transmit().is_none(), "an answer is not answered");
}

#[test]
fn a_round_is_answered_once_and_a_removed_members_entry_goes() {
    let mut c = collector(0, &up(3));
    c.record_sample(0, sample(0.5));
    c.handle_message(
        0,
        &ua(1),
        MetricsGossipEnvelope {
            entries: vec![entry(ua(1), 1, 0.1), entry(ua(2), 1, 0.2)],
            reply: true,
        },
    );
    let answer = c.poll_transmit().expect("an answer");
    assert_eq!(answer.to, ua(1).address);
    assert_eq!(answer.to_uid, Some(ua(1).uid));
    assert!(!answer.message.reply);
    assert_eq!(answer.message.entries.len(), 3);
    assert!(c.poll_transmit().is_none());
    // A second round from the same member within half a gossip interval is not answered.
    c.handle_message(
        1,
        &ua(1),
        MetricsGossipEnvelope {
            entries: vec![],
            reply: true,
        },
    );
    assert!(c.poll_transmit().is_none(), "answers are spaced");
    let later = ClusterMetricsSettings::default().gossip_interval_ms;
    c.handle_message(
        later,
        &ua(1),
        MetricsGossipEnvelope {
            entries: vec![],
            reply: true,
        },
    );
    assert!(c.poll_transmit().is_some());
    events(&mut c);
    c.handle_membership(
        0,
        &view(0, &[(0, MemberStatus::Up), (1, MemberStatus::Up)]),
        MembershipChange::CurrentClusterState,
    );
    assert!(c.gossip().get(&ua(2)).is_none());
    assert_eq!(events(&mut c), vec![ClusterMetricsEvent::Changed]);
}

/// Runs `n` collectors in lock step (every message delivered at once) for `rounds` gossip
/// intervals; returns them and the entries each message carried.
fn run_cluster(n: u16, rounds: u64) -> (Vec<ClusterMetricsCollector>, Vec<usize>) {
    let members = up(n);
    let mut nodes: Vec<ClusterMetricsCollector> = (0..n).map(|i| collector(i, &members)).collect();
    let settings = ClusterMetricsSettings::default();
    let mut carried = Vec::new();
    let mut now = 0;
    for _ in 0..rounds {
        now += settings.gossip_interval_ms;
        for (i, c) in nodes.iter_mut().enumerate() {
            c.handle_timeout(now);
            for e in events(c) {
                if e == ClusterMetricsEvent::SampleWanted {
                    c.record_sample(now, sample(i as f64 / f64::from(n)));
                }
            }
        }
        let mut queue: Vec<(UniqueAddress, crate::protocol::Transmit<_>)> = Vec::new();
        for (i, c) in nodes.iter_mut().enumerate() {
            while let Some(t) = c.poll_transmit() {
                queue.push((ua(i as u16), t));
            }
        }
        while let Some((from, t)) = queue.pop() {
            carried.push(t.message.entries.len());
            let to = usize::from(t.to.port - 2550);
            nodes[to].handle_message(now, &from, t.message);
            while let Some(answer) = nodes[to].poll_transmit() {
                queue.push((ua(to as u16), answer));
            }
        }
    }
    (nodes, carried)
}

#[test]
fn every_node_learns_every_nodes_metrics_and_messages_stay_within_one_entry_per_member() {
    let n = 12;
    let (nodes, carried) = run_cluster(n, 12);
    for c in &nodes {
        assert_eq!(c.gossip().len(), usize::from(n), "{:?}", c.stats());
        for i in 0..n {
            let cpu = c
                .gossip()
                .get(&ua(i))
                .and_then(|e| e.get(names::CPU_COMBINED))
                .map(|m| m.value);
            assert_eq!(cpu, Some(f64::from(i) / f64::from(n)));
        }
    }
    assert!(carried.iter().all(|c| *c <= usize::from(n)));
    // One round and one answer per node per interval.
    let sent: u64 = nodes.iter().map(|c| c.stats().gossip_sent).sum();
    assert!(sent <= 2 * 12 * u64::from(n), "{sent}");
}

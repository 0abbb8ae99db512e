//! Unit tests of one node's singleton machine; the simulator tests the protocol between
//! nodes under faults (`concord-sim/tests/singleton.rs`).

use super::*;
use crate::member::MemberStatus;
use crate::test_views::{ua, view};

fn events(s: &mut ClusterSingleton) -> Vec<SingletonEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn transmits(s: &mut ClusterSingleton) -> Vec<(UniqueAddress, SingletonBody)> {
    std::iter::from_fn(|| s.poll_transmit())
        .map(|t| (UniqueAddress::new(t.to, t.to_uid.unwrap()), t.message.body))
        .collect()
}

use MemberStatus::*;

#[test]
fn the_oldest_starts_at_once_when_safe_and_only_with_the_lease_when_asked() {
    let mut s = ClusterSingleton::new(SingletonSettings::default(), ua(0), 1);
    s.handle_membership(
        0,
        &view(0, &[(0, Up), (1, Up)]),
        MembershipChange::CurrentClusterState,
    );
    assert!(matches!(
        events(&mut s)[..],
        [SingletonEvent::StartInstance { .. }]
    ));
    assert_eq!(s.state(), ManagerState::Oldest);

    let settings = SingletonSettings {
        use_lease: true,
        ..Default::default()
    };
    let mut s = ClusterSingleton::new(settings, ua(0), 1);
    s.handle_membership(
        0,
        &view(0, &[(0, Up)]),
        MembershipChange::CurrentClusterState,
    );
    assert_eq!(events(&mut s), vec![SingletonEvent::AcquireLease]);
    s.lease_result(10, false);
    assert!(events(&mut s).is_empty(), "no instance without the lease");
    s.handle_timeout(10 + 5_000);
    assert_eq!(
        events(&mut s),
        vec![SingletonEvent::AcquireLease],
        "retried"
    );
    s.lease_result(5_020, true);
    assert!(matches!(
        events(&mut s)[..],
        [SingletonEvent::StartInstance { .. }]
    ));
    s.lease_lost(6_000);
    assert_eq!(events(&mut s), vec![SingletonEvent::StopInstance]);
    s.instance_terminated(6_100);
    assert_eq!(
        events(&mut s),
        vec![SingletonEvent::AcquireLease],
        "seeks it again"
    );
}

#[test]
fn an_oldest_with_a_leaving_elder_waits_for_the_hand_over() {
    // Node 0 is older but Leaving: node 1 is not "safe" and must not start on its own.
    let mut s = ClusterSingleton::new(SingletonSettings::default(), ua(1), 1);
    s.handle_membership(
        0,
        &view(1, &[(0, Exiting), (1, Up)]),
        MembershipChange::CurrentClusterState,
    );
    assert!(events(&mut s).is_empty());
    assert_eq!(s.state(), ManagerState::BecomingOldest);
    // The old oldest asks to take over; node 1 asks for the hand-over, then gets it.
    s.handle_message(
        100,
        &ua(0),
        SingletonMessage {
            name: "singleton".into(),
            body: SingletonBody::TakeOverFromMe,
        },
    );
    assert_eq!(
        transmits(&mut s),
        vec![(ua(0), SingletonBody::HandOverToMe)]
    );
    s.handle_message(
        200,
        &ua(0),
        SingletonMessage {
            name: "singleton".into(),
            body: SingletonBody::HandOverDone,
        },
    );
    assert!(matches!(
        events(&mut s)[..],
        [SingletonEvent::StartInstance { .. }]
    ));
}

#[test]
fn a_leaving_younger_does_not_confirm_a_hand_over() {
    let mut s = ClusterSingleton::new(SingletonSettings::default(), ua(1), 1);
    s.handle_membership(
        0,
        &view(1, &[(0, Up), (1, Up)]),
        MembershipChange::CurrentClusterState,
    );
    let _ = transmits(&mut s);
    let ask = SingletonMessage {
        name: "singleton".into(),
        body: SingletonBody::HandOverToMe,
    };
    s.handle_message(10, &ua(2), ask.clone());
    assert_eq!(
        transmits(&mut s),
        vec![(ua(2), SingletonBody::HandOverDone)]
    );
    s.handle_membership(
        20,
        &view(1, &[(0, Up), (1, Leaving)]),
        MembershipChange::CurrentClusterState,
    );
    s.handle_message(30, &ua(2), ask);
    assert!(
        transmits(&mut s)
            .iter()
            .all(|(_, b)| *b != SingletonBody::HandOverDone),
        "Akka issue 27487"
    );
}

#[test]
fn a_full_proxy_buffer_drops_the_oldest_and_counts_it() {
    let settings = SingletonSettings {
        buffer_size: 3,
        ..Default::default()
    };
    let mut s = ClusterSingleton::new(settings, ua(5), 1);
    s.handle_membership(
        0,
        &view(5, &[(0, Up), (5, Up)]),
        MembershipChange::CurrentClusterState,
    );
    let _ = transmits(&mut s);
    for i in 0..5u8 {
        s.tell(10, vec![i], Some(u64::from(i)));
    }
    assert_eq!(s.proxy_stats().dropped, 2);
    assert_eq!(s.proxy_buffered(), 3);
    assert_eq!(
        events(&mut s),
        vec![
            SingletonEvent::Dropped { ask: Some(0) },
            SingletonEvent::Dropped { ask: Some(1) }
        ]
    );
    // Found: the three newest go, in order.
    s.handle_message(
        20,
        &ua(0),
        SingletonMessage {
            name: "singleton".into(),
            body: SingletonBody::Identified {
                incarnation: Some(9),
            },
        },
    );
    let sent: Vec<Vec<u8>> = transmits(&mut s)
        .into_iter()
        .filter_map(|(_, b)| match b {
            SingletonBody::Deliver { payload, .. } => Some(payload),
            _ => None,
        })
        .collect();
    assert_eq!(sent, vec![vec![2], vec![3], vec![4]]);
    // A message for another singleton name is ignored.
    s.handle_message(
        30,
        &ua(0),
        SingletonMessage {
            name: "other".into(),
            body: SingletonBody::HandOverToMe,
        },
    );
    assert!(transmits(&mut s).is_empty());
}

#[test]
fn retries_follow_the_removal_margin() {
    let s = SingletonSettings {
        removal_margin_ms: 20_000,
        ..Default::default()
    };
    assert_eq!(s.max_hand_over_retries(), 23);
    assert_eq!(s.max_take_over_retries(), 20);
    assert_eq!(SingletonSettings::default().max_hand_over_retries(), 15);
}

//! Tests of the work-pulling producer and the router.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::tests::settings;
use super::*;
use crate::address::{Address, UniqueAddress};
use crate::protocol::ProtocolMachine;

fn workers(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn producer() -> WorkPullingProducerController {
    WorkPullingProducerController::new("wp".into(), 1_000, 7, settings())
}

fn drain(p: &mut WorkPullingProducerController) -> Vec<(String, SequencedMessage)> {
    std::iter::from_fn(|| p.poll_transmit())
        .map(|t| (t.entity_id, t.message))
        .collect()
}

#[test]
fn messages_wait_for_a_worker_and_each_worker_gets_what_it_asks_for() {
    let mut p = producer();
    for i in 0..6u8 {
        p.send(0, vec![i]).unwrap();
    }
    assert!(drain(&mut p).is_empty(), "no worker yet");
    assert_eq!(p.waiting(), 6);
    p.set_workers(0, workers(&["a", "b"]));
    // A first message each goes without demand.
    let sent = drain(&mut p);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].1.payload, vec![0]);
    assert_eq!(sent[1].1.payload, vec![1]);
    let mut consumer = ConsumerController::new(&settings());
    let (worker, m) = &sent[0];
    assert_eq!(consumer.receive(m), Verdict::Deliver);
    // "a" confirms and asks for a window (4): it gets the next four in order.
    p.handle_message(1, worker, consumer.delivered(m));
    let sent = drain(&mut p);
    assert_eq!(
        sent.iter()
            .map(|(w, m)| (w.as_str(), m.payload[0]))
            .collect::<Vec<_>>(),
        vec![("a", 2), ("a", 3), ("a", 4), ("a", 5)]
    );
    assert_eq!(
        p.poll_event(),
        Some(WorkPullingEvent::Confirmed {
            id: 1,
            worker: "a".into()
        })
    );
    assert_eq!(p.waiting(), 0);
}

#[test]
fn the_buffer_counts_waiting_and_unconfirmed_messages() {
    let mut p = producer();
    for i in 0..40u8 {
        p.send(0, vec![i]).unwrap();
    }
    assert_eq!(p.send(0, vec![0]), Err(SendError::BufferFull { limit: 40 }));
    p.set_workers(0, workers(&["a"]));
    assert_eq!(p.unconfirmed(), 40);
    assert!(p.send(0, vec![0]).is_err());
}

#[test]
fn a_worker_that_leaves_gives_its_messages_back_in_order() {
    let mut p = producer();
    p.set_workers(0, workers(&["a"]));
    let mut consumer = ConsumerController::new(&settings());
    p.send(0, vec![0]).unwrap();
    let (_, m) = drain(&mut p).remove(0);
    consumer.receive(&m);
    p.handle_message(1, "a", consumer.delivered(&m));
    for i in 1..5u8 {
        p.send(2, vec![i]).unwrap();
    }
    assert_eq!(drain(&mut p).len(), 4);
    p.send(2, vec![5]).unwrap();
    // "a" leaves with 1..=4 unconfirmed; 5 waits behind them; "b" takes over.
    p.set_workers(3, workers(&["b"]));
    assert_eq!(p.reassigned(), 4);
    let sent = drain(&mut p);
    assert_eq!(sent.len(), 1, "b has the demand of a first message");
    assert_eq!((sent[0].0.as_str(), sent[0].1.payload[0]), ("b", 1));
    let mut b = ConsumerController::new(&settings());
    let mut order = Vec::new();
    let mut queue: std::collections::VecDeque<_> = sent.into();
    let mut now = 4;
    while let Some((w, m)) = queue.pop_front() {
        if b.receive(&m) == Verdict::Deliver {
            order.push(m.payload[0]);
            p.handle_message(now, &w, b.delivered(&m));
        }
        now += 1;
        queue.extend(drain(&mut p));
    }
    assert_eq!(order, vec![1, 2, 3, 4, 5]);
    assert_eq!(p.unconfirmed(), 0);
    let confirmed: Vec<u64> = std::iter::from_fn(|| p.poll_event())
        .map(|WorkPullingEvent::Confirmed { id, .. }| id)
        .collect();
    assert_eq!(confirmed, vec![1, 2, 3, 4, 5, 6]);
}

/// Workers over a network that loses, duplicates and reorders, joining and leaving: every
/// message is confirmed in the end and handled at least once; each worker handles what
/// it got in order, and nothing twice while no worker leaves.
#[test]
fn work_pulling_over_a_lossy_network_with_workers_coming_and_going() {
    for seed in 0..200u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut p = WorkPullingProducerController::new("wp".into(), 1_000, seed, settings());
        let names = ["w0", "w1", "w2", "w3"];
        let mut consumers: BTreeMap<String, ConsumerController> = BTreeMap::new();
        let mut handled: BTreeMap<u64, u32> = BTreeMap::new();
        let mut in_flight: Vec<(String, SequencedMessage)> = Vec::new();
        let mut answers: Vec<(String, ConsumerMessage)> = Vec::new();
        let mut active = workers(&["w0", "w1"]);
        p.set_workers(0, active.clone());
        let (mut now, mut next_payload, mut removals) = (0u64, 0u64, 0);
        let mut confirmed = BTreeSet::new();
        for step in 0..6_000 {
            now += rng.random_range(1..10);
            if step < 4_000
                && next_payload < 300
                && rng.random_bool(0.3)
                && p.send(now, next_payload.to_be_bytes().to_vec()).is_ok()
            {
                next_payload += 1;
            }
            if step < 4_000 && rng.random_bool(0.004) {
                // A worker joins or leaves (never the last one).
                let w = names[rng.random_range(0..names.len())].to_string();
                if active.contains(&w) && active.len() > 1 {
                    active.remove(&w);
                    removals += 1;
                } else {
                    active.insert(w);
                }
                p.set_workers(now, active.clone());
            }
            in_flight.extend(drain(&mut p));
            if !in_flight.is_empty() {
                let (w, m) = in_flight.swap_remove(rng.random_range(0..in_flight.len()));
                if rng.random_bool(0.1) {
                    // Lost.
                } else {
                    if rng.random_bool(0.05) {
                        in_flight.push((w.clone(), m.clone()));
                    }
                    let c = consumers
                        .entry(w.clone())
                        .or_insert_with(|| ConsumerController::new(&settings()));
                    let answer = match c.receive(&m) {
                        Verdict::Deliver => {
                            let v = u64::from_be_bytes(m.payload[..8].try_into().unwrap());
                            *handled.entry(v).or_default() += 1;
                            c.delivered(&m)
                        }
                        Verdict::Drop(a) => a,
                        Verdict::Invalid => panic!("seed {seed}: malformed {m:?}"),
                    };
                    answers.push((w, answer));
                }
            }
            if !answers.is_empty() && rng.random_bool(0.6) {
                let (w, a) = answers.swap_remove(rng.random_range(0..answers.len()));
                if !rng.random_bool(0.1) {
                    p.handle_message(now, &w, a);
                }
            }
            if p.poll_timeout().is_some_and(|at| at <= now) {
                p.handle_timeout(now);
            }
            while let Some(WorkPullingEvent::Confirmed { id, .. }) = p.poll_event() {
                assert!(confirmed.insert(id), "seed {seed}: {id} confirmed twice");
            }
        }
        assert_eq!(p.unconfirmed(), 0, "seed {seed}: everything confirmed");
        assert_eq!(confirmed.len() as u64, next_payload, "seed {seed}");
        for v in 0..next_payload {
            let n = handled.get(&v).copied().unwrap_or(0);
            assert!(n >= 1, "seed {seed}: {v} never handled");
            if removals == 0 {
                assert_eq!(n, 1, "seed {seed}: {v} handled {n} times");
            }
        }
    }
}

fn node(host: &str, uid: u64) -> UniqueAddress {
    UniqueAddress::new(Address::new("t", host, 1), uid)
}

#[test]
fn the_router_drops_malformed_envelopes_and_refuses_to_send_them() {
    let mut r = DeliveryRouter::new();
    let good = DeliveryEnvelope {
        to: "consumer".into(),
        from: "producer".into(),
        body: DeliveryBody::Control(ConsumerMessage::Resend {
            incarnation: Incarnation {
                started_ms: 1,
                generation: 1,
                nonce: 1,
            },
            from_seq_nr: 1,
        }),
    };
    let long = DeliveryEnvelope {
        to: "x".repeat(MAX_ENDPOINT_NAME_BYTES + 1),
        ..good.clone()
    };
    let empty = DeliveryEnvelope {
        from: String::new(),
        ..good.clone()
    };
    r.handle_message(0, &node("a", 1), long.clone());
    r.handle_message(0, &node("a", 1), empty);
    r.handle_message(0, &node("a", 1), good.clone());
    assert_eq!(r.stats().malformed, 2);
    assert_eq!(
        r.poll_event(),
        Some(RouterEvent::Inbound {
            from: node("a", 1),
            envelope: good.clone()
        })
    );
    assert_eq!(r.poll_event(), None);
    assert_eq!(
        r.send(&node("b", 2).address, long),
        Err(RouterError::Malformed)
    );
    r.send(&node("b", 2).address, good).unwrap();
    let t = r.poll_transmit().unwrap();
    assert_eq!((t.to, t.to_uid), (node("b", 2).address, None));
}

#[test]
fn a_restored_producer_sends_what_it_held_first_and_numbers_on() {
    let mut p = producer();
    p.restore(0, vec![(4, vec![4]), (7, vec![7])], 9);
    assert_eq!(p.send(0, vec![10]).unwrap(), 10);
    p.set_workers(0, workers(&["a"]));
    let mut consumer = ConsumerController::new(&settings());
    let mut order = Vec::new();
    let mut queue: std::collections::VecDeque<_> = drain(&mut p).into();
    while let Some((w, m)) = queue.pop_front() {
        if consumer.receive(&m) == Verdict::Deliver {
            order.push(m.payload[0]);
            p.handle_message(1, &w, consumer.delivered(&m));
        }
        queue.extend(drain(&mut p));
    }
    assert_eq!(order, vec![4, 7, 10]);
    let ids: Vec<u64> = std::iter::from_fn(|| p.poll_event())
        .map(|WorkPullingEvent::Confirmed { id, .. }| id)
        .collect();
    assert_eq!(ids, vec![4, 7, 10]);
}

#[test]
fn a_restored_queue_larger_than_the_buffer_loses_nothing() {
    // 60 restored messages, a buffer of 40, 15 workers: what does not fit waits.
    let mut p = producer();
    p.restore(0, (1..=60u64).map(|id| (id, vec![id as u8])).collect(), 60);
    let names: Vec<String> = (0..15).map(|i| format!("w{i}")).collect();
    p.set_workers(0, names.iter().cloned().collect());
    let mut consumers: BTreeMap<String, ConsumerController> = BTreeMap::new();
    let mut handled = BTreeSet::new();
    let mut queue: std::collections::VecDeque<_> = drain(&mut p).into();
    let mut now = 1;
    while let Some((w, m)) = queue.pop_front() {
        let c = consumers
            .entry(w.clone())
            .or_insert_with(|| ConsumerController::new(&settings()));
        if c.receive(&m) == Verdict::Deliver {
            handled.insert(m.payload[0]);
            let answer = c.delivered(&m);
            p.handle_message(now, &w, answer);
        }
        now += 1;
        queue.extend(drain(&mut p));
    }
    assert_eq!(handled.len(), 60);
    assert_eq!(p.unconfirmed(), 0);
}

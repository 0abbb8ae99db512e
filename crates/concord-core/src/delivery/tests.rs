//! Tests of the reliable delivery controllers: unit tests of each verb, and runs of a
//! sharded producer and its consumers over a network that loses, duplicates, delays and
//! reorders messages while consumers crash and move.

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

pub(super) fn settings() -> DeliverySettings {
    DeliverySettings {
        flow_control_window: 4,
        resend_interval_min_ms: 100,
        resend_interval_max_ms: 1_600,
        buffer_size: 40,
        cleanup_unused_after_ms: 5_000,
        max_producers_per_consumer: 8,
    }
}

fn incarnation(generation: u32) -> Incarnation {
    Incarnation {
        started_ms: 1_000,
        generation,
        nonce: 9,
    }
}

fn producer() -> ProducerController {
    ProducerController::new("p".into(), incarnation(1), &settings(), 10, 1)
}

fn drain(p: &mut ProducerController) -> Vec<u64> {
    std::iter::from_fn(|| p.poll_transmit())
        .map(|m| m.seq_nr)
        .collect()
}

fn request(confirmed: u64, up_to: u64) -> ConsumerMessage {
    ConsumerMessage::Request {
        incarnation: incarnation(1),
        confirmed_seq_nr: confirmed,
        request_up_to_seq_nr: up_to,
    }
}

#[test]
fn the_first_message_goes_without_demand_the_rest_within_the_window() {
    let mut p = producer();
    for i in 0..6u8 {
        assert_eq!(p.send(0, vec![i]), Ok(u64::from(i) + 1));
    }
    assert_eq!(drain(&mut p), vec![1]);
    p.handle_message(10, request(1, 5));
    assert_eq!(drain(&mut p), vec![2, 3, 4, 5]);
    assert_eq!(p.in_flight(), 4);
    assert_eq!(p.poll_event(), Some(ProducerEvent::Confirmed { seq_nr: 1 }));
    p.handle_message(20, request(5, 9));
    assert_eq!(drain(&mut p), vec![6]);
    assert_eq!(p.unconfirmed(), 1);
    // Confirmations are cumulative.
    let confirmed: Vec<u64> = std::iter::from_fn(|| p.poll_event())
        .map(|ProducerEvent::Confirmed { seq_nr }| seq_nr)
        .collect();
    assert_eq!(confirmed, vec![2, 3, 4, 5]);
}

#[test]
fn a_full_buffer_refuses_and_a_confirmation_makes_room() {
    let mut p = producer();
    for i in 0..10u8 {
        p.send(0, vec![i]).unwrap();
    }
    assert_eq!(
        p.send(0, vec![10]),
        Err(SendError::BufferFull { limit: 10 })
    );
    p.handle_message(1, request(1, 5));
    assert_eq!(p.send(1, vec![10]), Ok(11));
}

#[test]
fn what_is_not_confirmed_is_resent_with_a_growing_interval_until_it_is() {
    let mut p = producer();
    p.send(0, vec![1]).unwrap();
    drain(&mut p);
    let mut last = 0;
    let mut gaps = Vec::new();
    for _ in 0..5 {
        let at = p.poll_timeout().unwrap();
        gaps.push(at - last);
        p.handle_timeout(at);
        assert_eq!(drain(&mut p), vec![1]);
        last = at;
    }
    // Each interval within [i/2, i] of 100, 200, 400, 800, 1600 (capped).
    for (g, i) in gaps.iter().zip([100, 200, 400, 800, 1_600]) {
        assert!(*g >= i / 2 && *g <= i, "{gaps:?}");
    }
    assert_eq!(p.stats().resent, 5);
    p.handle_message(last, request(1, 5));
    assert_eq!(p.poll_timeout(), None);
    // The next loss starts from the minimum again.
    p.send(last, vec![2]).unwrap();
    assert!(p.poll_timeout().unwrap() - last <= 100);
}

#[test]
fn a_resend_request_sends_again_from_the_missing_number() {
    let mut p = producer();
    for i in 0..5u8 {
        p.send(0, vec![i]).unwrap();
    }
    p.handle_message(0, request(1, 5));
    drain(&mut p);
    p.handle_message(
        5,
        ConsumerMessage::Resend {
            incarnation: incarnation(1),
            from_seq_nr: 3,
        },
    );
    assert_eq!(drain(&mut p), vec![3, 4, 5]);
    assert_eq!(p.confirmed_seq_nr(), 2);
}

#[test]
fn answers_that_do_not_fit_are_counted_and_change_nothing() {
    let mut p = producer();
    p.send(0, vec![1]).unwrap();
    drain(&mut p);
    // A confirmation from the future, another incarnation's, a resend of what was never
    // sent, a demand below the confirmation, a stale notice that is not newer.
    p.handle_message(0, request(7, 9));
    p.handle_message(
        0,
        ConsumerMessage::Request {
            incarnation: incarnation(2),
            confirmed_seq_nr: 1,
            request_up_to_seq_nr: 5,
        },
    );
    p.handle_message(
        0,
        ConsumerMessage::Resend {
            incarnation: incarnation(1),
            from_seq_nr: 2,
        },
    );
    p.handle_message(0, request(1, 0));
    p.handle_message(
        0,
        ConsumerMessage::Stale {
            current: incarnation(1),
        },
    );
    assert_eq!(p.stats().invalid, 5);
    assert_eq!(p.confirmed_seq_nr(), 0);
    assert_eq!(p.unconfirmed(), 1);
    assert!(drain(&mut p).is_empty());
}

#[test]
fn a_stale_notice_moves_the_producer_above_the_newer_incarnation_and_resends() {
    let mut p = producer();
    p.send(0, vec![1]).unwrap();
    drain(&mut p);
    let newer = Incarnation {
        started_ms: 5_000,
        generation: 3,
        nonce: 1,
    };
    p.handle_message(0, ConsumerMessage::Stale { current: newer });
    assert!(p.incarnation() > newer);
    let again = p.poll_transmit().unwrap();
    assert_eq!((again.seq_nr, again.incarnation), (1, p.incarnation()));
    // The consumer takes it as a new incarnation.
    let mut c = ConsumerController::new(&settings());
    let mut m = again.clone();
    m.incarnation = newer;
    assert_eq!(c.receive(&m), Verdict::Deliver);
    c.delivered(&m);
    assert_eq!(c.receive(&again), Verdict::Deliver);
}

fn message(generation: u32, seq_nr: u64, confirmed: u64) -> SequencedMessage {
    SequencedMessage {
        producer_id: "p".into(),
        incarnation: incarnation(generation),
        seq_nr,
        confirmed_seq_nr: confirmed,
        payload: vec![seq_nr as u8],
    }
}

#[test]
fn the_consumer_delivers_in_order_once_and_asks_for_what_is_missing() {
    let mut c = ConsumerController::new(&settings());
    let m1 = message(1, 1, 0);
    assert_eq!(c.receive(&m1), Verdict::Deliver);
    assert_eq!(c.delivered(&m1), request(1, 5));
    // A duplicate is answered with the confirmation again.
    assert_eq!(c.receive(&m1), Verdict::Drop(request(1, 5)));
    // A gap: 3 before 2.
    assert_eq!(
        c.receive(&message(1, 3, 0)),
        Verdict::Drop(ConsumerMessage::Resend {
            incarnation: incarnation(1),
            from_seq_nr: 2
        })
    );
    let m2 = message(1, 2, 1);
    assert_eq!(c.receive(&m2), Verdict::Deliver);
    c.delivered(&m2);
    assert_eq!(c.delivered_seq_nr("p"), Some(2));
    let s = c.stats();
    assert_eq!((s.delivered, s.duplicates, s.gaps), (2, 1, 1));
}

#[test]
fn a_new_consumer_starts_after_the_producers_confirmation_and_a_new_incarnation_starts_over() {
    let mut c = ConsumerController::new(&settings());
    // A consumer that crashed: the producer confirmed up to 6 and resends 7.
    assert_eq!(c.receive(&message(1, 7, 6)), Verdict::Deliver);
    let mut c = ConsumerController::new(&settings());
    assert_eq!(
        c.receive(&message(1, 9, 6)),
        Verdict::Drop(ConsumerMessage::Resend {
            incarnation: incarnation(1),
            from_seq_nr: 7
        })
    );
    let m = message(1, 7, 6);
    assert_eq!(c.receive(&m), Verdict::Deliver);
    c.delivered(&m);
    // A newer incarnation numbers from 1 again; an older one is stale.
    assert_eq!(c.receive(&message(2, 1, 0)), Verdict::Deliver);
    c.delivered(&message(2, 1, 0));
    assert_eq!(
        c.receive(&message(1, 8, 7)),
        Verdict::Drop(ConsumerMessage::Stale {
            current: incarnation(2)
        })
    );
}

#[test]
fn malformed_messages_are_refused_and_remembered_producers_are_bounded() {
    let mut c = ConsumerController::new(&settings());
    assert_eq!(c.receive(&message(1, 0, 0)), Verdict::Invalid);
    assert_eq!(c.receive(&message(1, 3, 3)), Verdict::Invalid);
    let mut long = message(1, 1, 0);
    long.producer_id = "x".repeat(MAX_PRODUCER_ID_BYTES + 1);
    assert_eq!(c.receive(&long), Verdict::Invalid);
    assert_eq!(c.stats().invalid, 3);
    assert_eq!(c.producers(), 0);
    for i in 0..20 {
        let mut m = message(1, 1, 0);
        m.producer_id = format!("p{i}");
        assert_eq!(c.receive(&m), Verdict::Deliver);
        c.delivered(&m);
    }
    assert_eq!(c.producers(), 8);
    assert_eq!(c.stats().forgotten, 12);
    // The most recently seen are kept.
    assert_eq!(c.delivered_seq_nr("p19"), Some(1));
    assert_eq!(c.delivered_seq_nr("p0"), None);
}

#[test]
fn a_consumer_handed_over_keeps_what_it_delivered() {
    let mut c = ConsumerController::new(&settings());
    for seq in 1..=3 {
        let m = message(1, seq, seq - 1);
        assert_eq!(c.receive(&m), Verdict::Deliver);
        c.delivered(&m);
    }
    let mut moved = ConsumerController::restore(&settings(), c.state());
    // A message delivered before the move, sent again, is a duplicate there.
    assert_eq!(
        moved.receive(&message(1, 3, 1)),
        Verdict::Drop(request(3, 7))
    );
    assert_eq!(moved.receive(&message(1, 4, 1)), Verdict::Deliver);
}

#[test]
fn the_sharded_producer_bounds_its_buffer_and_forgets_idle_entities() {
    let mut s = ShardingProducerController::new("p".into(), 1_000, 5, settings());
    assert_eq!(s.send(0, "", vec![]), Err(ShardingSendError::BadEntityId));
    for i in 0..40 {
        s.send(0, &format!("e{}", i % 4), vec![]).unwrap();
    }
    assert!(matches!(
        s.send(0, "e0", vec![]),
        Err(ShardingSendError::Full(SendError::BufferFull { limit: 40 }))
    ));
    // Confirm everything of e0 (10 messages).
    let first = s.controller("e0").unwrap().incarnation();
    for up_to in 1..=10u64 {
        s.handle_message(
            1,
            "e0",
            ConsumerMessage::Request {
                incarnation: first,
                confirmed_seq_nr: up_to,
                request_up_to_seq_nr: up_to + 4,
            },
        );
    }
    assert_eq!(s.unconfirmed(), 30);
    // e0 asked for 4 more than it was sent: its window is open by that much.
    assert_eq!(s.demand("e0"), 4);
    let open: u64 = (0..4).map(|i| s.demand(&format!("e{i}"))).sum();
    assert_eq!(s.window_open(), open);
    // Long after, e0 is forgotten; a new message makes a controller of a newer incarnation.
    let mut now = 1;
    while s.controller("e0").is_some() {
        now = s.poll_timeout().unwrap();
        s.handle_timeout(now);
        assert!(now < 20_000, "never forgotten");
    }
    assert_eq!(s.entities(), 3);
    let a = s.send(now, "e0", vec![]).unwrap();
    assert_eq!(a.seq_nr, 1);
    assert!(a.incarnation > first);
}

/// One run: a sharded producer sends `per_entity` messages to each of `entities` consumers
/// over a network that loses `loss`, duplicates and reorders; consumers crash (losing
/// their memory) or move (keeping it) when `faults`. Faults stop at 60 s; everything must be
/// confirmed by 600 s. Returns what each entity handled, in order, and the number of
/// crashes.
fn run(seed: u64, entities: usize, per_entity: u64, loss: f64, faults: bool) -> Outcome {
    let mut rng = SmallRng::seed_from_u64(seed);
    let settings = settings();
    let window = settings.window();
    let mut producer = ShardingProducerController::new("p".into(), 1_000, seed, settings.clone());
    let mut consumers: Vec<ConsumerController> = (0..entities)
        .map(|_| ConsumerController::new(&settings))
        .collect();
    let mut handled: Vec<Vec<u64>> = vec![Vec::new(); entities];
    let mut crashes: Vec<Vec<usize>> = vec![Vec::new(); entities];
    let mut next: Vec<u64> = vec![1; entities];
    // In flight: (arrival ms, tiebreak) -> message, both directions.
    let mut to_consumer: BTreeMap<(u64, u64), (usize, SequencedMessage)> = BTreeMap::new();
    let mut to_producer: BTreeMap<(u64, u64), (usize, ConsumerMessage)> = BTreeMap::new();
    let mut tiebreak = 0u64;
    let mut now = 0u64;
    let heal = 60_000;
    let mut max_in_flight = 0;
    while now < 600_000 {
        let faulty = now < heal;
        // Send what the buffer allows, in payload order per entity.
        for _ in 0..rng.random_range(0..4) {
            let e = rng.random_range(0..entities);
            if next[e] <= per_entity {
                let payload = next[e].to_be_bytes().to_vec();
                if producer.send(now, &format!("e{e}"), payload).is_ok() {
                    next[e] += 1;
                }
            }
        }
        while let Some(t) = producer.poll_transmit() {
            let e: usize = t.entity_id[1..].parse().unwrap();
            let copies = if faulty && rng.random_bool(loss) {
                0
            } else if faulty && rng.random_bool(0.05) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                tiebreak += 1;
                let delay = rng.random_range(1..if faulty { 300 } else { 30 });
                to_consumer.insert((now + delay, tiebreak), (e, t.message.clone()));
            }
        }
        for e in 0..entities {
            let c = producer.controller(&format!("e{e}"));
            max_in_flight = max_in_flight.max(c.map_or(0, |c| c.in_flight()));
        }
        assert!(producer.unconfirmed() <= 40);
        // Deliver what is due.
        let due: Vec<(u64, u64)> = to_consumer
            .range(..=(now, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let (e, m) = to_consumer.remove(&k).unwrap();
            let answer = match consumers[e].receive(&m) {
                Verdict::Deliver => {
                    handled[e].push(u64::from_be_bytes(m.payload[..8].try_into().unwrap()));
                    Some(consumers[e].delivered(&m))
                }
                Verdict::Drop(a) => Some(a),
                Verdict::Invalid => panic!("the producer sent a malformed message: {m:?}"),
            };
            if let Some(a) = answer {
                if !(faulty && rng.random_bool(loss)) {
                    tiebreak += 1;
                    let delay = rng.random_range(1..if faulty { 300 } else { 30 });
                    to_producer.insert((now + delay, tiebreak), (e, a));
                }
            }
        }
        let due: Vec<(u64, u64)> = to_producer
            .range(..=(now, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let (e, a) = to_producer.remove(&k).unwrap();
            producer.handle_message(now, &format!("e{e}"), a);
        }
        while producer.poll_event().is_some() {}
        if faulty && faults && rng.random_bool(0.002) {
            let e = rng.random_range(0..entities);
            if rng.random_bool(0.5) {
                // Crash: the consumer's memory is gone.
                consumers[e] = ConsumerController::new(&settings);
                crashes[e].push(handled[e].len());
            } else {
                // Graceful move: its memory moves with it.
                consumers[e] = ConsumerController::restore(&settings, consumers[e].state());
            }
        }
        if let Some(at) = producer.poll_timeout() {
            if at <= now {
                producer.handle_timeout(now);
            }
        }
        if !faulty
            && producer.unconfirmed() == 0
            && next.iter().all(|n| *n > per_entity)
            && to_consumer.is_empty()
        {
            break;
        }
        now += rng.random_range(1..20);
    }
    if producer.unconfirmed() != 0 {
        for (e, consumer) in consumers.iter().enumerate() {
            if let Some(c) = producer.controller(&format!("e{e}")) {
                eprintln!("e{e}: {c:?}\n consumer {consumer:?}");
            }
        }
    }
    assert_eq!(
        producer.unconfirmed(),
        0,
        "seed {seed}: not everything confirmed by {now} ms"
    );
    assert!(
        max_in_flight <= window,
        "seed {seed}: {max_in_flight} in flight, window {window}"
    );
    Outcome { handled, crashes }
}

struct Outcome {
    handled: Vec<Vec<u64>>,
    crashes: Vec<Vec<usize>>,
}

#[test]
fn over_a_lossy_network_every_message_is_handled_once_and_in_order() {
    for seed in 0..300 {
        let o = run(seed, 5, 60, 0.2, false);
        for (e, h) in o.handled.iter().enumerate() {
            let expected: Vec<u64> = (1..=60).collect();
            assert_eq!(h, &expected, "seed {seed}, entity {e}");
        }
    }
}

#[test]
fn consumers_that_crash_or_move_miss_nothing_and_see_a_message_twice_only_after_a_crash() {
    let mut crashes = 0;
    for seed in 0..300 {
        let o = run(seed, 5, 60, 0.1, true);
        for (e, h) in o.handled.iter().enumerate() {
            // Never a gap: each message handled is at most one past the highest handled.
            // One already handled comes again only after a crash (a message handled whose
            // confirmation died with the consumer, or one delayed from before), until the
            // consumer is past what it had handled.
            let mut highest = 0u64;
            let mut redelivering = false;
            for (i, v) in h.iter().enumerate() {
                if o.crashes[e].contains(&i) {
                    redelivering = true;
                }
                assert!(
                    *v <= highest + 1,
                    "seed {seed}, entity {e}: a gap before {v}: {h:?}"
                );
                if *v <= highest {
                    assert!(
                        redelivering,
                        "seed {seed}, entity {e}: {v} again at {i} without a crash: {h:?}"
                    );
                } else {
                    redelivering = false;
                }
                highest = highest.max(*v);
            }
            assert_eq!(highest, 60, "seed {seed}, entity {e}");
            crashes += o.crashes[e].len();
        }
    }
    assert!(
        crashes > 100,
        "the runs crashed consumers only {crashes} times"
    );
}

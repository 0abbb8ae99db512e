//! A producer restarted from its durable queue, over a lossy network.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::tests::settings;
use super::*;

/// A producer with a durable queue: it records every message before taking it and every
/// confirmation after, crashes now and then (its memory gone; messages in flight lost),
/// and restarts from the queue's state. Every message taken is handled exactly once, in
/// order: the restarted producer resends under the same incarnation, and the consumer drops
/// what it had handled.
#[test]
fn a_producer_restarted_from_its_durable_queue_loses_nothing_and_repeats_nothing() {
    for seed in 0..200u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let settings = settings();
        let mut log: Vec<QueueEvent> = Vec::new();
        let mut started = 1_000u64;
        let mut producer =
            ShardingProducerController::new("p".into(), started, seed, settings.clone());
        let mut consumers: Vec<ConsumerController> =
            (0..3).map(|_| ConsumerController::new(&settings)).collect();
        let mut handled: Vec<Vec<u64>> = vec![Vec::new(); 3];
        let mut next = [1u64; 3];
        let mut in_flight: Vec<(usize, SequencedMessage)> = Vec::new();
        let mut answers: Vec<(usize, ConsumerMessage)> = Vec::new();
        let mut now = 0u64;
        let mut restarts = 0;
        for step in 0..4_000 {
            now += rng.random_range(1..10);
            let e = rng.random_range(0..3);
            if next[e] <= 80 && rng.random_bool(0.5) {
                let payload = next[e].to_be_bytes().to_vec();
                let id = format!("e{e}");
                // Recorded with the number the controller gave it, before anything is sent
                // (the transmits are taken below).
                if let Ok(a) = producer.send(now, &id, payload.clone()) {
                    log.push(QueueEvent::Sent {
                        entity_id: id,
                        incarnation: a.incarnation,
                        seq_nr: a.seq_nr,
                        payload,
                    });
                    next[e] += 1;
                }
            }
            while let Some(t) = producer.poll_transmit() {
                let e: usize = t.entity_id[1..].parse().unwrap();
                in_flight.push((e, t.message));
            }
            // Deliver a random message in flight (reordering), or lose one.
            if !in_flight.is_empty() {
                let i = rng.random_range(0..in_flight.len());
                let (e, m) = in_flight.swap_remove(i);
                if !rng.random_bool(0.1) {
                    let a = match consumers[e].receive(&m) {
                        Verdict::Deliver => {
                            handled[e].push(u64::from_be_bytes(m.payload[..8].try_into().unwrap()));
                            consumers[e].delivered(&m)
                        }
                        Verdict::Drop(a) => a,
                        Verdict::Invalid => panic!("malformed"),
                    };
                    answers.push((e, a));
                }
            }
            if !answers.is_empty() && rng.random_bool(0.7) {
                let (e, a) = answers.remove(0);
                producer.handle_message(now, &format!("e{e}"), a);
            }
            while let Some(ShardingProducerEvent::Confirmed {
                entity_id,
                incarnation,
                seq_nr,
            }) = producer.poll_event()
            {
                // Confirmations are recorded lazily: some are lost with a crash.
                if rng.random_bool(0.8) {
                    log.push(QueueEvent::Confirmed {
                        entity_id,
                        incarnation,
                        seq_nr,
                    });
                }
            }
            if producer.poll_timeout().is_some_and(|at| at <= now) {
                producer.handle_timeout(now);
            }
            if step < 3_000 && rng.random_bool(0.003) {
                // Crash and restart from the queue: messages in flight and answers lost.
                restarts += 1;
                in_flight.clear();
                answers.clear();
                let mut state = DurableQueueState::new();
                for (i, ev) in log.iter().cloned().enumerate() {
                    state.apply(i as u64 + 1, ev);
                }
                started += 10_000;
                producer = ShardingProducerController::new(
                    "p".into(),
                    started,
                    seed + restarts,
                    settings.clone(),
                );
                for (id, q) in state.entities() {
                    producer.restore(
                        now,
                        id,
                        q.incarnation.unwrap(),
                        q.confirmed_seq_nr,
                        q.unconfirmed.iter().map(|(_, p, _)| p.clone()).collect(),
                    );
                }
            }
        }
        for (e, h) in handled.iter().enumerate() {
            assert_eq!(
                h,
                &(1..next[e]).collect::<Vec<u64>>(),
                "seed {seed}, entity {e}: every message taken, once, in order ({restarts} restarts)"
            );
            assert!(next[e] > 60, "seed {seed}: too few sent");
        }
        assert_eq!(producer.unconfirmed(), 0, "seed {seed}");
    }
}

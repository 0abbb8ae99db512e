//! Requests held while a log's replicas cannot answer yet (a new cluster's replicas wait
//! for their handoffs): they are sent again until the replicas answer, or fail at their
//! deadline.

use super::*;

fn with_timeout(net: &mut Net, ms: u64) {
    for m in &mut net.machines {
        m.settings.request_timeout_ms = ms;
    }
}

#[test]
fn a_new_cluster_holds_requests_until_its_replicas_caught_up() {
    let mut net = Net::new(11, 0.0);
    with_timeout(&mut net, 5_000);
    assert!(net.machines[0].pending_segments() > 0, "a new node waits");
    let log = log_name(1);
    net.machines[0].recover(net.now, 1, log.clone(), 1, 10);
    let answer = net.answer(0, 1, 5_000);
    assert!(
        matches!(
            answer.result,
            Ok(JournalOutput::Recovered { highest: 0, .. })
        ),
        "{answer:?}"
    );
    assert!(
        net.machines[0].stats().held > 0,
        "the first rounds were held"
    );
    assert_eq!(net.machines[0].in_flight(), 0);
    let write = Entry {
        first_seq: 1,
        ballot: Ballot::ZERO,
        timestamp_ms: 0,
        events: vec![b"a".to_vec()],
    };
    net.machines[0].append(net.now, 2, log, write, false);
    assert_eq!(net.answer(0, 2, 1_000).result, Ok(JournalOutput::Appended));
}

#[test]
fn a_held_request_fails_at_its_deadline_if_the_replicas_never_catch_up() {
    let mut net = Net::new(12, 0.0);
    with_timeout(&mut net, 1_000);
    // The other nodes cannot reach one another: their handoffs never end.
    for i in 1..NODES as usize {
        for j in i + 1..NODES as usize {
            net.cut.insert((i, j));
        }
    }
    let me = net.machines[0].self_node.clone();
    let l = (0..1000)
        .find(|l| !net.machines[0].replicas(&log_name(*l)).contains(&me))
        .expect("a log node 0 does not replicate");
    net.machines[0].recover(net.now, 1, log_name(l), 1, 10);
    net.drain(0);
    net.run_until(900);
    assert!(net.events.is_empty(), "held, not failed at once");
    let answer = net.answer(0, 1, 600);
    assert!(
        matches!(answer.result, Err(JournalError::Unavailable(_))),
        "{answer:?}"
    );
    assert!(
        net.machines[0].stats().held > 1,
        "sent again until the deadline"
    );
    assert_eq!(net.machines[0].in_flight(), 0, "nothing left held");
}

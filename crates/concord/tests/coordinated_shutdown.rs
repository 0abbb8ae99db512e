//! Coordinated shutdown with in-process nodes on real sockets: the phases run in Akka's
//! order with the tasks layers and users add; a task in `cluster-exiting` runs while
//! remoting is still up (it hands something over to another node); a task that outlives
//! its phase timeout does not block the exit; a downed node runs it too.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::bench_layer::payload_frame;
use common::bench_layer::BenchLayer;
use common::{fast_config, port_of, start_first, wait_for, wait_self_up};
use concord::{Node, Phase};
use concord_core::{Lane, MemberStatus, ShutdownReason};

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_run_in_order_and_an_exiting_task_hands_over_while_remoting_is_up() {
    let (layer_a, probe_a) = BenchLayer::new();
    let a = Node::builder(fast_config("cs", &[]))
        .layer(layer_a)
        .start()
        .await
        .unwrap();
    let me = a.self_address().clone();
    a.cluster().join(me).await.unwrap();
    wait_self_up(&a).await;
    let (layer_b, _) = BenchLayer::new();
    let b = Node::builder(fast_config("cs", &[port_of(&a)]))
        .layer(layer_b)
        .start()
        .await
        .unwrap();
    wait_for("2 Up", || common::count_status(&a, MemberStatus::Up) == 2).await;

    // A task in every phase records the order.
    let order = Arc::new(Mutex::new(Vec::new()));
    for phase in Phase::ALL {
        let order = order.clone();
        b.coordinated_shutdown()
            .add_task(phase, format!("record-{phase}"), move || async move {
                order.lock().unwrap().push(phase);
            })
            .unwrap();
    }
    // The hand-over in cluster-exiting: b is Exiting, remoting is up, a receives it.
    let handed_over = Arc::new(Mutex::new(None));
    {
        let h = handed_over.clone();
        let b2 = b.clone();
        let to = a.self_address().clone();
        let to_uid = a.cluster().self_unique_address().uid;
        let probe = probe_a.clone();
        b.coordinated_shutdown()
            .add_task(Phase::ClusterExiting, "hand-over", move || async move {
                let before = probe.received();
                let remoting_up = !b2.transport().is_shut_down();
                let status = b2.cluster().view().self_member().map(|m| m.status);
                let lane = b2.transport().outbound_lane(&to, Lane::Ordinary);
                let _ = lane
                    .send_wait(payload_frame(to_uid, Bytes::from_static(b"my work")))
                    .await;
                let mut received = false;
                for _ in 0..50 {
                    if probe.received() > before {
                        received = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                *h.lock().unwrap() = Some((remoting_up, status, received));
            })
            .unwrap();
    }

    let reason = tokio::time::timeout(T, b.shutdown()).await.unwrap();
    assert_eq!(reason, ShutdownReason::Requested);
    assert_eq!(*order.lock().unwrap(), Phase::ALL.to_vec(), "Akka's order");
    let (remoting_up, status, received) = handed_over.lock().unwrap().expect("the task ran");
    assert!(remoting_up, "remoting was up in cluster-exiting");
    // Tasks of one phase run together (as in Akka): the membership's own cluster-exiting
    // task waits for Exiting while a layer's starts its hand-over as the node leaves.
    assert!(
        matches!(status, Some(MemberStatus::Leaving | MemberStatus::Exiting)),
        "the node was leaving when its exiting tasks ran: {status:?}"
    );
    assert!(received, "the other node received what was handed over");
    assert!(b.transport().is_shut_down(), "remoting closed at the end");
    assert_eq!(
        b.cluster().membership_ended(),
        Some(ShutdownReason::Removed),
        "it was removed before it stopped"
    );
    wait_for("b removed on a", || a.cluster().view().members.len() == 1).await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_outlives_its_phase_timeout_does_not_block_the_exit() {
    let mut config = fast_config("slow", &[]);
    config.coordinated_shutdown.phases.insert(
        "service-stop".into(),
        concord::config::PhaseConfig {
            timeout: Duration::from_millis(300),
        },
    );
    let a = start_first(config).await;
    wait_self_up(&a).await;
    let later = Arc::new(Mutex::new(false));
    a.coordinated_shutdown()
        .add_task(Phase::ServiceStop, "stuck", std::future::pending::<()>)
        .unwrap();
    {
        let later = later.clone();
        a.coordinated_shutdown()
            .add_task(
                Phase::BeforeActorSystemTerminate,
                "later",
                move || async move {
                    *later.lock().unwrap() = true;
                },
            )
            .unwrap();
    }
    let reason = tokio::time::timeout(T, a.shutdown())
        .await
        .expect("the stuck task does not block the shutdown");
    assert_eq!(reason, ShutdownReason::Requested);
    assert!(*later.lock().unwrap(), "the phases after it ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downed_node_runs_its_coordinated_shutdown() {
    let a = start_first(fast_config("downed", &[])).await;
    wait_self_up(&a).await;
    let b = Node::start(fast_config("downed", &[port_of(&a)]))
        .await
        .unwrap();
    wait_for("2 Up", || common::count_status(&a, MemberStatus::Up) == 2).await;
    let ran = Arc::new(Mutex::new(None));
    {
        let ran = ran.clone();
        let b2 = b.clone();
        b.coordinated_shutdown()
            .add_task(Phase::ClusterExiting, "observe", move || async move {
                *ran.lock().unwrap() = Some(b2.coordinated_shutdown().reason());
            })
            .unwrap();
    }
    a.cluster().down(b.self_address().clone()).await.unwrap();
    let reason = tokio::time::timeout(T, b.terminated()).await.unwrap();
    assert_eq!(reason, ShutdownReason::Downed);
    assert_eq!(*ran.lock().unwrap(), Some(Some(ShutdownReason::Downed)));
    a.stop().await;
}

//! A real network partition between containers: five `concord` containers (the FROM-scratch
//! image of `scripts/docker-image`) on a Docker bridge network form one cluster; the two
//! containers of the minority are cut off with `docker network disconnect`. The Split Brain
//! Resolver (keep-majority) must down the minority, whose processes exit, while the majority
//! removes them and keeps answering `/ready`; after the network is whole again two fresh
//! containers join. Every container and the network are removed when the test ends, also on
//! failure.
//!
//! Needs Docker and the image: run through `scripts/test` (README's test command), or
//! `scripts/docker-image && cargo test -p concord --test docker_partition -- --ignored`.

mod common;

use std::time::Duration;

use common::docker::{docker, DockerNet};
use common::*;

const T: Duration = Duration::from_secs(60);

fn env() -> Vec<(&'static str, &'static str)> {
    let mut env: Vec<(&str, &str)> = FAST_ENV.to_vec();
    env.push(("CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "2s"));
    env
}

#[test]
#[ignore = "needs Docker and the concord image: run scripts/test"]
fn partition_3_2_between_containers_minority_exits_majority_stays_ready() {
    let _s = serial();
    let rt = runtime();
    let mut net = DockerNet::create("partition");
    let env = env();

    // Five nodes; the first seed forms the cluster.
    net.start_node(11, &[11], &env);
    net.wait_until("the first seed forms the cluster", T, || {
        net.all_up(&rt, &[11], &[11])
    });
    for n in 12..=15 {
        net.start_node(n, &[11, 12], &env);
    }
    let all = [11, 12, 13, 14, 15];
    net.wait_until("one cluster of 5", T, || net.all_up(&rt, &all, &all));

    // Partition 3|2: the minority's containers lose the cluster network.
    for n in [14, 15] {
        docker(&["network", "disconnect", &net.name, &net.container(n)]).unwrap();
    }
    net.wait_until("the minority's processes exit", T, || {
        net.exit_code(14).is_some() && net.exit_code(15).is_some()
    });
    for n in [14, 15] {
        assert_eq!(net.exit_code(n), Some(0), "node {n} exits cleanly");
        let log = net.logs(n);
        assert!(
            log.contains("split brain resolver decision"),
            "node {n}'s side decided by SBR:\n{log}"
        );
    }
    let majority = [11, 12, 13];
    net.wait_until("the majority removes the minority", T, || {
        net.all_up(&rt, &majority, &majority)
    });
    for n in majority {
        assert!(
            rt.block_on(net.client(n).ready()).unwrap(),
            "node {n} answers /ready"
        );
    }

    // Heal: the network is whole again (the minority is gone); fresh containers join.
    for n in [16, 17] {
        net.start_node(n, &[11, 12, 13], &env);
    }
    let healed = [11, 12, 13, 16, 17];
    net.wait_until("fresh containers join after the heal", T, || {
        net.all_up(&rt, &healed, &healed)
    });
}

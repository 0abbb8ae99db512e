//! The load-aware allocation strategy inside the machine: loads reach the coordinator's
//! strategy through [`ClusterSharding::set_node_loads`], a saturated node gets no shard,
//! and shards move away from a node that stays loaded.

use std::collections::BTreeMap;

use super::*;
use crate::sharding::{shard_id, LoadAwareAllocationSettings};

/// An entity id in shard `shard` (of 100).
fn entity_in_shard(shard: u32) -> String {
    (0..)
        .map(|i| format!("e{shard}-{i}"))
        .find(|e| shard_id(e, 100) == shard.to_string())
        .expect("some id")
}

/// Gives every machine the same loads.
fn set_loads(c: &mut TestCluster, loads: &[(&UniqueAddress, f64)]) {
    let map: BTreeMap<UniqueAddress, f64> = loads.iter().map(|(n, l)| ((*n).clone(), *l)).collect();
    for n in c.nodes.values_mut() {
        n.machine.set_node_loads(&map);
    }
}

fn entities_on(c: &TestCluster, n: &UniqueAddress) -> usize {
    c.nodes[n].entities.len()
}

#[test]
fn a_saturated_node_gets_no_shard_and_a_loaded_node_gives_shards_up() {
    let settings = ShardingSettings {
        load_aware_allocation: Some(LoadAwareAllocationSettings::default()),
        ..fast_settings()
    };
    let mut c = TestCluster::new(7, settings);
    let n1 = c.add_node(1);
    let n2 = c.add_node(2);
    let n3 = c.add_node(3);
    c.advance(300);
    set_loads(&mut c, &[(&n1, 0.0), (&n2, 0.0), (&n3, 1.0)]);
    let entities: Vec<String> = (0..30).map(entity_in_shard).collect();
    for e in &entities {
        c.tell(&n1, e, "hello", None);
    }
    c.advance(2_500);
    assert_eq!(entities_on(&c, &n3), 0, "the saturated node");
    assert_eq!(entities_on(&c, &n1) + entities_on(&c, &n2), 30);
    let before = entities_on(&c, &n1);
    assert!(before >= 10, "the counts stay balanced: {before} on n1");

    // Now node 1 stays loaded: after `load-sustained-rounds` rounds (1 s apart) it gives
    // shards up, to the node that has none.
    set_loads(&mut c, &[(&n1, 0.9), (&n2, 0.1), (&n3, 0.1)]);
    c.advance(1_500);
    assert_eq!(
        entities_on(&c, &n1),
        before,
        "not before the sustained rounds"
    );
    c.advance(8_000);
    let after = entities_on(&c, &n1);
    assert!(after < before, "n1 went from {before} to {after}");
    assert!(entities_on(&c, &n3) > 0);
    for e in &entities {
        assert_eq!(
            c.received(e),
            vec!["hello".to_string()],
            "{e} kept its state"
        );
    }
}

//! The "Adding a layer" example of the `concord` rustdoc — the ping layer in
//! `crates/concord/examples/ping_layer.rs`, this very file — hosted by the simulator on
//! every node with its real host and effects: every node learns the round trip to every
//! other and answers the layer's command.

use std::collections::BTreeMap;

use concord::host::HostInput;
use concord_core::Address;
use concord_sim::network::NetworkConfig;
use concord_sim::schedule::sim_settings;
use concord_sim::{SimHost, SimRuntime, Simulation};
use futures_channel::oneshot;

#[path = "../../concord/examples/ping_layer.rs"]
#[allow(dead_code)]
mod ping;

use ping::{PingCommand, PingEffects, PingMachine};

type Host = SimHost<PingEffects>;

fn round_trips(sim: &mut Simulation, a: &Address) -> BTreeMap<Address, u64> {
    let (reply, mut rx) = oneshot::channel();
    sim.with_machine::<Host, _>(a, |h, _| {
        h.host
            .handle(HostInput::Command(PingCommand::RoundTrips { reply }))
    });
    rx.try_recv()
        .ok()
        .flatten()
        .expect("the command is answered in its turn")
}

#[test]
fn every_node_learns_the_round_trip_to_every_other() {
    let net = NetworkConfig {
        min_delay_ms: 5,
        max_delay_ms: 5,
        ..NetworkConfig::default()
    };
    let mut sim = Simulation::new(11, sim_settings(), net);
    let clock = sim.clock.clone();
    sim.add_protocol(move |me, _seed| {
        let machine = PingMachine::new(me.clone(), 500, clock_now(&clock));
        Box::new(SimHost::new(
            machine,
            PingEffects::default(),
            me.clone(),
            clock.clone(),
            SimRuntime::new(clock.clone()),
        ))
    });
    let addrs = sim.form_cluster(3, 30_000).expect("forms");
    sim.run_for(2_000);
    for a in &addrs {
        let rtts = round_trips(&mut sim, a);
        let others: Vec<&Address> = addrs.iter().filter(|b| *b != a).collect();
        assert_eq!(
            rtts.keys().collect::<Vec<_>>(),
            others,
            "{a} pinged the others"
        );
        assert!(
            rtts.values().all(|rtt| *rtt == 10),
            "two 5 ms hops: {rtts:?}"
        );
    }
    let hosts = addrs
        .iter()
        .map(|a| sim.machine::<Host>(a).expect("hosted").host.stats())
        .collect::<Vec<_>>();
    assert!(hosts.iter().all(|s| s.transmits > 0 && s.turns > 0));
}

fn clock_now(clock: &concord::host::ManualClock) -> u64 {
    use concord::host::Clock;
    clock.now_ms()
}

//! Scale study: rounds and virtual time to convergence after one join, one leave and one
//! crash, and gossip bytes per node per second at steady state, for clusters of N nodes
//! with Akka's default timings (gossip 1 s, heartbeat 1 s, acceptable pause 3 s,
//! keep-majority with stable-after 20 s).
//!
//! Clusters start from a formed state ([`concord_core::ClusterCore::adopt_initial_state`])
//! rather than from N joins. The study counts messages; turning them into bytes needs the
//! wire encoding (`concord::cluster::codec`): `cargo bench -p concord-sim --bench scale` runs
//! this study and sizes [`ScaleResult::steady_state_gossip`] with the real codec.

use concord_core::settings::ClusterSettings;
use concord_core::{Address, Gossip, Member, MemberStatus};

use crate::network::NetworkConfig;
use crate::sim::{node_address, Simulation};

/// Figures for one cluster size.
#[derive(Clone, Debug, Default)]
pub struct ScaleResult {
    /// Cluster size.
    pub nodes: u32,
    /// Join → new member Up on every node (Akka's "MemberUp seen on all nodes"), ms of virtual time.
    pub join_ms: Option<u64>,
    /// Leave → removed on all others, ms.
    pub leave_ms: Option<u64>,
    /// Crash → unreachable on all others, ms.
    pub crash_unreachable_ms: Option<u64>,
    /// Crash → removed on all others (SBR downs it), ms.
    pub crash_removed_ms: Option<u64>,
    /// Steady state: gossip status messages delivered per node per second.
    pub gossip_status_per_node_per_s: f64,
    /// Steady state: full gossip envelopes delivered per node per second.
    pub gossip_envelopes_per_node_per_s: f64,
    /// The gossip state at steady state (to size status and envelopes with the codec).
    pub steady_state_gossip: Gossip,
    /// Wall-clock seconds the study of this size took.
    pub wall_s: f64,
}

/// A formed cluster of `n` nodes, all Up, everyone in the seen set.
pub fn warm_cluster(sim: &mut Simulation, n: u32) -> Vec<Address> {
    let addrs: Vec<Address> = (0..n).map(node_address).collect();
    let uas: Vec<_> = addrs.iter().map(|a| sim.start_node(a.clone())).collect();
    let mut g = Gossip::empty();
    for (i, ua) in uas.iter().enumerate() {
        let m = Member::joining(ua.clone(), Default::default(), "1.0.0").with_up(i as u32 + 1);
        g.members.insert(ua.clone(), m);
        g.overview.seen.insert(ua.clone());
    }
    g.version = g.version.increment(&uas[0]);
    for a in &addrs {
        let g = g.clone();
        sim.with_node(a, |c, now| c.adopt_initial_state(now, g));
    }
    addrs
}

fn everyone_else(
    sim: &Simulation,
    except: &Address,
    mut f: impl FnMut(&concord_core::ClusterCore) -> bool,
) -> bool {
    sim.running()
        .filter(|(a, _)| *a != except)
        .all(|(_, n)| f(n.core()))
}

/// Runs the study for a cluster of `n`.
pub fn study(n: u32, seed: u64) -> ScaleResult {
    let wall = std::time::Instant::now();
    let settings = ClusterSettings::default();
    let interval = settings.gossip_interval_ms;
    let mut sim = Simulation::new(seed, settings, NetworkConfig::default());
    sim.record_events = false;
    let addrs = warm_cluster(&mut sim, n);
    sim.run_for(3000);
    let mut r = ScaleResult {
        nodes: n,
        ..Default::default()
    };

    // Steady state gossip traffic.
    let before = sim.stats;
    let window = 10_000;
    sim.run_for(window);
    let status = sim.stats.gossip_status - before.gossip_status;
    let envelopes = sim.stats.gossip_envelopes - before.gossip_envelopes;
    r.steady_state_gossip = sim.node(&addrs[0]).core().latest_gossip().clone();
    let secs = window as f64 / 1000.0;
    r.gossip_status_per_node_per_s = status as f64 / f64::from(n) / secs;
    r.gossip_envelopes_per_node_per_s = envelopes as f64 / f64::from(n) / secs;

    // One join.
    let newcomer = node_address(n);
    sim.start_node(newcomer.clone());
    let seed0 = addrs[0].clone();
    sim.with_node(&newcomer, |c, now| c.join(now, &seed0).ok());
    r.join_ms = sim.run_until_cond(300_000, interval / 4, |s| {
        s.running().all(|(_, x)| {
            x.core()
                .latest_gossip()
                .members
                .values()
                .any(|m| m.address() == &newcomer && m.status == MemberStatus::Up)
        })
    });

    // One leave.
    let leaver = addrs[n as usize / 2].clone();
    sim.with_node(&leaver, |c, now| {
        let me = c.self_address().clone();
        c.leave(now, &me).ok()
    });
    r.leave_ms = sim.run_until_cond(300_000, interval / 4, |s| {
        everyone_else(s, &leaver, |c| {
            !c.latest_gossip()
                .members
                .values()
                .any(|m| m.address() == &leaver)
        })
    });

    // One crash.
    let victim = addrs[n as usize / 3].clone();
    sim.crash(&victim);
    let t0 = sim.now;
    r.crash_unreachable_ms = sim.run_until_cond(300_000, 250, |s| {
        everyone_else(s, &victim, |c| {
            c.latest_gossip()
                .overview
                .reachability
                .all_unreachable_or_terminated()
                .iter()
                .any(|u| u.address == victim)
        })
    });
    let removed = sim.run_until_cond(300_000, 500, |s| {
        everyone_else(s, &victim, |c| {
            !c.latest_gossip()
                .members
                .values()
                .any(|m| m.address() == &victim)
        })
    });
    r.crash_removed_ms = removed.map(|_| sim.now - t0);
    r.wall_s = wall.elapsed().as_secs_f64();
    r
}

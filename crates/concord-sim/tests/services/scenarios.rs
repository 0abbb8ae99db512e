//! The scripted scenarios: a join, graceful leaves (own and asked), a crashed host.

use super::checker::*;
use super::*;

#[test]
fn a_join_moves_nothing_and_a_graceful_leave_hands_off_with_no_loss_and_order_kept() {
    let (mut sim, world) = sim(11, 0.0, 0);
    let mut checker = Checker::default();
    let mut addrs = sim.form_cluster(4, 60_000).expect("forms");
    let ok = |s: &Simulation| services_converged(s).is_ok();
    run_until(&mut sim, &world, &mut checker, 20_000, ok)
        .unwrap()
        .expect("placed");
    run_checked(&mut sim, &world, &mut checker, 3_000, &[], true).unwrap();
    // A join moves nothing: the same table, no instance started or stopped.
    let before = host(&sim, &addrs[0]).unwrap().inner.state().table.clone();
    let intervals = world.borrow().intervals.len();
    let joiner = concord_sim::node_address(4);
    sim.start_node(joiner.clone());
    let seed = addrs[0].clone();
    sim.with_node(&joiner, |c, now| c.join_seed_nodes(now, &[seed]).ok());
    addrs.push(joiner.clone());
    // The joiner sends once it is a member everywhere (others drop strangers' messages).
    let quiet = [joiner.clone()];
    let end = sim.now + 30_000;
    while !sim.all_up_converged() {
        assert!(sim.now < end, "the joiner is Up");
        run_checked(&mut sim, &world, &mut checker, 100, &quiet, true).unwrap();
    }
    run_checked(&mut sim, &world, &mut checker, 3_000, &[], true).unwrap();
    for a in &addrs {
        assert_eq!(
            host(&sim, a).unwrap().inner.state().table,
            before,
            "a join moved an instance"
        );
    }
    assert_eq!(
        world.borrow().intervals.len(),
        intervals,
        "a join moved nothing"
    );

    // The host of `solo` leaves gracefully: it drains (coordinated shutdown), and leaves
    // once it hosts nothing; every member keeps sending meanwhile.
    let leaver_ua = solo_host(&sim, &addrs[0]).expect("placed");
    let leaver = addrs[address_index(&addrs, &leaver_ua)].clone();
    let quiet = [leaver.clone()];
    sim.with_machine::<Host, _>(&leaver, |h, now| h.machine.drain(now));
    let drained_in = {
        let start = sim.now;
        loop {
            run_checked(&mut sim, &world, &mut checker, 100, &quiet, true).unwrap();
            if host(&sim, &leaver).unwrap().inner.hosts_nothing() {
                break sim.now - start;
            }
            assert!(sim.now - start < DRAIN_TIMEOUT_MS, "drained in time");
        }
    };
    let target = leaver.clone();
    sim.with_node(&leaver, |c, now| c.leave(now, &target).ok());
    run_checked(&mut sim, &world, &mut checker, 5_000, &quiet, true).unwrap();
    let took = run_until(&mut sim, &world, &mut checker, 60_000, |s| {
        !s.node(&leaver).is_running() && s.all_up_converged() && services_converged(s).is_ok()
    })
    .unwrap();
    assert!(
        took.is_some(),
        "converged after the leave: {:?}",
        services_converged(&sim)
    );
    let new_host = solo_host(&sim, &addrs[0]).unwrap();
    assert_ne!(new_host, leaver_ua, "solo moved");
    let h = &world.borrow().intervals;
    let old = h
        .iter()
        .find(|i| i.node == leaver_ua && i.path.as_str() == SOLO)
        .unwrap();
    let new = h
        .iter()
        .find(|i| i.node == new_host && i.path.as_str() == SOLO)
        .unwrap();
    assert!(old.end.unwrap() <= new.start, "handed off, not overlapped");
    assert_eq!(checker.max_solo, 1, "never two instances of solo");
    assert_eq!(checker.zombies, 0);
    assert_eq!(check_order(&world).unwrap(), 0);
    // No message lost nor duplicated: each sender's messages, each once, in order.
    for a in &addrs {
        let Some(h) = host(&sim, a) else { continue };
        let got = delivered_from(&world, &h.me);
        assert_eq!(
            got,
            (0..h.sent.len() as u64).collect::<Vec<_>>(),
            "{}: each message once, in order",
            h.me
        );
        assert_eq!(
            h.inner.stats().dropped,
            BTreeMap::new(),
            "{}: nothing dropped",
            h.me
        );
    }
    let lh = host(&sim, &leaver).unwrap();
    assert!(lh.inner.stats().handoffs >= 1, "a graceful handoff");
    let solo = path(SOLO);
    eprintln!(
        "drained in {drained_in} ms; {} solo messages delivered",
        world
            .borrow()
            .deliveries
            .iter()
            .filter(|d| d.path == solo)
            .count()
    );
}

#[test]
fn a_leave_from_elsewhere_hands_off_in_the_exiting_phase_without_overlap() {
    for seed in 0..10 {
        let (mut sim, world) = sim(100 + seed, 0.0, 0);
        let mut checker = Checker::default();
        let addrs = sim.form_cluster(4, 60_000).expect("forms");
        let ok = |s: &Simulation| services_converged(s).is_ok();
        run_until(&mut sim, &world, &mut checker, 20_000, ok)
            .unwrap()
            .expect("placed");
        run_checked(&mut sim, &world, &mut checker, 2_000, &[], true).unwrap();
        let leaver_ua = solo_host(&sim, &addrs[0]).expect("placed");
        let leaver = addrs[address_index(&addrs, &leaver_ua)].clone();
        let other = addrs.iter().find(|a| **a != leaver).unwrap().clone();
        // Another node asks it to leave: it goes Leaving, then Exiting, and drains in its
        // coordinated shutdown (started by Exiting).
        let target = leaver.clone();
        sim.with_node(&other, |c, now| c.leave(now, &target).ok());
        let quiet = [leaver.clone()];
        run_checked(&mut sim, &world, &mut checker, 5_000, &quiet, true)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let took = run_until(&mut sim, &world, &mut checker, 60_000, |s| {
            !s.node(&leaver).is_running() && s.all_up_converged() && services_converged(s).is_ok()
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(
            took.is_some(),
            "seed {seed}: converged: {:?}",
            services_converged(&sim)
        );
        assert_eq!(checker.max_solo, 1, "seed {seed}: never two instances");
        assert_eq!(checker.zombies, 0, "seed {seed}");
        check_order(&world).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let lh = host(&sim, &leaver).unwrap();
        assert!(lh.inner.stats().handoffs >= 1, "seed {seed}: handed off");
    }
}

#[test]
fn a_crashed_host_is_replaced_after_it_is_downed_losing_only_around_the_crash() {
    let (mut sim, world) = sim(21, 0.0, 0);
    let mut checker = Checker::default();
    let addrs = sim.form_cluster(5, 60_000).expect("forms");
    let ok = |s: &Simulation| services_converged(s).is_ok();
    run_until(&mut sim, &world, &mut checker, 20_000, ok)
        .unwrap()
        .expect("placed");
    run_checked(&mut sim, &world, &mut checker, 3_000, &[], true).unwrap();
    let crashed_ua = solo_host(&sim, &addrs[0]).unwrap();
    let crashed = addrs[address_index(&addrs, &crashed_ua)].clone();
    sim.crash(&crashed);
    let crashed_at = sim.now;
    // Traffic goes on; the others see it unreachable, the resolver downs it, the leader
    // removes it and places `solo` afresh.
    let quiet = [crashed.clone()];
    let mut moved_at = None;
    let start = sim.now;
    while sim.now - start < 60_000 {
        run_checked(&mut sim, &world, &mut checker, 100, &quiet, true).unwrap();
        let now_on = running_on(&sim, SOLO);
        if moved_at.is_none() && now_on.len() == 1 && now_on[0] != crashed {
            moved_at = Some(sim.now);
        }
        if moved_at.is_some_and(|t| sim.now > t + 6_000) {
            break;
        }
    }
    let moved_at = moved_at.expect("solo runs elsewhere");
    run_until(&mut sim, &world, &mut checker, 60_000, |s| {
        s.all_up_converged() && services_converged(s).is_ok()
    })
    .unwrap()
    .expect("converged");
    // The new instance started only once the crashed node was downed and removed in the
    // writer's view (the checker), and never two at once among running nodes.
    assert_eq!(checker.max_solo, 1);
    assert_eq!(checker.zombies, 0);
    assert_eq!(check_order(&world).unwrap(), 0);
    let new = world
        .borrow()
        .intervals
        .iter()
        .find(|i| i.path.as_str() == SOLO && i.node != crashed_ua)
        .map(|i| i.start)
        .unwrap();
    // Failure detection + stable-after (2 s) at least.
    assert!(new >= crashed_at + 2_000, "waited for the resolver");
    // Losses only around the crash: what was sent to the crashed host before the others
    // stopped routing to it.
    for a in addrs.iter().filter(|a| **a != crashed) {
        let h = host(&sim, a).unwrap();
        let got: BTreeSet<u64> = delivered_from(&world, &h.me).into_iter().collect();
        for (seq, at) in h.sent.iter().enumerate() {
            if !got.contains(&(seq as u64)) {
                assert!(
                    *at + 100 >= crashed_at && *at <= moved_at,
                    "{}: message {seq} sent at {at} lost (crash at {crashed_at}, moved at {moved_at})",
                    h.me
                );
            }
        }
    }
    eprintln!(
        "solo ran again {} ms after the crash",
        new.saturating_sub(crashed_at)
    );
}

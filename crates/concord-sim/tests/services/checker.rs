//! The invariants checked at every step, convergence after heal, traffic and tracing.

use super::*;

/// The checks run after every step, and what they saw.
#[derive(Default)]
pub(crate) struct Checker {
    /// The most instances of `solo` running at once among running nodes.
    pub(crate) max_solo: usize,
    /// Steps (100 ms) with more than one `solo` instance running (a zombie among them).
    pub(crate) zombie_steps: u64,
    /// Overlaps allowed because one of the two nodes had been written off (a zombie).
    pub(crate) zombies: u64,
}

impl Checker {
    /// Closes the intervals of nodes that no longer run (crashed or shut down), then checks
    /// every new start against the instances still running.
    pub(crate) fn step(&mut self, sim: &Simulation, world: &Shared) -> Result<(), String> {
        let mut w = world.borrow_mut();
        if let Some(e) = w.errors.first() {
            return Err(e.clone());
        }
        let running: BTreeSet<UniqueAddress> = sim
            .running()
            .map(|(_, n)| n.core().self_unique_address().clone())
            .collect();
        let now = sim.now;
        for i in w.intervals.iter_mut() {
            if i.end.is_none() && !running.contains(&i.node) {
                i.end = Some(now);
            }
        }
        let new: Vec<usize> = (0..w.intervals.len())
            .filter(|i| !w.intervals[*i].checked)
            .collect();
        for b in new {
            w.intervals[b].checked = true;
            let started = w.intervals[b].clone();
            let standing = match &started.state.1 {
                Some(writer) => w.standing.get(&(started.state.0, writer.clone())).cloned(),
                None => None,
            };
            let others: Vec<Interval> = w
                .intervals
                .iter()
                .filter(|a| {
                    a.path == started.path
                        && a.node != started.node
                        && a.start <= started.start
                        && a.end.is_none_or(|e| e > started.start)
                })
                .cloned()
                .collect();
            // A node written off before it started the instance (it acted on a state it
            // held while paused or cut off) runs a zombie itself.
            let zombie_start = w
                .written_off
                .get(&started.node)
                .is_some_and(|t| *t <= started.start);
            if zombie_start {
                if !others.is_empty() {
                    self.zombies += others.len() as u64;
                    let at = w
                        .zombie_since
                        .entry(started.node.clone())
                        .or_insert(started.start);
                    *at = (*at).min(started.start);
                }
                continue;
            }
            let (live, zombies): (Vec<&Interval>, Vec<&Interval>) = others
                .iter()
                .partition(|a| standing.as_ref().is_none_or(|s| s.contains(&a.node)));
            if live.len() + 1 > wanted(&started.path) {
                return Err(format!(
                    "{} instance(s) of {} at once: {} started at {} (state {:?}) while {:?} ran \
                     on nodes its writer had not written off",
                    live.len() + 1,
                    started.path,
                    started.node,
                    started.start,
                    started.state,
                    live.iter()
                        .map(|a| (a.node.to_string(), a.start))
                        .collect::<Vec<_>>()
                ));
            }
            for z in zombies {
                self.zombies += 1;
                let at = w
                    .zombie_since
                    .entry(z.node.clone())
                    .or_insert(started.start);
                *at = (*at).min(started.start);
            }
        }
        if let Some(z) = w.intervals.iter().find(|i| {
            i.end.is_none()
                && w.written_off
                    .get(&i.node)
                    .is_some_and(|t| now > t + ZOMBIE_MAX_MS)
        }) {
            return Err(format!(
                "{} still runs {} more than {ZOMBIE_MAX_MS} ms after it was written off",
                z.node, z.path
            ));
        }
        drop(w);
        let solo = running_on(sim, SOLO).len();
        self.max_solo = self.max_solo.max(solo);
        if solo > 1 {
            self.zombie_steps += 1;
        }
        Ok(())
    }
}

/// Each sender's `solo` messages are delivered in strictly increasing order (leaving out a
/// zombie's deliveries after a new instance started), and in order at each node. Returns
/// the zombie deliveries left out.
pub(crate) fn check_order(world: &Shared) -> Result<usize, String> {
    let w = world.borrow();
    let solo = path(SOLO);
    let mut last: BTreeMap<&UniqueAddress, &Delivery> = BTreeMap::new();
    let mut at_node: BTreeMap<(&UniqueAddress, &UniqueAddress), u64> = BTreeMap::new();
    let mut skipped = 0;
    for d in w.deliveries.iter().filter(|d| d.path == solo) {
        if let Some(prev) = at_node.insert((&d.node, &d.sender), d.seq) {
            if d.seq <= prev {
                return Err(format!(
                    "{} got {}'s message {} after {prev} (at {})",
                    d.node, d.sender, d.seq, d.at
                ));
            }
        }
        if w.zombie_since.get(&d.node).is_some_and(|z| d.at >= *z) {
            skipped += 1;
            continue;
        }
        if let Some(prev) = last.insert(&d.sender, d) {
            if d.seq <= prev.seq {
                return Err(format!(
                    "{}'s message {} delivered on {} at {} after its message {} on {} at {}",
                    d.sender, d.seq, d.node, d.at, prev.seq, prev.node, prev.at
                ));
            }
        }
    }
    Ok(skipped)
}

/// The sequence numbers of `sender`'s `solo` messages delivered, in delivery order.
pub(crate) fn delivered_from(world: &Shared, sender: &UniqueAddress) -> Vec<u64> {
    let solo = path(SOLO);
    world
        .borrow()
        .deliveries
        .iter()
        .filter(|d| d.path == solo && &d.sender == sender)
        .map(|d| d.seq)
        .collect()
}

/// After heal and quiet: the same state everywhere, nothing pending, each path's instances
/// exactly where the table names them.
pub(crate) fn services_converged(sim: &Simulation) -> Result<(), String> {
    let members: Vec<(&Address, UniqueAddress)> = sim
        .running()
        .filter(|(_, n)| n.core().is_initialized())
        .map(|(a, n)| (a, n.core().self_unique_address().clone()))
        .collect();
    if members.is_empty() {
        return Err("no member".into());
    }
    let hosts: Vec<&ServicesHost> = members
        .iter()
        .map(|(a, _)| host(sim, a).ok_or("no services host"))
        .collect::<Result<_, _>>()?;
    let state = hosts[0].inner.state();
    if let Some(h) = hosts.iter().find(|h| h.inner.state() != state) {
        return Err(format!(
            "states differ: {} has {:?}, {} has {:?}",
            hosts[0].me,
            state.digest(),
            h.me,
            h.inner.state().digest()
        ));
    }
    if !state.pending.is_empty() {
        return Err(format!("pending {:?}", state.pending));
    }
    for (p, n) in [(SOLO, 1), (PAIR, 2.min(members.len()))] {
        let p = path(p);
        let mut named: Vec<UniqueAddress> = state.table.instances(&p).unwrap_or(&[]).to_vec();
        named.sort();
        if named.len() != n {
            return Err(format!("{p} has {} instances: {named:?}", named.len()));
        }
        let mut runs: Vec<UniqueAddress> = hosts
            .iter()
            .filter(|h| h.open.contains_key(&p) || h.inner.is_running(&p))
            .map(|h| h.me.clone())
            .collect();
        runs.sort();
        if runs != named {
            return Err(format!("{p} named on {named:?} but runs on {runs:?}"));
        }
        if let Some(h) = hosts
            .iter()
            .find(|h| named.contains(&h.me) && !(h.open.contains_key(&p) && h.inner.is_running(&p)))
        {
            return Err(format!("{p}: {} is named but does not run it", h.me));
        }
    }
    Ok(())
}

/// Every member (Up in its own view) sends one message to `solo`; every third step also
/// one to `pair`.
pub(crate) fn traffic(sim: &mut Simulation, except: &[Address], step: u64) {
    for a in up_members(sim) {
        if except.contains(&a) {
            continue;
        }
        sim.with_machine::<Host, _>(&a, |h, now| {
            let out = h.machine.send_solo(now);
            if step.is_multiple_of(3) {
                h.machine.send_pair(now);
            }
            out
        });
    }
}

/// Runs `ms` in 100 ms steps with traffic (from members not in `quiet`), checking at each.
pub(crate) fn run_checked(
    sim: &mut Simulation,
    world: &Shared,
    checker: &mut Checker,
    ms: u64,
    quiet: &[Address],
    send: bool,
) -> Result<(), String> {
    let end = sim.now + ms;
    let mut step = 0;
    while sim.now < end {
        if send {
            traffic(sim, quiet, step);
        }
        step += 1;
        sim.run_for(100);
        if std::env::var("CONCORD_SIM_TRACE").is_ok() {
            trace(sim);
        }
        checker.step(sim, world)?;
    }
    Ok(())
}

/// Runs without traffic until `cond`, checking each step; the time it took.
pub(crate) fn run_until(
    sim: &mut Simulation,
    world: &Shared,
    checker: &mut Checker,
    max_ms: u64,
    cond: impl Fn(&Simulation) -> bool,
) -> Result<Option<u64>, String> {
    let start = sim.now;
    while sim.now - start <= max_ms {
        if std::env::var("CONCORD_SIM_TRACE").is_ok() {
            trace(sim);
        }
        checker.step(sim, world)?;
        if cond(sim) {
            return Ok(Some(sim.now - start));
        }
        sim.run_for(100);
    }
    Ok(None)
}

/// `host#uid` in short: the last octet and the uid's last three digits.
pub(crate) fn short(n: &UniqueAddress) -> String {
    let host = n.address.host.rsplit('.').next().unwrap_or_default();
    format!("{host}#{}", n.uid % 1000)
}

pub(crate) fn trace(sim: &Simulation) {
    for (a, n) in sim.nodes.iter() {
        let s = host(sim, a).map(|h| {
            let st = h.inner.state();
            let table: Vec<String> = st
                .table
                .iter()
                .map(|(p, ns)| {
                    let ns: Vec<String> = ns.iter().map(short).collect();
                    format!("{p}:{}", ns.join(","))
                })
                .collect();
            let pending: Vec<String> = st
                .pending
                .iter()
                .map(|c| {
                    format!(
                        "{}:{}->{}",
                        c.path,
                        c.from.as_ref().map_or("-".into(), short),
                        short(&c.to)
                    )
                })
                .collect();
            format!(
                "v{}/{} {table:?} pending {pending:?} hosting {:?}",
                st.version,
                st.writer.as_ref().map_or("-".into(), short),
                h.inner.local_hosting()
            )
        });
        eprintln!(
            "    {} {} {} {}",
            sim.now,
            a.host,
            s.unwrap_or_default(),
            n.membership_line()
        );
    }
}

pub(crate) fn solo_host(sim: &Simulation, a: &Address) -> Option<UniqueAddress> {
    host(sim, a)?
        .inner
        .state()
        .table
        .instances(&path(SOLO))?
        .first()
        .cloned()
}

pub(crate) fn address_index(addrs: &[Address], ua: &UniqueAddress) -> usize {
    addrs
        .iter()
        .position(|a| *a == ua.address)
        .expect("a known address")
}

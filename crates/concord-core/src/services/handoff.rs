//! The node-local half of [`ServicesMachine`]: following the state (which instances run
//! here), the graceful handoff messages, and where an arriving service message goes
//! (delivered, kept, held for order, forwarded). See the machine's module docs.

use std::collections::VecDeque;

use super::hosting::{Buffered, Hosting, ServicesDrop, ServicesEvent};
use super::machine::{Held, ServicesMachine};
use super::{PartitionChange, PartitionPath, ServicesMessage};
use crate::address::UniqueAddress;
use rand::Rng;

impl ServicesMachine {
    fn change_from_me(&self, path: &PartitionPath) -> Option<PartitionChange> {
        self.state
            .pending
            .iter()
            .find(|c| &c.path == path && c.from.as_ref() == Some(&self.me))
            .cloned()
    }

    fn change_to_me(&self, path: &PartitionPath) -> Option<PartitionChange> {
        self.state
            .pending
            .iter()
            .find(|c| &c.path == path && c.to == self.me)
            .cloned()
    }

    fn in_table(&self, path: &PartitionPath) -> bool {
        self.state
            .table
            .instances(path)
            .is_some_and(|n| n.contains(&self.me))
    }

    fn start(&mut self, now_ms: u64, path: &PartitionPath, buffer: VecDeque<Buffered>) {
        self.hosting.insert(path.clone(), Hosting::Running);
        self.out
            .events
            .push_back(ServicesEvent::StartInstance { path: path.clone() });
        self.replay(now_ms, path, buffer);
    }

    fn stop(&mut self, path: &PartitionPath, to: Option<UniqueAddress>) {
        self.hosting.insert(
            path.clone(),
            Hosting::Stopping {
                to,
                buffer: VecDeque::new(),
            },
        );
        self.out
            .events
            .push_back(ServicesEvent::StopInstance { path: path.clone() });
    }

    /// Passes kept messages and markers on in order, through the path's current hosting.
    fn replay(&mut self, now_ms: u64, path: &PartitionPath, buffer: VecDeque<Buffered>) {
        for item in buffer {
            match item {
                Buffered::Message { sender, payload } => {
                    self.accept_local(now_ms, path.clone(), sender, payload, 1)
                }
                Buffered::Drained { sender, next } => self.drained_to(now_ms, path, sender, &next),
            }
        }
    }

    fn drained_to(
        &mut self,
        now_ms: u64,
        path: &PartitionPath,
        sender: UniqueAddress,
        next: &UniqueAddress,
    ) {
        if next == &self.me {
            self.on_drained(now_ms, path.clone(), sender);
        } else {
            self.transmit(
                next,
                ServicesMessage::Drained {
                    path: path.clone(),
                    sender,
                },
            );
        }
    }

    /// Brings the local instances in line with the state (see the machine's docs).
    pub(super) fn reconcile(&mut self, now_ms: u64) {
        let mut paths: Vec<PartitionPath> = self.state.table.instances_on(&self.me);
        paths.extend(
            self.state
                .pending
                .iter()
                .filter(|c| c.to == self.me || c.from.as_ref() == Some(&self.me))
                .map(|c| c.path.clone()),
        );
        paths.extend(self.hosting.keys().cloned());
        paths.sort();
        paths.dedup();
        for path in paths {
            self.reconcile_path(now_ms, &path);
        }
    }

    fn reconcile_path(&mut self, now_ms: u64, path: &PartitionPath) {
        if !self.policies.contains_key(path) {
            return;
        }
        let current = self.hosting.get(path).cloned();
        if let Some(change) = self.change_from_me(path) {
            let to = change.to.clone();
            match current {
                Some(Hosting::Running) => {
                    self.hosting
                        .insert(path.clone(), Hosting::Preparing { to: to.clone() });
                    self.send_prepare(path, &to);
                }
                Some(Hosting::Preparing { to: was }) if was != to => {
                    self.hosting
                        .insert(path.clone(), Hosting::Preparing { to: to.clone() });
                    self.send_prepare(path, &to);
                }
                Some(Hosting::Moved { to: was, .. }) if was != to => {
                    // Handed to a node that is gone; the leader moved the change on.
                    self.hosting.remove(path);
                    self.finish_hand_over(now_ms, path, change, VecDeque::new());
                }
                None | Some(Hosting::Arriving { .. }) => {
                    // Nothing runs here: hand over at once.
                    let buffer = match self.hosting.remove(path) {
                        Some(Hosting::Arriving { buffer, .. }) => buffer,
                        _ => VecDeque::new(),
                    };
                    self.finish_hand_over(now_ms, path, change, buffer);
                }
                _ => {}
            }
            return;
        }
        if self.in_table(path) {
            match current {
                None | Some(Hosting::Moved { .. }) => self.start(now_ms, path, VecDeque::new()),
                Some(Hosting::Preparing { .. }) => {
                    self.hosting.insert(path.clone(), Hosting::Running);
                }
                Some(Hosting::Arriving { buffer, .. }) => self.start(now_ms, path, buffer),
                Some(Hosting::Running | Hosting::Stopping { .. }) => {}
            }
            return;
        }
        if let Some(change) = self.change_to_me(path) {
            match (change.from.clone(), current) {
                (None, None | Some(Hosting::Moved { .. })) => {
                    self.start(now_ms, path, VecDeque::new());
                    self.reports.insert(change);
                }
                (None, Some(Hosting::Arriving { buffer, .. })) => {
                    self.start(now_ms, path, buffer);
                    self.reports.insert(change);
                }
                (None, Some(Hosting::Running | Hosting::Preparing { .. })) => {
                    self.reports.insert(change);
                }
                (Some(from), None) => {
                    self.hosting.insert(
                        path.clone(),
                        Hosting::Arriving {
                            from: Some(from),
                            version: self.state.version,
                            since_ms: now_ms,
                            buffer: VecDeque::new(),
                        },
                    );
                }
                _ => {}
            }
            return;
        }
        // Not this node's any more.
        match current {
            Some(Hosting::Running | Hosting::Preparing { .. }) => self.stop(path, None),
            Some(Hosting::Arriving { version, .. }) if self.state.version >= version => {
                if let Some(Hosting::Arriving { buffer, .. }) = self.hosting.remove(path) {
                    self.replay(now_ms, path, buffer);
                }
            }
            _ => {}
        }
    }

    fn send_prepare(&mut self, path: &PartitionPath, to: &UniqueAddress) {
        let version = self.state.version;
        self.transmit(
            to,
            ServicesMessage::Prepare {
                path: path.clone(),
                version,
            },
        );
    }

    /// The host's answer to [`ServicesEvent::StopInstance`]: the instance of `path` has
    /// stopped (after handling what it held). What arrived meanwhile follows the state: to
    /// the new host (handoff), back into a restarted instance (the change was dropped), or
    /// routed again (the path left this node).
    pub fn instance_stopped(&mut self, now_ms: u64, path: &PartitionPath) {
        let Some(Hosting::Stopping { buffer, .. }) = self.hosting.get(path).cloned() else {
            return;
        };
        self.hosting.remove(path);
        if let Some(change) = self.change_from_me(path) {
            self.finish_hand_over(now_ms, path, change, buffer);
        } else if self.in_table(path) {
            self.start(now_ms, path, buffer);
        } else if let Some(change) = self.change_to_me(path) {
            match change.from {
                // Another node hands it over: wait for its `HandOver`.
                Some(from) => {
                    self.hosting.insert(
                        path.clone(),
                        Hosting::Arriving {
                            from: Some(from),
                            version: self.state.version,
                            since_ms: now_ms,
                            buffer,
                        },
                    );
                }
                None => {
                    self.start(now_ms, path, buffer);
                    self.reports.insert(change);
                }
            }
        } else {
            self.replay(now_ms, path, buffer);
        }
    }

    /// Step 4: `HandOver` to the new host, what was kept after it, then `Complete` to the
    /// leader (repeated each interval until the state shows it).
    fn finish_hand_over(
        &mut self,
        now_ms: u64,
        path: &PartitionPath,
        change: PartitionChange,
        buffer: VecDeque<Buffered>,
    ) {
        let to = change.to.clone();
        self.transmit(&to, ServicesMessage::HandOver { path: path.clone() });
        self.hosting.insert(
            path.clone(),
            Hosting::Moved {
                to,
                since_ms: now_ms,
            },
        );
        self.replay(now_ms, path, buffer);
        self.stats.handoffs += 1;
        self.reports.insert(change);
        self.send_reports(now_ms);
    }

    pub(super) fn send_reports(&mut self, now_ms: u64) {
        let Some(leader) = self.leader() else {
            return;
        };
        let reports: Vec<PartitionChange> = self.reports.iter().cloned().collect();
        if leader == self.me {
            self.completed.extend(reports);
            self.leader_act(now_ms);
        } else {
            for change in reports {
                self.transmit(&leader, ServicesMessage::Complete { change });
            }
        }
    }

    pub(super) fn on_prepare(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        path: PartitionPath,
        version: u64,
    ) {
        if !self.policies.contains_key(&path) {
            self.drop_one(ServicesDrop::Unregistered);
            return;
        }
        let announced = self
            .change_to_me(&path)
            .is_some_and(|c| c.from.as_ref() == Some(from));
        if !announced && version <= self.state.version {
            // A late retry for a change this node's state no longer has.
            self.drop_one(ServicesDrop::Stale);
            return;
        }
        if !self.hosting.contains_key(&path) {
            self.hosting.insert(
                path.clone(),
                Hosting::Arriving {
                    from: Some(from.clone()),
                    version,
                    since_ms: now_ms,
                    buffer: VecDeque::new(),
                },
            );
        }
        self.transmit(from, ServicesMessage::Ready { path });
    }

    pub(super) fn on_ready(&mut self, _now_ms: u64, from: &UniqueAddress, path: PartitionPath) {
        if let Some(Hosting::Preparing { to }) = self.hosting.get(&path) {
            if to == from {
                let to = to.clone();
                self.stop(&path, Some(to));
            }
        }
    }

    /// Starts the instance only for the handoff this node expects from `from` (its
    /// `Prepare` made it `Arriving`, or its state announces the change): a stray or late
    /// `HandOver` never starts a second instance.
    pub(super) fn on_hand_over(&mut self, now_ms: u64, from: &UniqueAddress, path: PartitionPath) {
        if !self.policies.contains_key(&path) {
            self.drop_one(ServicesDrop::Unregistered);
            return;
        }
        let announced = self
            .change_to_me(&path)
            .is_some_and(|c| c.from.as_ref() == Some(from));
        match self.hosting.get(&path) {
            Some(Hosting::Arriving { from: Some(f), .. }) if f == from => {
                if let Some(Hosting::Arriving { buffer, .. }) = self.hosting.remove(&path) {
                    self.start(now_ms, &path, buffer);
                }
            }
            None if announced => self.start(now_ms, &path, VecDeque::new()),
            _ => self.drop_one(ServicesDrop::Stale),
        }
    }

    /// A service message from `sender` (possibly this node).
    pub(super) fn on_deliver(
        &mut self,
        now_ms: u64,
        sender: &UniqueAddress,
        path: PartitionPath,
        payload: Vec<u8>,
        hold_for: Option<UniqueAddress>,
    ) {
        if !self.policies.contains_key(&path) {
            self.drop_one(ServicesDrop::Unregistered);
            return;
        }
        let key = (path.clone(), sender.clone());
        if let Some(prev) = hold_for {
            if prev != self.me && self.early_drained.remove(&key).is_none() {
                if self.buffered() >= self.settings.buffer_size {
                    self.drop_one(ServicesDrop::BufferFull);
                    return;
                }
                self.held
                    .entry(key)
                    .or_insert_with(|| Held {
                        since_ms: now_ms,
                        queue: VecDeque::new(),
                    })
                    .queue
                    .push_back(payload);
                return;
            }
        }
        if self.held.contains_key(&key) {
            if self.buffered() >= self.settings.buffer_size {
                self.drop_one(ServicesDrop::BufferFull);
            } else if let Some(held) = self.held.get_mut(&key) {
                held.queue.push_back(payload);
            }
            return;
        }
        self.accept_local(now_ms, path, sender.clone(), payload, 0);
    }

    /// Where a message for `path` goes on this node: to the running instance, kept while it
    /// stops or starts, forwarded after a handoff, or routed again (`hops` so far).
    pub(super) fn accept_local(
        &mut self,
        _now_ms: u64,
        path: PartitionPath,
        sender: UniqueAddress,
        payload: Vec<u8>,
        hops: u8,
    ) {
        let full = self.buffered() >= self.settings.buffer_size;
        match self.hosting.get_mut(&path) {
            Some(Hosting::Running | Hosting::Preparing { .. }) => {
                self.stats.delivered += 1;
                self.out.events.push_back(ServicesEvent::Deliver {
                    path,
                    sender,
                    payload,
                });
            }
            Some(Hosting::Stopping { buffer, .. } | Hosting::Arriving { buffer, .. }) => {
                if full {
                    self.drop_one(ServicesDrop::BufferFull);
                } else {
                    buffer.push_back(Buffered::Message { sender, payload });
                }
            }
            Some(Hosting::Moved { to, .. }) => {
                let to = to.clone();
                self.forward(&to, path, sender, payload, hops);
            }
            None => {
                let others: Vec<UniqueAddress> = self
                    .state
                    .table
                    .instances(&path)
                    .unwrap_or(&[])
                    .iter()
                    .filter(|n| **n != self.me && self.members.contains(n))
                    .cloned()
                    .collect();
                if others.is_empty() {
                    self.drop_one(ServicesDrop::NoInstance);
                } else {
                    let to = others[self.rng.random_range(0..others.len())].clone();
                    self.forward(&to, path, sender, payload, hops);
                }
            }
        }
    }

    fn forward(
        &mut self,
        to: &UniqueAddress,
        path: PartitionPath,
        sender: UniqueAddress,
        payload: Vec<u8>,
        hops: u8,
    ) {
        self.stats.forwarded += 1;
        self.transmit(
            to,
            ServicesMessage::Forward {
                path,
                sender,
                payload,
                hops,
            },
        );
    }

    /// `sender`'s next messages for `path` go to `next`: pass the marker on after what the
    /// sender sent here.
    pub(super) fn on_flush(
        &mut self,
        now_ms: u64,
        sender: &UniqueAddress,
        path: PartitionPath,
        next: UniqueAddress,
    ) {
        if !self.policies.contains_key(&path) || !self.members.contains(&next) {
            self.drop_one(ServicesDrop::Stale);
            return;
        }
        let full = self.buffered() >= self.settings.buffer_size;
        match self.hosting.get_mut(&path) {
            Some(Hosting::Stopping { buffer, .. } | Hosting::Arriving { buffer, .. }) if !full => {
                buffer.push_back(Buffered::Drained {
                    sender: sender.clone(),
                    next,
                });
            }
            _ => self.drained_to(now_ms, &path, sender.clone(), &next),
        }
    }

    /// Everything `sender` sent to its previous host for `path` has been passed on: its
    /// held messages go, in order.
    pub(super) fn on_drained(&mut self, now_ms: u64, path: PartitionPath, sender: UniqueAddress) {
        if !self.policies.contains_key(&path) {
            self.drop_one(ServicesDrop::Unregistered);
            return;
        }
        let key = (path.clone(), sender.clone());
        match self.held.remove(&key) {
            Some(held) => {
                for payload in held.queue {
                    self.accept_local(now_ms, path.clone(), sender.clone(), payload, 0);
                }
            }
            None => {
                if self.early_drained.len() < self.settings.buffer_size {
                    self.early_drained.insert(key, now_ms);
                }
            }
        }
    }

    /// Repeats the handoff messages that may have been lost: `Prepare`s and `Complete`s.
    pub(super) fn retry_handoffs(&mut self, now_ms: u64) {
        let preparing: Vec<(PartitionPath, UniqueAddress)> = self
            .hosting
            .iter()
            .filter_map(|(p, h)| match h {
                Hosting::Preparing { to } => Some((p.clone(), to.clone())),
                _ => None,
            })
            .collect();
        for (path, to) in preparing {
            self.send_prepare(&path, &to);
        }
        self.send_reports(now_ms);
    }

    /// Held messages whose marker did not come within `handoff-timeout` go; forwarding
    /// records and early markers older than it are forgotten.
    pub(super) fn expire(&mut self, now_ms: u64) {
        let timeout = self.settings.handoff_timeout_ms;
        let old = |since: u64| now_ms.saturating_sub(since) >= timeout;
        let late: Vec<(PartitionPath, UniqueAddress)> = self
            .held
            .iter()
            .filter(|(_, h)| old(h.since_ms))
            .map(|(k, _)| k.clone())
            .collect();
        for (path, sender) in late {
            if let Some(held) = self.held.remove(&(path.clone(), sender.clone())) {
                self.stats.released_by_timeout += held.queue.len() as u64;
                for payload in held.queue {
                    self.accept_local(now_ms, path.clone(), sender.clone(), payload, 0);
                }
            }
        }
        self.early_drained.retain(|_, since| !old(*since));
        let me = self.me.clone();
        let table = &self.state.table;
        self.hosting.retain(|path, h| match h {
            Hosting::Moved { since_ms, .. } => {
                !old(*since_ms) || table.instances(path).is_some_and(|n| n.contains(&me))
            }
            _ => true,
        });
        // An arrival the state never announced (a `Prepare` whose change was dropped)
        // gives up after the timeout; what it kept is routed again.
        let stale: Vec<PartitionPath> = self
            .hosting
            .iter()
            .filter(|(p, h)| {
                matches!(h, Hosting::Arriving { since_ms, .. } if old(*since_ms))
                    && self.change_to_me(p).is_none()
                    && !self.in_table(p)
            })
            .map(|(p, _)| p.clone())
            .collect();
        for path in stale {
            if let Some(Hosting::Arriving { buffer, .. }) = self.hosting.remove(&path) {
                self.replay(now_ms, &path, buffer);
            }
        }
    }
}

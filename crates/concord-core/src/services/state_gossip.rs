//! The state's gossip and the leader's side of [`ServicesMachine`]: each node's report to
//! the leader (offers, mailbox depths, draining, digest), the leader's check that every
//! member has caught up before it writes, its actions ([`leader_step`]) and their push to
//! every member, the digest exchange with one random member per interval, and the
//! interval's tick. See the module docs of `machine.rs`.

use rand::Rng;

use super::hosting::{ServicesDrop, ServicesEvent};
use super::leader_actions::{leader_step, LeaderInput, LoadAware, NodeOffer};
use super::machine::{ServicesMachine, Timer};
use super::{PartitionPath, ServicesMessage, ServicesState};
use crate::address::UniqueAddress;

impl ServicesMachine {
    /// Sends this node's report to the leader (or records it, on the leader).
    pub(super) fn report(&mut self, now_ms: u64) {
        let offer = self.own_offer();
        match self.leader() {
            Some(l) if l == self.me => {
                self.offers.insert(self.me.clone(), offer);
                let depths = self.local_depths.clone();
                self.depths.insert(self.me.clone(), depths);
                self.leader_act(now_ms);
            }
            Some(l) => {
                let (version, writer) = offer.digest;
                let message = ServicesMessage::Report {
                    offers: offer.paths.into_iter().collect(),
                    depths: self
                        .local_depths
                        .iter()
                        .map(|(p, d)| (p.clone(), *d))
                        .collect(),
                    draining: offer.draining,
                    version,
                    writer,
                };
                self.transmit(&l, message);
            }
            None => {}
        }
    }

    pub(super) fn own_offer(&self) -> NodeOffer {
        NodeOffer {
            paths: self.policies.keys().cloned().collect(),
            draining: self.draining,
            digest: self.state.digest(),
        }
    }

    /// Whether this leader may write: every member has reported since it became leader
    /// (or `handoff-timeout` has passed since: a member that runs no services layer never
    /// reports), and none that reported follows a newer state (it is asked for it).
    pub(super) fn caught_up(&mut self, now_ms: u64) -> bool {
        let grace_over =
            now_ms.saturating_sub(self.leader_since_ms) >= self.settings.handoff_timeout_ms;
        let Some(view) = self.view.as_ref() else {
            return false;
        };
        let mine = self.state.digest();
        let mut ready = true;
        let mut ask = Vec::new();
        for m in view.members.keys().filter(|m| **m != self.me) {
            match self.offers.get(m) {
                None => ready &= grace_over,
                Some(o) if o.digest > mine => {
                    ready = false;
                    ask.push(m.clone());
                }
                Some(_) => {}
            }
        }
        let (version, writer) = mine;
        for m in ask {
            self.transmit(
                &m,
                ServicesMessage::Status {
                    version,
                    writer: writer.clone(),
                },
            );
        }
        ready
    }

    /// The leader's step, if this node is the leader and no member is unreachable.
    pub(super) fn leader_act(&mut self, now_ms: u64) {
        let Some(view) = self.view.as_ref() else {
            return;
        };
        if view.leader.as_ref() != Some(&self.me) || !view.unreachable.is_empty() {
            return;
        }
        let own = self.own_offer();
        self.offers.insert(self.me.clone(), own);
        if !self.caught_up(now_ms) {
            return;
        }
        let frozen = self.frozen_by_removal_margin(now_ms);
        let Some(view) = self.view.as_ref() else {
            return;
        };
        let scaling = self.scaling.wishes().clone();
        let load = self.settings.load_threshold.map(|threshold| LoadAware {
            load: &self.node_load,
            threshold,
            max_moves: 1,
        });
        let input = LeaderInput {
            view,
            policies: &self.policies,
            offers: &self.offers,
            completed: &self.completed,
            scaling: &scaling,
            load,
        };
        let Some(mut next) = leader_step(&self.state, &self.me, &input) else {
            self.completed.clear();
            return;
        };
        if !self.hold_frozen_paths(&mut next, &frozen) {
            return;
        }
        self.completed.clear();
        self.state = next;
        let state = self.state.clone();
        let others = self.other_members();
        for m in others {
            self.transmit(&m, ServicesMessage::State(state.clone()));
        }
        self.state_changed(now_ms);
    }

    /// The members other than this node.
    fn other_members(&self) -> Vec<UniqueAddress> {
        self.members
            .iter()
            .filter(|m| **m != self.me)
            .cloned()
            .collect()
    }

    /// A newer state was adopted: the local instances follow it, waiting messages go.
    pub(super) fn state_changed(&mut self, now_ms: u64) {
        self.out.events.push_back(ServicesEvent::StateChanged {
            version: self.state.version,
        });
        self.reports.retain(|c| {
            self.state
                .pending
                .iter()
                .any(|p| p.path == c.path && p.from == c.from && p.to == c.to)
        });
        self.reconcile(now_ms);
        self.send_unrouted(now_ms);
    }

    pub(super) fn accept_state(&mut self, now_ms: u64, state: ServicesState) {
        if !state.supersedes(&self.state) {
            return;
        }
        // Paths are bounded by `max-services`; instances and changes by what a cluster of
        // that many services on up to 1,000 nodes can need.
        if state.paths() > self.settings.max_services
            || state.entries() > self.settings.max_services.saturating_mul(1000)
        {
            self.drop_one(ServicesDrop::StateTooLarge);
            return;
        }
        self.state = state;
        self.state_changed(now_ms);
    }

    pub(super) fn tick(&mut self, now_ms: u64) {
        self.out.timers.set(
            Timer::Tick,
            now_ms.saturating_add(self.settings.gossip_interval_ms),
        );
        // Gossip the digest to one random other member.
        let others = self.other_members();
        if !others.is_empty() {
            let to = others[self.rng.random_range(0..others.len())].clone();
            let (version, writer) = self.state.digest();
            self.transmit(&to, ServicesMessage::Status { version, writer });
        }
        // The leader's scaling view, from the reported depths.
        if self.leader().as_ref() == Some(&self.me) {
            self.scaling.observe(&self.state.table, &self.depths);
        }
        self.report(now_ms);
        self.retry_handoffs(now_ms);
        self.expire(now_ms);
        self.send_unrouted(now_ms);
    }

    pub(super) fn on_report(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        offers: Vec<PartitionPath>,
        depths: Vec<(PartitionPath, u32)>,
        draining: bool,
        digest: (u64, Option<UniqueAddress>),
    ) {
        let max = self.settings.max_services;
        let offer = NodeOffer {
            paths: offers.into_iter().take(max).collect(),
            draining,
            digest,
        };
        let changed = self.offers.get(from) != Some(&offer);
        self.offers.insert(from.clone(), offer);
        self.depths
            .insert(from.clone(), depths.into_iter().take(max).collect());
        if changed {
            self.leader_act(now_ms);
        }
    }
}

//! User commands on the membership: leave, down, full cluster shutdown (joining is in
//! [`super::join`]). A refused command returns a [`CommandError`] and changes nothing.
//!
//! Spec: cluster-membership-service.md, "User Actions", "Full cluster shutdown".

use tracing::info;

use super::command_error::CommandError;
use super::ClusterCore;
use crate::address::Address;
use crate::member::{Member, MemberStatus};

impl ClusterCore {
    /// Marks the member at `address` Leaving (graceful removal: Leaving → Exiting →
    /// Removed by the leader). Leaving oneself before joining shuts the node down.
    pub fn leave(&mut self, now_ms: u64, address: &Address) -> Result<(), CommandError> {
        if !self.initialized {
            if address == self.self_address() {
                self.leave_before_joining();
                return Ok(());
            }
            return Err(CommandError::NotInCluster);
        }
        let m = self.member_by_address(address)?;
        if matches!(
            m.status,
            MemberStatus::Joining
                | MemberStatus::WeaklyUp
                | MemberStatus::Up
                | MemberStatus::PreparingForShutdown
                | MemberStatus::ReadyForShutdown
        ) {
            info!(member = %m.unique_address, "marking member Leaving");
            let mut g = self.state.latest_gossip.clone();
            g.members.insert(
                m.unique_address.clone(),
                m.with_status(MemberStatus::Leaving),
            );
            self.update_versioned(now_ms, g);
        }
        Ok(())
    }

    /// Marks the member at `address` Down; the leader then removes it even though it is
    /// unreachable.
    pub fn down(&mut self, now_ms: u64, address: &Address) -> Result<(), CommandError> {
        if !self.initialized {
            return Err(CommandError::NotInCluster);
        }
        let m = self.member_by_address(address)?;
        self.down_member(now_ms, &m);
        Ok(())
    }

    fn down_member(&mut self, now_ms: u64, m: &Member) {
        if m.status.can_transition_to(MemberStatus::Down) {
            info!(member = %m.unique_address, "marking member Down");
            let mut g = self.state.latest_gossip.clone();
            g.members
                .insert(m.unique_address.clone(), m.with_status(MemberStatus::Down));
            self.update_versioned(now_ms, g);
        }
    }

    /// Starts a full cluster shutdown: every Up member becomes PreparingForShutdown; the
    /// leader then moves them to ReadyForShutdown on convergence.
    pub fn prepare_for_full_cluster_shutdown(&mut self, now_ms: u64) -> Result<(), CommandError> {
        if !self.initialized {
            return Err(CommandError::NotInCluster);
        }
        let mut g = self.state.latest_gossip.clone();
        let mut changed = false;
        for m in g.members.values_mut() {
            if m.status == MemberStatus::Up {
                *m = m.with_status(MemberStatus::PreparingForShutdown);
                changed = true;
            }
        }
        if changed {
            info!("preparing for full cluster shutdown");
            self.update_versioned(now_ms, g);
        }
        Ok(())
    }

    fn member_by_address(&self, address: &Address) -> Result<Member, CommandError> {
        self.state
            .latest_gossip
            .members
            .values()
            .find(|m| m.address() == address)
            .cloned()
            .ok_or_else(|| CommandError::UnknownMember(address.clone()))
    }
}

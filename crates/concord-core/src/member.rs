//! [`Member`] and [`MemberStatus`]: one node's entry in the cluster membership.
//!
//! Spec: cluster-membership-service.md, "Member States" and "State Diagrams"; Akka's
//! `MemberStatus.allowedTransitions`. Statuses only ever move forward along
//! [`MemberStatus::precedence`], which is what makes the membership merge monotonic.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::address::{Address, UniqueAddress};

/// The nine member states of the membership lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemberStatus {
    /// Transient state when joining a cluster.
    Joining,
    /// Joining member promoted by the leader without convergence (e.g. during a partition).
    WeaklyUp,
    /// Normal operating state.
    Up,
    /// A full cluster shutdown has been requested.
    PreparingForShutdown,
    /// The member is ready for a full cluster shutdown.
    ReadyForShutdown,
    /// Graceful removal has started.
    Leaving,
    /// Graceful removal: the leader confirmed leaving; removed at the next convergence.
    Exiting,
    /// Marked as down; no longer part of cluster decisions.
    Down,
    /// Tombstone state: no longer a member.
    Removed,
}

impl MemberStatus {
    /// All statuses, in precedence order.
    pub const ALL: [MemberStatus; 9] = [
        MemberStatus::Joining,
        MemberStatus::WeaklyUp,
        MemberStatus::Up,
        MemberStatus::PreparingForShutdown,
        MemberStatus::ReadyForShutdown,
        MemberStatus::Leaving,
        MemberStatus::Exiting,
        MemberStatus::Down,
        MemberStatus::Removed,
    ];

    /// Lifecycle precedence, the declaration order: every allowed transition goes to a
    /// higher precedence, so no status moves backwards along it.
    pub fn precedence(self) -> u8 {
        self as u8
    }

    /// Merge priority (Akka's `Member.highestPriorityOf`): when two concurrent gossips
    /// disagree about a member, the status with the higher priority wins. Removed, then
    /// ReadyForShutdown, Down, Exiting, Leaving, PreparingForShutdown, Up, WeaklyUp,
    /// Joining. It is [`MemberStatus::precedence`] except for ReadyForShutdown, which Akka
    /// ranks above Leaving, Exiting and Down: a member ready for a full cluster shutdown
    /// stays so against a concurrent leave or down (the transitions ReadyForShutdown →
    /// Leaving or Down still happen, by a newer gossip, not by a merge).
    pub fn merge_priority(self) -> u8 {
        use MemberStatus::*;
        match self {
            Joining => 0,
            WeaklyUp => 1,
            Up => 2,
            PreparingForShutdown => 3,
            Leaving => 4,
            Exiting => 5,
            Down => 6,
            ReadyForShutdown => 7,
            Removed => 8,
        }
    }

    /// Whether `self -> to` is an allowed transition (Akka's `allowedTransitions`).
    pub fn can_transition_to(self, to: MemberStatus) -> bool {
        use MemberStatus::*;
        matches!(
            (self, to),
            (Joining, WeaklyUp | Up | Leaving | Down | Removed)
                | (WeaklyUp, Up | Leaving | Down | Removed)
                | (Up, Leaving | Down | Removed | PreparingForShutdown)
                | (
                    PreparingForShutdown,
                    ReadyForShutdown | Removed | Leaving | Down
                )
                | (ReadyForShutdown, Removed | Leaving | Down)
                | (Leaving, Exiting | Down | Removed)
                | (Exiting, Removed | Down)
                | (Down, Removed)
        )
    }

    /// The name used on the wire and in the management API (`"WeaklyUp"`, ...).
    pub fn as_str(self) -> &'static str {
        use MemberStatus::*;
        match self {
            Joining => "Joining",
            WeaklyUp => "WeaklyUp",
            Up => "Up",
            PreparingForShutdown => "PreparingForShutdown",
            ReadyForShutdown => "ReadyForShutdown",
            Leaving => "Leaving",
            Exiting => "Exiting",
            Down => "Down",
            Removed => "Removed",
        }
    }
}

impl fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown status name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown member status `{0}`")]
pub struct UnknownStatus(pub String);

impl FromStr for MemberStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MemberStatus::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

/// `up_number` of a member that has never been Up (Akka's `Int.MaxValue`).
pub const UP_NUMBER_UNSET: u32 = u32::MAX;

/// A cluster member: a [`UniqueAddress`] with its status, roles, age and app version.
///
/// Members are ordered by unique address (the cluster's total order). Age is given by
/// `up_number`: the leader assigns increasing numbers when it moves members to Up, so the
/// oldest member has the smallest up-number, ties broken by address.
///
/// Equality and hashing use the unique address only (status, roles and age ignored), as
/// Akka's `Member`: a set of members keeps one entry per node while its status changes.
/// [`Member::same_state`] compares everything.
#[derive(Clone, Debug)]
pub struct Member {
    /// Identity of the node.
    pub unique_address: UniqueAddress,
    /// Lifecycle status.
    pub status: MemberStatus,
    /// Roles this node was started with (e.g. `dc-default`, `backend`).
    pub roles: BTreeSet<String>,
    /// Age rank assigned when moved to Up; [`UP_NUMBER_UNSET`] before that.
    pub up_number: u32,
    /// Application version the node runs (`app-version`, default `"0.0.0"`).
    pub app_version: String,
}

impl PartialEq for Member {
    fn eq(&self, other: &Member) -> bool {
        self.unique_address == other.unique_address
    }
}

impl Eq for Member {}

impl std::hash::Hash for Member {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.unique_address.hash(state);
    }
}

impl Member {
    /// True if every field is equal (equality proper compares the unique address only).
    pub fn same_state(&self, other: &Member) -> bool {
        self.unique_address == other.unique_address
            && self.status == other.status
            && self.roles == other.roles
            && self.up_number == other.up_number
            && self.app_version == other.app_version
    }

    /// A new member in status `Joining`.
    pub fn joining(
        unique_address: UniqueAddress,
        roles: BTreeSet<String>,
        app_version: impl Into<String>,
    ) -> Self {
        Member {
            unique_address,
            status: MemberStatus::Joining,
            roles,
            up_number: UP_NUMBER_UNSET,
            app_version: app_version.into(),
        }
    }

    /// The member's network address.
    pub fn address(&self) -> &Address {
        &self.unique_address.address
    }

    /// Whether the member has `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.contains(role)
    }

    /// A copy with `status`. Callers check [`MemberStatus::can_transition_to`].
    pub fn with_status(&self, status: MemberStatus) -> Member {
        Member {
            status,
            ..self.clone()
        }
    }

    /// A copy moved to Up with the given up-number.
    pub fn with_up(&self, up_number: u32) -> Member {
        Member {
            status: MemberStatus::Up,
            up_number,
            ..self.clone()
        }
    }

    /// True if `self` is older than `other`: smaller up-number, ties by address order.
    pub fn is_older_than(&self, other: &Member) -> bool {
        self.age_cmp(other) == Ordering::Less
    }

    /// Age order: oldest first (smaller up-number), ties by address.
    pub fn age_cmp(&self, other: &Member) -> Ordering {
        self.up_number
            .cmp(&other.up_number)
            .then_with(|| self.unique_address.cmp(&other.unique_address))
    }

    /// Of two versions of the same member, the one whose status has the higher
    /// [`MemberStatus::merge_priority`] (the oldest on equal status). Commutative,
    /// associative and idempotent.
    pub fn highest_priority_of<'a>(a: &'a Member, b: &'a Member) -> &'a Member {
        match a.status.merge_priority().cmp(&b.status.merge_priority()) {
            Ordering::Greater => a,
            Ordering::Less => b,
            Ordering::Equal => {
                if (b.up_number, &b.app_version, &b.roles) < (a.up_number, &a.app_version, &a.roles)
                {
                    b
                } else {
                    a
                }
            }
        }
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Member({}, {})", self.unique_address, self.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MemberStatus::*;

    #[test]
    fn every_allowed_transition_raises_precedence() {
        for from in MemberStatus::ALL {
            for to in MemberStatus::ALL {
                if from.can_transition_to(to) {
                    assert!(to.precedence() > from.precedence(), "{from} -> {to}");
                }
            }
        }
    }

    #[test]
    fn transitions_follow_the_state_diagram() {
        assert!(Joining.can_transition_to(Up));
        assert!(Joining.can_transition_to(WeaklyUp));
        assert!(WeaklyUp.can_transition_to(Up));
        assert!(Up.can_transition_to(Leaving));
        assert!(Leaving.can_transition_to(Exiting));
        assert!(Exiting.can_transition_to(Removed));
        assert!(Down.can_transition_to(Removed));
        assert!(Up.can_transition_to(PreparingForShutdown));
        assert!(PreparingForShutdown.can_transition_to(ReadyForShutdown));
        assert!(!Up.can_transition_to(Joining));
        assert!(!Down.can_transition_to(Up));
        assert!(!Removed.can_transition_to(Down));
        assert!(!Exiting.can_transition_to(Leaving));
        assert!(!Joining.can_transition_to(Exiting));
    }

    #[test]
    fn status_names_round_trip() {
        for s in MemberStatus::ALL {
            assert_eq!(s.as_str().parse::<MemberStatus>().unwrap(), s);
        }
        assert!("up".parse::<MemberStatus>().is_ok());
        assert!("Sideways".parse::<MemberStatus>().is_err());
    }

    #[test]
    fn oldest_has_smallest_up_number_ties_by_address() {
        let a = Member::joining(
            UniqueAddress::new(Address::new("s", "a", 1), 1),
            BTreeSet::new(),
            "0.0.0",
        );
        let b = Member::joining(
            UniqueAddress::new(Address::new("s", "b", 1), 1),
            BTreeSet::new(),
            "0.0.0",
        );
        assert!(b.with_up(1).is_older_than(&a.with_up(2)));
        assert!(a.with_up(3).is_older_than(&b.with_up(3)));
    }

    #[test]
    fn ready_for_shutdown_wins_a_merge_against_leaving_exiting_and_down_as_in_akka() {
        let a = Member::joining(
            UniqueAddress::new(Address::new("s", "a", 1), 1),
            BTreeSet::new(),
            "0.0.0",
        )
        .with_up(1);
        let ready = a.with_status(ReadyForShutdown);
        for other in [Up, PreparingForShutdown, Leaving, Exiting, Down] {
            let o = a.with_status(other);
            assert_eq!(
                Member::highest_priority_of(&ready, &o).status,
                ReadyForShutdown
            );
            assert_eq!(
                Member::highest_priority_of(&o, &ready).status,
                ReadyForShutdown
            );
        }
        let removed = a.with_status(Removed);
        assert_eq!(
            Member::highest_priority_of(&ready, &removed).status,
            Removed
        );
        // Akka's order, highest first.
        let mut by_priority = MemberStatus::ALL;
        by_priority.sort_by_key(|s| std::cmp::Reverse(s.merge_priority()));
        assert_eq!(
            by_priority,
            [
                Removed,
                ReadyForShutdown,
                Down,
                Exiting,
                Leaving,
                PreparingForShutdown,
                Up,
                WeaklyUp,
                Joining
            ]
        );
    }

    #[test]
    fn merge_keeps_higher_precedence() {
        let a = Member::joining(
            UniqueAddress::new(Address::new("s", "a", 1), 1),
            BTreeSet::new(),
            "0.0.0",
        );
        let up = a.with_up(1);
        let down = a.with_status(Down);
        assert_eq!(Member::highest_priority_of(&up, &down), &down);
        assert_eq!(Member::highest_priority_of(&down, &up), &down);
    }
}

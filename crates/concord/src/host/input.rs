//! What a host takes in ([`HostInput`]) and what it reads membership from
//! ([`MembershipInput`]).

use std::sync::Arc;

use concord_core::{ClusterEvent, MembershipView};

use super::effects::{LayerEffects, MessageOf};
use crate::remote::codec::Inbound;

/// One membership input, in the order the membership layer published them: first the
/// whole view (Akka's `CurrentClusterState`; again after a subscriber lagged), then each
/// domain event with the view after the batch it belongs to. The runtime and the
/// simulator feed every host the same sequence.
#[derive(Clone, Debug, PartialEq)]
pub enum MembershipInput {
    /// The whole view.
    CurrentClusterState(Arc<MembershipView>),
    /// One event and the view after its batch.
    Event(Arc<MembershipView>, ClusterEvent),
}

impl MembershipInput {
    /// The view this input brings.
    pub fn view(&self) -> &Arc<MembershipView> {
        match self {
            MembershipInput::CurrentClusterState(v) | MembershipInput::Event(v, _) => v,
        }
    }
}

/// One input of a host.
pub enum HostInput<E: LayerEffects> {
    /// Messages of the layer's protocol from one peer, in the order it sent them.
    Inbound(Inbound<MessageOf<E>>),
    /// A membership change.
    Membership(MembershipInput),
    /// A command from one of the layer's handles.
    Command(E::Command),
    /// A report of the layer's background work.
    Completion(E::Completion),
    /// The host's deadline ([`crate::host::LayerHost::next_deadline`]) passed.
    Timeout,
}

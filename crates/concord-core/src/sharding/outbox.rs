//! How the parts of [`super::ClusterSharding`] — region, shards, coordinator — send a
//! [`ShardingBody`]: to a peer as a transmit on the ordinary lane (in the shared
//! [`Outputs`]), to this node itself through the loopback queue, which the machine handles
//! before the input that caused it returns (a co-located coordinator and region talk
//! through the same messages as remote ones, as Akka's actors do).

use std::collections::VecDeque;

use crate::address::UniqueAddress;
use crate::outputs::Outputs;
use crate::protocol::{Lane, Transmit};

use super::api::ShardingEvent;
use super::message::{ShardingBody, ShardingMessage};
use super::timer::ShardingTimer;

/// The machine's outputs: transmits, events and timers for the host.
pub(super) type ShardingOutputs = Outputs<ShardingMessage, ShardingEvent, ShardingTimer>;

/// Sends `body` from `self_node` to `to` for the entity type `type_name`: looped back if
/// `to` is this node, else queued as a transmit.
pub(super) fn send(
    out: &mut ShardingOutputs,
    loopback: &mut VecDeque<ShardingBody>,
    type_name: &str,
    self_node: &UniqueAddress,
    to: &UniqueAddress,
    body: ShardingBody,
) {
    if to == self_node {
        loopback.push_back(body);
        return;
    }
    out.transmits.push_back(Transmit {
        to: to.address.clone(),
        to_uid: Some(to.uid),
        lane: Lane::Ordinary,
        message: ShardingMessage {
            type_name: type_name.to_owned(),
            body,
        },
    });
}

//! Distributed publish-subscribe (Akka's `DistributedPubSubMediator` and typed `Topic`):
//! subscribe to a topic on any node, publish to every subscriber on every node, or send to
//! one subscriber of a group.
//!
//! Built on the receptionist, as Akka's typed `Topic` is: a node with subscribers of a topic
//! registers **one** handle under the key `pubsub/topic/<name>` and fans each message out
//! to its local subscribers, so a published message crosses the wire once per subscribed
//! node; it deregisters when its last local subscriber goes. A group's subscribers each
//! register under `pubsub/group/<topic>/<group>`, and a send picks one of them at random.
//! The topic registry is the receptionist's, replicated with Distributed Data; a
//! subscriber on a node that crashed disappears when the node is removed.
//!
//! Topic and group names are 1 to 80 bytes of `[A-Za-z0-9_.:-]`; the `pubsub/` prefix is
//! reserved (an application's [`crate::receptionist::ServiceKey`] may not use it).
//!
//! Delivery is **at most once** (docs/SERVICES.md): a message published before a new
//! subscriber's registration reached the publisher's node is not delivered to it, and a
//! subscriber whose mailbox is full loses the message (counted). Reliable delivery
//! ([`crate::delivery`]) covers the rest.

mod topic;

pub use topic::{PubSub, PubSubError, Subscriber, Topic};

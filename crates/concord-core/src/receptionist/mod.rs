//! The receptionist (Akka's typed `Receptionist`): handles registered under a
//! [`ServiceKeyId`] on any node, found and followed cluster-wide. Each key's registrations
//! are an `ORSet` of [`ServiceInstance`] elements in Distributed Data (as Akka's cluster
//! receptionist keeps an `ORMultiMap` in Distributed Data), written by the registering
//! node; a [`Listing`] reads them under the membership view, and the leader removes the
//! registrations of nodes that left ([`RegistryPruner`]). Messages to a handle travel through
//! [`ReceptionistMachine`]. Distributed pub-sub's topics are built on it (Akka's typed
//! `Topic` is too).

mod listing;
mod machine;
mod service_instance;

pub use listing::{listing, Listing, RegistryPruner};
pub use machine::{
    DropReason, ReceptionistEnvelope, ReceptionistEvent, ReceptionistMachine, ReceptionistStats,
    RegistrationRefused,
};
pub use service_instance::{
    InvalidServiceKey, ServiceInstance, ServiceKeyId, MAX_SERVICE_KEY_BYTES,
};

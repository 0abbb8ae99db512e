//! The runtime's clock: the node's [`crate::host::SystemClock`].

pub use crate::host::SystemClock as Clock;

//! The layer host: one generic driver for every protocol layer, without I/O.
//!
//! Every layer of a node — membership, singleton, distributed data, sharding, the
//! key-value store, an application's own protocol — is a sans-IO machine from
//! `concord-core` plus the layer's **effects** ([`LayerEffects`]: its typed commands, what
//! each event of the machine does, what its background work reports). A [`LayerHost`]
//! owns both and everything around them: the node's one [`Clock`], the membership feed
//! ([`MembershipInput`]: the same sequence of `CurrentClusterState` and events wherever it
//! runs), the next deadline, a periodic tick, the batching of inputs into turns with one
//! send of transmits per turn ([`Outbound`]), and the completion queue of background work
//! started on a [`Spawner`].
//!
//! The membership layer is hosted the same way (`ClusterCore` with the membership
//! effects), in the runtime and in the simulator: it has no membership feed, hands the
//! view and event batches to its sinks (`cluster::membership_sinks`) in
//! [`LayerEffects::flushed`] at the end of each turn, and asks to stop with
//! [`Effects::stop`]; its runtime runner closes remoting after the host returns.
//!
//! No tokio here: the tokio runtime (`crate::runtime::drive`) feeds a host real sockets
//! and time; the simulator (`concord-sim`) feeds the same host virtual time and a
//! simulated network, so what the simulator checks is the code that runs in production.
//!
//! ```text
//!   handles ──Command──▶ ┌──────────── LayerHost ────────────┐ ──Transmit──▶ Outbound
//!   peers ───Inbound───▶ │  machine (concord-core)           │
//!   membership ─Input──▶ │     │ events                      │
//!   time ────Timeout───▶ │  effects ──spawn──▶ Spawner ──┐   │
//!                        │     ▲                          │   │
//!                        └─────┴──────Completion──────────┘───┘
//! ```

mod clock;
mod effects;
mod input;
mod layer_host;
mod outbound;
mod spawn;
pub mod trace;

pub use clock::{Clock, ManualClock, SystemClock};
pub use effects::{Backlog, Completions, Effects, EventOf, HostEnv, LayerEffects, MessageOf};
pub use input::{HostInput, MembershipInput};
pub use layer_host::{HostStats, LayerHost, INPUTS_PER_TURN};
pub use outbound::{Collect, Outbound};
pub use spawn::{Spawner, Task};
pub use trace::{HostTracer, TraceContext};

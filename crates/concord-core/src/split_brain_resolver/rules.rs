//! [`SbrRules`]: which rules the downing strategies decide by, Concord's or Akka's alone.

/// Which rules decide: Concord's (Akka's and the stricter ones of
/// docs/SPLIT_BRAIN_RESOLVER.md) or Akka's alone. Akka's exist to measure the difference (the
/// simulator runs the same seeds with both); not a configuration key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SbrRules {
    /// Akka's rules and Concord's stricter ones (the default, and the only one configured).
    #[default]
    Concord,
    /// Akka's rules alone: stable-after watches only the unreachable and counted members,
    /// no suspects, no counting of downings the other side has not seen, and the
    /// strategies' decisions as Akka takes them (a double decision downs all).
    Akka,
}

//! [`LeaseRequest`]: a lease operation the Split Brain Resolver (lease-majority) asks the
//! runtime for.

/// A lease operation the Split Brain Resolver (lease-majority) asks the runtime for. The
/// core has already waited the strategy's delay; the runtime answers an `Acquire` with
/// [`ClusterCore::handle_lease_result`](super::ClusterCore::handle_lease_result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseRequest {
    /// Try to acquire the lease now.
    Acquire,
    /// Release the lease: the members it was acquired to down have been removed.
    Release,
}

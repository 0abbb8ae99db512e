//! The runtime's clock: the node's [`crate::host::SystemClock`], and sleeping until one of
//! its instants.

pub use crate::host::SystemClock as Clock;

/// Sleeps until `deadline`, or forever without one.
pub(crate) async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

//! [`InstancePolicy`]: how many instances (the N-value) a partitioned service wants.
//!
//! Spec: cluster-specification-original.md, "Partitioning" — "The cluster leader determines
//! the current instance count for a partition based on two axes: fault-tolerance and
//! scaling. Fault-tolerance determines a minimum number of instances ... The user can
//! specify a function from current number of nodes to the number of acceptable node
//! failures: n => f where f < n. Scaling reflects the number of instances needed to
//! maintain good throughput and is influenced by metrics". The leader evaluates the policy
//! of every registered service against the number of Up nodes to get the demand that
//! [`place`](super::place) spreads over the ring.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Bounds for the scaling axis, in instances: a scaling wish is clamped into
/// `min..=max`. Invariant (checked by [`ScalingBounds::new`] and on deserialization):
/// `1 <= min <= max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawScalingBounds")]
pub struct ScalingBounds {
    min: u32,
    max: u32,
}

#[derive(Deserialize)]
struct RawScalingBounds {
    min: u32,
    max: u32,
}

impl TryFrom<RawScalingBounds> for ScalingBounds {
    type Error = ScalingBoundsError;

    fn try_from(raw: RawScalingBounds) -> Result<Self, Self::Error> {
        ScalingBounds::new(raw.min, raw.max)
    }
}

/// Why a pair is not valid [`ScalingBounds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ScalingBoundsError {
    /// `min` is 0; a scaled service always wants at least one instance.
    #[error("scaling bounds: min must be at least 1 instance, got 0")]
    MinZero,
    /// `min` is greater than `max`.
    #[error("scaling bounds: min ({min}) must not exceed max ({max})")]
    MinAboveMax {
        /// The rejected minimum, in instances.
        min: u32,
        /// The rejected maximum, in instances.
        max: u32,
    },
}

impl ScalingBounds {
    /// Bounds of `min..=max` instances.
    ///
    /// # Errors
    /// [`ScalingBoundsError::MinZero`] if `min == 0`, [`ScalingBoundsError::MinAboveMax`]
    /// if `min > max`.
    pub fn new(min: u32, max: u32) -> Result<Self, ScalingBoundsError> {
        if min == 0 {
            return Err(ScalingBoundsError::MinZero);
        }
        if min > max {
            return Err(ScalingBoundsError::MinAboveMax { min, max });
        }
        Ok(ScalingBounds { min, max })
    }

    /// The lower bound, in instances (≥ 1).
    pub fn min(&self) -> u32 {
        self.min
    }

    /// The upper bound, in instances (≥ `min`).
    pub fn max(&self) -> u32 {
        self.max
    }

    /// `wish` clamped into `min..=max`.
    pub fn clamp(&self, wish: u32) -> u32 {
        wish.clamp(self.min, self.max)
    }
}

/// The user's fault-tolerance function `n => f`: given the current number of nodes `n`,
/// the number of node failures `f` the service must survive (spec: "n: Int => f: Int where
/// f < n"), so it wants `f + 1` instances. A result `f >= n` is clamped to `n - 1`.
///
/// Optionally carries [`ScalingBounds`] for the scaling axis (see
/// [`InstancePolicy::instances`]). `name` identifies the function in `Debug` output and
/// logs (closures have no printable form).
pub struct FaultTolerance {
    name: Arc<str>,
    failures: Arc<dyn Fn(u32) -> u32 + Send + Sync>,
    scaling: Option<ScalingBounds>,
}

impl FaultTolerance {
    /// A fault-tolerance function named `name`: `failures(n)` = acceptable node failures
    /// when the cluster has `n` nodes. It should be cheap and must not panic (the leader
    /// calls it on every placement).
    pub fn new(
        name: impl Into<String>,
        failures: impl Fn(u32) -> u32 + Send + Sync + 'static,
    ) -> Self {
        FaultTolerance {
            name: Arc::from(name.into()),
            failures: Arc::new(failures),
            scaling: None,
        }
    }

    /// Survive `f` failures whatever the cluster size (N = f + 1, capped by the nodes).
    pub fn tolerate(f: u32) -> Self {
        FaultTolerance::new(format!("tolerate({f})"), move |_| f)
    }

    /// Survive the failure of any minority: `f = (n - 1) / 2`, so the instances are a
    /// majority of the nodes (N = ⌊(n − 1) / 2⌋ + 1).
    pub fn minority() -> Self {
        FaultTolerance::new("minority", |n| n.saturating_sub(1) / 2)
    }

    /// The same function with scaling bounds.
    pub fn with_scaling(mut self, bounds: ScalingBounds) -> Self {
        self.scaling = Some(bounds);
        self
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scaling bounds, if any.
    pub fn scaling(&self) -> Option<ScalingBounds> {
        self.scaling
    }

    /// The acceptable failures with `nodes` nodes: the user's `f(nodes)` clamped to at
    /// most `nodes - 1` (0 when `nodes` is 0; the function is not called then).
    pub fn tolerated_failures(&self, nodes: u32) -> u32 {
        if nodes == 0 {
            return 0;
        }
        (self.failures)(nodes).min(nodes - 1)
    }
}

impl Clone for FaultTolerance {
    fn clone(&self) -> Self {
        FaultTolerance {
            name: Arc::clone(&self.name),
            failures: Arc::clone(&self.failures),
            scaling: self.scaling,
        }
    }
}

impl fmt::Debug for FaultTolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultTolerance")
            .field("name", &self.name)
            .field("scaling", &self.scaling)
            .finish_non_exhaustive()
    }
}

/// How many instances a partitioned service wants (its N-value), from the spec's two axes.
#[derive(Clone, Debug)]
pub enum InstancePolicy {
    /// Exactly N instances (capped by the number of nodes); scaling wishes are ignored.
    /// `Fixed(0)` places no instance.
    Fixed(u32),
    /// A fault-tolerance minimum of `f + 1` instances, optionally raised by scaling.
    FaultTolerance(FaultTolerance),
}

impl InstancePolicy {
    /// The instance count for a cluster of `nodes` nodes (the Up members the leader places
    /// on) and an optional scaling wish in instances (from metrics; `None` when there are
    /// no metrics yet).
    ///
    /// - `Fixed(n)`: `min(n, nodes)`; `scaling` is ignored.
    /// - `FaultTolerance`: the minimum is `f + 1` with `f` = [`FaultTolerance::tolerated_failures`]
    ///   (so at most `nodes`). With [`ScalingBounds`] `min..=max`, the scaling target is the
    ///   wish clamped into the bounds, or `min` when there is no wish; the count is
    ///   `max(f + 1, target)` — scaling raises the count up to `max` and never lowers it
    ///   below the fault-tolerance minimum. Without bounds the wish is ignored (a service
    ///   opts into scaling by giving bounds).
    ///
    /// The result never exceeds `nodes`, and is 0 when `nodes` is 0.
    pub fn instances(&self, nodes: u32, scaling: Option<u32>) -> u32 {
        if nodes == 0 {
            return 0;
        }
        let wanted = match self {
            InstancePolicy::Fixed(n) => *n,
            InstancePolicy::FaultTolerance(ft) => {
                let minimum = ft.tolerated_failures(nodes).saturating_add(1);
                match ft.scaling {
                    Some(bounds) => {
                        let target = scaling.map_or(bounds.min, |wish| bounds.clamp(wish));
                        minimum.max(target)
                    }
                    None => minimum,
                }
            }
        };
        wanted.min(nodes)
    }
}

impl From<FaultTolerance> for InstancePolicy {
    fn from(ft: FaultTolerance) -> Self {
        InstancePolicy::FaultTolerance(ft)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(min: u32, max: u32) -> ScalingBounds {
        ScalingBounds::new(min, max).unwrap()
    }

    #[test]
    fn scaling_bounds_are_validated() {
        assert_eq!(ScalingBounds::new(0, 3), Err(ScalingBoundsError::MinZero));
        assert_eq!(
            ScalingBounds::new(4, 3),
            Err(ScalingBoundsError::MinAboveMax { min: 4, max: 3 })
        );
        let b = bounds(2, 2);
        assert_eq!((b.min(), b.max()), (2, 2));
        assert!(ScalingBoundsError::MinAboveMax { min: 4, max: 3 }
            .to_string()
            .contains("min (4) must not exceed max (3)"));
        let bytes = postcard::to_allocvec(&(0u32, 3u32)).unwrap();
        assert!(postcard::from_bytes::<ScalingBounds>(&bytes).is_err());
        let bytes = postcard::to_allocvec(&bounds(1, 5)).unwrap();
        assert_eq!(
            postcard::from_bytes::<ScalingBounds>(&bytes).unwrap(),
            bounds(1, 5)
        );
    }

    #[test]
    fn fixed_is_capped_by_nodes() {
        let p = InstancePolicy::Fixed(4);
        assert_eq!(p.instances(10, None), 4);
        assert_eq!(p.instances(3, None), 3);
        assert_eq!(p.instances(0, None), 0);
        assert_eq!(p.instances(10, Some(9)), 4, "scaling ignored");
        assert_eq!(InstancePolicy::Fixed(0).instances(5, None), 0);
        assert_eq!(InstancePolicy::Fixed(u32::MAX).instances(7, None), 7);
    }

    #[test]
    fn fault_tolerance_is_f_plus_one_with_f_clamped() {
        let p = InstancePolicy::from(FaultTolerance::tolerate(2));
        assert_eq!(p.instances(10, None), 3);
        assert_eq!(p.instances(3, None), 3);
        // f >= n is clamped to n - 1: every node hosts an instance, never more.
        assert_eq!(p.instances(2, None), 2);
        assert_eq!(p.instances(1, None), 1);
        assert_eq!(p.instances(0, None), 0);
        let huge = InstancePolicy::from(FaultTolerance::tolerate(u32::MAX));
        assert_eq!(huge.instances(5, None), 5);
        assert_eq!(huge.instances(u32::MAX, None), u32::MAX);
    }

    #[test]
    fn fault_tolerance_function_sees_node_count() {
        let p = InstancePolicy::from(FaultTolerance::minority());
        assert_eq!(p.instances(1, None), 1);
        assert_eq!(p.instances(2, None), 1);
        assert_eq!(p.instances(3, None), 2);
        assert_eq!(p.instances(5, None), 3);
        assert_eq!(p.instances(10, None), 5);
        let never_called = InstancePolicy::from(FaultTolerance::new("boom", |_| panic!("no")));
        assert_eq!(never_called.instances(0, Some(3)), 0);
    }

    #[test]
    fn scaling_within_and_outside_bounds() {
        let p = InstancePolicy::from(FaultTolerance::tolerate(1).with_scaling(bounds(3, 6)));
        // No wish: the bounds' min applies (above the fault-tolerance minimum of 2).
        assert_eq!(p.instances(10, None), 3);
        // Within bounds.
        assert_eq!(p.instances(10, Some(5)), 5);
        // Above max: clamped to max.
        assert_eq!(p.instances(10, Some(50)), 6);
        // Below min: clamped to min.
        assert_eq!(p.instances(10, Some(0)), 3);
        // Never more than the nodes.
        assert_eq!(p.instances(4, Some(6)), 4);
        assert_eq!(p.instances(0, Some(6)), 0);
    }

    #[test]
    fn scaling_never_lowers_below_fault_tolerance() {
        let p = InstancePolicy::from(FaultTolerance::tolerate(4).with_scaling(bounds(1, 3)));
        assert_eq!(p.instances(10, Some(1)), 5);
        assert_eq!(p.instances(10, Some(3)), 5);
        assert_eq!(p.instances(10, None), 5);
        assert_eq!(p.instances(3, Some(1)), 3);
    }

    #[test]
    fn scaling_without_bounds_is_ignored() {
        let p = InstancePolicy::from(FaultTolerance::tolerate(1));
        assert_eq!(p.instances(10, Some(8)), 2);
    }

    #[test]
    fn debug_and_clone_by_hand() {
        let ft = FaultTolerance::tolerate(2).with_scaling(bounds(1, 4));
        let copy = ft.clone();
        assert_eq!(copy.name(), "tolerate(2)");
        assert_eq!(copy.tolerated_failures(10), 2);
        let dbg = format!("{:?}", InstancePolicy::from(copy));
        assert!(
            dbg.contains("tolerate(2)") && dbg.contains("max: 4"),
            "{dbg}"
        );
    }
}

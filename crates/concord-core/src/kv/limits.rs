//! Bounds on what one message may make a node do.

/// Groups listed in one `AeBuckets`.
pub const AE_GROUPS_PER_EXCHANGE: usize = 64;
/// Key digests listed in one `AeKeys`.
pub const AE_KEYS_PER_EXCHANGE: usize = 20_000;
/// Objects in one handoff page.
pub const HANDOFF_PAGE_OBJECTS: usize = 1_000;
/// Reaps waiting for their grace period.
pub const MAX_PENDING_REAPS: usize = 10_000;
/// Forwarded writes remembered to recognise duplicates.
pub const MAX_REMEMBERED_FORWARDS: usize = 100_000;

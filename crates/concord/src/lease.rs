//! Leases for the lease-majority Split Brain Resolver strategy.
//!
//! [`Lease`] is the interface (Akka's `akka.coordination.lease.scaladsl.Lease`):
//! `acquire` answers whether this owner now holds the lease, `release` gives it up, and
//! `check_lease` tells — without I/O — whether this owner still believes it holds it (a
//! holder checks before acting, so one that lost it during a pause stops acting).
//! [`FileLease`] is a real implementation for processes on one host: a lease file guarded
//! by an exclusive file lock (`flock`), holding the owner and an expiry time; a holder may
//! re-acquire, others only after expiry (`release-after`) or release.
//!
//! A production lease must live in a store that survives any node and is reachable from
//! both sides of a partition (Kubernetes `Lease` objects, etcd, a database row with a
//! compare-and-set), have a TTL so a crashed holder does not block forever, be renewed by a
//! heartbeat while held, and be checked before acting (fencing) so a holder that lost it
//! during a pause stops acting.

use std::future::Future;
#[cfg(feature = "runtime")]
use std::io::{Read, Seek, SeekFrom, Write};
#[cfg(feature = "runtime")]
use std::path::PathBuf;
use std::pin::Pin;
#[cfg(feature = "runtime")]
use std::sync::{Arc, Mutex};
#[cfg(feature = "runtime")]
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Errors of lease operations.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease store could not be read or written.
    #[error("lease store error: {0}")]
    Store(String),
}

/// The future of a lease operation.
pub type LeaseFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, LeaseError>> + Send + 'a>>;

/// A distributed lease: at most one owner at a time.
pub trait Lease: Send + Sync {
    /// Tries to acquire (or renew) the lease for this owner; `Ok(true)` if held now.
    fn acquire(&self) -> LeaseFuture<'_>;

    /// Releases the lease if this owner holds it; `Ok(true)` if it did.
    fn release(&self) -> LeaseFuture<'_>;

    /// Whether this owner holds the lease as far as it knows (acquired, not released, not
    /// expired). No I/O.
    fn check_lease(&self) -> bool;
}

#[cfg(feature = "runtime")]
/// A lease in a file on the local host, shared by every process that uses the same path.
#[derive(Clone, Debug)]
pub struct FileLease {
    path: PathBuf,
    owner: String,
    ttl: Duration,
    /// Until when this owner holds it (by the last successful acquire).
    held_until: Arc<Mutex<Option<Instant>>>,
}

#[cfg(feature = "runtime")]
impl FileLease {
    /// Lease `name` in `dir` (created if missing) for `owner`, expiring `ttl` after acquisition.
    pub fn new(
        dir: impl Into<PathBuf>,
        name: &str,
        owner: impl Into<String>,
        ttl: Duration,
    ) -> Self {
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        FileLease {
            path: dir.into().join(format!("{safe}.lease")),
            owner: owner.into(),
            ttl,
            held_until: Arc::new(Mutex::new(None)),
        }
    }

    /// Path of the lease file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Runs `f` on the locked lease file with its current holder and expiry (ms since the
    /// epoch) and the current time.
    fn with_locked_file<T>(
        &self,
        f: impl FnOnce(&mut std::fs::File, &str, u64, u64) -> std::io::Result<T>,
    ) -> Result<T, LeaseError> {
        let err = |e: std::io::Error| LeaseError::Store(format!("{}: {e}", self.path.display()));
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(err)?;
        file.lock().map_err(err)?;
        let mut text = String::new();
        let result = file.read_to_string(&mut text).and_then(|_| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            let (holder, expiry) = text
                .trim()
                .rsplit_once(' ')
                .map(|(o, e)| (o.to_string(), e.parse::<u64>().unwrap_or(0)))
                .unwrap_or_default();
            f(&mut file, &holder, expiry, now)
        });
        let _ = file.unlock();
        result.map_err(err)
    }

    fn acquire_blocking(&self) -> Result<bool, LeaseError> {
        let started = Instant::now();
        let ttl = self.ttl;
        let owner = self.owner.clone();
        let granted = self.with_locked_file(|f, holder, expiry, now| {
            let granted = holder.is_empty() || holder == owner || expiry <= now;
            if granted {
                f.set_len(0)?;
                f.seek(SeekFrom::Start(0))?;
                write!(f, "{} {}", owner, now + ttl.as_millis() as u64)?;
                f.sync_all()?;
            }
            Ok(granted)
        })?;
        let mut held = self.held_until.lock().unwrap_or_else(|p| p.into_inner());
        *held = granted.then(|| started + ttl);
        Ok(granted)
    }

    fn release_blocking(&self) -> Result<bool, LeaseError> {
        let owner = self.owner.clone();
        let released = self.with_locked_file(|f, holder, _, _| {
            if holder == owner {
                f.set_len(0)?;
                f.sync_all()?;
                Ok(true)
            } else {
                Ok(false)
            }
        })?;
        *self.held_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(released)
    }
}

#[cfg(feature = "runtime")]
impl Lease for FileLease {
    fn acquire(&self) -> LeaseFuture<'_> {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.acquire_blocking())
                .await
                .map_err(|e| LeaseError::Store(e.to_string()))?
        })
    }

    fn release(&self) -> LeaseFuture<'_> {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.release_blocking())
                .await
                .map_err(|e| LeaseError::Store(e.to_string()))?
        })
    }

    fn check_lease(&self) -> bool {
        self.held_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }
}

#[cfg(all(test, feature = "runtime"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_owner_at_a_time_until_expiry() {
        let dir = std::env::temp_dir().join(format!("concord-lease-test-{}", std::process::id()));
        let a = FileLease::new(&dir, "sys-sbr", "a", Duration::from_millis(300));
        let b = FileLease::new(&dir, "sys-sbr", "b", Duration::from_millis(300));
        let _ = std::fs::remove_file(a.path());
        assert!(!a.check_lease());
        assert!(a.acquire().await.unwrap());
        assert!(a.check_lease());
        assert!(!b.acquire().await.unwrap(), "held by a");
        assert!(!b.check_lease());
        assert!(a.acquire().await.unwrap(), "the holder may renew");
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert!(!a.check_lease(), "expired");
        assert!(b.acquire().await.unwrap(), "expired: b takes it");
        assert!(!a.acquire().await.unwrap());
        assert!(!a.release().await.unwrap(), "a does not hold it");
        assert!(b.release().await.unwrap());
        assert!(!b.check_lease());
        assert!(a.acquire().await.unwrap(), "released: a takes it at once");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Leases for the lease-majority Split Brain Resolver strategy.
//!
//! [`Lease`] is the interface (Akka's `akka.coordination.lease.scaladsl.Lease`):
//! `acquire` answers whether this owner now holds the lease. [`FileLease`] is a real
//! implementation for processes on one host: a lease file guarded by an exclusive file lock
//! (`flock`), holding the owner and an expiry time; a holder may re-acquire, others only
//! after expiry (`release-after`).
//!
//! A production lease must live in a store that survives any node and is reachable from
//! both sides of a partition (Kubernetes `Lease` objects, etcd, a database row with a
//! compare-and-set), have a TTL so a crashed holder does not block forever, be renewed by a
//! heartbeat while held, and be checked before acting (fencing) so a holder that lost it
//! during a pause stops acting.

use std::future::Future;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Errors of lease operations.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease store could not be read or written.
    #[error("lease store error: {0}")]
    Store(String),
}

/// A distributed lease: at most one owner at a time.
pub trait Lease: Send + Sync {
    /// Tries to acquire (or renew) the lease for this owner; `Ok(true)` if held now.
    fn acquire(&self) -> Pin<Box<dyn Future<Output = Result<bool, LeaseError>> + Send + '_>>;
}

/// A lease in a file on the local host, shared by every process that uses the same path.
#[derive(Clone, Debug)]
pub struct FileLease {
    path: PathBuf,
    owner: String,
    ttl: Duration,
}

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
        }
    }

    /// Path of the lease file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn acquire_blocking(&self) -> Result<bool, LeaseError> {
        let err = |e: std::io::Error| LeaseError::Store(format!("{}: {e}", self.path.display()));
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(err)?;
        f.lock().map_err(err)?;
        let mut text = String::new();
        f.read_to_string(&mut text).map_err(err)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let (holder, expiry) = text
            .trim()
            .rsplit_once(' ')
            .map(|(o, e)| (o.to_string(), e.parse::<u64>().unwrap_or(0)))
            .unwrap_or_default();
        let granted = holder.is_empty() || holder == self.owner || expiry <= now;
        if granted {
            f.set_len(0).map_err(err)?;
            f.seek(SeekFrom::Start(0)).map_err(err)?;
            write!(f, "{} {}", self.owner, now + self.ttl.as_millis() as u64).map_err(err)?;
            f.sync_all().map_err(err)?;
        }
        let _ = f.unlock();
        Ok(granted)
    }
}

impl Lease for FileLease {
    fn acquire(&self) -> Pin<Box<dyn Future<Output = Result<bool, LeaseError>> + Send + '_>> {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.acquire_blocking())
                .await
                .map_err(|e| LeaseError::Store(e.to_string()))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_owner_at_a_time_until_expiry() {
        let dir = std::env::temp_dir().join(format!("concord-lease-test-{}", std::process::id()));
        let a = FileLease::new(&dir, "sys-sbr", "a", Duration::from_millis(300));
        let b = FileLease::new(&dir, "sys-sbr", "b", Duration::from_millis(300));
        let _ = std::fs::remove_file(a.path());
        assert!(a.acquire().await.unwrap());
        assert!(!b.acquire().await.unwrap(), "held by a");
        assert!(a.acquire().await.unwrap(), "the holder may renew");
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert!(b.acquire().await.unwrap(), "expired: b takes it");
        assert!(!a.acquire().await.unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

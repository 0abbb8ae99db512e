//! The membership record: `<data-dir>/membership.json`, written (temp file, fsync, rename)
//! when this node becomes a member (Up or WeaklyUp) of a cluster and whenever that
//! cluster's identity changes, read when the node starts. A node with a record never forms
//! a new cluster because its seed nodes did not answer in time (the decision is the core's:
//! [`concord_core::cluster_identity::may_join_self_after_seed_timeout`]).
//!
//! The file (JSON, `version` 1):
//! `{"version": 1, "system": "...", "address": "concord://sys@host:port", "uid": "...",
//! "clusterId": "16 hex digits" | null, "reformedFrom": "..." | null, "upAtUnixMs": n}`.
//! A record of another system name or address (a data directory moved or shared) is
//! ignored with a warning; an unreadable one counts as a record of an unknown cluster (the
//! cautious reading: the node keeps trying to join rather than form an island).

use std::io::Write;
use std::path::{Path, PathBuf};

use concord_core::{Address, ClusterId, ClusterIdentity, MembershipRecord, UniqueAddress};
use serde::{Deserialize, Serialize};
use tracing::warn;

/// The record's file name in the data directory.
pub const FILE_NAME: &str = "membership.json";

/// Largest record read, bytes (a record is ~250 bytes).
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// The JSON of the record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordFile {
    /// Format version (1).
    pub version: u32,
    /// The system (cluster) name.
    pub system: String,
    /// This node's address.
    pub address: String,
    /// The uid of the incarnation that wrote the record.
    pub uid: String,
    /// The cluster's identity, when it has one.
    pub cluster_id: Option<String>,
    /// The cluster it was re-formed from, if any.
    #[serde(default)]
    pub reformed_from: Option<String>,
    /// When the record was written, ms since the Unix epoch.
    pub up_at_unix_ms: u64,
}

impl RecordFile {
    /// The record of `me` as a member of a cluster with `identity`.
    pub fn new(me: &UniqueAddress, identity: Option<ClusterIdentity>) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        RecordFile {
            version: 1,
            system: me.address.system.clone(),
            address: me.address.to_string(),
            uid: me.uid.to_string(),
            cluster_id: identity.map(|i| i.id.to_string()),
            reformed_from: identity
                .and_then(|i| i.reformed_from)
                .map(|c| c.to_string()),
            up_at_unix_ms: now,
        }
    }
}

/// The record's path in `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Reads the record in `data_dir` for the node at `me`: `None` when there is none (or it
/// names another system or address).
pub fn read(data_dir: &Path, me: &Address) -> Option<MembershipRecord> {
    let file = path(data_dir);
    let text = match read_limited(&file) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            warn!(file = %file.display(), error = %e, "cannot read the membership record; taking this node for a former member of an unknown cluster");
            return Some(MembershipRecord::default());
        }
    };
    let rec: RecordFile = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            warn!(file = %file.display(), error = %e, "malformed membership record; taking this node for a former member of an unknown cluster");
            return Some(MembershipRecord::default());
        }
    };
    if rec.system != me.system || rec.address != me.to_string() {
        warn!(
            file = %file.display(), record_system = %rec.system, record_address = %rec.address,
            "the membership record is of another node; ignored"
        );
        return None;
    }
    Some(MembershipRecord {
        cluster: rec
            .cluster_id
            .as_deref()
            .and_then(|s| s.parse::<ClusterId>().ok()),
    })
}

fn read_limited(file: &Path) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    f.take(MAX_RECORD_BYTES).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// Writes `record` to `data_dir` atomically: a temporary file in the same directory,
/// fsynced, renamed over the record, and the directory fsynced (a crash leaves the old
/// record or the new one, never a torn file). Creates `data_dir` if needed.
pub fn write(data_dir: &Path, record: &RecordFile) -> std::io::Result<()> {
    std::fs::create_dir_all(data_dir)?;
    let file = path(data_dir);
    let tmp = data_dir.join(format!("{FILE_NAME}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        f.write_all(&json)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &file)?;
    if let Ok(d) = std::fs::File::open(data_dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> UniqueAddress {
        UniqueAddress::new(Address::new("shop", "127.0.0.1", 2552), 99)
    }

    #[test]
    fn written_record_is_read_back_and_only_for_the_same_node() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path(), &me().address), None);
        let id = ClusterIdentity {
            id: ClusterId(0xabc),
            reformed_from: None,
        };
        write(dir.path(), &RecordFile::new(&me(), Some(id))).unwrap();
        assert_eq!(
            read(dir.path(), &me().address),
            Some(MembershipRecord {
                cluster: Some(ClusterId(0xabc))
            })
        );
        assert!(!dir.path().join("membership.json.tmp").exists());
        let other = Address::new("shop", "127.0.0.1", 2553);
        assert_eq!(read(dir.path(), &other), None);
    }

    #[test]
    fn an_unreadable_record_counts_as_a_record_of_an_unknown_cluster() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), b"{not json").unwrap();
        assert_eq!(
            read(dir.path(), &me().address),
            Some(MembershipRecord::default())
        );
    }
}

//! [`PartitionPath`]: the validated name of a partitioned service, `"a/b/c"`.
//!
//! Spec: cluster-specification-original.md, "Partitioning" — "the mapping from partition
//! path (actor address of the format "a/b/c") to instance nodes is stored in the partition
//! table". A path is the key of the [`PartitionTable`](super::PartitionTable) and is
//! gossiped, so it is validated on construction *and* on deserialization.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The largest path, in bytes (UTF-8; valid paths are ASCII, so also in characters).
pub const MAX_PATH_LEN: usize = 255;

/// The name of a partitioned service: one or more segments of `[A-Za-z0-9_.-]+` joined by
/// `'/'`, at most [`MAX_PATH_LEN`] (255) bytes, with no empty segment (so no leading,
/// trailing or doubled `'/'`) and no segment `.` or `..`. Examples: `"orders"`,
/// `"billing/invoices"`, `"a/b.v2/c-1"`.
///
/// Ordered by its string (byte order), which is the order the leader's
/// [`place`](super::place) processes paths in, identical on every node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PartitionPath(String);

/// Why a string is not a valid [`PartitionPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionPathError {
    /// The string is empty.
    #[error("partition path is empty")]
    Empty,
    /// The string is longer than [`MAX_PATH_LEN`] bytes.
    #[error("partition path is {len} bytes long, the maximum is {max}", max = MAX_PATH_LEN)]
    TooLong {
        /// Length of the rejected string, in bytes.
        len: usize,
    },
    /// A segment is empty: the path starts or ends with `'/'` or contains `"//"`.
    #[error("partition path `{path}` has an empty segment at byte {at} (leading, trailing or doubled '/')")]
    EmptySegment {
        /// The rejected path.
        path: String,
        /// Byte offset where the empty segment starts.
        at: usize,
    },
    /// A segment `.` or `..`, which would read as a relative path.
    #[error("partition path `{path}` has the segment `{segment}` at byte {at}; `.` and `..` are not names")]
    DotSegment {
        /// The rejected path.
        path: String,
        /// The segment.
        segment: String,
        /// Byte offset where the segment starts.
        at: usize,
    },
    /// A character outside `[A-Za-z0-9_.-]` and `'/'`.
    #[error("partition path `{path}` has the invalid character {ch:?} at byte {at}; allowed are A-Z a-z 0-9 _ . - and '/' between segments")]
    InvalidChar {
        /// The rejected path.
        path: String,
        /// The offending character.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
}

impl PartitionPath {
    /// Validates `path`; see the type docs for the grammar.
    ///
    /// # Errors
    /// [`PartitionPathError`] naming the first problem found (empty, too long, invalid
    /// character, empty segment — checked in that order).
    pub fn new(path: &str) -> Result<Self, PartitionPathError> {
        validate(path)?;
        Ok(PartitionPath(path.to_string()))
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The segments, in order (`"a/b/c"` → `a`, `b`, `c`); never empty.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// Whether this path is `other` or lies below it (`"a/b"` is under `"a"`, `"ab"` is not).
    pub fn is_under(&self, other: &PartitionPath) -> bool {
        match self.0.strip_prefix(other.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

fn validate(path: &str) -> Result<(), PartitionPathError> {
    if path.is_empty() {
        return Err(PartitionPathError::Empty);
    }
    if path.len() > MAX_PATH_LEN {
        return Err(PartitionPathError::TooLong { len: path.len() });
    }
    if let Some((at, ch)) = path
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/')))
    {
        return Err(PartitionPathError::InvalidChar {
            path: path.to_string(),
            ch,
            at,
        });
    }
    let mut at = 0;
    for segment in path.split('/') {
        if segment.is_empty() {
            return Err(PartitionPathError::EmptySegment {
                path: path.to_string(),
                at,
            });
        }
        if segment == "." || segment == ".." {
            return Err(PartitionPathError::DotSegment {
                path: path.to_string(),
                segment: segment.to_string(),
                at,
            });
        }
        at += segment.len() + 1;
    }
    Ok(())
}

impl TryFrom<String> for PartitionPath {
    type Error = PartitionPathError;

    fn try_from(path: String) -> Result<Self, Self::Error> {
        validate(&path)?;
        Ok(PartitionPath(path))
    }
}

impl TryFrom<&str> for PartitionPath {
    type Error = PartitionPathError;

    fn try_from(path: &str) -> Result<Self, Self::Error> {
        PartitionPath::new(path)
    }
}

impl std::str::FromStr for PartitionPath {
    type Err = PartitionPathError;

    fn from_str(path: &str) -> Result<Self, Self::Err> {
        PartitionPath::new(path)
    }
}

impl From<PartitionPath> for String {
    fn from(path: PartitionPath) -> String {
        path.0
    }
}

impl AsRef<str> for PartitionPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PartitionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_paths() {
        for p in [
            "a",
            "a/b/c",
            "orders",
            "A_b.c-d/0/9",
            "x".repeat(255).as_str(),
        ] {
            let path = PartitionPath::new(p).unwrap();
            assert_eq!(path.as_str(), p);
            assert_eq!(path.to_string(), p);
        }
        let p = PartitionPath::new("a/b/c").unwrap();
        assert_eq!(p.segments().collect::<Vec<_>>(), ["a", "b", "c"]);
    }

    #[test]
    fn rejects_invalid_paths() {
        assert_eq!(PartitionPath::new(""), Err(PartitionPathError::Empty));
        assert_eq!(
            PartitionPath::new(&"x".repeat(256)),
            Err(PartitionPathError::TooLong { len: 256 })
        );
        for (p, at) in [("/a", 0), ("a/", 2), ("a//b", 2), ("/", 0)] {
            assert_eq!(
                PartitionPath::new(p),
                Err(PartitionPathError::EmptySegment {
                    path: p.to_string(),
                    at
                }),
                "{p}"
            );
        }
        for (p, segment, at) in [("a/../b", "..", 2), (".", ".", 0), ("a/.", ".", 2)] {
            assert_eq!(
                PartitionPath::new(p),
                Err(PartitionPathError::DotSegment {
                    path: p.to_string(),
                    segment: segment.to_string(),
                    at
                }),
                "{p}"
            );
        }
        assert!(PartitionPath::new("a/.b/c..d").is_ok());
        for (p, ch, at) in [
            ("a b", ' ', 1),
            ("a/é", 'é', 2),
            ("a:b", ':', 1),
            ("a\\b", '\\', 1),
        ] {
            assert_eq!(
                PartitionPath::new(p),
                Err(PartitionPathError::InvalidChar {
                    path: p.to_string(),
                    ch,
                    at
                })
            );
        }
    }

    #[test]
    fn error_messages_are_readable() {
        let e = PartitionPath::new("a//b").unwrap_err().to_string();
        assert!(e.contains("empty segment"), "{e}");
        let e = PartitionPath::new("a b").unwrap_err().to_string();
        assert!(e.contains("' '") && e.contains("allowed"), "{e}");
        let e = PartitionPath::new(&"y".repeat(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("300") && e.contains("255"), "{e}");
    }

    #[test]
    fn orders_by_string_and_nests() {
        let a = PartitionPath::new("a").unwrap();
        let ab = PartitionPath::new("a/b").unwrap();
        let b = PartitionPath::new("b").unwrap();
        let aa = PartitionPath::new("ab").unwrap();
        assert!(a < ab && ab < b);
        assert!(ab.is_under(&a) && a.is_under(&a));
        assert!(!aa.is_under(&a) && !a.is_under(&ab));
    }

    #[test]
    fn serde_round_trips_and_validates() {
        let p = PartitionPath::new("a/b").unwrap();
        let bytes = postcard::to_allocvec(&p).unwrap();
        assert_eq!(postcard::from_bytes::<PartitionPath>(&bytes).unwrap(), p);
        let bad = postcard::to_allocvec(&"a//b".to_string()).unwrap();
        assert!(postcard::from_bytes::<PartitionPath>(&bad).is_err());
    }
}

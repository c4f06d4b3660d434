//! The one error type of the public API.
//!
//! Owns: every failure a caller can see, as a typed variant with a message that says
//! what and where. Never: a catch-all `String` variant (`Internal` is only for a broken
//! invariant of the engine itself), or a panic in place of an error.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in hybridkv.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("I/O error during {op} on {}: {source}", path.display())]
    Io {
        /// The operation that failed (`"open"`, `"read"`, `"fsync"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying OS error.
        #[source]
        source: std::io::Error,
    },
    /// Data on disk failed a checksum or a structural check.
    #[error("corruption in {} at offset {offset}: {what}", file.display())]
    Corruption {
        /// The file that holds the bad bytes.
        file: PathBuf,
        /// Byte offset of the bad record or node.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// The caller passed an argument or option that is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The files were written by a format version this build does not read.
    #[error("unsupported format version {found} in {} (this build reads version {supported})", file.display())]
    UnsupportedVersion {
        /// The file with the unknown version.
        file: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Another process (or another `Db` in this process) holds the directory.
    #[error("database directory {} is locked by another open instance", path.display())]
    Locked {
        /// The database directory.
        path: PathBuf,
    },
    /// A previous write-ahead-log or fsync failure made the database refuse writes.
    /// Reads still work; reopen the database to recover.
    #[error("database refuses writes after an earlier failure: {0}")]
    Poisoned(String),
    /// The database was closed.
    #[error("database is closed")]
    Closed,
    /// The database was opened read-only (`Db::open_read_only`): it refuses writes,
    /// flushes, compactions and GC.
    #[error("database is open read-only")]
    ReadOnly,
    /// The merge operator refused a delta or a base (the key's value cannot be computed).
    #[error("merge operator {operator} failed on key {key}: {reason}")]
    MergeFailed {
        /// The operator's name.
        operator: String,
        /// The key, escaped (at most 32 bytes shown).
        key: String,
        /// What the operator said.
        reason: String,
    },
    /// An invariant of the engine itself was broken (a bug, not bad input or bad data on
    /// disk); the message says what and where. The operation stopped instead of going on
    /// with a result that could be wrong.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        what: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            what: what.into(),
        }
    }

    /// Whether this error reports damaged data on disk.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

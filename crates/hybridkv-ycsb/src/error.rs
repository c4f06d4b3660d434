//! Typed errors for property files and workload configuration.

use thiserror::Error;

/// A problem in a YCSB property file. Line numbers are 1-based.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PropertyError {
    /// A non-blank, non-comment line without `=`.
    #[error("line {line}: expected `key=value`, found {text:?}")]
    MissingSeparator {
        /// Line number.
        line: usize,
        /// The offending line, trimmed.
        text: String,
    },
    /// A line whose key is empty (`=value`).
    #[error("line {line}: empty key before `=`")]
    EmptyKey {
        /// Line number.
        line: usize,
    },
    /// A value that is not a valid number for its key.
    #[error("line {line}: `{key}`: {value:?} is not a valid {expected}")]
    InvalidNumber {
        /// Line number.
        line: usize,
        /// Property name.
        key: String,
        /// The value as written.
        value: String,
        /// What was expected ("non-negative integer", ...).
        expected: &'static str,
    },
    /// A proportion outside `[0, 1]` (or not finite).
    #[error("line {line}: `{key}`: proportion {value} is outside [0, 1]")]
    ProportionOutOfRange {
        /// Line number.
        line: usize,
        /// Property name.
        key: String,
        /// The parsed value.
        value: f64,
    },
    /// A value this crate does not support for its key.
    #[error("line {line}: `{key}`: unsupported value {value:?} (supported: {supported})")]
    UnsupportedValue {
        /// Line number.
        line: usize,
        /// Property name.
        key: String,
        /// The value as written.
        value: String,
        /// The accepted values.
        supported: &'static str,
    },
    /// A scan length of 0 (`minscanlength` or `maxscanlength`).
    #[error("line {line}: `{key}`: scan length must be at least 1")]
    ZeroScanLength {
        /// Line number.
        line: usize,
        /// Property name.
        key: String,
    },
    /// `minscanlength` larger than `maxscanlength`.
    #[error("minscanlength {min} is larger than maxscanlength {max}")]
    ScanLengthRange {
        /// Minimum scan length.
        min: u64,
        /// Maximum scan length.
        max: u64,
    },
    /// Every operation proportion is zero, so no operation can be generated.
    #[error("all operation proportions are zero")]
    NoOperations,
}

/// A problem configuring or running a workload.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum WorkloadError {
    /// `Workload::core` was given something other than `a`..`f`.
    #[error("unknown core workload {0:?}: expected one of a, b, c, d, e, f")]
    UnknownCoreWorkload(char),
    /// A value-mix name other than S, M, L, SD, MD, LD.
    #[error("unknown value mix {0:?}: expected one of S, M, L, SD, MD, LD")]
    UnknownValueMix(String),
    /// A run phase needs at least one loaded record to read from.
    #[error("record count is 0: set it before generating run-phase operations")]
    EmptyKeyspace,
    /// A property file (or an equivalent spec) is invalid.
    #[error(transparent)]
    Property(#[from] PropertyError),
}

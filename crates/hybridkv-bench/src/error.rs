//! The benchmark's error type: every failure is reported, never a panic.

use std::path::PathBuf;
use thiserror::Error;

/// Anything that can stop a benchmark.
#[derive(Debug, Error)]
pub enum BenchError {
    /// A file or directory operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The engine under test returned an error.
    #[error("{engine}: {message}")]
    Engine {
        /// The engine's name.
        engine: String,
        /// Its error, as text.
        message: String,
    },
    /// The workload could not be configured (bad property file, unknown letter or mix, ...).
    #[error("workload: {0}")]
    Workload(#[from] hybridkv_ycsb::WorkloadError),
    /// A bad argument or a request that cannot be carried out as asked.
    #[error("{0}")]
    Usage(String),
    /// A results or state file could not be read or written as JSON.
    #[error("{what}: {source}")]
    Json {
        /// Which file, and where in it.
        what: String,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A plot could not be drawn.
    #[error("plot {}: {message}", path.display())]
    Plot {
        /// The PNG being written.
        path: PathBuf,
        /// The drawing backend's error.
        message: String,
    },
}

impl BenchError {
    /// An I/O error with its context.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    /// An engine error, from anything printable.
    pub fn engine(engine: &str, err: impl std::fmt::Display) -> Self {
        BenchError::Engine {
            engine: engine.to_string(),
            message: err.to_string(),
        }
    }
}

/// The benchmark's result type.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

//! The storage error shared by the segment, log and store layers.
//!
//! Seams translate it into their own error enums; every variant that comes from disk names the
//! file, and corruption names the byte offset too.

use std::path::PathBuf;

use crate::segment::{DecodeError, EncodeError};

/// What went wrong inside Strata's storage layers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An operating-system I/O call failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// File or directory the call was about.
        path: PathBuf,
        /// The operating-system error.
        source: std::io::Error,
    },
    /// The disk is full (ENOSPC): nothing of the failed operation is acknowledged, and the
    /// store works again once space is freed.
    #[error("no space left on the device holding {path}")]
    NoSpace {
        /// File or directory the call was about.
        path: PathBuf,
    },
    /// Bytes on disk failed validation (CRC, framing or ordering).
    #[error("corrupt data in {file} at byte {offset}: {source}")]
    Corrupt {
        /// File holding the bad bytes.
        file: PathBuf,
        /// Byte offset of the bad structure in that file.
        offset: u64,
        /// What is wrong.
        source: DecodeError,
    },
    /// Another opener holds the store's lock file.
    #[error("store {path} is already open (its LOCK file is held by another opener)")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A log exists with another partition count than the one asked for.
    #[error("log {name:?} has {existing} partitions, {requested} were asked for")]
    PartitionCountMismatch {
        /// Log name.
        name: String,
        /// Partition count on disk.
        existing: u32,
        /// Partition count asked for.
        requested: u32,
    },
    /// A partition index outside `[0, count)`.
    #[error("partition {partition} is out of range for a log of {count} partitions")]
    PartitionOutOfRange {
        /// Partition asked for.
        partition: i32,
        /// Partition count of the log.
        count: i32,
    },
    /// The log was closed; no further operations are served.
    #[error("the log is closed")]
    Closed,
    /// An append was refused before anything was written.
    #[error("append refused: {0}")]
    Encode(#[from] EncodeError),
    /// A sync of the partition failed: the appends of that round may or may not be durable
    /// (their outcome is unknown). The partition refuses writes until its unsynced bytes are
    /// written and synced again, which every later append or sync retries.
    #[error("partition {partition}: a sync failed, appends of that round may or may not be durable: {reason}")]
    Poisoned {
        /// The failed partition.
        partition: u32,
        /// The original failure.
        reason: String,
    },
    /// A conditional append was rejected by its own precondition; nothing was written.
    #[error("the append's precondition rejected it")]
    Rejected,
    /// Options, names or arguments that cannot be honoured.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// Writing a tool's output (not the store) failed, e.g. a closed pipe.
    #[error("writing the output: {0}")]
    Output(std::io::Error),
    /// A range read asked past what the partition holds.
    #[error("partition {partition} ends at {high_water_mark}, before {end}")]
    RangePastEnd {
        /// Partition read.
        partition: u32,
        /// One past the last offset of the partition.
        high_water_mark: i64,
        /// Requested end.
        end: i64,
    },
}

impl StoreError {
    /// Wraps an I/O error with the path it concerns ([`StoreError::NoSpace`] for ENOSPC).
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::StorageFull {
            return StoreError::NoSpace { path: path.into() };
        }
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps a decode error with its file and byte offset.
    pub fn corrupt(file: impl Into<PathBuf>, offset: u64, source: DecodeError) -> Self {
        StoreError::Corrupt {
            file: file.into(),
            offset,
            source,
        }
    }
}

/// Result alias for the storage layers.
pub type StoreResult<T> = Result<T, StoreError>;

/// Adds the path to an `io::Result`.
pub(crate) trait IoContext<T> {
    /// Maps the error to [`StoreError::Io`] naming `path`.
    fn at(self, path: &std::path::Path) -> StoreResult<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> StoreResult<T> {
        self.map_err(|e| StoreError::io(path, e))
    }
}

//! The cold tier: sealed stream bytes as objects in any `object_store` backend. The default is a
//! `LocalFileSystem` under the store directory; any S3-compatible endpoint is reached by URL.

#[cfg(feature = "ursula")]
mod cache;
#[cfg(feature = "ursula")]
mod fault;
#[cfg(feature = "ursula")]
mod local;
mod object;
#[cfg(feature = "s3")]
mod s3;
#[cfg(feature = "ursula")]
mod store;
#[cfg(feature = "ursula")]
mod timeouts;

#[cfg(feature = "ursula")]
pub use fault::{FaultObjectStore, ObjectFault, ObjectOp};
#[cfg(feature = "ursula")]
pub use local::TMP_MARK;
pub use object::{
    decode_cold_object, encode_cold_object, COLD_OBJECT_HEADER_LEN, COLD_OBJECT_MAGIC,
    COLD_OBJECT_SUFFIX, COLD_OBJECT_VERSION,
};
#[cfg(feature = "s3")]
pub use s3::S3Config;
#[cfg(feature = "ursula")]
pub use store::{ColdStore, DeleteHold, UploadCheck, UploadGuard, COLD_CACHE_BYTES};
#[cfg(feature = "ursula")]
pub use timeouts::ColdTimeouts;

/// Errors of the cold tier.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ColdError {
    /// The object store failed (network, permissions, missing object, ...).
    #[cfg(feature = "ursula")]
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// A cold object failed validation.
    #[error("corrupt cold object {path} at byte {offset}: {reason}")]
    Corrupt {
        /// Object path.
        path: String,
        /// Byte offset of the bad field.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// An object is intact but does not hold what the chunk referencing it says (another
    /// object under its name, or an upload the store kept short or altered).
    #[error("cold object {path} does not hold what its chunk references: {reason}")]
    Mismatch {
        /// Object path.
        path: String,
        /// What differed.
        reason: String,
    },
    /// The object store did not answer within the cold store's deadline
    /// (`ColdTimeouts::deadline`); the request may or may not have taken effect.
    #[error("object store: {operation} {path} did not finish within {after:?}")]
    Timeout {
        /// The request (`put`, `get`, `head`, `delete`, `list`).
        operation: &'static str,
        /// Object path (or list prefix).
        path: String,
        /// The deadline that passed.
        after: std::time::Duration,
    },
    /// An object could not be encoded.
    #[error("cannot encode cold object: {0}")]
    Encode(String),
    /// The cold store URL or options were not usable.
    #[error("invalid cold store configuration: {0}")]
    Config(String),
    /// A backup holds deletions (see `ColdStore::hold_deletes`); retry after it ends.
    #[error("cold object {path} not deleted: a backup in progress holds deletions")]
    DeletesHeld {
        /// Object path.
        path: String,
    },
    /// A local directory could not be created.
    #[error("cold store directory {path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

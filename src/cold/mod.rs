//! The cold tier: sealed stream bytes as objects in any `object_store` backend. The default is a
//! `LocalFileSystem` under the store directory; any S3-compatible endpoint is reached by URL.

#[cfg(feature = "ursula")]
mod cache;
#[cfg(feature = "ursula")]
mod local;
mod object;
#[cfg(feature = "ursula")]
mod store;

#[cfg(feature = "ursula")]
pub use local::TMP_MARK;
pub use object::{
    decode_cold_object, encode_cold_object, COLD_OBJECT_HEADER_LEN, COLD_OBJECT_MAGIC,
    COLD_OBJECT_SUFFIX, COLD_OBJECT_VERSION,
};
#[cfg(feature = "ursula")]
pub use store::{ColdStore, DeleteHold, S3Config, UploadGuard, COLD_CACHE_BYTES};

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

//! The group engine's error type (infrastructure failures under the seam; stream-level answers
//! are ursula's `GroupEngineError` with a `StreamErrorCode`).

use ursula_runtime::GroupEngineError;

use crate::cold::ColdError;
use crate::StoreError;

/// Infrastructure errors under the seam (reported to callers as `GroupEngineError::Infra`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// RocksDB failed.
    #[error("group state database: {0}")]
    Db(#[from] rocksdb::Error),
    /// The segment store failed.
    #[error("payload log: {0}")]
    Store(#[from] StoreError),
    /// The cold tier failed.
    #[error("cold tier: {0}")]
    Cold(#[from] ColdError),
    /// Durable state failed validation.
    #[error("corrupt group state: {0}")]
    Corrupt(String),
    /// The caller asked for something that cannot be opened or done.
    #[error("invalid group request: {0}")]
    Invalid(String),
}

impl From<GroupError> for GroupEngineError {
    fn from(e: GroupError) -> Self {
        GroupEngineError::new(e.to_string())
    }
}

//! The error enum of the coordination seam.

use super::record::{MemberId, RecordError, Role};
use crate::error::StoreError;

/// What a coordination call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinationError {
    /// A record or value that does not follow the wire format, or an invalid name or token.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Reading the coordination log failed.
    #[error("coordination read failed: {0}")]
    Client(String),
    /// Appending to the coordination log failed (nothing partial is visible).
    #[error("coordination write failed: {0}")]
    Producer(String),
    /// Looking up a role's current holder failed.
    #[error("coordination lookup failed: {0}")]
    Admin(String),
    /// A later member took the role: the token is stale.
    #[error("fenced: another member holds role {role}")]
    Fenced {
        /// The role.
        role: Role,
    },
    /// This transport never minted the token it was asked to write under.
    #[error("member {member} does not hold role {role} through this transport")]
    NotHeld {
        /// The role.
        role: Role,
        /// The member named in the lease.
        member: MemberId,
    },
    /// Waiting for a role timed out (leadership-handle layer).
    #[error("timed out acquiring role {role}")]
    AcquireTimeout {
        /// The role.
        role: Role,
    },
    /// The transport's configuration cannot work.
    #[error("invalid coordination config: {0}")]
    InvalidConfig(String),
}

impl CoordinationError {
    /// True when the error means the caller lost the role.
    pub fn is_fenced(&self) -> bool {
        matches!(self, CoordinationError::Fenced { .. })
    }

    pub(crate) fn producer(e: StoreError) -> Self {
        CoordinationError::Producer(e.to_string())
    }

    pub(crate) fn client(e: StoreError) -> Self {
        CoordinationError::Client(e.to_string())
    }
}

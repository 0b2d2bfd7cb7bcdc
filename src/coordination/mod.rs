//! The `CoordinationTransport` seam on Strata's own log: durable monotonic epochs (fencing
//! tokens) per role, member registrations whose offsets are join sequences, leases written only
//! under the role's current token, and committed-only reads. Wire format: format/COORDINATION.md.

pub mod codec;
pub mod error;
pub mod partitioner;
pub mod record;
mod seam;
pub mod transport;

pub use error::CoordinationError;
pub use record::{
    CoordinationKey, CoordinationRecord, FencingToken, Lease, MemberId, RecordError, RecordKind,
    Registration, Role, RoleRecords,
};
pub use seam::CoordinationTransport;
pub use transport::{
    coordination_log_options, DiskCoordination, DiskCoordinationTransport, COORDINATION_LOG,
    COORDINATION_MAINTENANCE, DEFAULT_COORDINATION_PARTITIONS,
};

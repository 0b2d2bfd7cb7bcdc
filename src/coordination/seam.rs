//! The `CoordinationTransport` seam as its contract gives it (seed 003).

use super::error::CoordinationError;
use super::record::{FencingToken, Lease, MemberId, Role, RoleRecords};

/// The cluster operations a coordination client performs: epochs, registrations, leases.
#[async_trait::async_trait]
pub trait CoordinationTransport: Send + Sync {
    /// Mints a new epoch for `role`, durable and strictly greater than every earlier one, and
    /// thereby fences the member that held it.
    async fn acquire_epoch(&self, role: &Role) -> Result<FencingToken, CoordinationError>;

    /// Reads the committed records of `role`'s partition that belong to `role`, in offset order.
    async fn read_role_records(&self, role: &Role) -> Result<RoleRecords, CoordinationError>;

    /// Appends `member`'s registration outside any transaction; its offset is the join sequence.
    async fn register(&self, role: &Role, member: &MemberId) -> Result<(), CoordinationError>;

    /// Writes `lease` for `role` under `token`; commits only while `token` is the role's current one.
    async fn write_lease(
        &self,
        role: &Role,
        token: FencingToken,
        lease: &Lease,
    ) -> Result<(), CoordinationError>;

    /// The token that holds `role` now; `None` if the role was never held.
    async fn describe(&self, role: &Role) -> Result<Option<FencingToken>, CoordinationError>;
}

//! Leader election with fencing: two candidates (one transport each, as two nodes would have)
//! take a role in turn through durable epochs, the leader keeps a lease written under its token,
//! and the deposed leader's lease write is refused.
//!
//! `cargo run --example leader_election`

use std::time::Duration;

use strata::coordination::{
    CoordinationError, CoordinationTransport, DiskCoordinationTransport, FencingToken, Lease,
    MemberId, Role,
};
use strata::Store;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path())?;
    // Both transports share the store's log __coordination; each remembers what it minted.
    let node_a = DiskCoordinationTransport::open(&store)?;
    let node_b = DiskCoordinationTransport::open(&store)?;
    let role = Role::new("controller")?;
    let (a, b) = (MemberId::new("node-a")?, MemberId::new("node-b")?);
    node_a.register(&role, &a).await?;
    node_b.register(&role, &b).await?;

    // node-a leads: a new epoch (durable, greater than every earlier one), then its lease.
    let token_a = node_a.acquire_epoch(&role).await?;
    for _ in 0..3 {
        let lease = lease(&a, token_a);
        node_a.write_lease(&role, token_a, &lease).await?; // renew while leading
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("node-a leads with {token_a:?}");

    // node-b takes over (say node-a's lease expired): its epoch fences node-a.
    let token_b = node_b.acquire_epoch(&role).await?;
    node_b
        .write_lease(&role, token_b, &lease(&b, token_b))
        .await?;
    println!("node-b leads with {token_b:?}");

    // node-a, unaware, tries to renew under its old token: refused.
    match node_a
        .write_lease(&role, token_a, &lease(&a, token_a))
        .await
    {
        Err(CoordinationError::Fenced { role }) => println!("node-a is fenced from {role}"),
        other => return Err(format!("a stale token must be fenced, got {other:?}").into()),
    }
    assert_eq!(node_a.describe(&role).await?, Some(token_b));
    Ok(())
}

/// A lease of one second from now for `member` under `token`.
fn lease(member: &MemberId, token: FencingToken) -> Lease {
    let now = strata::now_ms();
    Lease {
        member: member.clone(),
        token,
        granted_at: now,
        deadline: now + 1_000,
    }
}

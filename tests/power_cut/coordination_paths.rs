//! The coordination transport's write paths: epochs, leases and registrations, with the
//! internal log compacted along the way.

use std::collections::BTreeMap;
use std::path::Path;

use strata::coordination::{
    coordination_log_options, CoordinationRecord, CoordinationTransport, DiskCoordination,
    DiskCoordinationTransport, FencingToken, Lease, MemberId, Role,
};
use strata::Store;

/// The transport on `store`, with a small coordination log (crash images copy files whole).
fn transport(store: &Store) -> strata::StoreResult<DiskCoordinationTransport> {
    let options = coordination_log_options()
        .with_segment_bytes(16 << 10)
        .with_journal_bytes(64 << 10)
        .with_maintenance_interval(None);
    Ok(DiskCoordination::open_with(store, 2, options)?.transport())
}

use super::harness::{Disk, Outcome, Workload};
use super::log_paths::{open_image, open_with_retries, runtime, verify_clean, Tally};

fn role(i: usize) -> Role {
    Role::new(&format!("role-{}", i % 2)).unwrap()
}

/// Epochs minted, leases written under them, registrations, and compaction passes of the
/// coordination log. After a power cut: every role's token is at least the last acknowledged
/// one and the next is larger than all of them; each role's latest lease is the last
/// acknowledged one or a later one whose outcome is unknown; registrations stay.
pub struct Coordination;

/// What the transport acknowledged.
#[derive(Debug, Default)]
pub struct CoordinationAcks {
    /// Tokens acknowledged per role.
    pub tokens: BTreeMap<String, Vec<FencingToken>>,
    /// Lease attempts per role: (granted_at id, acknowledged).
    pub leases: BTreeMap<String, Vec<(i64, bool)>>,
    /// Members whose registration was acknowledged.
    pub members: Vec<(String, String)>,
    pub tally: Tally,
}

impl Coordination {
    fn step(
        rt: &tokio::runtime::Runtime,
        transport: &DiskCoordinationTransport,
        i: usize,
        held: &mut BTreeMap<String, FencingToken>,
        acks: &mut CoordinationAcks,
    ) {
        let r = role(i);
        let name = r.as_str().to_string();
        let token = match held.get(&name) {
            Some(t) if !i.is_multiple_of(5) => *t,
            _ => match rt.block_on(transport.acquire_epoch(&r)) {
                Ok(t) => {
                    acks.tokens.entry(name.clone()).or_default().push(t);
                    held.insert(name.clone(), t);
                    t
                }
                Err(_) => return acks.tally.error(),
            },
        };
        let id = i as i64;
        let lease = Lease {
            member: MemberId::new("node").unwrap(),
            token,
            granted_at: id,
            deadline: id + 1000,
        };
        let ok = rt
            .block_on(transport.write_lease(&r, token, &lease))
            .is_ok();
        acks.leases.entry(name.clone()).or_default().push((id, ok));
        if !ok {
            acks.tally.error();
        }
        if i % 7 == 3 {
            let member = format!("m{i}");
            match rt.block_on(transport.register(&r, &MemberId::new(&member).unwrap())) {
                Ok(()) => acks.members.push((name, member)),
                Err(_) => acks.tally.error(),
            }
        }
    }
}

impl Workload for Coordination {
    type Acks = CoordinationAcks;

    fn name(&self) -> &'static str {
        "coordination"
    }

    fn run(&self, disk: &Disk, acks: &mut CoordinationAcks, between: &dyn Fn()) {
        let opened = open_with_retries(disk, &mut acks.tally, between, || {
            Store::open_with(&disk.root, disk.options()).and_then(|s| transport(&s).map(|t| (s, t)))
        });
        let Some((store, transport)) = opened else {
            return;
        };
        let rt = runtime();
        let mut held = BTreeMap::new();
        for i in 0..30 {
            if disk.dead() {
                return;
            }
            if i == 15 {
                between();
                acks.tally.halfway = true;
            }
            Self::step(&rt, &transport, i, &mut held, acks);
            if i % 10 == 9
                && rt
                    .block_on(transport.coordination().log().compact(1))
                    .is_err()
            {
                acks.tally.error();
            }
        }
        let r = role(0);
        let probe = || rt.block_on(transport.acquire_epoch(&r)).is_ok();
        acks.tally.probe_ok = !disk.dead() && (probe() || probe());
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &CoordinationAcks) {
        let (disk, store) = open_image(root);
        let transport = transport(&store).expect("the transport opens");
        let rt = runtime();
        for i in 0..2 {
            let r = role(i);
            let name = r.as_str().to_string();
            let acked = acks.tokens.get(&name).and_then(|t| t.iter().max().copied());
            let now = rt.block_on(transport.describe(&r)).unwrap();
            assert!(
                now >= acked,
                "{name}: token {now:?} behind acknowledged {acked:?}"
            );
            let next = rt.block_on(transport.acquire_epoch(&r)).unwrap();
            assert!(
                Some(next) > acked && Some(next) > now,
                "{name}: new token {next:?}"
            );
            let records = rt.block_on(transport.read_role_records(&r)).unwrap();
            let latest = records.iter().rev().find_map(|(_, _, rec)| match rec {
                CoordinationRecord::Lease(l) => Some(l.granted_at),
                _ => None,
            });
            let attempts = acks.leases.get(&name).cloned().unwrap_or_default();
            let last_acked = attempts.iter().rposition(|a| a.1);
            let mut allowed = vec![last_acked.map(|i| attempts[i].0)];
            allowed.extend(
                attempts[last_acked.map_or(0, |i| i + 1)..]
                    .iter()
                    .map(|a| Some(a.0)),
            );
            assert!(
                allowed.contains(&latest),
                "{name}: latest lease {latest:?}, allowed {allowed:?}"
            );
            for (_, member) in acks.members.iter().filter(|(n, _)| *n == name) {
                let found = records.iter().any(|(_, _, rec)| {
                    matches!(rec, CoordinationRecord::Registration(reg) if reg.member.as_str() == member)
                });
                assert!(found, "{name}: registration of {member} lost");
            }
        }
        drop(transport);
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &CoordinationAcks) -> Outcome {
        acks.tally.outcome()
    }
}

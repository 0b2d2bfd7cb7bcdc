//! `DiskCoordinationTransport`: the coordination seam on an internal Strata log.
//!
//! Every record of a role (epoch, registration, lease) goes to one partition of the log
//! `__coordination`, chosen by Kafka's murmur2 of the role name. Minted epochs are epoch records
//! in that log, so they are durable before `acquire_epoch` returns and monotonic across restarts
//! (the log is scanned for them at open). Checks that must be atomic with a write (minting the
//! next epoch, admitting a lease only under the current token) run inside the log's writer thread
//! through [`Log::append_with`], in order with every other write of the log, so two transports
//! racing on one store are serialized without holding a lock across I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::codec::{
    decode_epoch, decode_key, decode_value, encode_epoch_key, encode_epoch_value, encode_key,
    encode_value,
};
use super::error::CoordinationError;
use super::partitioner::role_partition;
use super::record::{
    CoordinationKey, CoordinationRecord, FencingToken, Lease, MemberId, Registration, Role,
    RoleRecords,
};
use super::seam::CoordinationTransport;
use crate::error::{StoreError, StoreResult};
use crate::event_log::{DiskEventLog, MetadataEventLog, MetadataLogError};
use crate::log::{CompactionPolicy, Log, LogOptions};
use crate::segment::{NewRecord, RecordRef};
use crate::store::Store;

/// Name of the internal log.
pub const COORDINATION_LOG: &str = "__coordination";
/// Partitions of the internal log when it is first created.
pub const DEFAULT_COORDINATION_PARTITIONS: u32 = 16;

/// How often the coordination log is compacted in the background.
pub const COORDINATION_MAINTENANCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Options of the internal log. It is keyed compacted (every record's key is its role, kind
/// and member), so it keeps the latest epoch and lease of each role and the latest registration
/// of each member instead of every renewal ever written; no tombstone is ever written for an
/// epoch, so the largest token of each role survives every pass and epochs keep increasing
/// across restarts.
pub fn coordination_log_options() -> LogOptions {
    LogOptions {
        segment_bytes: 1 << 20,
        journal_bytes: 4 << 20,
        compaction: CompactionPolicy {
            enabled: true,
            min_cleanable_ratio: 0.5,
            ..CompactionPolicy::default()
        },
        maintenance_interval: Some(COORDINATION_MAINTENANCE),
        ..LogOptions::default()
    }
}

#[derive(Debug, Default)]
struct Epochs {
    /// Latest token minted per role, including one whose record is still being synced.
    minted: HashMap<Role, FencingToken>,
    /// Latest token per role whose epoch record is durable.
    durable: HashMap<Role, FencingToken>,
    /// Producer id the next role (or an epoch overflow) starts with.
    next_producer_id: i64,
}

impl Epochs {
    fn observe(&mut self, role: Role, token: FencingToken) {
        self.next_producer_id = self.next_producer_id.max(token.producer_id() + 1);
        let newer = |t: &FencingToken| *t < token;
        if self.minted.get(&role).is_none_or(newer) {
            self.minted.insert(role.clone(), token);
        }
        if self.durable.get(&role).is_none_or(newer) {
            self.durable.insert(role, token);
        }
    }

    fn mint(&mut self, role: &Role) -> Result<FencingToken, CoordinationError> {
        let next = match self.minted.get(role) {
            Some(t) if t.producer_epoch() < i16::MAX => {
                FencingToken::new(t.producer_id(), t.producer_epoch() + 1)?
            }
            _ => {
                let id = self.next_producer_id;
                self.next_producer_id += 1;
                FencingToken::new(id, 0)?
            }
        };
        self.minted.insert(role.clone(), next);
        Ok(next)
    }
}

/// The epoch state of one store's coordination log, shared by every transport on that store.
#[derive(Debug)]
pub struct DiskCoordination {
    log: Log,
    epochs: Arc<Mutex<Epochs>>,
}

impl DiskCoordination {
    /// The coordination state of `store`, opening (or creating, with `partitions` partitions)
    /// its internal log and recovering every minted epoch on first use.
    pub fn open(store: &Store, partitions: u32) -> StoreResult<Arc<Self>> {
        Self::open_with(store, partitions, coordination_log_options())
    }

    /// [`DiskCoordination::open`] with other options for the internal log (sizes, for tests
    /// and small deployments; keep compaction enabled so the log stays small).
    pub fn open_with(
        store: &Store,
        partitions: u32,
        options: LogOptions,
    ) -> StoreResult<Arc<Self>> {
        store.shared(|| {
            let existing = store
                .logs()
                .into_iter()
                .find(|l| l.name == COORDINATION_LOG);
            let partitions = existing.map_or(partitions, |l| l.partitions);
            let log = store.open_log(COORDINATION_LOG, partitions, options)?;
            let mut epochs = Epochs::default();
            for p in 0..log.partition_count() {
                log.visit(p, 0, i64::MAX, &mut |r: RecordRef<'_>| {
                    let epoch = r.key.map(|k| decode_epoch(k, r.value));
                    match epoch {
                        Some(Ok(Some((role, token)))) => epochs.observe(role, token),
                        Some(Err(e)) => {
                            return Err(StoreError::Invalid(format!(
                                "epoch record at {COORDINATION_LOG}/{p}@{}: {e}",
                                r.offset
                            )))
                        }
                        _ => {}
                    }
                    Ok(())
                })?;
            }
            Ok(DiskCoordination {
                log,
                epochs: Arc::new(Mutex::new(epochs)),
            })
        })
    }

    /// A new transport on this state; it holds only the tokens it mints itself.
    pub fn transport(self: &Arc<Self>) -> DiskCoordinationTransport {
        DiskCoordinationTransport {
            core: self.clone(),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The internal log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    fn partition(&self, role: &Role) -> u32 {
        role_partition(role.as_str(), self.log.partition_count())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Epochs> {
        self.epochs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A durable, embedded [`CoordinationTransport`] on a Strata store.
#[derive(Debug)]
pub struct DiskCoordinationTransport {
    core: Arc<DiskCoordination>,
    /// Tokens this transport minted, per role (the writer each epoch binds).
    held: Mutex<HashMap<Role, FencingToken>>,
}

impl DiskCoordinationTransport {
    /// A transport on `store`'s coordination log (created with 16 partitions if missing).
    pub fn open(store: &Store) -> StoreResult<Self> {
        Ok(DiskCoordination::open(store, DEFAULT_COORDINATION_PARTITIONS)?.transport())
    }

    /// [`Self::open`] on tokio's blocking pool (the internal log's recovery never holds up the
    /// caller's executor thread).
    pub async fn open_async(store: &Store) -> StoreResult<Self> {
        let store = store.clone();
        crate::blocking::off_executor(move || Self::open(&store)).await
    }

    /// The shared coordination state.
    pub fn coordination(&self) -> &Arc<DiskCoordination> {
        &self.core
    }

    /// The token this transport holds for `role`, if it minted one.
    pub fn held_token(&self, role: &Role) -> Option<FencingToken> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(role)
            .copied()
    }
}

fn keyed(key: &CoordinationKey, record: &CoordinationRecord) -> NewRecord {
    NewRecord::keyed(crate::now_ms(), encode_key(key), encode_value(record))
}

#[async_trait::async_trait]
impl CoordinationTransport for DiskCoordinationTransport {
    async fn acquire_epoch(&self, role: &Role) -> Result<FencingToken, CoordinationError> {
        let partition = self.core.partition(role);
        let epochs = self.core.epochs.clone();
        let minted_role = role.clone();
        let appended = self
            .core
            .log
            .append_with(move || {
                let token = epochs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .mint(&minted_role)?;
                let record = NewRecord::keyed(
                    crate::now_ms(),
                    encode_epoch_key(&minted_role),
                    Some(encode_epoch_value(token)),
                );
                Ok::<_, CoordinationError>((vec![(partition, vec![record])], token))
            })
            .await
            .map_err(CoordinationError::producer)?;
        let (_, token) = appended?;
        self.core.lock().observe(role.clone(), token);
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(role.clone(), token);
        Ok(token)
    }

    async fn read_role_records(&self, role: &Role) -> Result<RoleRecords, CoordinationError> {
        let partition = self.core.partition(role);
        let reader = DiskEventLog::new(self.core.log.clone());
        let low = self
            .core
            .log
            .low_water_mark(partition)
            .map_err(CoordinationError::client)?;
        let high = self
            .core
            .log
            .high_water_mark(partition)
            .map_err(CoordinationError::client)?;
        let mut records = RoleRecords::new();
        let mut bad_record = None;
        let mut visit = |r: crate::event_log::MetadataEventRecord| {
            let Some(key) = r.key.as_deref().and_then(|k| decode_key(k).ok()) else {
                return Ok(());
            };
            if key.role != *role {
                return Ok(());
            }
            let value = (!r.tombstone).then_some(&r.payload[..]);
            match decode_value(key.kind, value) {
                Ok(record) => {
                    records.push((r.offset, key, record));
                    Ok(())
                }
                Err(e) => {
                    bad_record = Some(e);
                    Err(MetadataLogError::Other("stop".into()))
                }
            }
        };
        let scanned = reader
            .visit_range(partition as i32, low, high, &mut visit)
            .await;
        if let Some(e) = bad_record {
            return Err(CoordinationError::Record(e));
        }
        scanned.map_err(|e| CoordinationError::Client(e.to_string()))?;
        Ok(records)
    }

    async fn register(&self, role: &Role, member: &MemberId) -> Result<(), CoordinationError> {
        let key = CoordinationKey::registration(role.clone(), member.clone());
        let value = CoordinationRecord::Registration(Registration {
            member: member.clone(),
            registered_at: crate::now_ms(),
        });
        self.core
            .log
            .append(self.core.partition(role), vec![keyed(&key, &value)])
            .await
            .map_err(CoordinationError::producer)?;
        Ok(())
    }

    async fn write_lease(
        &self,
        role: &Role,
        token: FencingToken,
        lease: &Lease,
    ) -> Result<(), CoordinationError> {
        if self.held_token(role) != Some(token) {
            return Err(CoordinationError::NotHeld {
                role: role.clone(),
                member: lease.member.clone(),
            });
        }
        let partition = self.core.partition(role);
        let epochs = self.core.epochs.clone();
        let role = role.clone();
        let record = keyed(
            &CoordinationKey::lease(role.clone()),
            &CoordinationRecord::Lease(lease.clone()),
        );
        let appended = self
            .core
            .log
            .append_with(move || {
                let current = epochs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .minted
                    .get(&role)
                    .copied();
                if current != Some(token) {
                    return Err(CoordinationError::Fenced { role });
                }
                Ok((vec![(partition, vec![record])], ()))
            })
            .await
            .map_err(CoordinationError::producer)?;
        appended.map(|_| ())
    }

    async fn describe(&self, role: &Role) -> Result<Option<FencingToken>, CoordinationError> {
        if self.core.log.is_closed() {
            return Err(CoordinationError::Admin(
                "the coordination log is closed".into(),
            ));
        }
        Ok(self.core.lock().durable.get(role).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_overflow_moves_to_a_new_larger_producer_id() {
        let role = Role::new("r").unwrap();
        let other = Role::new("o").unwrap();
        let mut epochs = Epochs::default();
        epochs.observe(other.clone(), FencingToken::new(4, 9).unwrap());
        assert_eq!(
            epochs.mint(&role).unwrap(),
            FencingToken::new(5, 0).unwrap(),
            "a new role gets a fresh id"
        );
        epochs.observe(role.clone(), FencingToken::new(5, i16::MAX).unwrap());
        let next = epochs.mint(&role).unwrap();
        assert_eq!(next, FencingToken::new(6, 0).unwrap());
        assert!(next > FencingToken::new(5, i16::MAX).unwrap());
        assert_eq!(
            epochs.mint(&other).unwrap(),
            FencingToken::new(4, 10).unwrap()
        );
    }
}

//! The `GroupEngine` seam (ursula-runtime 0.4.1) on durable state.
//!
//! - Group state (streams, producers and their receipts, buckets, quotas, usage, the cold
//!   manifest and the cold-GC queue, the commit index) lives in the store's one RocksDB, under
//!   the group's key prefix ([`state_db`]), beside every other group's. Every command is
//!   persisted as one commit record in the payload log (one fdatasync, which also covers its
//!   payloads), then applied to RocksDB as one atomic `WriteBatch` without RocksDB's WAL;
//!   recovery replays the commit records RocksDB had not flushed (format/GROUP_STATE.md).
//! - Stream payloads live in segment partitions of the group's payload log, one record per
//!   append, written just before the commit record that references them.
//! - Sealed prefixes move to the cold tier ([`crate::cold::ColdStore`]); external payloads stay
//!   in the caller's object; reads stitch cold chunks, external segments and hot records.
//!
//! The engine keeps every small table in memory (loaded at open). Each command runs one
//! pipeline: **plan** on a clone of that state (a persistent value: the clone shares every row),
//! collecting the new state and its writes in a `Tx` (`tx.rs`); **persist** the writes as one
//! commit record (one fdatasync); **apply** them to RocksDB and then take the planned state as the
//! engine's own. Planning never changes the engine's state, so a failed or abandoned command
//! leaves nothing to undo; a commit that fails after its record may have reached the log is
//! settled by the next command (the log decides whether it counts), never by reloading memory.
//!
//! ```
//! use bytes::Bytes;
//! use strata::group::DiskGroupEngine;
//! use ursula_runtime::{AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine, ReadStreamRequest};
//! use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let store = strata::Store::open(dir.path())?;
//! let mut engine = DiskGroupEngine::open_local(&store, "group-0")?;
//! let p = ShardPlacement { core_id: CoreId(0), shard_id: ShardId(0), raft_group_id: RaftGroupId(0) };
//! let none = ColdWriteAdmission::default();
//! let id = BucketStreamId::new("tenant", "orders");
//! engine.create_stream(CreateStreamRequest::new(id.clone(), "text/plain"), p, none).await?;
//! let mut append = AppendRequest::from_bytes(id.clone(), Bytes::from_static(b"order 1\n"));
//! append.content_type = "text/plain".into();
//! engine.append(append, p, none).await?; // durable: one fdatasync of the payload log
//! engine.flush_stream_cold(&id, 1 << 20, p).await?; // plan, upload a zstd object, commit it
//! let read = ReadStreamRequest { stream_id: id, offset: 0, max_len: 1 << 20, now_ms: 0, record: None, max_records: None };
//! assert_eq!(engine.read_stream(read, p).await?.payload, b"order 1\n"); // served from the cold tier
//! # Ok(())
//! # }
//! ```

mod append;
mod append_run;
mod checkpoint;
mod cold_tier;
mod deferred_digests;
mod error;
mod lifecycle;
mod persist;
mod producers;
mod read;
mod records;
mod seam;
mod snapshot;
mod state;
mod transaction;
mod tx;
mod usage;
mod verify;
mod worker;

// Short paths for the pieces the commands use (and the public codecs).
pub use cold_tier::cold_paths;
use cold_tier::{cold_worker, gc_failures};
use persist::replay::replay;
pub use persist::{commit_record, keys, payload_host, rows, state_db, stream_row};
use persist::{db, payload};
use state::{integrity, streams};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use ursula_runtime::{GroupEngineError, GroupEngineMetrics};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::StreamErrorCode;

use crate::cold::ColdStore;
use crate::log::LogOptions;
use crate::store::Store;

pub use cold_paths::ColdNamespace;
pub use cold_worker::ColdGcReport;
pub use db::GROUP_STATE_VERSION;
pub use error::GroupError;
pub use gc_failures::ColdGcFailure;
pub use payload::PAYLOAD_PARTITIONS;
pub use read::MAX_READ_BYTES;
pub use seam::DiskGroupEngineFactory;
pub use verify::{GroupFinding, GroupVerifyReport};

use db::GroupDb;
use deferred_digests::DigestJob;
use payload::PayloadLog;
use persist::legacy_layout;
use state::GroupState;
use state_db::StateDb;
use tx::Tx;

/// How a group engine is opened. Refused at open (`GroupError::Invalid` naming the option)
/// when out of range.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupOptions {
    /// Options of the payload log (durability, segment size, compression). Default
    /// `LogOptions::default()`; durability must stay `Sync`.
    pub payload_log: LogOptions,
    /// zstd level of cold objects (1 ..= 22; default 3).
    pub cold_zstd_level: i32,
    /// How old an unreferenced object must be before the orphan sweep deletes it (default 15
    /// minutes; any duration, zero included). Uploads whose `flush_cold` has not come yet are
    /// younger than this, so keep it longer than the slowest upload-to-commit of any writer.
    pub orphan_grace: std::time::Duration,
    /// Most bytes one read returns, by offset or by record coordinates (default
    /// [`MAX_READ_BYTES`], 64 MiB; 1 KiB ..= 1 GiB). A read by records returns at least one
    /// whole record.
    pub max_read_bytes: usize,
    /// How long a cold-GC entry whose delete failed waits before it is tried again (set aside,
    /// the entries behind it go on); doubled after each further failure, up to an hour or this
    /// value if longer. Default 1 minute; 1 ms ..= 1 day.
    pub cold_gc_backoff: std::time::Duration,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self {
            payload_log: LogOptions::default(),
            cold_zstd_level: 3,
            orphan_grace: std::time::Duration::from_secs(15 * 60),
            max_read_bytes: MAX_READ_BYTES,
            cold_gc_backoff: std::time::Duration::from_secs(60),
        }
    }
}

with_setters!(GroupOptions {
    with_payload_log => payload_log: LogOptions,
    with_cold_zstd_level => cold_zstd_level: i32,
    with_orphan_grace => orphan_grace: std::time::Duration,
    with_max_read_bytes => max_read_bytes: usize,
    with_cold_gc_backoff => cold_gc_backoff: std::time::Duration,
});

impl GroupOptions {
    /// Checks the options; the message names the option at fault.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=22).contains(&self.cold_zstd_level) {
            return Err(format!(
                "cold_zstd_level must lie in [1, 22], not {}",
                self.cold_zstd_level
            ));
        }
        let day = std::time::Duration::from_secs(86_400);
        if !(std::time::Duration::from_millis(1)..=day).contains(&self.cold_gc_backoff) {
            return Err(format!(
                "cold_gc_backoff must lie in [1 ms, 1 day], not {:?}",
                self.cold_gc_backoff
            ));
        }
        if !(1 << 10..=1 << 30).contains(&self.max_read_bytes) {
            return Err(format!(
                "max_read_bytes must lie in [1 KiB, 1 GiB], not {}",
                self.max_read_bytes
            ));
        }
        if self.payload_log.durability != crate::Durability::Sync {
            return Err(
                "payload_log.durability must be Durability::Sync: group state never \
                        references a payload that is not durable"
                    .into(),
            );
        }
        self.payload_log
            .validate()
            .map_err(|e| format!("payload_log: {e}"))
    }
}

/// A durable group engine: one group's state under its prefix in the store's RocksDB
/// (`<root>/group_state`), its payloads in its range of the store's group payload log
/// (`__groups`; `__group_<name>` for a group of an earlier version), its cold objects in a
/// [`ColdStore`].
pub struct DiskGroupEngine {
    name: String,
    /// The RocksDB state behind its apply thread, which takes synced commit records beside the
    /// next commands; read through [`Self::db`], which waits for them.
    db: persist::applier::Applier<GroupDb>,
    state: GroupState,
    payloads: PayloadLog,
    cold: ColdStore,
    options: GroupOptions,
    /// The group's cold object names.
    cold_ns: ColdNamespace,
    /// A commit that failed after its record may have reached the log, not settled yet
    /// ([`Self::settle`]).
    pending: Option<PendingCommit>,
    /// Where each commit is reported (ursula's runtime metrics), and as which placement.
    metrics: Option<(GroupEngineMetrics, ShardPlacement)>,
    /// Strata's own commit metrics of the group.
    commit_metrics: crate::metrics::GroupCommitMetrics,
    /// ursula's cold-index pages in the runtime's cold store, when the runtime compacts
    /// (see [`cold_tier::runtime_index`]).
    cold_index: Option<cold_tier::runtime_index::RuntimeColdIndex>,
    /// Cold-GC entries set aside after failed deletes.
    gc_failures: cold_tier::gc_failures::GcFailures,
    /// Registered (weakly) with the store for backups while the engine lives.
    _backup: Arc<persist::backup::GroupBackup>,
}

impl std::fmt::Debug for DiskGroupEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskGroupEngine")
            .field("name", &self.name)
            .field("streams", &self.state.streams.len())
            .field("commit_index", &self.state.commit_index)
            .finish()
    }
}

impl DiskGroupEngine {
    /// Opens (creating) group `name` of `store` with its cold tier in `cold`.
    pub fn open(
        store: &Store,
        name: &str,
        cold: ColdStore,
        options: GroupOptions,
    ) -> Result<Self, GroupError> {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(GroupError::Invalid(format!(
                "group name {name:?} must be non-empty [A-Za-z0-9_-]"
            )));
        }
        if name.len() > state_db::MAX_GROUP_NAME {
            return Err(GroupError::Invalid(format!(
                "group name {name:?} is longer than {} bytes",
                state_db::MAX_GROUP_NAME
            )));
        }
        options.validate().map_err(GroupError::Invalid)?;
        let payloads = PayloadLog::open(store, name, options.payload_log.clone())?;
        let db = Self::open_state(store, name, &payloads)?;
        replay(&db, &payloads)?;
        let state = db.load()?;
        let backup = Arc::new(persist::backup::GroupBackup {
            payloads: payloads.log().clone(),
            cold: cold.clone(),
        });
        let hold: Arc<dyn crate::store::backup::BackupHold> = backup.clone();
        store.register_backup_hold(name, Arc::downgrade(&hold));
        Ok(Self {
            name: name.to_string(),
            db: persist::applier::Applier::new(db),
            state,
            payloads,
            cold,
            options,
            cold_ns: ColdNamespace::new(&store.id(), name),
            pending: None,
            metrics: None,
            commit_metrics: crate::metrics::GroupCommitMetrics::new(name),
            cold_index: None,
            gc_failures: Default::default(),
            _backup: backup,
        })
    }

    /// [`Self::open`] on tokio's blocking pool: the state database's first open, the group's
    /// replay and a new group's partitions never hold up the caller's executor thread.
    pub async fn open_async(
        store: &Store,
        name: &str,
        cold: ColdStore,
        options: GroupOptions,
    ) -> Result<Self, GroupError> {
        let (store, name) = (store.clone(), name.to_string());
        crate::blocking::off_executor(move || Self::open(&store, &name, cold, options)).await
    }

    /// Reports every commit to ursula's runtime metrics as one WAL batch of `placement`:
    /// `sync_ns` is the commit record's append and fdatasync, `write_ns` applying it to RocksDB.
    pub fn with_metrics(mut self, metrics: GroupEngineMetrics, placement: ShardPlacement) -> Self {
        self.metrics = Some((metrics, placement));
        self
    }

    /// Keeps ursula's cold-index pages in `runtime_cold` (the shard runtime's cold store, which
    /// must name the same objects by the same paths as this engine's cold store) for the
    /// runtime's background cold compaction (`ShardRuntime::compact_cold_once`), which finds
    /// its work through them. Every stream's pages are written by the next command.
    pub fn with_runtime_cold_index(
        mut self,
        runtime_cold: ursula_runtime::ColdStoreHandle,
    ) -> Self {
        let index = cold_tier::runtime_index::RuntimeColdIndex::new(runtime_cold, &self.state);
        self.cold_index = Some(index);
        self
    }

    /// Opens group `name` with the default cold store, a local directory `<root>/cold` (through
    /// the store's file layer).
    pub fn open_local(store: &Store, name: &str) -> Result<Self, GroupError> {
        let cold = ColdStore::local_with_fs(store.fs().clone(), &store.root().join("cold"))?;
        Self::open(store, name, cold, GroupOptions::default())
    }

    /// Group `name`'s rows in the store's state database (moved there first from the
    /// per-group layout of earlier versions). A group new to the database replays its payload
    /// log from the start, which must then still hold its first commit record.
    fn open_state(store: &Store, name: &str, payloads: &PayloadLog) -> Result<GroupDb, GroupError> {
        let state = StateDb::of_store(store)?;
        let prefix = state_db::group_prefix(name);
        let log_end = payloads.commit_end()?;
        legacy_layout::adopt_legacy_state(store, &state, (name, &prefix), log_end)?;
        let db = GroupDb::open(state, prefix, log_end)?;
        let low = payloads.commit_low_water_mark()?;
        if db.is_fresh() && low > 0 {
            return Err(GroupError::Corrupt(format!(
                "group {name:?} has no rows in the state database, but its payload log no \
                 longer holds commit records below offset {low}"
            )));
        }
        Ok(db)
    }

    /// The names of the store's groups, in order: those in the store's group payload log's
    /// directory and those with a log of their own (created by earlier versions). Opens the
    /// group payload log (with the default options) if no group has yet.
    pub fn group_names(store: &Store) -> Result<Vec<String>, GroupError> {
        let mut names = store.own_log_group_names();
        if store
            .logs()
            .iter()
            .any(|l| l.name == payload_host::GROUPS_LOG)
        {
            let options = GroupOptions::default().payload_log;
            names.extend(payload_host::PayloadHost::of_store(store, &options)?.names());
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Directory of the store's RocksDB, which holds the state of every group.
    pub fn state_dir(store: &Store) -> PathBuf {
        store.root().join(state_db::STATE_DIR)
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cold store.
    pub fn cold_store(&self) -> &ColdStore {
        &self.cold
    }

    /// The group's cold object names.
    pub fn cold_namespace(&self) -> &ColdNamespace {
        &self.cold_ns
    }

    /// The partition of the payload log that holds stream `id`'s hot bytes (fixed forever).
    pub fn payload_partition(id: &BucketStreamId) -> u32 {
        PayloadLog::partition_for(id)
    }

    /// The commit index: mutating outcomes applied so far.
    pub fn commit_index(&self) -> u64 {
        self.state.commit_index
    }

    /// Bytes of the group still held hot in segments.
    pub fn hot_bytes(&self) -> u64 {
        self.state.group_hot_bytes()
    }

    /// Starts a command: settles a commit that failed, or whose command's future was dropped
    /// while it awaited durability, before it ([`Self::settle`]). A command plans on its own
    /// [`Tx`] and commits only at its end ([`Self::commit`]), so a command whose future is
    /// dropped at an earlier await has changed nothing; payload records it had already written
    /// are referenced by nothing and are reclaimed with their segments.
    pub(crate) fn begin(&mut self) -> Result<(), GroupEngineError> {
        Ok(self.settle()?)
    }

    /// Settles a commit that did not finish (it failed, or its future was dropped while it
    /// awaited durability): makes the log durable (a failed sync left its bytes to be written
    /// again), lets RocksDB apply every commit record it lacks, and then takes the commit's
    /// planned state if its record is in the log (durable now, so the command took effect,
    /// although it reported an error or nothing) or drops it if not. Memory is not reloaded.
    fn settle(&mut self) -> Result<(), GroupError> {
        if self.db.has_failed() {
            self.db()?;
        }
        let Some(pending) = &self.pending else {
            return Ok(());
        };
        let offset = pending.offset;
        let end = crate::blocking::blocking(|| {
            self.payloads.sync()?;
            replay(self.db()?, &self.payloads)?;
            self.payloads.commit_end()
        })?;
        if let Some(pending) = self.pending.take() {
            if end > offset {
                self.apply(pending.into_finished());
            }
        }
        Ok(())
    }

    /// The RocksDB state, once every commit record handed to the apply thread is in it (after
    /// a failed one, once replaying the log has brought RocksDB up to the log).
    pub(crate) fn db(&self) -> Result<&GroupDb, GroupError> {
        self.db.settle(|db| replay(db, &self.payloads).map(|_| ()))
    }

    /// Persists, then applies `tx`: seals it (stream rows and counters), appends its commit
    /// record to the payload log and awaits its durability (one journal round, which also
    /// covers the command's payloads; large appends' digests are hashed meanwhile and added
    /// to the rows after it), then hands the record to the apply thread, which writes it to
    /// RocksDB without a sync of its own beside the next commands ([`persist::applier`]; every
    /// read of RocksDB waits for it), and takes its planned state as the engine's. A
    /// transaction that writes nothing changes nothing.
    ///
    /// The wait for durability is a future: on a current-thread runtime (ursula's
    /// thread-per-core mode) the round runs on a commit worker and the executor serves other
    /// groups meanwhile. The planned state waits in [`Self::pending`] across that await, so a
    /// command whose future is dropped there is settled by the next one ([`Self::settle`]:
    /// its record, written at the first poll, takes effect once it is durable); on failure it
    /// waits there too and the error is reported.
    async fn commit(&mut self, mut tx: Tx) -> Result<(), GroupEngineError> {
        let counters = |s: &GroupState| (s.commit_index, s.next_gc_seq);
        if tx.is_empty() && counters(&tx.state) == counters(&self.state) {
            return Ok(());
        }
        tx.seal();
        // Nothing reached the log if these fail: the planned state is dropped.
        let record = tx.take_record()?;
        let offset = self.payloads.next_commit_offset()?;
        let digests = tx.start_digests();
        self.pending = Some(PendingCommit {
            tx,
            offset,
            digests,
        });
        let started = Instant::now();
        let committed = self.payloads.commit_async(record.clone(), now_ms()).await;
        let sync = started.elapsed();
        let Some(pending) = self.pending.take() else {
            return Err(GroupError::Corrupt("a commit lost its planned state".into()).into());
        };
        // Before the outcome is looked at: a pending transaction holds its digests too.
        let mut tx = pending.into_finished();
        let persisted = committed.and_then(|at| {
            debug_assert_eq!(
                at, offset,
                "the engine is the commit partition's only writer"
            );
            self.commit_metrics.committed(sync);
            // The rows `finish_digests` wrote again, applied after the record in one batch.
            let rewrites = tx.take_record()?;
            self.db
                .submit(self.apply_job([record, rewrites], offset + 1, sync));
            Ok(())
        });
        match persisted {
            Ok(()) => {
                self.apply(tx);
                Ok(())
            }
            Err(e) => {
                self.pending = Some(PendingCommit {
                    tx,
                    offset,
                    digests: None,
                });
                if let Err(settling) = self.settle() {
                    tracing::warn!(group = %self.name, error = %settling, "a failed commit stays unsettled until the next command");
                }
                Err(e.into())
            }
        }
    }

    /// The work of applying a synced commit record and the rows written again after it (`next`
    /// is the replay position after the record) to RocksDB on the apply thread, reporting the
    /// commit's times once it is applied.
    fn apply_job(
        &self,
        records: [Bytes; 2],
        next: u64,
        sync: Duration,
    ) -> impl FnOnce(&GroupDb) -> Result<(), GroupError> + Send + 'static {
        let commit_metrics = self.commit_metrics.clone();
        let metrics = self.metrics.clone();
        move |db: &GroupDb| {
            let started = Instant::now();
            db.apply(&[&records[0], &records[1]], next)?;
            let write = started.elapsed();
            commit_metrics.applied(write);
            if let Some((metrics, placement)) = &metrics {
                let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                metrics.record_wal_batch(*placement, 1, nanos(write), nanos(sync));
            }
            Ok(())
        }
    }

    /// Takes a committed transaction's state as the engine's and marks the runtime cold-index
    /// pages it made stale.
    fn apply(&mut self, tx: Tx) {
        let (state, pages) = tx.into_applied();
        self.state = state;
        if let Some(index) = self.cold_index.as_mut() {
            for (id, range) in &pages {
                index.mark(id, *range);
            }
        }
    }

    /// Marks stream `id` so the commit writes its row as the planned state holds it then.
    fn save_stream(&self, tx: &mut Tx, id: &BucketStreamId) {
        tx.mark_stream(id);
    }

    /// Marks the usage row of `bucket` for `tx` to write (as its planned state holds it when
    /// the command is sealed).
    fn save_usage(&self, tx: &mut Tx, bucket: &str) {
        tx.mark_usage(bucket);
    }
}

/// A commit whose record may have been appended but whose command has not seen it durable (it
/// awaits that, failed, or its future was dropped): its transaction, the offset its commit
/// record was to get, and the digests hashed beside it that the transaction still lacks.
struct PendingCommit {
    tx: Tx,
    offset: u64,
    digests: Option<DigestJob>,
}

impl PendingCommit {
    /// The transaction with every digest it planned (waits for the hashing still running).
    fn into_finished(self) -> Tx {
        let mut tx = self.tx;
        if let Some(job) = self.digests {
            tx.finish_digests(job);
        }
        tx
    }
}

/// Milliseconds since the Unix epoch (the timestamp of commit records).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `StreamNotFound` for `id`.
pub(crate) fn not_found(id: &BucketStreamId) -> GroupEngineError {
    GroupEngineError::stream(
        StreamErrorCode::StreamNotFound,
        format!("stream '{id}' does not exist"),
    )
}

/// A stream error without extra context.
pub(crate) fn stream_error(code: StreamErrorCode, message: impl Into<String>) -> GroupEngineError {
    GroupEngineError::stream(code, message)
}

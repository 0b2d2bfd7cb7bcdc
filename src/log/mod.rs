//! A log: a fixed number of partitions of rolling, preallocated, memory-mapped segments, written
//! by the appending threads themselves, with group commit, bounded reads, retention and keyed
//! compaction.
//!
//! **Write path.** An append is encoded in the caller's thread, then copied (under the lock of
//! each partition it touches) into the active segments' writable mappings: no system call and no
//! hand-off to another thread per append (the pages ahead of a writer are prefaulted on a
//! background thread, [`crate::fs::prefault_later`], so the copy does not fault either). With
//! `Durability::Interval` it is readable and acknowledged at once, and a background thread syncs
//! the segments every interval. With `Durability::Sync` (the default) every batch is also copied
//! into the log's one journal file (format/JOURNAL.md) and the append waits for the group commit:
//! the first waiter leads a round that fdatasyncs the journal once for everyone written so far,
//! whatever partitions they touched, then publishes what became durable. Segments are synced
//! when sealed and at checkpoints, after which older journal files are deleted.
//!
//! **Read path.** Records are zero-copy slices of the segments' mappings (sealed and active); a
//! scan can visit borrowed records without allocating; each batch's CRC is checked the first
//! time a read crosses it.

mod append;
mod backup;
mod clean_close;
mod commit;
pub(crate) mod compaction;
mod inner;
mod journal;
mod journal_blocks;
mod journal_scan;
pub(crate) mod maintenance;
mod open_partitions;
pub mod options;
pub(crate) mod partition;
mod partition_table;
mod preparer;
mod replay;
mod request;
pub(crate) mod retention;
mod workers;
pub use backup::DeletionHold;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

pub use compaction::CompactionReport;
pub use journal::{
    decode_frame, decode_journal_header, encode_frame_header, encode_journal_header, Frame,
    FRAME_HEADER_LEN, JOURNAL_FORMAT_VERSION, JOURNAL_HEADER_LEN, JOURNAL_MAGIC,
};
pub use maintenance::{MaintenanceReport, MaintenanceStatus};
pub use options::{CompactionPolicy, Durability, LogOptions, RetentionPolicy};
pub use partition::{PartitionRecovery, ReadPage};
pub use replay::ReplayReport;
pub use request::{Items, OffsetRange};
pub use retention::RetentionReport;

use crate::error::{StoreError, StoreResult};
use crate::fs::{create_dir_durable, Fs};
use crate::segment::{NewRecord, RecordRef, Visitor};
pub(crate) use inner::LogInner;
use journal::{Journal, JournalFile};
use journal_scan::JournalScan;
use open_partitions::open_partitions;
use partition::Partition;
use request::{check_items, encode_request, EncodedRequest};

/// Statistics of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    /// Partition number.
    pub partition: u32,
    /// First retained offset.
    pub low_water_mark: i64,
    /// One past the last offset.
    pub high_water_mark: i64,
    /// Segment files, the active one included.
    pub segments: usize,
    /// Bytes in segment files.
    pub bytes: u64,
    /// Bytes of deleted segments still mapped because records read from them are alive (their
    /// disk space is freed when the last such record is dropped; copy records you keep long).
    pub pinned_bytes: u64,
}

/// Who may remove records of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogOwner {
    /// The log's own retention and compaction (the default).
    #[default]
    Policies,
    /// Only the layer that owns the log (a group engine's payload log), through
    /// [`Log::delete_segments_before`]; retention and compaction are refused.
    Layer,
}

/// How a log is opened by the store.
pub(crate) struct LogSetup {
    pub fs: Fs,
    pub name: String,
    pub dir: PathBuf,
    pub partitions: u32,
    pub options: LogOptions,
    pub owner: LogOwner,
    /// Keeps the store's directory lock alive until the log is closed.
    pub lock: Arc<dyn Send + Sync>,
}

/// A durable, partitioned, append-only log. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct Log {
    inner: Arc<LogInner>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("name", &self.inner.name)
            .field("dir", &self.inner.dir)
            .field("partitions", &self.inner.partitions.len())
            .finish()
    }
}

impl Log {
    /// Opens (creating if needed) a log as `setup` says: recovers each partition, replays the
    /// journal into them, and (for a `Sync` log) starts a fresh journal.
    ///
    /// Called by [`crate::Store::open_log`], which checks the options and partition count,
    /// records the log in the MANIFEST and holds the lock.
    pub(crate) fn open(setup: LogSetup) -> StoreResult<Self> {
        let _span = tracing::info_span!("strata.log.open", log = %setup.name).entered();
        let LogSetup {
            fs,
            name,
            dir,
            partitions,
            options,
            owner,
            lock,
        } = setup;
        let mut shared = Vec::with_capacity(partitions as usize);
        let mut recovery = Vec::with_capacity(partitions as usize);
        let clean = clean_close::take(&*fs, &dir)?;
        let closed_cleanly = clean.found;
        let journal_dir = dir.join("journal");
        let scan = JournalScan::read(&*fs, &journal_dir, options.recovery)?;
        let confirm = (!scan.is_empty()).then_some(&scan);
        create_dir_durable(&*fs, &dir)?;
        let recovered = (clean.found, confirm);
        for (partition, report) in open_partitions(&fs, &dir, 0..partitions, &options, recovered)? {
            shared.push(Arc::new(partition));
            recovery.push(report);
        }
        clean.clear()?;
        let checkpoint = options.durability == Durability::Sync && !closed_cleanly;
        let replay = replay::replay(
            &*fs,
            (&journal_dir, &scan),
            &shared,
            (options.recovery, checkpoint),
        )?;
        let next_seq = scan.next_seq;
        drop(scan);
        report_recovery(&name, closed_cleanly, &recovery, &replay);
        let journal = match options.durability {
            Durability::Sync => Some(open_journal(&fs, &journal_dir, next_seq, &options)?),
            Durability::Interval(_) => None,
        };
        let commit = journal
            .as_ref()
            .map(|j| commit::GroupCommit::new(j.current.lsn()));
        let metrics = crate::metrics::LogMetrics::new(&name);
        let inner = Arc::new(LogInner {
            name,
            dir,
            options,
            owned: owner == LogOwner::Layer,
            partitions: partition_table::PartitionTable::new(shared),
            journal: journal.map(Mutex::new),
            journal_ready: std::sync::Condvar::new(),
            commit,
            unpublished: Mutex::new(Vec::new()),
            publishing: Mutex::new(()),
            order: Mutex::new(()),
            closed: AtomicBool::new(false),
            commits: watch::channel(0u64).0,
            sync_rounds: AtomicU64::new(0),
            recovery,
            replay,
            maintenance: Mutex::new(None),
            maintenance_status: Mutex::new(MaintenanceStatus::default()),
            background: Mutex::new(None),
            commit_job: Mutex::new(None),
            preparer: Default::default(),
            lock: Mutex::new(Some(lock)),
            deletion_holds: Default::default(),
            metrics,
            journaled_records: AtomicU64::new(0),
            synced_records: AtomicU64::new(0),
        });
        inner.start_background()?;
        if inner.journal.is_some() {
            preparer::Preparer::start(&inner)?;
            inner.start_commit_job()?;
        }
        let log = Log { inner };
        if let Some(period) = log.inner.options.maintenance_interval {
            log.start_maintenance(period)?;
        }
        Ok(log)
    }

    pub(crate) fn from_inner(inner: Arc<LogInner>) -> Self {
        Log { inner }
    }

    /// Refuses `what` (retention, compaction) on a log only its owning layer may trim.
    pub(crate) fn check_removable(&self, what: &str) -> StoreResult<()> {
        if self.inner.owned {
            return Err(StoreError::Invalid(format!(
                "log {} is owned by the layer that wrote it; {what} is refused (only the owner \
                 removes its records)",
                self.inner.name
            )));
        }
        Ok(())
    }

    /// Who may remove records of this log.
    pub fn owner(&self) -> LogOwner {
        if self.inner.owned {
            LogOwner::Layer
        } else {
            LogOwner::Policies
        }
    }

    /// Bytes of deleted segments that records handed out by reads still hold mapped (their
    /// disk space is freed once the last such record is dropped).
    pub fn pinned_bytes(&self) -> u64 {
        self.inner
            .partitions
            .iter()
            .map(|p| p.pins.pinned_bytes())
            .sum()
    }

    /// Name of the log.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Directory holding the partitions.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.inner.options
    }

    /// Number of partitions: fixed for the life of the log, except for the store's group
    /// payload log, which gains partitions at the end as groups are created.
    pub fn partition_count(&self) -> u32 {
        self.inner.partitions.len() as u32
    }

    /// Opens partitions `partition_count()..to`, new and empty, once the MANIFEST records `to`
    /// (persist, then apply), as [`open_partitions`] does. Appends to the existing partitions go
    /// on meanwhile; the new ones take appends once this returns.
    // Only the group engine's payload log grows (a keyed log's key-to-partition map would
    // change with its count).
    #[cfg_attr(not(feature = "ursula"), allow(dead_code))]
    pub(crate) fn add_partitions(&self, to: u32) -> StoreResult<()> {
        let inner = &self.inner;
        let growth = inner.partitions.lock_growth();
        let from = inner.partitions.len() as u32;
        if to <= from {
            return Ok(());
        }
        let fs = inner.partitions_fs();
        let opened = open_partitions(&fs, &inner.dir, from..to, &inner.options, (false, None))?;
        for (partition, _) in opened {
            inner.partitions.push(&growth, Arc::new(partition));
        }
        Ok(())
    }

    /// What recovery did to each partition when the log was opened.
    pub fn recovery_report(&self) -> &[PartitionRecovery] {
        &self.inner.recovery
    }

    /// Number of sync rounds (each one fdatasync per touched partition) the writer has run.
    pub fn sync_rounds(&self) -> u64 {
        self.inner.sync_rounds.load(Ordering::Relaxed)
    }

    /// Bytes appended but not yet durable: journal bytes past the last completed round
    /// (`Durability::Sync`), or the partitions' unsynced segment bytes (`Interval`).
    pub fn unsynced_bytes(&self) -> u64 {
        self.inner.unsynced_bytes()
    }

    /// True once [`Log::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    pub(crate) fn partition(&self, partition: u32) -> StoreResult<&Arc<Partition>> {
        self.inner
            .partitions
            .get(partition as usize)
            .ok_or(StoreError::PartitionOutOfRange {
                partition: partition as i32,
                count: self.inner.partitions.len() as i32,
            })
    }

    /// Appends `records` to `partition` as one batch; resolves to the first and last offsets
    /// once the records are durable (or acknowledged, under `Durability::Interval`).
    ///
    /// File work the write needs first (a segment roll, journal space, a sync bound) runs off
    /// the executor thread (on tokio's blocking pool on a current-thread runtime, under
    /// `block_in_place` on a multi-thread one); the write itself is memory work.
    ///
    /// Dropping the future (cancellation): before its first poll, while it waits for room in
    /// the journal, or while that file work runs, nothing is appended (the work done stays
    /// done: a rolled segment, prepared space). Once the batch is written at its offsets (in a
    /// poll of this future): under `Durability::Interval` the append is then done;
    /// under `Durability::Sync` the batch becomes durable, then readable, with the next
    /// journal round (another append's, [`Log::sync`], a checkpoint, or [`Log::close`]), never
    /// readable before it is durable, and unacknowledged: a power cut before that round loses
    /// it like any write whose answer never came. Other appends are not held up by it.
    pub async fn append(
        &self,
        partition: u32,
        records: Vec<NewRecord>,
    ) -> StoreResult<OffsetRange> {
        let mut ranges = self.append_many(vec![(partition, records)]).await?;
        ranges.pop().ok_or(StoreError::Closed)
    }

    /// Appends several items (each to its partition) in one durability round trip. Resolves to
    /// the offset ranges in the order given. All or nothing: on an error nothing was appended,
    /// except after a failed sync (`StoreError::Poisoned`), whose appends may or may not be
    /// durable.
    pub async fn append_many(&self, items: Items) -> StoreResult<Vec<OffsetRange>> {
        self.room_in_journal().await?;
        let started = self.inner.commit.is_some().then(std::time::Instant::now);
        let (ranges, lsn) = self.write_async(items).await?;
        if let (Some(lsn), Some(commit), Some(started)) = (lsn, &self.inner.commit, started) {
            commit.wait_async(&self.inner, lsn).await?;
            self.inner.metrics.durable_append(started.elapsed());
        }
        Ok(ranges)
    }

    /// Appends without waiting for durability: resolves to the offsets once the records are
    /// written; they become durable with this log's next sync round (a later synced append or
    /// [`Log::sync`]). For a layer whose own later record of this log is its point of
    /// durability (the group engine's commit record), so one fsync covers both.
    pub async fn append_many_unsynced(&self, items: Items) -> StoreResult<Vec<OffsetRange>> {
        self.room_in_journal().await?;
        Ok(self.write_async(items).await?.0)
    }

    /// [`Log::append`] for a blocking caller: the same work in the calling thread, which leads
    /// the group commit's sync when no other caller is (the fastest way to append from threads).
    pub fn append_blocking(
        &self,
        partition: u32,
        records: Vec<NewRecord>,
    ) -> StoreResult<OffsetRange> {
        let mut ranges = self.append_many_blocking(vec![(partition, records)])?;
        ranges.pop().ok_or(StoreError::Closed)
    }

    /// [`Log::append_many`] for a blocking caller.
    pub fn append_many_blocking(&self, items: Items) -> StoreResult<Vec<OffsetRange>> {
        self.room_in_journal_blocking()?;
        let started = self.inner.commit.is_some().then(std::time::Instant::now);
        let (ranges, lsn) = self.write(items)?;
        if let (Some(lsn), Some(commit), Some(started)) = (lsn, &self.inner.commit, started) {
            commit.wait(&self.inner, lsn)?;
            self.inner.metrics.durable_append(started.elapsed());
        }
        Ok(ranges)
    }

    /// Waits (leading rounds as needed) until the journal's unsynced bytes are under
    /// `max_unsynced_bytes`; checks again after each round, which lets many waiters through.
    async fn room_in_journal(&self) -> StoreResult<()> {
        while let (Some(lsn), Some(commit)) = (self.inner.journal_backlog(), &self.inner.commit) {
            commit.wait_async(&self.inner, lsn).await?;
        }
        Ok(())
    }

    /// [`Self::room_in_journal`] for a blocking caller.
    fn room_in_journal_blocking(&self) -> StoreResult<()> {
        while let (Some(lsn), Some(commit)) = (self.inner.journal_backlog(), &self.inner.commit) {
            commit.wait(&self.inner, lsn)?;
        }
        Ok(())
    }

    /// Checks and encodes `items` (in the calling thread).
    fn encode(&self, items: Items) -> StoreResult<EncodedRequest> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        check_items(&items, self.partition_count())?;
        encode_request(items, self.inner.options.compression)
    }

    /// Checks, encodes and writes `items`, with any file work the write needs (a roll, journal
    /// space, a sync bound) in the calling thread.
    fn write(&self, items: Items) -> StoreResult<(Vec<OffsetRange>, Option<u64>)> {
        let request = self.encode(items)?;
        let counts = (request.records(), request.bytes.len() as u64);
        let written = self.inner.write(request)?;
        self.inner.metrics.appended(counts.0, counts.1);
        Ok(written)
    }

    /// [`Self::write`] for an async caller, which never does file work in place: when the
    /// write needs some first (a roll, journal space, a sync bound), that work runs where it
    /// holds up no other task ([`crate::blocking::aside`]) and the write is tried again. The
    /// write itself always happens in a poll of this future, so a dropped future never leaves
    /// a write to land later.
    async fn write_async(&self, items: Items) -> StoreResult<(Vec<OffsetRange>, Option<u64>)> {
        let mut request = self.encode(items)?;
        let counts = (request.records(), request.bytes.len() as u64);
        let written = loop {
            match self.inner.try_write(request)? {
                Ok(written) => break written,
                Err(refused) => {
                    let (inner, footprint) = (self.inner.clone(), refused.footprint());
                    crate::blocking::aside(move || inner.make_room(&footprint)).await?;
                    request = refused;
                }
            }
        };
        self.inner.metrics.appended(counts.0, counts.1);
        Ok(written)
    }

    /// A conditional append: `build` runs in order with every other conditional append of this
    /// log and either returns the items to append (with a value for the caller) or rejects the
    /// append. Check-then-write on state that only such closures change is therefore atomic,
    /// without any lock held across an `.await`. Keep `build` short.
    ///
    /// Resolves once the items are durable; to `Ok(Err(e))` when `build` rejected.
    pub async fn append_with<T, E>(
        &self,
        build: impl FnOnce() -> Result<(Items, T), E>,
    ) -> StoreResult<Result<(Vec<OffsetRange>, T), E>> {
        self.room_in_journal().await?;
        let written = {
            let _order = self.inner.order.lock().unwrap_or_else(|p| p.into_inner());
            match build() {
                Err(e) => return Ok(Err(e)),
                Ok((items, value)) => (self.write(items)?, value),
            }
        };
        let ((ranges, lsn), value) = written;
        if let (Some(lsn), Some(commit)) = (lsn, &self.inner.commit) {
            commit.wait_async(&self.inner, lsn).await?;
        }
        Ok(Ok((ranges, value)))
    }

    /// Calls `f` with every record of `partition` in `[from, until)` (`until` capped at the
    /// high-water mark); uncompressed keys and values are zero-copy slices of the segments'
    /// mappings, which a record keeps alive for as long as it is held. Returns the offset a
    /// following visit starts from. Blocking: run it off the async executor.
    pub fn visit_shared<E: From<StoreError>>(
        &self,
        partition: u32,
        from: i64,
        until: i64,
        f: &mut dyn FnMut(crate::segment::Record) -> Result<(), E>,
    ) -> Result<i64, E> {
        if self.is_closed() {
            return Err(StoreError::Closed.into());
        }
        let visitor = &mut Visitor::Shared(f);
        self.partition(partition)?.visit(from, until, visitor)
    }

    /// Calls `f` with every record of `partition` in `[from, until)` (`until` capped at the
    /// high-water mark), borrowed from the segments' mappings: no allocation per record. Returns
    /// the offset a following visit starts from.
    pub fn visit<E: From<StoreError>>(
        &self,
        partition: u32,
        from: i64,
        until: i64,
        f: &mut dyn FnMut(RecordRef<'_>) -> Result<(), E>,
    ) -> Result<i64, E> {
        if self.is_closed() {
            return Err(StoreError::Closed.into());
        }
        let visitor = &mut Visitor::Borrowed(f);
        self.partition(partition)?.visit(from, until, visitor)
    }

    /// Reads a page of records of `partition` starting at `from`, holding about `max_bytes`.
    pub fn read(&self, partition: u32, from: i64, max_bytes: usize) -> StoreResult<ReadPage> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        self.partition(partition)?.read(from, max_bytes)
    }

    /// One past the last readable offset of `partition` (0 when empty).
    pub fn high_water_mark(&self, partition: u32) -> StoreResult<i64> {
        Ok(self.partition(partition)?.high_water_mark())
    }

    /// The offset the next record appended to `partition` gets (written records included, durable
    /// or not). A layer that is its log's only writer can plan with it.
    pub fn next_offset(&self, partition: u32) -> StoreResult<i64> {
        Ok(self.partition(partition)?.lock_writer().next_offset)
    }

    /// The first offset of `partition` whose record's timestamp is at or after `timestamp` (ms
    /// since the Unix epoch, as writers gave them), in offset order; `None` when no readable
    /// record has one (a consumer starting "from time T" then starts at the high-water mark).
    /// Timestamps need not increase with offsets; this is the earliest qualifying offset.
    pub fn offset_for_timestamp(&self, partition: u32, timestamp: i64) -> StoreResult<Option<i64>> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        self.partition(partition)?.offset_for_timestamp(timestamp)
    }

    /// First retained offset of `partition`.
    pub fn low_water_mark(&self, partition: u32) -> StoreResult<i64> {
        Ok(self.partition(partition)?.low_water_mark())
    }

    /// A receiver that changes whenever new records become readable (or the log closes).
    pub fn commits(&self) -> watch::Receiver<u64> {
        self.inner.commits.subscribe()
    }

    /// Seals the active segment of `partition` if it holds any record (blocking call).
    pub fn roll_blocking(&self, partition: u32) -> StoreResult<()> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        let p = self.partition(partition)?;
        let mut writer = p.lock_writer();
        if writer.active.is_empty() {
            return Ok(());
        }
        writer.roll(p, 0)
    }

    /// Makes everything appended so far durable (useful under `Durability::Interval`). After a
    /// failed sync it first heals the journal, so the appends whose outcome was unknown become
    /// durable now (or this fails too).
    pub async fn sync(&self) -> StoreResult<()> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        match (self.journal_lsn()?, &self.inner.commit) {
            (Some(lsn), Some(commit)) => commit.wait_async(&self.inner, lsn).await,
            _ => crate::blocking::blocking(|| self.inner.checkpoint()),
        }
    }

    /// The journal position of everything appended so far (`None` without a journal), after
    /// healing a journal whose last round failed: its unsynced frames are written and synced
    /// again, so a sync that follows covers them (and the failure is forgotten).
    fn journal_lsn(&self) -> StoreResult<Option<u64>> {
        let Some(journal) = self.inner.journal.as_ref() else {
            return Ok(None);
        };
        let mut journal = journal.lock().unwrap_or_else(|p| p.into_inner());
        journal.heal()?;
        if let Some(commit) = &self.inner.commit {
            commit.forget_failure();
        }
        Ok(Some(journal.current.lsn()))
    }

    /// [`Log::sync`] for a blocking caller.
    pub fn sync_blocking(&self) -> StoreResult<()> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        match (self.journal_lsn()?, &self.inner.commit) {
            (Some(lsn), Some(commit)) => commit.wait(&self.inner, lsn),
            _ => self.inner.checkpoint(),
        }
    }

    /// A checkpoint (blocking): syncs every partition's active segment, records in its index the
    /// length now durable, and lets go of the journal files it covers (one is kept to be
    /// recycled as the next file). The background thread runs one once a journal file fills;
    /// this runs one now. For a log without a journal it is a sync of every partition.
    pub fn checkpoint_blocking(&self) -> StoreResult<()> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        self.inner.checkpoint()
    }

    /// What replaying the journal did when the log was opened.
    pub fn replay_report(&self) -> ReplayReport {
        self.inner.replay
    }

    /// Statistics of every partition.
    pub fn stats(&self) -> Vec<PartitionStats> {
        self.inner
            .partitions
            .iter()
            .map(|p| {
                let view = p.view();
                let sealed: u64 = view.sealed.iter().map(|s| s.index().segment_len).sum();
                PartitionStats {
                    partition: p.id,
                    low_water_mark: p.low_water_mark(),
                    high_water_mark: p.high_water_mark(),
                    segments: view.sealed.len() + 1,
                    bytes: sealed + view.active.committed_len(),
                    pinned_bytes: p.pins.pinned_bytes(),
                }
            })
            .collect()
    }

    /// Syncs, checkpoints, writes the active indexes and releases this log's hold on the store
    /// lock; later calls get [`StoreError::Closed`]. Idempotent.
    pub fn close_blocking(&self) -> StoreResult<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.shutdown()
    }

    /// [`Log::close_blocking`] on tokio's blocking pool (never on the caller's executor
    /// thread). Dropping the last handle of an open log closes it on the dropping thread.
    pub async fn close(&self) -> StoreResult<()> {
        let log = self.clone();
        crate::blocking::off_executor(move || log.close_blocking()).await
    }
}

/// Creates journal file `seq` of a `Sync` log.
fn open_journal(fs: &Fs, dir: &Path, seq: u64, options: &LogOptions) -> StoreResult<Journal> {
    create_dir_durable(&**fs, dir)?;
    let current = JournalFile::create(&**fs, dir, seq, options.journal_bytes, 0)?;
    Ok(Journal {
        fs: fs.clone(),
        dir: dir.to_path_buf(),
        capacity: options.journal_bytes,
        current,
        retired: Vec::new(),
        spare: None,
        poisoned: None,
        preparing: None,
    })
}

/// Reports what opening a log found and did (a tracing event; warnings when bytes were cut).
fn report_recovery(
    name: &str,
    clean: bool,
    partitions: &[PartitionRecovery],
    replay: &ReplayReport,
) {
    for p in partitions
        .iter()
        .filter(|p| p.truncated_bytes > 0 || p.indexes_rebuilt > 0)
    {
        tracing::warn!(
            log = name,
            partition = p.partition,
            truncated_bytes = p.truncated_bytes,
            indexes_rebuilt = p.indexes_rebuilt,
            "recovery repaired a partition: an unacknowledged torn tail cut (bytes) and indexes rebuilt (count)"
        );
    }
    tracing::info!(
        log = name,
        clean_close = clean,
        partitions = partitions.len(),
        journal_files = replay.files,
        journal_frames = replay.frames,
        batches_restored = replay.applied,
        "log opened"
    );
}

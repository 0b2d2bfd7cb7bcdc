//! A log: a fixed number of partitions of rolling segments, one writer thread with group commit,
//! bounded reads, retention and keyed compaction.

pub mod compaction;
pub mod maintenance;
pub mod options;
pub mod partition;
mod request;
pub mod retention;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{oneshot, watch};

pub use compaction::CompactionReport;
pub use maintenance::{MaintenanceReport, MaintenanceStatus};
pub use options::{CompactionPolicy, Durability, LogOptions, RetentionPolicy};
pub use partition::{PartitionRecovery, ReadPage};
pub use request::{Items, OffsetRange};
pub use retention::RetentionReport;

use crate::error::{StoreError, StoreResult};
use crate::fs::Fs;
use crate::segment::{NewRecord, PinCounter};
use partition::Partition;
use writer::{Command, Payload, Writer};

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

pub(crate) struct LogInner {
    name: String,
    dir: PathBuf,
    options: LogOptions,
    /// True when only the owning layer may remove records.
    owned: bool,
    maintenance_status: Mutex<MaintenanceStatus>,
    partitions: Vec<Arc<Partition>>,
    commands: Mutex<Option<Sender<Command>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    maintenance: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    closed: AtomicBool,
    commits: watch::Sender<u64>,
    sync_rounds: Arc<AtomicU64>,
    recovery: Vec<PartitionRecovery>,
    /// Keeps the store's directory lock alive until the log is closed.
    lock: Mutex<Option<Arc<dyn Send + Sync>>>,
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
    /// Opens (creating if needed) a log as `setup` says, recovering each partition.
    ///
    /// Called by [`crate::Store::open_log`], which checks the options and partition count,
    /// records the log in the MANIFEST and holds the lock.
    pub(crate) fn open(setup: LogSetup) -> StoreResult<Self> {
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
        let mut writers = Vec::with_capacity(partitions as usize);
        let mut recovery = Vec::with_capacity(partitions as usize);
        for id in 0..partitions {
            let pins = Arc::new(PinCounter::default());
            let (partition, active, report) =
                Partition::open(&fs, dir.join(id.to_string()), id, &options, &pins)?;
            let partition = Arc::new(partition);
            shared.push(partition.clone());
            writers.push((partition, active));
            recovery.push(report);
        }
        let (commits, _) = watch::channel(0u64);
        let (tx, rx) = std::sync::mpsc::channel();
        let sync_rounds = Arc::new(AtomicU64::new(0));
        let writer = Writer::new(
            fs,
            writers,
            options.clone(),
            commits.clone(),
            sync_rounds.clone(),
        );
        let handle = std::thread::Builder::new()
            .name(format!("strata-writer-{name}"))
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::io(&dir, e))?;
        let inner = Arc::new(LogInner {
            name,
            dir,
            options,
            owned: owner == LogOwner::Layer,
            maintenance_status: Mutex::new(MaintenanceStatus::default()),
            partitions: shared,
            commands: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(handle)),
            maintenance: Mutex::new(None),
            closed: AtomicBool::new(false),
            commits,
            sync_rounds,
            recovery,
            lock: Mutex::new(Some(lock)),
        });
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

    /// Number of partitions (fixed for the life of the log).
    pub fn partition_count(&self) -> u32 {
        self.inner.partitions.len() as u32
    }

    /// What recovery did to each partition when the log was opened.
    pub fn recovery_report(&self) -> &[PartitionRecovery] {
        &self.inner.recovery
    }

    /// Number of sync rounds (each one fdatasync per touched partition) the writer has run.
    pub fn sync_rounds(&self) -> u64 {
        self.inner.sync_rounds.load(Ordering::Relaxed)
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

    fn send(&self, command: Command) -> StoreResult<()> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        let guard = self
            .inner
            .commands
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(command)
            .map_err(|_| StoreError::Closed)
    }

    /// Appends `records` to `partition` as one batch; resolves to the first and last offsets
    /// once the records are durable (or acknowledged, under `Durability::Interval`).
    pub async fn append(
        &self,
        partition: u32,
        records: Vec<NewRecord>,
    ) -> StoreResult<OffsetRange> {
        let mut ranges = self.append_many(vec![(partition, records)]).await?;
        ranges.pop().ok_or(StoreError::Closed)
    }

    /// Appends several items (each to its partition) in one durability round trip. Resolves to the
    /// offset ranges in the order given; on error, any subset of the items may have been appended,
    /// and none is still in flight.
    pub async fn append_many(&self, items: Items) -> StoreResult<Vec<OffsetRange>> {
        request::check_items(&items, self.partition_count())?;
        self.submit(Payload::Ready(items)).await
    }

    async fn submit(&self, payload: Payload) -> StoreResult<Vec<OffsetRange>> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Append { payload, reply })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// A conditional append: `build` runs on the writer thread, in order with every other append
    /// of this log, and either returns the items to append (with a value for the caller) or
    /// rejects the append. Check-then-write on state that only such closures change is therefore
    /// atomic, without any lock held across an `.await`. Keep `build` short: it runs on the
    /// writer's hot path.
    ///
    /// Resolves once the items are durable; to `Ok(Err(e))` when `build` rejected.
    pub async fn append_with<T, E>(
        &self,
        build: impl FnOnce() -> Result<(Items, T), E> + Send + 'static,
    ) -> StoreResult<Result<(Vec<OffsetRange>, T), E>>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        let outcome: Arc<Mutex<Option<Result<T, E>>>> = Arc::new(Mutex::new(None));
        let slot = outcome.clone();
        let build: writer::Build = Box::new(move || {
            let (items, result) = match build() {
                Ok((items, value)) => (Some(items), Ok(value)),
                Err(e) => (None, Err(e)),
            };
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
            items
        });
        let appended = self.submit(Payload::Deferred(build)).await;
        let taken = outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
        match (appended, taken) {
            (Ok(ranges), Some(Ok(value))) => Ok(Ok((ranges, value))),
            (Err(StoreError::Rejected), Some(Err(e))) => Ok(Err(e)),
            (Err(e), _) => Err(e),
            (Ok(_), _) => Err(StoreError::Invalid(
                "a conditional append lost its outcome".into(),
            )),
        }
    }

    /// Calls `f` with every record of `partition` in `[from, high-water mark)`, a page at a time
    /// (blocking; run it off the async executor).
    pub fn for_each_record<E: From<StoreError>>(
        &self,
        partition: u32,
        from: i64,
        mut f: impl FnMut(crate::segment::Record) -> Result<(), E>,
    ) -> Result<(), E> {
        let high = self.high_water_mark(partition)?;
        let mut next = from;
        while next < high {
            let page = self.read(partition, next, 1 << 20)?;
            for record in page.records {
                f(record)?;
            }
            next = page.next_offset;
        }
        Ok(())
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
        self.partition(partition)?;
        let (reply, rx) = std::sync::mpsc::channel();
        self.send(Command::Roll { partition, reply })?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }

    /// Makes everything appended so far durable (useful under `Durability::Interval`).
    pub async fn sync(&self) -> StoreResult<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Sync { reply })?;
        rx.await.map_err(|_| StoreError::Closed)?
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

    /// Stops the writer after syncing and releases this log's hold on the store lock; later
    /// calls get [`StoreError::Closed`]. Idempotent.
    pub fn close_blocking(&self) -> StoreResult<()> {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.shutdown()
    }

    /// Async form of [`Log::close_blocking`].
    pub async fn close(&self) -> StoreResult<()> {
        let log = self.clone();
        tokio::task::spawn_blocking(move || log.close_blocking())
            .await
            .map_err(|e| StoreError::Invalid(format!("close task failed: {e}")))?
    }
}

impl LogInner {
    fn shutdown(&self) -> StoreResult<()> {
        self.stop_maintenance();
        let sender = self
            .commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let mut result = Ok(());
        if let Some(sender) = sender {
            let (reply, rx) = std::sync::mpsc::channel();
            if sender.send(Command::Shutdown { reply }).is_ok() {
                result = rx.recv().unwrap_or(Ok(()));
            }
        }
        if let Some(handle) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = handle.join();
        }
        self.commits.send_modify(|v| *v = v.wrapping_add(1));
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).take();
        result
    }
}

impl Drop for LogInner {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        let _ = self.shutdown();
    }
}

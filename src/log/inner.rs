//! The shared state of a log and what the appending threads do with it: write a request into
//! its partitions (and the journal), sync, publish, checkpoint, and the background job that
//! syncs buffered logs and retires journal files.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::append::{poisoned, Publication};
use super::commit::GroupCommit;
use super::journal::{Journal, Room};
use super::maintenance::MaintenanceStatus;
use super::options::{Durability, LogOptions};
use super::partition::{Partition, PartitionRecovery};
use super::replay::ReplayReport;
use super::request::{EncodedRequest, Footprint, OffsetRange};
use super::workers::{self, JobHandle, Kind};
use crate::error::{StoreError, StoreResult};

/// What a write did: its offset ranges, and the journal position that makes it durable (a
/// journaled log's).
pub(crate) type Write = (Vec<OffsetRange>, Option<u64>);

/// A write's partitions, each with its writer locked.
type LockedWriters<'a> = Vec<(
    u32,
    &'a Arc<Partition>,
    MutexGuard<'a, super::append::PartitionWriter>,
)>;

/// The shared state of a log.
pub(crate) struct LogInner {
    pub name: String,
    pub dir: PathBuf,
    pub options: LogOptions,
    /// True when only the owning layer may remove records.
    pub owned: bool,
    pub partitions: super::partition_table::PartitionTable,
    /// The journal of a `Durability::Sync` log.
    pub journal: Option<Mutex<Journal>>,
    /// Signalled when a preparation of journal space ends.
    pub journal_ready: Condvar,
    /// Its group commit.
    pub commit: Option<GroupCommit>,
    /// Partitions with publications queued for the journal (each listed once while its queue
    /// is not empty; [`LogInner::publish_journaled`]).
    pub unpublished: Mutex<Vec<u32>>,
    /// Held by the one publisher of journaled writes at a time.
    pub publishing: Mutex<()>,
    /// Serializes conditional appends (check, then write).
    pub order: Mutex<()>,
    pub closed: AtomicBool,
    pub commits: watch::Sender<u64>,
    pub sync_rounds: AtomicU64,
    pub recovery: Vec<PartitionRecovery>,
    pub replay: ReplayReport,
    /// The periodic maintenance job, when the options ask for one.
    pub maintenance: Mutex<Option<JobHandle>>,
    pub maintenance_status: Mutex<MaintenanceStatus>,
    /// The periodic sync and checkpoint job.
    pub background: Mutex<Option<JobHandle>>,
    /// The job that leads group-commit rounds for tasks of current-thread runtimes (a
    /// journaled log's).
    pub commit_job: Mutex<Option<JobHandle>>,
    /// Prepares journal space ahead of the writers (see [`super::preparer`]).
    pub preparer: super::preparer::Preparer,
    /// Keeps the store's directory lock alive until the log is closed.
    pub lock: Mutex<Option<Arc<dyn Send + Sync>>>,
    /// Backups in progress that need this log's segments kept (see `Log::hold_deletions`).
    pub deletion_holds: crate::hold::Holds,
    /// Its metric handles.
    pub metrics: crate::metrics::LogMetrics,
    /// Records written to the journal, and those the last completed round made durable (for
    /// records per round).
    pub journaled_records: AtomicU64,
    pub synced_records: AtomicU64,
}

impl LogInner {
    fn journal(&self) -> Option<MutexGuard<'_, Journal>> {
        self.journal
            .as_ref()
            .map(|j| j.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn partitions_fs(&self) -> crate::fs::Fs {
        self.partitions[0].fs.clone()
    }

    /// Wakes subscribers (only when there are any: a buffered append stays cheap).
    pub fn notify(&self) {
        if self.commits.receiver_count() > 0 {
            self.commits.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// Writes every batch of `request`, or none: locks its partitions (in order), makes room,
    /// writes into the segments (and the journal), and either publishes at once (no journal) or
    /// queues the publication for the journal position it returns.
    pub fn write(&self, request: EncodedRequest) -> StoreResult<Write> {
        let ids = request.sorted_partitions();
        let writers = self.lock_writers(&ids);
        self.write_locked(request, &ids, writers)
    }

    /// [`Self::write`] for a caller that must not do file work (an executor thread): a write
    /// that first needs some (a segment roll, journal space, a sync bound, a re-sync) changes
    /// nothing and hands the request back.
    pub fn try_write(&self, request: EncodedRequest) -> StoreResult<Result<Write, EncodedRequest>> {
        let ids = request.sorted_partitions();
        let writers = self.lock_writers(&ids);
        let busy = writers
            .iter()
            .any(|(id, _, w)| self.needs_file_work(w, request.bytes_for(*id)));
        if busy || !self.journal_has_room(request.frame_bytes()) {
            return Ok(Err(request));
        }
        self.write_locked(request, &ids, writers).map(Ok)
    }

    /// Does the file work a write of `footprint` would do before writing (re-syncs, rolls, a
    /// sync bound, journal space), and writes nothing: a later [`Self::try_write`] of it then
    /// has room, unless other writers took it first.
    pub fn make_room(&self, footprint: &Footprint) -> StoreResult<()> {
        let ids: Vec<u32> = footprint.partitions.iter().map(|(id, _)| *id).collect();
        let mut writers = self.lock_writers(&ids);
        for ((_, p, w), (_, bytes)) in writers.iter_mut().zip(&footprint.partitions) {
            w.heal(p)?;
            w.make_room(p, *bytes)?;
            self.bound_unsynced(p, w)?;
        }
        drop(self.journal_with_room(footprint.frames)?);
        Ok(())
    }

    /// The writers of partitions `ids` (sorted), locked in that order.
    fn lock_writers(&self, ids: &[u32]) -> LockedWriters<'_> {
        ids.iter()
            .map(|&id| {
                let p = &self.partitions[id as usize];
                (id, p, p.lock_writer())
            })
            .collect()
    }

    /// [`Self::write`] under the locks of its partitions' writers.
    fn write_locked(
        &self,
        mut request: EncodedRequest,
        ids: &[u32],
        mut writers: LockedWriters<'_>,
    ) -> StoreResult<Write> {
        for (id, p, w) in &mut writers {
            w.heal(p)?;
            w.make_room(p, request.bytes_for(*id))?;
            self.bound_unsynced(p, w)?;
        }
        let mut journal = self.journal_with_room(request.frame_bytes())?;
        let marks: Vec<_> = writers.iter().map(|(_, _, w)| w.mark()).collect();
        let journal_mark = journal.as_ref().map(|j| j.current.len);
        let slot = |id: u32| ids.binary_search(&id).unwrap_or(0);
        let written = request.write(&mut |id, batch, header| {
            let (_, _, w) = &mut writers[slot(id)];
            let body = w.write(batch, header)?;
            if let Some(j) = journal.as_mut() {
                j.current.append(id, batch, body.as_ref());
            }
            Ok(())
        });
        let ranges = match written {
            Ok(ranges) => ranges,
            Err(e) => {
                for ((_, _, w), mark) in writers.iter_mut().zip(marks) {
                    w.rollback(mark);
                }
                if let (Some(j), Some(len)) = (journal.as_mut(), journal_mark) {
                    j.current.rollback(len);
                }
                return Err(e);
            }
        };
        let Some(j) = journal else {
            for (_, p, w) in &writers {
                w.publish(p);
            }
            drop(writers);
            self.notify();
            return Ok((ranges, None));
        };
        let lsn = j.current.lsn();
        self.journaled_records
            .fetch_add(request.records(), Ordering::Relaxed);
        let mut newly = Vec::new();
        for (id, _, w) in &mut writers {
            let publication = Publication {
                lsn,
                next_offset: w.next_offset,
                segment: w.active.shared().clone(),
                len: w.active.len(),
            };
            if w.pending.is_empty() {
                newly.push(*id);
            }
            w.pending.push_back(publication);
        }
        // Under the writers' locks: a publisher that finds a partition's queue empty drops it
        // from the list under the same lock, so no queued publication is ever left unlisted.
        // A write to partitions already listed leaves the list (and its lock) alone.
        if !newly.is_empty() {
            self.lock_unpublished().extend(newly);
        }
        Ok((ranges, Some(lsn)))
    }

    /// True when writing `bytes` more into `w`'s partition first needs file work: removing a
    /// stray file, a re-sync, a roll, or (without a journal) a sync of its unsynced bytes.
    fn needs_file_work(&self, w: &super::append::PartitionWriter, bytes: u64) -> bool {
        let unsynced_bound = self.journal.is_none()
            && w.active.len() - w.active.synced_len() >= self.options.max_unsynced_bytes;
        w.needs_healing() || bytes > w.active.remaining() || unsynced_bound
    }

    /// True when the log has no journal, or its journal takes `bytes` of frames without file
    /// work (a new file, space prepared, a re-sync) and without waiting for a preparation.
    /// The partitions' locks held by the caller keep this true for them until it writes, up to
    /// writers of other partitions taking the prepared space first.
    fn journal_has_room(&self, bytes: u64) -> bool {
        self.journal().is_none_or(|j| j.has_room(bytes))
    }

    /// Locks the journal (if any) with room for `bytes` of frames, waiting out a preparation
    /// of that space running in another thread.
    fn journal_with_room(&self, bytes: u64) -> StoreResult<Option<MutexGuard<'_, Journal>>> {
        let Some(mut j) = self.journal() else {
            return Ok(None);
        };
        loop {
            j.heal()?;
            if j.make_room(bytes)? == Room::Ready {
                return Ok(Some(j));
            }
            j = self
                .journal_ready
                .wait(j)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Asks the preparer for the next chunk of journal space when less than a chunk is left
    /// prepared ahead (the group-commit leader calls this after its round).
    pub fn request_preparation(&self) {
        if self.journal().is_some_and(|j| j.wants_preparation()) {
            self.preparer.request();
        }
    }

    /// Zeroes and syncs the next chunk of journal file ahead of the writers, outside the lock,
    /// when little is left (the preparer's work). Each synced piece is published at once, so a
    /// writer that ran out of prepared space waits for one piece, not the chunk. A failure is
    /// left for the writer that needs the space, which prepares it inline and reports it.
    pub fn prepare_journal_ahead(&self) {
        let Some(p) = self.journal().and_then(|mut j| j.begin_preparation()) else {
            return;
        };
        let mut at = p.from();
        loop {
            let ran = p.run_piece(at);
            let Some(mut j) = self.journal() else { return };
            let more = j.end_piece(&p, &ran);
            drop(j);
            self.journal_ready.notify_all();
            match ran {
                Ok(end) if more => at = end,
                _ => return,
            }
        }
    }

    /// A buffered log syncs a partition inline once its unsynced bytes reach the bound (the
    /// journal's bound is kept by the group commit, before writing).
    fn bound_unsynced(
        &self,
        _p: &Partition,
        w: &mut super::append::PartitionWriter,
    ) -> StoreResult<()> {
        if self.journal.is_some() {
            return Ok(());
        }
        let unsynced = w.active.len() - w.active.synced_len();
        if unsynced >= self.options.max_unsynced_bytes {
            w.sync()?;
        }
        Ok(())
    }

    /// Bytes appended but not yet durable (see [`super::Log::unsynced_bytes`]).
    pub fn unsynced_bytes(&self) -> u64 {
        match (&self.commit, self.journal()) {
            (Some(commit), Some(j)) => j.current.lsn().saturating_sub(commit.synced()),
            _ => self
                .partitions
                .iter()
                .map(|p| p.lock_writer().active.unsynced())
                .sum(),
        }
    }

    /// Unsynced journal bytes past the bound: the caller waits for a round before writing.
    pub fn journal_backlog(&self) -> Option<u64> {
        let commit = self.commit.as_ref()?;
        let lsn = self.journal()?.current.lsn();
        // The journal lock is gone: a round may already have synced past `lsn`.
        (lsn.saturating_sub(commit.synced()) >= self.options.max_unsynced_bytes).then_some(lsn)
    }

    /// One group-commit round: takes the journal's unwritten frames (under its lock), then
    /// writes them and fdatasyncs the file outside it, in the file's sync gate (taken before
    /// the journal's lock is let go, so writes reach the file in the order they were taken).
    /// Returns the durable journal position, or the position the failure leaves in doubt.
    pub fn sync_journal(&self) -> Result<u64, (u64, StoreError)> {
        let Some(mut j) = self.journal() else {
            return Ok(0);
        };
        let lsn = j.current.lsn();
        if let Err(e) = j.heal() {
            j.poisoned = Some(e.to_string());
            return Err((lsn, e));
        }
        let stage = j.current.take_stage();
        let (file, path, gate, seq, len) = (
            j.current.file.clone(),
            j.current.path.clone(),
            j.current.gate.clone(),
            j.current.seq,
            j.current.len,
        );
        let records = self.journaled_records.load(Ordering::Relaxed);
        let mut turn = gate.lock();
        drop(j);
        self.sync_rounds.fetch_add(1, Ordering::Relaxed);
        let synced = super::journal::write_and_sync(&mut turn, stage.as_ref(), &*file, &path);
        drop(turn);
        let mut j = self.journal().expect("a journaled log");
        if let Some(stage) = stage.filter(|_| j.current.seq == seq) {
            j.current.reuse(stage);
        }
        match synced {
            Ok(()) => {
                if j.current.seq == seq {
                    j.current.mark_synced(len);
                }
                let before = self.synced_records.fetch_max(records, Ordering::Relaxed);
                self.metrics.round(records.saturating_sub(before));
                Ok(lsn)
            }
            Err(e) => {
                j.poisoned = Some(e.to_string());
                Err((lsn, e))
            }
        }
    }

    fn lock_unpublished(&self) -> MutexGuard<'_, Vec<u32>> {
        self.unpublished.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes readable what the journal made durable up to `lsn`, in every partition with
    /// publications queued (the others are not visited: a round costs the partitions it
    /// wrote, not every partition of the log). One publisher at a time, so a later round's
    /// publisher never misses a partition an earlier one is still holding.
    pub fn publish_journaled(&self, lsn: u64) {
        let _one = self.publishing.lock().unwrap_or_else(|p| p.into_inner());
        let queued = std::mem::take(&mut *self.lock_unpublished());
        let mut any = false;
        let mut left = Vec::new();
        for id in queued {
            let Some(p) = self.partitions.get(id as usize) else {
                continue;
            };
            let mut w = p.lock_writer();
            any |= w.publish_until(p, lsn);
            if !w.pending.is_empty() {
                left.push(id);
            }
        }
        self.lock_unpublished().extend(left);
        if any {
            self.notify();
        }
    }

    /// Syncs every partition's active segment (heals first), each without holding its lock
    /// during the fdatasync; with `mark`, also records each segment's durable length in its
    /// index. Reports the first failure.
    fn sync_partitions(&self, mark: bool) -> StoreResult<()> {
        let mut first_error = None;
        let mut synced_any = false;
        for p in self.partitions.iter() {
            match p.sync_active(mark) {
                Ok(synced) => synced_any |= synced,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if synced_any {
            self.sync_rounds.fetch_add(1, Ordering::Relaxed);
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A checkpoint: syncs every partition's active segment and records, in its index (written
    /// atomically), the length that is now durable, so recovery knows damage below it is damage
    /// and not an unsynced tail; then deletes the journal files whose frames all lie before the
    /// journal's end as it was when the checkpoint began.
    pub fn checkpoint(&self) -> StoreResult<()> {
        let lsn = self.journal().map(|j| j.current.lsn());
        self.sync_partitions(true)?;
        match (lsn, self.journal()) {
            (Some(lsn), Some(mut j)) => j.drop_retired(lsn),
            _ => Ok(()),
        }
    }

    /// Makes everything written so far durable: a journal round, or syncs of every partition.
    pub fn sync_all_blocking(&self) -> StoreResult<()> {
        match (&self.commit, self.journal().map(|j| j.current.lsn())) {
            (Some(commit), Some(lsn)) => commit.wait(self, lsn),
            _ => self.sync_partitions(false),
        }
    }

    /// Stops the background work, syncs, checkpoints and writes the active indexes.
    pub fn shutdown(&self) -> StoreResult<()> {
        stop_job(&self.maintenance);
        stop_job(&self.background);
        stop_job(&self.preparer.job);
        stop_job(&self.commit_job);
        let mut result = self
            .sync_all_blocking()
            .and_then(|()| self.checkpoint())
            .and_then(|()| self.journal().map_or(Ok(()), |mut j| j.retire_current()));
        if result.is_ok() {
            result = super::clean_close::mark(&*self.partitions_fs(), &self.dir);
        }
        for p in self.partitions.iter() {
            if let Some(reason) = &p.lock_writer().poisoned {
                result = result.and(Err(poisoned(p.id, reason)));
            }
        }
        self.commits.send_modify(|v| *v = v.wrapping_add(1));
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).take();
        result
    }

    /// One pass of background work: a buffered log's syncs, a journaled log's checkpoint once
    /// the journal has moved to a new file.
    fn background_pass(&self) -> StoreResult<()> {
        if self.journal.is_none() {
            return self.sync_partitions(false);
        }
        if self.journal().is_some_and(|j| !j.retired.is_empty()) {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Registers the background job (buffered syncs every interval; checkpoints).
    pub fn start_background(self: &Arc<Self>) -> StoreResult<()> {
        let period = match self.options.durability {
            Durability::Interval(d) => d,
            Durability::Sync => Duration::from_millis(100),
        };
        self.start_job((Kind::Sync, Some(period)), |inner| &inner.background, |inner| {
            // A failed pass leaves its partition poisoned or its files for the next pass.
            if let Err(e) = inner.background_pass() {
                tracing::error!(log = %inner.name, error = %e, "background sync failed; appends are refused until a sync succeeds");
            }
            true
        })
    }

    /// Registers `run` as this log's job of `kind` (every `period`, or when woken) in the slot
    /// `slot` picks; the job holds the log weakly and ends once the log is gone.
    pub fn start_job(
        self: &Arc<Self>,
        (kind, period): (Kind, Option<Duration>),
        slot: fn(&LogInner) -> &Mutex<Option<JobHandle>>,
        run: fn(Arc<LogInner>) -> workers::Continue,
    ) -> StoreResult<()> {
        let weak: Weak<LogInner> = Arc::downgrade(self);
        let job = workers::register(kind, period, move || weak.upgrade().is_some_and(run))?;
        *slot(self).lock().unwrap_or_else(|p| p.into_inner()) = Some(job);
        Ok(())
    }
}

impl LogInner {
    /// Registers the job that leads rounds handed over by tasks of current-thread runtimes.
    pub fn start_commit_job(self: &Arc<Self>) -> StoreResult<()> {
        self.start_job(
            (Kind::Commit, None),
            |inner| &inner.commit_job,
            |inner| {
                if let Some(commit) = &inner.commit {
                    commit.lead_for_waiters(&inner);
                }
                true
            },
        )
    }

    /// Asks the commit job to lead a round for the waiters queued; false once it is stopped
    /// (the log is closing).
    pub fn hand_off_round(&self) -> bool {
        let job = self.commit_job.lock().unwrap_or_else(|p| p.into_inner());
        job.as_ref().is_some_and(|j| j.wake())
    }
}

/// Stops a log's background job and waits for a run in progress (unless it is the caller).
pub(crate) fn stop_job(slot: &Mutex<Option<JobHandle>>) {
    let job = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    drop(job);
}

impl Drop for LogInner {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.shutdown() {
                tracing::warn!(log = %self.name, error = %e, "closing a dropped log failed; the next open recovers");
            }
        }
    }
}

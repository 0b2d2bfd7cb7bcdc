//! The write side of one partition, driven by the appending threads themselves (no writer
//! thread): writing sealed batches into the active segment's mapping, rolling to a new segment,
//! undoing a failed request, syncing, and healing after a failed sync or roll.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use super::partition::Partition;
use crate::error::{StoreError, StoreResult};
use crate::fs::{remove_if_present, sync_dir, write_file};
use crate::segment::{
    index_file_name, segment_file_name, ActiveSegment, BatchHeader, BodyCrc, SealedSegment,
    SegmentWriter, WriterMark, SEGMENT_HEADER_LEN,
};

/// What a synced journal position makes readable in one partition (logs with a journal publish
/// only what the journal has made durable).
#[derive(Debug)]
pub(crate) struct Publication {
    /// Journal position after the request's last frame.
    pub lsn: u64,
    /// The partition's next offset after the request.
    pub next_offset: i64,
    /// The segment written and its data length after the request.
    pub segment: Arc<ActiveSegment>,
    pub len: u64,
}

/// The write state of one partition, behind the partition's lock.
#[derive(Debug)]
pub(crate) struct PartitionWriter {
    pub active: SegmentWriter,
    pub next_offset: i64,
    /// Why the last sync failed; writes are refused until a re-sync succeeds.
    pub poisoned: Option<String>,
    /// A segment file a failed roll may have left; no write lands in the active segment until
    /// it is durably gone (it would claim offsets the active segment then holds).
    pub stray: Option<PathBuf>,
    /// Written but not yet readable (journaled logs), oldest first.
    pub pending: VecDeque<Publication>,
}

/// Where a partition stood before a request, to cut it back there.
pub(crate) struct PartitionMark {
    writer: WriterMark,
    next_offset: i64,
}

pub(crate) fn poisoned(partition: u32, reason: &str) -> StoreError {
    StoreError::Poisoned {
        partition,
        reason: reason.to_string(),
    }
}

impl PartitionWriter {
    /// A writer on a recovered active segment.
    pub fn new(active: SegmentWriter, next_offset: i64) -> Self {
        Self {
            active,
            next_offset,
            poisoned: None,
            stray: None,
            pending: VecDeque::new(),
        }
    }

    /// Makes the partition writable again: removes a stray segment file durably, and writes
    /// the unsynced bytes of a poisoned partition again and syncs them.
    pub fn heal(&mut self, p: &Partition) -> StoreResult<()> {
        if let Some(stray) = &self.stray {
            remove_if_present(&*p.fs, stray)?;
            sync_dir(&*p.fs, &p.dir)?;
            self.stray = None;
        }
        let Some(reason) = &self.poisoned else {
            return Ok(());
        };
        let reason = reason.clone();
        self.active
            .resync()
            .map_err(|e| poisoned(p.id, &format!("{reason}; retry: {e}")))?;
        self.poisoned = None;
        Ok(())
    }

    /// True when [`Self::heal`] has file work to do (a stray file, a failed sync).
    pub fn needs_healing(&self) -> bool {
        self.stray.is_some() || self.poisoned.is_some()
    }

    /// Where the partition stands.
    pub fn mark(&self) -> PartitionMark {
        PartitionMark {
            writer: self.active.mark(),
            next_offset: self.next_offset,
        }
    }

    /// Cuts the partition back to `mark` (nothing since was published or synced).
    pub fn rollback(&mut self, mark: PartitionMark) {
        match self.active.rollback(mark.writer) {
            Ok(()) => self.next_offset = mark.next_offset,
            Err(e) => self.poisoned = Some(format!("undoing a failed append: {e}")),
        }
    }

    /// Seals `batch` at the next offset and copies it into the active segment.
    pub fn write(
        &mut self,
        batch: &mut [u8],
        header: &mut BatchHeader,
    ) -> StoreResult<Option<BodyCrc>> {
        header.base_offset = self.next_offset;
        let body = self.active.append(batch, header)?;
        self.next_offset = header.last_offset() + 1;
        Ok(body)
    }

    /// Makes the written bytes readable now (logs without a journal).
    pub fn publish(&self, p: &Partition) {
        self.active.shared().publish(self.active.len());
        p.set_high_water_mark(self.next_offset);
    }

    /// Publishes what the journal made durable up to `lsn`; true if anything became readable.
    pub fn publish_until(&mut self, p: &Partition, lsn: u64) -> bool {
        let mut last = None;
        while self.pending.front().is_some_and(|e| e.lsn <= lsn) {
            last = self.pending.pop_front();
        }
        let Some(done) = last else { return false };
        done.segment.publish(done.len);
        p.set_high_water_mark(done.next_offset);
        true
    }

    /// Syncs the active segment (poisoning the partition if the sync fails).
    pub fn sync(&mut self) -> StoreResult<()> {
        match self.active.sync() {
            Ok(()) => Ok(()),
            Err(e) => {
                self.poisoned = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Seals the active segment (synced, indexed, readable in full) and starts a new one at the
    /// next offset, big enough for `needed` bytes of batches. If the new segment cannot be made
    /// (a full disk), the old one stays active and the next write tries again.
    ///
    /// The next segment is made before the old one is sealed: a sealed segment's sync gate
    /// turns later checkpoints of it into no-ops, so sealing first and then failing to make the
    /// next one would leave appends landing in a segment no checkpoint syncs any more, while
    /// checkpoints let go of the journal that held them.
    pub fn roll(&mut self, p: &Partition, needed: u64) -> StoreResult<()> {
        self.heal(p)?;
        self.sync()?;
        let next = self.next_offset;
        let path = p.dir.join(segment_file_name(next));
        let capacity = p.segment_capacity(needed);
        let index = self.active.shared().index();
        let index_path = p.dir.join(index_file_name(index.base_offset));
        let made = SegmentWriter::create(&*p.fs, &path, next, (capacity, p.interval), &p.pins)
            .and_then(|fresh| sync_dir(&*p.fs, &p.dir).map(|()| fresh))
            .and_then(|fresh| {
                self.active
                    .seal_with(|| write_file(&*p.fs, &index_path, &index.encode(), false))
                    .map(|()| fresh)
            });
        let fresh = match made {
            Ok(fresh) => fresh,
            Err(e) => {
                self.stray = Some(path);
                return Err(e);
            }
        };
        let sealed = SealedSegment::seal(self.active.shared(), index);
        let new_active = fresh.shared().clone();
        let old = std::mem::replace(&mut self.active, fresh);
        p.update_view(|view| {
            view.sealed.push(Arc::new(sealed));
            view.active = new_active;
        });
        // Everything in the old segment is synced: readers may read all of it.
        old.shared().publish(old.len());
        tracing::debug!(dir = %p.dir.display(), sealed_bytes = old.len(), next_base = next, "segment rolled");
        Ok(())
    }

    /// Rolls when `needed` more bytes do not fit the active segment (an empty segment that is
    /// too small is replaced by one that fits).
    pub fn make_room(&mut self, p: &Partition, needed: u64) -> StoreResult<()> {
        if needed <= self.active.remaining() {
            return Ok(());
        }
        if !self.active.is_empty() {
            return self.roll(p, needed);
        }
        // Nothing was ever published from an empty segment: make it again, bigger.
        self.heal(p)?;
        let base = self.active.base_offset();
        let path = self.active.path().to_path_buf();
        let capacity = p.segment_capacity(needed);
        let fresh = SegmentWriter::recreate(&*p.fs, &path, base, (capacity, p.interval), &p.pins)?;
        assert_eq!(fresh.len(), SEGMENT_HEADER_LEN as u64);
        // The replaced file's index has the new one's name: a checkpoint of the replaced file
        // still running (its sync is detached from this lock) ends before this goes on, and one
        // starting later writes nothing, so no late index of it lands over the new file's.
        self.active.seal_with(|| Ok(()))?;
        let new_active = fresh.shared().clone();
        self.active = fresh;
        p.update_view(|view| view.active = new_active);
        Ok(())
    }
}

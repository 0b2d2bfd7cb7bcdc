//! Appending batches to a segment file: the active segment of a partition, or a segment that
//! compaction writes under a temporary name.
//!
//! A segment is created preallocated (format/SEGMENT.md, file version 2): at its full length
//! (sparse). Its first bytes (its unreserved head, [`unreserved_head`]) are written with
//! positioned writes, which take the blocks they fill and nothing more, so a new, idle or slow
//! partition costs the disk its data takes. Past the head, blocks are reserved a chunk ahead of
//! the writer, so appends overwrite reserved zeros (an fdatasync then writes no inode size, and
//! a full disk fails a reservation, never a page fault), and its bytes are reached through a
//! writable shared mapping, so an append is a copy into memory, not a system call. Readers see
//! the same mapping up to the length the writer published.
//!
//! The writer knows how much of its file the last completed sync made durable and stamps that
//! length into every batch it writes (`synced_len`), which is how recovery tells a torn tail from
//! damage to acknowledged bytes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::codec::{seal_batch, BatchHeader, BodyCrc};
use super::detached_sync::DetachedSync;
use super::header::{encode_segment_header, SEGMENT_HEADER_LEN};
use super::index::SegmentIndex;
use super::pin::PinCounter;
use super::reader::ActiveSegment;
use super::scan::note_batch;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{
    remove_if_present, FileRef, FileSystem, Fs, MapRef, OpenMode, Reservation, SyncGate,
};

/// File name of the segment whose base offset is `base`.
pub fn segment_file_name(base: i64) -> String {
    format!("{base:020}.seg")
}

/// The base offset named by a file name of the form `<base:020><suffix>` (`.seg`, `.idx`).
pub fn parse_file_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    let base = stem.parse::<i64>().ok()?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) && base >= 0).then_some(base)
}

/// File name of the index of the segment whose base offset is `base`.
pub fn index_file_name(base: i64) -> String {
    format!("{base:020}.idx")
}

/// Bytes of disk blocks a segment reserves at a time: the file is as long as its capacity from
/// its creation (sparse), and blocks are reserved with fallocate (`FALLOC_FL_KEEP_SIZE`) a chunk
/// ahead of the writer, so appends overwrite allocated zeros, an fdatasync writes the file's
/// extents only once per chunk, a full disk fails the reservation (a typed error, never a signal
/// from a mapped write), and a file never takes much more disk than its data. A file whose
/// length grows while it is mapped takes one page fault per 4 KiB page written; one whose length
/// stays put gets large folios from the kernel's read-around, each mapped by one fault (1 GiB
/// written: 262k faults against 11k).
pub const ALLOCATION_CHUNK: u64 = 4 << 20;

/// Most bytes at the start of a segment written with positioned writes, reserving nothing
/// ([`unreserved_head`]): a partition that holds less takes only the blocks its data fills
/// (10 records of 100 B: one 4 KiB block, not a 4 MiB chunk); one that writes more pays a
/// system call per append for this many bytes of each segment, then writes through the
/// mapping.
pub const UNRESERVED_HEAD: u64 = 256 << 10;

/// The unreserved head of a segment of `capacity` bytes: [`UNRESERVED_HEAD`], at most a
/// sixteenth of the segment.
pub fn unreserved_head(capacity: u64) -> u64 {
    UNRESERVED_HEAD.min(capacity / 16)
}

/// Most bytes of a segment's mapping kept prefaulted ahead of its writer (see
/// [`crate::fs::prefault_later`]): a range is requested whenever less than that is left ahead,
/// so the writer finds its pages mapped. The cost: a prefaulted page is dirty (still zeros) until
/// written, so a segment sync that comes first writes it twice, once as zeros (at most this
/// many bytes per sync, and what a seal leaves past the data), which a reader or recovery sees
/// as the clean end it already was.
pub const PREFAULT_CHUNK: u64 = 2 << 20;

/// Bytes a writer appends (since it was opened) before anything is prefaulted for it; then the
/// distance ahead grows with what it wrote, up to [`PREFAULT_CHUNK`], so a writer that stops
/// early leaves little prefaulted for nothing (64 writers appending 4k records of 100 B into a
/// fresh log, each partition writing ~100 KB: 2 MiB prefaulted per partition from the first
/// append made that 26% slower). Half the mapping's random head
/// ([`crate::fs::RANDOM_HEAD`]): the first range asked for reaches past the head while the
/// writer is still half a head short of it, so the prefault thread, not an append, takes the
/// first read-around fault of a fresh segment (it zero-fills the readahead window, ~3 ms).
/// With the two equal, group append_batch p999 was 4.3-4.4 ms; with half, 1.4-2.9 ms.
pub const PREFAULT_AFTER: u64 = crate::fs::RANDOM_HEAD as u64 / 2;

/// Bytes past the mapping's random head a new segment reads ahead (see
/// `SegmentWriter::read_ahead_past_head`): as far as the prefault thread keeps ahead of a
/// writer at most, so by the time it asks for more the writer is that far behind.
pub const READ_AHEAD_PAST_HEAD: u64 = PREFAULT_CHUNK;

/// Where a writer stood before an append, to cut it back there if the append must be undone.
#[derive(Debug, Clone)]
pub struct WriterMark {
    len: u64,
    /// The index as it stood: its scalars, and how many entries it had (appends only add).
    last_offset: i64,
    max_timestamp: i64,
    segment_len: u64,
    entries: usize,
}

/// An open, preallocated segment file that accepts batches at the end of its data.
#[derive(Debug)]
pub struct SegmentWriter {
    path: PathBuf,
    file: FileRef,
    map: MapRef,
    index_interval: u64,
    shared: Arc<ActiveSegment>,
    len: u64,
    /// Bytes from the start whose blocks are reserved (at least), or that positioned writes may
    /// fill where nothing can be reserved.
    allocated: u64,
    /// Bytes are copied through the mapping (no system call) while the file system reserves
    /// blocks; in the unreserved head, and once the file system answers that it cannot reserve
    /// ([`Reservation::Unsupported`]), they are written with positioned writes, which a full
    /// disk fails with `ENOSPC` where a store into the mapping would be a SIGBUS.
    mapped_writes: bool,
    /// Data below this length is written without a reservation (the unreserved head); zero
    /// once the writer has reserved blocks.
    unreserved_until: u64,
    /// Length the last completed sync made durable.
    synced: u64,
    /// End of the range asked to be prefaulted so far.
    prefaulted: u64,
    /// Length of the data when this writer was opened.
    opened_at: u64,
    /// The length the segment's index file records as durable, while no byte of the file has
    /// changed since it was written (`None` otherwise): a checkpoint then has nothing to write.
    indexed: Option<u64>,
    /// Every sync of this file passes through it.
    gate: SyncGate,
}

/// Gives a segment file whose header is written its full length, `capacity` bytes (sparse; a
/// longer file is left as long), reserving nothing (its head is written with positioned
/// writes). Nothing is durable until the caller syncs the file.
pub(crate) fn size_fresh_file(file: &FileRef, capacity: u64) -> std::io::Result<()> {
    file.set_len(capacity.max(file.len()?))
}

/// Creates the file of a new segment: header written, the file `capacity` bytes long (sparse),
/// synced (the caller syncs the directory). A file left at `path` by an earlier attempt that
/// failed (a full disk) is replaced; on failure nothing is left behind.
fn create_file(fs: &dyn FileSystem, path: &Path, base: i64, capacity: u64) -> StoreResult<FileRef> {
    remove_if_present(fs, path)?;
    let file = fs.open(path, OpenMode::CreateNew).at(path)?;
    let written = file
        .write_at(&encode_segment_header(base), 0)
        .and_then(|()| size_fresh_file(&file, capacity))
        .and_then(|()| file.sync_data())
        .at(path);
    match written {
        Ok(()) => {}
        Err(e) => {
            // Best effort: a leftover is also replaced by the next attempt.
            if let Err(left) = fs.remove_file(path) {
                tracing::warn!(path = %path.display(), error = %left, "could not remove a segment a failed creation left");
            }
            return Err(e);
        }
    }
    Ok(file)
}

impl SegmentWriter {
    /// Creates a new, empty segment of `capacity` bytes at `path` with base offset `base` (see
    /// `create_file`), mapped writable.
    pub fn create(
        fs: &dyn FileSystem,
        path: &Path,
        base: i64,
        (capacity, index_interval): (u64, u64),
        pins: &Arc<PinCounter>,
    ) -> StoreResult<Self> {
        assert!(
            capacity > SEGMENT_HEADER_LEN as u64,
            "a segment holds its header"
        );
        let file = create_file(fs, path, base, capacity)?;
        Self::fresh(path, file, base, (capacity, index_interval), pins)
    }

    /// The writer of a segment file `create_file` just made: empty, its header synced, its
    /// head written with positioned writes.
    fn fresh(
        path: &Path,
        file: FileRef,
        base: i64,
        (capacity, index_interval): (u64, u64),
        pins: &Arc<PinCounter>,
    ) -> StoreResult<Self> {
        let index = SegmentIndex::empty(base);
        let mut writer = Self::resume(path, file, index, (capacity, index_interval), pins)?;
        writer.synced = SEGMENT_HEADER_LEN as u64;
        Ok(writer)
    }

    /// Makes an empty segment at `path` again with `capacity` bytes: the new file is created
    /// under a temporary name and renamed over the old one, and the directory synced, so a
    /// failure leaves the old (empty) segment as it was.
    pub fn recreate(
        fs: &dyn FileSystem,
        path: &Path,
        base: i64,
        (capacity, index_interval): (u64, u64),
        pins: &Arc<PinCounter>,
    ) -> StoreResult<Self> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let file = create_file(fs, &tmp, base, capacity)?;
        fs.rename(&tmp, path).at(path)?;
        crate::fs::sync_parent(fs, path)?;
        Self::fresh(path, file, base, (capacity, index_interval), pins)
    }

    /// Continues appending to an existing preallocated segment whose valid (and durable)
    /// content `index` describes; everything past it is zero. The segment may hold `capacity`
    /// bytes (or its current length, if longer): a shorter file (one written before segments
    /// were created at their full length) is extended first, sparse. Blocks are reserved again
    /// from the data's end on (a range already reserved costs nothing more).
    pub fn resume(
        path: &Path,
        file: FileRef,
        index: SegmentIndex,
        (capacity, index_interval): (u64, u64),
        pins: &Arc<PinCounter>,
    ) -> StoreResult<Self> {
        let file_len = file.len().at(path)?;
        let len = index.segment_len;
        assert!(len <= file_len, "the data fits its file");
        if file_len < capacity {
            file.set_len(capacity).at(path)?;
        }
        let map = file.map_writable(capacity.max(file_len)).at(path)?;
        let allocated = len;
        // A segment whose data is still inside its head goes on with positioned writes.
        let head = unreserved_head(capacity.max(file_len));
        let unreserved_until = if len < head { head } else { 0 };
        let shared = ActiveSegment::new(path.to_path_buf(), map.clone(), index, pins.clone());
        Ok(Self {
            path: path.to_path_buf(),
            shared: Arc::new(shared),
            file,
            map,
            index_interval: index_interval.max(1),
            len,
            allocated,
            synced: len,
            mapped_writes: unreserved_until == 0,
            unreserved_until,
            prefaulted: len,
            opened_at: len,
            indexed: None,
            gate: SyncGate::default(),
        })
    }

    /// Reserves the file's blocks up to at least `end` (a chunk ahead, at most the mapping's
    /// length). The reserved range ends on a chunk boundary (or the file's end), so no page-cache
    /// folio (2 MiB at most, aligned to its size) holds both reserved and unreserved blocks: a
    /// write fault on a folio then never needs blocks a full disk could refuse (a signal).
    /// Inside the unreserved head nothing is reserved (positioned writes take their blocks);
    /// the first reservation past it switches to writes through the mapping.
    fn allocate_to(&mut self, end: u64) -> StoreResult<()> {
        if end <= self.allocated || end <= self.unreserved_until {
            return Ok(());
        }
        let target = end
            .max(self.allocated + ALLOCATION_CHUNK)
            .next_multiple_of(ALLOCATION_CHUNK)
            .min(self.map.len() as u64);
        let leaving_head = self.unreserved_until > 0;
        match self.file.reserve(target).at(&self.path)? {
            Reservation::Unsupported => {
                if self.mapped_writes || leaving_head {
                    tracing::info!(path = %self.path.display(), "the file system cannot reserve blocks: appends use positioned writes, not the mapping");
                }
                self.mapped_writes = false;
            }
            Reservation::Reserved if leaving_head => {
                self.mapped_writes = true;
                self.read_ahead_past_head();
            }
            Reservation::Reserved => {}
        }
        self.unreserved_until = 0;
        self.allocated = target;
        Ok(())
    }

    /// Writes `bytes` at `at`: through the mapping where the blocks are reserved, with a
    /// positioned write where they cannot be (see [`Self::mapped_writes`]).
    fn put(&self, at: u64, bytes: &[u8]) -> StoreResult<()> {
        match self.mapped_writes {
            true => self.map.write(at as usize, bytes),
            false => self.file.write_at(bytes, at),
        }
        .at(&self.path)
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Length of the data in bytes (the file is longer: preallocated).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes the file can still take.
    pub fn remaining(&self) -> u64 {
        self.map.len() as u64 - self.len
    }

    /// Length made durable by the last completed sync.
    pub fn synced_len(&self) -> u64 {
        self.synced
    }

    /// True when the segment holds no batch.
    pub fn is_empty(&self) -> bool {
        self.len <= SEGMENT_HEADER_LEN as u64
    }

    /// Base offset of the segment.
    pub fn base_offset(&self) -> i64 {
        self.shared.base_offset()
    }

    /// The read side shared with readers.
    pub fn shared(&self) -> &Arc<ActiveSegment> {
        &self.shared
    }

    /// The open file.
    pub fn file(&self) -> &FileRef {
        &self.file
    }

    /// Seals the unsealed batch `batch` (its base offset as `header` says, this file's synced
    /// length) and copies it after the data; returns its [`BodyCrc`] if sealing hashed one.
    /// The caller makes room first (rolls when [`Self::remaining`] is too small).
    pub fn append(
        &mut self,
        batch: &mut [u8],
        header: &mut BatchHeader,
    ) -> StoreResult<Option<BodyCrc>> {
        if batch.len() as u64 > self.remaining() {
            return Err(StoreError::Invalid(format!(
                "a {} byte batch does not fit the {} bytes left in {}",
                batch.len(),
                self.remaining(),
                self.path.display()
            )));
        }
        self.allocate_to(self.len + batch.len() as u64)?;
        let base = header.base_offset;
        let body = seal_batch(batch, header, base, self.synced);
        self.indexed = None;
        self.put(self.len, batch)?;
        let position = self.len;
        let interval = self.index_interval;
        self.shared
            .update_index(|index| note_batch(index, position, header, interval));
        self.len += batch.len() as u64;
        self.prefault_ahead();
        Ok(body)
    }

    /// Asks for the next range of the mapping to be prefaulted once less than the distance
    /// ahead is prefaulted (nothing before [`PREFAULT_AFTER`] bytes are written, then as much as
    /// was written, at most [`PREFAULT_CHUNK`]), allocating it first so the file covers it. A
    /// hint: if the allocation fails, nothing is asked (the append that needs the space reports
    /// it).
    fn prefault_ahead(&mut self) {
        let written = self.len.saturating_sub(self.opened_at);
        let ahead = written.min(PREFAULT_CHUNK);
        if !self.mapped_writes || written < PREFAULT_AFTER || self.prefaulted >= self.len + ahead {
            return;
        }
        let start = self.prefaulted.max(self.len);
        let end = (start + ahead).min(self.map.len() as u64);
        if start >= end {
            return;
        }
        if let Err(e) = self.allocate_to(end) {
            tracing::debug!(path = %self.path.display(), error = %e, "no space allocated ahead to prefault");
            return;
        }
        assert!(
            end <= self.allocated,
            "a prefaulted range lies inside the file"
        );
        crate::fs::prefault_later(self.map.clone(), start as usize, end as usize);
        self.prefaulted = end;
    }

    /// Asks for the [`READ_AHEAD_PAST_HEAD`] bytes after the mapping's random head to be read
    /// into the page cache while the writer fills the head: the first fault past the head
    /// then finds them, instead of zero-filling the device's whole read-around window (8 MiB
    /// on a VM here, ~3 ms, its pages locked meanwhile) a few commands into a fresh segment.
    fn read_ahead_past_head(&self) {
        let head = crate::fs::RANDOM_HEAD as u64;
        let end = (head + READ_AHEAD_PAST_HEAD).min(self.map.len() as u64);
        if head < end {
            crate::fs::read_ahead_later(self.map.clone(), head as usize, end as usize);
        }
    }

    /// Where the writer stands now.
    pub fn mark(&self) -> WriterMark {
        self.shared.read_index(|index| WriterMark {
            len: self.len,
            last_offset: index.last_offset,
            max_timestamp: index.max_timestamp,
            segment_len: index.segment_len,
            entries: index.entries.len(),
        })
    }

    /// Undoes every append since `mark` (their bytes were never published or synced): zeroes
    /// them, so the data ends where it ended.
    pub fn rollback(&mut self, mark: WriterMark) -> StoreResult<()> {
        assert!(
            mark.len >= self.synced,
            "a rollback never cuts synced bytes"
        );
        if mark.len == self.len {
            return Ok(());
        }
        let zeros = vec![0u8; (self.len - mark.len) as usize];
        self.indexed = None;
        self.put(mark.len, &zeros)?;
        self.len = mark.len;
        self.shared.update_index(|index| {
            assert!(index.entries.len() >= mark.entries);
            index.entries.truncate(mark.entries);
            index.last_offset = mark.last_offset;
            index.max_timestamp = mark.max_timestamp;
            index.segment_len = mark.segment_len;
        });
        Ok(())
    }

    /// Bytes written since the last completed sync.
    pub fn unsynced(&self) -> u64 {
        self.len - self.synced
    }

    /// Makes every appended byte durable (fdatasync writes back the mapping's dirty pages). If
    /// an earlier sync failed, the unsynced bytes are written again first.
    pub fn sync(&mut self) -> StoreResult<()> {
        self.unmap_unsynced();
        let mut gate = self.gate.lock();
        let len = self.len;
        let rewrite = match gate.failure().is_some() {
            true => self.rewrite_unsynced(),
            false => Ok(()),
        };
        match rewrite.and_then(|()| self.file.sync_data().at(&self.path)) {
            Ok(()) => {
                gate.clear();
                self.synced = len;
                Ok(())
            }
            Err(e) => {
                gate.fail(e.to_string());
                Err(e)
            }
        }
    }

    /// A sync of what is written now, to run without the partition's lock; with `index`, it
    /// also records the segment's index at this length as its durable floor.
    pub fn detach_sync(&mut self, index: Option<Fs>) -> DetachedSync {
        self.unmap_unsynced();
        DetachedSync {
            gate: self.gate.clone(),
            file: self.file.clone(),
            path: self.path.clone(),
            len: self.len,
            index: index.map(|fs| (fs, self.shared.index())),
        }
    }

    /// True when `job` was detached from this writer's file (not from a file this one replaced
    /// at the same base).
    pub fn detached(&self, job: &DetachedSync) -> bool {
        self.gate.is(&job.gate)
    }

    /// Before a sync: drops the writable page-table entries of the pages written since the last
    /// sync and of those prefaulted ahead ([`crate::fs::WritableMap::unmap_from`]), one range
    /// instead of the sync write-protecting them page by page; the next append asks for its
    /// range ahead to be prefaulted again. A hint: a failure costs only that speed.
    fn unmap_unsynced(&mut self) {
        if let Err(e) = self.map.unmap_from(self.synced as usize) {
            tracing::debug!(path = %self.path.display(), error = %e, "unmapping before a sync failed (a hint only)");
        }
        self.prefaulted = self.len;
    }

    /// Records that a sync of this file begun at length `len` completed.
    pub fn mark_synced(&mut self, len: u64) {
        assert!(len <= self.len, "a sync covers written bytes only");
        self.synced = self.synced.max(len);
    }

    /// Records that the index file now records `len` as durable (a sync with its index,
    /// [`SegmentWriter::detach_sync`], completed): while the data stays at that length, a
    /// checkpoint has nothing to write ([`SegmentWriter::index_current`]).
    pub fn mark_indexed(&mut self, len: u64) {
        if len == self.len && len == self.synced {
            self.indexed = Some(len);
        }
    }

    /// Whether the index file already records every byte as durable: nothing was written, and
    /// nothing undone, since it was (see [`SegmentWriter::mark_indexed`]).
    pub fn index_current(&self) -> bool {
        self.indexed == Some(self.len) && self.synced == self.len
    }

    /// Runs `write_index` (writing the sealed segment's final index) with the gate held, and
    /// marks the segment sealed if it succeeds: a detached sync finishing later leaves the index
    /// alone.
    pub fn seal_with(&self, write_index: impl FnOnce() -> StoreResult<()>) -> StoreResult<()> {
        let mut gate = self.gate.lock();
        write_index()?;
        gate.sealed = true;
        Ok(())
    }

    /// After a failed sync: writes the unsynced bytes again (from the mapping, which still holds
    /// them) and syncs, so that what was written (and may have been read) becomes durable as it
    /// is.
    pub fn resync(&mut self) -> StoreResult<()> {
        {
            let mut gate = self.gate.lock();
            if gate.failure().is_none() {
                gate.fail("a sync failed".to_string());
            }
        }
        self.sync()
    }

    fn rewrite_unsynced(&self) -> StoreResult<()> {
        let unsynced = self
            .map
            .view(self.len as usize)
            .slice(self.synced as usize..);
        let copy = unsynced.to_vec();
        drop(unsynced);
        self.put(self.synced, &copy)
    }
}

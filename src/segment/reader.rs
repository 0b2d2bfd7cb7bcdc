//! Reading records out of segments, sealed and active alike, straight from their mappings.
//!
//! A sealed segment is mapped read-only; the active one is read through the writer's mapping, up
//! to the length the writer published. Records handed out are zero-copy slices of the mapping;
//! scans can instead visit borrowed records without allocating. Each batch's CRC is verified the
//! first time a read crosses it: a segment remembers the prefix of its data whose batches passed
//! (the bytes there never change), so repeated reads pay for framing only.
//!
//! A walk over batches is a chain of dependent loads (each length gives the next position), so
//! it prefetches a page ahead of itself, and it builds each header in place after checking its
//! frame: small records read at memory speed, not at the speed of one miss per page.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use super::codec::{
    check_crc, check_fields, check_frame, decode_checked_shared_into, header_fields, visit_checked,
    visit_checked_shared, BatchHeader,
};
use super::index::SegmentIndex;
use super::pin::{Pin, PinCounter};
use super::record::{Record, RecordRef};
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{FileHandle, MapRef};

/// Where a read within one segment stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStop {
    /// The byte budget was used up; continue from this offset.
    Budget(i64),
    /// The bound `until` was reached.
    Bound,
    /// The segment holds nothing more.
    EndOfSegment,
}

/// What a visit calls with each record.
pub enum Visitor<'f, E> {
    /// Records borrowed from the mapping (no allocation, no reference count per record).
    Borrowed(&'f mut dyn FnMut(RecordRef<'_>) -> Result<(), E>),
    /// Records whose uncompressed keys and values are zero-copy slices of the mapping.
    Shared(&'f mut dyn FnMut(Record) -> Result<(), E>),
}

/// How far ahead of the batch being parsed a walk prefetches: one 4 KiB page. Measured here
/// for 100-byte records (one per batch), before the header was built in place: no prefetch
/// 44-46 ns per record; one line 1-3 KiB ahead 37-40 ns, 4-16 KiB ahead 34-38 ns; three lines
/// 4 KiB ahead 31-33 ns; every line once 34-38 ns (the bookkeeping costs more than repeated
/// hints). With the header built in place: no prefetch 35-39 ns, three lines 20-22 ns.
const PREFETCH_AHEAD: usize = 4096;

/// Cache lines prefetched per batch: enough to span a small batch (a 100-byte record's batch
/// is 173 bytes); within larger batches the hardware prefetcher keeps up on its own.
const PREFETCH_LINES: usize = 3;

/// Bytes of one processor cache line (x86_64 and most arm64 cores).
const CACHE_LINE: usize = 64;

/// A segment's data as one byte string, with the prefix whose CRCs are known good.
struct Data<'a> {
    file: &'a Path,
    bytes: Bytes,
    verified: &'a AtomicU64,
}

impl Data<'_> {
    /// The batch at `pos`: framing checked against the data's end, CRC checked unless the batch
    /// lies in the verified prefix (which then grows over it).
    #[inline(always)]
    fn batch_at(&self, pos: u64) -> StoreResult<BatchHeader> {
        let rest = &self.bytes[pos as usize..];
        let corrupt = |e| StoreError::corrupt(self.file, pos, e);
        // A batch in the verified prefix passed `decode_header` and its CRC check in this
        // process, and those bytes never change: its fields need no second validation.
        let header = header_fields(rest, check_frame(rest).map_err(corrupt)?);
        if pos >= self.verified.load(Ordering::Acquire) {
            check_fields(&header).map_err(corrupt)?;
        }
        let end = pos + header.len() as u64;
        if end > self.bytes.len() as u64 {
            let err = super::DecodeError::Truncated {
                needed: header.len(),
                available: rest.len(),
            };
            return Err(corrupt(err));
        }
        if end > self.verified.load(Ordering::Acquire) {
            check_crc(rest, &header).map_err(corrupt)?;
            // Grows the prefix when it ended at this batch; a reader that lost the race (or
            // checked a batch past a gap) leaves it as it is, which is correct either way.
            self.verified
                .compare_exchange(pos, end, Ordering::AcqRel, Ordering::Acquire)
                .ok();
        }
        Ok(header)
    }

    /// Asks the processor to fetch the [`PREFETCH_LINES`] cache lines [`PREFETCH_AHEAD`] bytes
    /// past `pos` (those within the data) into its caches.
    ///
    /// A walk is a chain of dependent loads (each batch's length gives the next batch's
    /// position), so the processor cannot run ahead of it, and the hardware prefetcher stops at
    /// each 4 KiB page: every page would start with a full memory (and page-table) miss. The
    /// hints start those misses a page early, while the walk parses the batches before them.
    #[inline]
    fn prefetch_ahead(&self, pos: u64) {
        let at = pos as usize + PREFETCH_AHEAD;
        for line in 0..PREFETCH_LINES {
            if let Some(byte) = self.bytes.get(at + line * CACHE_LINE) {
                crate::fs::prefetch(byte);
            }
        }
    }

    /// Walks batches from `start` while they may hold offsets below `until`, calling `f` with
    /// each batch holding offsets at or above `from`; `f` returns false to stop. Returns where
    /// the walk ended.
    fn walk(
        &self,
        start: u64,
        (from, until): (i64, i64),
        mut f: impl FnMut(u64, &BatchHeader) -> StoreResult<bool>,
    ) -> StoreResult<ReadStop> {
        let mut pos = start;
        while pos < self.bytes.len() as u64 {
            self.prefetch_ahead(pos);
            let header = self.batch_at(pos)?;
            if header.base_offset >= until {
                return Ok(ReadStop::Bound);
            }
            if header.last_offset() >= from && !f(pos, &header)? {
                return Ok(ReadStop::Budget(header.last_offset() + 1));
            }
            pos += header.len() as u64;
            if header.last_offset() + 1 >= until {
                return Ok(ReadStop::Bound);
            }
        }
        Ok(ReadStop::EndOfSegment)
    }

    /// Pushes the records in `[from, until)` onto `out` until about `budget` bytes of batches
    /// were read.
    fn read(
        &self,
        start: u64,
        range: (i64, i64),
        budget: &mut usize,
        out: &mut Vec<Record>,
    ) -> StoreResult<ReadStop> {
        let (from, until) = range;
        self.walk(start, range, |pos, header| {
            decode_checked_shared_into(&self.bytes, pos as usize, header, (from, until), out)
                .map_err(|e| StoreError::corrupt(self.file, pos, e))?;
            *budget = budget.saturating_sub(header.len());
            Ok(*budget > 0)
        })
    }

    /// Calls `f` with each record in `[from, until)`.
    fn visit<E: From<StoreError>>(
        &self,
        start: u64,
        range: (i64, i64),
        f: &mut Visitor<'_, E>,
    ) -> Result<ReadStop, E> {
        let (from, until) = range;
        let mut failed = None;
        let stop = self.walk(start, range, |pos, header| {
            let decoded = match f {
                Visitor::Borrowed(f) => visit_checked(&self.bytes[pos as usize..], header, |r| {
                    if failed.is_none() && r.offset >= from && r.offset < until {
                        failed = f(r).err();
                    }
                }),
                Visitor::Shared(f) => {
                    visit_checked_shared(&self.bytes, pos as usize, header, range, |r| {
                        if failed.is_none() {
                            failed = f(r).err();
                        }
                    })
                }
            };
            decoded.map_err(|e| StoreError::corrupt(self.file, pos, e))?;
            Ok(failed.is_none())
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(stop),
        }
    }
}

/// A sealed, immutable segment, mapped read-only (or through the mapping it was written by).
///
/// Records read from it are zero-copy slices that keep the mapping alive; that is sound because a
/// sealed file is never truncated or rewritten (the file layer's `map` states the rule). Once the
/// segment is deleted, what records still pin is counted (see [`super::pin`]).
#[derive(Debug)]
pub struct SealedSegment {
    path: PathBuf,
    data: Bytes,
    index: SegmentIndex,
    pin: Pin,
    verified: AtomicU64,
}

impl SealedSegment {
    /// Maps a sealed segment file whose validated index is `index` (the data is its first
    /// `index.segment_len` bytes); `pins` counts the mapping once the segment is deleted.
    pub fn map(
        path: &Path,
        file: &dyn FileHandle,
        index: SegmentIndex,
        pins: Arc<PinCounter>,
    ) -> StoreResult<Self> {
        let map = file.map().at(path)?;
        if (map.len() as u64) < index.segment_len {
            return Err(StoreError::Invalid(format!(
                "{} is {} bytes but its index describes {}",
                path.display(),
                map.len(),
                index.segment_len
            )));
        }
        let pin = Pin::new(pins);
        let data = pin.guard(map.slice(..index.segment_len as usize));
        Ok(Self::with_data(path, data, index, pin))
    }

    /// The sealed form of an active segment whose data `index` describes: the same mapping.
    pub fn seal(active: &ActiveSegment, index: SegmentIndex) -> Self {
        assert!(index.segment_len <= active.map.len() as u64);
        let data = active
            .pin
            .guard(active.map.view(index.segment_len as usize));
        let sealed = Self::with_data(&active.path, data, index, active.pin.clone());
        let verified = active.verified.load(Ordering::Acquire);
        sealed.verified.store(verified, Ordering::Release);
        sealed
    }

    fn with_data(path: &Path, data: Bytes, index: SegmentIndex, pin: Pin) -> Self {
        Self {
            path: path.to_path_buf(),
            data,
            index,
            pin,
            verified: AtomicU64::new(super::SEGMENT_HEADER_LEN as u64),
        }
    }

    /// Notes that the segment's file was deleted (its mapping now pins the space).
    pub fn mark_deleted(&self) {
        self.pin.deleted(self.index.segment_len);
    }

    /// The segment's data (header and batches).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The segment's index and summary.
    pub fn index(&self) -> &SegmentIndex {
        &self.index
    }

    fn view(&self) -> Data<'_> {
        Data {
            file: &self.path,
            bytes: self.data.clone(),
            verified: &self.verified,
        }
    }

    /// Reads records in `[from, until)`, spending at most about `budget` bytes of batches.
    pub fn read(
        &self,
        range: (i64, i64),
        budget: &mut usize,
        out: &mut Vec<Record>,
    ) -> StoreResult<ReadStop> {
        self.view()
            .read(self.index.lookup(range.0), range, budget, out)
    }

    /// Calls `f` with each record in `[from, until)`.
    pub fn visit<E: From<StoreError>>(
        &self,
        range: (i64, i64),
        f: &mut Visitor<'_, E>,
    ) -> Result<ReadStop, E> {
        self.view().visit(self.index.lookup(range.0), range, f)
    }
}

/// Read side of the active segment, shared between the writer and readers.
#[derive(Debug)]
pub struct ActiveSegment {
    path: PathBuf,
    map: MapRef,
    base_offset: i64,
    committed_len: AtomicU64,
    index: RwLock<SegmentIndex>,
    pin: Pin,
    verified: AtomicU64,
}

impl ActiveSegment {
    /// Wraps the writer's mapping of the active segment; `index.segment_len` bytes are readable.
    pub fn new(path: PathBuf, map: MapRef, index: SegmentIndex, pins: Arc<PinCounter>) -> Self {
        Self {
            path,
            map,
            base_offset: index.base_offset,
            committed_len: AtomicU64::new(index.segment_len),
            index: RwLock::new(index),
            pin: Pin::new(pins),
            verified: AtomicU64::new(super::SEGMENT_HEADER_LEN as u64),
        }
    }

    /// Base offset of the segment.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Bytes readers may read.
    pub fn committed_len(&self) -> u64 {
        self.committed_len.load(Ordering::Acquire)
    }

    /// The readable prefix of the segment (header and published batches), as a pinned view.
    pub fn committed_bytes(&self) -> Bytes {
        self.view().0.bytes
    }

    /// Makes `len` bytes readable (called by the writer once they are durable or acknowledged).
    pub fn publish(&self, len: u64) {
        self.committed_len.fetch_max(len, Ordering::AcqRel);
    }

    /// A copy of the index (summary and entries) as the writer last updated it.
    pub fn index(&self) -> SegmentIndex {
        self.index.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Calls `f` with the shared index (without copying it).
    pub fn read_index<R>(&self, f: impl FnOnce(&SegmentIndex) -> R) -> R {
        f(&self.index.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Applies `f` to the shared index (writer only).
    pub fn update_index<R>(&self, f: impl FnOnce(&mut SegmentIndex) -> R) -> R {
        f(&mut self.index.write().unwrap_or_else(|p| p.into_inner()))
    }

    fn view(&self) -> (Data<'_>, u64) {
        let len = self.committed_len();
        let bytes = self.pin.guard(self.map.view(len as usize));
        let data = Data {
            file: &self.path,
            bytes,
            verified: &self.verified,
        };
        (data, len)
    }

    fn start(&self, offset: i64) -> u64 {
        self.read_index(|index| index.lookup(offset))
    }

    /// Reads records in `[from, until)`, spending at most about `budget` bytes of batches.
    pub fn read(
        &self,
        range: (i64, i64),
        budget: &mut usize,
        out: &mut Vec<Record>,
    ) -> StoreResult<ReadStop> {
        let start = self.start(range.0);
        let (data, len) = self.view();
        if start > len {
            return Ok(ReadStop::EndOfSegment);
        }
        data.read(start, range, budget, out)
    }

    /// Calls `f` with each record in `[from, until)`.
    pub fn visit<E: From<StoreError>>(
        &self,
        range: (i64, i64),
        f: &mut Visitor<'_, E>,
    ) -> Result<ReadStop, E> {
        let start = self.start(range.0);
        let (data, len) = self.view();
        if start > len {
            return Ok(ReadStop::EndOfSegment);
        }
        data.visit(start, range, f)
    }
}

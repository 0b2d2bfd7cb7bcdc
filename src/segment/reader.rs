//! Reading records out of segments: sealed segments through a read-only memory map, the active
//! segment through positioned reads bounded by its committed length.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use super::codec::{
    check_crc, decode_checked, decode_checked_shared, decode_header, BATCH_HEADER_LEN,
};
use super::index::SegmentIndex;
use super::pin::{Pin, PinCounter};
use super::record::Record;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{FileHandle, FileRef};

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

/// Bytes of a segment file held in memory.
struct Image<'a> {
    file: &'a Path,
    /// The bytes, starting at file position `pos`; records are sliced out of them without copying.
    bytes: &'a Bytes,
    pos: u64,
    /// End of the readable data in the file: a batch claiming to run past it is corrupt.
    data_end: u64,
    /// Whether records may be slices of `bytes` (a mapping) rather than copies (a read buffer).
    zero_copy: bool,
}

/// Decodes batches of `image` from file position `start`, pushing records in `[from, until)` onto
/// `out` until `budget` bytes of batches were read. Returns where it stopped and the position reached.
fn collect(
    image: &Image<'_>,
    start: u64,
    range: (i64, i64),
    budget: &mut usize,
    out: &mut Vec<Record>,
) -> StoreResult<(ReadStop, u64)> {
    let (from, until) = range;
    let (file, data_end, image_pos, zero_copy, image) = (
        image.file,
        image.data_end,
        image.pos,
        image.zero_copy,
        image.bytes,
    );
    let mut pos = start;
    loop {
        let rel = (pos - image_pos) as usize;
        if rel >= image.len() {
            return Ok((ReadStop::EndOfSegment, pos));
        }
        let rest = &image[rel..];
        if rest.len() < BATCH_HEADER_LEN && pos + (rest.len() as u64) < data_end {
            // The caller's image ends inside a batch header: it must read further.
            return Ok((ReadStop::EndOfSegment, pos));
        }
        let header = decode_header(rest).map_err(|e| StoreError::corrupt(file, pos, e))?;
        if pos + header.len() as u64 > data_end {
            let err = crate::segment::DecodeError::Truncated {
                needed: header.len(),
                available: (data_end - pos) as usize,
            };
            return Err(StoreError::corrupt(file, pos, err));
        }
        if rel + header.len() > image.len() {
            // The caller's image ends inside this batch: it must read further.
            return Ok((ReadStop::EndOfSegment, pos));
        }
        // Nothing in the header is trusted before the CRC says the batch is intact.
        let corrupt = |e| StoreError::corrupt(file, pos, e);
        check_crc(&image[rel..], &header).map_err(corrupt)?;
        if header.base_offset >= until {
            return Ok((ReadStop::Bound, pos));
        }
        if header.last_offset() >= from {
            let records = if zero_copy {
                decode_checked_shared(&image.slice(rel..rel + header.len()), &header)
            } else {
                decode_checked(&image[rel..], &header)
            }
            .map_err(corrupt)?;
            out.extend(
                records
                    .into_iter()
                    .filter(|r| r.offset >= from && r.offset < until),
            );
            *budget = budget.saturating_sub(header.len());
        }
        pos += header.len() as u64;
        if header.last_offset() + 1 >= until {
            return Ok((ReadStop::Bound, pos));
        }
        if *budget == 0 {
            return Ok((ReadStop::Budget(header.last_offset() + 1), pos));
        }
    }
}

/// A sealed, immutable segment mapped read-only.
///
/// The mapping is owned by a [`Bytes`], so records read from it are zero-copy slices that keep
/// the mapping alive; that is sound because a sealed file is never truncated or rewritten (the
/// file layer's `map` states the rule). Once the segment is deleted, what records still pin is
/// counted (see [`super::pin`]).
#[derive(Debug)]
pub struct SealedSegment {
    path: PathBuf,
    map: Bytes,
    index: SegmentIndex,
    pin: Pin,
}

impl SealedSegment {
    /// Maps a sealed segment file whose validated index is `index`; `pins` counts the mapping
    /// once the segment is deleted.
    pub fn map(
        path: &Path,
        file: &dyn FileHandle,
        index: SegmentIndex,
        pins: Arc<PinCounter>,
    ) -> StoreResult<Self> {
        let map = file.map().at(path)?;
        if map.len() as u64 != index.segment_len {
            return Err(StoreError::Invalid(format!(
                "{} is {} bytes but its index describes {}",
                path.display(),
                map.len(),
                index.segment_len
            )));
        }
        let (map, pin) = Pin::wrap(map, pins);
        Ok(Self {
            path: path.to_path_buf(),
            map,
            index,
            pin,
        })
    }

    /// Notes that the segment's file was deleted (its mapping now pins the space).
    pub fn mark_deleted(&self) {
        self.pin.deleted();
    }

    /// The mapped bytes of the whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The segment's index and summary.
    pub fn index(&self) -> &SegmentIndex {
        &self.index
    }

    /// Reads records in `[from, until)`, spending at most about `budget` bytes of batches.
    pub fn read(
        &self,
        range: (i64, i64),
        budget: &mut usize,
        out: &mut Vec<Record>,
    ) -> StoreResult<ReadStop> {
        let start = self.index.lookup(range.0);
        let image = Image {
            file: &self.path,
            bytes: &self.map,
            pos: 0,
            data_end: self.map.len() as u64,
            zero_copy: true,
        };
        collect(&image, start, range, budget, out).map(|(stop, _)| stop)
    }
}

/// Read side of the active segment, shared between the writer thread and readers.
#[derive(Debug)]
pub struct ActiveSegment {
    path: PathBuf,
    file: FileRef,
    base_offset: i64,
    committed_len: AtomicU64,
    index: RwLock<SegmentIndex>,
}

impl ActiveSegment {
    /// Wraps a read handle on the active segment; `committed_len` bytes are readable.
    pub fn new(path: PathBuf, file: FileRef, index: SegmentIndex) -> Self {
        Self {
            path,
            file,
            base_offset: index.base_offset,
            committed_len: AtomicU64::new(index.segment_len),
            index: RwLock::new(index),
        }
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Base offset of the segment.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Bytes readers may read.
    pub fn committed_len(&self) -> u64 {
        self.committed_len.load(Ordering::Acquire)
    }

    /// Makes `len` bytes readable (called by the writer after the bytes are durable or acknowledged).
    pub fn publish(&self, len: u64) {
        self.committed_len.fetch_max(len, Ordering::AcqRel);
    }

    /// A copy of the index (summary and entries) as the writer last updated it.
    pub fn index(&self) -> SegmentIndex {
        self.index.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Applies `f` to the shared index (writer only).
    pub fn update_index<R>(&self, f: impl FnOnce(&mut SegmentIndex) -> R) -> R {
        f(&mut self.index.write().unwrap_or_else(|p| p.into_inner()))
    }

    /// Reads records in `[from, until)`, spending at most about `budget` bytes of batches.
    pub fn read(
        &self,
        range: (i64, i64),
        budget: &mut usize,
        out: &mut Vec<Record>,
    ) -> StoreResult<ReadStop> {
        let end = self.committed_len();
        let mut pos = self
            .index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .lookup(range.0);
        let chunk = (*budget).clamp(64 << 10, 8 << 20);
        while pos < end {
            let mut want = (end - pos).min(chunk as u64) as usize;
            let mut image = vec![0u8; want];
            self.file.read_exact_at(&mut image, pos).at(&self.path)?;
            if image.len() >= BATCH_HEADER_LEN {
                // A batch larger than the chunk: read exactly that batch.
                let header =
                    decode_header(&image).map_err(|e| StoreError::corrupt(&self.path, pos, e))?;
                if header.len() > want && pos + header.len() as u64 <= end {
                    want = header.len();
                    image.resize(want, 0);
                    self.file.read_exact_at(&mut image, pos).at(&self.path)?;
                }
            }
            let image = Bytes::from(image);
            let view = Image {
                file: &self.path,
                bytes: &image,
                pos,
                data_end: end,
                // Measured: copying each batch out of the read buffer is faster for 1 KiB records
                // than slicing it (the buffer then lives until its last record is dropped).
                zero_copy: false,
            };
            let (stop, next) = collect(&view, pos, range, budget, out)?;
            match stop {
                ReadStop::EndOfSegment if next > pos => pos = next,
                ReadStop::EndOfSegment => {
                    let err = crate::segment::DecodeError::Truncated {
                        needed: BATCH_HEADER_LEN,
                        available: (end - pos) as usize,
                    };
                    return Err(StoreError::corrupt(&self.path, pos, err));
                }
                other => return Ok(other),
            }
        }
        Ok(ReadStop::EndOfSegment)
    }
}

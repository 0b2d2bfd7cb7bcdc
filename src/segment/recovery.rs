//! Opening segments at startup: validate or rebuild each index, scan the last segment from its
//! last index entry, cut a torn tail and report corruption with file and byte offset.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::codec::{check_batch, BatchHeader};
use super::header::{
    decode_segment_header_full, encode_segment_header, SegmentHeader, SEGMENT_HEADER_LEN,
};
use super::index::SegmentIndex;
use super::pin::PinCounter;
use super::reader::SealedSegment;
use super::scan::{index_matches, nonzero_end, scan_segment, Scan, ScanEnd};
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{write_file, FileRef, FileSystem, OpenMode};

/// What recovery may do with invalid bytes (after raft-engine's recovery modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Any invalid byte is an error, even a torn tail.
    AbsoluteConsistency,
    /// Cut a torn tail of the last segment (bytes never acknowledged); anything else is an error.
    #[default]
    TolerateTornTail,
    /// Cut every segment at its first invalid batch and go on (loses data; for salvage only).
    Salvage,
}

/// What recovery did to one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentRecovery {
    /// Bytes cut from the end of the segment.
    pub truncated_bytes: u64,
    /// Whether the index had to be rebuilt by scanning.
    pub index_rebuilt: bool,
}

/// The index at `index_path`, if it decodes and matches the segment image of base offset `base`
/// (format/INDEX.md, "Trust rule"); `None` means it is missing, damaged or stale.
pub fn trusted_index(
    fs: &dyn FileSystem,
    index_path: &Path,
    base: i64,
    image: &[u8],
) -> Option<SegmentIndex> {
    let preallocated = decode_segment_header_full(image).ok()?.preallocated;
    let bytes = fs.read_file(index_path).ok()?;
    SegmentIndex::decode(&bytes)
        .ok()
        .filter(|i| i.base_offset == base && index_matches(image, i, preallocated))
}

/// The segment's header, checked against the base offset its name gives.
fn check_header(path: &Path, image: &[u8], base: i64) -> StoreResult<SegmentHeader> {
    let found = decode_segment_header_full(image).map_err(|e| StoreError::corrupt(path, 0, e))?;
    if found.base_offset != base {
        return Err(StoreError::corrupt(
            path,
            16,
            crate::segment::DecodeError::invalid("base_offset", "differs from the file name"),
        ));
    }
    Ok(found)
}

/// The length of a segment's data known durable from its index file (written whole, synced and
/// renamed into place at a checkpoint): damage below it is damage, never an unsynced tail. 0 when
/// there is no readable index for this segment.
pub fn durable_floor(fs: &dyn FileSystem, index_path: &Path, base: i64) -> u64 {
    fs.read_file(index_path)
        .ok()
        .and_then(|bytes| SegmentIndex::decode(&bytes).ok())
        .filter(|i| i.base_offset == base)
        .map_or(0, |i| i.segment_len)
}

/// Whether the journal holds exactly this batch (its header, its bytes): partition recovery
/// of a journaled log confirms a last segment's unsynced tail with it.
pub type Confirm<'a> = &'a dyn Fn(&BatchHeader, &[u8]) -> bool;

/// Where the journal must confirm a last segment's batches from: its durable floor, or the
/// header when no index file records one. A checkpoint writes the floor atomically (synced,
/// renamed), so an index file that is missing or does not decode was never a checkpoint's: it
/// is the empty index of a new partition or segment, written unsynced, and every batch in the
/// segment since has its frame in the journal. `None` when the file cannot be read at all, or
/// names another segment: the floor is unknown, so nothing is cut for want of a frame.
fn confirmation_floor(fs: &dyn FileSystem, index_path: &Path, base: i64) -> Option<u64> {
    let header = SEGMENT_HEADER_LEN as u64;
    match fs.read_file(index_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(header),
        Err(_) => None,
        Ok(bytes) => match SegmentIndex::decode(&bytes) {
            Err(_) => Some(header),
            Ok(index) if index.base_offset == base => Some(index.segment_len.max(header)),
            Ok(_) => None,
        },
    }
}

/// The position of the first batch in `image[from..to]` (valid batches, `from` a batch
/// boundary) the journal does not hold exactly: bytes written and never acknowledged (a
/// failed request undone in memory after write-back had made it durable, or a write whose
/// frame never reached the journal).
fn first_unconfirmed(image: &[u8], from: u64, to: u64, confirm: Confirm<'_>) -> Option<u64> {
    let mut pos = from as usize;
    while pos < to as usize {
        let Ok(header) = check_batch(&image[pos..]) else {
            return Some(pos as u64);
        };
        let end = pos + header.len();
        if !confirm(&header, &image[pos..end]) {
            return Some(pos as u64);
        }
        pos = end;
    }
    None
}

/// Decides what a scan that did not end cleanly means under `mode`: the length to keep, or an
/// error. A torn tail of the last segment is cut only above `floor` (what a checkpoint recorded
/// as durable).
fn resolve_end(
    path: &Path,
    scan: &Scan,
    mode: RecoveryMode,
    (last, floor): (bool, u64),
) -> StoreResult<Option<u64>> {
    match (&scan.end, mode) {
        (ScanEnd::Clean, _) => Ok(None),
        (ScanEnd::TornTail { position, .. }, RecoveryMode::TolerateTornTail)
            if last && *position >= floor =>
        {
            Ok(Some(*position))
        }
        (
            ScanEnd::TornTail { position, .. } | ScanEnd::Corrupt { position, .. },
            RecoveryMode::Salvage,
        ) => Ok(Some(*position)),
        (ScanEnd::TornTail { position, error } | ScanEnd::Corrupt { position, error }, _) => {
            Err(StoreError::corrupt(path, *position, error.clone()))
        }
    }
}

/// Where a segment is and how recovery treats it.
#[derive(Debug, Clone, Copy)]
pub struct SegmentPlace<'a> {
    /// The file system.
    pub fs: &'a dyn FileSystem,
    /// The segment file.
    pub path: &'a Path,
    /// Its index file.
    pub index_path: &'a Path,
    /// Its base offset (from its name).
    pub base: i64,
    /// What recovery may cut.
    pub mode: RecoveryMode,
    /// Index interval for a rebuilt index.
    pub interval: u64,
}

/// A segment file's bytes up to the end of its last data region ([`FileHandle::data_end`]):
/// everything past it reads as zeros, so scanning this prefix finds the same batches and the same
/// last non-zero byte as scanning the whole file, without reading the unwritten capacity of a
/// sparse segment (64 MiB by default; reading it made every recovery of a last segment slower).
fn data_image(file: &FileRef, path: &Path) -> StoreResult<Bytes> {
    let map = file.map().at(path)?;
    let end = file.data_end().at(path)?.min(map.len() as u64);
    Ok(map.slice(..end as usize))
}

/// Cuts a segment's data at `keep`: a version 1 file is truncated (it is not mapped then); in a
/// preallocated file the bytes from `keep` to the last non-zero one are zeroed, so the data ends
/// at `keep` and what follows is the zero tail. Synced. Returns the bytes cut.
fn cut(
    file: &FileRef,
    path: &Path,
    keep: u64,
    image_len: u64,
    preallocated: bool,
) -> StoreResult<u64> {
    if !preallocated {
        file.set_len(keep).at(path)?;
        file.sync_all().at(path)?;
        return Ok(image_len.saturating_sub(keep));
    }
    let map = data_image(file, path)?;
    let end = nonzero_end(&map) as u64;
    drop(map);
    let mut pos = keep;
    let zeros = vec![0u8; 1 << 20];
    while pos < end {
        let n = (end - pos).min(zeros.len() as u64) as usize;
        file.write_at(&zeros[..n], pos).at(path)?;
        pos += n as u64;
    }
    file.sync_data().at(path)?;
    Ok(end.saturating_sub(keep))
}

/// Opens a sealed (not last) segment, validating its index against the file or rebuilding it.
/// The only cut (in `Salvage` mode) happens while the file is not mapped by a reader.
pub fn open_sealed(
    place: SegmentPlace<'_>,
    pins: &Arc<PinCounter>,
) -> StoreResult<(SealedSegment, SegmentRecovery)> {
    let SegmentPlace {
        fs,
        path,
        index_path,
        base,
        mode,
        interval,
    } = place;
    let mut report = SegmentRecovery::default();
    loop {
        let file = fs.open(path, OpenMode::Read).at(path)?;
        let map = data_image(&file, path)?;
        let header = check_header(path, &map, base)?;
        if let Some(index) = trusted_index(fs, index_path, base, &map) {
            drop(map);
            return Ok((
                SealedSegment::map(path, &*file, index, pins.clone())?,
                report,
            ));
        }
        report.index_rebuilt = true;
        let start = SEGMENT_HEADER_LEN as u64;
        let empty = SegmentIndex::empty(base);
        let scan = scan_segment(&map, empty, start, (interval, header.preallocated));
        let len = map.len() as u64;
        drop(map);
        match resolve_end(path, &scan, mode, (false, 0))? {
            None => {
                write_file(fs, index_path, &scan.index.encode(), false)?;
                let segment = SealedSegment::map(path, &*file, scan.index, pins.clone())?;
                return Ok((segment, report));
            }
            Some(keep) => {
                let file = fs.open(path, OpenMode::ReadWrite).at(path)?;
                report.truncated_bytes += cut(&file, path, keep, len, header.preallocated)?;
            }
        }
    }
}

/// The last segment of a partition, recovered.
#[derive(Debug)]
pub struct LastSegment {
    /// The open file.
    pub file: FileRef,
    /// Its valid content.
    pub index: SegmentIndex,
    /// What recovery did.
    pub report: SegmentRecovery,
    /// Whether it is preallocated (format version 2). A version 1 segment takes no more
    /// appends: the partition seals it and starts a new one.
    pub preallocated: bool,
    /// Whether its index file records exactly this content as durable (a clean close's index
    /// that matched): a checkpoint before the next append has nothing to write for it.
    pub index_on_disk: bool,
}

/// Opens the last segment of a partition: scan from the header (or the last trusted index
/// entry), then cut a torn tail (per `mode`). A segment whose header never became durable, with
/// nothing valid after it, is made again, preallocated to `capacity`. After a clean close
/// (`clean`) nothing was written after the index, so a trusted index is taken as it is. With
/// `confirm` (a journaled log that left journal files), the batches past the durable floor must
/// be the journal's: from the first that is not, the segment is cut in every mode (those bytes
/// were never acknowledged; replay writes the acknowledged batches there again).
pub fn open_last(
    place: SegmentPlace<'_>,
    capacity: u64,
    clean: bool,
    confirm: Option<Confirm<'_>>,
) -> StoreResult<LastSegment> {
    let SegmentPlace {
        fs,
        path,
        index_path,
        base,
        mode,
        interval,
    } = place;
    let mut report = SegmentRecovery::default();
    let file = fs.open(path, OpenMode::ReadWrite).at(path)?;
    let image = data_image(&file, path)?;
    let len = image.len() as u64;
    let header = match check_header(path, &image, base) {
        Ok(header) => header,
        Err(err) => {
            // A header that never became durable: only acceptable when nothing valid follows.
            let header_len = SEGMENT_HEADER_LEN as u64;
            let empty = SegmentIndex::empty(base);
            let scan = scan_segment(&image, empty, header_len, (interval, true));
            let holds_data = len > header_len
                && (scan.index.segment_len > header_len
                    || matches!(scan.end, ScanEnd::Corrupt { .. }));
            drop(image);
            if (holds_data && mode != RecoveryMode::Salvage)
                || mode == RecoveryMode::AbsoluteConsistency
            {
                return Err(err);
            }
            report.truncated_bytes = cut(&file, path, 0, len, true)?;
            file.write_at(&encode_segment_header(base), 0).at(path)?;
            crate::segment::writer::size_fresh_file(&file, capacity).at(path)?;
            file.sync_data().at(path)?;
            report.index_rebuilt = true;
            let index = SegmentIndex::empty(base);
            return Ok(LastSegment {
                file,
                index,
                report,
                preallocated: true,
                index_on_disk: false,
            });
        }
    };
    let preallocated = header.preallocated;
    let trusted = trusted_index(fs, index_path, base, &image);
    if let (true, Some(index)) = (clean, &trusted) {
        return Ok(LastSegment {
            file,
            index: index.clone(),
            report,
            preallocated,
            index_on_disk: true,
        });
    }
    let (start_index, start) = match trusted {
        Some(mut index) => {
            let start = index.last_position();
            if let Some(last) = index.entries.last() {
                index.last_offset = base + i64::from(last.relative_offset) - 1;
            }
            (index, start)
        }
        None => {
            report.index_rebuilt = true;
            (SegmentIndex::empty(base), SEGMENT_HEADER_LEN as u64)
        }
    };
    let scan = scan_segment(&image, start_index, start, (interval, preallocated));
    let floor = durable_floor(fs, index_path, base);
    let keep = resolve_end(path, &scan, mode, (true, floor))?;
    let unconfirmed = confirm
        .zip(confirmation_floor(fs, index_path, base))
        .and_then(|(confirm, from)| {
            first_unconfirmed(&image, from, scan.index.segment_len, confirm)
        });
    drop(image);
    if let Some(at) = unconfirmed {
        tracing::warn!(path = %path.display(), position = at, "recovery: a batch past the durable floor is not the journal's (never acknowledged); cut");
        let cut_bytes = cut(&file, path, at, len, preallocated)?;
        drop(file);
        let mut last = open_last(place, capacity, false, None)?;
        last.report.truncated_bytes += cut_bytes;
        last.report.index_rebuilt |= report.index_rebuilt;
        return Ok(last);
    }
    if let Some(keep) = keep {
        report.truncated_bytes = cut(&file, path, keep, len, preallocated)?;
    }
    Ok(LastSegment {
        file,
        index: scan.index,
        report,
        preallocated,
        index_on_disk: false,
    })
}

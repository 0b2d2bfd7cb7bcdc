//! Opening segments at startup: validate or rebuild each index, scan the last segment from its
//! last index entry, cut a torn tail and report corruption with file and byte offset.

use std::path::Path;
use std::sync::Arc;

use super::header::{decode_segment_header, encode_segment_header, SEGMENT_HEADER_LEN};
use super::index::SegmentIndex;
use super::pin::PinCounter;
use super::reader::SealedSegment;
use super::scan::{index_matches, scan_segment, Scan, ScanEnd};
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
    let bytes = fs.read_file(index_path).ok()?;
    SegmentIndex::decode(&bytes)
        .ok()
        .filter(|i| i.base_offset == base && index_matches(image, i))
}

fn check_header(path: &Path, image: &[u8], base: i64) -> StoreResult<()> {
    let found = decode_segment_header(image).map_err(|e| StoreError::corrupt(path, 0, e))?;
    if found != base {
        return Err(StoreError::corrupt(
            path,
            16,
            crate::segment::DecodeError::invalid("base_offset", "differs from the file name"),
        ));
    }
    Ok(())
}

/// Decides what a scan that did not end cleanly means under `mode`: the length to keep, or an error.
fn resolve_end(
    path: &Path,
    scan: &Scan,
    mode: RecoveryMode,
    last: bool,
) -> StoreResult<Option<u64>> {
    match (&scan.end, mode) {
        (ScanEnd::Clean, _) => Ok(None),
        (ScanEnd::TornTail { position, .. }, RecoveryMode::TolerateTornTail) if last => {
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

/// Opens a sealed (not last) segment, validating its index against the file or rebuilding it.
/// The only cut (in `Salvage` mode) happens while the file is not mapped.
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
        let map = file.map().at(path)?;
        check_header(path, &map, base)?;
        if let Some(index) = trusted_index(fs, index_path, base, &map) {
            drop(map);
            return Ok((
                SealedSegment::map(path, &*file, index, pins.clone())?,
                report,
            ));
        }
        report.index_rebuilt = true;
        let scan = scan_segment(
            &map,
            SegmentIndex::empty(base),
            SEGMENT_HEADER_LEN as u64,
            interval,
        );
        drop(map);
        match resolve_end(path, &scan, mode, false)? {
            None => {
                write_file(fs, index_path, &scan.index.encode(), false)?;
                let segment = SealedSegment::map(path, &*file, scan.index, pins.clone())?;
                return Ok((segment, report));
            }
            Some(keep) => {
                drop(file);
                report.truncated_bytes += truncate(fs, path, keep)?;
            }
        }
    }
}

fn truncate(fs: &dyn FileSystem, path: &Path, keep: u64) -> StoreResult<u64> {
    let file = fs.open(path, OpenMode::ReadWrite).at(path)?;
    let len = file.len().at(path)?;
    file.set_len(keep).at(path)?;
    file.sync_all().at(path)?;
    Ok(len.saturating_sub(keep))
}

/// Opens the last segment of a partition for appending: scan from the last trusted index entry,
/// then cut a torn tail (per `mode`). The file is not mapped, so cutting it is safe.
pub fn open_last(place: SegmentPlace<'_>) -> StoreResult<(FileRef, SegmentIndex, SegmentRecovery)> {
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
    let len = file.len().at(path)?;
    let mut image = vec![0u8; len as usize];
    file.read_exact_at(&mut image, 0).at(path)?;

    if let Err(err) = check_header(path, &image, base) {
        // A header that never became durable: only acceptable when nothing valid follows it.
        let empty = SegmentIndex::empty(base);
        let holds_data = len > SEGMENT_HEADER_LEN as u64
            && !matches!(
                scan_segment(&image, empty, SEGMENT_HEADER_LEN as u64, interval).end,
                ScanEnd::TornTail { position, .. } if position == SEGMENT_HEADER_LEN as u64
            );
        if (holds_data && mode != RecoveryMode::Salvage)
            || mode == RecoveryMode::AbsoluteConsistency
        {
            return Err(err);
        }
        file.set_len(0).at(path)?;
        file.write_at(&encode_segment_header(base), 0).at(path)?;
        file.sync_all().at(path)?;
        report.truncated_bytes = len;
        report.index_rebuilt = true;
        return Ok((file, SegmentIndex::empty(base), report));
    }

    let (start_index, start) = match trusted_index(fs, index_path, base, &image) {
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
    let scan = scan_segment(&image, start_index, start, interval);
    if let Some(keep) = resolve_end(path, &scan, mode, true)? {
        file.set_len(keep).at(path)?;
        file.sync_all().at(path)?;
        report.truncated_bytes = len - keep;
    }
    Ok((file, scan.index, report))
}

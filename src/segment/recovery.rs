//! Opening segments at startup: validate or rebuild each index, scan the last segment from its
//! last index entry, cut a torn tail and report corruption with file and byte offset.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use memmap2::Mmap;

use super::header::{decode_segment_header, encode_segment_header, SEGMENT_HEADER_LEN};
use super::index::SegmentIndex;
use super::reader::SealedSegment;
use super::scan::{index_matches, scan_segment, Scan, ScanEnd};
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::write_file;

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
pub fn trusted_index(index_path: &Path, base: i64, image: &[u8]) -> Option<SegmentIndex> {
    let bytes = std::fs::read(index_path).ok()?;
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

/// Opens a sealed (not last) segment, validating its index against the file or rebuilding it.
pub fn open_sealed(
    path: &Path,
    index_path: &Path,
    base: i64,
    mode: RecoveryMode,
    interval: u64,
) -> StoreResult<(SealedSegment, SegmentRecovery)> {
    let mut report = SegmentRecovery::default();
    loop {
        let file = File::open(path).at(path)?;
        // SAFETY: a sealed segment is never written or truncated while mapped (see
        // `SealedSegment::map`); the only truncation below happens after this map is dropped.
        let map = unsafe { Mmap::map(&file) }.at(path)?;
        check_header(path, &map, base)?;
        if let Some(index) = trusted_index(index_path, base, &map) {
            drop(map);
            return Ok((SealedSegment::map(path, &file, index)?, report));
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
                write_file(index_path, &scan.index.encode(), false)?;
                return Ok((SealedSegment::map(path, &file, scan.index)?, report));
            }
            Some(keep) => {
                drop(file);
                report.truncated_bytes += truncate(path, keep)?;
            }
        }
    }
}

fn truncate(path: &Path, keep: u64) -> StoreResult<u64> {
    let file = OpenOptions::new().write(true).open(path).at(path)?;
    let len = file.metadata().at(path)?.len();
    file.set_len(keep).at(path)?;
    file.sync_all().at(path)?;
    Ok(len.saturating_sub(keep))
}

/// Opens the last segment of a partition for appending: scan from the last trusted index entry,
/// then cut a torn tail (per `mode`). The file is not mapped, so cutting it is safe.
pub fn open_last(
    path: &Path,
    index_path: &Path,
    base: i64,
    mode: RecoveryMode,
    interval: u64,
) -> StoreResult<(File, SegmentIndex, SegmentRecovery)> {
    let mut report = SegmentRecovery::default();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .at(path)?;
    let len = file.metadata().at(path)?.len();
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
        file.write_all_at(&encode_segment_header(base), 0)
            .at(path)?;
        file.sync_all().at(path)?;
        report.truncated_bytes = len;
        report.index_rebuilt = true;
        return Ok((file, SegmentIndex::empty(base), report));
    }

    let (start_index, start) = match trusted_index(index_path, base, &image) {
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

//! Reading one partition of a store that another process may hold open: no lock, no write, no
//! mapping. Segment files are read with `pread` through the file layer, because the writer may
//! trim, replace (compaction) or delete (retention) a file while it is read, and a mapped page
//! past a file's new end would fault. Each segment is read through one descriptor, so a file
//! replaced meanwhile is read whole in its old or its new form.
//!
//! The data of the partition's last segment ends at the first batch that is not complete and
//! intact: the writer may be in the middle of it. Records show once written, which can be before
//! they are durable (a power cut may still take them, and a failed append's batch can show
//! before the writer reuses its place); the batches of one append show together. In a sealed
//! segment, a damaged batch is reported with its file and byte offset.

use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use super::verify::segment_files;
use crate::error::{StoreError, StoreResult};
use crate::event_log::positions::{listed, replay, Committed};
use crate::event_log::{CommittedPosition, POSITIONS_LOG};
use crate::fs::{FileRef, FileSystem, OpenMode, RealFs};
use crate::segment::{
    decode_batch, decode_header, decode_segment_header_full, Record, BATCH_HEADER_LEN,
    BATCH_HEADER_LEN_V1, SEGMENT_HEADER_LEN,
};
use crate::store::manifest::Manifest;

/// One partition of a log, read without the store's lock.
#[derive(Debug, Clone)]
pub struct LivePartition {
    dir: PathBuf,
}

/// What a visitor of [`LivePartition::scan`] wants next.
pub type Visit = ControlFlow<()>;

impl LivePartition {
    /// The partition `partition` of log `log` in the store at `root`, as its MANIFEST names it.
    pub fn open(root: &Path, log: &str, partition: u32) -> StoreResult<Self> {
        let manifest = Manifest::load(&RealFs, root)?.ok_or_else(|| {
            StoreError::Invalid(format!(
                "{}: not a Strata store (no MANIFEST)",
                root.display()
            ))
        })?;
        let entry = manifest
            .get(log)
            .ok_or_else(|| StoreError::Invalid(format!("the store has no log {log:?}")))?;
        if partition >= entry.partitions {
            return Err(StoreError::Invalid(format!(
                "log {log:?} has {} partition(s), not {partition}",
                entry.partitions
            )));
        }
        let dir = root.join("logs").join(log).join(partition.to_string());
        Ok(Self { dir })
    }

    /// Visits, in order, the records at offsets `from..until` (`None`: to the end of the data)
    /// until `visit` breaks. Answers where a later scan goes on: one past the last record
    /// visited, or past the last whole append read when `visit` never broke.
    pub fn scan(
        &self,
        from: i64,
        until: Option<i64>,
        visit: &mut dyn FnMut(Record) -> StoreResult<Visit>,
    ) -> StoreResult<i64> {
        let segments = self.segments()?;
        if segments.is_empty() {
            return Ok(from);
        }
        let first = segments.iter().rposition(|(base, _)| *base <= from);
        let mut next = from;
        for (i, (base, path)) in segments.iter().enumerate().skip(first.unwrap_or(0)) {
            if until.is_some_and(|until| *base >= until) {
                break;
            }
            let last = i + 1 == segments.len();
            let range = (next, until.unwrap_or(i64::MAX));
            match read_segment(path, range, last, visit)? {
                (end, ControlFlow::Continue(())) => next = next.max(end),
                (end, ControlFlow::Break(())) => return Ok(end),
            }
        }
        Ok(until.map_or(next, |until| next.min(until)))
    }

    /// The partition's first offset held (its first segment's base) and one past its last
    /// record (read from its last segment alone); `(0, 0)` without segments.
    pub fn water_marks(&self) -> StoreResult<(i64, i64)> {
        let bases = self.segment_bases()?;
        let (Some(&low), Some(&last)) = (bases.first(), bases.last()) else {
            return Ok((0, 0));
        };
        let high = self.scan(last, None, &mut |_| Ok(Visit::Continue(())))?;
        Ok((low, high))
    }

    /// The base offsets of the partition's segments, in order.
    pub fn segment_bases(&self) -> StoreResult<Vec<i64>> {
        Ok(self.segments()?.into_iter().map(|(base, _)| base).collect())
    }

    /// The partition's segment files by base offset, in order (none before its directory is
    /// created).
    fn segments(&self) -> StoreResult<Vec<(i64, PathBuf)>> {
        match segment_files(&self.dir) {
            Err(_) if !self.dir.exists() => Ok(Vec::new()),
            listed => listed,
        }
    }
}

/// Reads the segment at `path`, visiting its records in `from..until`. Answers one past the
/// last record it read (or visited, when `visit` broke) and whether `visit` broke.
fn read_segment(
    path: &Path,
    (from, until): (i64, i64),
    last: bool,
    visit: &mut dyn FnMut(Record) -> StoreResult<Visit>,
) -> StoreResult<(i64, Visit)> {
    let file = match RealFs.open(path, OpenMode::Read) {
        Ok(file) => file,
        // Retention deleted it since the listing: its records are gone.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((from, Visit::Continue(()))),
        Err(e) => return Err(StoreError::io(path, e)),
    };
    let mut head = [0u8; SEGMENT_HEADER_LEN];
    if read_at(&file, path, &mut head, 0)? < SEGMENT_HEADER_LEN {
        return Ok((from, Visit::Continue(()))); // just created: nothing in it yet
    }
    match decode_segment_header_full(&head) {
        Ok(_) => {}
        // The writer may be creating it.
        Err(_) if last && head.iter().all(|b| *b == 0) => return Ok((from, Visit::Continue(()))),
        Err(e) => return Err(StoreError::corrupt(path, 0, e)),
    }
    let (mut pos, mut next) = (SEGMENT_HEADER_LEN as u64, from);
    let mut append: Vec<Record> = Vec::new();
    while let Some((len, continued, records)) = read_batch(&file, path, pos, last)? {
        pos += len;
        append.extend(records);
        if continued {
            continue;
        }
        for record in append.drain(..) {
            let offset = record.offset;
            if offset >= until {
                return Ok((next, Visit::Break(())));
            }
            if offset < from {
                continue;
            }
            next = offset + 1;
            if visit(record)?.is_break() {
                return Ok((next, Visit::Break(())));
            }
        }
    }
    Ok((next, Visit::Continue(())))
}

/// The batch at `pos` (its length, whether the append goes on in the next batch, its records),
/// or `None` at the end of the data: zeros or the file's end, or in the last segment any batch
/// not complete and intact. A damaged batch in a sealed segment is an error.
fn read_batch(
    file: &FileRef,
    path: &Path,
    pos: u64,
    last: bool,
) -> StoreResult<Option<(u64, bool, Vec<Record>)>> {
    let mut head = [0u8; BATCH_HEADER_LEN];
    let got = read_at(file, path, &mut head, pos)?;
    if got < BATCH_HEADER_LEN_V1 || head[..got].iter().all(|b| *b == 0) {
        return Ok(None);
    }
    let damaged = |e| match last {
        true => Ok(None),
        false => Err(StoreError::corrupt(path, pos, e)),
    };
    let header = match decode_header(&head[..got]) {
        Ok(header) => header,
        Err(e) => return damaged(e),
    };
    let mut batch = vec![0u8; header.len()];
    let got = read_at(file, path, &mut batch, pos)?;
    match decode_batch(&batch[..got]) {
        Ok((header, records)) => Ok(Some((header.len() as u64, header.continued, records))),
        Err(e) => damaged(e),
    }
}

/// Reads as much of `buf` as the file holds at `offset`; answers how much it read.
fn read_at(file: &FileRef, path: &Path, buf: &mut [u8], offset: u64) -> StoreResult<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(StoreError::io(path, e)),
        }
    }
    Ok(done)
}

/// The consumer positions committed in the store at `root` (its `__positions` log), read
/// without the store's lock like [`LivePartition`]: what `strata positions list` shows beside
/// the application that holds the store.
pub fn committed_positions(root: &Path) -> StoreResult<Vec<CommittedPosition>> {
    let manifest = Manifest::load(&RealFs, root)?;
    if manifest.is_none_or(|m| m.get(POSITIONS_LOG).is_none()) {
        return Ok(Vec::new());
    }
    let mut committed = Committed::new();
    LivePartition::open(root, POSITIONS_LOG, 0)?.scan(i64::MIN, None, &mut |record| {
        replay(&mut committed, &record.as_ref());
        Ok(Visit::Continue(()))
    })?;
    Ok(listed(&committed))
}

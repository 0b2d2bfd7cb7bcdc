//! A partition: an ordered list of sealed segments plus the active one, its water marks, its
//! writer (behind a lock, driven by the appending threads), and bounded reads across segments.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::append::PartitionWriter;
use super::journal_scan::JournalScan;
use super::options::LogOptions;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{remove_if_present, sync_dir, write_file, EntryKind, Fs};
use crate::segment::recovery::{open_last, open_sealed};
use crate::segment::writer::parse_file_name;
use crate::segment::{
    index_file_name, segment_file_name, ActiveSegment, BatchHeader, Confirm, PinCounter, ReadStop,
    Record, RecordRef, SealedSegment, SegmentPlace, SegmentRecovery, SegmentWriter, Visitor,
    SEGMENT_HEADER_LEN,
};

/// A page of records read from one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadPage {
    /// Records in offset order.
    pub records: Vec<Record>,
    /// Offset the next read should start from (past any compacted gap that was stepped over).
    pub next_offset: i64,
}

/// The segments readers see.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub sealed: Vec<Arc<SealedSegment>>,
    pub active: Arc<ActiveSegment>,
}

/// What recovery did to one partition at open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionRecovery {
    /// Partition number.
    pub partition: u32,
    /// Segments found.
    pub segments: usize,
    /// Bytes cut from segment tails.
    pub truncated_bytes: u64,
    /// Indexes rebuilt by scanning.
    pub indexes_rebuilt: usize,
}

/// The shared, read-mostly state of one partition.
#[derive(Debug)]
pub(crate) struct Partition {
    pub id: u32,
    pub dir: PathBuf,
    pub fs: Fs,
    /// Counts mappings of deleted segments that records still hold.
    pub pins: Arc<PinCounter>,
    /// Bytes a new segment is preallocated to (or more, for a bigger request).
    pub segment_bytes: u64,
    /// Index interval of new segments.
    pub interval: u64,
    view: RwLock<View>,
    high_water: AtomicI64,
    /// Serializes retention and compaction; holds the offset compaction has cleaned up to.
    pub maintenance: Mutex<i64>,
    /// The write side.
    pub writer: Mutex<PartitionWriter>,
}

/// Lists the base offsets of the segment files in `dir`, removing leftovers of interrupted work
/// (unfinished compaction outputs, indexes without a segment).
fn list_segments(fs: &dyn crate::fs::FileSystem, dir: &Path) -> StoreResult<Vec<i64>> {
    let mut bases = Vec::new();
    let mut indexes = Vec::new();
    let mut leftovers = Vec::new();
    for entry in fs.read_dir(dir).at(dir)? {
        if entry.kind != EntryKind::File {
            continue;
        }
        let name = entry.name.as_str();
        if name.ends_with(".tmp") {
            leftovers.push(dir.join(name));
        } else if let Some(base) = parse_file_name(name, ".seg") {
            bases.push(base);
        } else if let Some(base) = parse_file_name(name, ".idx") {
            indexes.push(base);
        }
    }
    bases.sort_unstable();
    for base in indexes {
        if bases.binary_search(&base).is_err() {
            leftovers.push(dir.join(index_file_name(base)));
        }
    }
    for path in &leftovers {
        remove_if_present(fs, path)?;
    }
    if !leftovers.is_empty() {
        sync_dir(fs, dir)?;
    }
    Ok(bases)
}

/// Refuses a segment whose base offset is not past the previous segment's last offset.
fn check_order(base: i64, previous_last: i64, path: &Path) -> StoreResult<()> {
    if base <= previous_last {
        return Err(StoreError::corrupt(
            path,
            0,
            crate::segment::DecodeError::invalid("base_offset", "overlaps the previous segment"),
        ));
    }
    Ok(())
}

impl Partition {
    /// Opens (or creates) partition `id` in the existing, durable directory `dir`, recovering
    /// its segments; the journal a journaled log left, if any, confirms the last segment's
    /// unsynced tail.
    pub fn open(
        fs: &Fs,
        (dir, id): (PathBuf, u32),
        options: &LogOptions,
        pins: &Arc<PinCounter>,
        (clean, journal): (bool, Option<&JournalScan>),
    ) -> StoreResult<(Self, PartitionRecovery)> {
        let mut bases = list_segments(&**fs, &dir)?;
        let interval = options.index_interval_bytes;
        let mut report = PartitionRecovery {
            partition: id,
            ..Default::default()
        };
        // A segment created just now holds nothing past its header: with its (empty) index
        // written, the open below trusts that index instead of scanning the preallocated tail.
        // The index needs no sync: a lost one only means a scan at the next open.
        let created = bases.is_empty();
        if created {
            let path = dir.join(segment_file_name(0));
            SegmentWriter::create(&**fs, &path, 0, (options.segment_bytes, interval), pins)?;
            let index = crate::segment::SegmentIndex::empty(0).encode();
            write_file(&**fs, &dir.join(index_file_name(0)), &index, false)?;
            sync_dir(&**fs, &dir)?;
            bases.push(0);
        }
        report.segments = bases.len();
        let mut note = |r: &SegmentRecovery| {
            report.truncated_bytes += r.truncated_bytes;
            report.indexes_rebuilt += usize::from(r.index_rebuilt);
        };
        fn place<'a>(
            fs: &'a Fs,
            (path, index_path, base): (&'a Path, &'a Path, i64),
            options: &LogOptions,
        ) -> SegmentPlace<'a> {
            SegmentPlace {
                fs: &**fs,
                path,
                index_path,
                base,
                mode: options.recovery,
                interval: options.index_interval_bytes,
            }
        }
        let mut sealed: Vec<Arc<SealedSegment>> = Vec::with_capacity(bases.len());
        let mut previous_last = -1i64;
        let (last_base, sealed_bases) = bases
            .split_last()
            .ok_or(StoreError::Invalid("no segment".into()))?;
        for &base in sealed_bases {
            let path = dir.join(segment_file_name(base));
            check_order(base, previous_last, &path)?;
            let index_path = dir.join(index_file_name(base));
            let (segment, r) = open_sealed(place(fs, (&path, &index_path, base), options), pins)?;
            note(&r);
            previous_last = segment.index().last_offset;
            sealed.push(Arc::new(segment));
        }
        let path = dir.join(segment_file_name(*last_base));
        check_order(*last_base, previous_last, &path)?;
        let index_path = dir.join(index_file_name(*last_base));
        let confirm = journal.map(|j| move |h: &BatchHeader, b: &[u8]| j.confirms(id, h, b));
        let last = open_last(
            place(fs, (&path, &index_path, *last_base), options),
            options.segment_bytes,
            clean || created,
            confirm.as_ref().map(|c| c as Confirm<'_>),
        )?;
        note(&last.report);
        let high_water = (last.index.last_offset + 1).max(*last_base);
        let active = if last.preallocated {
            let len = last.index.segment_len;
            let mut active = SegmentWriter::resume(
                &path,
                last.file,
                last.index,
                (options.segment_bytes, interval),
                pins,
            )?;
            if last.index_on_disk {
                active.mark_indexed(len);
            }
            active
        } else {
            // A version 1 segment takes no more appends: seal it, continue in a new one.
            let old = SealedSegment::map(&path, &*last.file, last.index.clone(), pins.clone())?;
            write_file(&**fs, &index_path, &last.index.encode(), false)?;
            let next_path = dir.join(segment_file_name(high_water));
            let fresh = if old.index().segment_len <= SEGMENT_HEADER_LEN as u64 {
                drop(old);
                SegmentWriter::recreate(
                    &**fs,
                    &path,
                    high_water,
                    (options.segment_bytes, interval),
                    pins,
                )?
            } else {
                sealed.push(Arc::new(old));
                let w = SegmentWriter::create(
                    &**fs,
                    &next_path,
                    high_water,
                    (options.segment_bytes, interval),
                    pins,
                )?;
                sync_dir(&**fs, &dir)?;
                w
            };
            fresh
        };
        let partition = Partition {
            id,
            dir,
            fs: fs.clone(),
            pins: pins.clone(),
            segment_bytes: options.segment_bytes,
            interval,
            view: RwLock::new(View {
                sealed,
                active: active.shared().clone(),
            }),
            high_water: AtomicI64::new(high_water),
            maintenance: Mutex::new(0),
            writer: Mutex::new(PartitionWriter::new(active, high_water)),
        };
        Ok((partition, report))
    }

    /// Syncs the active segment outside the partition's lock (see
    /// [`crate::segment::detached_sync`]); with `mark`, also records its durable length in its
    /// index (a checkpoint of this partition). False if there was nothing to sync.
    pub fn sync_active(&self, mark: bool) -> StoreResult<bool> {
        let job = {
            let mut w = self.lock_writer();
            w.heal(self)?;
            if w.active.unsynced() == 0 && (!mark || w.active.index_current()) {
                return Ok(false);
            }
            w.active.detach_sync(mark.then(|| self.fs.clone()))
        };
        let ran = job.run(self.id);
        let mut w = self.lock_writer();
        match ran {
            Ok(()) if w.active.detached(&job) => {
                w.active.mark_synced(job.len);
                if mark {
                    w.active.mark_indexed(job.len);
                }
            }
            Ok(()) => {}
            Err(e) => {
                if w.active.detached(&job) {
                    w.poisoned.get_or_insert_with(|| e.to_string());
                }
                return Err(e);
            }
        }
        Ok(true)
    }

    /// The write side, locked.
    pub fn lock_writer(&self) -> std::sync::MutexGuard<'_, PartitionWriter> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes to preallocate for a new segment that must take `needed` bytes of batches.
    pub fn segment_capacity(&self, needed: u64) -> u64 {
        self.segment_bytes.max(needed + SEGMENT_HEADER_LEN as u64)
    }

    /// A snapshot of the segment list.
    pub fn view(&self) -> View {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes the segment list.
    pub fn update_view<R>(&self, f: impl FnOnce(&mut View) -> R) -> R {
        f(&mut self.view.write().unwrap_or_else(|p| p.into_inner()))
    }

    /// One past the last readable offset.
    pub fn high_water_mark(&self) -> i64 {
        self.high_water.load(Ordering::Acquire)
    }

    /// Publishes a new high-water mark (after the active segment published its bytes).
    pub fn set_high_water_mark(&self, offset: i64) {
        self.high_water.fetch_max(offset, Ordering::AcqRel);
    }

    /// First retained offset: the base of the oldest segment.
    pub fn low_water_mark(&self) -> i64 {
        let view = self.view();
        let base = view
            .sealed
            .first()
            .map_or(view.active.base_offset(), |s| s.index().base_offset);
        base.min(self.high_water_mark())
    }

    /// Reads records with offsets in `[from, high-water mark)`, holding about `max_bytes` of batches.
    ///
    /// Always makes progress: `next_offset > from` unless `from` is at or past the high-water mark.
    pub fn read(&self, from: i64, max_bytes: usize) -> StoreResult<ReadPage> {
        let high_water = self.high_water_mark();
        let view = self.view();
        let mut records = Vec::new();
        let mut from = from.max(0);
        if from >= high_water {
            return Ok(ReadPage {
                records,
                next_offset: from,
            });
        }
        let mut budget = max_bytes.max(1);
        let first = view
            .sealed
            .partition_point(|s| s.index().last_offset < from);
        for segment in &view.sealed[first..] {
            from = from.max(segment.index().base_offset);
            match segment.read((from, high_water), &mut budget, &mut records)? {
                ReadStop::Budget(next) => {
                    return Ok(ReadPage {
                        records,
                        next_offset: next,
                    })
                }
                ReadStop::Bound => {
                    return Ok(ReadPage {
                        records,
                        next_offset: high_water,
                    })
                }
                ReadStop::EndOfSegment => from = from.max(segment.index().last_offset + 1),
            }
        }
        from = from.max(view.active.base_offset());
        let next_offset = match view
            .active
            .read((from, high_water), &mut budget, &mut records)?
        {
            ReadStop::Budget(next) => next,
            ReadStop::Bound | ReadStop::EndOfSegment => high_water,
        };
        Ok(ReadPage {
            records,
            next_offset,
        })
    }

    /// Calls `f` with every record in `[from, until)` (`until` at most the high-water mark).
    /// Returns the offset a following visit should start from.
    pub fn visit<E: From<StoreError>>(
        &self,
        from: i64,
        until: i64,
        f: &mut Visitor<'_, E>,
    ) -> Result<i64, E> {
        let until = until.min(self.high_water_mark());
        let view = self.view();
        let mut from = from.max(0);
        if from >= until {
            return Ok(from);
        }
        let first = view
            .sealed
            .partition_point(|s| s.index().last_offset < from);
        for segment in &view.sealed[first..] {
            from = from.max(segment.index().base_offset);
            if segment.visit((from, until), f)? == ReadStop::Bound {
                return Ok(until);
            }
            from = from.max(segment.index().last_offset + 1);
        }
        view.active
            .visit((from.max(view.active.base_offset()), until), f)?;
        Ok(until)
    }

    /// The first offset (in offset order, at or above the low-water mark) whose record's
    /// timestamp is at or after `timestamp`; `None` when no readable record has one. Sealed
    /// segments whose largest timestamp is below it are skipped whole, so a lookup reads at
    /// most the segment that holds the answer (and the active segment).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> StoreResult<Option<i64>> {
        let (low, high) = (self.low_water_mark(), self.high_water_mark());
        let view = self.view();
        let found = std::cell::Cell::new(None);
        let mut probe = |r: RecordRef<'_>| {
            if found.get().is_none() && r.timestamp >= timestamp {
                found.set(Some(r.offset));
            }
            Ok::<(), StoreError>(())
        };
        for segment in &view.sealed {
            let index = segment.index();
            if index.max_timestamp < timestamp || index.last_offset < low {
                continue;
            }
            segment.visit(
                (index.base_offset.max(low), high),
                &mut Visitor::Borrowed(&mut probe),
            )?;
            if found.get().is_some() {
                return Ok(found.get());
            }
        }
        let from = view.active.base_offset().max(low);
        view.active
            .visit((from, high), &mut Visitor::Borrowed(&mut probe))?;
        Ok(found.get())
    }
}

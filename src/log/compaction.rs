//! Keyed compaction (after Kafka's log cleaner).
//!
//! A pass seals the active segment, then builds a map from key to the offset of its latest
//! record over the *dirty* sealed segments (those past the offset the previous pass reached),
//! oldest first, until the map reaches its memory budget; the segments it read are the pass's
//! covered range. Every segment from the start of the partition to the end of the covered range
//! is then rewritten keeping: every unkeyed record; each keyed record whose key the map does not
//! know or whose offset is the map's latest for that key; and of those latest records a tombstone
//! only until its timestamp is older than the delete-retention period. Records whose key is
//! superseded only beyond the covered range are kept until a later pass covers it. When nothing
//! is dirty a pass starts over from the first segment.
//!
//! Offsets never change: removed records leave gaps. The covered segments are changed oldest
//! first, each change durable before the next begins: a rewritten segment is written under a
//! temporary name, synced, renamed over the old file and its directory synced (readers that
//! mapped the old file keep reading it); a segment left empty is unlinked and its directory
//! synced. So a tombstone is dropped (from a later segment) only once every older record of its
//! key is durably gone, and a pass that fails or is cut short by a crash never brings a deleted
//! key back.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::partition::Partition;
use super::retention::remove_segments;
use super::Log;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{remove_if_present, sync_dir, write_file};
use crate::segment::{
    batch_spans, decode_batch, encode_unsealed, index_file_name, segment_file_name, BatchHeader,
    Record, SealedSegment, SegmentWriter, SEGMENT_HEADER_LEN,
};

/// Encoded bytes per batch in a rewritten segment.
const REWRITE_BATCH_BYTES: usize = 256 << 10;
/// Memory the key map charges per entry on top of the key bytes.
const KEY_MAP_ENTRY_OVERHEAD: usize = 48;

/// What one compaction pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Segments rewritten with fewer records.
    pub segments_rewritten: usize,
    /// Segments deleted because nothing in them survived.
    pub segments_removed: usize,
    /// Records removed.
    pub records_removed: u64,
    /// Bytes of the segments the pass covered, before.
    pub bytes_before: u64,
    /// Bytes of those segments after.
    pub bytes_after: u64,
}

impl CompactionReport {
    /// Adds another report's counts to this one.
    pub fn add(&mut self, other: CompactionReport) {
        self.segments_rewritten += other.segments_rewritten;
        self.segments_removed += other.segments_removed;
        self.records_removed += other.records_removed;
        self.bytes_before += other.bytes_before;
        self.bytes_after += other.bytes_after;
    }
}

/// Calls `f` with the records of each batch of a sealed segment, in order.
pub(crate) fn for_each_batch(
    segment: &SealedSegment,
    mut f: impl FnMut(Vec<Record>) -> StoreResult<()>,
) -> StoreResult<()> {
    let bytes = segment.bytes();
    let mut pos = SEGMENT_HEADER_LEN;
    while pos < bytes.len() {
        let (header, records) = decode_batch(&bytes[pos..])
            .map_err(|e| StoreError::corrupt(segment.path(), pos as u64, e))?;
        f(records)?;
        pos += header.len();
    }
    Ok(())
}

impl Log {
    /// Compacts every partition (blocking; run it off the async executor).
    pub fn compact_blocking(&self, now_ms: i64) -> StoreResult<CompactionReport> {
        let _span = tracing::info_span!("strata.compaction", log = %self.inner.name).entered();
        let mut report = CompactionReport::default();
        for p in 0..self.partition_count() {
            report.add(self.compact_partition(p, now_ms)?);
        }
        tracing::debug!(?report, "compaction pass done");
        Ok(report)
    }

    /// Async form of [`Log::compact_blocking`].
    pub async fn compact(&self, now_ms: i64) -> StoreResult<CompactionReport> {
        let log = self.clone();
        tokio::task::spawn_blocking(move || log.compact_blocking(now_ms))
            .await
            .map_err(|e| StoreError::Invalid(format!("compaction task failed: {e}")))?
    }

    /// Share of a partition's bytes written since its last compaction pass.
    pub fn dirty_ratio(&self, partition: u32) -> StoreResult<f64> {
        let p = self.partition(partition)?;
        let clean_end = *p.maintenance.lock().unwrap_or_else(|e| e.into_inner());
        let view = p.view();
        let active = view
            .active
            .committed_len()
            .saturating_sub(SEGMENT_HEADER_LEN as u64);
        let mut total = active;
        let mut dirty = active;
        for s in &view.sealed {
            let len = s.index().segment_len;
            total += len;
            if s.index().last_offset >= clean_end {
                dirty += len;
            }
        }
        Ok(if total == 0 {
            0.0
        } else {
            dirty as f64 / total as f64
        })
    }

    /// Runs one compaction pass over `partition` as of `now_ms` (blocking).
    pub fn compact_partition(&self, partition: u32, now_ms: i64) -> StoreResult<CompactionReport> {
        self.check_removable("compaction")?;
        let p = self.partition(partition)?.clone();
        let mut clean_end = p.maintenance.lock().unwrap_or_else(|e| e.into_inner());
        self.roll_blocking(partition)?;
        let segments = p.view().sealed;
        let policy = self.inner.options.compaction;
        let dirty_start = segments
            .iter()
            .position(|s| s.index().last_offset >= *clean_end)
            .unwrap_or(0);
        let (latest, covered) = key_map(&segments, dirty_start, policy.max_key_map_bytes)?;
        let delete_before =
            now_ms.saturating_sub(policy.delete_retention.as_millis().min(i64::MAX as u128) as i64);
        let keep = |r: &Record| match &r.key {
            None => true,
            Some(key) => match latest.get(key) {
                Some(&newest) if newest != r.offset => false,
                _ => !(r.value.is_none() && r.timestamp < delete_before),
            },
        };
        let mut report = CompactionReport::default();
        // Oldest first, each change durable before the next (see the module docs).
        for segment in &segments[..covered] {
            report.add(self.clean_segment(&p, segment, &keep)?);
        }
        if let Some(last) = segments[..covered].last() {
            *clean_end = last.index().last_offset + 1;
        }
        Ok(report)
    }

    /// Removes the records `keep` refuses from one segment, durably: rewrites it, or deletes it
    /// when nothing survives.
    fn clean_segment(
        &self,
        p: &Partition,
        segment: &Arc<SealedSegment>,
        keep: &impl Fn(&Record) -> bool,
    ) -> StoreResult<CompactionReport> {
        let len = segment.index().segment_len;
        let mut report = CompactionReport {
            bytes_before: len,
            ..Default::default()
        };
        let mut kept = Vec::new();
        for_each_batch(segment, |records| {
            for r in records {
                if keep(&r) {
                    kept.push(r);
                } else {
                    report.records_removed += 1;
                }
            }
            Ok(())
        })?;
        if report.records_removed == 0 {
            report.bytes_after = len;
        } else if kept.is_empty() {
            report.segments_removed = 1;
            remove_segments(p, std::slice::from_ref(segment))?;
        } else {
            let rewritten = Arc::new(self.rewrite_segment(p, segment, &kept)?);
            report.bytes_after = rewritten.index().segment_len;
            report.segments_rewritten = 1;
            p.update_view(|view| {
                for s in view.sealed.iter_mut() {
                    if Arc::ptr_eq(s, segment) {
                        *s = rewritten.clone();
                    }
                }
            });
            segment.mark_deleted();
        }
        Ok(report)
    }

    /// Writes `kept` as a new file, syncs it, renames it over `segment`'s file and syncs the
    /// directory.
    fn rewrite_segment(
        &self,
        p: &Partition,
        segment: &SealedSegment,
        kept: &[Record],
    ) -> StoreResult<SealedSegment> {
        let fs = &*p.fs;
        let base = segment.index().base_offset;
        let path = p.dir.join(segment_file_name(base));
        let tmp = p.dir.join(format!("{}.tmp", segment_file_name(base)));
        let index_path = p.dir.join(index_file_name(base));
        let index_tmp = p.dir.join(format!("{}.tmp", index_file_name(base)));
        let compression = self.inner.options.compression;
        let mut batches: Vec<(Vec<u8>, BatchHeader)> = Vec::new();
        for batch in batch_spans(kept, REWRITE_BATCH_BYTES) {
            let mut bytes = Vec::new();
            let header = encode_unsealed(batch, compression, &mut bytes)?;
            batches.push((bytes, header));
        }
        let capacity =
            SEGMENT_HEADER_LEN as u64 + batches.iter().map(|(b, _)| b.len() as u64).sum::<u64>();
        let interval = self.inner.options.index_interval_bytes;
        let mut writer = SegmentWriter::create(fs, &tmp, base, (capacity, interval), &p.pins)?;
        for (mut bytes, mut header) in batches {
            writer.append(&mut bytes, &mut header)?;
        }
        writer.sync()?;
        let mut index = writer.shared().index();
        // Keep the summary of the original segment: its offsets end where they ended before.
        index.last_offset = segment.index().last_offset;
        write_file(fs, &index_tmp, &index.encode(), false)?;
        remove_if_present(fs, &index_path)?;
        fs.rename(&tmp, &path).at(&path)?;
        fs.rename(&index_tmp, &index_path).at(&index_path)?;
        sync_dir(fs, &p.dir)?;
        SealedSegment::map(&path, &**writer.file(), index, p.pins.clone())
    }
}

/// Maps each key of the dirty segments (from `dirty_start`, oldest first, until the map holds
/// `budget` bytes) to the offset of its latest record; returns the map and the end of the
/// covered range.
fn key_map(
    segments: &[Arc<SealedSegment>],
    dirty_start: usize,
    budget: usize,
) -> StoreResult<(HashMap<Bytes, i64>, usize)> {
    let mut latest: HashMap<Bytes, i64> = HashMap::new();
    let mut map_bytes = 0usize;
    let mut covered = dirty_start;
    for segment in &segments[dirty_start..] {
        for_each_batch(segment, |records| {
            for r in records {
                if let Some(key) = r.key {
                    let len = key.len();
                    if latest.insert(key, r.offset).is_none() {
                        map_bytes += len + KEY_MAP_ENTRY_OVERHEAD;
                    }
                }
            }
            Ok(())
        })?;
        covered += 1;
        if map_bytes >= budget {
            break;
        }
    }
    Ok((latest, covered))
}

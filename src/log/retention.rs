//! Retention: delete whole sealed segments, oldest first, by partition size and record age.
//! Deleting the oldest segment advances the partition's low-water mark to the next base offset.

use std::sync::Arc;

use super::partition::Partition;
use super::Log;
use crate::error::StoreResult;
use crate::fs::{remove_if_present, sync_dir};
use crate::segment::{index_file_name, segment_file_name, SealedSegment};

/// What one retention pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Segment files deleted.
    pub segments_deleted: usize,
    /// Bytes those files held.
    pub bytes_deleted: u64,
}

impl RetentionReport {
    /// Adds another report's counts to this one.
    pub fn add(&mut self, other: RetentionReport) {
        self.segments_deleted += other.segments_deleted;
        self.bytes_deleted += other.bytes_deleted;
    }
}

/// Deletes `doomed` segments (oldest first): unlinks their files and syncs the directory, and
/// only then drops them from the view (persist, then apply: the low-water mark never runs ahead
/// of the disk). Mapped readers keep an unlinked inode alive until they drop their mapping, so
/// this is safe while reads are in flight; what they pin is counted. After a failure the view
/// still lists the segments, and a later pass deletes them again.
pub(crate) fn remove_segments(
    partition: &Partition,
    doomed: &[Arc<SealedSegment>],
) -> StoreResult<()> {
    if doomed.is_empty() {
        return Ok(());
    }
    let fs = &*partition.fs;
    for segment in doomed {
        let base = segment.index().base_offset;
        for name in [segment_file_name(base), index_file_name(base)] {
            remove_if_present(fs, &partition.dir.join(name))?;
        }
    }
    sync_dir(fs, &partition.dir)?;
    partition.update_view(|view| {
        view.sealed
            .retain(|s| !doomed.iter().any(|d| Arc::ptr_eq(s, d)));
    });
    for segment in doomed {
        segment.mark_deleted();
    }
    Ok(())
}

/// Removes `doomed` (see [`remove_segments`]) and reports what that freed.
fn remove_counted(
    partition: &Partition,
    doomed: &[Arc<SealedSegment>],
) -> StoreResult<RetentionReport> {
    let report = RetentionReport {
        segments_deleted: doomed.len(),
        bytes_deleted: doomed.iter().map(|s| s.index().segment_len).sum(),
    };
    remove_segments(partition, doomed)?;
    if report.segments_deleted > 0 {
        tracing::info!(dir = %partition.dir.display(), segments = report.segments_deleted, bytes = report.bytes_deleted, "segments deleted");
    }
    Ok(report)
}

impl Log {
    /// Applies the retention policy to every partition, as of `now_ms`.
    pub fn apply_retention(&self, now_ms: i64) -> StoreResult<RetentionReport> {
        self.check_removable("retention")?;
        let _span = tracing::info_span!("strata.retention", log = %self.inner.name).entered();
        let mut report = RetentionReport::default();
        for partition in self.inner.partitions.iter() {
            report.add(self.retain_partition(partition, now_ms)?);
        }
        tracing::debug!(?report, "retention pass done");
        Ok(report)
    }

    pub(crate) fn retain_partition(
        &self,
        partition: &Partition,
        now_ms: i64,
    ) -> StoreResult<RetentionReport> {
        let policy = self.inner.options.retention;
        if policy.max_bytes.is_none() && policy.max_age.is_none() {
            return Ok(RetentionReport::default());
        }
        let _guard = partition
            .maintenance
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let view = partition.view();
        let mut size: u64 = view
            .sealed
            .iter()
            .map(|s| s.index().segment_len)
            .sum::<u64>()
            + view.active.committed_len();
        let oldest_kept = policy
            .max_age
            .map(|age| now_ms.saturating_sub(age.as_millis().min(i64::MAX as u128) as i64));
        let mut doomed = Vec::new();
        for segment in &view.sealed {
            let index = segment.index();
            let too_big = policy.max_bytes.is_some_and(|max| size > max);
            let too_old = oldest_kept.is_some_and(|oldest| index.max_timestamp < oldest);
            if !(too_big || too_old) {
                break;
            }
            size -= index.segment_len;
            doomed.push(segment.clone());
        }
        remove_counted(partition, &doomed)
    }
}

impl Log {
    /// Deletes the sealed segments of `partition` whose records all lie below `offset` (the
    /// owner of the data decided nothing there is referenced any more). The active segment is
    /// never deleted. While a [`super::DeletionHold`] is alive (a backup copying this log)
    /// nothing is deleted and the report is empty: the owner deletes them on a later call.
    pub fn delete_segments_before(
        &self,
        partition: u32,
        offset: i64,
    ) -> StoreResult<RetentionReport> {
        let partition = self.partition(partition)?;
        if self.deletions_held() {
            return Ok(RetentionReport::default());
        }
        let _guard = partition
            .maintenance
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let view = partition.view();
        let mut doomed = Vec::new();
        for (i, segment) in view.sealed.iter().enumerate() {
            let next_base = view
                .sealed
                .get(i + 1)
                .map_or(view.active.base_offset(), |s| s.index().base_offset);
            if next_base > offset {
                break;
            }
            doomed.push(segment.clone());
        }
        remove_counted(partition, &doomed)
    }
}

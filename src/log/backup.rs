//! Copying a log while it serves writes (the log's part of `Store::backup`).
//!
//! Each partition is copied as one snapshot of its segment list saw it: every sealed segment's
//! data and the active segment's published prefix, read through their mappings. The snapshot's
//! `Arc`s keep each mapping (and an unlinked file's blocks) alive, so retention or compaction
//! running meanwhile cannot take bytes from under the copy, and appends after the snapshot are
//! simply not in it. The copies hold no index files (the restored store rebuilds and checks
//! them by scanning, CRC by CRC) and no journal (every published byte is in the segments).

use std::path::Path;

use super::Log;
use crate::error::StoreResult;
use crate::fs::{create_dir_durable, sync_dir, write_file, CopyReport, FileSystem};
use crate::segment::segment_file_name;

/// Keeps [`Log::delete_segments_before`] from deleting anything until dropped (a backup that
/// must find every segment its group's state referenced when the hold began).
pub type DeletionHold = crate::hold::Hold;

impl Log {
    /// Holds the owner's segment deletions ([`Log::delete_segments_before`] deletes nothing
    /// and reports so) until the guard drops.
    pub fn hold_deletions(&self) -> DeletionHold {
        self.inner.deletion_holds.hold()
    }

    /// True while a [`DeletionHold`] is alive.
    pub(crate) fn deletions_held(&self) -> bool {
        self.inner.deletion_holds.held()
    }

    /// Writes every partition's segments, as of one snapshot per partition, into `dest` (the
    /// copy's log directory, created here), each file synced and each directory synced after
    /// its entries.
    pub(crate) fn copy_segments(
        &self,
        fs: &dyn FileSystem,
        dest: &Path,
    ) -> StoreResult<CopyReport> {
        create_dir_durable(fs, dest)?;
        let mut report = CopyReport::default();
        for partition in self.inner.partitions.iter() {
            let dir = dest.join(partition.id.to_string());
            create_dir_durable(fs, &dir)?;
            let view = partition.view();
            for sealed in &view.sealed {
                let name = segment_file_name(sealed.index().base_offset);
                write_file(fs, &dir.join(name), sealed.bytes(), true)?;
                report.add(CopyReport {
                    files: 1,
                    bytes: sealed.bytes().len() as u64,
                });
            }
            let active = view.active.committed_bytes();
            let name = segment_file_name(view.active.base_offset());
            write_file(fs, &dir.join(name), &active, true)?;
            report.add(CopyReport {
                files: 1,
                bytes: active.len() as u64,
            });
            sync_dir(fs, &dir)?;
        }
        sync_dir(fs, dest)?;
        Ok(report)
    }
}

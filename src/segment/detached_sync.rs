//! Syncing an active segment without holding its partition's lock.
//!
//! A buffered log's periodic sync, and a journaled log's checkpoint, fdatasync tens of
//! megabytes of a segment; holding the partition's lock meanwhile would stall every append to
//! it for as long. So the writer only notes, under the lock, how long the segment is
//! ([`super::SegmentWriter::detach_sync`]), and the sync runs unlocked, through the segment's
//! [`SyncGate`] (one sync at a time, a failure remembered until the writer heals it); the writer
//! learns what it made durable afterwards ([`super::SegmentWriter::mark_synced`]). A roll marks
//! the gate sealed while it writes the sealed segment's index, so an unlocked checkpoint that
//! finishes late does not write its older index over it.

use std::path::PathBuf;

use super::index::SegmentIndex;
use super::writer::index_file_name;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{write_file_atomic, FileRef, Fs, SyncGate};

/// A sync of a segment's first `len` bytes, to run without the partition's lock.
#[derive(Debug)]
pub struct DetachedSync {
    pub(super) gate: SyncGate,
    pub(super) file: FileRef,
    pub(super) path: PathBuf,
    /// Data length the sync makes durable.
    pub len: u64,
    /// The segment's index at `len`, to record (atomically) as its durable floor once synced.
    pub(super) index: Option<(Fs, SegmentIndex)>,
}

impl DetachedSync {
    /// Syncs the file (and writes the index, if one was asked for). Refuses while an earlier
    /// sync's failure is unhealed (the writer of `partition` heals it); a no-op once the segment
    /// was sealed (the roll synced it).
    pub fn run(&self, partition: u32) -> StoreResult<()> {
        let mut gate = self.gate.lock();
        if gate.sealed {
            return Ok(());
        }
        if let Some(reason) = gate.failure() {
            return Err(StoreError::Poisoned {
                partition,
                reason: format!("{}: {reason}", self.path.display()),
            });
        }
        if let Err(e) = self.file.sync_data().at(&self.path) {
            gate.fail(e.to_string());
            return Err(e);
        }
        let Some((fs, index)) = &self.index else {
            return Ok(());
        };
        let dir = self.path.parent().unwrap_or(std::path::Path::new("."));
        let path = dir.join(index_file_name(index.base_offset));
        write_file_atomic(&**fs, &path, &index.encode())
    }
}

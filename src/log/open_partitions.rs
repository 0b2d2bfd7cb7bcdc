//! Opening many partitions of a log at once: a new partition's first segment and its directory
//! entry are synced, and an existing one's recovery reads its files; done one after another, a
//! log of a thousand partitions (or the ranges of groups created one by one) waits on a
//! thousand such syncs in turn. Up to [`OPENERS`] threads open partitions side by side, so
//! the file system commits the syncs that wait at the same time together. The threads live
//! only while the partitions open.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::journal_scan::JournalScan;
use super::options::LogOptions;
use super::partition::{Partition, PartitionRecovery};
use crate::error::{StoreError, StoreResult};
use crate::fs::{create_dirs_durable, Fs};
use crate::segment::PinCounter;

/// Threads opening partitions at once (the caller's among them).
pub const OPENERS: usize = 8;

/// What opening one partition gave.
type Opened = StoreResult<(Partition, PartitionRecovery)>;

/// Opens partitions `ids` of the log in the existing, durable directory `dir`: first every
/// partition's directory missing there, with one sync of `dir` for all of them, then each
/// partition as [`Partition::open`] does with `recovered`. Returns them in id order, or the
/// error of the lowest id that failed.
pub(crate) fn open_partitions(
    fs: &Fs,
    dir: &Path,
    ids: Range<u32>,
    options: &LogOptions,
    recovered: (bool, Option<&JournalScan>),
) -> StoreResult<Vec<(Partition, PartitionRecovery)>> {
    let dirs: Vec<PathBuf> = ids.clone().map(|id| dir.join(id.to_string())).collect();
    create_dirs_durable(&**fs, dir, &dirs)?;
    let count = ids.len();
    let slots: Vec<Mutex<Option<Opened>>> = (0..count).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= count {
            return;
        }
        let id = ids.start + i as u32;
        let pins = Arc::new(PinCounter::default());
        let place = (dirs[i].clone(), id);
        let opened = Partition::open(fs, place, options, &pins, recovered);
        *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(opened);
    };
    let threads = count.min(OPENERS);
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
    }
    slots
        .into_iter()
        .map(|slot| {
            let opened = slot.into_inner().unwrap_or_else(|p| p.into_inner());
            opened.unwrap_or_else(|| Err(StoreError::Invalid("a partition was not opened".into())))
        })
        .collect()
}

//! Replaying the journal at open (format/JOURNAL.md, "Recovery").
//!
//! The journal files are read first ([`super::journal_scan`]), then the partitions are
//! recovered (each segment cut at its own torn tail, and a last segment's unsynced tail cut
//! where the journal does not hold it byte for byte). Then each frame's batch is applied to its
//! partition if the partition lost it and skipped if the partition has it (recovery confirmed
//! those bytes are the frame's), and a frame that would leave a gap is corruption. The batches
//! of one append (continued runs) are applied all or none. Then each partition's segment is
//! synced and its durable floor recorded (a checkpoint), and only then are the journal files
//! deleted, so the log opens with an empty journal.

use std::path::Path;
use std::sync::Arc;

use super::journal_scan::{FrameAt, JournalScan};
use super::partition::Partition;
use crate::error::{StoreError, StoreResult};
use crate::fs::{remove_if_present, sync_dir, FileSystem};
use crate::segment::{DecodeError, RecoveryMode};

/// What a replay found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Journal files read.
    pub files: u64,
    /// Frames read.
    pub frames: u64,
    /// Batches the partitions had lost and got back.
    pub applied: u64,
}

/// Applies the frames `scan` read to `partitions`, checkpoints them (when the scan found
/// journal files, or with `checkpoint`: a journaled log opened after a crash, whose segments'
/// floors must cover everything they hold before a new journal starts) and deletes the journal
/// files in `dir`.
pub(crate) fn replay(
    fs: &dyn FileSystem,
    (dir, scan): (&Path, &JournalScan),
    partitions: &[Arc<Partition>],
    (mode, checkpoint): (RecoveryMode, bool),
) -> StoreResult<ReplayReport> {
    let mut report = ReplayReport {
        files: scan.paths.len() as u64,
        frames: scan.frames(),
        applied: 0,
    };
    let mut held: Vec<Vec<(&Path, &[u8], FrameAt)>> =
        partitions.iter().map(|_| Vec::new()).collect();
    for file in &scan.files {
        for frame in &file.frames {
            let Some(partition) = partitions.get(frame.partition as usize) else {
                let why = DecodeError::invalid("partition", "out of range");
                return Err(corrupt(&file.path, frame.position, why));
            };
            let run = &mut held[frame.partition as usize];
            run.push((&file.path, file.batch(frame), *frame));
            if !frame.header.continued {
                for (path, batch, frame) in run.drain(..) {
                    report.applied += u64::from(apply(partition, (path, batch, &frame), mode)?);
                }
            }
        }
    }
    // Appends whose last batch never made it are not applied at all.
    for p in partitions {
        let holds_data = !p.lock_writer().active.is_empty();
        if (checkpoint || !scan.is_empty()) && holds_data {
            p.sync_active(true)?;
        } else {
            p.lock_writer().sync()?;
        }
    }
    for path in &scan.paths {
        remove_if_present(fs, path)?;
    }
    if !scan.is_empty() {
        sync_dir(fs, dir)?;
    }
    Ok(report)
}

fn corrupt(path: &Path, position: usize, e: DecodeError) -> StoreError {
    StoreError::corrupt(path, position as u64, e)
}

/// Applies one journaled batch to its partition; false when the partition already had it (or,
/// salvaging, when it would leave a gap: the frames before it were lost).
fn apply(
    p: &Partition,
    (path, batch, frame): (&Path, &[u8], &FrameAt),
    mode: RecoveryMode,
) -> StoreResult<bool> {
    let mut header = frame.header;
    let mut writer = p.lock_writer();
    let next = writer.next_offset;
    if header.last_offset() < next {
        return Ok(false);
    }
    if header.base_offset != next {
        let why = DecodeError::invalid("base_offset", "leaves a gap after the partition's end");
        if mode == RecoveryMode::Salvage {
            tracing::warn!(path = %path.display(), position = frame.position, partition = p.id, "salvage: a journal frame after lost ones is dropped");
            return Ok(false);
        }
        return Err(corrupt(path, frame.position, why));
    }
    let mut bytes = batch.to_vec();
    writer.make_room(p, bytes.len() as u64)?;
    writer.write(&mut bytes, &mut header)?;
    writer.publish(p);
    Ok(true)
}

//! Replaying the journal at open (format/JOURNAL.md, "Recovery").
//!
//! Partitions are recovered first (each segment cut at its own torn tail). Then every journal
//! file left, oldest first, is scanned: its torn tail is found by the same rule as a segment's
//! (a frame written after the hole was synced means damage, otherwise the rest was never synced).
//! Each frame's batch is applied to its partition if the partition lost it, skipped if the
//! partition has it, and a frame that would leave a gap is corruption. The batches of one append
//! (continued runs) are applied all or none. Then the partitions are synced and the journal
//! files deleted, so the log opens with an empty journal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::journal::{decode_frame, decode_journal_header, FRAME_HEADER_LEN, JOURNAL_HEADER_LEN};
use super::partition::Partition;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{remove_if_present, sync_dir, EntryKind, FileSystem, OpenMode};
use crate::segment::{check_batch, nonzero_end, BatchHeader, DecodeError};

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

/// A batch waiting for the rest of its append (its `continued` run), with where it came from.
struct Held {
    bytes: Vec<u8>,
    header: BatchHeader,
    file: PathBuf,
    position: u64,
}

/// Journal files of `dir` by sequence (leftover temporary files removed).
fn journal_files(fs: &dyn FileSystem, dir: &Path) -> StoreResult<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    if fs.kind(dir).at(dir)? != Some(EntryKind::Dir) {
        return Ok(files);
    }
    for entry in fs.read_dir(dir).at(dir)? {
        let path = dir.join(&entry.name);
        if entry.name.ends_with(".tmp") {
            remove_if_present(fs, &path)?;
        } else if let Some(seq) = entry
            .name
            .strip_suffix(".jnl")
            .and_then(|s| s.parse::<u64>().ok())
        {
            files.push((seq, path));
        }
    }
    files.sort();
    Ok(files)
}

/// Replays the journal in `dir` into `partitions`, syncs them and deletes the journal files.
/// Returns the sequence the next journal file takes, and what was done.
pub(crate) fn replay(
    fs: &dyn FileSystem,
    dir: &Path,
    partitions: &[Arc<Partition>],
) -> StoreResult<(u64, ReplayReport)> {
    let files = journal_files(fs, dir)?;
    let mut report = ReplayReport::default();
    let mut held: Vec<Vec<Held>> = partitions.iter().map(|_| Vec::new()).collect();
    for (seq, path) in &files {
        report.files += 1;
        replay_file(fs, path, *seq, partitions, &mut held, &mut report)?;
    }
    // Appends whose last batch never made it are not applied at all.
    for p in partitions {
        p.lock_writer().sync()?;
    }
    for (_, path) in &files {
        remove_if_present(fs, path)?;
    }
    if !files.is_empty() {
        sync_dir(fs, dir)?;
    }
    let next = files.last().map_or(0, |(seq, _)| seq + 1);
    Ok((next, report))
}

fn replay_file(
    fs: &dyn FileSystem,
    path: &Path,
    seq: u64,
    partitions: &[Arc<Partition>],
    held: &mut [Vec<Held>],
    report: &mut ReplayReport,
) -> StoreResult<()> {
    let file = fs.open(path, OpenMode::Read).at(path)?;
    let image = file.map().at(path)?;
    let end = nonzero_end(&image);
    match decode_journal_header(&image) {
        Ok(found) if found == seq => {}
        // A recycled file caught between its rename and its new header, either of which may be
        // the one that became durable (a header's sequence is under its CRC, so nothing else
        // makes the two differ). No frame of the new sequence is written before both are,
        // and the frames of the old one were all covered by the checkpoint that let the file
        // be recycled (format/JOURNAL.md, "Recycled files"): nothing in it is needed.
        Ok(_) => return Ok(()),
        // A file whose header never became durable held nothing acknowledged.
        Err(_) if end <= JOURNAL_HEADER_LEN || !frame_after(&image, 0, seq, None) => return Ok(()),
        Err(e) => return Err(corrupt(path, 0, e)),
    }
    let mut pos = JOURNAL_HEADER_LEN;
    while pos < end {
        let frame = match decode_frame(&image[pos..], seq) {
            Ok(frame) => frame,
            Err(e) if frame_after(&image[..end], pos, seq, Some(pos as u64)) => {
                return Err(corrupt(path, pos as u64, e));
            }
            Err(_) => break,
        };
        report.frames += 1;
        let batch = &image[pos + FRAME_HEADER_LEN..pos + frame.len];
        let partition = partitions.get(frame.partition as usize).ok_or_else(|| {
            corrupt(
                path,
                pos as u64,
                DecodeError::invalid("partition", "out of range"),
            )
        })?;
        let header = check_batch(batch).map_err(|e| corrupt(path, pos as u64, e))?;
        let entry = Held {
            bytes: batch.to_vec(),
            header,
            file: path.to_path_buf(),
            position: pos as u64,
        };
        let run = &mut held[frame.partition as usize];
        run.push(entry);
        if !header.continued {
            for h in run.drain(..) {
                report.applied += u64::from(apply(partition, h)?);
            }
        }
        pos += frame.len;
    }
    Ok(())
}

/// True when a valid frame of file `seq` starts after `position` (and, with `synced_past`, was
/// written once `synced_past` had been synced).
fn frame_after(image: &[u8], position: usize, seq: u64, synced_past: Option<u64>) -> bool {
    (position + 1..image.len()).any(|p| {
        image[p..].len() > FRAME_HEADER_LEN
            && decode_frame(&image[p..], seq)
                .is_ok_and(|f| synced_past.is_none_or(|at| f.synced_len > at))
    })
}

fn corrupt(path: &Path, position: u64, e: DecodeError) -> StoreError {
    StoreError::corrupt(path, position, e)
}

/// Applies one journaled batch to its partition; false when the partition already had it.
fn apply(p: &Partition, mut h: Held) -> StoreResult<bool> {
    let mut writer = p.lock_writer();
    let next = writer.next_offset;
    if h.header.last_offset() < next {
        return Ok(false);
    }
    if h.header.base_offset != next {
        let why = DecodeError::invalid("base_offset", "leaves a gap after the partition's end");
        return Err(corrupt(&h.file, h.position, why));
    }
    writer.make_room(p, h.bytes.len() as u64)?;
    writer.write(&mut h.bytes, &mut h.header)?;
    writer.publish(p);
    Ok(true)
}

//! Reading the journal files a log left, before anything is applied (format/JOURNAL.md,
//! "Recovery"): each file's frames, checked and cut at its end as the log's [`RecoveryMode`]
//! says, kept mapped so that partition recovery can confirm a segment's unsynced tail against
//! them and replay can apply them.
//!
//! A file's frames end at its zero tail, at a stale frame (one of an older sequence, left in a
//! recycled file), or at the first frame that does not decode. There a valid frame of this file
//! further on whose `synced_len` passes the position means the bytes had been durable: damage,
//! refused in every mode but `Salvage`, which goes on from that frame. Otherwise the rest was
//! never synced: a torn tail, cut, except under `AbsoluteConsistency`, which refuses it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::journal::{decode_frame, decode_journal_header, FRAME_HEADER_LEN, JOURNAL_HEADER_LEN};
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{remove_if_present, EntryKind, FileSystem, OpenMode};
use crate::segment::{check_batch, nonzero_end, BatchHeader, DecodeError, RecoveryMode};

/// One valid frame of a journal file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameAt {
    /// Byte position of the frame in its file.
    pub position: usize,
    /// Partition its batch belongs to.
    pub partition: u32,
    /// Its batch's header (checked).
    pub header: BatchHeader,
}

impl FrameAt {
    /// Where the frame's batch lies in its file.
    fn batch(&self) -> std::ops::Range<usize> {
        let start = self.position + FRAME_HEADER_LEN;
        start..start + self.header.batch_len as usize
    }
}

/// One journal file's valid frames.
#[derive(Debug)]
pub(crate) struct JournalImage {
    pub path: PathBuf,
    image: Bytes,
    pub frames: Vec<FrameAt>,
}

impl JournalImage {
    /// The batch bytes of `frame` (one of this file's).
    pub fn batch(&self, frame: &FrameAt) -> &[u8] {
        &self.image[frame.batch()]
    }
}

/// Every journal file of a log, read.
#[derive(Debug, Default)]
pub(crate) struct JournalScan {
    /// Files with frames to replay, oldest first.
    pub files: Vec<JournalImage>,
    /// Every journal file found (replayed or not): deleted once the replay is durable.
    pub paths: Vec<PathBuf>,
    /// The sequence the next journal file takes.
    pub next_seq: u64,
    /// (partition, base offset) -> (file, frame) of every frame.
    by_batch: HashMap<(u32, i64), (usize, usize)>,
}

impl JournalScan {
    /// Reads the journal files in `dir` (leftover temporary files removed), as `mode` says.
    pub fn read(fs: &dyn FileSystem, dir: &Path, mode: RecoveryMode) -> StoreResult<Self> {
        let mut scan = JournalScan::default();
        for (seq, path) in journal_files(fs, dir)? {
            scan.next_seq = seq + 1;
            scan.paths.push(path.clone());
            let Some(file) = read_file(fs, &path, seq, mode)? else {
                continue;
            };
            let f = scan.files.len();
            for (i, frame) in file.frames.iter().enumerate() {
                scan.by_batch
                    .insert((frame.partition, frame.header.base_offset), (f, i));
            }
            scan.files.push(file);
        }
        Ok(scan)
    }

    /// True when no journal file was found (the log closed cleanly, or never had a journal).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Whether the journal holds exactly `batch` (whose header is `header`) for `partition`.
    pub fn confirms(&self, partition: u32, header: &BatchHeader, batch: &[u8]) -> bool {
        self.by_batch
            .get(&(partition, header.base_offset))
            .is_some_and(|&(f, i)| {
                let file = &self.files[f];
                file.batch(&file.frames[i]) == batch
            })
    }

    /// Frames read.
    pub fn frames(&self) -> u64 {
        self.files.iter().map(|f| f.frames.len() as u64).sum()
    }
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

/// Reads journal file `seq` at `path`; `None` when it holds nothing to replay.
fn read_file(
    fs: &dyn FileSystem,
    path: &Path,
    seq: u64,
    mode: RecoveryMode,
) -> StoreResult<Option<JournalImage>> {
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
        Ok(_) => return Ok(None),
        // A file whose header never became durable held nothing acknowledged: a torn file.
        Err(e) if end <= JOURNAL_HEADER_LEN || !frame_after((&image, end), 0, seq, None) => {
            return match mode {
                RecoveryMode::AbsoluteConsistency if end > 0 => Err(corrupt(path, 0, e)),
                _ => Ok(None),
            };
        }
        Err(e) if mode == RecoveryMode::Salvage => {
            tracing::warn!(path = %path.display(), error = %e, "salvage: a journal file's header is damaged; reading its frames");
        }
        Err(e) => return Err(corrupt(path, 0, e)),
    }
    let frames = read_frames(path, (&image, end), seq, mode)?;
    Ok(Some(JournalImage {
        path: path.to_path_buf(),
        image,
        frames,
    }))
}

/// The valid frames of `image` (a journal file; `end` is one past its last non-zero byte: a
/// frame may end in zeros past it, but none starts there).
fn read_frames(
    path: &Path,
    (image, end): (&[u8], usize),
    seq: u64,
    mode: RecoveryMode,
) -> StoreResult<Vec<FrameAt>> {
    let mut frames = Vec::new();
    let mut pos = JOURNAL_HEADER_LEN;
    while pos < end {
        let (error, whole) = match frame_at(&image[pos..], seq) {
            Ok((len, partition, header)) => {
                frames.push(FrameAt {
                    position: pos,
                    partition,
                    header,
                });
                pos += len;
                continue;
            }
            Err(failed) => failed,
        };
        if !whole && stale_frame(&image[pos..], seq) {
            break;
        }
        let damaged = whole || frame_after((image, end), pos, seq, Some(pos as u64));
        // Zeros (the space prepared ahead, or a recycled file's block ends) are a clean end;
        // anything else, or a frame of this file after them, is a frame cut short.
        let torn =
            !damaged && (!zero_head(&image[pos..end]) || frame_after((image, end), pos, seq, None));
        match (damaged, torn, mode) {
            (true, _, RecoveryMode::Salvage) => {
                let next = next_frame((image, end), pos, seq);
                tracing::warn!(path = %path.display(), position = pos, next, error = %error, "salvage: skipped damaged journal bytes");
                pos = next;
            }
            (true, _, _) | (_, true, RecoveryMode::AbsoluteConsistency) => {
                return Err(corrupt(path, pos as u64, error))
            }
            _ => break,
        }
    }
    Ok(frames)
}

/// The frame at the start of `buf` (of file `seq`): its length, partition and checked batch
/// header; or why not, and whether the frame itself was whole (its CRC holds, so its bytes are
/// as written: a batch in it that does not check is damage, never a torn tail).
fn frame_at(buf: &[u8], seq: u64) -> Result<(usize, u32, BatchHeader), (DecodeError, bool)> {
    let frame = decode_frame(buf, seq).map_err(|e| (e, false))?;
    let header = check_batch(&buf[FRAME_HEADER_LEN..frame.len]).map_err(|e| (e, true))?;
    if header.len() + FRAME_HEADER_LEN != frame.len {
        let why = DecodeError::invalid("frame_len", "differs from its batch's length");
        return Err((why, true));
    }
    Ok((frame.len, frame.partition, header))
}

/// True when `buf` starts with a whole, valid frame of an older journal file (left in a
/// recycled file after this file's frames): the end of this file's frames, never damage.
fn stale_frame(buf: &[u8], seq: u64) -> bool {
    if buf.len() < FRAME_HEADER_LEN {
        return false;
    }
    let mut found = [0u8; 8];
    found.copy_from_slice(&buf[8..16]);
    let other = u64::from_le_bytes(found);
    other < seq && decode_frame(buf, other).is_ok()
}

/// True when the frame header at the start of `buf` (or what is left of one) is all zeros.
fn zero_head(buf: &[u8]) -> bool {
    buf.iter().take(FRAME_HEADER_LEN).all(|&b| b == 0)
}

/// True when a valid frame of file `seq` starts after `position` and before `end` (and, with
/// `synced_past`, was written once `synced_past` had been synced). Frames are decoded from the
/// whole image: one may end in zero bytes past `end`.
fn frame_after(
    (image, end): (&[u8], usize),
    position: usize,
    seq: u64,
    synced_past: Option<u64>,
) -> bool {
    (position + 1..end).any(|p| {
        image[p..].len() > FRAME_HEADER_LEN
            && decode_frame(&image[p..], seq)
                .is_ok_and(|f| synced_past.is_none_or(|at| f.synced_len > at))
    })
}

/// The position of the first valid frame of file `seq` after `position` and before `end`
/// (`end` if none).
fn next_frame((image, end): (&[u8], usize), position: usize, seq: u64) -> usize {
    (position + 1..end)
        .find(|&p| image[p..].len() > FRAME_HEADER_LEN && decode_frame(&image[p..], seq).is_ok())
        .unwrap_or(end)
}

fn corrupt(path: &Path, position: u64, e: DecodeError) -> StoreError {
    StoreError::corrupt(path, position, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::RealFs;
    use crate::log::journal::{encode_frame_header, encode_journal_header, journal_file_name};
    use crate::segment::{encode_unsealed, seal_batch, Compression, Record};

    /// A sealed batch of one record at `offset` whose value ends in zero bytes.
    fn batch(offset: i64, fill: u8) -> Vec<u8> {
        let mut value = vec![fill; 40];
        value.extend_from_slice(&[0u8; 24]);
        let record = Record {
            offset,
            timestamp: 1,
            key: None,
            value: Some(Bytes::from(value)),
        };
        let mut out = Vec::new();
        let mut header = encode_unsealed(&[record], Compression::None, &mut out).unwrap();
        seal_batch(&mut out, &mut header, offset, 0);
        out
    }

    /// Journal file 0 holding frames of `batches` (partition 0), then `tail`, then zeros.
    fn journal(dir: &Path, batches: &[Vec<u8>], tail: &[u8]) -> PathBuf {
        let mut bytes = encode_journal_header(0).to_vec();
        for b in batches {
            bytes.extend_from_slice(&encode_frame_header(0, 0, 32, b));
            bytes.extend_from_slice(b);
        }
        bytes.extend_from_slice(tail);
        bytes.resize(bytes.len() + 4096, 0);
        let path = dir.join(journal_file_name(0));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn frames_ending_in_zeros_are_read_and_confirm_their_batches() {
        let dir = tempfile::tempdir().unwrap();
        let batches = [batch(0, 1), batch(1, 2)];
        journal(dir.path(), &batches, &[]);
        let scan = JournalScan::read(&RealFs, dir.path(), RecoveryMode::TolerateTornTail).unwrap();
        assert_eq!((scan.frames(), scan.next_seq), (2, 1));
        let header = check_batch(&batches[1]).unwrap();
        assert!(scan.confirms(0, &header, &batches[1]));
        assert!(
            !scan.confirms(0, &header, &batch(1, 3)),
            "other bytes at that offset"
        );
        assert!(!scan.confirms(1, &header, &batches[1]), "another partition");
    }

    #[test]
    fn each_recovery_mode_means_for_the_journal_what_it_means_for_segments() {
        let dir = tempfile::tempdir().unwrap();
        let torn = &batch(2, 9)[..30];
        journal(dir.path(), &[batch(0, 1), batch(1, 2)], torn);
        let read = |mode| JournalScan::read(&RealFs, dir.path(), mode);
        assert_eq!(read(RecoveryMode::TolerateTornTail).unwrap().frames(), 2);
        assert!(
            matches!(
                read(RecoveryMode::AbsoluteConsistency),
                Err(StoreError::Corrupt { .. })
            ),
            "a torn journal tail is refused under absolute consistency"
        );
        // Damage before a frame written once it was synced: corrupt, except when salvaging.
        let later = batch(2, 3);
        let mut damaged_first = batch(0, 1);
        damaged_first[60] ^= 0xff;
        let mut bytes = encode_journal_header(0).to_vec();
        bytes.extend_from_slice(&encode_frame_header(0, 0, 32, &damaged_first));
        bytes.extend_from_slice(&damaged_first);
        let synced = bytes.len() as u64;
        bytes.extend_from_slice(&encode_frame_header(0, 0, synced, &later));
        bytes.extend_from_slice(&later);
        bytes.resize(bytes.len() + 4096, 0);
        std::fs::write(dir.path().join(journal_file_name(0)), bytes).unwrap();
        assert!(matches!(
            read(RecoveryMode::TolerateTornTail),
            Err(StoreError::Corrupt { offset: 32, .. })
        ));
        let salvaged = read(RecoveryMode::Salvage).unwrap();
        assert_eq!(
            salvaged.frames(),
            1,
            "salvage goes on past the damaged frame"
        );
        assert_eq!(salvaged.files[0].frames[0].header.base_offset, 2);
    }
}

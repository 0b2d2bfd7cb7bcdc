//! The journal of a log with `Durability::Sync` (format/JOURNAL.md).
//!
//! Every batch a request writes into a partition's active segment is also copied, framed with
//! its partition, into the log's one journal file; a group-commit round then makes the whole
//! log durable with one fdatasync of that file, however many partitions the round touched.
//! Segment files are synced only when sealed and at checkpoints, which let older journal files
//! go. At open, the frames of the journal files left are replayed into partitions that lost
//! them, then the partitions are synced and a fresh journal file starts.
//!
//! Journal files are preallocated and written through a writable mapping, like segments.

use std::path::{Path, PathBuf};

use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{remove_if_present, sync_dir, FileRef, FileSystem, Fs, MapRef, OpenMode};
use crate::segment::DecodeError;

/// Magic bytes at the start of a journal file.
pub const JOURNAL_MAGIC: [u8; 8] = *b"STRATJNL";
/// Journal file format version written by this build.
pub const JOURNAL_FORMAT_VERSION: u32 = 1;
/// Length of the journal file header.
pub const JOURNAL_HEADER_LEN: usize = 32;
/// Length of a frame header.
pub const FRAME_HEADER_LEN: usize = 32;

/// File name of journal file `seq`.
pub fn journal_file_name(seq: u64) -> String {
    format!("{seq:020}.jnl")
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Encodes the header of journal file `seq`.
pub fn encode_journal_header(seq: u64) -> [u8; JOURNAL_HEADER_LEN] {
    let mut out = [0u8; JOURNAL_HEADER_LEN];
    out[0..8].copy_from_slice(&JOURNAL_MAGIC);
    out[8..12].copy_from_slice(&JOURNAL_FORMAT_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&out[0..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a journal file header; returns its sequence number.
pub fn decode_journal_header(buf: &[u8]) -> Result<u64, DecodeError> {
    if buf.len() < JOURNAL_HEADER_LEN {
        return Err(DecodeError::Truncated {
            needed: JOURNAL_HEADER_LEN,
            available: buf.len(),
        });
    }
    if buf[0..8] != JOURNAL_MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let (stored, computed) = (u32_at(buf, 24), crc32fast::hash(&buf[0..24]));
    if stored != computed {
        return Err(DecodeError::CrcMismatch { stored, computed });
    }
    let version = u32_at(buf, 8);
    if version != JOURNAL_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    if buf[12..16] != [0; 4] || buf[28..32] != [0; 4] {
        return Err(DecodeError::invalid(
            "journal header",
            "reserved bytes not zero",
        ));
    }
    Ok(u64_at(buf, 16))
}

/// A decoded frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Total length, header included.
    pub len: usize,
    /// Partition the batch belongs to.
    pub partition: u32,
    /// Length of the journal file the last completed sync had made durable when it was written.
    pub synced_len: u64,
}

/// Encodes the header of a frame holding `batch` (a sealed segment batch) of `partition`, in
/// journal file `seq`, written when `synced_len` bytes of that file were durable.
pub fn encode_frame_header(
    seq: u64,
    partition: u32,
    synced_len: u64,
    batch: &[u8],
) -> [u8; FRAME_HEADER_LEN] {
    let mut out = [0u8; FRAME_HEADER_LEN];
    let len = (FRAME_HEADER_LEN + batch.len()) as u32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..20].copy_from_slice(&partition.to_le_bytes());
    out[24..32].copy_from_slice(&synced_len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out[8..]);
    crc.update(batch);
    out[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    out
}

/// Decodes the frame at the start of `buf`, which must belong to journal file `seq` (a frame of
/// another sequence is stale: the end of this file's frames).
pub fn decode_frame(buf: &[u8], seq: u64) -> Result<Frame, DecodeError> {
    if buf.len() < FRAME_HEADER_LEN {
        return Err(DecodeError::Truncated {
            needed: FRAME_HEADER_LEN,
            available: buf.len(),
        });
    }
    let len = u32_at(buf, 0) as usize;
    if len <= FRAME_HEADER_LEN || len > buf.len() {
        return Err(DecodeError::invalid("frame_len", "out of range"));
    }
    if u64_at(buf, 8) != seq {
        return Err(DecodeError::invalid("file_seq", "of another journal file"));
    }
    if buf[20..24] != [0; 4] {
        return Err(DecodeError::invalid(
            "frame header",
            "reserved bytes not zero",
        ));
    }
    let (stored, computed) = (u32_at(buf, 4), crc32fast::hash(&buf[8..len]));
    if stored != computed {
        return Err(DecodeError::CrcMismatch { stored, computed });
    }
    Ok(Frame {
        len,
        partition: u32_at(buf, 16),
        synced_len: u64_at(buf, 24),
    })
}

/// The journal file being written.
#[derive(Debug)]
pub(crate) struct JournalFile {
    pub seq: u64,
    pub path: PathBuf,
    pub file: FileRef,
    pub map: MapRef,
    /// End of the frames written.
    pub len: u64,
    /// Length of the file: its blocks are allocated.
    pub allocated: u64,
    /// Length the last completed sync made durable.
    pub synced: u64,
    /// Journal position (bytes written over all files) of this file's first frame.
    pub base_lsn: u64,
}

impl JournalFile {
    /// Creates journal file `seq` in `dir`, preallocated to `capacity`, header synced, directory
    /// synced.
    pub fn create(
        fs: &dyn FileSystem,
        dir: &Path,
        seq: u64,
        capacity: u64,
        base_lsn: u64,
    ) -> StoreResult<Self> {
        let path = dir.join(journal_file_name(seq));
        remove_if_present(fs, &path)?;
        let file = fs.open(&path, OpenMode::CreateNew).at(&path)?;
        let first = capacity.min(crate::segment::writer::ALLOCATION_CHUNK);
        let made = file
            .write_at(&encode_journal_header(seq), 0)
            .and_then(|()| file.allocate(first))
            .and_then(|()| file.sync_data())
            .at(&path)
            .and_then(|()| sync_dir(fs, dir));
        if let Err(e) = made {
            let _ = fs.remove_file(&path);
            return Err(e);
        }
        let map = file.map_writable(capacity).at(&path)?;
        let header = JOURNAL_HEADER_LEN as u64;
        Ok(Self {
            seq,
            path,
            file,
            map,
            len: header,
            allocated: first,
            synced: header,
            base_lsn,
        })
    }

    /// Journal position after the last frame written.
    pub fn lsn(&self) -> u64 {
        self.base_lsn + self.len
    }

    /// Bytes left.
    pub fn remaining(&self) -> u64 {
        self.map.len() as u64 - self.len
    }

    /// Copies a frame of `batch` (a sealed batch of `partition`) after the last one.
    pub fn append(&mut self, partition: u32, batch: &[u8]) -> StoreResult<()> {
        let end = self.len + (FRAME_HEADER_LEN + batch.len()) as u64;
        if end > self.allocated {
            let chunk = crate::segment::writer::ALLOCATION_CHUNK;
            let target = end.max(self.allocated + chunk).min(self.map.len() as u64);
            self.file.allocate(target).at(&self.path)?;
            self.allocated = target;
        }
        let header = encode_frame_header(self.seq, partition, self.synced, batch);
        let at = self.len as usize;
        self.map.write(at, &header).at(&self.path)?;
        self.map
            .write(at + FRAME_HEADER_LEN, batch)
            .at(&self.path)?;
        self.len += (FRAME_HEADER_LEN + batch.len()) as u64;
        Ok(())
    }

    /// Zeroes the frames written after `len` (a failed request's), so nothing stale follows.
    pub fn rollback(&mut self, len: u64) -> StoreResult<()> {
        assert!(len >= self.synced, "a rollback never cuts synced frames");
        if len < self.len {
            let zeros = vec![0u8; (self.len - len) as usize];
            self.map.write(len as usize, &zeros).at(&self.path)?;
            self.len = len;
        }
        Ok(())
    }

    /// After a failed sync: writes the unsynced frames again and syncs them.
    pub fn resync(&mut self) -> StoreResult<()> {
        let unsynced = self
            .map
            .view(self.len as usize)
            .slice(self.synced as usize..);
        let copy = unsynced.to_vec();
        drop(unsynced);
        self.map.write(self.synced as usize, &copy).at(&self.path)?;
        self.file.sync_data().at(&self.path)?;
        self.synced = self.len;
        Ok(())
    }
}

/// The journal of a log: the file being written, and older files that may go once a checkpoint
/// covers them.
#[derive(Debug)]
pub(crate) struct Journal {
    pub fs: Fs,
    pub dir: PathBuf,
    /// Bytes each journal file is preallocated to.
    pub capacity: u64,
    pub current: JournalFile,
    /// Replaced files with the journal position their frames end at.
    pub retired: Vec<(u64, PathBuf)>,
    /// Why the last sync failed; writes are refused until a re-sync succeeds.
    pub poisoned: Option<String>,
}

impl Journal {
    /// Makes room for `bytes` of frames in the current file, starting the next file when they
    /// do not fit (the current one is synced first: a request never spans files).
    pub fn make_room(&mut self, bytes: u64) -> StoreResult<()> {
        if bytes <= self.current.remaining() {
            return Ok(());
        }
        self.current.file.sync_data().at(&self.current.path)?;
        self.current.synced = self.current.len;
        let capacity = self.capacity.max(bytes + JOURNAL_HEADER_LEN as u64);
        let next = JournalFile::create(
            &*self.fs,
            &self.dir,
            self.current.seq + 1,
            capacity,
            self.current.lsn(),
        )?;
        let old = std::mem::replace(&mut self.current, next);
        self.retired.push((old.lsn(), old.path));
        Ok(())
    }

    /// Makes the journal writable again after a failed sync.
    pub fn heal(&mut self) -> StoreResult<()> {
        let Some(reason) = &self.poisoned else {
            return Ok(());
        };
        let reason = reason.clone();
        self.current.resync().map_err(|e| StoreError::Poisoned {
            partition: u32::MAX,
            reason: format!("journal: {reason}; retry: {e}"),
        })?;
        self.poisoned = None;
        Ok(())
    }

    /// Deletes the current file too (after a clean close's checkpoint nothing in it is needed;
    /// the next open starts a fresh file).
    pub fn retire_current(&mut self) -> StoreResult<()> {
        let end = self.current.lsn();
        self.retired.push((end, self.current.path.clone()));
        self.drop_retired(end)
    }

    /// Deletes (durably) the retired files whose frames all lie before `lsn`.
    pub fn drop_retired(&mut self, lsn: u64) -> StoreResult<()> {
        let (gone, kept): (Vec<_>, Vec<_>) =
            self.retired.drain(..).partition(|(end, _)| *end <= lsn);
        self.retired = kept;
        for (_, path) in &gone {
            remove_if_present(&*self.fs, path)?;
        }
        if !gone.is_empty() {
            sync_dir(&*self.fs, &self.dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_damage_and_stale_files() {
        let batch = b"a sealed batch would be here".to_vec();
        let header = encode_frame_header(7, 3, 4096, &batch);
        let mut frame = header.to_vec();
        frame.extend_from_slice(&batch);
        assert_eq!(
            decode_frame(&frame, 7),
            Ok(Frame {
                len: frame.len(),
                partition: 3,
                synced_len: 4096
            })
        );
        assert!(
            decode_frame(&frame, 8).is_err(),
            "a stale frame of another file"
        );
        for i in 0..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 0x10;
            assert!(decode_frame(&bad, 7).is_err(), "flip at {i}");
        }
        assert!(decode_frame(&[0u8; 64], 0).is_err(), "zeros never decode");
        assert_eq!(decode_journal_header(&encode_journal_header(9)), Ok(9));
    }
}

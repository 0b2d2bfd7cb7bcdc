//! The journal of a log with `Durability::Sync` (format/JOURNAL.md).
//!
//! Every batch a request writes into a partition's active segment is also copied, framed with
//! its partition, into the log's one journal file; a group-commit round then makes the whole
//! log durable with one fdatasync of that file, however many partitions the round touched.
//! Segment files are synced only when sealed and at checkpoints, which let older journal files
//! go. At open, the frames of the journal files left are replayed into partitions that lost
//! them, then the partitions are synced and a fresh journal file starts.
//!
//! An appender adds its frames to the journal's buffer in memory; a round's leader takes them
//! as whole blocks (under the journal's lock; [`super::journal_blocks`]), then writes them with
//! one direct-I/O `pwrite` and fdatasyncs, outside the lock but in the file's [`SyncGate`]
//! (taken before the lock is let go, so a file switch or the next round never overtakes it): a
//! round costs two system calls however many appends ride along. Frames land in space zeroed
//! and synced ahead of the writer (a chunk at a time, by the group-commit leader after its
//! round, or inline when the writer outruns it): a round's fdatasync then overwrites written
//! blocks and need not also commit file-system metadata. Not through a mapping, unlike
//! segments: every round syncs the pages writers are filling at that moment, and writing back a
//! mapped page first write-protects it, with a cross-CPU TLB shootdown per page per round.

use std::path::{Path, PathBuf};

use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{
    remove_if_present, sync_dir, FileHandle, FileRef, FileSystem, Fs, GateState, OpenMode, SyncGate,
};
use crate::segment::{body_crc, BodyCrc, DecodeError};

use super::journal_blocks::{block_end, block_start, zeros, Pending, Stage, BLOCK};

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
    frame_header_with_body(seq, partition, synced_len, batch, body_crc(batch).as_ref())
}

/// [`encode_frame_header`] with the batch's [`BodyCrc`], if sealing hashed one: the frame's
/// CRC then reads only the batch's first 8 bytes again.
fn frame_header_with_body(
    seq: u64,
    partition: u32,
    synced_len: u64,
    batch: &[u8],
    body: Option<&BodyCrc>,
) -> [u8; FRAME_HEADER_LEN] {
    let mut out = [0u8; FRAME_HEADER_LEN];
    let len = (FRAME_HEADER_LEN + batch.len()) as u32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..20].copy_from_slice(&partition.to_le_bytes());
    out[24..32].copy_from_slice(&synced_len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out[8..]);
    // `body` covers `batch[8..]` (sealing hashed it for this batch; `append` checks in debug).
    match (body, batch.split_at_checked(8)) {
        (Some(body), Some((lead, _))) => {
            crc.update(lead);
            crc.combine(body);
        }
        _ => crc.update(batch),
    }
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

/// Bytes of a journal file of `capacity` bytes zeroed (written and synced) ahead of the writer
/// at a time, for a log whose journal has taken `lsn` bytes in all: as many as it has taken
/// (space ahead grows with what the log writes, so an idle or new log holds little), from
/// 16 KiB up to a quarter of the file and 1 MiB, in whole blocks.
pub fn prepare_chunk(capacity: u64, lsn: u64) -> u64 {
    let most = (capacity / 4).clamp(16 << 10, 1 << 20);
    block_end(lsn.clamp(16 << 10, most))
}

/// Bytes a preparation allocates past a piece's end for a log whose journal has taken `lsn`
/// bytes: as many as it has taken, at most [`ALLOCATE_AHEAD`].
fn allocate_ahead(lsn: u64) -> u64 {
    lsn.min(ALLOCATE_AHEAD)
}

/// A journal file's first block: its header, then zeros (written whole, so that every later
/// write, zeros or frames, starts on a block).
fn header_block(seq: u64) -> Vec<u8> {
    let mut block = encode_journal_header(seq).to_vec();
    block.resize(BLOCK as usize, 0);
    block
}

/// The journal file being written.
#[derive(Debug)]
pub(crate) struct JournalFile {
    pub seq: u64,
    pub path: PathBuf,
    /// The handle frames are written through (whole blocks, with direct I/O where the file
    /// system allows it) and synced through.
    pub file: FileRef,
    /// Bytes the file may hold (whole blocks).
    pub capacity: u64,
    /// The file's bytes from the block holding the durable end to the last frame; those from
    /// `flushed` on are not yet handed to the file.
    pending: Pending,
    /// End of the frames written to the file.
    pub flushed: u64,
    /// Every sync of the frames passes through it.
    pub gate: SyncGate,
    /// The file's second direct handle: the zeros written ahead. Its syncs run beside the
    /// rounds' (never holding them up); being another open file description, a write-back
    /// error it sees is still reported to the rounds' handle, so it never hides a lost frame
    /// from them. Zeros written through the page cache left pages that a round's direct write
    /// had to drop and a round's fdatasync had to wait for while they were written back (a
    /// fresh store's command now and then took ~2 ms); written directly, the file has no
    /// cached pages past its header block.
    zeroing: FileRef,
    /// End of the frames written.
    pub len: u64,
    /// Bytes of the file written (with zeros, ahead of the frames) and synced: frames are only
    /// written below this. Overwriting written blocks lets a round's fdatasync skip the
    /// file-system metadata that writing into merely allocated (unwritten) blocks needs, which
    /// costs about as much again as the data.
    pub prepared: u64,
    /// Length the last completed sync made durable.
    pub synced: u64,
    /// Journal position (bytes written over all files) of this file's first frame.
    pub base_lsn: u64,
}

/// A range of a journal file to zero and sync, outside the journal's lock.
#[derive(Debug)]
pub(crate) struct Preparation {
    seq: u64,
    path: PathBuf,
    /// The file's second handle (see [`JournalFile::zeroing`]).
    file: FileRef,
    from: u64,
    to: u64,
    /// The file's capacity: blocks are allocated ahead up to it.
    capacity: u64,
    /// Bytes allocated past a piece's end ([`allocate_ahead`]).
    ahead: u64,
}

/// Bytes of zeros a preparation writes between two syncs: a round's fdatasync that reaches the
/// device meanwhile waits behind at most this much (a chunk of 1 MiB written and synced at once
/// held a command's sync up to ~1-3 ms; in 256 KiB pieces, a probe of 600 frames of 37 KB each
/// synced, with a chunk prepared beside them, measured mean 149 against 206 us, p99 1.4 against
/// 2.9 ms).
const PREPARE_SYNC_PIECE: u64 = 256 << 10;

/// Most bytes past a piece's end its preparation allocates at once (to the file's capacity at
/// most; a log that has written less allocates as much as it wrote). Allocated 256 KiB at a time, with each piece, every piece dirtied allocation metadata
/// that a round's fdatasync beside it wrote too, block by block, before its own flush (156
/// fresh-store commands: 24 waits in `fsync_buffers_list`, none allocated 16 MiB ahead; probe
/// p90 304-417 us against 228-276).
const ALLOCATE_AHEAD: u64 = 16 << 20;

impl Preparation {
    /// Writes zeros over the range and syncs them, piece by piece (see [`Self::run_piece`]);
    /// an empty range is synced too (a new file's header block relies on it).
    pub fn run(&self) -> StoreResult<()> {
        if self.from >= self.to {
            return self.file.sync_data().at(&self.path);
        }
        let mut at = self.from;
        while at < self.to {
            at = self.run_piece(at)?;
        }
        Ok(())
    }

    /// Writes zeros from `at` (a piece's start in the range) over at most
    /// [`PREPARE_SYNC_PIECE`] bytes and syncs them; returns where the piece ended (space below
    /// it is prepared). Whole blocks from aligned memory: the handle writes directly.
    pub fn run_piece(&self, at: u64) -> StoreResult<u64> {
        debug_assert!(self.from <= at && at < self.to);
        assert!(
            at.is_multiple_of(BLOCK) && self.to.is_multiple_of(BLOCK),
            "preparations are whole blocks"
        );
        let zeros = zeros();
        let end = (at + PREPARE_SYNC_PIECE).min(self.to);
        self.allocate_to(end)?;
        let mut written = at;
        while written < end {
            let n = (end - written).min(zeros.len() as u64);
            self.file
                .write_at(&zeros[..n as usize], written)
                .at(&self.path)?;
            written += n;
        }
        self.file.sync_data().at(&self.path)?;
        Ok(end)
    }

    /// Allocates the file's blocks to [`allocate_ahead`] past `end` (the capacity at most) and
    /// extends it there (unless it reaches `end` already), so the zeros written next neither
    /// extend the file nor allocate: ext4 then takes the file's lock shared for them, as for the
    /// rounds' writes, instead of exclusive for as long as the device takes to write them (a
    /// round's direct write waited up to ~2 ms behind one). The piece's sync makes the length
    /// and blocks durable with the zeros.
    fn allocate_to(&self, end: u64) -> StoreResult<()> {
        if self.file.len().at(&self.path)? >= end {
            return Ok(());
        }
        let ahead = (end + self.ahead).min(self.capacity).max(end);
        self.file
            .reserve(ahead)
            .and_then(|_reserved_or_not| self.file.set_len(ahead))
            .at(&self.path)
    }

    /// Where the range starts.
    pub fn from(&self) -> u64 {
        self.from
    }

    /// True when space prepared up to `end` covers the whole range.
    pub fn covers(&self, end: u64) -> bool {
        end >= self.to
    }
}

impl JournalFile {
    /// Creates journal file `seq` in `dir`, `capacity` bytes at most, with its header block
    /// and first chunk written and synced, and the directory synced.
    pub fn create(
        fs: &dyn FileSystem,
        dir: &Path,
        seq: u64,
        capacity: u64,
        base_lsn: u64,
    ) -> StoreResult<Self> {
        let path = dir.join(journal_file_name(seq));
        remove_if_present(fs, &path)?;
        let capacity = block_end(capacity);
        let created = fs.open(&path, OpenMode::CreateNew).at(&path)?;
        let made = created
            .write_at(&header_block(seq), 0)
            .and_then(|()| fs.open(&path, OpenMode::WriteDirect))
            .at(&path)
            .and_then(|zeroing| {
                let first = Preparation {
                    seq,
                    path: path.clone(),
                    file: zeroing.clone(),
                    from: BLOCK,
                    to: capacity.min(prepare_chunk(capacity, base_lsn)),
                    capacity,
                    ahead: allocate_ahead(base_lsn),
                };
                first.run()?;
                sync_dir(fs, dir)?;
                let file = fs.open(&path, OpenMode::WriteDirect).at(&path)?;
                Ok((file, zeroing, first.to))
            });
        let (file, zeroing, prepared) = match made {
            Ok(made) => made,
            Err(e) => {
                // Best effort: a leftover is replaced by the next attempt.
                if let Err(left) = fs.remove_file(&path) {
                    tracing::warn!(path = %path.display(), error = %left, "could not remove a journal file a failed creation left");
                }
                return Err(e);
            }
        };
        Ok(Self::opened(
            seq,
            path,
            (file, zeroing),
            capacity,
            prepared,
            base_lsn,
        ))
    }

    /// Makes `spare`, a file every frame of which a checkpoint has covered, journal file `seq`:
    /// renames it, writes and syncs the new header over the old one, then syncs the directory.
    /// No frame is written before all three, and the old frames that follow carry an older
    /// sequence, so replay reads none of them; the blocks the old file wrote are reused as
    /// they are, so no zeros are written and nothing is unlinked (format/JOURNAL.md,
    /// "Recycled files"). Only the header's 32 bytes are written: they lie in the file's first
    /// sector, which a power cut keeps old or new as a whole, so the old frame that shares the
    /// sector is either intact (under the old header) or stale (under the new one), never
    /// torn. On failure the spare is given up: renamed, it is replaced by the next file's
    /// creation; under its old name, it waits for the next open, whose replay finds its frames
    /// covered and deletes it with the other journal files.
    pub fn recycle(
        fs: &dyn FileSystem,
        dir: &Path,
        spare: &Path,
        seq: u64,
        (capacity, base_lsn): (u64, u64),
    ) -> StoreResult<Self> {
        let path = dir.join(journal_file_name(seq));
        let capacity = block_end(capacity);
        fs.rename(spare, &path).at(spare)?;
        let reopened = fs.open(&path, OpenMode::ReadWrite).at(&path)?;
        reopened
            .write_at(&encode_journal_header(seq), 0)
            .at(&path)?;
        reopened.sync_data().at(&path)?;
        sync_dir(fs, dir)?;
        // Every byte below the old file's length was written (zeros or frames) and synced, or
        // (a preparation cut short by the switch) allocated and reading as zeros, which frames
        // may overwrite too; frames are written in whole blocks, so only its whole blocks count.
        let written = reopened.len().at(&path)?;
        let zeroing = fs.open(&path, OpenMode::WriteDirect).at(&path)?;
        let file = fs.open(&path, OpenMode::WriteDirect).at(&path)?;
        let prepared = block_start(written).clamp(BLOCK, capacity);
        Ok(Self::opened(
            seq,
            path,
            (file, zeroing),
            capacity,
            prepared,
            base_lsn,
        ))
    }

    /// A journal file whose header is durable and whose first `prepared` bytes are written and
    /// synced, with no frame yet.
    fn opened(
        seq: u64,
        path: PathBuf,
        (file, zeroing): (FileRef, FileRef),
        capacity: u64,
        prepared: u64,
        base_lsn: u64,
    ) -> Self {
        let header = JOURNAL_HEADER_LEN as u64;
        Self {
            seq,
            path,
            file,
            capacity,
            pending: Pending::new(&encode_journal_header(seq)),
            flushed: header,
            gate: SyncGate::default(),
            zeroing,
            len: header,
            prepared,
            synced: header,
            base_lsn,
        }
    }

    /// Journal position after the last frame written.
    pub fn lsn(&self) -> u64 {
        self.base_lsn + self.len
    }

    /// Bytes left.
    pub fn remaining(&self) -> u64 {
        self.capacity - self.len
    }

    /// The next range to prepare, so that at least `bytes` more (and a chunk more) can be
    /// written; `None` when the file is prepared that far already or full.
    fn next_preparation(&self, bytes: u64) -> Option<Preparation> {
        let capacity = self.capacity;
        let lsn = self.lsn();
        let want = (self.len + bytes).max(self.prepared + prepare_chunk(capacity, lsn));
        let to = block_end(want).min(capacity);
        (to > self.prepared).then(|| Preparation {
            seq: self.seq,
            path: self.path.clone(),
            file: self.zeroing.clone(),
            from: self.prepared,
            to,
            capacity,
            ahead: allocate_ahead(lsn),
        })
    }

    /// Adds a frame of `batch` (a sealed batch of `partition`, whose [`BodyCrc`] sealing
    /// returned) after the last one, in memory; the next round's leader writes it to the file
    /// (the caller made room: [`Journal::make_room`]).
    pub fn append(&mut self, partition: u32, batch: &[u8], body: Option<&BodyCrc>) {
        let end = self.len + (FRAME_HEADER_LEN + batch.len()) as u64;
        assert!(end <= self.prepared, "a frame past the prepared space");
        debug_assert_eq!(
            body.map(|b| b.clone().finalize()),
            body_crc(batch).map(|b| b.finalize())
        );
        let header = frame_header_with_body(self.seq, partition, self.synced, batch, body);
        self.pending.push(&header);
        self.pending.push(batch);
        self.len = end;
        debug_assert_eq!(self.pending.end(), self.len);
    }

    /// Drops the frames added after `len` (a failed request's; never handed to the file).
    pub fn rollback(&mut self, len: u64) {
        assert!(
            len >= self.flushed,
            "a rollback never cuts frames handed to the file"
        );
        self.pending.truncate(len);
        self.len = len;
    }

    /// The frames not yet handed to the file, as whole blocks from the one the last write
    /// ended in (a round's leader takes them under the journal's lock and writes them outside
    /// it, in the file's sync gate, taken before the journal's lock is let go: stages reach the
    /// file in the order they were taken, each writing again the block the one before it ended
    /// in). `None` when every frame was handed over.
    pub fn take_stage(&mut self) -> Option<Stage> {
        if self.flushed == self.len {
            return None;
        }
        let stage = self.pending.stage(self.flushed);
        assert!(
            stage.end() <= block_end(self.prepared),
            "a journal write stays in prepared space"
        );
        self.flushed = self.len;
        Some(stage)
    }

    /// Takes back the memory of a stage that was written, for the next one.
    pub fn reuse(&mut self, stage: Stage) {
        self.pending.reuse(stage);
    }

    /// Records that a sync made the file durable to `upto`.
    pub fn mark_synced(&mut self, upto: u64) {
        self.synced = self.synced.max(upto);
        self.pending.durable_to(self.synced);
    }

    /// Writes the frames not yet handed to the file and syncs it (through its gate).
    pub fn flush_and_sync(&mut self) -> StoreResult<()> {
        let gate = self.gate.clone();
        let mut turn = gate.lock();
        let stage = self.take_stage();
        let synced = write_and_sync(&mut turn, stage.as_ref(), &*self.file, &self.path);
        if let Some(stage) = stage {
            self.reuse(stage);
        }
        synced?;
        self.mark_synced(self.len);
        Ok(())
    }

    /// After a failed write or sync: writes every byte not known durable again (from memory,
    /// from the block holding the durable end) and syncs, clearing the gate's failure.
    pub fn resync(&mut self) -> StoreResult<()> {
        let gate = self.gate.clone();
        let mut turn = gate.lock();
        let stage = self.pending.stage(self.pending.start());
        let written = stage.write(&*self.file);
        self.reuse(stage);
        written
            .and_then(|()| self.file.sync_data())
            .at(&self.path)?;
        turn.clear();
        self.flushed = self.len;
        self.mark_synced(self.len);
        Ok(())
    }
}

/// Writes `stage` (if any) and fdatasyncs `file` (at `path`) in the gate's `turn`: refused
/// while an earlier failure is unhealed; a failure of either is recorded in the gate (the
/// next round heals first: [`Journal::heal`]).
pub(crate) fn write_and_sync(
    turn: &mut GateState,
    stage: Option<&Stage>,
    file: &dyn FileHandle,
    path: &Path,
) -> StoreResult<()> {
    turn.refuse_if_failed(path)?;
    if let Some(stage) = stage {
        stage
            .write(file)
            .at(path)
            .inspect_err(|e| turn.fail(e.to_string()))?;
    }
    file.sync_data()
        .at(path)
        .inspect_err(|e| turn.fail(e.to_string()))
}

/// What [`Journal::make_room`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// The frames fit.
    Ready,
    /// Another thread is preparing the space: wait for it, then ask again.
    Wait,
}

/// The journal of a log: the file being written, and older files that may go once a checkpoint
/// covers them.
#[derive(Debug)]
pub(crate) struct Journal {
    pub fs: Fs,
    pub dir: PathBuf,
    /// Bytes each journal file may hold.
    pub capacity: u64,
    pub current: JournalFile,
    /// Replaced files with the journal position their frames end at.
    pub retired: Vec<(u64, PathBuf)>,
    /// A file a checkpoint has covered, kept (under its old name) to become the next file
    /// instead of creating and zeroing one.
    pub spare: Option<PathBuf>,
    /// Why the last sync failed; writes are refused until a re-sync succeeds.
    pub poisoned: Option<String>,
    /// The sequence of the file a preparation is writing zeros into, outside the lock (while
    /// it runs, that file never becomes the spare: its late zeros would land in the file's
    /// next life).
    pub preparing: Option<u64>,
}

impl Journal {
    /// Makes room for `bytes` of frames: starts the next file when they do not fit the current
    /// one (which is synced first: a request never spans files), and prepares space in place
    /// unless another thread is preparing this file's space already (a preparation still
    /// finishing in a file switched away from holds nobody up).
    pub fn make_room(&mut self, bytes: u64) -> StoreResult<Room> {
        if bytes > self.current.remaining() {
            self.next_file(bytes)?;
        }
        if self.current.len + bytes <= self.current.prepared {
            return Ok(Room::Ready);
        }
        if self.preparing == Some(self.current.seq) {
            return Ok(Room::Wait);
        }
        if let Some(p) = self.current.next_preparation(bytes) {
            p.run()?;
            self.current.prepared = p.to;
        }
        Ok(Room::Ready)
    }

    /// True when `bytes` of frames fit prepared space of the current file and nothing needs a
    /// re-sync: [`Self::make_room`] and [`Self::heal`] would do no file work.
    pub fn has_room(&self, bytes: u64) -> bool {
        let healthy = self.poisoned.is_none() && !self.current.gate.has_failed();
        healthy
            && bytes <= self.current.remaining()
            && self.current.len + bytes <= self.current.prepared
    }

    fn next_file(&mut self, bytes: u64) -> StoreResult<()> {
        self.current.flush_and_sync()?;
        let capacity = self.capacity.max(bytes + JOURNAL_HEADER_LEN as u64);
        let (seq, lsn) = (self.current.seq + 1, self.current.lsn());
        let next = match self.spare.take() {
            Some(spare) => {
                JournalFile::recycle(&*self.fs, &self.dir, &spare, seq, (capacity, lsn))?
            }
            None => JournalFile::create(&*self.fs, &self.dir, seq, capacity, lsn)?,
        };
        let old = std::mem::replace(&mut self.current, next);
        self.retired.push((old.lsn(), old.path));
        Ok(())
    }

    /// True when less than a chunk is prepared ahead (the next chunk then has the time the
    /// writers take for a whole chunk: with half of one, a fresh store's writer caught up with
    /// the zeros and waited ~1 ms now and then), no preparation runs and the file has room
    /// left to prepare. A new file asks for its second chunk with its first frames.
    pub fn wants_preparation(&self) -> bool {
        let ahead = self.current.prepared - self.current.len;
        self.preparing.is_none()
            && ahead < prepare_chunk(self.current.capacity, self.current.lsn())
            && self.current.prepared < self.current.capacity
    }

    /// The next chunk to prepare ahead of the writer, when less than a chunk is prepared ahead
    /// and no preparation runs; marks one running ([`Self::end_piece`] ends it).
    pub fn begin_preparation(&mut self) -> Option<Preparation> {
        if !self.wants_preparation() {
            return None;
        }
        let p = self.current.next_preparation(0)?;
        self.preparing = Some(p.seq);
        Some(p)
    }

    /// Records a piece of a preparation: the space below `ran`'s end is prepared. Returns
    /// true when the preparation goes on; it ends with its last piece, a failure, or once its
    /// file is no longer the current one.
    pub fn end_piece(&mut self, p: &Preparation, ran: &StoreResult<u64>) -> bool {
        let more = match ran {
            Ok(end) if p.seq == self.current.seq => {
                self.current.prepared = self.current.prepared.max(*end);
                !p.covers(*end)
            }
            _ => false,
        };
        if !more {
            self.preparing = None;
        }
        more
    }

    /// Makes the journal writable again after a failed sync.
    pub fn heal(&mut self) -> StoreResult<()> {
        // The flag, not the lock: a round may be syncing.
        let failed = self
            .current
            .gate
            .has_failed()
            .then(|| "a sync failed".to_string());
        let Some(reason) = self.poisoned.clone().or(failed) else {
            return Ok(());
        };
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
        self.drop_retired(end)?;
        // A closed log leaves no journal file behind, a spare neither.
        if let Some(spare) = self.spare.take() {
            remove_if_present(&*self.fs, &spare)?;
            sync_dir(&*self.fs, &self.dir)?;
        }
        Ok(())
    }

    /// Deletes (durably) the retired files whose frames all lie before `lsn`, except the newest
    /// of them when no spare is kept: that one becomes the spare.
    pub fn drop_retired(&mut self, lsn: u64) -> StoreResult<()> {
        let (mut gone, kept): (Vec<_>, Vec<_>) =
            self.retired.drain(..).partition(|(end, _)| *end <= lsn);
        self.retired = kept;
        if self.spare.is_none() {
            // The newest covered file is kept to be recycled (no unlink, no zeros to write),
            // unless a preparation may still write into it: then it goes like the others.
            let busy = self
                .preparing
                .map(|seq| self.dir.join(journal_file_name(seq)));
            if let Some(i) = gone
                .iter()
                .rposition(|(_, path)| Some(path) != busy.as_ref())
            {
                self.spare = Some(gone.remove(i).1);
            }
        }
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
        for len in [8 * 1024 + 7, 8 * 1024 + 8, 8 * 1024 + 9, 70_000] {
            let batch: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            assert!(body_crc(&batch).is_some() == (len >= 8 * 1024 + 8), "{len}");
            let header = encode_frame_header(7, 3, 4096, &batch);
            let mut direct = crc32fast::Hasher::new();
            direct.update(&header[8..]);
            direct.update(&batch);
            let crc = u32::from_le_bytes(header[4..8].try_into().unwrap());
            assert_eq!(crc, direct.finalize(), "a combined CRC of {len} bytes");
        }
        assert_eq!(decode_journal_header(&encode_journal_header(9)), Ok(9));
    }

    /// A journal whose current file is `file`, nothing retired.
    fn journal_of(fs: Fs, dir: &Path, capacity: u64, file: JournalFile) -> Journal {
        Journal {
            fs,
            dir: dir.to_path_buf(),
            capacity,
            current: file,
            retired: Vec::new(),
            spare: None,
            poisoned: None,
            preparing: None,
        }
    }

    #[test]
    fn space_is_zeroed_ahead_directly_and_each_synced_piece_counts_at_once() {
        use std::{io, sync::Arc};
        let dir = tempfile::tempdir().unwrap();
        let fs: Fs = Arc::new(crate::fs::RealFs);
        let capacity = 8 << 20;
        // A log that has written a lot already: whole chunks, allocated far ahead.
        let lsn = 64 << 20;
        let file = JournalFile::create(&*fs, dir.path(), 1, capacity, lsn).unwrap();
        let chunk = prepare_chunk(capacity, lsn);
        assert_eq!(chunk, 1 << 20);
        assert_eq!(file.prepared, chunk);
        let bytes = std::fs::read(&file.path).unwrap();
        assert_eq!(
            bytes.len() as u64,
            capacity.min(chunk + ALLOCATE_AHEAD),
            "the header block and the first chunk, and the blocks allocated ahead of it"
        );
        assert_eq!(&bytes[..JOURNAL_HEADER_LEN], &encode_journal_header(1));
        assert!(bytes[JOURNAL_HEADER_LEN..].iter().all(|&b| b == 0));
        let mut journal = journal_of(fs, dir.path(), capacity, file);
        assert!(
            journal.wants_preparation(),
            "a new file asks for its second chunk at once"
        );
        // As if frames had filled all but a block of the first chunk.
        journal.current.len = chunk - BLOCK;
        let p = journal
            .begin_preparation()
            .expect("less than a chunk ahead");
        assert_eq!((p.from(), journal.preparing), (chunk, Some(1)));
        assert_eq!(journal.make_room(2 * BLOCK).unwrap(), Room::Wait);
        let mut at = p.from();
        loop {
            let ran = p.run_piece(at);
            let end = *ran.as_ref().unwrap();
            assert_eq!(end, (at + PREPARE_SYNC_PIECE).min(2 * chunk));
            let more = journal.end_piece(&p, &ran);
            assert_eq!(
                journal.current.prepared, end,
                "each piece counts once synced"
            );
            assert_eq!(journal.make_room(2 * BLOCK).unwrap(), Room::Ready);
            assert_eq!(
                (more, journal.preparing.is_some()),
                (!p.covers(end), !p.covers(end))
            );
            if !more {
                break;
            }
            at = end;
        }
        let bytes = std::fs::read(&journal.current.path).unwrap();
        assert_eq!(bytes.len() as u64, capacity, "allocated ahead once");
        assert!(bytes[JOURNAL_HEADER_LEN..].iter().all(|&b| b == 0));
        assert!(
            journal.begin_preparation().is_none(),
            "a chunk is ahead again"
        );
        journal.current.len = 2 * chunk - BLOCK;
        let p = journal.begin_preparation().unwrap();
        let lost: StoreResult<u64> = Err(StoreError::io(&journal.dir, io::Error::other("eio")));
        assert!(!journal.end_piece(&p, &lost), "a failure ends it");
        assert_eq!(
            (journal.current.prepared, journal.preparing),
            (2 * chunk, None)
        );
    }

    #[test]
    fn a_new_log_zeroes_and_allocates_ahead_as_much_as_it_has_written() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Fs = std::sync::Arc::new(crate::fs::RealFs);
        let capacity = 64 << 20;
        let file = JournalFile::create(&*fs, dir.path(), 1, capacity, 0).unwrap();
        assert_eq!(file.prepared, 16 << 10, "the smallest chunk");
        assert_eq!(
            std::fs::metadata(&file.path).unwrap().len(),
            16 << 10,
            "nothing allocated past it"
        );
        let mut journal = journal_of(fs, dir.path(), capacity, file);
        journal.current.len = 12 << 10;
        let p = journal.begin_preparation().expect("a chunk");
        p.run().unwrap();
        assert_eq!(p.to, 32 << 10);
        assert_eq!(
            std::fs::metadata(&journal.current.path).unwrap().len(),
            (32 + 12) << 10,
            "allocated as far ahead as the log has written"
        );
        for (lsn, chunk) in [(0, 16 << 10), (100 << 10, 100 << 10), (3 << 20, 1 << 20)] {
            assert_eq!(prepare_chunk(capacity, lsn), chunk, "after {lsn} bytes");
        }
        assert_eq!(
            prepare_chunk(64 << 10, 3 << 20),
            16 << 10,
            "a quarter of a small file"
        );
    }
}

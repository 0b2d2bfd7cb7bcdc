//! Appending batches to a segment file: the active segment of a partition, or a segment that
//! compaction writes under a temporary name.
//!
//! The writer knows how much of its file the last completed sync made durable and stamps that
//! length into every batch it writes (format/SEGMENT.md, `synced_len`), which is how recovery
//! tells a torn tail from damage to acknowledged bytes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::codec::{seal_batch, BatchHeader};
use super::header::{encode_segment_header, SEGMENT_HEADER_LEN};
use super::index::SegmentIndex;
use super::reader::ActiveSegment;
use super::scan::note_batch;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{remove_if_present, FileRef, FileSystem, OpenMode};

/// File name of the segment whose base offset is `base`.
pub fn segment_file_name(base: i64) -> String {
    format!("{base:020}.seg")
}

/// The base offset named by a file name of the form `<base:020><suffix>` (`.seg`, `.idx`).
pub fn parse_file_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    let base = stem.parse::<i64>().ok()?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) && base >= 0).then_some(base)
}

/// File name of the index of the segment whose base offset is `base`.
pub fn index_file_name(base: i64) -> String {
    format!("{base:020}.idx")
}

/// Where a writer stood before an append, to cut it back there if the append must be undone.
#[derive(Debug, Clone)]
pub struct WriterMark {
    len: u64,
    index: SegmentIndex,
}

/// An open segment file that accepts batches at its end.
#[derive(Debug)]
pub struct SegmentWriter {
    path: PathBuf,
    file: FileRef,
    index_interval: u64,
    shared: Arc<ActiveSegment>,
    len: u64,
    /// Length the last completed sync made durable.
    synced: u64,
}

impl SegmentWriter {
    /// Creates a new, empty segment file at `path` with base offset `base` and makes its bytes
    /// durable (the caller syncs the directory). A file left at `path` by an earlier attempt
    /// that failed (a full disk) is replaced; on failure nothing is left behind.
    pub fn create(
        fs: &dyn FileSystem,
        path: &Path,
        base: i64,
        index_interval: u64,
    ) -> StoreResult<Self> {
        remove_if_present(fs, path)?;
        let file = fs.open(path, OpenMode::CreateNew).at(path)?;
        let written = file
            .write_at(&encode_segment_header(base), 0)
            .and_then(|()| file.sync_data())
            .at(path);
        if let Err(e) = written {
            // Best effort: a leftover is also replaced by the next attempt.
            let _ = fs.remove_file(path);
            return Err(e);
        }
        let mut writer = Self::resume(path, file, SegmentIndex::empty(base), index_interval);
        writer.synced = SEGMENT_HEADER_LEN as u64;
        Ok(writer)
    }

    /// Continues appending to an existing segment whose valid (and durable) content `index`
    /// describes.
    pub fn resume(path: &Path, file: FileRef, index: SegmentIndex, index_interval: u64) -> Self {
        let len = index.segment_len;
        Self {
            path: path.to_path_buf(),
            shared: Arc::new(ActiveSegment::new(path.to_path_buf(), file.clone(), index)),
            file,
            index_interval: index_interval.max(1),
            len,
            synced: len,
        }
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Current length of the file in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Length made durable by the last completed sync.
    pub fn synced_len(&self) -> u64 {
        self.synced
    }

    /// True when the segment holds no batch.
    pub fn is_empty(&self) -> bool {
        self.len <= SEGMENT_HEADER_LEN as u64
    }

    /// Base offset of the segment.
    pub fn base_offset(&self) -> i64 {
        self.shared.base_offset()
    }

    /// The read side shared with readers.
    pub fn shared(&self) -> &Arc<ActiveSegment> {
        &self.shared
    }

    /// The open file.
    pub fn file(&self) -> &FileRef {
        &self.file
    }

    /// Seals the unsealed batch `batch` (its base offset as encoded, this file's synced length)
    /// and appends it. On failure the file is cut back to its previous length, so a partial
    /// write never stays behind a later batch.
    pub fn append(&mut self, batch: &mut [u8], header: &mut BatchHeader) -> StoreResult<()> {
        let base = header.base_offset;
        seal_batch(batch, header, base, self.synced);
        if let Err(e) = self.file.write_at(batch, self.len) {
            // The active file is never mapped, so cutting it is safe.
            self.file.set_len(self.len).at(&self.path)?;
            return Err(StoreError::io(&self.path, e));
        }
        let position = self.len;
        let interval = self.index_interval;
        self.shared
            .update_index(|index| note_batch(index, position, header, interval));
        self.len += batch.len() as u64;
        Ok(())
    }

    /// Where the writer stands now.
    pub fn mark(&self) -> WriterMark {
        WriterMark {
            len: self.len,
            index: self.shared.index(),
        }
    }

    /// Undoes every append since `mark` (their bytes were never published or synced).
    pub fn rollback(&mut self, mark: WriterMark) -> StoreResult<()> {
        assert!(
            mark.len >= self.synced,
            "a rollback never cuts synced bytes"
        );
        if mark.len == self.len {
            return Ok(());
        }
        self.file.set_len(mark.len).at(&self.path)?;
        self.len = mark.len;
        self.shared.update_index(|index| *index = mark.index);
        Ok(())
    }

    /// Makes every appended byte durable (fdatasync).
    pub fn sync(&mut self) -> StoreResult<()> {
        let len = self.len;
        self.file.sync_data().at(&self.path)?;
        self.synced = len;
        Ok(())
    }

    /// Records that a sync of [`Self::file`] begun at length `len` completed.
    pub fn mark_synced(&mut self, len: u64) {
        self.synced = self.synced.max(len);
    }

    /// After a failed sync: writes the unsynced bytes again from the file's current contents
    /// and syncs, so that what was written (and may have been read) becomes durable as it is.
    pub fn resync(&mut self) -> StoreResult<()> {
        let mut buffer = vec![0u8; 1 << 20];
        let mut pos = self.synced;
        while pos < self.len {
            let n = ((self.len - pos) as usize).min(buffer.len());
            self.file
                .read_exact_at(&mut buffer[..n], pos)
                .and_then(|()| self.file.write_at(&buffer[..n], pos))
                .at(&self.path)?;
            pos += n as u64;
        }
        self.sync()
    }
}

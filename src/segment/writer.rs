//! Appending batches to a segment file: the active segment of a partition, or a segment that
//! compaction writes under a temporary name.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::codec::BatchHeader;
use super::header::encode_segment_header;
use super::index::SegmentIndex;
use super::reader::ActiveSegment;
use super::scan::note_batch;
use crate::error::{IoContext, StoreResult};

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

/// An open segment file that accepts batches at its end.
#[derive(Debug)]
pub struct SegmentWriter {
    path: PathBuf,
    file: File,
    index_interval: u64,
    shared: Arc<ActiveSegment>,
    len: u64,
}

impl SegmentWriter {
    /// Creates a new, empty segment file at `path` with base offset `base` and makes it durable.
    pub fn create(path: &Path, base: i64, index_interval: u64) -> StoreResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .at(path)?;
        file.write_all_at(&encode_segment_header(base), 0)
            .at(path)?;
        file.sync_all().at(path)?;
        Self::resume(path, file, SegmentIndex::empty(base), index_interval)
    }

    /// Continues appending to an existing segment whose valid content `index` describes.
    pub fn resume(
        path: &Path,
        file: File,
        index: SegmentIndex,
        index_interval: u64,
    ) -> StoreResult<Self> {
        let reader = file.try_clone().at(path)?;
        let len = index.segment_len;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            index_interval: index_interval.max(1),
            shared: Arc::new(ActiveSegment::new(path.to_path_buf(), reader, index)),
            len,
        })
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Current length of the file in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the segment holds no batch.
    pub fn is_empty(&self) -> bool {
        self.len <= super::header::SEGMENT_HEADER_LEN as u64
    }

    /// Base offset of the segment.
    pub fn base_offset(&self) -> i64 {
        self.shared.base_offset()
    }

    /// The read side shared with readers.
    pub fn shared(&self) -> &Arc<ActiveSegment> {
        &self.shared
    }

    /// Appends one encoded batch. On failure the file is cut back to its previous length, so a
    /// partial write never stays behind a later batch.
    pub fn append(&mut self, batch: &[u8], header: &BatchHeader) -> StoreResult<()> {
        if let Err(e) = self.file.write_all_at(batch, self.len) {
            // The file is not mapped (only sealed segments are), so truncation is safe.
            self.file.set_len(self.len).at(&self.path)?;
            return Err(crate::error::StoreError::io(&self.path, e));
        }
        let position = self.len;
        let interval = self.index_interval;
        self.shared
            .update_index(|index| note_batch(index, position, header, interval));
        self.len += batch.len() as u64;
        Ok(())
    }

    /// Makes every appended byte durable (fdatasync).
    pub fn sync(&self) -> StoreResult<()> {
        self.file.sync_data().at(&self.path)
    }

    /// A handle on the file for syncing from another thread.
    pub fn file(&self) -> &File {
        &self.file
    }
}

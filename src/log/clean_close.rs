//! The `CLEAN` marker of a log (format/MANIFEST.md, "Store layout"): written after a clean
//! close's checkpoint, removed (durably) at open before anything is written. Found at open, it
//! says nothing was written after the active segments' indexes, so recovery takes those indexes
//! as they are instead of scanning each active segment's preallocated tail for stray bytes
//! (only a power cut can leave any).

use std::path::{Path, PathBuf};

use crate::error::{IoContext, StoreResult};
use crate::fs::{remove_if_present, sync_dir, write_file_atomic, EntryKind, FileSystem};

/// File name of the marker.
pub const CLEAN_MARKER: &str = "CLEAN";

/// What open found.
pub(crate) struct CleanMarker<'a> {
    fs: &'a dyn FileSystem,
    path: PathBuf,
    dir: PathBuf,
    /// The log was closed cleanly.
    pub found: bool,
}

/// Looks for the marker of the log in `dir`.
pub(crate) fn take<'a>(fs: &'a dyn FileSystem, dir: &Path) -> StoreResult<CleanMarker<'a>> {
    let path = dir.join(CLEAN_MARKER);
    let found = fs.kind(&path).at(&path)? == Some(EntryKind::File);
    Ok(CleanMarker {
        fs,
        path,
        dir: dir.to_path_buf(),
        found,
    })
}

impl CleanMarker<'_> {
    /// Removes the marker durably (before the log takes any write).
    pub fn clear(self) -> StoreResult<()> {
        if self.found {
            remove_if_present(self.fs, &self.path)?;
            sync_dir(self.fs, &self.dir)?;
        }
        Ok(())
    }
}

/// Writes the marker of the log in `dir` (after its checkpoint).
pub(crate) fn mark(fs: &dyn FileSystem, dir: &Path) -> StoreResult<()> {
    write_file_atomic(fs, &dir.join(CLEAN_MARKER), b"closed cleanly\n")
}

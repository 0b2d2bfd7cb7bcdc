//! Durable file-system helpers: whole-file writes, directory syncs, and directory creation whose
//! entries survive a power cut.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{IoContext, StoreResult};

/// Writes `bytes` to `path` (replacing it) and, when `sync` is set, makes them durable.
pub fn write_file(path: &Path, bytes: &[u8], sync: bool) -> StoreResult<()> {
    let file = File::create(path).at(path)?;
    file.write_all_at(bytes, 0).at(path)?;
    if sync {
        file.sync_all().at(path)?;
    }
    Ok(())
}

/// Makes the entries of directory `dir` (creations, renames, unlinks) durable.
pub fn sync_dir(dir: &Path) -> StoreResult<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// Creates `dir` and any missing parents, syncing each parent that gained an entry.
pub fn create_dir_durable(dir: &Path) -> StoreResult<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e).at(dir),
        _ => {}
    }
    match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

//! Durable copies of files and directory trees through the file layer (backup and restore).

use std::path::Path;

use super::{create_dir_durable, sync_dir, EntryKind, FileSystem, OpenMode};
use crate::error::{IoContext, StoreResult};

/// Bytes copied per read; a chunk of zeros is skipped, so preallocated tails stay sparse.
const CHUNK: usize = 1 << 20;

/// What a copy wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Files written.
    pub files: u64,
    /// Bytes written (runs of zeros in sparse files not counted).
    pub bytes: u64,
}

impl CopyReport {
    /// Adds another report's counts to this one.
    pub fn add(&mut self, other: CopyReport) {
        self.files += other.files;
        self.bytes += other.bytes;
    }
}

/// Copies file `from` to the new file `to` (same length, same bytes; chunks of zeros left as
/// holes) and syncs it. The caller syncs `to`'s directory.
pub fn copy_file(fs: &dyn FileSystem, from: &Path, to: &Path) -> StoreResult<CopyReport> {
    let source = fs.open(from, OpenMode::Read).at(from)?;
    copy_open_file(fs, &*source, from, to)
}

fn copy_open_file(
    fs: &dyn FileSystem,
    source: &dyn super::FileHandle,
    from: &Path,
    to: &Path,
) -> StoreResult<CopyReport> {
    let len = source.len().at(from)?;
    let target = fs.open(to, OpenMode::CreateNew).at(to)?;
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    let mut written = 0u64;
    while offset < len {
        let n = usize::try_from(len - offset).map_or(CHUNK, |left| left.min(CHUNK));
        source.read_exact_at(&mut buf[..n], offset).at(from)?;
        if buf[..n].iter().any(|b| *b != 0) {
            target.write_at(&buf[..n], offset).at(to)?;
            written += n as u64;
        }
        offset += n as u64;
    }
    target.set_len(len).at(to)?;
    target.sync_all().at(to)?;
    Ok(CopyReport {
        files: 1,
        bytes: written,
    })
}

/// Copies directory `from` into the new directory `to`, file by file, leaving out the entries
/// of `from` itself that `skip` names; every file is synced, and every directory after its
/// entries. A file that vanishes between the listing and its copy (a temporary file renamed
/// by a writer still at work) is left out.
pub fn copy_tree(
    fs: &dyn FileSystem,
    from: &Path,
    to: &Path,
    skip: &dyn Fn(&str) -> bool,
) -> StoreResult<CopyReport> {
    create_dir_durable(fs, to)?;
    let mut report = CopyReport::default();
    let mut entries = fs.read_dir(from).at(from)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries.iter().filter(|e| !skip(&e.name)) {
        let (source, target) = (from.join(&entry.name), to.join(&entry.name));
        match entry.kind {
            EntryKind::File => match fs.open(&source, OpenMode::Read) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                opened => {
                    let file = opened.at(&source)?;
                    report.add(copy_open_file(fs, &*file, &source, &target)?);
                }
            },
            EntryKind::Dir => report.add(copy_tree(fs, &source, &target, &|_| false)?),
        }
    }
    sync_dir(fs, to)?;
    Ok(report)
}

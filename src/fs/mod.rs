//! The file layer: every file operation Strata performs goes through a [`FileSystem`].
//!
//! Creating, writing, resizing, preallocating, syncing, renaming and unlinking files, creating,
//! listing and syncing directories, locking the store and mapping sealed segments are all calls
//! on this trait (after raft-engine's `env::FileSystem` and RocksDB's `FileSystem`), so a test can
//! put another file system under the whole store:
//!
//! - [`RealFs`], the default: the operating system's calls, one virtual call each, no tracking.
//! - [`FaultFs`]: real files in a directory, plus a record of what a power cut would keep (only
//!   bytes made durable by a sync of their file and directory entries made durable by a sync of
//!   their directory). It can cut the power at the Nth operation and write the crash image
//!   (unsynced pages kept, dropped, zeroed or torn), fail the Nth operation with an I/O error,
//!   or run out of space after N bytes (on a file system that can reserve blocks or one that
//!   cannot, where a mapped write into a hole on a full disk is recorded as the SIGBUS it is), and hold one thread before its Nth operation while the
//!   others go on (the interleavings of background threads with their foreground).
//!
//! Engines that do their own I/O (RocksDB) get a directory through [`FileSystem::native_dir`]
//! and announce each of their durability points with [`FileSystem::external_sync`], so the
//! fault layer can cut the power there too and keep what such an engine promises.

mod copy;
mod fault;
mod image;
mod interleave;
mod no_sync;
mod open_files;
mod prefault;
mod real;
mod sync_gate;
mod tree;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{IoContext, StoreResult};

pub use copy::{copy_file, copy_tree, CopyReport};
pub use fault::{FaultFs, FaultPlan, OpKind, OpKinds};
pub use image::{CrashMode, ImageReport};
pub use interleave::{HoldReport, ThreadHold, QUIET};
pub use no_sync::NoSyncFs;
pub use open_files::{BoundedFs, DEFAULT_MAX_OPEN_FILES, MAX_MAX_OPEN_FILES, MIN_MAX_OPEN_FILES};
pub use prefault::{prefault_later, read_ahead_later};
pub use real::{prefetch, prefetch_at, RealFs, RealMap, RANDOM_HEAD};
pub use sync_gate::{GateState, SyncGate};

/// A shared file system handle.
pub type Fs = Arc<dyn FileSystem>;

/// A shared open file.
pub type FileRef = Arc<dyn FileHandle>;

/// A shared writable mapping.
pub type MapRef = Arc<dyn WritableMap>;

/// A writable shared mapping of a file's `[0, len)`: the way Strata appends without a system
/// call per append. Every change goes through [`WritableMap::write`] (so the fault layer sees
/// it), and becomes durable with the file's `sync_data` like any written byte.
pub trait WritableMap: Send + Sync + std::fmt::Debug {
    /// Length of the mapping.
    fn len(&self) -> usize;
    /// Copies `bytes` into the mapping at `offset` (`offset + bytes.len() <= len()`).
    fn write(&self, offset: usize, bytes: &[u8]) -> io::Result<()>;
    /// The mapping's `[0, len)` as read-only bytes. The caller guarantees that nothing in that
    /// range is written while the returned bytes (or any slice of them) live.
    fn view(&self, len: usize) -> Bytes;
    /// Maps `[start, end)` writable ahead of the writes that will land there (page tables and
    /// page-cache pages; the bytes do not change, so nothing about durability does). A hint: the
    /// file must already cover the range; the default does nothing.
    fn prefault(&self, start: usize, end: usize) -> io::Result<()> {
        let _ = (start, end);
        Ok(())
    }

    /// Puts `[start, end)` of the file in the page cache now, in the calling thread (a read,
    /// so zeros where nothing was written; no byte changes), so that the writer's faults there
    /// later find the pages instead of each reading around them. A hint; the default does
    /// nothing.
    fn read_ahead(&self, start: usize, end: usize) -> io::Result<()> {
        let _ = (start, end);
        Ok(())
    }

    /// Drops this process's page-table entries for the pages from the one holding `from` to the
    /// end of the mapping (the bytes do not change, dirty or not; a later access faults a page
    /// back in), so that a sync that follows finds no writable entry to write-protect page by
    /// page (each a cross-CPU TLB shootdown). A hint: nothing about durability changes; the
    /// default does nothing.
    fn unmap_from(&self, from: usize) -> io::Result<()> {
        let _ = from;
        Ok(())
    }

    /// True when the mapping is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How [`FileSystem::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// An existing file, read-only.
    Read,
    /// An existing file, for reading and writing.
    ReadWrite,
    /// A new file for reading and writing; fails if the name exists.
    CreateNew,
    /// A file for reading and writing, created if absent and cut to length 0 if present.
    Truncate,
    /// An existing file for writes that bypass the page cache where the file system allows it
    /// (`O_DIRECT` on Linux; an ordinary handle elsewhere, e.g. on tmpfs). Every write must be
    /// whole [`DIRECT_ALIGN`] blocks, at an aligned offset, from aligned memory.
    WriteDirect,
}

/// Alignment of offset, length and memory of a write through [`OpenMode::WriteDirect`].
pub const DIRECT_ALIGN: usize = 4096;

/// What [`FileHandle::reserve`] could do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The blocks are reserved: writes inside the range cannot fail for lack of space.
    Reserved,
    /// The file system cannot reserve blocks that later writes are sure to get (no fallocate,
    /// or copy-on-write): write with system calls, which can answer `ENOSPC`.
    Unsupported,
}

/// What a directory entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// File name within the directory.
    pub name: String,
    /// What it names.
    pub kind: EntryKind,
}

/// The file operations Strata performs.
pub trait FileSystem: Send + Sync + std::fmt::Debug {
    /// Opens `path` as `mode` says.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef>;
    /// Renames `from` to `to`, replacing `to` if it exists (atomic; durable once the
    /// directories are synced).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Unlinks a file (durable once its directory is synced).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates one directory (its parent must exist; durable once the parent is synced).
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of directory `path` (creations, renames, unlinks) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// The entries of directory `path`, in no particular order.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    /// What `path` names, or `None` when it does not exist.
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>>;
    /// Hands the existing directory `path` to an engine that does its own I/O (RocksDB); the
    /// layer no longer tracks what is inside it. A directory the engine created itself (a
    /// checkpoint) is adopted: its entry in the parent is durable once the parent is synced.
    fn native_dir(&self, path: &Path) -> io::Result<()>;
    /// Removes an engine's directory `path` (handed over by [`Self::native_dir`]) and
    /// everything in it (durable once its parent is synced).
    fn remove_native_dir(&self, path: &Path) -> io::Result<()>;
    /// Announces a durability point of the engine owning native directory `path`, just before
    /// the engine makes a write durable (a synced RocksDB write). An error means the write
    /// must not be made.
    fn external_sync(&self, path: &Path) -> io::Result<()>;

    /// Reads a whole file.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.open(path, OpenMode::Read)?;
        let len = usize::try_from(file.len()?).map_err(io::Error::other)?;
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }
}

/// An open file.
pub trait FileHandle: Send + Sync + std::fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Current length of the file.
    fn len(&self) -> io::Result<u64>;
    /// Cuts or extends (with zeros, sparse: no disk block is taken) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves disk blocks for `[0, len)` without changing the file's length (fallocate with
    /// `FALLOC_FL_KEEP_SIZE`), so later writes inside the file there, through a mapping too,
    /// cannot fail for lack of space; a full disk fails this call instead. Where the file system
    /// cannot promise that (no fallocate, or copy-on-write, where an overwrite takes new
    /// blocks), nothing is reserved and the answer says so: such a file must not be written
    /// through a mapping, where a full disk is a SIGBUS instead of an error.
    fn reserve(&self, len: u64) -> io::Result<Reservation>;
    /// One past the last byte that may read as non-zero: the end of the file's last data region
    /// (`SEEK_DATA` / `SEEK_HOLE`; a hole, like the unwritten end of a sparse segment, reads as
    /// zeros). The file's length where the file system cannot tell.
    fn data_end(&self) -> io::Result<u64> {
        self.len()
    }
    /// Makes the file's bytes and length durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's bytes and all its metadata durable (fsync).
    fn sync_all(&self) -> io::Result<()>;
    /// A read-only shared mapping of the file's current `[0, len)`. The caller must never cut
    /// the file while the mapping (or any slice of it) is alive.
    fn map(&self) -> io::Result<Bytes>;
    /// Takes an exclusive advisory lock on the file without waiting; false when another open
    /// file description holds it.
    fn try_lock(&self) -> io::Result<bool>;
    /// A writable shared mapping of `[0, len)` of the file (`len` may exceed the file's current
    /// length: the file grows into it). Only bytes inside the file may be touched through it
    /// (past the end a page access faults), so callers size the file ([`FileHandle::set_len`])
    /// and reserve its blocks ([`FileHandle::reserve`]) before they write: a full disk then fails
    /// the reservation, never a page fault. The file must never
    /// be cut while the mapping lives.
    fn map_writable(&self, len: u64) -> io::Result<MapRef>;

    /// True when the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// Writes `bytes` to `path` (replacing it) and, when `sync` is set, makes them durable.
pub fn write_file(fs: &dyn FileSystem, path: &Path, bytes: &[u8], sync: bool) -> StoreResult<()> {
    let file = fs.open(path, OpenMode::Truncate).at(path)?;
    file.write_at(bytes, 0).at(path)?;
    if sync {
        file.sync_all().at(path)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` atomically and durably: a synced temporary file renamed over it,
/// then its directory synced. After a crash `path` holds either the old or the new bytes.
pub fn write_file_atomic(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) -> StoreResult<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    write_file(fs, &tmp, bytes, true)?;
    fs.rename(&tmp, path).at(path)?;
    sync_parent(fs, path)
}

/// Makes the entries of directory `dir` (creations, renames, unlinks) durable.
pub fn sync_dir(fs: &dyn FileSystem, dir: &Path) -> StoreResult<()> {
    fs.sync_dir(dir).at(dir)
}

/// Syncs the directory holding `path`.
pub fn sync_parent(fs: &dyn FileSystem, path: &Path) -> StoreResult<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(fs, parent),
        None => sync_dir(fs, Path::new(".")),
    }
}

/// Unlinks `path` if it exists (its directory still has to be synced).
pub fn remove_if_present(fs: &dyn FileSystem, path: &Path) -> StoreResult<()> {
    match fs.remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e).at(path),
        _ => Ok(()),
    }
}

/// Creates `dir` and any missing parents, syncing each parent that gained an entry. An existing
/// but empty `dir` has its parent synced again: its creation's sync may have failed, or the
/// process stopped before it, and a retry must not take the entry for durable. (A directory
/// with entries was only filled after its creation returned, so its entry is durable.)
pub fn create_dir_durable(fs: &dyn FileSystem, dir: &Path) -> StoreResult<()> {
    let exists = is_dir(fs, dir)?;
    if !exists {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_dir_durable(fs, parent)?;
        }
    }
    if make_dir(fs, dir, exists)? {
        sync_parent(fs, dir)?;
    }
    Ok(())
}

/// True when `dir` names a directory.
fn is_dir(fs: &dyn FileSystem, dir: &Path) -> StoreResult<bool> {
    Ok(fs.kind(dir).at(dir)? == Some(EntryKind::Dir))
}

/// Creates `dir` (whose parent exists) unless it `exists`; true when its entry in the parent
/// may not be durable yet: created now, or found empty (its creation's sync may have failed).
fn make_dir(fs: &dyn FileSystem, dir: &Path, exists: bool) -> StoreResult<bool> {
    if exists {
        return Ok(fs.read_dir(dir).at(dir)?.is_empty());
    }
    match fs.create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e).at(dir),
        _ => Ok(true),
    }
}

/// Creates the missing directories of `dirs`, all children of the existing, durable directory
/// `parent`, with one sync of `parent` for all of them (also when one already exists but is
/// empty, as [`create_dir_durable`] does for one).
pub fn create_dirs_durable(
    fs: &dyn FileSystem,
    parent: &Path,
    dirs: &[PathBuf],
) -> StoreResult<()> {
    let mut sync = false;
    for dir in dirs {
        debug_assert_eq!(
            dir.parent(),
            Some(parent),
            "{} is not a child",
            dir.display()
        );
        sync |= make_dir(fs, dir, is_dir(fs, dir)?)?;
    }
    if sync {
        sync_dir(fs, parent)?;
    }
    Ok(())
}
